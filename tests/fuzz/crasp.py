"""The ``crasp`` family: C-RASP program text parsed, printed, interpreted (against the
naive evaluator) and compiled; every runtime must agree with the interpreter."""

from __future__ import annotations

import contextlib
import random
import re
from functools import cache

from tests.fuzz import ROOT
from tests.fuzz.case import Case, SlowCase, quiet_warnings, shorten
from tests.fuzz.mutate import UNICODE_POOL, mutate_tokens
from tests.support.naive import naive_values
from tests.support.strategies import random_program

CRASP_POOL = [
    '"<bos>"',
    'Q_"<bos>"',
    '"a"',
    '"b"',
    "Q_a(j)",
    "#",
    "#[",
    "]",
    "(",
    ")",
    "[",
    "{",
    "}",
    "==",
    "=",
    ":=",
    "<=",
    ">=",
    "<",
    ">",
    "!=",
    "!",
    "&&",
    "||",
    "+",
    "-",
    "*",
    "%",
    "?",
    ":",
    ",",
    ";",
    "\n",
    "//",
    "i",
    "j",
    "k'",
    "mod",
    "if",
    "else",
    "min(",
    "max(",
    "true",
    "false",
    "not",
    "and",
    "or",
    "#import",
    "pred",
    "alphabet",
    "accept",
    "output",
    "predicate",
    "1000000000",
    "10000000000",
    "-1",
    "0",
    "(i)",
    "j = i - 1",
    "j >= i - 50",
    "i % 2 == 0",
    *UNICODE_POOL[:12],
]


@cache
def crasp_corpus() -> list[tuple[str, str]]:
    """(name, text) of the example and task programs."""
    paths = sorted((ROOT / "examples" / "crasp").glob("*.cr*")) + sorted(
        (ROOT / "crasp_compiler" / "tasks" / "programs").glob("*.cr")
    )
    return [(p.name, p.read_text(encoding="utf-8")) for p in paths]


def _chain_program(rng: random.Random) -> str:
    length = rng.choice([10, 50, 100, 200, 299, 300, 301, 500, 1000])
    step = rng.choice(
        [
            "A{p} + 1",
            "A{p} + A{p}",
            "2 * A{p}",
            'A{p} - # "b"',
            'max(A{p}, # "a")',
            "A{p} if A{p} > 2 else 0",
        ]
    )
    lines = ['A0 = # "a"'] + [f"A{k} = " + step.format(p=k - 1) for k in range(1, length)]
    if rng.random() < 0.3:  # a Boolean chain instead
        lines = ['B0 = "a"'] + [f'B{k} = !B{k - 1} || "b"' for k in range(1, length)]
        lines.append(f"Acc = B{length - 1}")
    else:
        lines.append(f"Acc = A{length - 1} > {rng.choice([0, 3, 10**9])}")
    return "\n".join(lines) + "\n"


def _big_program(rng: random.Random) -> str:
    c = rng.choice(["1000000000", "999999999", "1000000001", "3"])
    depth = rng.choice([1, 2, 3, 5, 10, 40])
    expr = '# "a"'
    for _ in range(depth):
        expr = f"{c} * ({expr})"
    rhs = rng.choice(["0", c, "-" + c, f"{c} * {c}"])
    return f'A = {expr}\nB = A - {c} * # "b"\nAcc = B {rng.choice(["<", ">=", "==", "!="])} {rhs}\n'


def _digits_program(rng: random.Random) -> str:
    digits = rng.choice([10, 19, 20, 100, 4299, 4300, 4301, 5000, 20000])
    number = str(rng.randint(1, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(digits - 1))
    where = rng.choice(["const", "scale", "compare", "modulus", "offset"])
    if where == "const":
        return f'A = # "a" + {number}\nAcc = A > 2\n'
    if where == "scale":
        return f'A = {number} * # "a"\nAcc = A > 2\n'
    if where == "compare":
        return f'A = # "a"\nAcc = A < {number}\n'
    if where == "modulus":
        return f'P(i) := i % {number} == 1\nAcc = P && "a"\n'
    return f"A(i) := #[j <= i, j = i - {number}] Q_a(j)\nAcc = A >= 1\n"


def _deep_program(rng: random.Random) -> str:
    depth = rng.choice([10, 50, 98, 99, 100, 101, 200, 1000, 5000])
    kind = rng.choice(["paren", "not", "neg", "min", "count", "cond", "and"])
    if kind == "paren":
        return "A = " + "(" * depth + '# "a"' + ")" * depth + "\nAcc = A > 1\n"
    if kind == "not":
        return "Acc = " + "!" * depth + '"a"\n'
    if kind == "neg":
        return "A = " + "- " * depth + '# "a"\nAcc = A > 1\n'
    if kind == "min":
        return "A = " + "min(" * depth + '# "a"' + ', # "b")' * depth + "\nAcc = A > 1\n"
    if kind == "count":
        return "A = " + "# (" * depth + '"a"' + " > 0)" * depth + "\nAcc = A > 1\n"
    if kind == "cond":
        return "A = " + '1 if "a" else (' * depth + "0" + ")" * depth + "\nAcc = A > 0\n"
    return "Acc = " + ' && ("a"' * depth + ")" * depth + "\n"


def _window_program(rng: random.Random) -> str:
    w = rng.choice([0, 1, 2, 5, 50, 99, 999, 5000, 9999, 10000, 10001, 100000, 10**9])
    form = rng.choice(
        [
            "A(i) := #[j <= i, j >= i - {w}] Q_a(j)",
            "A(i) := #[j <= i, j > i - {w}] Q_a(j)",
            "A(i) := #[j <= i, j = i - {w}] Q_a(j)",
            "A(i) := #[j <= i, j \u2265 i \u2212 {w}] Q_a(j)",
            "A(i) := #[j <= i, j == i - {w} || j == i - 1] Q_a(j)",
            'predicate near(i, j) := j >= i - {w}\nA = #[near] "a"',
            "A(i) := #[j < i, j >= i - {w}] Q_a(j) \u2227 \u00acQ_b(j)",
            "A(i) := #[j <= i, j <= i - {w}] Q_a(j)",
        ]
    )
    return (
        form.format(w=w) + f"\nAcc = A {rng.choice(['>', '>=', '=='])} {rng.choice([0, 1, 2, w])}\n"
    )


def _bos_program(rng: random.Random) -> str:
    return rng.choice(
        [
            'A = # "<bos>"\nAcc = A > 0\n',
            'alphabet "<bos>", "a"\nA = # "a"\nAcc = A > 0\n',
            'Acc = Q_"<bos>"(i)\n',
            'alphabet "a", "<bos>"\nAcc = "<bos>" || "a"\n',
            'A(i) := #[j <= i, j = i - 1] Q_"<bos>"(j)\nAcc = A == 0\n',
            'alphabet "a", "b", "a"\nAcc = # "a" > # "b"\n',
            'alphabet ""\nAcc = true\n',
            'alphabet "a b"\nAcc = "a b"\n',
            'Acc = "\\u0000" || "a"\n',
        ]
    )


def _periodic_program(rng: random.Random) -> str:
    moduli = [
        rng.choice([1, 2, 3, 7, 97, 9973, 9999, 10000, 10001, 10**9])
        for _ in range(rng.randint(1, 5))
    ]
    parts = [f"i % {m} == {rng.randrange(min(m, 5))}" for m in moduli]
    body = rng.choice([" || ", " && "]).join(parts)
    paper = rng.random() < 0.3
    if paper:
        m = moduli[0]
        return (
            f"P(i) := i \u2261 {rng.randrange(min(m, 3))} (mod {m})\nAcc(i) := P(i) \u2227 Q_a(i)\n"
        )
    return f'predicate per(i) := {body}\nA = #[j <= i] "a"\nAcc = (A > 0 && per) || ({body})\n'


def _paper_program(rng: random.Random) -> str:
    minus = rng.choice(["-", "\u2212"])
    return (
        f"C(i) := #[j \u2264 i] Q_a(j)\n"
        f"D(i) := #[j \u2264 i, j = i {minus} 1] Q_b(j)\n"
        f"E(i) := #[j < i] Q_a(j) \u2227 \u00acQ_b(j)\n"
        f"F(i) := C(i) \u2265 D(i) \u2228 E(i) \u2260 {rng.randint(0, 3)}\n"
        f"G(i) := F(i) ? C(i) : {minus}{rng.randint(0, 10**9)}\n"
        f"H(i) := \u2203\u2190 (Q_a(i) \u2227 F(i))\n"
        f"Acc(i) := H(i) \u2227 G(i) {rng.choice(['≤', '≥', '=', '<'])} {rng.randint(-3, 3)}\n"
    )


def _many_outputs(rng: random.Random) -> str:
    k = rng.choice([2, 10, 100, 500])
    lines = [f'C{j} = # "a" - {j} * # "b"' for j in range(k)]
    lines.append(
        "output " + ", ".join(f"C{j}" for j in range(k)) + rng.choice(["", ", C0", ", Nope"])
    )
    if rng.random() < 0.5:
        lines.append(rng.choice(["accept C0", "accept B", "B = C0 > 0\naccept B"]))
    return "\n".join(lines) + "\n"


HOSTILE_CRASP = [
    _chain_program,
    _big_program,
    _digits_program,
    _deep_program,
    _window_program,
    _bos_program,
    _periodic_program,
    _paper_program,
    _many_outputs,
]


def _random_wellformed(rng: random.Random) -> str:
    """Text of a random well-typed program from tests/support/strategies.py."""
    from crasp_compiler import format_program

    shape = dict(
        local=rng.random() < 0.6,
        periodic=rng.random() < 0.6,
        max_definitions=rng.choice([3, 6, 12, 30]),
        max_depth=rng.choice([2, 3, 4, 6]),
    )
    program = random_program(rng, **shape)
    return format_program(program)


def crasp_text(rng: random.Random) -> tuple[str, dict]:
    """One program text and how it was made."""
    roll = rng.random()
    if roll < 0.40:
        name, text = rng.choice(crasp_corpus())
        count = rng.choice([1, 1, 2, 3, 5])
        text, described = mutate_tokens(text, rng, CRASP_POOL, count)
        return text, {"kind": "mutation", "base": name, "mutations": described}
    if roll < 0.65:
        return _random_wellformed(rng), {"kind": "random"}
    gen = rng.choice(HOSTILE_CRASP)
    return gen(rng), {"kind": gen.__name__.lstrip("_")}


def _count_depth(node) -> int:
    from crasp_compiler.languages.crasp.nodes import Count, children

    best, stack = 0, [(node, 0)]
    while stack:
        current, depth = stack.pop()
        depth += isinstance(current, Count)
        best = max(best, depth)
        stack.extend((child, depth) for child in children(current))
    return best


def _naive_viable(program) -> bool:
    return len(program.definitions) <= 400 and all(
        _count_depth(d.expr) <= 3 for d in program.definitions
    )


def _draw_words(rng: random.Random, alphabet: tuple[str, ...], text: str) -> list[list[str]]:
    lengths = [0, 1] + [rng.randint(2, 10) for _ in range(4)]
    if rng.random() < 0.3:
        lengths.append(rng.choice([30, 60, 130, 257]))
    windows = [int(w) for w in re.findall(r"i\s*[-\u2212]\s*(\d{1,4})\b", text)]
    for w in windows[:2]:
        if w <= 300:
            lengths += [w, w + 1, w + 2]
    return [[rng.choice(alphabet) for _ in range(n)] for n in lengths]


def _covers(model, length: int, dtype: str) -> bool:
    try:
        return bool(model.guarantee.covers(length, dtype))
    except TypeError:  # a Guarantee without per-dtype limits: float64 is the reference
        return dtype == "float64" and bool(model.guarantee.covers(length))


def _value_list(array, length: int) -> list:
    return [array[t].item() if hasattr(array[t], "item") else array[t] for t in range(length + 1)]


def compare_outputs(case: Case, step: str, program, outputs: dict, words, traces) -> bool:
    """Compare decided outputs ``outputs[name]`` (B, T) with the interpreter's traces at
    every position; records the first difference. True when all agree."""
    for row, (tokens, trace) in enumerate(zip(words, traces, strict=True)):
        n = len(tokens)
        for name in program.outputs:
            want = trace.values[name]
            got = outputs[name][row]
            boolean = want.dtype == bool
            for t in range(n + 1):
                w = bool(want[t]) if boolean else int(want[t])
                try:
                    g = bool(got[t]) if boolean else int(got[t])
                except (OverflowError, ValueError):
                    g = got[t]
                if w != g:
                    case.note(
                        "disagree",
                        step,
                        kind=step,
                        message=f"output {name} at t={t} (position {t - 1}) of input "
                        f"{shorten(' '.join(tokens), 200)!r} (length {n}): interpreter {shorten(w, 60)}, "
                        f"model {shorten(g, 60)}",
                    )
                    case.repro.setdefault("disagreeing_input", shorten(" ".join(tokens), 400))
                    return False
    return True


def _run_model(case: Case, step: str, program, model, words, traces, dtype: str, runtime: str):
    """Run covered inputs through one runtime and compare; run one uncovered input (if any)
    and expect a refusal or agreement."""
    import numpy as np

    covered = [k for k, w in enumerate(words) if _covers(model, len(w), dtype)]
    uncovered = [k for k, w in enumerate(words) if not _covers(model, len(w), dtype)]
    np_dtype = np.float64 if dtype == "float64" else np.float32

    def execute(rows: list[int], overlength: str):
        batch = [words[k] for k in rows]
        if runtime == "numpy":
            from crasp_compiler.runtime import run_tokens

            return run_tokens(model, batch, dtype=np_dtype, on_overlength=overlength).values
        from crasp_compiler.runtime.torch_module import TorchTransformer

        module = TorchTransformer(model)
        if dtype == "float32":
            module = module.float()
        with _torch_no_grad():
            decided = module.run(batch, on_overlength=overlength)
        return {k: v.cpu().numpy() for k, v in decided.items()}

    if covered:
        ok, values = case.attempt(f"{step}", execute, covered, "error")
        if ok:
            compare_outputs(
                case,
                step,
                program,
                values,
                [words[k] for k in covered],
                [traces[k] for k in covered],
            )
    if uncovered:
        k = uncovered[0]
        from crasp_compiler.errors import CraspError

        try:
            with quiet_warnings():
                values = execute([k], "error")
        except SlowCase:
            raise
        except CraspError:
            return  # the clean refusal
        except Exception as err:
            case.note("traceback", f"{step}-uncovered", f"{type(err).__name__}: {err}", err)
            return
        compare_outputs(
            case, f"{step}-uncovered(not refused)", program, values, [words[k]], [traces[k]]
        )


@contextlib.contextmanager
def _torch_no_grad():
    import torch

    with torch.no_grad():
        yield


def fuzz_crasp(case: Case, rng: random.Random) -> None:
    from crasp_compiler import format_program, interpret, parse_program
    from crasp_compiler.languages.crasp.compile import compile_program

    text, how = crasp_text(rng)
    case.repro.update(how)
    case.repro["text"] = shorten(text)
    if case.dry:
        return
    ok, program = case.attempt("parse", parse_program, text, "fuzz.cr")
    if not ok:
        return
    # print / re-parse: the printed program must read back as the same program
    ok, printed = case.attempt("print", format_program, program)
    if ok:
        ok, again = case.attempt("reparse-printed", parse_program, printed, "printed.cr")
        if ok and again != program:
            case.note(
                "disagree",
                "roundtrip",
                "the printed program parses to a different program: " + shorten(printed, 400),
            )
        elif not ok and case.findings and case.findings[-1].cls == "refused":
            case.findings[-1].cls = "disagree"
            case.findings[-1].message = (
                "the printed program does not parse: " + case.findings[-1].message
            )
    words = _draw_words(rng, program.alphabet, text)
    traces = []
    for tokens in words:
        ok, trace = case.attempt("interpret", interpret, program, tokens)
        if not ok:
            return
        traces.append(trace)
    # an out-of-alphabet token must be refused
    stranger = rng.choice(["<bos>", "ε", "", "zz", "\x00", "\u2212"])
    if stranger not in program.alphabet:
        ok, _ = case.attempt("interpret-stranger", interpret, program, [*words[-1], stranger])
        if ok:
            case.note(
                "disagree",
                "interpret-stranger",
                f"token {stranger!r} outside the alphabet was accepted",
            )
        elif case.findings[-1].cls == "refused":
            case.findings.pop()  # the expected refusal
    _check_naive(case, program, words, traces)
    modes = [("heaviside", None)]
    if rng.random() < 0.35:
        modes.append(("relu", rng.choice([0, 1, 3, 8, 12])))
    if rng.random() < 0.25:
        modes.append(("layernorm", None))
    use_torch = rng.random() < 0.15
    for mode, max_len in modes:
        ok, model = case.attempt(
            f"compile-{mode}", compile_program, program, mode=mode, max_len=max_len
        )
        if not ok:
            continue
        if mode == "relu":  # inputs around the guarantee
            extra = [
                [rng.choice(program.alphabet) for _ in range(n)] for n in (max_len, max_len + 1)
            ]
            extra_traces = []
            for w in extra:
                ok, trace = case.attempt("interpret", interpret, program, w)
                if not ok:
                    return
                extra_traces.append(trace)
            run_words, run_traces = words + extra, traces + extra_traces
        else:
            run_words, run_traces = words, traces
        _run_model(
            case, f"numpy-{mode}-float64", program, model, run_words, run_traces, "float64", "numpy"
        )
        if rng.random() < 0.3:
            _run_model(
                case,
                f"numpy-{mode}-float32",
                program,
                model,
                run_words,
                run_traces,
                "float32",
                "numpy",
            )
        if use_torch:
            _run_model(
                case,
                f"torch-{mode}-float64",
                program,
                model,
                run_words,
                run_traces,
                "float64",
                "torch",
            )


def _check_naive(case: Case, program, words, traces) -> None:
    """The interpreter against the naive evaluator of tests/support/naive.py on short inputs."""
    if not _naive_viable(program):
        return
    for tokens, trace in zip(words, traces, strict=True):
        if len(tokens) > 6:
            continue
        try:
            expected = naive_values(program, tokens)
        except (RecursionError, ValueError):
            return
        for name in program.names:
            got = [
                bool(v) if trace.values[name].dtype == bool else int(v) for v in trace.values[name]
            ]
            if got != list(expected[name]):
                t = next(
                    t for t, (a, b) in enumerate(zip(got, expected[name], strict=True)) if a != b
                )
                case.note(
                    "disagree",
                    "interpret-vs-naive",
                    kind="interpreter differs from the naive evaluator",
                    message=f"{name} at t={t} on {' '.join(tokens)!r}: interpreter {shorten(got[t], 60)}, "
                    f"naive {shorten(expected[name][t], 60)}",
                )
                return
