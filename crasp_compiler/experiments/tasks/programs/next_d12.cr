// Next symbols of D_12 = (a D_11 b)* over {a, b} (D_0 = ε; balanced, nesting depth ≤ 12) after a valid prefix, with d = #a - #b: a iff d < 12, b iff d > 0, EOS iff d = 0. C-RASP[∅].
alphabet "a", "b"
Depth = # "a" - # "b"
NEXT_a = Depth < 12
NEXT_b = Depth > 0
NEXT_EOS = Depth == 0
output NEXT_a, NEXT_b, NEXT_EOS
