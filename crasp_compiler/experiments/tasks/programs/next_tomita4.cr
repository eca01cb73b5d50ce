// Next symbols of Tomita 4 (no 000) over {0, 1} after a valid prefix: {1, EOS}, plus 0 unless the prefix ends in 00. C-RASP[local].
#import pred
alphabet "0", "1"
Ends00 = "0" && #[pred] "0" >= 1
NEXT_0 = !Ends00
NEXT_1 = true
NEXT_EOS = true
output NEXT_0, NEXT_1, NEXT_EOS
