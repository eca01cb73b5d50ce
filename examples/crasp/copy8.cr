// Strings of length 8 over {a, b} whose second half copies the first (ww with |w| = 4). C-RASP[local].
#import pred4
alphabet "a", "b"
// position i (from 4 on) must repeat the token 4 positions back
Back_a = #[pred4] "a"
Back_b = #[pred4] "b"
Mismatch = ("a" && Back_b >= 1) || ("b" && Back_a >= 1)
Length = # true
Copy = Length == 8 && # Mismatch == 0
