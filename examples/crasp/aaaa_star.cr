// (aaaa)* over {a}: strings of a's whose length is a multiple of 4 (ε included). C-RASP[periodic] (paper E.1.2, R6).
alphabet "a"
// positions are 0-indexed: a length 4k string ends at position i = 4k - 1, i.e. i % 4 == 3
AllA = # !"a" == 0
L = AllA && i % 4 == 3
