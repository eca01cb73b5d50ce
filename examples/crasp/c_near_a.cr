// Strings over {a, b, c} in which every c has an a at one of the two positions just before it (ε included). C-RASP[local].
alphabet "a", "b", "c"
predicate recent(i, j) := j == i - 1 || j == i - 2
NearA = #[recent] "a" >= 1
Orphan = "c" && !NearA
L = # Orphan == 0
