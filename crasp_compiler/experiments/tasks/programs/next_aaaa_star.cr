// Next symbols of (aaaa)* over {a} after a valid prefix: {a}, plus EOS iff the prefix length is a multiple of 4. C-RASP[periodic].
alphabet "a"
// positions are 0-indexed: the prefix up to position i has i + 1 symbols (the empty prefix is i = -1)
NEXT_a = true
NEXT_EOS = i % 4 == 3
output NEXT_a, NEXT_EOS
