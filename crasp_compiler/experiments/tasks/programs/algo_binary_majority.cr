// Binary majority: $ b_1 … b_n SEP y EOS. C-RASP[∅].
// Input: the example without its leading "$" (BOS plays "$"); the outputs at
// position i give the token that follows token i + 1 of the example.
alphabet "0", "1", "SEP", "EOS"
Seen = # "SEP" >= 1   // SEP at or before i
Ones = # "1"          // at SEP: the 1s of the input
Zeros = # "0"
NEXT_0 = "SEP" && Zeros > Ones
NEXT_1 = "SEP" && Ones > Zeros
NEXT_EOS = Seen && !"SEP"
output NEXT_0, NEXT_1, NEXT_EOS
