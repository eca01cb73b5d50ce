// Strings over {a, b, c} with no two adjacent equal symbols (no aa, bb or cc substring; ε included). C-RASP[local].
#import pred
Repeat_a = "a" && #[pred] "a" >= 1
Repeat_b = "b" && #[pred] "b" >= 1
Repeat_c = "c" && #[pred] "c" >= 1
Repeats = # (Repeat_a || Repeat_b || Repeat_c)
L = Repeats == 0
