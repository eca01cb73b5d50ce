// Next symbols of Tomita 1 = 1* over {0, 1} after a valid prefix: always {1, EOS}. C-RASP[∅].
alphabet "0", "1"
NEXT_0 = false
NEXT_1 = true
NEXT_EOS = true
output NEXT_0, NEXT_1, NEXT_EOS
