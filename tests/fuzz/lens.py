"""The ``lens`` family: TransformerLens exports with a mutated ``config.json`` through
``crasp info``, ``run`` and ``check``."""

from __future__ import annotations

import json
import random
import shutil
from functools import cache
from typing import Any

from tests.fuzz import ROOT
from tests.fuzz.case import Case, invoke, shorten
from tests.fuzz.mutate import dump_header, hostile_json
from tests.fuzz.workspace import workdir

LENS_BASES = {
    "aa_star_relu8": ("examples/crasp/aa_star.crasp", {"mode": "relu", "max_len": 8}, "a a a a"),
    "dyck1_relu8": ("examples/crasp/dyck1.cr", {"mode": "relu", "max_len": 8}, "( ( ) ) ("),
}
LENS_VALUES: dict[str, list[Any]] = {
    "act_fn": ["gelu", "gelu_new", "solu_ln", "silu", "Relu", "relu "],
    "normalization_type": ["LN", "LNPre", "RMS", "RMSPre", ""],
    "positional_embedding_type": ["rotary", "shortformer", "alibi", "Standard"],
    "attn_only": [True, 1, "false"],
    "use_attn_scale": [False, 0, "true"],
    "default_prepend_bos": [False, 0, "true"],
    "n_ctx": [1, 2, 10**6, 0, -1, 9.0, "9"],
    "n_layers": [0, 2, 100, -1, 1.5],
    "d_model": [0, 1, 7, 9, 10**9],
    "d_head": [0, 2, 64],
    "n_heads": [0, 1, 3, 10**9],
    "d_mlp": [0, 1, 4096],
    "d_vocab": [0, 1, 3, 50257],
    "d_vocab_out": [0, 2, 50257],
    "model_name": ["gpt2", "", 5],
    "dtype": ["float32", "float16", "bfloat16", "int8"],
    "bos_id": [1, -1, 10**9, "0"],
    "version": [1, 3, True, 2.0, "2"],
    "format": ["crasp-model", "", None],
    "mode": ["heaviside", "layernorm", "softmax"],
    "accept": ["nope", None, 5],
}
MEANINGLESS = {"model_name"}  # cfg fields a TransformerLens model does not depend on


@cache
def lens_exports() -> dict[str, dict]:
    """Each LENS_BASES model exported for TransformerLens (a directory) and what ``crasp
    run`` prints for its input."""
    from click.testing import CliRunner

    from crasp_compiler import load_program
    from crasp_compiler.cli import main as cli
    from crasp_compiler.languages.crasp.compile import compile_program
    from crasp_compiler.model import save_model

    out = {}
    for name, (path, options, line) in LENS_BASES.items():
        model_path = workdir() / f"lens-{name}.npz"
        save_model(compile_program(load_program(ROOT / path), **options), model_path)
        folder = workdir() / f"lens-{name}"
        runner = CliRunner()
        result = runner.invoke(
            cli, ["export", "--format", "lens", "-o", str(folder), str(model_path)]
        )
        if result.exit_code != 0:
            raise RuntimeError(f"lens export of {path} failed: {result.output}")
        answer = runner.invoke(cli, ["run", str(folder), line])
        if answer.exit_code != 0:
            raise RuntimeError(f"crasp run of the lens export of {path} failed: {answer.output}")
        config = json.loads((folder / "config.json").read_text())
        out[name] = {"folder": folder, "input": line, "answer": answer.stdout, "config": config}
    return out


def mutate_lens_config(rng: random.Random, config: dict) -> tuple[str, tuple, bool]:
    """Mutate a lens export's ``config.json`` (a dict, in place). Returns what changed, the
    path of the field (empty for the whole file) and whether the change is one a
    TransformerLens model built from ``cfg`` would differ by (a ``cfg`` field, other than
    its name, given another value or type)."""
    roll = rng.random()
    if roll < 0.08:
        return rng.choice(["not-json", "list", "empty", "deep", "bom", "nan"]), (), False
    if roll < 0.7:
        path: tuple = ("cfg", rng.choice(sorted(config["cfg"])))
    elif roll < 0.9:
        path = ("crasp", rng.choice(sorted(config["crasp"])))
    else:
        path = (rng.choice(sorted(config)),)
    parent = config
    for key in path[:-1]:
        parent = parent[key]
    old = parent.get(path[-1])
    if rng.random() < 0.15:
        del parent[path[-1]]
        return f"delete {'.'.join(path)}", path, path[0] == "cfg" and path[-1] not in MEANINGLESS
    candidates = LENS_VALUES.get(path[-1], [])
    value = rng.choice(candidates) if candidates and rng.random() < 0.7 else hostile_json(rng)
    parent[path[-1]] = value
    changed = type(value) is not type(old) or value != old
    meaning = path[0] == "cfg" and path[-1] not in MEANINGLESS and changed
    return f"{'.'.join(path)} = {shorten(repr(value), 40)}", path, meaning


def _lens_text(what: str, config: dict) -> str:
    whole = {
        "not-json": lambda: json.dumps(config)[:100],
        "list": lambda: json.dumps([config]),
        "empty": lambda: "",
        "deep": lambda: "[" * 100_000 + "]" * 100_000,
        "bom": lambda: "\ufeff" + json.dumps(config),
        "nan": lambda: json.dumps(config).replace('"version": 2', '"version": NaN'),
    }
    if what in whole:
        return whole[what]()
    return dump_header(config)


def fuzz_lens(case: Case, rng: random.Random) -> None:
    exports = lens_exports()
    name = rng.choice(sorted(exports))
    base = exports[name]
    config = json.loads(json.dumps(base["config"]))
    what, path, meaning = mutate_lens_config(rng, config)
    check = rng.random() < 0.4
    case.repro.update({"base": name, "mutation": what, "check": check})
    if case.dry:
        return
    folder = workdir() / "lens" / str(case.index % 3)
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(base["folder"], folder)
    (folder / "config.json").write_text(_lens_text(what, config), "utf-8", "surrogatepass")
    classes = [invoke(case, "info", ["info", str(folder)])[0]]
    cls, result = invoke(case, "run", ["run", str(folder), base["input"]])
    classes.append(cls)
    if cls == "ok" and result.stdout != base["answer"]:
        case.note(
            "disagree",
            "run",
            f"answered {shorten(result.stdout, 200)!r}, the unmutated export {base['answer']!r}",
        )
    if check:
        classes.append(
            invoke(case, "check", ["check", str(folder), "--samples", "5", "--max-len", "8"])[0]
        )
    field_name = str(path[-1]) if path else ""
    if meaning and "ok" in classes[1:]:
        case.note(
            "accepted_invalid",
            "run/check",
            f"{what}: accepted, though a TransformerLens model built from cfg differs",
            kind=f"{'.'.join(path)} accepted",
        )
    for finding in case.findings:
        if finding.cls == "refused" and field_name and field_name not in finding.message:
            case.note(
                "unlocated",
                finding.step,
                f"{what}: refused without naming {field_name!r}: {finding.message}",
                kind=f"refusal without {'.'.join(path)}",
            )
            break
