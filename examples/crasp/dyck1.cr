// Dyck-1 over {(, )}: balanced parenthesis strings (ε included). C-RASP[∅] (paper C.1.2).
C_open = # "("
C_close = # ")"
V = C_open < C_close
CV = # V
M = (CV == 0)
B = (C_open == C_close)
D = M && B
