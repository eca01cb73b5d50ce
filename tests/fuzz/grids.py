"""The ``grids`` family: TOML grid files through ``load_grid`` and ``crasp sweep`` (with
training replaced by a no-op)."""

from __future__ import annotations

import contextlib
import json
import math
import random
from pathlib import Path

from tests.fuzz.case import Case, invoke, shorten
from tests.fuzz.workspace import workdir

TRAIN_TYPES: dict[str, tuple] = {
    "task": (str,),
    "pe": (str,),
    "steps": (int,),
    "seed": (int,),
    "batch_size": (int,),
    "lr": (int, float),
    "weight_decay": (int, float),
    "d_model": (int,),
    "n_layers": (int, type(None)),
    "n_heads": (int,),
    "dropout": (int, float),
    "max_positions": (int, type(None)),
    "random_base": (str,),
    "warmup_steps": (int,),
    "grad_clip": (int, float, type(None)),
    "eval_every": (int,),
    "early_stop": (bool,),
    "test_size": (int,),
    "test_seed": (int,),
    "eval_batch_size": (int,),
    "bins": (list, type(None)),
    "train_max": (int, type(None)),
    "test_offsets": (bool,),
    "numeric_kind": (str,),
    "numeric_n": (int,),
    "scales": (list, tuple),
    "compare_compiled": (bool,),
    "compiled_backend": (str,),
    "compiled_mode": (str,),
    "device": (str,),
}
POSITIVE = {
    "steps",
    "batch_size",
    "d_model",
    "n_heads",
    "eval_every",
    "test_size",
    "eval_batch_size",
    "numeric_n",
    "lr",
}


def _config_problem(config: dict) -> str | None:
    """A value in an accepted run's config that training cannot use, or None."""
    for key, value in config.items():
        types = TRAIN_TYPES.get(key)
        if types is None:
            continue
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            return f"{key} = {shorten(repr(value), 60)} (expected {' or '.join(t.__name__ for t in types)})"
        if key in POSITIVE and isinstance(value, int | float) and not value > 0:
            return f"{key} = {value!r} (must be > 0)"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{key} = {value!r} (not finite)"
        if key == "dropout" and not 0 <= value < 1:
            return f"dropout = {value!r}"
        if key == "bins" and value is not None:
            ok = (
                all(
                    isinstance(b, list | tuple)
                    and len(b) == 2
                    and all(type(x) is int for x in b)
                    and 0 <= b[0] <= b[1]
                    for b in value
                )
                and value
            )
            if not ok:
                return f"bins = {shorten(repr(value), 80)}"
        if key == "scales" and not all(
            isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s)
            for s in value
        ):
            return f"scales = {shorten(repr(value), 80)}"
        if key == "numeric_kind" and value not in ("positional", "standard"):
            return f"numeric_kind = {value!r}"
        if key == "compiled_mode" and value not in ("hard", "softmax"):
            return f"compiled_mode = {value!r}"
    return None


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string is JSON-compatible for these
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items())
            + "}"
        )
    raise TypeError(type(value))


def toml_text(spec: dict) -> str:
    """A TOML document for ``spec`` (top-level scalars, then tables, nested one level)."""
    lines = []
    tables = []
    for key, value in spec.items():
        if (
            isinstance(value, dict)
            and value
            and all(not isinstance(v, dict) for v in value.values())
        ):
            tables.append((key, value))
        elif isinstance(value, dict) and value:
            for sub, subvalue in value.items():
                if isinstance(subvalue, dict):
                    tables.append((f"{json.dumps(key)}.{json.dumps(str(sub))}", subvalue))
                else:
                    lines.append(
                        f"{json.dumps(key)}.{json.dumps(str(sub))} = {toml_value(subvalue)}"
                    )
        else:
            lines.append(f"{json.dumps(key)} = {toml_value(value)}")
    for name, table in tables:
        lines.append(
            f"\n[{name if '.' in name and name.startswith(chr(34)) else json.dumps(name)}]"
        )
        for key, value in table.items():
            lines.append(f"{json.dumps(str(key))} = {toml_value(value)}")
    return "\n".join(lines) + "\n"


def _base_grid(rng: random.Random) -> dict:
    if rng.random() < 0.5:
        return {
            "out": "runs/fuzz",
            "workers": 1,
            "base": {"steps": 10, "eval_every": 5, "test_size": 10, "bins": [[1, 10], [11, 20]]},
            "grid": {"task": ["tomita2", "d2"], "pe": ["ape", "nope"], "seed": [0, 1]},
            "task": {"d2": {"lr": 1e-4}},
        }
    return {
        "out": "runs/value",
        "workers": 1,
        "base": {"steps": 10, "numeric_n": 8, "test_size": 10},
        "grid": {
            "task": ["num_cumsum", "num_sort"],
            "numeric_kind": ["positional", "standard"],
            "seed": [0],
        },
    }


def _grid_mutation(rng: random.Random, spec: dict) -> str:
    fields_ = list(TRAIN_TYPES)
    kind = rng.randrange(10)
    if kind == 0:  # wrong type in base
        key = rng.choice(fields_)
        value = rng.choice(
            [
                "x",
                1.5,
                -1,
                0,
                True,
                [],
                [1],
                {"a": 1},
                10**30,
                float("nan"),
                float("inf"),
                "../../etc",
                "",
            ]
        )
        spec["base"][key] = value
        return f"base.{key} = {value!r}"
    if kind == 1:  # wrong grid list
        key = rng.choice(fields_)
        value = rng.choice(
            [
                [],
                "x",
                5,
                [[1]],
                [{"a": 1}],
                [None],
                ["x", 1],
                [1.5],
                ["../../../tmp/escape"],
                ["/abs"],
                ["a/../../b"],
            ]
        )
        spec["grid"][key] = value
        return f"grid.{key} = {value!r}"
    if kind == 2:  # bins
        value = rng.choice(
            [
                [[1]],
                [[5, 1]],
                [[-1, 2]],
                "abc",
                [[1, 2, 3]],
                [],
                [[0, 0]],
                [[1.5, 2]],
                [[1, 10**30]],
                [["a", "b"]],
                [[True, False]],
                [[1, 2], "x"],
            ]
        )
        spec["base"]["bins"] = value
        return f"bins = {value!r}"
    if kind == 3:  # unknown keys
        where = rng.choice(["top", "base", "grid", "task"])
        if where == "top":
            spec["surprise"] = 1
        elif where == "task":
            spec.setdefault("task", {})[rng.choice(["d2", "nope", "../x"])] = {
                rng.choice(["lr", "bogus", "out_dir"]): 1
            }
        else:
            spec[where]["bogus"] = [1] if where == "grid" else 1
        return f"unknown key in {where}"
    if kind == 4:  # out / out_dir / paths
        value = rng.choice(
            [
                "../../../../tmp/fuzz-escape",
                "/",
                "",
                ".",
                "\u0000",
                "a" * 5000,
                "~",
                123,
                True,
                [1],
                {"a": 1},
                "runs/\u202e",
                "/dev/null",
                "x/../../..",
            ]
        )
        if rng.random() < 0.7:
            spec["out"] = value
            return f"out = {value!r}"
        spec["base"]["out_dir"] = value
        return f"base.out_dir = {value!r}"
    if kind == 5:  # huge lists
        size = rng.choice([1000, 10_000, 100_000])
        key = rng.choice(["seed", "task", "lr"])
        if key == "seed":
            spec["grid"]["seed"] = list(range(size))
        elif key == "task":
            spec["grid"]["task"] = ["tomita2"] * size
        else:
            spec["grid"]["seed"] = list(range(300))
            spec["grid"]["lr"] = [1e-3] * 300
            spec["grid"]["batch_size"] = [8] * (size // 100)
            return f"grid seed x lr x batch_size = 300 x 300 x {size // 100}"
        return f"grid.{key} has {size} values"
    if kind == 6:  # workers / gpus
        key = rng.choice(["workers", "gpus"])
        value = rng.choice([0, -1, True, "2", 10**30, 1.5, None, [1], float("nan")])
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
        return f"{key} = {value!r}"
    if kind == 7:  # tables of the wrong kind
        key = rng.choice(["base", "grid", "task"])
        value = rng.choice([5, "x", [1, 2], True, {"d2": 5}, {"d2": [1]}])
        spec[key] = value
        return f"{key} = {value!r}"
    if kind == 8:  # task names
        value = rng.choice(
            [["nope"], [""], [5], ["d2", "d2"], ["../../etc/passwd"], ["\u0000"], [["d2"]], "d2"]
        )
        spec["grid"]["task"] = value
        return f"grid.task = {value!r}"
    spec.get("grid", {}).pop("task", None)
    spec.get("base", {}).pop("task", None)
    return "no task"


def _invalid_toml(rng: random.Random, text: str) -> tuple[bytes, str]:
    choice = rng.choice(
        [
            "flip",
            "truncate",
            "unclosed",
            "duplicate",
            "deep-array",
            "deep-table",
            "bad-utf8",
            "nul",
            "bom",
            "huge-int",
            "datetime",
            "empty",
        ]
    )
    data = text.encode()
    if choice == "flip":
        data = bytearray(data)
        for _ in range(rng.randint(1, 5)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data), "byte flips"
    if choice == "truncate":
        return data[: rng.randrange(len(data))], "truncated"
    if choice == "unclosed":
        return data + b'\nx = "unclosed\n', choice
    if choice == "duplicate":
        return data + b"\nworkers = 2\nworkers = 3\n", choice
    if choice == "deep-array":
        depth = rng.choice([100, 1000, 100_000])
        return data + b"\nbogus = " + b"[" * depth + b"]" * depth + b"\n", f"deep array {depth}"
    if choice == "deep-table":
        depth = rng.choice([100, 1000, 50_000])
        return (
            data + b"\nbogus = " + b"{a = " * depth + b"1" + b"}" * depth + b"\n",
            f"deep inline table {depth}",
        )
    if choice == "bad-utf8":
        return data + b"\n# \xff\xfe\n", choice
    if choice == "nul":
        return data + b"\n\x00\n", choice
    if choice == "bom":
        return b"\xef\xbb\xbf" + data, choice
    if choice == "huge-int":
        return data.replace(b"workers = 1", b"workers = " + b"9" * 5000), choice
    if choice == "datetime":
        return data.replace(b"workers = 1", b"workers = 1979-05-27T07:32:00Z"), choice
    return b"", choice


def fuzz_grids(case: Case, rng: random.Random) -> None:
    from crasp_compiler.experiments.train import sweep

    spec = _base_grid(rng)
    described = []
    for _ in range(rng.choice([1, 1, 2])):
        try:
            described.append(_grid_mutation(rng, spec))
        except (AttributeError, TypeError, KeyError):  # an earlier mutation replaced a table
            described.append("(mutation skipped: table replaced)")
    try:
        text = toml_text(spec)
    except (TypeError, ValueError) as err:
        text = f"# not expressible: {err}\n"
    data = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.2:
        data, what = _invalid_toml(rng, text)
        described.append("invalid TOML: " + what)
    folder = workdir() / "grids" / f"g{case.index % 3}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "grid.toml"
    path.write_bytes(data)
    case.repro.update(
        {"mutations": described, "toml": shorten(data.decode("utf-8", "backslashreplace"), 1200)}
    )
    if case.dry:
        return
    ok, loaded = case.attempt("load_grid", sweep.load_grid, path)
    if not ok:
        return
    runs, settings = loaded
    out = Path(settings["out"])
    for run in runs[:2000]:
        try:
            inside = Path(run.config["out_dir"]).resolve().is_relative_to(out)
        except (OSError, ValueError):
            inside = False
        if not inside:
            case.note(
                "unsafe",
                "load_grid",
                f"run {run.name!r} writes to {run.config['out_dir']!r}, outside out = {str(out)!r}",
                kind="run directory outside out",
            )
            break
    for run in runs[:2000]:
        problem = _config_problem(run.config)
        if problem:
            case.note(
                "accepted_invalid",
                "load_grid",
                f"run {run.name!r}: {problem}",
                kind=problem.split(" ")[0],
            )
            break
    if rng.random() < 0.25 and len(runs) <= 50:
        with _fake_training():
            invoke(case, "crasp sweep", ["sweep", str(path), "--workers", "1"])


@contextlib.contextmanager
def _fake_training():
    """``crasp sweep`` with every run's training replaced by a config round trip."""
    from crasp_compiler.experiments.train import sweep
    from crasp_compiler.experiments.train.loop import TrainConfig

    def fake(config: dict) -> tuple[str | None, dict | None]:
        TrainConfig.from_dict(config)
        return None, {"config": config, "fuzz": "training skipped"}  # what a run returns

    real = sweep._run_one
    sweep._run_one = fake
    try:
        yield
    finally:
        sweep._run_one = real
