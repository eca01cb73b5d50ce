// Sort: $ x SEP sorted(x) EOS (distinct numbers). C-RASP[∅].
// Input: the example without its leading "$" (BOS plays "$"); the outputs at
// position i give the token that follows token i + 1 of the example.
alphabet "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16", "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31", "32", "33", "34", "35", "36", "37", "38", "39", "40", "41", "42", "43", "44", "45", "46", "47", "48", "49", "50", "51", "52", "53", "54", "55", "56", "57", "58", "59", "60", "61", "62", "63", "64", "65", "66", "67", "68", "69", "70", "71", "72", "73", "74", "75", "76", "77", "78", "79", "80", "81", "82", "83", "84", "85", "86", "87", "88", "89", "90", "91", "92", "93", "94", "95", "96", "97", "98", "99", "100", "101", "102", "103", "104", "105", "106", "107", "108", "109", "110", "111", "112", "113", "114", "115", "116", "117", "118", "119", "120", "121", "122", "123", "124", "125", "126", "127", "128", "129", "130", "131", "132", "133", "134", "135", "136", "137", "138", "139", "140", "141", "142", "143", "144", "145", "146", "147", "148", "149", "SEP", "EOS"
// After k outputs (the k smallest inputs) the next output is the number s with
// In(< s) <= k < In(<= s), In(<= s) counting the input numbers <= s. Upto_s counts
// the occurrences of numbers <= s so far, In(<= s) + min(k, In(<= s)), so
// In(<= s) <= k iff Upto_s <= 2k.
Seen = # "SEP" >= 1
Out = # Seen - 1          // k: the output tokens at or before i
Upto_0 = # "0"
Upto_1 = Upto_0 + # "1"
Upto_2 = Upto_1 + # "2"
Upto_3 = Upto_2 + # "3"
Upto_4 = Upto_3 + # "4"
Upto_5 = Upto_4 + # "5"
Upto_6 = Upto_5 + # "6"
Upto_7 = Upto_6 + # "7"
Upto_8 = Upto_7 + # "8"
Upto_9 = Upto_8 + # "9"
Upto_10 = Upto_9 + # "10"
Upto_11 = Upto_10 + # "11"
Upto_12 = Upto_11 + # "12"
Upto_13 = Upto_12 + # "13"
Upto_14 = Upto_13 + # "14"
Upto_15 = Upto_14 + # "15"
Upto_16 = Upto_15 + # "16"
Upto_17 = Upto_16 + # "17"
Upto_18 = Upto_17 + # "18"
Upto_19 = Upto_18 + # "19"
Upto_20 = Upto_19 + # "20"
Upto_21 = Upto_20 + # "21"
Upto_22 = Upto_21 + # "22"
Upto_23 = Upto_22 + # "23"
Upto_24 = Upto_23 + # "24"
Upto_25 = Upto_24 + # "25"
Upto_26 = Upto_25 + # "26"
Upto_27 = Upto_26 + # "27"
Upto_28 = Upto_27 + # "28"
Upto_29 = Upto_28 + # "29"
Upto_30 = Upto_29 + # "30"
Upto_31 = Upto_30 + # "31"
Upto_32 = Upto_31 + # "32"
Upto_33 = Upto_32 + # "33"
Upto_34 = Upto_33 + # "34"
Upto_35 = Upto_34 + # "35"
Upto_36 = Upto_35 + # "36"
Upto_37 = Upto_36 + # "37"
Upto_38 = Upto_37 + # "38"
Upto_39 = Upto_38 + # "39"
Upto_40 = Upto_39 + # "40"
Upto_41 = Upto_40 + # "41"
Upto_42 = Upto_41 + # "42"
Upto_43 = Upto_42 + # "43"
Upto_44 = Upto_43 + # "44"
Upto_45 = Upto_44 + # "45"
Upto_46 = Upto_45 + # "46"
Upto_47 = Upto_46 + # "47"
Upto_48 = Upto_47 + # "48"
Upto_49 = Upto_48 + # "49"
Upto_50 = Upto_49 + # "50"
Upto_51 = Upto_50 + # "51"
Upto_52 = Upto_51 + # "52"
Upto_53 = Upto_52 + # "53"
Upto_54 = Upto_53 + # "54"
Upto_55 = Upto_54 + # "55"
Upto_56 = Upto_55 + # "56"
Upto_57 = Upto_56 + # "57"
Upto_58 = Upto_57 + # "58"
Upto_59 = Upto_58 + # "59"
Upto_60 = Upto_59 + # "60"
Upto_61 = Upto_60 + # "61"
Upto_62 = Upto_61 + # "62"
Upto_63 = Upto_62 + # "63"
Upto_64 = Upto_63 + # "64"
Upto_65 = Upto_64 + # "65"
Upto_66 = Upto_65 + # "66"
Upto_67 = Upto_66 + # "67"
Upto_68 = Upto_67 + # "68"
Upto_69 = Upto_68 + # "69"
Upto_70 = Upto_69 + # "70"
Upto_71 = Upto_70 + # "71"
Upto_72 = Upto_71 + # "72"
Upto_73 = Upto_72 + # "73"
Upto_74 = Upto_73 + # "74"
Upto_75 = Upto_74 + # "75"
Upto_76 = Upto_75 + # "76"
Upto_77 = Upto_76 + # "77"
Upto_78 = Upto_77 + # "78"
Upto_79 = Upto_78 + # "79"
Upto_80 = Upto_79 + # "80"
Upto_81 = Upto_80 + # "81"
Upto_82 = Upto_81 + # "82"
Upto_83 = Upto_82 + # "83"
Upto_84 = Upto_83 + # "84"
Upto_85 = Upto_84 + # "85"
Upto_86 = Upto_85 + # "86"
Upto_87 = Upto_86 + # "87"
Upto_88 = Upto_87 + # "88"
Upto_89 = Upto_88 + # "89"
Upto_90 = Upto_89 + # "90"
Upto_91 = Upto_90 + # "91"
Upto_92 = Upto_91 + # "92"
Upto_93 = Upto_92 + # "93"
Upto_94 = Upto_93 + # "94"
Upto_95 = Upto_94 + # "95"
Upto_96 = Upto_95 + # "96"
Upto_97 = Upto_96 + # "97"
Upto_98 = Upto_97 + # "98"
Upto_99 = Upto_98 + # "99"
Upto_100 = Upto_99 + # "100"
Upto_101 = Upto_100 + # "101"
Upto_102 = Upto_101 + # "102"
Upto_103 = Upto_102 + # "103"
Upto_104 = Upto_103 + # "104"
Upto_105 = Upto_104 + # "105"
Upto_106 = Upto_105 + # "106"
Upto_107 = Upto_106 + # "107"
Upto_108 = Upto_107 + # "108"
Upto_109 = Upto_108 + # "109"
Upto_110 = Upto_109 + # "110"
Upto_111 = Upto_110 + # "111"
Upto_112 = Upto_111 + # "112"
Upto_113 = Upto_112 + # "113"
Upto_114 = Upto_113 + # "114"
Upto_115 = Upto_114 + # "115"
Upto_116 = Upto_115 + # "116"
Upto_117 = Upto_116 + # "117"
Upto_118 = Upto_117 + # "118"
Upto_119 = Upto_118 + # "119"
Upto_120 = Upto_119 + # "120"
Upto_121 = Upto_120 + # "121"
Upto_122 = Upto_121 + # "122"
Upto_123 = Upto_122 + # "123"
Upto_124 = Upto_123 + # "124"
Upto_125 = Upto_124 + # "125"
Upto_126 = Upto_125 + # "126"
Upto_127 = Upto_126 + # "127"
Upto_128 = Upto_127 + # "128"
Upto_129 = Upto_128 + # "129"
Upto_130 = Upto_129 + # "130"
Upto_131 = Upto_130 + # "131"
Upto_132 = Upto_131 + # "132"
Upto_133 = Upto_132 + # "133"
Upto_134 = Upto_133 + # "134"
Upto_135 = Upto_134 + # "135"
Upto_136 = Upto_135 + # "136"
Upto_137 = Upto_136 + # "137"
Upto_138 = Upto_137 + # "138"
Upto_139 = Upto_138 + # "139"
Upto_140 = Upto_139 + # "140"
Upto_141 = Upto_140 + # "141"
Upto_142 = Upto_141 + # "142"
Upto_143 = Upto_142 + # "143"
Upto_144 = Upto_143 + # "144"
Upto_145 = Upto_144 + # "145"
Upto_146 = Upto_145 + # "146"
Upto_147 = Upto_146 + # "147"
Upto_148 = Upto_147 + # "148"
Upto_149 = Upto_148 + # "149"
Done_0 = Upto_0 <= 2 * Out   // every input number <= 0 is output
Done_1 = Upto_1 <= 2 * Out   // every input number <= 1 is output
Done_2 = Upto_2 <= 2 * Out   // every input number <= 2 is output
Done_3 = Upto_3 <= 2 * Out   // every input number <= 3 is output
Done_4 = Upto_4 <= 2 * Out   // every input number <= 4 is output
Done_5 = Upto_5 <= 2 * Out   // every input number <= 5 is output
Done_6 = Upto_6 <= 2 * Out   // every input number <= 6 is output
Done_7 = Upto_7 <= 2 * Out   // every input number <= 7 is output
Done_8 = Upto_8 <= 2 * Out   // every input number <= 8 is output
Done_9 = Upto_9 <= 2 * Out   // every input number <= 9 is output
Done_10 = Upto_10 <= 2 * Out   // every input number <= 10 is output
Done_11 = Upto_11 <= 2 * Out   // every input number <= 11 is output
Done_12 = Upto_12 <= 2 * Out   // every input number <= 12 is output
Done_13 = Upto_13 <= 2 * Out   // every input number <= 13 is output
Done_14 = Upto_14 <= 2 * Out   // every input number <= 14 is output
Done_15 = Upto_15 <= 2 * Out   // every input number <= 15 is output
Done_16 = Upto_16 <= 2 * Out   // every input number <= 16 is output
Done_17 = Upto_17 <= 2 * Out   // every input number <= 17 is output
Done_18 = Upto_18 <= 2 * Out   // every input number <= 18 is output
Done_19 = Upto_19 <= 2 * Out   // every input number <= 19 is output
Done_20 = Upto_20 <= 2 * Out   // every input number <= 20 is output
Done_21 = Upto_21 <= 2 * Out   // every input number <= 21 is output
Done_22 = Upto_22 <= 2 * Out   // every input number <= 22 is output
Done_23 = Upto_23 <= 2 * Out   // every input number <= 23 is output
Done_24 = Upto_24 <= 2 * Out   // every input number <= 24 is output
Done_25 = Upto_25 <= 2 * Out   // every input number <= 25 is output
Done_26 = Upto_26 <= 2 * Out   // every input number <= 26 is output
Done_27 = Upto_27 <= 2 * Out   // every input number <= 27 is output
Done_28 = Upto_28 <= 2 * Out   // every input number <= 28 is output
Done_29 = Upto_29 <= 2 * Out   // every input number <= 29 is output
Done_30 = Upto_30 <= 2 * Out   // every input number <= 30 is output
Done_31 = Upto_31 <= 2 * Out   // every input number <= 31 is output
Done_32 = Upto_32 <= 2 * Out   // every input number <= 32 is output
Done_33 = Upto_33 <= 2 * Out   // every input number <= 33 is output
Done_34 = Upto_34 <= 2 * Out   // every input number <= 34 is output
Done_35 = Upto_35 <= 2 * Out   // every input number <= 35 is output
Done_36 = Upto_36 <= 2 * Out   // every input number <= 36 is output
Done_37 = Upto_37 <= 2 * Out   // every input number <= 37 is output
Done_38 = Upto_38 <= 2 * Out   // every input number <= 38 is output
Done_39 = Upto_39 <= 2 * Out   // every input number <= 39 is output
Done_40 = Upto_40 <= 2 * Out   // every input number <= 40 is output
Done_41 = Upto_41 <= 2 * Out   // every input number <= 41 is output
Done_42 = Upto_42 <= 2 * Out   // every input number <= 42 is output
Done_43 = Upto_43 <= 2 * Out   // every input number <= 43 is output
Done_44 = Upto_44 <= 2 * Out   // every input number <= 44 is output
Done_45 = Upto_45 <= 2 * Out   // every input number <= 45 is output
Done_46 = Upto_46 <= 2 * Out   // every input number <= 46 is output
Done_47 = Upto_47 <= 2 * Out   // every input number <= 47 is output
Done_48 = Upto_48 <= 2 * Out   // every input number <= 48 is output
Done_49 = Upto_49 <= 2 * Out   // every input number <= 49 is output
Done_50 = Upto_50 <= 2 * Out   // every input number <= 50 is output
Done_51 = Upto_51 <= 2 * Out   // every input number <= 51 is output
Done_52 = Upto_52 <= 2 * Out   // every input number <= 52 is output
Done_53 = Upto_53 <= 2 * Out   // every input number <= 53 is output
Done_54 = Upto_54 <= 2 * Out   // every input number <= 54 is output
Done_55 = Upto_55 <= 2 * Out   // every input number <= 55 is output
Done_56 = Upto_56 <= 2 * Out   // every input number <= 56 is output
Done_57 = Upto_57 <= 2 * Out   // every input number <= 57 is output
Done_58 = Upto_58 <= 2 * Out   // every input number <= 58 is output
Done_59 = Upto_59 <= 2 * Out   // every input number <= 59 is output
Done_60 = Upto_60 <= 2 * Out   // every input number <= 60 is output
Done_61 = Upto_61 <= 2 * Out   // every input number <= 61 is output
Done_62 = Upto_62 <= 2 * Out   // every input number <= 62 is output
Done_63 = Upto_63 <= 2 * Out   // every input number <= 63 is output
Done_64 = Upto_64 <= 2 * Out   // every input number <= 64 is output
Done_65 = Upto_65 <= 2 * Out   // every input number <= 65 is output
Done_66 = Upto_66 <= 2 * Out   // every input number <= 66 is output
Done_67 = Upto_67 <= 2 * Out   // every input number <= 67 is output
Done_68 = Upto_68 <= 2 * Out   // every input number <= 68 is output
Done_69 = Upto_69 <= 2 * Out   // every input number <= 69 is output
Done_70 = Upto_70 <= 2 * Out   // every input number <= 70 is output
Done_71 = Upto_71 <= 2 * Out   // every input number <= 71 is output
Done_72 = Upto_72 <= 2 * Out   // every input number <= 72 is output
Done_73 = Upto_73 <= 2 * Out   // every input number <= 73 is output
Done_74 = Upto_74 <= 2 * Out   // every input number <= 74 is output
Done_75 = Upto_75 <= 2 * Out   // every input number <= 75 is output
Done_76 = Upto_76 <= 2 * Out   // every input number <= 76 is output
Done_77 = Upto_77 <= 2 * Out   // every input number <= 77 is output
Done_78 = Upto_78 <= 2 * Out   // every input number <= 78 is output
Done_79 = Upto_79 <= 2 * Out   // every input number <= 79 is output
Done_80 = Upto_80 <= 2 * Out   // every input number <= 80 is output
Done_81 = Upto_81 <= 2 * Out   // every input number <= 81 is output
Done_82 = Upto_82 <= 2 * Out   // every input number <= 82 is output
Done_83 = Upto_83 <= 2 * Out   // every input number <= 83 is output
Done_84 = Upto_84 <= 2 * Out   // every input number <= 84 is output
Done_85 = Upto_85 <= 2 * Out   // every input number <= 85 is output
Done_86 = Upto_86 <= 2 * Out   // every input number <= 86 is output
Done_87 = Upto_87 <= 2 * Out   // every input number <= 87 is output
Done_88 = Upto_88 <= 2 * Out   // every input number <= 88 is output
Done_89 = Upto_89 <= 2 * Out   // every input number <= 89 is output
Done_90 = Upto_90 <= 2 * Out   // every input number <= 90 is output
Done_91 = Upto_91 <= 2 * Out   // every input number <= 91 is output
Done_92 = Upto_92 <= 2 * Out   // every input number <= 92 is output
Done_93 = Upto_93 <= 2 * Out   // every input number <= 93 is output
Done_94 = Upto_94 <= 2 * Out   // every input number <= 94 is output
Done_95 = Upto_95 <= 2 * Out   // every input number <= 95 is output
Done_96 = Upto_96 <= 2 * Out   // every input number <= 96 is output
Done_97 = Upto_97 <= 2 * Out   // every input number <= 97 is output
Done_98 = Upto_98 <= 2 * Out   // every input number <= 98 is output
Done_99 = Upto_99 <= 2 * Out   // every input number <= 99 is output
Done_100 = Upto_100 <= 2 * Out   // every input number <= 100 is output
Done_101 = Upto_101 <= 2 * Out   // every input number <= 101 is output
Done_102 = Upto_102 <= 2 * Out   // every input number <= 102 is output
Done_103 = Upto_103 <= 2 * Out   // every input number <= 103 is output
Done_104 = Upto_104 <= 2 * Out   // every input number <= 104 is output
Done_105 = Upto_105 <= 2 * Out   // every input number <= 105 is output
Done_106 = Upto_106 <= 2 * Out   // every input number <= 106 is output
Done_107 = Upto_107 <= 2 * Out   // every input number <= 107 is output
Done_108 = Upto_108 <= 2 * Out   // every input number <= 108 is output
Done_109 = Upto_109 <= 2 * Out   // every input number <= 109 is output
Done_110 = Upto_110 <= 2 * Out   // every input number <= 110 is output
Done_111 = Upto_111 <= 2 * Out   // every input number <= 111 is output
Done_112 = Upto_112 <= 2 * Out   // every input number <= 112 is output
Done_113 = Upto_113 <= 2 * Out   // every input number <= 113 is output
Done_114 = Upto_114 <= 2 * Out   // every input number <= 114 is output
Done_115 = Upto_115 <= 2 * Out   // every input number <= 115 is output
Done_116 = Upto_116 <= 2 * Out   // every input number <= 116 is output
Done_117 = Upto_117 <= 2 * Out   // every input number <= 117 is output
Done_118 = Upto_118 <= 2 * Out   // every input number <= 118 is output
Done_119 = Upto_119 <= 2 * Out   // every input number <= 119 is output
Done_120 = Upto_120 <= 2 * Out   // every input number <= 120 is output
Done_121 = Upto_121 <= 2 * Out   // every input number <= 121 is output
Done_122 = Upto_122 <= 2 * Out   // every input number <= 122 is output
Done_123 = Upto_123 <= 2 * Out   // every input number <= 123 is output
Done_124 = Upto_124 <= 2 * Out   // every input number <= 124 is output
Done_125 = Upto_125 <= 2 * Out   // every input number <= 125 is output
Done_126 = Upto_126 <= 2 * Out   // every input number <= 126 is output
Done_127 = Upto_127 <= 2 * Out   // every input number <= 127 is output
Done_128 = Upto_128 <= 2 * Out   // every input number <= 128 is output
Done_129 = Upto_129 <= 2 * Out   // every input number <= 129 is output
Done_130 = Upto_130 <= 2 * Out   // every input number <= 130 is output
Done_131 = Upto_131 <= 2 * Out   // every input number <= 131 is output
Done_132 = Upto_132 <= 2 * Out   // every input number <= 132 is output
Done_133 = Upto_133 <= 2 * Out   // every input number <= 133 is output
Done_134 = Upto_134 <= 2 * Out   // every input number <= 134 is output
Done_135 = Upto_135 <= 2 * Out   // every input number <= 135 is output
Done_136 = Upto_136 <= 2 * Out   // every input number <= 136 is output
Done_137 = Upto_137 <= 2 * Out   // every input number <= 137 is output
Done_138 = Upto_138 <= 2 * Out   // every input number <= 138 is output
Done_139 = Upto_139 <= 2 * Out   // every input number <= 139 is output
Done_140 = Upto_140 <= 2 * Out   // every input number <= 140 is output
Done_141 = Upto_141 <= 2 * Out   // every input number <= 141 is output
Done_142 = Upto_142 <= 2 * Out   // every input number <= 142 is output
Done_143 = Upto_143 <= 2 * Out   // every input number <= 143 is output
Done_144 = Upto_144 <= 2 * Out   // every input number <= 144 is output
Done_145 = Upto_145 <= 2 * Out   // every input number <= 145 is output
Done_146 = Upto_146 <= 2 * Out   // every input number <= 146 is output
Done_147 = Upto_147 <= 2 * Out   // every input number <= 147 is output
Done_148 = Upto_148 <= 2 * Out   // every input number <= 148 is output
Done_149 = Upto_149 <= 2 * Out   // every input number <= 149 is output
NEXT_0 = Seen && !Done_0
NEXT_1 = Seen && Done_0 && !Done_1
NEXT_2 = Seen && Done_1 && !Done_2
NEXT_3 = Seen && Done_2 && !Done_3
NEXT_4 = Seen && Done_3 && !Done_4
NEXT_5 = Seen && Done_4 && !Done_5
NEXT_6 = Seen && Done_5 && !Done_6
NEXT_7 = Seen && Done_6 && !Done_7
NEXT_8 = Seen && Done_7 && !Done_8
NEXT_9 = Seen && Done_8 && !Done_9
NEXT_10 = Seen && Done_9 && !Done_10
NEXT_11 = Seen && Done_10 && !Done_11
NEXT_12 = Seen && Done_11 && !Done_12
NEXT_13 = Seen && Done_12 && !Done_13
NEXT_14 = Seen && Done_13 && !Done_14
NEXT_15 = Seen && Done_14 && !Done_15
NEXT_16 = Seen && Done_15 && !Done_16
NEXT_17 = Seen && Done_16 && !Done_17
NEXT_18 = Seen && Done_17 && !Done_18
NEXT_19 = Seen && Done_18 && !Done_19
NEXT_20 = Seen && Done_19 && !Done_20
NEXT_21 = Seen && Done_20 && !Done_21
NEXT_22 = Seen && Done_21 && !Done_22
NEXT_23 = Seen && Done_22 && !Done_23
NEXT_24 = Seen && Done_23 && !Done_24
NEXT_25 = Seen && Done_24 && !Done_25
NEXT_26 = Seen && Done_25 && !Done_26
NEXT_27 = Seen && Done_26 && !Done_27
NEXT_28 = Seen && Done_27 && !Done_28
NEXT_29 = Seen && Done_28 && !Done_29
NEXT_30 = Seen && Done_29 && !Done_30
NEXT_31 = Seen && Done_30 && !Done_31
NEXT_32 = Seen && Done_31 && !Done_32
NEXT_33 = Seen && Done_32 && !Done_33
NEXT_34 = Seen && Done_33 && !Done_34
NEXT_35 = Seen && Done_34 && !Done_35
NEXT_36 = Seen && Done_35 && !Done_36
NEXT_37 = Seen && Done_36 && !Done_37
NEXT_38 = Seen && Done_37 && !Done_38
NEXT_39 = Seen && Done_38 && !Done_39
NEXT_40 = Seen && Done_39 && !Done_40
NEXT_41 = Seen && Done_40 && !Done_41
NEXT_42 = Seen && Done_41 && !Done_42
NEXT_43 = Seen && Done_42 && !Done_43
NEXT_44 = Seen && Done_43 && !Done_44
NEXT_45 = Seen && Done_44 && !Done_45
NEXT_46 = Seen && Done_45 && !Done_46
NEXT_47 = Seen && Done_46 && !Done_47
NEXT_48 = Seen && Done_47 && !Done_48
NEXT_49 = Seen && Done_48 && !Done_49
NEXT_50 = Seen && Done_49 && !Done_50
NEXT_51 = Seen && Done_50 && !Done_51
NEXT_52 = Seen && Done_51 && !Done_52
NEXT_53 = Seen && Done_52 && !Done_53
NEXT_54 = Seen && Done_53 && !Done_54
NEXT_55 = Seen && Done_54 && !Done_55
NEXT_56 = Seen && Done_55 && !Done_56
NEXT_57 = Seen && Done_56 && !Done_57
NEXT_58 = Seen && Done_57 && !Done_58
NEXT_59 = Seen && Done_58 && !Done_59
NEXT_60 = Seen && Done_59 && !Done_60
NEXT_61 = Seen && Done_60 && !Done_61
NEXT_62 = Seen && Done_61 && !Done_62
NEXT_63 = Seen && Done_62 && !Done_63
NEXT_64 = Seen && Done_63 && !Done_64
NEXT_65 = Seen && Done_64 && !Done_65
NEXT_66 = Seen && Done_65 && !Done_66
NEXT_67 = Seen && Done_66 && !Done_67
NEXT_68 = Seen && Done_67 && !Done_68
NEXT_69 = Seen && Done_68 && !Done_69
NEXT_70 = Seen && Done_69 && !Done_70
NEXT_71 = Seen && Done_70 && !Done_71
NEXT_72 = Seen && Done_71 && !Done_72
NEXT_73 = Seen && Done_72 && !Done_73
NEXT_74 = Seen && Done_73 && !Done_74
NEXT_75 = Seen && Done_74 && !Done_75
NEXT_76 = Seen && Done_75 && !Done_76
NEXT_77 = Seen && Done_76 && !Done_77
NEXT_78 = Seen && Done_77 && !Done_78
NEXT_79 = Seen && Done_78 && !Done_79
NEXT_80 = Seen && Done_79 && !Done_80
NEXT_81 = Seen && Done_80 && !Done_81
NEXT_82 = Seen && Done_81 && !Done_82
NEXT_83 = Seen && Done_82 && !Done_83
NEXT_84 = Seen && Done_83 && !Done_84
NEXT_85 = Seen && Done_84 && !Done_85
NEXT_86 = Seen && Done_85 && !Done_86
NEXT_87 = Seen && Done_86 && !Done_87
NEXT_88 = Seen && Done_87 && !Done_88
NEXT_89 = Seen && Done_88 && !Done_89
NEXT_90 = Seen && Done_89 && !Done_90
NEXT_91 = Seen && Done_90 && !Done_91
NEXT_92 = Seen && Done_91 && !Done_92
NEXT_93 = Seen && Done_92 && !Done_93
NEXT_94 = Seen && Done_93 && !Done_94
NEXT_95 = Seen && Done_94 && !Done_95
NEXT_96 = Seen && Done_95 && !Done_96
NEXT_97 = Seen && Done_96 && !Done_97
NEXT_98 = Seen && Done_97 && !Done_98
NEXT_99 = Seen && Done_98 && !Done_99
NEXT_100 = Seen && Done_99 && !Done_100
NEXT_101 = Seen && Done_100 && !Done_101
NEXT_102 = Seen && Done_101 && !Done_102
NEXT_103 = Seen && Done_102 && !Done_103
NEXT_104 = Seen && Done_103 && !Done_104
NEXT_105 = Seen && Done_104 && !Done_105
NEXT_106 = Seen && Done_105 && !Done_106
NEXT_107 = Seen && Done_106 && !Done_107
NEXT_108 = Seen && Done_107 && !Done_108
NEXT_109 = Seen && Done_108 && !Done_109
NEXT_110 = Seen && Done_109 && !Done_110
NEXT_111 = Seen && Done_110 && !Done_111
NEXT_112 = Seen && Done_111 && !Done_112
NEXT_113 = Seen && Done_112 && !Done_113
NEXT_114 = Seen && Done_113 && !Done_114
NEXT_115 = Seen && Done_114 && !Done_115
NEXT_116 = Seen && Done_115 && !Done_116
NEXT_117 = Seen && Done_116 && !Done_117
NEXT_118 = Seen && Done_117 && !Done_118
NEXT_119 = Seen && Done_118 && !Done_119
NEXT_120 = Seen && Done_119 && !Done_120
NEXT_121 = Seen && Done_120 && !Done_121
NEXT_122 = Seen && Done_121 && !Done_122
NEXT_123 = Seen && Done_122 && !Done_123
NEXT_124 = Seen && Done_123 && !Done_124
NEXT_125 = Seen && Done_124 && !Done_125
NEXT_126 = Seen && Done_125 && !Done_126
NEXT_127 = Seen && Done_126 && !Done_127
NEXT_128 = Seen && Done_127 && !Done_128
NEXT_129 = Seen && Done_128 && !Done_129
NEXT_130 = Seen && Done_129 && !Done_130
NEXT_131 = Seen && Done_130 && !Done_131
NEXT_132 = Seen && Done_131 && !Done_132
NEXT_133 = Seen && Done_132 && !Done_133
NEXT_134 = Seen && Done_133 && !Done_134
NEXT_135 = Seen && Done_134 && !Done_135
NEXT_136 = Seen && Done_135 && !Done_136
NEXT_137 = Seen && Done_136 && !Done_137
NEXT_138 = Seen && Done_137 && !Done_138
NEXT_139 = Seen && Done_138 && !Done_139
NEXT_140 = Seen && Done_139 && !Done_140
NEXT_141 = Seen && Done_140 && !Done_141
NEXT_142 = Seen && Done_141 && !Done_142
NEXT_143 = Seen && Done_142 && !Done_143
NEXT_144 = Seen && Done_143 && !Done_144
NEXT_145 = Seen && Done_144 && !Done_145
NEXT_146 = Seen && Done_145 && !Done_146
NEXT_147 = Seen && Done_146 && !Done_147
NEXT_148 = Seen && Done_147 && !Done_148
NEXT_149 = Seen && Done_148 && !Done_149
NEXT_EOS = Seen && Done_149
output NEXT_0, NEXT_1, NEXT_2, NEXT_3, NEXT_4, NEXT_5, NEXT_6, NEXT_7, NEXT_8, NEXT_9, NEXT_10, NEXT_11, NEXT_12, NEXT_13, NEXT_14, NEXT_15, NEXT_16, NEXT_17, NEXT_18, NEXT_19, NEXT_20, NEXT_21, NEXT_22, NEXT_23, NEXT_24, NEXT_25, NEXT_26, NEXT_27, NEXT_28, NEXT_29, NEXT_30, NEXT_31, NEXT_32, NEXT_33, NEXT_34, NEXT_35, NEXT_36, NEXT_37, NEXT_38, NEXT_39, NEXT_40, NEXT_41, NEXT_42, NEXT_43, NEXT_44, NEXT_45, NEXT_46, NEXT_47, NEXT_48, NEXT_49, NEXT_50, NEXT_51, NEXT_52, NEXT_53, NEXT_54, NEXT_55, NEXT_56, NEXT_57, NEXT_58, NEXT_59, NEXT_60, NEXT_61, NEXT_62, NEXT_63, NEXT_64, NEXT_65, NEXT_66, NEXT_67, NEXT_68, NEXT_69, NEXT_70, NEXT_71, NEXT_72, NEXT_73, NEXT_74, NEXT_75, NEXT_76, NEXT_77, NEXT_78, NEXT_79, NEXT_80, NEXT_81, NEXT_82, NEXT_83, NEXT_84, NEXT_85, NEXT_86, NEXT_87, NEXT_88, NEXT_89, NEXT_90, NEXT_91, NEXT_92, NEXT_93, NEXT_94, NEXT_95, NEXT_96, NEXT_97, NEXT_98, NEXT_99, NEXT_100, NEXT_101, NEXT_102, NEXT_103, NEXT_104, NEXT_105, NEXT_106, NEXT_107, NEXT_108, NEXT_109, NEXT_110, NEXT_111, NEXT_112, NEXT_113, NEXT_114, NEXT_115, NEXT_116, NEXT_117, NEXT_118, NEXT_119, NEXT_120, NEXT_121, NEXT_122, NEXT_123, NEXT_124, NEXT_125, NEXT_126, NEXT_127, NEXT_128, NEXT_129, NEXT_130, NEXT_131, NEXT_132, NEXT_133, NEXT_134, NEXT_135, NEXT_136, NEXT_137, NEXT_138, NEXT_139, NEXT_140, NEXT_141, NEXT_142, NEXT_143, NEXT_144, NEXT_145, NEXT_146, NEXT_147, NEXT_148, NEXT_149, NEXT_EOS
