// Next symbols of {a,b}*d{b,c}* over {a, b, c, d} after a valid prefix: {a, b, d} before the d, {b, c, EOS} after it. C-RASP[∅].
alphabet "a", "b", "c", "d"
SeenD = # "d" >= 1
NEXT_a = !SeenD
NEXT_b = true
NEXT_c = SeenD
NEXT_d = !SeenD
NEXT_EOS = SeenD
output NEXT_a, NEXT_b, NEXT_c, NEXT_d, NEXT_EOS
