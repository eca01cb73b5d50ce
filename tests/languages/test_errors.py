"""Every kind of user error: its message, its location, and how it is shown.

Each error is a :class:`CraspError` whose text reads ``FILE:LINE:COL: error: MESSAGE``,
then the source line and a caret under the offending span, then what was expected;
several errors in one file are all reported, sorted by position, and counted.
"""

from __future__ import annotations

import pytest

from crasp_compiler import (
    CraspError,
    Diagnostic,
    Span,
    accepts,
    check_tokens,
    interpret,
    load_program,
    parse_program,
    with_alphabet,
)
from crasp_compiler.errors import display_line
from crasp_compiler.languages.crasp.syntax import MAX_DEPTH
from crasp_compiler.syntax import MAX_ERRORS

DYCK = """// Dyck-1
C_open = # "("
C_close = # ")"
V = C_open < C_close
D = # V == 0 && C_open == C_close
"""


def error(text: str, filename: str = "prog.cr", **kwargs) -> CraspError:
    with pytest.raises(CraspError) as caught:
        parse_program(text, filename, **kwargs)
    err = caught.value
    assert type(err) is CraspError
    return err


def single(text: str, **kwargs) -> Diagnostic:
    """The one diagnostic a program produces."""
    err = error(text, **kwargs)
    assert len(err.diagnostics) == 1, str(err)
    return err.diagnostics[0]


def where(diag: Diagnostic) -> tuple[int, int, int]:
    """(line, column, caret width) of a one-line span."""
    assert diag.span is not None and diag.span.end_line == diag.span.line
    return diag.span.line, diag.span.column, diag.span.end_column - diag.span.column


def caret(err: CraspError, n: int = 0) -> tuple[str, str]:
    """The source line and caret line shown for the n-th diagnostic."""
    lines = err.diagnostics[n].format(err.source, err.filename).split("\n")
    return lines[1], lines[2]


# ------------------------------------------------------------------ formatting


def test_full_format_of_one_error():
    err = error('C_open = # "("\nB = C_opn > 0\n', "dyck.cr")
    assert str(err) == (
        "dyck.cr:2:5: error: undefined name 'C_opn'\n"
        "    B = C_opn > 0\n"
        "        ^^^^^\n"
        "  did you mean 'C_open'?"
    )
    assert err.format() == str(err)


def test_several_errors_are_counted_at_the_end():
    err = error("A = X\nB = Y\n")
    text = str(err)
    assert text.startswith("prog.cr:1:5: error: undefined name 'X'")
    assert "\nprog.cr:2:5: error: undefined name 'Y'" in text
    assert text.endswith("\n2 errors")


def test_caret_width_covers_the_span():
    err = error('A = # "a"\nB = A && # "b"\n')
    assert caret(err) == ('    B = A && # "b"', "        ^")
    err = error('A = # "a"\nB = "b" && (A + 1)\n')
    assert caret(err) == ('    B = "b" && (A + 1)', "               ^^^^^^^")


def test_caret_after_tabs_and_wide_characters():
    """Columns count characters; a tab is shown as one space so the caret lines up."""
    err = error('A =\t# "a"\nB =\t"∧∧" ∧\tA\n')
    line, mark = caret(err)
    assert line == '    B = "∧∧" ∧ A'
    assert mark == "    " + " " * 11 + "^"
    assert err.diagnostics[0].span.column == 12


def test_caret_lines_up_under_wide_characters():
    """CJK characters and emoji take two terminal cells; the caret counts cells."""
    err = error('A = "漢字" && 😀x')
    assert err.diagnostics[0].span.column == 13
    assert caret(err) == ('    A = "漢字" && 😀x', "    " + " " * 14 + "^^")
    err = error('A = "e\u0301" && Bad')  # a combining accent takes no cell
    assert caret(err)[1] == "    " + " " * 11 + "^^^"


def test_crlf_and_stray_control_characters_are_not_shown():
    err = error('A = # "a"\r\nB = A +\r\n')
    line, mark = caret(err)
    assert line == "    B = A +"
    assert mark == "           ^"
    err = error("A = 1\x0cB = 2 3\n")  # a form feed is not a line break
    assert err.diagnostics[0].span.line == 1
    assert caret(err) == ("    A = 1 B = 2 3", "          ^")  # at the B


def test_unprintable_characters_in_messages_are_escaped():
    err = error('A = "\u2028" && "b"\n')
    assert "\u2028" not in str(err)
    assert "\\u2028" in str(err)
    assert all(line.isprintable() for line in str(err).split("\n"))


def test_compiling_a_program_without_an_alphabet_points_at_its_output():
    """A program that tests no token and declares no alphabet parses (the interpreter
    reads the empty input) but does not compile: the error is at the deciding output."""
    from crasp_compiler.languages.crasp.compile import compile_program

    text = "P(i) := i % 3 == 0\nC = # P\nQ = C > 1\noutput C, Q\n"
    program = parse_program(text, "pos.cr")
    assert program.alphabet == () and interpret(program, []).values["Q"] == [False]
    with pytest.raises(CraspError) as caught:
        compile_program(program)
    (diagnostic,) = caught.value.diagnostics
    assert diagnostic.span is not None and diagnostic.span.line == 2  # C, the first output
    assert str(caught.value).startswith("pos.cr:2:1: error: the program tests no token")
    assert "C = # P\n    ^" in str(caught.value) and "--alphabet" in str(diagnostic.hint)
    model = compile_program(with_alphabet(program, ["a"]))
    assert model.vocab == ["<bos>", "a"]


def test_error_without_location_or_source():
    assert str(CraspError("it broke")) == "crasp: error: it broke"
    assert str(CraspError("bad", filename="f.cr")) == "f.cr: error: bad"
    diag = Diagnostic("here", Span(1, 3, 1, 5), "expected x")
    assert str(CraspError([diag], None, "f.cr")) == "f.cr:1:3: error: here\n  expected x"
    assert str(CraspError([diag], "ab", "f.cr")) == (
        "f.cr:1:3: error: here\n    ab\n      ^\n  expected x"
    )


def test_display_line():
    assert display_line("a\tb\r") == "a b"
    assert display_line("x\x00y") == "x?y"


# ------------------------------------------------------------------ syntax errors


@pytest.mark.parametrize(
    ("text", "at", "message", "expected"),
    [
        ("A = 1 +\n", (1, 8, 1), "unexpected end of line", "expected an expression"),
        ("A = 1 2\n", (1, 7, 1), "unexpected '2'", "expected an operator or the end of"),
        ("A = 1 * )", (1, 9, 1), "unexpected ')'", "expected an expression"),
        ("A = @", (1, 5, 1), "unexpected character '@'", "expected an expression"),
        ('A = "ab', (1, 5, 1), "unterminated token literal", "expected an expression"),
        ("A = (1", (1, 7, 1), "unexpected end of input", "expected ')'"),
        ("A = #[j <= i", (1, 13, 1), "unexpected end of input", "expected ',' or ']'"),
        ("A = min(1)", (1, 10, 1), "unexpected ')'", "expected ','"),
        ("A := 1 ? 2", (1, 11, 1), "unexpected end of input", "expected ':'"),
        ("12", (1, 1, 2), "unexpected '12'", "expected a statement"),
        ("\n\n  B", (3, 4, 1), "unexpected end of input", "expected '(', '=' or ':='"),
        (
            "alphabet",
            (1, 9, 1),
            "unexpected end of input",
            "expected '{', 'range' or a token literal such as \"a\"",
        ),
        ("output", (1, 7, 1), "unexpected end of input", "expected a name"),
        ("A(i) := #[j <= i, ] Q_a(j)", (1, 19, 1), "unexpected ']'", "a position variable"),
        ("A = x1 y2", (1, 8, 2), "unexpected 'y2'", "expected an operator"),
    ],
)
def test_syntax_error(text, at, message, expected):
    diag = single(text)
    assert where(diag) == at
    assert diag.message.startswith(message)
    assert (
        diag.hint.startswith(expected) if expected.startswith("expected") else expected in diag.hint
    )


def test_syntax_error_names_keywords_not_internal_terminals():
    for text in ("pred x1", "12", "A(i) := #[j <= i, ] Q_a(j)", "A = 1 2"):
        hint = single(text).hint
        assert "_define" not in hint and "__ANON" not in hint and "_NL" not in hint
    assert "`alphabet`, `accept`, `output`, `predicate`, `#import`" in single("12").hint


def test_long_token_is_shortened_in_the_message():
    diag = single('A = 1 "' + "x" * 100 + '"')
    assert len(diag.message) < 50 and "…" in diag.message
    assert where(diag) == (1, 7, 102)  # the caret still covers all of it


def test_unclosed_bracket_is_reported_where_it_opens():
    err = error("A = (1 +\n  2\nB = 2 3\nC = 1\n")
    assert [where(d)[:2] for d in err.diagnostics] == [(1, 5), (3, 7)]
    first = err.diagnostics[0]
    assert first.message == "'(' is never closed"
    assert first.hint == "expected ')' before the next statement, on line 3"


def test_missing_bracket_inside_a_statement_gets_a_note():
    diag = single("A = (1 +\n  2 3\n")
    assert where(diag)[:2] == (2, 5)
    assert "note the '(' at line 1, column 5 is still open: is a ')' missing?" in diag.hint
    diag = single("A = (1\n  2)\n")  # closed on the line of the error: no note
    assert where(diag)[:2] == (2, 3)
    assert "note" not in diag.hint


def test_every_syntax_error_is_reported_sorted_by_line():
    err = error('A = # "a" +\nB = (1\nC = 1 2\nD = "a"\nE = )\n')
    lines = [d.span.line for d in err.diagnostics]
    assert lines == [1, 2, 3, 5]
    assert str(err).endswith("4 errors")


def test_syntax_errors_are_capped():
    err = error("A = )\n" * (MAX_ERRORS + 10))
    assert len(err.diagnostics) == MAX_ERRORS


def test_syntax_errors_stop_before_checking():
    """A file with syntax errors reports only those, not checker errors on other lines."""
    err = error("A = Undefined\nB = 1 2\n")
    assert [d.message for d in err.diagnostics] == ["unexpected '2'"]


def test_too_deep_expression():
    diag = single("A = " + "(" * 300 + '"a"' + ")" * 300)
    assert diag.message == f"expression nested too deeply (more than {MAX_DEPTH} levels)"
    assert diag.hint == "split it into several definitions"
    parse_program("A = " + "(" * 50 + '"a"' + ")" * 50)


# ------------------------------------------------------------------ names


def test_undefined_name_with_suggestion():
    diag = single('C_open = # "("\nB = C_opne > 0')
    assert diag.message == "undefined name 'C_opne'"
    assert diag.hint == "did you mean 'C_open'?"
    assert where(diag) == (2, 5, 6)


def test_undefined_name_without_suggestion():
    diag = single('A = # "a"\nB = Zzz > 0')
    assert diag.message == "undefined name 'Zzz'"
    assert diag.hint == "expected a name defined on an earlier line"


def test_redefinition():
    diag = single('A = # "a"\nB = A > 0\nA = # "b"')
    assert diag.message == "'A' is already defined (first defined at line 1)"
    assert where(diag) == (3, 1, 1)


def test_use_before_definition():
    diag = single('B = A > 0\nA = # "a"')
    assert diag.message == "'A' is used before its definition at line 2"
    assert "straight-line" in diag.hint
    assert where(diag) == (1, 5, 1)


def test_self_reference():
    diag = single("A(i) := #[j <= i] A(j) > 0")
    assert diag.message == "'A' refers to itself"
    assert where(diag) == (1, 19, 1)


def test_failed_definition_does_not_cascade():
    """A definition with an error is still known: its uses report nothing more."""
    err = error("A = # 1\nB = A > 0\nC = B && A > 1\n")
    assert len(err.diagnostics) == 1


def test_failed_predicate_does_not_cascade():
    err = error('predicate P(i, j) := 1\nA = #[P] "a" > 0\npredicate Q(i) := i > 2\nB = Q\n')
    assert [d.span.line for d in err.diagnostics] == [1, 3]


# ------------------------------------------------------------------ sorts


def test_count_where_boolean_is_needed():
    diag = single('A = # "a"\nB = A && "b"')
    assert diag.message == "`and` needs a Boolean, but this is a count"
    assert diag.hint == "compare it, e.g. `C > 0`, to get a Boolean"
    assert where(diag) == (2, 5, 1)
    assert single("A = # 1").message == "`#` needs a Boolean, but this is a count"
    assert single("A = !(1 + 2)").message == "`!` needs a Boolean, but this is a count"


def test_boolean_where_count_is_needed():
    diag = single('A = "a"\nB = A + 1 > 0')
    assert diag.message == "`+` needs a count, but this is a Boolean"
    assert "`P ? 1 : 0`" in diag.hint
    assert single('A = "a" > 0').message == "a comparison needs a count, but this is a Boolean"
    assert single('A = min("a", 1) > 0').message == "`min` needs a count, but this is a Boolean"
    assert single('A = -"a" > 0').message == "`-` needs a count, but this is a Boolean"


def test_product_of_two_counts():
    diag = single('A = # "a"\nB = # "b"\nC = A * B > 0')
    assert diag.message == "C-RASP multiplies only by an integer constant"
    assert "product of two counts" in diag.hint
    assert where(diag) == (3, 5, 5)
    parse_program('A = # "a"\nC = 3 * A > A * -2')
    # A constant factor may be a product of constants, or parenthesised.
    program = parse_program('A = # "a"\nC = 2 * 3 * A > (2) * A * -1')
    assert accepts(program, ["a"])


def test_conditional_sorts():
    diag = single('A = "a" ? 1 : "b"')
    assert diag.message == "both branches of a conditional need the same sort"
    assert diag.hint == "the first branch is a count, the second a bool"
    assert single("A = (1 ? 1 : 2) > 0").message == (
        "the condition needs a Boolean, but this is a count"
    )


# ------------------------------------------------------------------ predicates and relations


def test_unknown_predefined_import():
    diag = single('#import foo\nA = "a"')
    assert diag.message == "unknown predefined predicate 'foo'"
    assert diag.hint == "expected one of: pos_even, pred, pred4"
    assert where(diag) == (1, 9, 3)


def test_unimported_predicate_and_relation():
    diag = single('A = pos_even && "a"')
    assert diag.message == "predicate 'pos_even' is not imported"
    assert diag.hint == "add `#import pos_even` first"
    diag = single('A = #[pred] "a" > 0')
    assert diag.message == "relation 'pred' is not imported"
    assert where(diag) == (1, 7, 4)
    parse_program('#import pred\n#import pos_even\nA = #[pred] "a" > 0 && pos_even')


def test_non_local_relation():
    diag = single("A(i) := #[j <= i, j < i - 2] Q_a(j) > 0")
    assert diag.message == (
        "this relation holds for arbitrarily distant positions, so it is not local"
    )
    assert "local relations" in diag.hint
    assert where(diag) == (1, 19, 9)


def test_non_translation_invariant_relation():
    diag = single("A(i) := #[j <= i, j + j == i] Q_a(j) > 0")
    assert diag.message.startswith("this relation is not translation-invariant")


def test_modulus_in_a_binary_relation():
    diag = single("A(i) := #[j <= i, j % 2 == i % 2] Q_a(j) > 0")
    assert diag.message == "a relation using `%` is periodic in i - j, not local"


def test_non_periodic_predicate():
    diag = single("A = i == 0")
    assert diag.message == "this positional predicate is not periodic"
    assert "`#true <= 1`" in diag.hint
    assert where(diag) == (1, 5, 6)
    assert single("predicate P(i) := i > 3\nA = P").message == (
        "this positional predicate is not periodic"
    )


def test_relation_that_never_holds():
    diag = single("A(i) := #[j <= i, j == i + 1] Q_a(j) > 0")
    assert diag.message == "this relation never holds for j <= i"
    assert "`j == i - 1`" in diag.hint
    diag = single("A(i) := #[j < i, j == i] Q_a(j) > 0")
    assert diag.message == "with j < i this relation never holds"


def test_predicate_body_that_is_not_a_relation():
    for body in ("1", '"a"', "min(1, 2)", "j == i - 1 ? j == i : j == i - 2"):
        diag = single(f'predicate P(i, j) := {body}\nA = #[P] "a" > 0')
        assert diag.message == "expected a relation between j and i", body


def test_predicate_of_the_wrong_arity():
    assert single('predicate P(i) := i % 2 == 0\nA = #[P] "a" > 0').message == (
        "'P' is a predicate on one position; `#[...]` needs a relation between two"
    )
    assert single("predicate R(i, j) := j == i - 1\nA = R").message == (
        "'R' is a relation between two positions; use it as `#[R] P`"
    )
    assert single('A = #[foo] "a" > 0').message == "unknown relation 'foo'"


def test_position_variables():
    assert single("A(i) := Q_a(j)").message == "unknown position variable 'j'"
    assert single("A(i) := #[j <= i] Q_a(i) > 0").message == (
        "inside a count over j, C-RASP cannot refer to the outer position i"
    )
    assert single("A(i) := #[j <= k] Q_a(j) > 0").message == (
        "the count must range up to the current position i"
    )
    assert single("A(i) := #[i <= i] Q_a(i) > 0").message == (
        "the counted position needs a new variable, not 'i'"
    )


def test_limits_on_constants_periods_and_offsets():
    assert single('A = # "a" > 99999999999').message == (
        "integer constant 99999999999 is too large"
    )
    assert single("A = i % 100000 == 0").message == "modulus 100000 is too large"
    assert single("A = i % 9973 == 0 && i % 9967 == 1").message == (
        "the combined period 99400891 is too large"
    )
    assert single("A(i) := #[j <= i, j == i - 20000] Q_a(j) > 0").message == (
        "offset 20000 is too large"
    )
    assert single("A = i % 0 == 0").message == "the modulus must be positive"


# ------------------------------------------------------------------ alphabet and outputs


def test_token_outside_declared_alphabet():
    diag = single('alphabet "a", "b"\nA = # "c" > 0')
    assert diag.message == "token 'c' is not in the declared alphabet"
    assert diag.hint == "expected one of: 'a', 'b'"
    assert where(diag) == (2, 7, 3)
    diag = single('alphabet {"a"}\nA(i) := #[j <= i] Q_z(j) > 0')
    assert diag.message == "token 'z' is not in the declared alphabet"


def test_alphabet_declaration_errors():
    assert single('alphabet "a"\nalphabet "b"\nA = "a"').message == "the alphabet is declared twice"
    diag = single('alphabet "a" "b" "a"\nA = "a"')
    assert diag.message == "the alphabet lists 'a' twice"
    assert where(diag) == (1, 18, 3)
    assert single('A = ""').message == 'token literal "" is empty or contains whitespace'
    assert single('A = "a b"').message == 'token literal "a b" is empty or contains whitespace'
    assert (
        single('A = "a\x00"').message == 'token literal "a\x00" contains an unprintable character'
    )


def test_accept_of_a_count():
    diag = single('A = # "a"\naccept A')
    assert diag.message == "`accept` needs a Boolean definition; 'A' is a count"
    assert where(diag) == (2, 8, 1)


def test_undefined_output_and_accept():
    diag = single('A = "a"\noutput A, Bb')
    assert diag.message == "output 'Bb' is not defined"
    assert where(diag) == (2, 11, 2)
    diag = single('Total = "a"\naccept Totl')
    assert diag.message == "`accept` names 'Totl', which is not defined"
    assert diag.hint == "did you mean 'Total'?"
    assert single('A = "a"\naccept A\naccept A').message == "`accept` is given twice"


def test_no_boolean_to_accept():
    diag = single('A = # "a"')
    assert diag.message == "the program has no Boolean definition to accept with"
    assert diag.span is None
    parse_program('A = # "a"\noutput A')  # named outputs need no acceptance


@pytest.mark.parametrize("text", ["", "\n\n", "// only a comment\n", ";;"])
def test_empty_program(text):
    err = error(text, "empty.cr")
    assert (
        str(err)
        == 'empty.cr: error: the program is empty\n  expected definitions such as `C = # "a"`'
    )


def test_several_errors_all_reported_sorted_by_line():
    text = (
        "output Missing\n"  # found last by the checker, but shown first
        "B = X > 0\n"
        'A = # "a" && 1\n'
        "C = A * A > 0\n"
        "#import nope\n"
    )
    err = error(text)
    positions = [(d.span.line, d.span.column) for d in err.diagnostics]
    assert positions == sorted(positions)
    assert [p[0] for p in positions] == [1, 2, 3, 3, 4, 5]
    assert str(err).endswith("6 errors")
    for diag in err.diagnostics:
        assert f"prog.cr:{diag.span.line}:{diag.span.column}: error: " in str(err)


# ------------------------------------------------------------------ alphabet overrides


def test_alphabet_override_missing_a_used_token():
    with pytest.raises(CraspError) as caught:
        parse_program(DYCK, "dyck.cr", alphabet=["(", "x"])
    assert str(caught.value) == (
        "dyck.cr: error: the alphabet lacks token(s) the program tests: ')'"
    )


def test_alphabet_override_errors():
    program = parse_program(DYCK, "dyck.cr")
    with pytest.raises(CraspError, match="the alphabet is empty"):
        with_alphabet(program, [])
    with pytest.raises(CraspError, match=r"dyck.cr: error: alphabet symbol 'a b' contains whi"):
        with_alphabet(program, ["(", ")", "a b"])
    with pytest.raises(CraspError, match=r"alphabet symbol '' is empty"):
        with_alphabet(program, ["(", ")", ""])
    with pytest.raises(CraspError, match=r"alphabet symbol '\\x00' contains an unprintable"):
        with_alphabet(program, ["(", ")", "\x00"])
    wider = with_alphabet(program, ["(", ")", "x", "("])
    assert wider.alphabet == ("(", ")", "x")
    assert accepts(wider, ["x", "(", ")"])


# ------------------------------------------------------------------ inputs


def test_input_token_outside_the_alphabet():
    program = parse_program(DYCK)
    with pytest.raises(CraspError) as caught:
        interpret(program, ["(", "x", ")"])
    assert str(caught.value) == (
        "input: error: token 'x' at position 1 is not in the alphabet {'(', ')'}"
    )
    with pytest.raises(CraspError, match=r"token '\(\(' at position 0"):
        accepts(program, ["((", ")"])
    with pytest.raises(CraspError, match="position 2"):
        check_tokens(program, ["(", ")", ""])
    check_tokens(program, [])


# ------------------------------------------------------------------ files


def test_load_program_errors(tmp_path):
    with pytest.raises(CraspError, match="cannot read program"):
        load_program(tmp_path / "missing.cr")
    with pytest.raises(CraspError, match="cannot read program"):
        load_program(tmp_path)
    bad = tmp_path / "latin1.cr"
    bad.write_bytes(b'A = "\xe9"\n')
    with pytest.raises(CraspError, match="cannot read program"):
        load_program(bad)
    bom = tmp_path / "bom.crasp"
    bom.write_bytes('\ufeffA = "a"\n'.encode())
    assert load_program(bom).alphabet == ("a",)
    broken = tmp_path / "broken.cr"
    broken.write_text("A = 1 2\n", encoding="utf-8")
    with pytest.raises(CraspError) as caught:
        load_program(broken)
    assert str(caught.value).startswith(f"{broken}:1:7: error: unexpected '2'")
