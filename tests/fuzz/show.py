"""The ``show`` family: small programs over hostile tokens and labels through ``crasp
show``: a picture of its kind or a one-line error."""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

from tests.fuzz.case import Case, invoke, shorten
from tests.fuzz.mutate import random_unicode
from tests.fuzz.workspace import load_npy, npy, npz_members, workdir, write_npz

SHOW_TOKENS = [
    "<!--<script",
    "</script>",
    "<script>alert(1)</script>",
    "<!--",
    "-->",
    "]]>",
    "$\\foo$",
    "$x^$",
    "$$",
    "$",
    "\\",
    "&",
    "&amp;",
    "&lt;",
    "{{x}}",
    "%s",
    "null",
    "NaN",
    "א",
    "שלום",
    "مرحبا",
    "🙂",
    "x" * 5000,
]
SHOW_LABELS = [
    *SHOW_TOKENS,
    "👩\u200d👩\u200d👧",
    "e\u0301",
    "$x^$",
    "\u202eab",
    "\x01",
    "\x1b[31mred",
    "\x7f",
    "a\nb",
    "\u2028",
    "",
    " ",
    "\ud800",
]
SHOW_PROGRAMS = [
    "A = # {0}\nB = # {1}\nD = A > B\n",
    "C_open = # {0}\nC_close = # {1}\nV = C_open < C_close\nCV = # V\nD = (CV == 0) && (C_open == C_close)\n",
    "P = i % 2 == 1\nA = # {0}\nD = P && A > 0\n",
    "A = # ({0} || {1})\nD = A >= 1\n",
]


def _token_literal(token: str) -> str:
    return '"' + re.sub(r'([\\"])', r"\\\1", token) + '"'


def show_spec(rng: random.Random) -> dict:
    """One ``crasp show`` case: a small program over hostile tokens (compiled in
    ``options``; ``labels`` are then edited into the model file's header), an input, and
    where the picture goes."""
    tokens = list(dict.fromkeys(rng.choice(SHOW_TOKENS) for _ in range(rng.randint(2, 5))))
    if len(tokens) < 2:
        tokens.append("b")
    if rng.random() < 0.2:
        tokens.append(random_unicode(rng))
    text = "alphabet " + " ".join(_token_literal(t) for t in tokens) + "\n"
    text += rng.choice(SHOW_PROGRAMS).format(*(_token_literal(t) for t in tokens[:2]))
    mode = rng.choice(["heaviside", "heaviside", "relu", "layernorm"])
    labels = []
    if rng.random() < 0.3:
        labels = [rng.choice(SHOW_LABELS) for _ in range(rng.randint(1, 3))]
    suffix = rng.choice([".html", ".html", ".png", ".svg"])
    flags = []
    if suffix != ".html":
        flags = ["--dpi", str(rng.choice([10, 30, 50]))]
        flags += ["--picture", rng.choice(["all", "residual", "attention", "outputs", "program"])]
    if rng.random() < 0.2:
        flags += ["--beyond-guarantee", "warn"]
    return {
        "program": text,
        "options": {"mode": mode, "max_len": 16} if mode == "relu" else {"mode": mode},
        "labels": labels,
        "relabel_seed": rng.randrange(2**32),
        "input": _show_input(rng, tokens),
        "where": rng.choice(["here", "here", "here", "missing", "under-a-file"]),
        "name": rng.choice(["x", "x", "a b", "ü", "<x>"]) + suffix,
        "flags": flags,
    }


def _relabel(rng: random.Random, path: Path, labels: list[str]) -> None:
    """Put ``labels`` into the model file's header: residual rows, head and MLP labels,
    definition names."""
    import numpy as np

    members = npz_members(path)
    header = json.loads(str(load_npy(members["header.npy"])))
    for label in labels:
        spots = [("residual", k) for k in range(len(header["residual"]))]
        for layer in header["layers"]:
            spots += [(head, "label") for head in layer["heads"]]
        definitions = header["info"].get("definitions") or {}
        where, key = rng.choice([*spots, ("definitions", None)] if definitions else spots)
        if where == "residual":
            header["residual"][key] = label
        elif where == "definitions":
            name = rng.choice(sorted(definitions))
            definitions[label] = definitions.pop(name)
        else:
            where[key] = label
    members["header.npy"] = npy(np.array(json.dumps(header)))
    write_npz(path, members)


def _show_input(rng: random.Random, alphabet: tuple[str, ...]) -> str:
    roll = rng.random()
    if roll < 0.02:
        return " ".join(rng.choice(alphabet) for _ in range(rng.choice([500, 2000])))
    words = [rng.choice(alphabet) for _ in range(rng.randint(0, 8))]
    if roll < 0.15:
        words.insert(rng.randint(0, len(words)), rng.choice(SHOW_LABELS))
    return " ".join(words)


def _check_picture(case: Case, path: Path, suffix: str) -> None:
    """A picture ``crasp show`` said it wrote: present, of its kind, and (HTML) with no raw
    ``<`` in its JSON data block."""
    if not path.is_file() or path.stat().st_size == 0:
        case.note("bad_output", "output", f"{path.name} missing or empty", kind="no picture")
        return
    data = path.read_bytes()
    if suffix == ".png" and not data.startswith(b"\x89PNG"):
        case.note("bad_output", "output", f"{path.name} is not a PNG", kind="not a PNG")
    elif suffix == ".svg" and b"<svg" not in data[:2000]:
        case.note("bad_output", "output", f"{path.name} is not an SVG", kind="not an SVG")
    elif suffix == ".html":
        text = data.decode("utf-8", "replace")
        match = re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S)
        if match is None:
            case.note("bad_output", "output", "no JSON data block", kind="no data block")
        elif "<" in match.group(1):
            at = match.group(1).index("<")
            case.note(
                "bad_output",
                "output",
                f"raw '<' in the JSON data block: {match.group(1)[max(0, at - 40) : at + 40]!r}",
                kind="raw < in the data block",
            )


def fuzz_show(case: Case, rng: random.Random) -> None:
    from crasp_compiler.languages.crasp.compile import compile_program
    from crasp_compiler.languages.crasp.program import parse_program
    from crasp_compiler.model import save_model

    spec = show_spec(rng)
    case.repro.update({k: shorten(v, 600) if isinstance(v, str) else v for k, v in spec.items()})
    if case.dry:
        return
    folder = workdir() / "show" / str(case.index % 3)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    model_path = folder / "m.npz"
    ok, program = case.attempt("parse", parse_program, spec["program"])
    if not ok:
        return
    ok, model = case.attempt("compile", compile_program, program, **spec["options"])
    if not ok:
        return
    save_model(model, model_path)
    if spec["labels"]:
        _relabel(random.Random(spec["relabel_seed"]), model_path, spec["labels"])
    name = spec["name"]
    target = {
        "here": folder / name,
        "missing": folder / "missing" / "deeper" / name,
        "under-a-file": model_path / name,
    }[spec["where"]]
    args = ["show", str(model_path), spec["input"], "-o", str(target), *spec["flags"]]
    cls, result = invoke(case, "show", args)
    if cls == "ok":
        for written in (result.stdout or "").splitlines():
            _check_picture(case, Path(written), target.suffix)
    elif target.is_file() and target.stat().st_size == 0:
        case.note("bad_output", "output", f"refused, but left an empty {name}", kind="empty file")
