// Next symbols of aa*bb*cc*dd*ee* over {a, b, c, d, e} after a valid prefix: {a} after the empty prefix, {x, succ(x)} after a last symbol x < e, {e, EOS} after e. C-RASP[∅].
alphabet "a", "b", "c", "d", "e"
// every token test is false at the empty prefix, so NEXT_a holds there
NEXT_a = !("b" || "c" || "d" || "e")
NEXT_b = "a" || "b"
NEXT_c = "b" || "c"
NEXT_d = "c" || "d"
NEXT_e = "d" || "e"
NEXT_EOS = "e"
output NEXT_a, NEXT_b, NEXT_c, NEXT_d, NEXT_e, NEXT_EOS
