// Σ*abΣ* over {a, b} with prefix counts only (C-RASP[∅]): over a two-letter alphabet a
// string contains ab exactly when some b has an a before it (the last a before that b
// is followed by a b). A second program for the language of
// examples/crasp/contains_ab.crasp, for `crasp compare --against`.
alphabet "a", "b"
SeenA = # "a" >= 1
AfterA = "b" && SeenA
L = # AfterA >= 1
