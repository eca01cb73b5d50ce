// (abab)* over {a, b}: a b a b ... repeated a whole number of times (ε included). C-RASP[periodic] (paper E.1.2, R7).
#import pos_even
// a belongs at even (0-indexed) positions, b at odd ones
V = (pos_even && !"a") || (!pos_even && !"b")
L = # V == 0 && i % 4 == 3
