// Binary majority interleave: $ x¹₁ x²₁ x³₁ … x³ₙ SEP y¹ y² y³ EOS. C-RASP[periodic].
// Input: the example without its leading "$" (BOS plays "$"); the outputs at
// position i give the token that follows token i + 1 of the example.
alphabet "0", "1", "SEP", "EOS"
// the bits of stream s + 1 sit at positions i % 3 == s; SEP (position 3n) and
// y¹, y² (positions 3n + 1, 3n + 2) predict the stream of their own residue
Seen = # "SEP" >= 1
After = # Seen        // 1 at SEP, 2 at y¹, 3 at y², 4 at y³
Ones_0 = # ("1" && !Seen && i % 3 == 0)
Zeros_0 = # ("0" && !Seen && i % 3 == 0)
Ones_1 = # ("1" && !Seen && i % 3 == 1)
Zeros_1 = # ("0" && !Seen && i % 3 == 1)
Ones_2 = # ("1" && !Seen && i % 3 == 2)
Zeros_2 = # ("0" && !Seen && i % 3 == 2)
Answer = Seen && After <= 3
NEXT_0 = Answer && ((i % 3 == 0 && Zeros_0 > Ones_0) || (i % 3 == 1 && Zeros_1 > Ones_1) || (i % 3 == 2 && Zeros_2 > Ones_2))
NEXT_1 = Answer && ((i % 3 == 0 && Ones_0 > Zeros_0) || (i % 3 == 1 && Ones_1 > Zeros_1) || (i % 3 == 2 && Ones_2 > Zeros_2))
NEXT_EOS = After == 4
output NEXT_0, NEXT_1, NEXT_EOS
