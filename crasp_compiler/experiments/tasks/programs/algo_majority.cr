// Majority: $ x_1 … x_n SEP y EOS. C-RASP[∅].
// Input: the example without its leading "$" (BOS plays "$"); the outputs at
// position i give the token that follows token i + 1 of the example.
alphabet "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z", "SEP", "EOS"
// y is the letter whose count reaches the maximum (the generator makes it unique)
C_a = # "a"
C_b = # "b"
C_c = # "c"
C_d = # "d"
C_e = # "e"
C_f = # "f"
C_g = # "g"
C_h = # "h"
C_i = # "i"
C_j = # "j"
C_k = # "k"
C_l = # "l"
C_m = # "m"
C_n = # "n"
C_o = # "o"
C_p = # "p"
C_q = # "q"
C_r = # "r"
C_s = # "s"
C_t = # "t"
C_u = # "u"
C_v = # "v"
C_w = # "w"
C_x = # "x"
C_y = # "y"
C_z = # "z"
Top = max(max(max(max(C_a, max(C_b, C_c)), max(C_d, max(C_e, C_f))), max(max(C_g, max(C_h, C_i)), max(max(C_j, C_k), max(C_l, C_m)))), max(max(max(C_n, max(C_o, C_p)), max(C_q, max(C_r, C_s))), max(max(C_t, max(C_u, C_v)), max(max(C_w, C_x), max(C_y, C_z)))))
NEXT_a = "SEP" && C_a >= Top
NEXT_b = "SEP" && C_b >= Top
NEXT_c = "SEP" && C_c >= Top
NEXT_d = "SEP" && C_d >= Top
NEXT_e = "SEP" && C_e >= Top
NEXT_f = "SEP" && C_f >= Top
NEXT_g = "SEP" && C_g >= Top
NEXT_h = "SEP" && C_h >= Top
NEXT_i = "SEP" && C_i >= Top
NEXT_j = "SEP" && C_j >= Top
NEXT_k = "SEP" && C_k >= Top
NEXT_l = "SEP" && C_l >= Top
NEXT_m = "SEP" && C_m >= Top
NEXT_n = "SEP" && C_n >= Top
NEXT_o = "SEP" && C_o >= Top
NEXT_p = "SEP" && C_p >= Top
NEXT_q = "SEP" && C_q >= Top
NEXT_r = "SEP" && C_r >= Top
NEXT_s = "SEP" && C_s >= Top
NEXT_t = "SEP" && C_t >= Top
NEXT_u = "SEP" && C_u >= Top
NEXT_v = "SEP" && C_v >= Top
NEXT_w = "SEP" && C_w >= Top
NEXT_x = "SEP" && C_x >= Top
NEXT_y = "SEP" && C_y >= Top
NEXT_z = "SEP" && C_z >= Top
Seen = # "SEP" >= 1
NEXT_EOS = Seen && !"SEP"
output NEXT_a, NEXT_b, NEXT_c, NEXT_d, NEXT_e, NEXT_f, NEXT_g, NEXT_h, NEXT_i, NEXT_j, NEXT_k, NEXT_l, NEXT_m, NEXT_n, NEXT_o, NEXT_p, NEXT_q, NEXT_r, NEXT_s, NEXT_t, NEXT_u, NEXT_v, NEXT_w, NEXT_x, NEXT_y, NEXT_z, NEXT_EOS
