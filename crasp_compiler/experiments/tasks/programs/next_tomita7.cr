// Next symbols of Tomita 7 = 0*1*0*1* over {0, 1} after a valid prefix: {1, EOS}, plus 0 unless the prefix has 101 as a subsequence. C-RASP[∅].
alphabet "0", "1"
// at a 0 (resp. 1) the count up to i equals the count strictly before i, so no strict counts are needed
Seen1 = # "1" >= 1
Seen10 = # ("0" && Seen1) >= 1
Seen101 = # ("1" && Seen10) >= 1
NEXT_0 = !Seen101
NEXT_1 = true
NEXT_EOS = true
output NEXT_0, NEXT_1, NEXT_EOS
