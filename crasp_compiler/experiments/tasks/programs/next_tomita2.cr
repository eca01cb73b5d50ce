// Next symbols of Tomita 2 = (10)* over {0, 1} after a valid prefix: {1, EOS} when #1 = #0, else {0}. C-RASP[∅].
alphabet "0", "1"
Balanced = # "1" == # "0"
NEXT_0 = !Balanced
NEXT_1 = Balanced
NEXT_EOS = Balanced
output NEXT_0, NEXT_1, NEXT_EOS
