// Copy (unique): $ x SEP x EOS (distinct tokens). C-RASP[∅] for its 150-token
// alphabet only: the task's alphabet grows with its length (`range`), so this
// program shows no class for the task (the paper: C-RASP[local], not [∅]).
// Input: the example without its leading "$" (BOS plays "$"); the outputs at
// position i give the token that follows token i + 1 of the example.
alphabet range 0..149, "SEP", "EOS"
// After k outputs the next output is the token with k input tokens before it.
// Before_s counts the positions before the first s: the input tokens before s
// when s occurs in the input, i + 1 > k otherwise.
Seen = # "SEP" >= 1
Out = # Seen - 1          // k: the output tokens at or before i
Had_0 = # "0" >= 1
Before_0 = # !Had_0
Had_1 = # "1" >= 1
Before_1 = # !Had_1
Had_2 = # "2" >= 1
Before_2 = # !Had_2
Had_3 = # "3" >= 1
Before_3 = # !Had_3
Had_4 = # "4" >= 1
Before_4 = # !Had_4
Had_5 = # "5" >= 1
Before_5 = # !Had_5
Had_6 = # "6" >= 1
Before_6 = # !Had_6
Had_7 = # "7" >= 1
Before_7 = # !Had_7
Had_8 = # "8" >= 1
Before_8 = # !Had_8
Had_9 = # "9" >= 1
Before_9 = # !Had_9
Had_10 = # "10" >= 1
Before_10 = # !Had_10
Had_11 = # "11" >= 1
Before_11 = # !Had_11
Had_12 = # "12" >= 1
Before_12 = # !Had_12
Had_13 = # "13" >= 1
Before_13 = # !Had_13
Had_14 = # "14" >= 1
Before_14 = # !Had_14
Had_15 = # "15" >= 1
Before_15 = # !Had_15
Had_16 = # "16" >= 1
Before_16 = # !Had_16
Had_17 = # "17" >= 1
Before_17 = # !Had_17
Had_18 = # "18" >= 1
Before_18 = # !Had_18
Had_19 = # "19" >= 1
Before_19 = # !Had_19
Had_20 = # "20" >= 1
Before_20 = # !Had_20
Had_21 = # "21" >= 1
Before_21 = # !Had_21
Had_22 = # "22" >= 1
Before_22 = # !Had_22
Had_23 = # "23" >= 1
Before_23 = # !Had_23
Had_24 = # "24" >= 1
Before_24 = # !Had_24
Had_25 = # "25" >= 1
Before_25 = # !Had_25
Had_26 = # "26" >= 1
Before_26 = # !Had_26
Had_27 = # "27" >= 1
Before_27 = # !Had_27
Had_28 = # "28" >= 1
Before_28 = # !Had_28
Had_29 = # "29" >= 1
Before_29 = # !Had_29
Had_30 = # "30" >= 1
Before_30 = # !Had_30
Had_31 = # "31" >= 1
Before_31 = # !Had_31
Had_32 = # "32" >= 1
Before_32 = # !Had_32
Had_33 = # "33" >= 1
Before_33 = # !Had_33
Had_34 = # "34" >= 1
Before_34 = # !Had_34
Had_35 = # "35" >= 1
Before_35 = # !Had_35
Had_36 = # "36" >= 1
Before_36 = # !Had_36
Had_37 = # "37" >= 1
Before_37 = # !Had_37
Had_38 = # "38" >= 1
Before_38 = # !Had_38
Had_39 = # "39" >= 1
Before_39 = # !Had_39
Had_40 = # "40" >= 1
Before_40 = # !Had_40
Had_41 = # "41" >= 1
Before_41 = # !Had_41
Had_42 = # "42" >= 1
Before_42 = # !Had_42
Had_43 = # "43" >= 1
Before_43 = # !Had_43
Had_44 = # "44" >= 1
Before_44 = # !Had_44
Had_45 = # "45" >= 1
Before_45 = # !Had_45
Had_46 = # "46" >= 1
Before_46 = # !Had_46
Had_47 = # "47" >= 1
Before_47 = # !Had_47
Had_48 = # "48" >= 1
Before_48 = # !Had_48
Had_49 = # "49" >= 1
Before_49 = # !Had_49
Had_50 = # "50" >= 1
Before_50 = # !Had_50
Had_51 = # "51" >= 1
Before_51 = # !Had_51
Had_52 = # "52" >= 1
Before_52 = # !Had_52
Had_53 = # "53" >= 1
Before_53 = # !Had_53
Had_54 = # "54" >= 1
Before_54 = # !Had_54
Had_55 = # "55" >= 1
Before_55 = # !Had_55
Had_56 = # "56" >= 1
Before_56 = # !Had_56
Had_57 = # "57" >= 1
Before_57 = # !Had_57
Had_58 = # "58" >= 1
Before_58 = # !Had_58
Had_59 = # "59" >= 1
Before_59 = # !Had_59
Had_60 = # "60" >= 1
Before_60 = # !Had_60
Had_61 = # "61" >= 1
Before_61 = # !Had_61
Had_62 = # "62" >= 1
Before_62 = # !Had_62
Had_63 = # "63" >= 1
Before_63 = # !Had_63
Had_64 = # "64" >= 1
Before_64 = # !Had_64
Had_65 = # "65" >= 1
Before_65 = # !Had_65
Had_66 = # "66" >= 1
Before_66 = # !Had_66
Had_67 = # "67" >= 1
Before_67 = # !Had_67
Had_68 = # "68" >= 1
Before_68 = # !Had_68
Had_69 = # "69" >= 1
Before_69 = # !Had_69
Had_70 = # "70" >= 1
Before_70 = # !Had_70
Had_71 = # "71" >= 1
Before_71 = # !Had_71
Had_72 = # "72" >= 1
Before_72 = # !Had_72
Had_73 = # "73" >= 1
Before_73 = # !Had_73
Had_74 = # "74" >= 1
Before_74 = # !Had_74
Had_75 = # "75" >= 1
Before_75 = # !Had_75
Had_76 = # "76" >= 1
Before_76 = # !Had_76
Had_77 = # "77" >= 1
Before_77 = # !Had_77
Had_78 = # "78" >= 1
Before_78 = # !Had_78
Had_79 = # "79" >= 1
Before_79 = # !Had_79
Had_80 = # "80" >= 1
Before_80 = # !Had_80
Had_81 = # "81" >= 1
Before_81 = # !Had_81
Had_82 = # "82" >= 1
Before_82 = # !Had_82
Had_83 = # "83" >= 1
Before_83 = # !Had_83
Had_84 = # "84" >= 1
Before_84 = # !Had_84
Had_85 = # "85" >= 1
Before_85 = # !Had_85
Had_86 = # "86" >= 1
Before_86 = # !Had_86
Had_87 = # "87" >= 1
Before_87 = # !Had_87
Had_88 = # "88" >= 1
Before_88 = # !Had_88
Had_89 = # "89" >= 1
Before_89 = # !Had_89
Had_90 = # "90" >= 1
Before_90 = # !Had_90
Had_91 = # "91" >= 1
Before_91 = # !Had_91
Had_92 = # "92" >= 1
Before_92 = # !Had_92
Had_93 = # "93" >= 1
Before_93 = # !Had_93
Had_94 = # "94" >= 1
Before_94 = # !Had_94
Had_95 = # "95" >= 1
Before_95 = # !Had_95
Had_96 = # "96" >= 1
Before_96 = # !Had_96
Had_97 = # "97" >= 1
Before_97 = # !Had_97
Had_98 = # "98" >= 1
Before_98 = # !Had_98
Had_99 = # "99" >= 1
Before_99 = # !Had_99
Had_100 = # "100" >= 1
Before_100 = # !Had_100
Had_101 = # "101" >= 1
Before_101 = # !Had_101
Had_102 = # "102" >= 1
Before_102 = # !Had_102
Had_103 = # "103" >= 1
Before_103 = # !Had_103
Had_104 = # "104" >= 1
Before_104 = # !Had_104
Had_105 = # "105" >= 1
Before_105 = # !Had_105
Had_106 = # "106" >= 1
Before_106 = # !Had_106
Had_107 = # "107" >= 1
Before_107 = # !Had_107
Had_108 = # "108" >= 1
Before_108 = # !Had_108
Had_109 = # "109" >= 1
Before_109 = # !Had_109
Had_110 = # "110" >= 1
Before_110 = # !Had_110
Had_111 = # "111" >= 1
Before_111 = # !Had_111
Had_112 = # "112" >= 1
Before_112 = # !Had_112
Had_113 = # "113" >= 1
Before_113 = # !Had_113
Had_114 = # "114" >= 1
Before_114 = # !Had_114
Had_115 = # "115" >= 1
Before_115 = # !Had_115
Had_116 = # "116" >= 1
Before_116 = # !Had_116
Had_117 = # "117" >= 1
Before_117 = # !Had_117
Had_118 = # "118" >= 1
Before_118 = # !Had_118
Had_119 = # "119" >= 1
Before_119 = # !Had_119
Had_120 = # "120" >= 1
Before_120 = # !Had_120
Had_121 = # "121" >= 1
Before_121 = # !Had_121
Had_122 = # "122" >= 1
Before_122 = # !Had_122
Had_123 = # "123" >= 1
Before_123 = # !Had_123
Had_124 = # "124" >= 1
Before_124 = # !Had_124
Had_125 = # "125" >= 1
Before_125 = # !Had_125
Had_126 = # "126" >= 1
Before_126 = # !Had_126
Had_127 = # "127" >= 1
Before_127 = # !Had_127
Had_128 = # "128" >= 1
Before_128 = # !Had_128
Had_129 = # "129" >= 1
Before_129 = # !Had_129
Had_130 = # "130" >= 1
Before_130 = # !Had_130
Had_131 = # "131" >= 1
Before_131 = # !Had_131
Had_132 = # "132" >= 1
Before_132 = # !Had_132
Had_133 = # "133" >= 1
Before_133 = # !Had_133
Had_134 = # "134" >= 1
Before_134 = # !Had_134
Had_135 = # "135" >= 1
Before_135 = # !Had_135
Had_136 = # "136" >= 1
Before_136 = # !Had_136
Had_137 = # "137" >= 1
Before_137 = # !Had_137
Had_138 = # "138" >= 1
Before_138 = # !Had_138
Had_139 = # "139" >= 1
Before_139 = # !Had_139
Had_140 = # "140" >= 1
Before_140 = # !Had_140
Had_141 = # "141" >= 1
Before_141 = # !Had_141
Had_142 = # "142" >= 1
Before_142 = # !Had_142
Had_143 = # "143" >= 1
Before_143 = # !Had_143
Had_144 = # "144" >= 1
Before_144 = # !Had_144
Had_145 = # "145" >= 1
Before_145 = # !Had_145
Had_146 = # "146" >= 1
Before_146 = # !Had_146
Had_147 = # "147" >= 1
Before_147 = # !Had_147
Had_148 = # "148" >= 1
Before_148 = # !Had_148
Had_149 = # "149" >= 1
Before_149 = # !Had_149
NEXT_0 = Seen && Before_0 == Out
NEXT_1 = Seen && Before_1 == Out
NEXT_2 = Seen && Before_2 == Out
NEXT_3 = Seen && Before_3 == Out
NEXT_4 = Seen && Before_4 == Out
NEXT_5 = Seen && Before_5 == Out
NEXT_6 = Seen && Before_6 == Out
NEXT_7 = Seen && Before_7 == Out
NEXT_8 = Seen && Before_8 == Out
NEXT_9 = Seen && Before_9 == Out
NEXT_10 = Seen && Before_10 == Out
NEXT_11 = Seen && Before_11 == Out
NEXT_12 = Seen && Before_12 == Out
NEXT_13 = Seen && Before_13 == Out
NEXT_14 = Seen && Before_14 == Out
NEXT_15 = Seen && Before_15 == Out
NEXT_16 = Seen && Before_16 == Out
NEXT_17 = Seen && Before_17 == Out
NEXT_18 = Seen && Before_18 == Out
NEXT_19 = Seen && Before_19 == Out
NEXT_20 = Seen && Before_20 == Out
NEXT_21 = Seen && Before_21 == Out
NEXT_22 = Seen && Before_22 == Out
NEXT_23 = Seen && Before_23 == Out
NEXT_24 = Seen && Before_24 == Out
NEXT_25 = Seen && Before_25 == Out
NEXT_26 = Seen && Before_26 == Out
NEXT_27 = Seen && Before_27 == Out
NEXT_28 = Seen && Before_28 == Out
NEXT_29 = Seen && Before_29 == Out
NEXT_30 = Seen && Before_30 == Out
NEXT_31 = Seen && Before_31 == Out
NEXT_32 = Seen && Before_32 == Out
NEXT_33 = Seen && Before_33 == Out
NEXT_34 = Seen && Before_34 == Out
NEXT_35 = Seen && Before_35 == Out
NEXT_36 = Seen && Before_36 == Out
NEXT_37 = Seen && Before_37 == Out
NEXT_38 = Seen && Before_38 == Out
NEXT_39 = Seen && Before_39 == Out
NEXT_40 = Seen && Before_40 == Out
NEXT_41 = Seen && Before_41 == Out
NEXT_42 = Seen && Before_42 == Out
NEXT_43 = Seen && Before_43 == Out
NEXT_44 = Seen && Before_44 == Out
NEXT_45 = Seen && Before_45 == Out
NEXT_46 = Seen && Before_46 == Out
NEXT_47 = Seen && Before_47 == Out
NEXT_48 = Seen && Before_48 == Out
NEXT_49 = Seen && Before_49 == Out
NEXT_50 = Seen && Before_50 == Out
NEXT_51 = Seen && Before_51 == Out
NEXT_52 = Seen && Before_52 == Out
NEXT_53 = Seen && Before_53 == Out
NEXT_54 = Seen && Before_54 == Out
NEXT_55 = Seen && Before_55 == Out
NEXT_56 = Seen && Before_56 == Out
NEXT_57 = Seen && Before_57 == Out
NEXT_58 = Seen && Before_58 == Out
NEXT_59 = Seen && Before_59 == Out
NEXT_60 = Seen && Before_60 == Out
NEXT_61 = Seen && Before_61 == Out
NEXT_62 = Seen && Before_62 == Out
NEXT_63 = Seen && Before_63 == Out
NEXT_64 = Seen && Before_64 == Out
NEXT_65 = Seen && Before_65 == Out
NEXT_66 = Seen && Before_66 == Out
NEXT_67 = Seen && Before_67 == Out
NEXT_68 = Seen && Before_68 == Out
NEXT_69 = Seen && Before_69 == Out
NEXT_70 = Seen && Before_70 == Out
NEXT_71 = Seen && Before_71 == Out
NEXT_72 = Seen && Before_72 == Out
NEXT_73 = Seen && Before_73 == Out
NEXT_74 = Seen && Before_74 == Out
NEXT_75 = Seen && Before_75 == Out
NEXT_76 = Seen && Before_76 == Out
NEXT_77 = Seen && Before_77 == Out
NEXT_78 = Seen && Before_78 == Out
NEXT_79 = Seen && Before_79 == Out
NEXT_80 = Seen && Before_80 == Out
NEXT_81 = Seen && Before_81 == Out
NEXT_82 = Seen && Before_82 == Out
NEXT_83 = Seen && Before_83 == Out
NEXT_84 = Seen && Before_84 == Out
NEXT_85 = Seen && Before_85 == Out
NEXT_86 = Seen && Before_86 == Out
NEXT_87 = Seen && Before_87 == Out
NEXT_88 = Seen && Before_88 == Out
NEXT_89 = Seen && Before_89 == Out
NEXT_90 = Seen && Before_90 == Out
NEXT_91 = Seen && Before_91 == Out
NEXT_92 = Seen && Before_92 == Out
NEXT_93 = Seen && Before_93 == Out
NEXT_94 = Seen && Before_94 == Out
NEXT_95 = Seen && Before_95 == Out
NEXT_96 = Seen && Before_96 == Out
NEXT_97 = Seen && Before_97 == Out
NEXT_98 = Seen && Before_98 == Out
NEXT_99 = Seen && Before_99 == Out
NEXT_100 = Seen && Before_100 == Out
NEXT_101 = Seen && Before_101 == Out
NEXT_102 = Seen && Before_102 == Out
NEXT_103 = Seen && Before_103 == Out
NEXT_104 = Seen && Before_104 == Out
NEXT_105 = Seen && Before_105 == Out
NEXT_106 = Seen && Before_106 == Out
NEXT_107 = Seen && Before_107 == Out
NEXT_108 = Seen && Before_108 == Out
NEXT_109 = Seen && Before_109 == Out
NEXT_110 = Seen && Before_110 == Out
NEXT_111 = Seen && Before_111 == Out
NEXT_112 = Seen && Before_112 == Out
NEXT_113 = Seen && Before_113 == Out
NEXT_114 = Seen && Before_114 == Out
NEXT_115 = Seen && Before_115 == Out
NEXT_116 = Seen && Before_116 == Out
NEXT_117 = Seen && Before_117 == Out
NEXT_118 = Seen && Before_118 == Out
NEXT_119 = Seen && Before_119 == Out
NEXT_120 = Seen && Before_120 == Out
NEXT_121 = Seen && Before_121 == Out
NEXT_122 = Seen && Before_122 == Out
NEXT_123 = Seen && Before_123 == Out
NEXT_124 = Seen && Before_124 == Out
NEXT_125 = Seen && Before_125 == Out
NEXT_126 = Seen && Before_126 == Out
NEXT_127 = Seen && Before_127 == Out
NEXT_128 = Seen && Before_128 == Out
NEXT_129 = Seen && Before_129 == Out
NEXT_130 = Seen && Before_130 == Out
NEXT_131 = Seen && Before_131 == Out
NEXT_132 = Seen && Before_132 == Out
NEXT_133 = Seen && Before_133 == Out
NEXT_134 = Seen && Before_134 == Out
NEXT_135 = Seen && Before_135 == Out
NEXT_136 = Seen && Before_136 == Out
NEXT_137 = Seen && Before_137 == Out
NEXT_138 = Seen && Before_138 == Out
NEXT_139 = Seen && Before_139 == Out
NEXT_140 = Seen && Before_140 == Out
NEXT_141 = Seen && Before_141 == Out
NEXT_142 = Seen && Before_142 == Out
NEXT_143 = Seen && Before_143 == Out
NEXT_144 = Seen && Before_144 == Out
NEXT_145 = Seen && Before_145 == Out
NEXT_146 = Seen && Before_146 == Out
NEXT_147 = Seen && Before_147 == Out
NEXT_148 = Seen && Before_148 == Out
NEXT_149 = Seen && Before_149 == Out
NEXT_EOS = Seen && # !Seen <= Out   // every input token is output
output NEXT_0, NEXT_1, NEXT_2, NEXT_3, NEXT_4, NEXT_5, NEXT_6, NEXT_7, NEXT_8, NEXT_9, NEXT_10, NEXT_11, NEXT_12, NEXT_13, NEXT_14, NEXT_15, NEXT_16, NEXT_17, NEXT_18, NEXT_19, NEXT_20, NEXT_21, NEXT_22, NEXT_23, NEXT_24, NEXT_25, NEXT_26, NEXT_27, NEXT_28, NEXT_29, NEXT_30, NEXT_31, NEXT_32, NEXT_33, NEXT_34, NEXT_35, NEXT_36, NEXT_37, NEXT_38, NEXT_39, NEXT_40, NEXT_41, NEXT_42, NEXT_43, NEXT_44, NEXT_45, NEXT_46, NEXT_47, NEXT_48, NEXT_49, NEXT_50, NEXT_51, NEXT_52, NEXT_53, NEXT_54, NEXT_55, NEXT_56, NEXT_57, NEXT_58, NEXT_59, NEXT_60, NEXT_61, NEXT_62, NEXT_63, NEXT_64, NEXT_65, NEXT_66, NEXT_67, NEXT_68, NEXT_69, NEXT_70, NEXT_71, NEXT_72, NEXT_73, NEXT_74, NEXT_75, NEXT_76, NEXT_77, NEXT_78, NEXT_79, NEXT_80, NEXT_81, NEXT_82, NEXT_83, NEXT_84, NEXT_85, NEXT_86, NEXT_87, NEXT_88, NEXT_89, NEXT_90, NEXT_91, NEXT_92, NEXT_93, NEXT_94, NEXT_95, NEXT_96, NEXT_97, NEXT_98, NEXT_99, NEXT_100, NEXT_101, NEXT_102, NEXT_103, NEXT_104, NEXT_105, NEXT_106, NEXT_107, NEXT_108, NEXT_109, NEXT_110, NEXT_111, NEXT_112, NEXT_113, NEXT_114, NEXT_115, NEXT_116, NEXT_117, NEXT_118, NEXT_119, NEXT_120, NEXT_121, NEXT_122, NEXT_123, NEXT_124, NEXT_125, NEXT_126, NEXT_127, NEXT_128, NEXT_129, NEXT_130, NEXT_131, NEXT_132, NEXT_133, NEXT_134, NEXT_135, NEXT_136, NEXT_137, NEXT_138, NEXT_139, NEXT_140, NEXT_141, NEXT_142, NEXT_143, NEXT_144, NEXT_145, NEXT_146, NEXT_147, NEXT_148, NEXT_149, NEXT_EOS
