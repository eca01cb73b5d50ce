// D_12 = (a D_11 b)* over {a, b} (D_0 = ε): balanced strings of nesting depth at most 12. C-RASP[∅] (paper E.1.2, R5 with n = 12).
Depth = # "a" - # "b"
TooDeep = Depth > 12
Unmatched = Depth < 0
L = # (TooDeep || Unmatched) == 0 && Depth == 0
