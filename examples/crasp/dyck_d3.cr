// D_3 = (a D_2 b)* over {a, b} (D_0 = ε): balanced strings of nesting depth at most 3. C-RASP[∅] (paper E.1.2, R5 with n = 3).
Ca = # "a"
Cb = # "b"
V = Ca < Cb || Ca > Cb + 3
NoViolation = # V == 0
Balanced = Ca == Cb
L = NoViolation && Balanced
