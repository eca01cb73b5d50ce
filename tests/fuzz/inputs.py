"""The ``inputs`` family: hostile input lines for ``crasp interpret`` and ``crasp run``,
which must print the same answers when both succeed."""

from __future__ import annotations

import random
import sys

from tests.fuzz.case import Case, invoke, run_child, shorten
from tests.fuzz.mutate import random_unicode
from tests.fuzz.pcoc import pcoc_agree
from tests.fuzz.workspace import base_models, workdir

HOSTILE_TOKENS = [
    "(())",
    "ε",
    "<bos>",
    "BOS",
    '""',
    '"("',
    "a",
    "((",
    "\u2212",
    "\x00",
    "\ufeff",
    "\u202e(",
    "🙂",
    "\u0301",
    "(\u0301",
    "//",
    "#",
    "\ud800",
    "\udcff",
]


def _input_line(rng: random.Random, alphabet: tuple[str, ...]) -> str:
    kind = rng.randrange(10)
    if kind == 0:
        return rng.choice(
            [
                "",
                " ",
                "\t",
                "\n",
                "//",
                "// comment",
                "ε",
                "(())",
                "\u3000",
                "\u2028",
                "\x85",
                "\x00",
                "<bos>",
            ]
        )
    if kind == 1:  # very long
        n = rng.choice([1000, 10_000, 50_000, 200_000])
        return " ".join(rng.choice(alphabet) for _ in range(n))
    if kind == 2:  # very long single token
        return rng.choice(alphabet) * rng.choice([1000, 100_000])
    if kind == 3:
        return "".join(random_unicode(rng) for _ in range(rng.randint(1, 30)))
    tokens = [rng.choice(alphabet) for _ in range(rng.randint(0, 12))]
    if kind >= 7:  # a clean line over the alphabet (both commands must answer alike)
        return rng.choice([" ", "  ", "\t"]).join(tokens)
    for _ in range(rng.randint(1, 3)):
        tokens.insert(
            rng.randint(0, len(tokens)), rng.choice([*HOSTILE_TOKENS, random_unicode(rng)])
        )
    sep = rng.choice([" ", "  ", "\t", "\u3000", "\u00a0", "\u2009", " \r "])
    return sep.join(tokens)


def _stdin_bytes(rng: random.Random, lines: list[str]) -> bytes:
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    kind = rng.randrange(6)
    if kind == 0:
        bad = rng.choice(
            [b"\xff", b"\xc3\x28", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"]
        )
        pos = rng.randint(0, len(data))
        data = data[:pos] + bad + data[pos:]
    elif kind == 1:
        data = data.replace(b"\n", b"\r\n")
    elif kind == 2:
        data = b"\xef\xbb\xbf" + data
    elif kind == 3:
        data = data + b"\x00" * rng.randint(1, 5)
    return data


def _vector_line(rng: random.Random, n: int) -> str:
    words = [str(rng.randint(-9, 9)) for _ in range(n)]
    for _ in range(rng.randint(0, 3)):
        bad = rng.choice(
            [
                "1e999",
                "-1e999",
                "nan",
                "inf",
                "0x10",
                "1_000",
                "١٢",
                "\u22121",
                "+-1",
                "1e-400",
                "9" * 5000,
                "1.",
                ".5",
                "1e",
                "",
                "ε",
                "\x00",
                "1e308",
                "-0",
            ]
        )
        words[rng.randrange(n)] = bad
    if rng.random() < 0.2:
        words = words[: rng.randint(0, n)] + words[: rng.randint(0, 3)]
    return rng.choice([" ", "\t", "  "]).join(words)


def fuzz_inputs(case: Case, rng: random.Random) -> None:
    models = base_models()
    if rng.random() < 0.25:
        return _fuzz_pcoc_inputs(case, rng, models)
    name = rng.choice(["dyck1", "dyck1", "c_near_a_ln", "aa_star_relu8"])
    info = models[name]
    program = {
        "dyck1": "examples/crasp/dyck1.cr",
        "c_near_a_ln": "examples/crasp/c_near_a.cr",
        "aa_star_relu8": "examples/crasp/aa_star.crasp",
    }[name]
    lines = [_input_line(rng, info["alphabet"]) for _ in range(rng.choice([1, 1, 3]))]
    via = rng.choice(["argv", "stdin", "stdin"])
    flags = [
        f
        for f in ("--trace", "--outputs", "--float32", "--beyond-guarantee warn")
        if rng.random() < 0.12
    ]
    if any(len(line) > 20000 for line in lines):
        flags = [f for f in flags if f not in ("--trace", "--outputs")]
    case.repro.update(
        {
            "model": name,
            "program": program,
            "via": via,
            "flags": flags,
            "lines": [shorten(repr(x), 300) for x in lines],
        }
    )
    argv = [lines[0]] if via == "argv" else []
    stdin = _stdin_bytes(rng, lines) if via == "stdin" else None
    if stdin is not None:
        case.repro["stdin"] = shorten(repr(stdin), 400)
    interp_flags = [f for f in flags if f in ("--trace", "--outputs")]
    run_flags = [w for f in flags for w in f.split()]
    if case.dry:
        return None
    if rng.random() < 0.04:  # a real process: argv bytes, real stdout encoding
        return _subprocess_inputs(
            case,
            ["interpret", program, *interp_flags],
            ["run", str(info["path"]), *run_flags],
            argv,
            stdin,
        )
    c1, r1 = invoke(case, "interpret", ["interpret", program, *interp_flags, *argv], stdin)
    c2, r2 = invoke(case, "run", ["run", str(info["path"]), *run_flags, *argv], stdin)
    if c1 == "ok" and c2 == "ok" and not flags and r1.stdout.split() != r2.stdout.split():
        case.note(
            "disagree",
            "interpret-vs-run",
            f"interpret printed {shorten(r1.stdout, 200)!r}, run printed {shorten(r2.stdout, 200)!r}",
        )


def _subprocess_inputs(
    case: Case, interp: list[str], run: list[str], argv: list[str], stdin: bytes | None
) -> None:
    case.repro["subprocess"] = True
    exe = [sys.executable, "-c", "from crasp_compiler.cli import main; main()"]
    outputs = []
    for step, args in (("interpret(subprocess)", interp), ("run(subprocess)", run)):
        full = [
            *exe,
            *args,
            # argv holds bytes: a lone surrogate becomes invalid UTF-8 (surrogatepass), and
            # a NUL, which no argument can hold, is dropped
            *(x.encode("utf-8", "surrogatepass").replace(b"\0", b"") for x in argv),
        ]
        proc = run_child(case, step, full, stdin if stdin is not None else b"")
        if proc is None:
            continue
        text = (proc.stdout + proc.stderr).decode("utf-8", "replace")
        if proc.returncode < 0:
            case.note("crash", step, f"killed by signal {-proc.returncode}: {text[-300:]}")
        elif "Traceback (most recent call last)" in text:
            case.note("traceback", step, text[-1200:])
        elif proc.returncode == 0:
            outputs.append(proc.stdout.split())
        elif proc.returncode in (1, 2) and text.strip():
            case.note("refused", step, text.strip().splitlines()[-1])
        else:
            case.note("traceback", step, f"exit status {proc.returncode}: {text[-300:]}")
    if (
        len(outputs) == 2
        and "--trace" not in interp
        and "--outputs" not in interp
        and len(run) == 2
        and outputs[0] != outputs[1]
    ):
        case.note(
            "disagree", "interpret-vs-run(subprocess)", f"{outputs[0][:20]} vs {outputs[1][:20]}"
        )


def _fuzz_pcoc_inputs(case: Case, rng: random.Random, models: dict) -> None:
    name = rng.choice(["cumsum4", "sort4_softmax", "permute8"])
    info = models[name]
    n = info["n"]
    width = 2 * n if name == "permute8" else n
    lines = [_vector_line(rng, width) for _ in range(rng.choice([1, 2, 4]))]
    if rng.random() < 0.1:
        lines.append(" ".join("1" for _ in range(rng.choice([10_000, 100_000]))))
    data = _stdin_bytes(rng, lines)
    case.repro.update(
        {"model": name, "program": info["program"], "stdin": shorten(repr(data), 500)}
    )
    via_file = rng.random() < 0.3
    case.repro["via"] = "file" if via_file else "stdin"
    if case.dry:
        return
    args_in = []
    stdin = data
    if via_file:
        path = workdir() / "vectors.txt"
        path.write_bytes(data)
        args_in, stdin = [str(path)], None
    c1, r1 = invoke(
        case, "interpret-pcoc", ["interpret", info["program"], "--n", str(n), *args_in], stdin
    )
    c2, r2 = invoke(case, "run-pcoc", ["run", str(info["path"]), *args_in], stdin)
    if c1 == "ok" and c2 == "ok":
        a, b = r1.stdout.split("\n"), r2.stdout.split("\n")
        try:
            va = [[float(x) for x in line.split()] for line in a if line.strip()]
            vb = [[float(x) for x in line.split()] for line in b if line.strip()]
        except ValueError:
            case.note(
                "disagree",
                "interpret-vs-run-pcoc",
                f"unparsable output {shorten(r1.stdout, 200)!r} / {shorten(r2.stdout, 200)!r}",
            )
            return
        tol = 2e-6 if "softmax" in name else 0.0
        if len(va) != len(vb) or any(
            len(x) != len(y) or not pcoc_agree(x, y, tol) for x, y in zip(va, vb, strict=False)
        ):
            case.note(
                "disagree",
                "interpret-vs-run-pcoc",
                f"interpret {shorten(r1.stdout, 300)!r} vs run {shorten(r2.stdout, 300)!r}",
            )
