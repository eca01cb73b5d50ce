// {a,b}*d{b,c}* over {a, b, c, d}: exactly one d, a only before it, c only after it. C-RASP[∅] (paper E.1.2, R9).
alphabet "a", "b", "c", "d"
Cd = # "d"
BadA = "a" && Cd >= 1
BadC = "c" && Cd == 0
L = Cd == 1 && # (BadA || BadC) == 0
