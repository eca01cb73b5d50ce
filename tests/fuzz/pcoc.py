"""The ``pcoc`` family: PCOC program text interpreted and compiled; the model must agree
with the interpreter within the declared bounds and refuse, warn or agree outside them."""

from __future__ import annotations

import math
import random
from functools import cache

from tests.fuzz import ROOT
from tests.fuzz.case import Case, SlowCase, shorten
from tests.fuzz.mutate import UNICODE_POOL, mutate_tokens

PCOC_POOL = [
    "recv",
    "send",
    "from",
    "to",
    "default",
    "round",
    "for",
    "in",
    "..",
    "if",
    "else",
    "margin",
    "bound",
    "input",
    "slot",
    "output",
    "{",
    "}",
    "(",
    ")",
    "=",
    "==",
    "<",
    ">=",
    "+",
    "-",
    "*",
    "**",
    "div",
    "%",
    "i",
    "n",
    "r",
    "k",
    "x",
    "0",
    "1",
    "2**k",
    "2**1024",
    "10**400",
    "1e308",
    "1e309",
    "1e-400",
    "0.5",
    "clamp(x, -1, 1e300)",
    "abs(",
    "relu(",
    "min(",
    "max(",
    "log2(",
    "ceil_log2(",
    "\n",
    ";",
    "//",
    "not",
    "and",
    "or",
    *UNICODE_POOL[:8],
]


@cache
def pcoc_corpus() -> list[tuple[str, str]]:
    paths = sorted((ROOT / "examples" / "pcoc").glob("*.pcoc")) + sorted(
        (ROOT / "examples" / "pcoc_sends").glob("*.pcoc")
    )
    return [(p.name, p.read_text(encoding="utf-8")) for p in paths]


def _pcoc_random(rng: random.Random) -> str:
    """A random (mostly valid) PCOC program."""
    bound = rng.choice(["1e6", "1e9", "100"])
    two = rng.random() < 0.3
    lines = [f"input x bound {bound}"]
    if two:
        lines.append(f"input y bound {bound}")
    lines.append(f"slot s bound {rng.choice(['1e6', '1e9', '1e12'])}")
    lines.append("output x, s" if rng.random() < 0.7 else "output s")
    patterns = [
        "i - 1",
        "i + 1",
        "n - 1 - i",
        "(i + 1) % n",
        "i div 2",
        "2 * i",
        "i",
        "0",
        "i - 2**k",
        "(i + n div 3) % n",
    ]
    exprs = [
        "x + t",
        "x - t",
        "2 * x",
        "0.5 * x",
        "min(x, t)",
        "max(x, t)",
        "abs(x - t)",
        "relu(x - t)",
        "clamp(x, -3, 3)",
        "x if x > t margin 0.5 else t",
        "x > t margin 0.5",
        "x + i",
        "s + t",
        "-x",
    ]
    body_rounds = []
    for _ in range(rng.randint(1, 3)):
        looped = rng.random() < 0.4
        pattern = rng.choice(patterns if looped else [p for p in patterns if "k" not in p])
        stmts = [
            f"t = recv {rng.choice(['x', 's'])} from {pattern} default {rng.choice(['0', '-1e6', '1e6', '0.5'])}"
        ]
        if two and rng.random() < 0.5:
            stmts.append("u = recv y from i - 1 default 0")
            stmts.append("x = x + u")
        target = rng.choice(["x", "s"])
        stmts.append(f"{target} = {rng.choice(exprs)}")
        if rng.random() < 0.4:
            cond = rng.choice(["i % 2 == 0", "(i + r) % 2 == 1", "i >= 1", "x > 0 margin 0.5"])
            stmts = [*stmts[:1], f"if {cond} {{ " + "; ".join(stmts[1:]) + " } else { s = s - 1 }"]
        round_text = "round {\n  " + "\n  ".join(stmts) + "\n}"
        if looped:
            stop = rng.choice(["ceil_log2(n)", "2", "n", "0"])
            round_text = f"for k in 0 .. {stop} {{\n{round_text}\n}}"
        body_rounds.append(round_text)
    return "\n".join(lines + body_rounds) + "\n"


def _pcoc_hostile(rng: random.Random) -> str:
    choices = [
        "input x bound 1e9\noutput x\nround {\n  t = recv x from i - 2**1024 default 0\n  x = x + t\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = clamp(x, -1, 1e300)\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = x + 2**1024\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = x * 10**400\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = 1e308 * x + 1e308\n}\n",
        "input x bound 1e400\noutput x\nround {\n  t = recv x from i - 1 default 0\n  x = t\n}\n",
        "input x bound 1e9\noutput x\nround {\n  t = recv x from i - 1 default 1e309\n  x = min(x, t)\n}\n",
        "input x bound 1e9\noutput x\nfor k in 0 .. 10**9 {\n round {\n  x = x + 1\n }\n}\n",
        "input x bound 1e9\noutput x\nfor k in 0 .. n**n**n {\n round {\n  x = x\n }\n}\n",
        "input x bound 1e9\noutput x\nfor k in 0 .. 2000 {\n round {\n  t = recv x from i - 1 default 0\n  x = max(x, t)\n }\n}\n",
        "input x bound 1e9\noutput x\nround {\n  t = recv x from i div 0 default 0\n  x = t\n}\n",
        "input x bound 1e9\noutput x\nround {\n  t = recv x from i % 0 default 0\n  x = t\n}\n",
        "input x bound 1e9\noutput x\nround {\n  t = recv x from log2(0) default 0\n  x = t\n}\n",
        "input x bound 1e9\noutput x\nround {\n  t = recv x from 2**-1 default 0\n  x = t\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = " + "(" * 300 + "x" + ")" * 300 + "\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = " + "-" * 500 + "x\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = x if x > 0 margin 0 else -x\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = x if x > 0 margin 1e300 else -x\n}\n",
        "input x bound 1e-300\noutput x\nround {\n  x = x if x > 0 margin 1e-300 else -x\n}\n",
        "input x bound 1e9\nslot y bound 1e9 = 1e400\noutput y\nround {\n  y = y + x\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = x + "
        + "9" * rng.choice([400, 4301, 5000])
        + "\n}\n",
        "input x bound 1e9\noutput x\nround {\n  t = recv x from i - "
        + "9" * 5000
        + " default 0\n  x = t\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = 0.5 ** 2000 * x\n}\n",
        "input x bound 1e9\noutput x\nround {\n  x = x ** 2\n}\n",
        "input x bound 1e9\ninput x bound 1\noutput x\nround { x = x }\n",
        "input x bound 1e9\noutput x, x\nround { x = x }\n",
        "input i bound 1e9\noutput i\nround { i = i }\n",
        "input x bound 1e9\ninput d bound 1e6\noutput x\nround {\n  got = send x to d default 0\n  x = got + 2**1024\n}\n",
        "input x bound 1e9\ninput d bound 1e300\noutput x\nround {\n  got = send x to d default 0\n  x = got\n}\n",
        "input x bound 1e9\noutput x\n"
        + "round { t = recv x from i - 1 default 0; x = x + t }\n" * rng.choice([50, 300]),
        "output x\nslot x bound 1\nround { x = n }\n",
        "input x\noutput x\nround { t = recv x from i - 1 default 0; x = t }\n",
    ]
    return rng.choice(choices)


def pcoc_text(rng: random.Random) -> tuple[str, dict]:
    roll = rng.random()
    if roll < 0.35:
        name, text = rng.choice(pcoc_corpus())
        count = rng.choice([1, 1, 2, 3])
        text, described = mutate_tokens(text, rng, PCOC_POOL, count)
        return text, {"kind": "mutation", "base": name, "mutations": described}
    if roll < 0.55:
        name, text = rng.choice(pcoc_corpus())
        return text, {"kind": "example", "base": name}
    if roll < 0.85:
        return _pcoc_random(rng), {"kind": "random"}
    return _pcoc_hostile(rng), {"kind": "hostile"}


def _pcoc_inputs(rng: random.Random, program, n: int, inside: bool):
    """Input vectors (k, n): small values (inside) or some beyond a declared bound."""
    import numpy as np

    k = len(program.inputs)
    values = np.zeros((k, n))
    for row, name in enumerate(program.inputs):
        bound = program.slot(name).bound
        scale = min(bound if bound is not None else 100.0, 100.0)
        if name == "d":  # destinations of sends: a partial permutation
            perm = list(range(n))
            rng.shuffle(perm)
            values[row] = [p if rng.random() < 0.85 else rng.choice([-1, n, n + 5]) for p in perm]
            continue
        if rng.random() < 0.5:
            values[row] = [rng.randint(-int(scale), int(scale)) for _ in range(n)]
        else:
            values[row] = [rng.uniform(-scale, scale) for _ in range(n)]
        if not inside and bound is not None and math.isfinite(bound):
            j = rng.randrange(n)
            values[row, j] = rng.choice([1.5, 10.0, 1e6]) * bound * rng.choice([1, -1])
    return values


def pcoc_agree(a, b, tol: float) -> bool:
    import numpy as np

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    same = (a == b) | (np.isnan(a) & np.isnan(b))  # equal infinities agree
    with np.errstate(invalid="ignore", over="ignore"):
        scale = np.maximum(1.0, np.maximum(np.abs(a), np.abs(b)))
        close = np.abs(a - b) <= 1e-6 * scale + tol
    return bool(np.all(same | close))


def fuzz_pcoc(case: Case, rng: random.Random) -> None:
    import warnings

    import numpy as np

    from crasp_compiler.errors import CraspError
    from crasp_compiler.languages.pcoc.check import check_pcoc
    from crasp_compiler.languages.pcoc.compile import compile_program, run_pcoc
    from crasp_compiler.languages.pcoc.interpret import interpret_program
    from crasp_compiler.languages.pcoc.program import parse_program

    text, how = pcoc_text(rng)
    case.repro.update(how)
    case.repro["text"] = shorten(text)
    ok, program = case.attempt("parse", parse_program, text, "fuzz.pcoc")
    if not ok:
        return
    sends = "send" in text
    n = rng.choice([1, 2, 3, 4, 5, 7, 8] if not sends else [1, 2, 4, 5, 8])
    if rng.random() < 0.1:
        n = rng.choice([16, 33])
    case.repro["n"] = n
    if case.dry:
        return
    ok, _ = case.attempt("check", check_pcoc, program, n)
    if not ok:
        return
    mode = "softmax" if rng.random() < 0.2 else "hard"
    tolerance = rng.choice([1e-6, 1e-3]) if mode == "softmax" else 0.0
    case.repro["mode"] = mode
    ok, model = case.attempt(
        f"compile-{mode}", compile_program, program, n, mode=mode, tolerance=tolerance or 1e-6
    )
    if not ok:
        # the interpreter still has to run (or refuse) cleanly
        vectors = _pcoc_inputs(rng, program, n, True)
        case.attempt("interpret", interpret_program, program, n, vectors)
        return
    runtimes = ["numpy"] + (["torch"] if rng.random() < 0.1 else [])
    for trial in range(4):
        inside = trial < 3
        vectors = _pcoc_inputs(rng, program, n, inside)
        label = "inside" if inside else "outside"
        try:
            expected = interpret_program(program, n, vectors, check_promises=True)
            promised = True
            case.ran.append(f"interpret-{label}-promised")
        except SlowCase:
            raise
        except CraspError:
            promised = False
            ok, expected = case.attempt(
                f"interpret-{label}", interpret_program, program, n, vectors
            )
            if not ok:
                if case.findings and case.findings[-1].cls == "refused":
                    case.findings.pop()  # an input the reference itself refuses: nothing to compare
                continue
        except Exception as err:
            case.note("traceback", f"interpret-{label}", f"{type(err).__name__}: {err}", err)
            continue
        for runtime in runtimes:
            step = f"run-{runtime}-{mode}-{label}"
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    got = run_pcoc(model, [vectors], runtime=runtime)
            except SlowCase:
                raise
            except CraspError:
                continue  # a clean refusal (e.g. an input outside its bound)
            except Exception as err:
                case.note("traceback", step, f"{type(err).__name__}: {err}", err)
                continue
            case.ran.append(step)
            # a warning addressed to the user (not numpy's overflow RuntimeWarning)
            warned = any(
                not issubclass(w.category, RuntimeWarning | DeprecationWarning) for w in caught
            )
            # within the bound the model records against the interpreter (softmax: its
            # tolerance, rounding included)
            stated = model.guarantee.errors.get("float64", 0.0)
            for name in program.outputs:
                slack = stated
                if pcoc_agree(expected.outputs[name], got[name][0], slack):
                    continue
                message = (
                    f"slot {name} on inputs {np.array2string(vectors, precision=6, separator=',')}: "
                    f"interpreter {np.array2string(np.asarray(expected.outputs[name]), precision=9, separator=',')}, "
                    f"model {np.array2string(got[name][0], precision=9, separator=',')}"
                )
                if not inside and not warned:
                    case.note(
                        "disagree",
                        step,
                        message,
                        kind="input outside its declared bound: no refusal or warning",
                    )
                elif inside and promised:
                    case.note("disagree", step, message, kind="covered input")
                elif inside and not warned:
                    case.note("uncovered", step, message, kind="a promise of the program is broken")
                break
