// Next symbols of D_3 = (a D_2 b)* over {a, b} (D_0 = ε; balanced, nesting depth ≤ 3) after a valid prefix, with d = #a - #b: a iff d < 3, b iff d > 0, EOS iff d = 0. C-RASP[∅].
alphabet "a", "b"
Depth = # "a" - # "b"
NEXT_a = Depth < 3
NEXT_b = Depth > 0
NEXT_EOS = Depth == 0
output NEXT_a, NEXT_b, NEXT_EOS
