// Next symbols of (abab)* over {a, b} after a valid prefix: a after an even-length prefix, b after an odd one, EOS iff the length is a multiple of 4. C-RASP[periodic].
alphabet "a", "b"
// positions are 0-indexed: the prefix up to position i has i + 1 symbols (the empty prefix is i = -1)
NEXT_a = i % 2 == 1
NEXT_b = i % 2 == 0
NEXT_EOS = i % 4 == 3
output NEXT_a, NEXT_b, NEXT_EOS
