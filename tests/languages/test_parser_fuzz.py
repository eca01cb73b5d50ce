"""No user input, however malformed, produces a Python traceback.

Random text, random mutations of the example programs, random alphabets and random
input strings go through the whole user-facing path: parsing and checking
(:func:`parse_program`), alphabet overrides, the interpreter, the printer, the
compiler and the ``crasp`` command. Each either succeeds or raises
:class:`CraspError`, the project's one error type, whose text is non-empty and, when
it is about the program text, reads ``FILE:LINE:COL: error: ...`` with a valid location,
the source line and a caret under the offending span. Any other exception fails.
"""

from __future__ import annotations

import random
import re
import string
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crasp_compiler import CraspError, format_expr, format_program, interpret, parse_program
from crasp_compiler.cli import main
from crasp_compiler.errors import SHOWN_LINE, cells, display_line
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.languages.crasp.program import with_alphabet

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_DIR = ROOT / "examples" / "crasp"
FILENAME = "fuzz.crasp"


def fuzz(examples: int) -> settings:
    return settings(
        max_examples=examples,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )


# Seed programs in both notations, next to the examples (read at test time: the
# example set grows). Together they use every construct of the grammar.
SEEDS = [
    # .cr style
    """// Dyck-1
C_open = # "("
C_close = # ")"
Bal = C_open - C_close
Ok = # (Bal < 0) == 0
Acc = Ok && Bal == 0
""",
    # paper style: binders, local relation, ternary, unicode operators
    """C(i) := #[j <= i] Q_a(j)
D(i) := #[j <= i, j = i - 1] Q_b(j)
P(i) := C(i) > D(i)
R(i) := P(i) ? C(i) : D(i)
S(i) := #[j < i] Q_a(j) ∧ ¬P(j)
E(i) := R(i) >= 1 ∨ S(i) ≤ 2
""",
    # declarations, predicates, imports, min/max, if/else, periodic, ≡, ∃←
    """#import pred
#import pos_even
alphabet {"a", "b", 'c'}
predicate near(i, j) := j == i - 1 || j == i - 2
predicate odd(i) := i % 2 == 1
N = #[near] "a"
M = #[pred] Q_"b"
X = max(N, M, 3) - min(N, 2 * M)
Y = 1 if X >= 0 and not odd else -1
Z = ∃← (Q_"c" ∧ pos_even) || i ≡ 0 (mod 3)
W = # true <= 4 && (Y == 1 or Z) ; V = ⊤ ∧ ¬⊥
output N, X, W
accept W
""",
    # multi-line parenthesised statement, comments, k'-primed variables, CRLF
    "A(i) := #[j ≤ i, j = i - 1 ∨ j = i - 3] (Q_a(j) ∧\r\n   #[k' <= j] Q_b(k') ≥ 1)  // c\r\n"
    'B = (A >= 1) && !(# "b" == 0)\r\nB2 = A ≥ 1 ≥ 0 ; output A, B2\r\n',
]

# Characters and words of the language, plus the kind of junk users produce.
PIECES = [
    *"#[]()!<=\";\n:?,%{}+-*'\\_",
    "&&",
    "||",
    "==",
    "<=",
    ">=",
    "!=",
    ":=",
    "//",
    "i",
    "j",
    "k",
    "k'",
    "≡",
    "mod",
    "∧",
    "∨",
    "¬",
    "⊤",
    "⊥",
    "∃←",
    "∃",
    "≤",
    "≥",
    "≠",
    "min",
    "max",
    "if",
    "else",
    "not",
    "and",
    "or",
    "true",
    "false",
    "alphabet",
    "accept",
    "output",
    "predicate",
    "#import",
    "pred",
    "pred4",
    "pos_even",
    "Q_a",
    'Q_"a"',
    '"a"',
    '"("',
    "'b'",
    "C",
    "C_open",
    "x1",
    "0",
    "1",
    "2",
    "-1",
    "99999999999999999999",
    " ",
    "  ",
    "\t",
    "\r",
    "\r\n",
    "\x0c",
    "\x0b",
    "\x00",
    "\x85",
    "\u2028",
    "\xa0",
    "\u3000",
    "\ufeff",
    "é",
    "ℕ",
    "١",
    "𝔸",
    "😀",
    "a",
    "b",
    "x",
    "A",
    "B",
]

# Random text as a string over private-use characters, one per piece, expanded after
# drawing: much cheaper for hypothesis than a list of pieces, and it shrinks as well.
_CODES = {chr(0xE000 + n): p for n, p in enumerate(PIECES)}
_EXPAND = str.maketrans(_CODES)
random_text = st.text(alphabet="".join(_CODES), max_size=40).map(lambda t: t.translate(_EXPAND))

# Lexical tokens of the seeds, for token-level replacement.
_TOKEN = re.compile(r"\s+|//[^\n]*|\"[^\"\n]*\"|'[^'\n]*'|\w+'*|&&|\|\||[<>=!:]=|.", re.S)


def example_texts() -> list[str]:
    files = sorted(p for p in EXAMPLE_DIR.glob("*") if p.suffix in (".cr", ".crasp"))
    return [p.read_text(encoding="utf-8") for p in files]


def all_seeds() -> list[str]:
    return example_texts() + SEEDS


def _span(text: str, rnd: random.Random, max_len: int = 12) -> tuple[int, int]:
    start = rnd.randint(0, len(text))
    return start, rnd.randint(start, min(len(text), start + max_len))


def _junk(rnd: random.Random) -> str:
    if rnd.random() < 0.8:
        return rnd.choice(PIECES)
    codes = [rnd.choice([rnd.randint(0, 0x7F), rnd.randint(0, 0x2FFFF)]) for _ in "ab"]
    return "".join(chr(c) for c in codes if not 0xD800 <= c < 0xE000)  # no lone surrogates


_SWAPS = ["i", "j", "k", "0", "1", "3", '"a"', "Q_b", "true", "C", "<", "==", "+", "*", "&&"]


def _kind(token: str) -> int:
    """0 for words, numbers and literals; 1 for operators and punctuation."""
    return 0 if token[0].isalnum() or token[0] in "_\"'" else 1


def mutate(text: str, rnd: random.Random) -> str:
    """Apply a few random edits: delete, insert, duplicate or swap spans, replace tokens,
    delete, duplicate or swap lines."""
    for _ in range(rnd.randint(1, 5)):
        kind = rnd.choice(["delete", "insert", "duplicate", "swap", "token", "line", "lines"])
        if kind == "delete":
            a, b = _span(text, rnd)
            text = text[:a] + text[b:]
        elif kind == "insert":
            a = rnd.randint(0, len(text))
            text = text[:a] + _junk(rnd) + text[a:]
        elif kind == "duplicate":
            a, b = _span(text, rnd)
            text = text[:b] + text[a:b] + text[b:]
        elif kind == "swap":
            (a, b), (c, d) = sorted([_span(text, rnd), _span(text, rnd)])
            if b <= c:
                text = text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
        elif kind == "token":
            tokens = _TOKEN.findall(text)
            solid = [n for n, t in enumerate(tokens) if not t.isspace() and t[:2] != "//"]
            if solid:
                n = rnd.choice(solid)
                same = [t for t in tokens if _kind(t) == _kind(tokens[n])]
                if rnd.random() < 0.6:  # a token of the same kind: often still parses
                    tokens[n] = rnd.choice([*same, rnd.choice(_SWAPS)])
                else:
                    tokens[n] = rnd.choice([_junk(rnd), rnd.choice(tokens), ""])
                text = "".join(tokens)
        else:
            lines = text.split("\n")
            n, m = rnd.randrange(len(lines)), rnd.randrange(len(lines))
            if kind == "line":
                del lines[n]
            elif rnd.random() < 0.5:
                lines.insert(m, lines[n])
            else:
                lines[n], lines[m] = lines[m], lines[n]
            text = "\n".join(lines)
    return text


def random_source(rnd: random.Random) -> str:
    return "".join(_junk(rnd) for _ in range(rnd.randint(0, 40)))


def check_error(err: CraspError, text: str | None, filename: str = FILENAME) -> None:
    """A well-formed CraspError: non-empty, printable, and correctly located."""
    assert type(err) is CraspError
    message = str(err)
    assert message.strip()
    assert err.diagnostics
    assert all(line.isprintable() for line in message.split("\n")), message
    lines = text.split("\n") if text is not None else []
    for diag in err.diagnostics:
        shown = diag.format(text, filename).split("\n")
        if diag.span is None:
            assert shown[0].startswith(f"{filename}: error: ")
            continue
        line, column = diag.span.line, diag.span.column
        assert 1 <= line <= len(lines), (diag, len(lines))
        assert 1 <= column <= len(lines[line - 1]) + 1, (diag, lines[line - 1])
        head = f"{filename}:{line}:{column}: error: "
        assert shown[0].startswith(head) and len(shown[0]) > len(head)
        assert head in message
        caret, visible = shown[2], display_line(lines[line - 1])
        assert set(caret) <= {" ", "^"}
        if len(visible) <= SHOWN_LINE:
            assert shown[1] == "    " + visible
            pad = cells(visible[: column - 1]) + max(0, column - 1 - len(visible))
            assert caret.startswith("    " + " " * pad + "^"), (shown, diag)
            continue
        # a long line is cut to SHOWN_LINE characters around the caret, with … where cut
        at = min(column - 1, len(visible))
        start = max(0, min(at - SHOWN_LINE // 2, len(visible) - SHOWN_LINE))
        window = visible[start : start + SHOWN_LINE]
        assert start <= at <= start + SHOWN_LINE
        before = "…" if start else ""
        after = "…" if start + SHOWN_LINE < len(visible) else ""
        assert shown[1] == "    " + before + window + after
        pad = cells(before) + cells(visible[start:at]) + max(0, column - 1 - len(visible))
        assert caret.startswith("    " + " " * pad + "^"), (shown, diag)
    # Several diagnostics end with a count; they come sorted within each phase.
    if len(err.diagnostics) > 1:
        assert message.endswith(f"{len(err.diagnostics)} errors")


def exercise(text: str, tokens_list: list[list[str]] = ()) -> None:
    """Everything a user can do with program text: check, print, interpret, compile."""
    try:
        program = parse_program(text, FILENAME)
    except CraspError as err:
        check_error(err, text)
        return
    format_program(program)
    assert program.relation_class.startswith("C-RASP[")
    for definition in program.definitions:
        format_expr(definition.expr)
    for tokens in [[], list(program.alphabet[:3]), *tokens_list]:
        try:
            trace = interpret(program, tokens)
        except CraspError as err:
            check_error(err, None, "input")
            continue
        if program.accept is not None:
            assert isinstance(trace.accepted, bool)


# ------------------------------------------------------------------ (a) random text


@fuzz(1200)
@given(random_text)
def test_random_text(text):
    exercise(text)


@fuzz(200)
@given(st.text(max_size=200))
def test_arbitrary_unicode(text):
    exercise(text)


@fuzz(300)
@given(st.lists(st.sampled_from(PIECES[:80]), max_size=25).map(" ".join), st.data())
def test_random_statements(body, data):
    """Random token soup behind a well-formed statement head, so that the fuzzer gets past
    the first token and into expressions, binders and relations."""
    head = data.draw(
        st.sampled_from(
            ["A = ", "A(i) := ", "A(i) := #[j <= i, ", "predicate P(i, j) := ", "A = #["]
        )
    )
    exercise('X = # "a"\n' + head + body + "\nY = X > 0\n")


# ------------------------------------------------------------------ (b) mutations


@pytest.fixture(scope="module")
def seeds() -> list[str]:
    texts = all_seeds()
    assert len(texts) > len(SEEDS), "expected example programs in examples/crasp/"
    return texts


def test_seeds_are_valid(seeds):
    for text in seeds:
        parse_program(text, FILENAME)


_WORDS = ["a", "b", "c", "(", ")", "0", "1", "x", "é", "[", "{"]
rng = st.randoms(use_true_random=False)


@fuzz(600)
@given(st.data(), rng)
def test_mutated_programs(seeds, data, rnd):
    text = mutate(data.draw(st.sampled_from(seeds), label="seed"), rnd)
    inputs = [[rnd.choice(_WORDS) for _ in range(rnd.randint(0, 6))] for _ in range(2)]
    exercise(text, inputs)


@fuzz(200)
@given(st.data(), rng)
def test_mutated_programs_compile(seeds, data, rnd):
    """A mutated program that passes the checker compiles, or is refused as a CraspError."""
    text = mutate(data.draw(st.sampled_from(seeds), label="seed"), rnd)
    try:
        program = parse_program(text, FILENAME)
    except CraspError as err:
        check_error(err, text)
        return
    for mode, max_len in (("heaviside", None), ("relu", 8)):
        try:
            compile_program(program, mode=mode, max_len=max_len)
        except CraspError as err:
            check_error(err, None)


def test_many_seeded_mutations_and_texts(seeds):
    """The same properties in bulk, without hypothesis's per-example overhead: thousands of
    plain seeded cases (a failure names its seed and text)."""
    rnd = random.Random(20240607)
    for case in range(2500):
        text = mutate(rnd.choice(seeds), rnd) if case % 2 else random_source(rnd)
        inputs = [[rnd.choice(_WORDS) for _ in range(rnd.randint(0, 5))]]
        try:
            exercise(text, inputs)
        except Exception as err:  # pragma: no cover - only on failure
            raise AssertionError(f"case {case}: {text!r}") from err


# ------------------------------------------------------------------ (c) alphabets, inputs

symbol = st.one_of(
    st.sampled_from(["a", "b", "c", "(", ")", "0", "1", "x", "é", "😀", "", " ", "a b", "\t"]),
    st.text(max_size=3),
)


@fuzz(400)
@given(st.data())
def test_alphabet_overrides_and_inputs(seeds, data):
    text = data.draw(st.sampled_from(seeds), label="seed")
    program = parse_program(text, FILENAME)
    alphabet = data.draw(
        st.lists(st.one_of(st.sampled_from(program.alphabet), symbol), max_size=6), label="abc"
    )
    try:
        program = (
            parse_program(text, FILENAME, alphabet=alphabet)
            if data.draw(st.booleans(), label="via parse")
            else with_alphabet(program, alphabet)
        )
    except CraspError as err:
        check_error(err, None)
        return
    tokens = data.draw(
        st.lists(st.one_of(st.sampled_from(program.alphabet), symbol), max_size=8), label="in"
    )
    try:
        interpret(program, tokens)
    except CraspError as err:
        check_error(err, None, "input")
        bad = next(n for n, t in enumerate(tokens) if t not in program.alphabet)
        assert repr(tokens[bad]) in str(err) and f"position {bad}" in str(err)
    else:
        assert all(t in program.alphabet for t in tokens)


# ------------------------------------------------------------------ the command line

_OPTIONS = ["--trace", "--outputs", "--alphabet", "a b", "( )", "", "--bogus", "-h", "--", "-"]
_options = st.sampled_from([*_OPTIONS, "--mode", "relu", "--max-len", "4", "-1"])


@pytest.fixture(scope="module")
def program_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cli-fuzz")


@fuzz(100)
@given(st.data(), rng)
def test_cli_never_shows_a_traceback(seeds, program_dir, data, rnd):
    runner = CliRunner()
    source = mutate(rnd.choice(seeds), rnd) if rnd.random() < 0.7 else random_source(rnd)
    suffix = data.draw(st.sampled_from([".cr", ".crasp", ".txt"]), label="suffix")
    path = program_dir / f"prog{suffix}"
    path.write_text(source, encoding="utf-8")
    command = data.draw(
        st.sampled_from(["interpret", "check", "interpret", "compile", "nope"]), label="cmd"
    )
    target = data.draw(
        st.sampled_from([str(path), str(path), str(program_dir), str(program_dir / "missing")]),
        label="target",
    )
    args = [command, target, *data.draw(st.lists(_options, max_size=3), label="options")]
    if command == "compile":
        args += ["-o", str(program_dir / "model.npz")]
    if data.draw(st.booleans(), label="argument"):
        args.append(data.draw(st.text(alphabet="ab()x é\t", max_size=8), label="input"))
    stdin = data.draw(
        st.lists(st.text(alphabet="ab()x é/\t", max_size=8), max_size=4).map("\n".join),
        label="stdin",
    )
    result = runner.invoke(main, args, input=stdin)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        result.exception,
    )
    assert result.exit_code in (0, 1, 2), (args, result.output)
    assert "Traceback" not in result.output
    if result.exit_code == 1:
        assert "error" in result.stderr


# ------------------------------------------------------------------ regressions


@pytest.mark.parametrize(
    "text",
    [
        "A = " + "(" * 3000 + '# "a"' + ")" * 3000 + " > 0",
        "A = " + "!" * 3000 + '"a"',
        # a chain of `+` is no longer refused (test_wide_programs.py); `-` does not associate
        "A = " + " - ".join(['# "a"'] * 3000) + " > 0",
        "A = " + " < ".join(['# "a"'] * 3000),
        "A = min(" + ", ".join(['# "a"'] * 3000) + ") > 0",
        'A = # "a" > 99999999999999999999999',
        'A = 99999999999999999999 * # "a" > 0',
        "A(i) := #[j <= i, j == i - 99999999999] Q_a(j) > 0",
        "A = i % 99999999999999999999 == 0",
        "A = i ≡ 1 (mod 99999999999999)",
        "A = i % 9973 == 0 && i % 9967 == 1",
        "A = 1\r\x0cB = 2 3",
        'A = "\u2028)"',
        "\ufeffA = 1",
        "A = \x00",
        string.printable,
    ],
    ids=lambda text: repr(text[:20]),
)
def test_regressions(text):
    """Inputs that once crashed (RecursionError, OverflowError), hung, or were shown with
    the wrong source line."""
    with pytest.raises(CraspError) as caught:
        parse_program(text, FILENAME)
    check_error(caught.value, text)
