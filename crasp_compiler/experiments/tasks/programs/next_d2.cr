// Next symbols of D_2 = (a D_1 b)* over {a, b} (D_0 = ε; balanced, nesting depth ≤ 2) after a valid prefix, with d = #a - #b: a iff d < 2, b iff d > 0, EOS iff d = 0. C-RASP[∅].
alphabet "a", "b"
Depth = # "a" - # "b"
NEXT_a = Depth < 2
NEXT_b = Depth > 0
NEXT_EOS = Depth == 0
output NEXT_a, NEXT_b, NEXT_EOS
