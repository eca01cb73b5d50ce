"""Adding a language is one folder and one ``register`` call: *Tally*
(:mod:`tests.support.tally`), a small counting language written only against the
registry's ``Language`` and the public building blocks (Builder, cookbook, model types,
errors), gets check, interpret, compile, run, info, show and model checks, and its option
as a flag, with nothing else changed; its models agree with its own interpreter, and the
float horizons its models record are attacked where they end.

Tally is registered per test (the ``tally`` fixture works on copies of the registry's
tables, dropped at the test's end, so no other test sees it). The CLI makes its flags
when it is imported, from the languages registered then: ``--margin`` is tested in a
fresh process that registers Tally first.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import random
import subprocess
import sys
from fractions import Fraction
from math import gcd
from pathlib import Path

import numpy as np
import pytest

from crasp_compiler import api
from crasp_compiler.errors import CraspError
from crasp_compiler.languages import Language, get_language, register, registry
from crasp_compiler.model import io as model_io
from crasp_compiler.model import save_model
from crasp_compiler.model.model import Model, dense
from crasp_compiler.runtime.numpy_exec import run_tokens
from tests.support.cli import invoke
from tests.support.tally import interpret as reference
from tests.support.tally.declaration import DECLARATION
from tests.support.tally.lower import compile_program
from tests.support.tally.nodes import OPERATORS, Threshold, format_rule, threshold
from tests.support.tally.parse import parse_program
from tests.support.tally.rounding import MAX_CLAIM, horizon, unit_error

ROOT = Path(__file__).resolve().parents[2]
VOTE = """\
# accept when yes leads no
symbols yes no abstain
lead:   count(yes) > count(no)
quorum: 2 * count(yes) >= length
tied:   count(yes) = count(no)
accept lead
"""


@pytest.fixture
def tally(monkeypatch: pytest.MonkeyPatch) -> Language:
    """Tally registered for one test: the registry's tables and the model file format's
    header checks are copies that the test's end drops."""
    checks = dict(model_io.HEADER_CHECKS)
    monkeypatch.setattr(registry, "_DECLARED", dict(registry._DECLARED))
    monkeypatch.setattr(registry, "_LOADED", dict(registry._LOADED))
    for module in (registry, model_io):
        monkeypatch.setattr(module, "HEADER_CHECKS", checks)
    register(DECLARATION)
    return get_language("tally")


@pytest.fixture
def vote(tmp_path: Path) -> Path:
    path = tmp_path / "vote.tally"
    path.write_text(VOTE)
    return path


# ------------------------------------------------------------------ the commands


def test_check_a_program_and_its_located_errors(tally, vote, tmp_path):
    checked = invoke("check", vote)
    assert checked.exit_code == 0, checked.output
    assert checked.stdout.splitlines() == [
        f"{vote}: ok",
        "  symbols:     yes no abstain",
        "  rules:       3",
        "  accept:      lead",
        "  margin:      0",
        "  lead    count(yes) > count(no)",
        "  quorum  2 * count(yes) >= length",
        "  tied    count(yes) = count(no)",
    ]
    bad = tmp_path / "bad.tally"
    bad.write_text("symbols yes no\nlead: count(yes) >> count(no)  # typo\n")
    syntax = invoke("check", bad)
    assert syntax.exit_code == 1
    assert syntax.stderr == (
        f"{bad}:2:19: error: expected count(SYMBOL), length or a number, found '>'\n"
        "    lead: count(yes) >> count(no)  # typo\n"
        "                      ^\n"
    )
    bad.write_text("symbols yes no\nlead: count(yes) > count(maybe)\naccept win\n")
    checks = invoke("check", bad)
    assert checks.exit_code == 1
    assert checks.stderr == (
        f"{bad}:2:26: error: 'maybe' is not a declared symbol (symbols: yes no)\n"
        "    lead: count(yes) > count(maybe)\n"
        "                             ^^^^^\n"
        f"{bad}:3:8: error: accept names no rule: 'win'\n"
        "    accept win\n"
        "           ^^^\n"
        "2 errors\n"
    )


def test_interpret_an_input_and_stdin_lines(tally, vote):
    assert invoke("interpret", vote, "yes no yes").stdout == "True\n"
    assert invoke("interpret", vote, "yes no").stdout == "False\n"
    lines = "yes\n\n# a comment\nno yes no\nε\n"
    echoed = invoke("interpret", vote, "--echo", input=lines)
    assert echoed.exit_code == 0, echoed.output
    assert echoed.stdout == "yes\tTrue\nno yes no\tFalse\nε\tFalse\n"
    traced = invoke("interpret", vote, "yes no", "--trace")
    assert traced.stdout.splitlines()[3:] == [
        "count(yes)       0    1   1",
        "count(no)        0    0   1",
        "count(abstain)   0    0   0",
        "lead             F    T   F",
        "quorum           T    T   T",
        "tied             T    F   T",
        "False",
    ]
    wrong = invoke("interpret", vote, "yes maybe")
    assert wrong.exit_code == 1
    assert "token 'maybe' at position 1 is not a symbol of the program" in wrong.stderr


def test_compile_run_info_and_show(tally, vote, tmp_path):
    model = tmp_path / "vote.npz"
    compiled = invoke("compile", vote, "-o", model)
    assert compiled.exit_code == 0, compiled.output
    assert compiled.stdout.startswith(f"{model}: 1 layer (4 counting heads, one MLP")
    assert "exact at every length in real arithmetic (in float64 for inputs of length" in (
        compiled.stdout
    )
    assert invoke("run", model, "yes no yes").stdout == "True\n"
    echoed = invoke("run", model, "--echo", input="yes\n\n# a comment\nno yes no\nε\n")
    assert echoed.stdout == "yes\tTrue\nno yes no\tFalse\nε\tFalse\n"
    outputs = invoke("run", model, "no yes", "--outputs").stdout.splitlines()
    assert outputs[-4:] == [
        "lead       F   F    F",
        "quorum     T   F    T",
        "tied       T   F    T",
        "False",
    ]
    info = invoke("info", model)
    assert info.exit_code == 0, info.output
    assert "  source:      Tally: rules 3, symbols 3, margin 0\n" in info.stdout
    assert "    lead = lead  [L1 mlp]\n" in info.stdout
    page = tmp_path / "vote.html"
    shown = invoke("show", model, "yes no yes", "-o", page)
    assert shown.exit_code == 0, shown.output
    assert "quorum" in page.read_text()
    relu = invoke("compile", vote, "--mode", "relu", "-o", model)
    assert relu.exit_code == 2
    assert "--mode relu is for C-RASP programs; Tally modes are heaviside" in relu.stderr


def test_check_model_runs_interpreter_numpy_and_torch(tally, vote, tmp_path, one_torch_thread):
    model = tmp_path / "vote.npz"
    assert invoke("compile", vote, "-o", model).exit_code == 0
    for flags in ((), ("--float32",)):
        checked = invoke("check", model, "--samples", 24, "--max-len", 16, *flags)
        assert checked.exit_code == 0, checked.output
        assert "runtimes: interpreter, numpy, torch" in checked.stdout
        assert checked.stdout.endswith("all runtimes agree\n")


BOOT = """
import json, sys
from crasp_compiler.languages import register
from tests.support.tally.declaration import DECLARATION
register(DECLARATION)
from click.testing import CliRunner
from crasp_compiler.cli import main
lazy = "tests.support.tally.language" not in sys.modules
owned = ("crasp_compiler.languages.crasp", "crasp_compiler.languages.pcoc")
before = {m for m in sys.modules if m.startswith(owned)}
groups = json.load(sys.stdin)
results = [CliRunner().invoke(main, args) for args in groups["tally"]]
borrowed = sorted(m for m in sys.modules if m.startswith(owned) and m not in before)
results += [CliRunner().invoke(main, args) for args in groups["other"]]
out = [[r.exit_code, r.stdout, r.stderr] for r in results]
print(json.dumps({"lazy": lazy, "borrowed": borrowed, "results": out}))
"""


def test_its_option_is_a_flag_and_it_runs_nothing_of_crasp_or_pcoc(tmp_path, vote):
    """In a process that registers Tally's declaration before importing the CLI:
    ``--margin`` is a flag of Tally's commands and refused for C-RASP programs, the
    language is imported on first use, and its commands import no module of C-RASP or
    PCOC beyond what the registry itself imports."""
    model = tmp_path / "margin.npz"
    tally_commands = [
        ["interpret", vote, "yes yes no"],
        ["interpret", vote, "yes yes no", "--margin", "1"],
        ["check", vote, "--margin", "1"],
        ["compile", vote, "--margin", "1", "-o", model],
        ["run", model, "yes yes no"],
        ["run", model, "yes yes yes no"],
        ["info", model],
        ["interpret", "--help"],
    ]
    other = [["check", ROOT / "examples" / "crasp" / "dyck1.cr", "--margin", "2"]]
    groups = {"tally": tally_commands, "other": other}
    proc = subprocess.run(
        [sys.executable, "-c", BOOT],
        cwd=ROOT,
        input=json.dumps(groups, default=str),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["lazy"] and report["borrowed"] == []
    plain, margin, checked, compiled, two, three, info, helped, misused = report["results"]
    assert [plain[1], margin[1]] == ["True\n", "False\n"]  # a lead of 1 is not > 1
    assert checked[0] == 0 and "  margin:      1\n" in checked[1]
    assert compiled[0] == 0, compiled[2]
    assert [two[1], three[1]] == ["False\n", "True\n"]
    assert "  source:      Tally: rules 3, symbols 3, margin 1\n" in info[1]
    assert "--margin K" in helped[1]
    assert "Tally: INPUT is a whitespace-separated token string" in helped[1]  # its help text
    assert misused[0] == 2
    assert "--margin: only for Tally programs (.tally)" in misused[2]


def test_it_is_written_against_the_registry_alone():
    """No module of the language imports C-RASP or PCOC."""
    folder = ROOT / "tests" / "support" / "tally"
    imported = set()
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    owned = ("crasp_compiler.languages.crasp", "crasp_compiler.languages.pcoc")
    assert "crasp_compiler.languages.registry" in imported
    assert not [name for name in imported if name.startswith(owned)]


def test_registering_twice_or_a_taken_suffix_is_refused(tally):
    with pytest.raises(ValueError, match="clashes"):
        register(DECLARATION)
    with pytest.raises(ValueError, match="clashes"):
        register(dataclasses.replace(DECLARATION, name="other", suffixes=(".cr",)))


# ------------------------------------------------------------------ the API and the semantics


def test_one_api_loads_checks_interprets_and_compiles_it(tally, vote):
    program = api.load(vote)
    assert api.check(program)[0] == "  symbols:     yes no abstain"
    trace = api.interpret(program, ["yes", "no", "yes"])
    assert trace.accepted and trace.counts["yes"] == [0, 1, 1, 2]
    assert trace.values["tied"] == [True, False, True, False]
    strict = api.load(VOTE, language="tally", margin=1)
    assert not api.interpret(strict, ["yes", "no", "yes"]).accepted
    model = api.compile(strict)
    assert model.provenance is not None and model.provenance.language == "Tally"
    assert api.run(model, [["yes", "yes", "yes", "no"]]).values["lead"].tolist() == [
        [False, False, True, True, True]
    ]
    with pytest.raises(CraspError, match="takes no option"):
        api.compile(program, n=4)


def test_what_tools_read_has_defaults_it_need_not_write(tally, vote):
    """What ``crasp show`` and the experiments read from a language has defaults: Tally
    writes none of it, has no named definitions, theory or bounds, and its models store
    no counts ``crasp show`` colours and route no sends."""
    program = api.load(vote)
    assert tally.definition_sorts(program) == {} and tally.dependencies(program) == {}
    assert tally.theory(program) is None and tally.input_bounds(program) == {}
    assert tally.require_tokens(program) is program
    with pytest.raises(CraspError, match="Tally programs have no named definitions"):
        tally.definition_values(program, [["yes"]])
    with pytest.raises(CraspError, match="Tally programs declare no bounds"):
        tally.rebound(program, 10.0)
    model = api.compile(program)
    assert tally.count_forms(model) is None and tally.routing_labels(model) is None


def random_program(rng: random.Random) -> str:
    """A program over a, b, c: 1–4 rules of 1–3 terms a side (factors up to 1,000),
    every comparison, an accept rule."""

    def side() -> str:
        text = ""
        for k in range(rng.randint(1, 3)):
            atom = rng.choice(["count(a)", "count(b)", "count(c)", "length", ""])
            factor = rng.choice([0, 1, 2, 3, 7, 1000]) if atom else rng.randint(0, 5)
            term = str(factor) if not atom else atom if factor == 1 else f"{factor} * {atom}"
            sign = rng.choice("+-")
            text += (f" {sign} " if k else "-" if sign == "-" else "") + term
        return text

    rules = [f"r{k}: {side()} {rng.choice(OPERATORS)} {side()}" for k in range(rng.randint(1, 4))]
    return "symbols a b c\n" + "\n".join(rules) + f"\naccept r{rng.randrange(len(rules))}\n"


@pytest.mark.parametrize("seed", range(6))
def test_models_agree_with_the_interpreter_on_random_programs(tally, seed):
    """In process, numpy in float64 and float32 against the interpreter, at every prefix
    of random inputs (lengths within every float32 horizon here); and the printed rules
    parse back to the same forms."""
    rng = random.Random(seed)
    for _ in range(5):
        text, margin = random_program(rng), rng.choice([0, 0, 1, 3])
        program = api.load(text, language="tally", margin=margin)
        reprinted = "symbols a b c\n" + "".join(
            f"{r.name}: {format_rule(r)}\n" for r in program.rules
        )
        again = parse_program(reprinted, margin=margin)
        forms = [threshold(r, margin, program.symbols) for r in program.rules]
        assert [threshold(r, margin, again.symbols) for r in again.rules] == forms
        model = api.compile(program)
        assert model.guarantee.limit("float32") >= 40
        inputs = [rng.choices("abc", k=rng.randint(0, 40)) for _ in range(40)]
        expected = tally.interpret(program, inputs).values
        for dtype in ("float64", "float32"):
            got = api.run(model, inputs, dtype=dtype).values
            for name in program.outputs:
                np.testing.assert_array_equal(got[name], expected[name], err_msg=text)


# ------------------------------------------------------------------ the float guarantee


@pytest.mark.parametrize(
    ("terms", "slope", "constant"),
    [
        (2, 1, Fraction(-1, 2)),
        (3, 2, Fraction(1, 2)),
        (4, 3000, Fraction(2001, 2)),
        (3, 2**21, Fraction(2**20 + 1, 2)),
    ],
)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_horizon_is_the_last_length_its_bound_covers(terms, slope, constant, dtype):
    """The horizon n is the last t with ``E·(m·t + |c|) < 1/2``."""
    n = horizon(terms, slope, constant, dtype)
    error = unit_error(terms, dtype)
    assert 0 <= n < MAX_CLAIM
    assert error * (slope * n + abs(constant)) < Fraction(1, 2)
    assert error * (slope * (n + 1) + abs(constant)) >= Fraction(1, 2)
    assert horizon(terms, 0, constant, dtype) == MAX_CLAIM


def far_position(
    model: Model, counts: dict[str, int], last: str, dtype: type
) -> tuple[np.ndarray, dict[str, bool]]:
    """The residual after the attention and the decided outputs of a one-layer model at
    the last position t = Σ counts of an input with these symbol counts whose last token
    is ``last``, computed as the runtimes compute them — each head's float64 prefix sum
    (integers: exact), divided by t + 1 in float64 and cast to ``dtype``; the MLP's
    products ``x W₁ᵀ + b₁``, its units and the readout in ``dtype`` — without the
    positions before t."""
    (layer,) = model.layers
    assert layer.mlp is not None
    index = {symbol: k for k, symbol in enumerate(model.vocab)}
    t = sum(counts.values())
    totals = model.w_e[0] + sum(c * model.w_e[index[a]] for a, c in counts.items())
    x = model.w_e[index[last]].astype(dtype)
    for head in layer.heads:
        mean = ((dense(head.w_v) @ totals) / np.float64(t + 1)).astype(dtype)
        x = x + dense(head.w_o).astype(dtype) @ mean
    mlp = layer.mlp
    units = (x @ dense(mlp.w1).astype(dtype).T + mlp.b1.astype(dtype) >= 0).astype(dtype)
    final = x + units @ dense(mlp.w2).astype(dtype).T + mlp.b2.astype(dtype)
    return x, {o.name: bool(final @ o.weights.astype(dtype) > 0.5) for o in model.outputs}


def ties(form: Threshold, t: int) -> list[dict[str, int]]:
    """Counts of a, b (as large as they come) and c (the rest) adding up to t where the
    form's Z, over a and b with opposite signs (and length), is −1, 0 or 1."""
    k = dict(form.counts)
    assert k["a"] * k["b"] < 0 and "c" not in k
    sign = 1 if k["a"] > 0 else -1
    p, q = sign * k["a"], -sign * k["b"]  # p·a − q·b = sign·(Z − length·t − constant)
    g, found = gcd(p, q), []
    for z in (-1, 0, 1):
        r = sign * (z - form.length * t - form.constant)
        if r % g:
            continue
        p1, q1, r1 = p // g, q // g, r // g
        a0 = r1 * pow(p1, -1, q1) % q1
        b0 = (p1 * a0 - r1) // q1
        s = (t - a0 - b0) // (p1 + q1)  # a = a0 + q1·s, b = b0 + p1·s
        a, b = a0 + q1 * s, b0 + p1 * s
        if a >= 0 and b >= 0:
            found.append({"a": a, "b": b, "c": t - a - b})
    return found


def every_count(t: int) -> list[dict[str, int]]:
    """Every count of a, b and c adding up to t."""
    return [{"a": a, "b": b, "c": t - a - b} for a in range(t + 1) for b in range(t + 1 - a)]


ATTACKED = [
    ("lead: count(a) > count(b)", 0),
    ("lead: count(a) > count(b)", 5),
    ("even: 3 * count(a) = 2 * count(b) + 1", 0),
    ("apart: 1000 * count(a) != 999 * count(b)", 0),
    ("most: 3 * count(a) - 2 * count(b) < length - 5", 2),
    ("big: 1048576 * count(a) >= 1048573 * count(b) + 7", 0),
]


@pytest.mark.parametrize(("rule", "margin"), ATTACKED)
def test_decisions_at_the_float64_and_float32_horizons_near_ties(rule, margin):
    """At t = the model's horizon in each float type, with counts as large as t allows
    where the rule's Z is −1, 0 or 1 (its decision half a unit from flipping; every count
    where t is at most 64) and each last token, the runtimes' arithmetic
    (:func:`far_position`, checked first to reproduce the numpy executor's residual bit
    for bit on short inputs) decides as the interpreter does."""
    program = parse_program(f"symbols a b c\n{rule}\n", margin=margin)
    model = compile_program(program)
    (checked,) = program.rules
    rng = random.Random(rule)
    words = [rng.choices("abc", k=rng.randint(0, 12)) for _ in range(20)]
    for dtype in (np.float64, np.float32):
        traced = run_tokens(model, words, dtype=dtype, residuals=True, on_overlength="ignore")
        assert traced.residuals is not None
        after = dict(traced.residuals)["layer 1 attention"]
        for row, word in enumerate(words):
            for t in range(len(word) + 1):
                counts = {a: word[:t].count(a) for a in "abc"}
                last = word[t - 1] if t else model.vocab[0]
                x, decided = far_position(model, counts, last, dtype)
                np.testing.assert_array_equal(x, after[row, t])
                assert decided[checked.name] == traced.values[checked.name][row, t]
    form = threshold(checked, margin, program.symbols)
    for dtype in (np.float64, np.float32):
        n = model.guarantee.limit(np.dtype(dtype).name)
        assert n is not None and 0 <= n < MAX_CLAIM
        near = ties(form, n) if n > 64 else every_count(n)
        assert near
        for counts in near:
            truth = reference.holds(checked, margin, counts, n)
            for last in (a for a in "abc" if counts[a]):
                assert far_position(model, counts, last, dtype)[1][checked.name] == truth, (
                    counts,
                    last,
                )


FACTORS = "symbols a b c\nr: 1000 * count(a) >= 999 * count(b) + 1\n"


def factor_ties() -> tuple[Model, list[list[str]], np.ndarray]:
    """The model of :data:`FACTORS` (float32 horizon 2,097), inputs as long as that
    horizon at its ties (a's then b's, b's then a's, interleaved; c's pad), and the
    interpreter's values of ``r`` on them."""
    program = parse_program(FACTORS)
    model = compile_program(program)
    n = model.guarantee.limit("float32")
    assert n == 2_097
    words = []
    for counts in ties(threshold(program.rules[0], 0, program.symbols), n):
        a, b, c = (counts[s] for s in "abc")
        mixed = [s for pair in zip(["a"] * a, ["b"] * b, strict=False) for s in pair]
        mixed += ["a"] * (a - min(a, b)) + ["b"] * (b - min(a, b))
        words += [
            ["a"] * a + ["b"] * b + ["c"] * c,
            ["b"] * b + ["a"] * a + ["c"] * c,
            mixed + ["c"] * c,
        ]
    return model, words, np.array([reference.run(program, w).values["r"] for w in words])


def test_float32_runs_at_their_horizon_on_near_ties():
    """The numpy executor in float32 on inputs as long as the model's float32 horizon,
    where the decisions sit half a unit from their thresholds: an alternation (699,050
    tokens: every prefix within one of a tie) and the ties of :func:`factor_ties`."""
    alternating = parse_program(
        "symbols a b c\nlead: count(a) > count(b)\nhalf: 2 * count(a) >= length\n"
        "tied: count(a) = count(b)\n"
    )
    model = compile_program(alternating)
    n = model.guarantee.limit("float32")
    assert n == 699_050
    word = (["a", "b"] * n)[:n]
    got = run_tokens(model, [word], dtype=np.float32).values
    for name, column in reference.run(alternating, word).values.items():
        assert got[name][0].tolist() == column, name
    model, words, expected = factor_ties()
    assert (run_tokens(model, words, dtype=np.float32).values["r"] == expected).all()


def test_torch_in_float32_at_the_horizon_on_near_ties(one_torch_thread):
    import torch

    from crasp_compiler.runtime.torch_module import TorchTransformer

    model, words, expected = factor_ties()
    module = TorchTransformer(model).to(dtype=torch.float32)
    ids, lengths = module.encode(words)
    with torch.no_grad():
        decided = module.decide(module(ids, lengths))["r"].numpy()
    assert (decided == expected).all()


def test_beyond_its_float32_horizon_a_model_is_refused_and_can_go_wrong():
    """Factors near 2^20 leave float32 a horizon of 2 tokens: a longer input is refused,
    and run anyway the model decides a tie wrongly at 180 tokens (the limit is needed)."""
    program = parse_program("symbols a b c\nr: 786432 * count(a) >= 524288 * count(b)\n")
    model = compile_program(program)
    assert model.guarantee.dtypes == {"float64": 1_145_324_612, "float32": 2}
    word = ["a"] * 72 + ["b"] * 108  # 3·72 = 2·108: a tie, so r holds
    with pytest.raises(CraspError, match="beyond what the model is proven exact for in float32"):
        run_tokens(model, [word], dtype=np.float32)
    wrong = run_tokens(model, [word], dtype=np.float32, on_overlength="ignore").values["r"][0]
    truth = reference.run(program, word).values["r"]
    assert truth[-1] and not wrong[-1]
    assert run_tokens(model, [word]).values["r"][0].tolist() == truth


def test_a_model_file_claiming_more_than_its_source_proves_is_refused(tally, vote, tmp_path):
    model = api.compile(api.load(vote))
    path = tmp_path / "vote.npz"
    save_model(model, path)
    assert api.load_model(path).guarantee.dtypes == model.guarantee.dtypes
    model.guarantee.dtypes["float32"] += 1
    save_model(model, path)
    with pytest.raises(
        CraspError, match="claims more than the source's analysis proves in float32"
    ):
        api.load_model(path)
    model.guarantee.dtypes = {"float64": model.guarantee.dtypes["float64"]}
    save_model(model, path)
    with pytest.raises(CraspError, match="a horizon per float type"):
        api.load_model(path)
