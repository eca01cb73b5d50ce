// Tomita 7 = 0*1*0*1* over {0, 1}, as "at most one 10 bigram". Program C-RASP[local] (paper E.1.2, R4b); the language is also in C-RASP[∅] (see tomita7.crasp).
#import pred
After1 = #[pred] "1" >= 1
C10 = # ("0" && After1)
L = C10 <= 1
