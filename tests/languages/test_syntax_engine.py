"""The one syntax engine (:mod:`crasp_compiler.syntax.engine`) drives both languages.

The same recovery behaviours are checked for C-RASP and for PCOC through their
configurations (:mod:`crasp_compiler.languages.crasp.syntax`,
:mod:`crasp_compiler.languages.pcoc.syntax`): every syntax error reported and sorted, a
bracket never closed reported where it opens (at a new statement and at the end of the
input), a missing bracket inside a statement noted, no error invented by the recovery,
the error cap, the depth guard, U+2212 read as a minus, and end-of-line errors placed
just after the code.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp_compiler.errors import CraspError
from crasp_compiler.languages.crasp.program import parse_program
from crasp_compiler.languages.crasp.syntax import CRASP_SYNTAX
from crasp_compiler.languages.crasp.syntax import MAX_DEPTH as CRASP_DEPTH
from crasp_compiler.languages.crasp.syntax import parse_tree as crasp_tree
from crasp_compiler.languages.pcoc import parse_program as parse_pcoc
from crasp_compiler.languages.pcoc.syntax import MAX_DEPTH as PCOC_DEPTH
from crasp_compiler.languages.pcoc.syntax import PCOC_SYNTAX
from crasp_compiler.languages.pcoc.syntax import parse_tree as pcoc_tree
from crasp_compiler.syntax import MAX_ERRORS, Frontend

H = "input x bound 1e9\noutput x\n"  # PCOC programs below start at line 3


class Lang:
    """How the tests write programs in each language: ``line(name, expr)`` is a statement
    assigning ``expr``, ``wrap(lines)`` the program around such lines (PCOC: a round),
    whose first line is line ``top + 1``."""

    def __init__(self, name, frontend, parse, wrap, line, top, depth, depth_message):
        self.name, self.frontend, self.parse = name, frontend, parse
        self.wrap, self.line, self.top = wrap, line, top
        self.depth, self.depth_message = depth, depth_message

    def __repr__(self) -> str:
        return self.name

    def errors(self, *lines: str) -> list[tuple[str, tuple[int, int], str | None]]:
        """(message, (line, column), hint) of every diagnostic of the program ``lines``."""
        text = self.wrap("\n".join(lines) + "\n")
        with pytest.raises(CraspError) as caught:
            self.parse(text, "f")
        return [(d.message, (d.span.line, d.span.column), d.hint) for d in caught.value.diagnostics]


CRASP = Lang(
    "crasp",
    CRASP_SYNTAX,
    crasp_tree,
    lambda body: body,
    lambda name, expr: f"{name} = {expr}",
    0,
    CRASP_DEPTH,
    "expression nested too deeply (more than {} levels)",
)
PCOC = Lang(
    "pcoc",
    PCOC_SYNTAX,
    pcoc_tree,
    lambda body: H + "round {\n" + body + "}\n",
    lambda name, expr: f"  {name} = {expr}",
    3,  # the lines of H and `round {`
    PCOC_DEPTH,
    "nested too deeply (more than {} levels)",
)
LANGS = [CRASP, PCOC]


def test_one_engine_configured_per_language():
    assert isinstance(CRASP_SYNTAX, Frontend) and isinstance(PCOC_SYNTAX, Frontend)
    assert CRASP_SYNTAX.grammar == "crasp.lark" and PCOC_SYNTAX.grammar == "pcoc.lark"
    assert CRASP_SYNTAX.lark is not PCOC_SYNTAX.lark
    assert CRASP_SYNTAX.lark is CRASP_SYNTAX.lark  # compiled once
    # newlines continue a statement inside every C-RASP bracket, inside PCOC's ( ) only:
    # PCOC's braces hold statements, and recovery keeps them so blocks stay balanced
    assert CRASP_SYNTAX.continuation == frozenset("([{") and CRASP_SYNTAX.kept == frozenset()
    assert PCOC_SYNTAX.continuation == frozenset("(") and PCOC_SYNTAX.kept == frozenset("{}")


@pytest.mark.parametrize("lang", LANGS, ids=repr)
def test_every_syntax_error_is_reported_in_order(lang):
    top = lang.top
    found = lang.errors(lang.line("a", "x +"), lang.line("b", "2 3"), lang.line("c", ")"))
    assert [(m, at) for m, at, _ in found] == [
        ("unexpected end of line", (top + 1, len(lang.line("a", "x +")) + 1)),
        ("unexpected '3'", (top + 2, len(lang.line("b", "2 ")) + 1)),
        ("unexpected ')'", (top + 3, len(lang.line("c", "")) + 1)),
    ]
    assert found[0][2].startswith("expected an expression")
    assert found[1][2] == "expected an operator or the end of the statement"


@pytest.mark.parametrize("lang", LANGS, ids=repr)
def test_a_bracket_never_closed_before_a_new_statement(lang):
    top = lang.top
    found = lang.errors(lang.line("a", "min(x,"), "  1", lang.line("b", "2 3"))
    (message, at, hint), (second, at2, _) = found
    assert message == "'(' is never closed"
    assert at == (top + 1, len(lang.line("a", "min(")))
    before = "the next statement, on line" if lang is CRASP else "line"
    assert hint == f"expected ')' before {before} {top + 3}"
    # the lines from the bracket on are blanked, and the next error is found
    assert (second, at2) == ("unexpected '3'", (top + 3, len(lang.line("b", "2 ")) + 1))


@pytest.mark.parametrize("lang", LANGS, ids=repr)
def test_a_bracket_never_closed_before_the_end_of_the_input(lang):
    text = lang.line("a", "min(x,") + "\n  1\n"
    if lang is PCOC:
        text = H + "round {\n" + text  # the round's `{` is open too: the `(` is innermost
    with pytest.raises(CraspError) as caught:
        lang.parse(text, "f")
    (diag,) = caught.value.diagnostics
    assert diag.message == "'(' is never closed"
    assert diag.hint == "expected ')' before the end of the input"
    # on the line of the end of the input, the end of the input is the error
    with pytest.raises(CraspError) as caught:
        lang.parse(text.replace(",\n  1\n", ", 1"), "f")
    (diag,) = caught.value.diagnostics
    assert diag.message == "unexpected end of input"
    assert diag.hint.startswith("expected ")
    assert "',' or ')'" in diag.hint or "`,` or `)`" in diag.hint


def test_a_block_never_closed_before_the_end_of_the_input():
    with pytest.raises(CraspError) as caught:
        parse_pcoc(H + "round {\n  x = 1\n", "f")
    (diag,) = caught.value.diagnostics
    assert (diag.message, diag.span.line, diag.span.column) == ("'{' is never closed", 3, 7)


@pytest.mark.parametrize("lang", LANGS, ids=repr)
def test_a_missing_bracket_inside_a_statement_gets_a_note(lang):
    top = lang.top
    (first, *_rest) = lang.errors(lang.line("a", "(x +"), "  2 3", "  + 4)")
    message, at, hint = first
    assert (message, at) == ("unexpected '3'", (top + 2, 5))
    column = len(lang.line("a", "("))
    assert hint.endswith(
        f"note the '(' at line {top + 1}, column {column} is still open: is a ')' missing?"
    )
    # closed on the line of the error: no note
    ((message, at, hint),) = lang.errors(lang.line("a", "(x +"), "  2 3)")
    assert message == "unexpected '3'" and "note" not in hint


def test_a_misspelled_keyword_gets_did_you_mean():
    """The word before an error that is a near miss of one of the grammar's words is
    named, in both languages; a name far from every keyword gets no such note."""
    ((message, at, hint),) = CRASP.errors('alphabt "a"')
    assert (message, at) == ("unexpected '\"a\"'", (1, 9))
    assert hint.endswith("'alphabt' is not a keyword: did you mean 'alphabet'?")
    ((_, _, hint),) = CRASP.errors("predicat near(i, j) := j == i - 1")
    assert hint.endswith("did you mean 'predicate'?")
    ((_, _, hint),) = PCOC.errors("  y = recvv x from i - 1 default 0")
    assert hint.endswith("'recvv' is not a keyword: did you mean 'recv'?")
    ((_, _, hint),) = CRASP.errors('Zebra "a"')
    assert "did you mean" not in hint
    assert {"alphabet", "predicate"} <= set(CRASP_SYNTAX.keywords)
    assert {"send", "recv", "round", "default"} <= set(PCOC_SYNTAX.keywords)


def test_a_block_brace_gets_no_note():
    ((message, _, hint),) = PCOC.errors("  x = 2 3")
    assert message == "unexpected '3'"
    assert hint == "expected an operator or the end of the statement"


@pytest.mark.parametrize("lang", LANGS, ids=repr)
def test_the_recovery_invents_no_error(lang):
    """The offending line held the closing bracket: blanking it leaves the bracket open,
    which is no error of the program (C-RASP and PCOC both reported one before)."""
    top = lang.top
    found = lang.errors(lang.line("a", "min(x, 1"), "  2)", lang.line("b", "1"))
    assert found == [
        (
            "unexpected '2'",
            (top + 2, 3),
            "expected an operator or ')' or ','"
            if lang is CRASP
            else "expected an operator or `)` or `,`",
        )
    ]


@pytest.mark.parametrize("lang", LANGS, ids=repr)
def test_syntax_errors_are_capped(lang):
    found = lang.errors(*[lang.line("a", ")")] * (MAX_ERRORS + 5))
    assert len(found) == MAX_ERRORS == lang.frontend.max_errors


@pytest.mark.parametrize("lang", LANGS, ids=repr)
def test_every_statement_nested_too_deeply_is_reported(lang):
    """One diagnostic per top-level statement (a PCOC round counts its body)."""
    deep = "-" * (lang.depth + 30) + "x"
    if lang is CRASP:
        text = f"A = {deep}\nB = 1\nC = {deep}\n"
    else:
        text = H + f"round {{ x = {deep} }}\nround {{ x = 1 }}\nround {{ x = {deep} }}\n"
    with pytest.raises(CraspError) as caught:
        lang.parse(text, "f")
    found = caught.value.diagnostics
    assert [d.span.line for d in found] == [lang.top + 1, lang.top + 3] if lang is CRASP else [3, 5]
    assert {d.message for d in found} == {lang.depth_message.format(lang.depth)}
    lang.parse(lang.wrap(lang.line("a", "-" * (lang.depth - 10) + "x") + "\n"), "f")


@pytest.mark.parametrize("lang", LANGS, ids=repr)
def test_the_minus_sign_is_read_as_minus(lang):
    text = lang.wrap(lang.line("a", "x − 1") + "\n")
    assert lang.parse(text, "f") == lang.parse(text.replace("−", "-"), "f")


@pytest.mark.parametrize("lang", LANGS, ids=repr)
def test_an_end_of_line_error_points_just_after_the_code(lang):
    ((message, at, _),) = lang.errors(lang.line("a", "x +  ") + "   // a comment")
    assert (message, at) == (
        "unexpected end of line",
        (lang.top + 1, len(lang.line("a", "x +")) + 1),
    )


def test_language_hints():
    """The language's own notes, added by the engine."""
    ((message, _, hint),) = PCOC.errors("  x = x / 2")
    assert message == "unexpected character '/'" and "PCOC has no `/`" in hint
    with pytest.raises(CraspError) as caught:
        pcoc_tree(H + "for k in 0 .. n // 2 {\n  round { x = x }\n}\n", "f")
    (diag,) = caught.value.diagnostics
    assert diag.message == "unexpected end of line" and (diag.span.line, diag.span.column) == (
        3,
        16,
    )
    assert diag.hint.endswith("; note: `//` starts a comment; integer division is written `div`")
    ((message, _, hint),) = CRASP.errors('A = "ab')
    assert message == 'unterminated token literal: no closing " on this line'


def test_both_languages_report_through_their_loaders():
    with pytest.raises(CraspError) as caught:
        parse_program("A = min(1,\n  2\nB = 2 3\n", "p.cr")
    assert str(caught.value).startswith("p.cr:1:8: error: '(' is never closed\n")
    with pytest.raises(CraspError) as caught:
        parse_pcoc(H + "round {\n  x = min(x,\n  1\n  x = 2 3\n}\n", "p.pcoc")
    assert str(caught.value).startswith("p.pcoc:4:10: error: '(' is never closed\n")


# ------------------------------------------------------------------ fuzz, both languages

ROOT = Path(__file__).resolve().parents[2]
SEEDS = {
    "crasp": sorted((ROOT / "examples" / "crasp").glob("*.cr*")),
    "pcoc": sorted((ROOT / "examples" / "pcoc").glob("*.pcoc")),
}
JUNK = [*"(){}[]=+-*%,.;/!&|:<>#\"'\n", "//", "−", "if", "else", "round", "min(", "x", "1"]


@settings(max_examples=150)
@given(lang=st.sampled_from(LANGS), data=st.data())
def test_mutated_programs_give_located_sorted_errors(lang, data):
    """Any text: a tree, or a CraspError whose diagnostics lie in the text, sorted."""
    text = data.draw(st.sampled_from(SEEDS[lang.name])).read_text(encoding="utf-8")
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        cut = data.draw(st.integers(0, 3))
        text = text[:at] + data.draw(st.sampled_from(JUNK)) + text[at + cut :]
    try:
        lang.parse(text, "f")
    except CraspError as err:
        lines = text.split("\n")
        spans = [d.span for d in err.diagnostics]
        assert err.diagnostics and len(err.diagnostics) <= MAX_ERRORS
        for span in spans:
            assert span is not None and 1 <= span.line <= len(lines)
            assert 1 <= span.column <= len(lines[span.line - 1]) + 1
        positions = [(s.line, s.column) for s in spans]
        assert positions == sorted(positions)
        assert len(set(err.diagnostics)) == len(err.diagnostics)
