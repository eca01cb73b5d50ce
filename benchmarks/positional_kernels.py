"""Fitting positional functions directly: Appendix G.2 of the C-RASP paper (Huang et al.).

200 position embeddings ``p_0 … p_199 ∈ ℝ^d`` and ``Q, K ∈ ℝ^{d×d}`` are fitted so that
the attention logit of query position i on key position j ≤ i,

    s(i, j) = p_jᵀ Kᵀ Q p_i = (Q p_i) · (K p_j),

reproduces a target φ(i, j) (the paper's Figures 5 and 6 write ``p_jᵀ Kᵀ Q p_i``; its
text ``p_iᵀ Kᵀ Q p_j`` with j ≤ i). φ is ``2 log 50`` where a condition on i − j holds
and 0 elsewhere (``FUNCTIONS``; the combined one is the sum of a local and a periodic
one). Training minimises, per Adam step (lr 1e-3) over 64 windows of length 50 at offsets
o uniform in [0, 150],

    mean over windows and causal pairs o ≤ j ≤ i < o + 50 of (s(i, j) − φ(i, j))²
    + 0.01 · (‖P‖²_F / |P| + ‖Q‖²_F / |Q| + ‖K‖²_F / |K|),

for 15,000 steps, from entries of P, Q, K i.i.d. N(0, 1/d) (the paper's Proposition 54;
G.2 does not say); the test MSE at length n averages the first term over every window of
length n at offsets 0 … 200 − n. ``run`` writes one JSON record per (function, d,
seed) under ``docs/results/length-generalization/positional_kernels/`` and skips those
already there (an interrupted run resumes); ``report`` prints the table of
docs/length-generalization.md, ``report --check`` compares it with the page and
``report --write`` rewrites it there.

Usage (one torch thread)::

    python benchmarks/positional_kernels.py run
    python benchmarks/positional_kernels.py report --write
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results" / "length-generalization" / "positional_kernels"
PAGE = ROOT / "docs" / "length-generalization.md"
TABLE = "positional-kernels"

POSITIONS = 200
TRAIN_LENGTH = 50
TEST_LENGTHS = (50, 100, 150)
VALUE = 2 * math.log(50)  # φ where the condition holds
# "generalises": the test MSE at length 150 is at most this fraction of the MSE of
# predicting 0 everywhere at that length (what is left of the target's own energy)
GENERALISES = 0.1


def _is_prime(k: int) -> bool:
    return k > 1 and all(k % q for q in range(2, math.isqrt(k) + 1))


class Function(NamedTuple):
    """A target φ(i, j) = VALUE · (number of ``conditions`` on i − j that hold)."""

    label: str  # as the paper writes it
    kind: str  # local, periodic or neither
    conditions: tuple[Callable[[int], bool], ...]

    def target(self, length: int) -> np.ndarray:
        """φ on a window of ``length`` positions: entry [i, j] for i − j ≥ 0, else 0."""
        by_distance = np.array(
            [VALUE * sum(bool(c(k)) for c in self.conditions) for k in range(length)]
        )
        distance = np.subtract.outer(np.arange(length), np.arange(length))
        return np.where(distance >= 0, by_distance[np.clip(distance, 0, None)], 0.0)


def _equal(c: int) -> Function:
    return Function(f"j = i−{c}", "local", (lambda k: k == c,))


def _after(c: int) -> Function:
    return Function(f"j > i−{c}", "local", (lambda k: k < c,))


def _periodic(c1: int, c2: int) -> Function:
    return Function(f"i−j ≡ {c2} (mod {c1})", "periodic", (lambda k: k % c1 == c2,))


def _before(c: int) -> Function:
    return Function(f"j < i−{c}", "neither", (lambda k: k > c,))


# the constants are ours: the paper's text does not give those of its figures
FUNCTIONS: dict[str, Function] = {
    "eq1": _equal(1),
    "eq3": _equal(3),
    "gt3": _after(3),
    "mod2-0": _periodic(2, 0),
    "mod3-1": _periodic(3, 1),
    "lt3": _before(3),
    "prime": Function("i−j is prime", "neither", (_is_prime,)),
    "combined": Function(
        "j = i−3, plus i−j ≡ 1 (mod 3)",
        "neither",
        _equal(3).conditions + _periodic(3, 1).conditions,
    ),
}
DIMS = (32, 256)
SEEDS = (0, 1, 2, 3, 4)
# the paper's reading of its Figures 5 and 6, per kind and d
PAPER = {
    ("local", 32): "less well than at d = 256",
    ("local", 256): "generalises",
    ("periodic", 32): "generalises",
    ("periodic", 256): "less well than at d = 32",
    ("neither", 32): "poorly",
    ("neither", 256): "poorly",
}


class Settings(NamedTuple):
    """Everything a fit depends on besides the function, d and the seed."""

    steps: int = 15_000
    batch: int = 64
    lr: float = 1e-3
    weight_penalty: float = 0.01
    positions: int = POSITIONS
    train_length: int = TRAIN_LENGTH
    test_lengths: tuple[int, ...] = TEST_LENGTHS
    eval_every: int = 1_000


def _causal_mse(error: Any, length: int) -> Any:
    """Mean of ``error²`` over the causal pairs (j ≤ i) of every length × length window
    in the last two axes of ``error``."""
    import torch

    mask = torch.ones(length, length, dtype=torch.bool).tril()
    return error.pow(2)[..., mask].mean(-1)


def window_mse(embeddings: Any, query: Any, key: Any, function: Function, length: int) -> float:
    """The MSE of s(i, j) = (Q p_i)·(K p_j) against φ over the causal pairs of a window of
    ``length`` positions, averaged over every offset 0 … positions − length."""
    import torch

    with torch.no_grad():
        scores = (embeddings @ query.T) @ (embeddings @ key.T).T  # [i, j]
        target = torch.as_tensor(function.target(length), dtype=scores.dtype)
        offsets = range(len(embeddings) - length + 1)
        errors = torch.stack([scores[o : o + length, o : o + length] - target for o in offsets])
        return float(_causal_mse(errors, length).mean())


def fit(name: str, d: int, seed: int, settings: Settings | None = None) -> dict[str, Any]:
    """Fit P, Q, K to FUNCTIONS[name] at width ``d`` from ``torch.manual_seed(seed)``;
    the record without provenance: train MSE (last batch, and at every ``eval_every``
    steps over every offset at the training length), test MSE per length, CPU seconds."""
    import torch

    settings = settings or Settings()
    function = FUNCTIONS[name]
    started = time.process_time()
    torch.manual_seed(seed)
    # entries i.i.d. N(0, 1/d), the initialisation of the paper's Proposition 54
    embeddings, query, key = weights = tuple(
        torch.nn.Parameter(torch.randn(rows, d) / math.sqrt(d))
        for rows in (settings.positions, d, d)
    )
    optimizer = torch.optim.Adam(weights, lr=settings.lr)
    length = settings.train_length
    target = torch.as_tensor(function.target(length), dtype=torch.float32)
    window = torch.arange(length)
    curve = []
    loss = torch.tensor(math.nan)
    for step in range(settings.steps + 1):
        if step % settings.eval_every == 0 or step == settings.steps:
            curve.append([step, window_mse(embeddings, query, key, function, length)])
        if step == settings.steps:
            break
        offsets = torch.randint(0, settings.positions - length + 1, (settings.batch,))
        rows = offsets[:, None] + window  # [batch, length]
        scores = (embeddings @ query.T) @ (embeddings @ key.T).T
        windows = scores[rows[:, :, None], rows[:, None, :]]  # [batch, i, j]
        loss = _causal_mse(windows - target, length).mean()
        penalty = sum(w.pow(2).mean() for w in weights)
        optimizer.zero_grad()
        (loss + settings.weight_penalty * penalty).backward()
        optimizer.step()
    return {
        "function": name,
        "label": function.label,
        "kind": function.kind,
        "d": d,
        "seed": seed,
        "settings": settings._asdict(),
        "train_mse": float(loss.detach()),
        "curve": curve,
        "test_mse": {
            str(n): window_mse(embeddings, query, key, function, n) for n in settings.test_lengths
        },
        "norms": {  # what the paper's regulariser bounds
            "max_p": float(embeddings.detach().norm(dim=1).max()),
            "kq_spectral": float(torch.linalg.matrix_norm(key.T @ query, ord=2).detach()),
        },
        "cpu_seconds": round(time.process_time() - started, 2),
    }


def record_path(folder: Path, name: str, d: int, seed: int) -> Path:
    return folder / f"{name}-d{d}-seed{seed}.json"


def run(
    names: Sequence[str], dims: Sequence[int], seeds: Sequence[int], settings: Settings, out: Path
) -> None:
    """Fit every (function, d, seed) without a record in ``out`` and write its record; a
    record of other settings is an error (it is not overwritten)."""
    import torch

    from crasp_compiler.experiments.train.provenance import provenance

    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        for d in dims:
            for seed in seeds:
                path = record_path(out, name, d, seed)
                if path.exists():
                    try:
                        old = json.loads(path.read_text())["settings"]
                    except (ValueError, RecursionError, KeyError, TypeError):
                        sys.exit(f"{path}: an unreadable record is there; move it first")
                    if old != json.loads(json.dumps(settings._asdict())):
                        sys.exit(f"{path}: a record of other settings is there; move it first")
                    print(f"{path.name}: recorded, skipped", flush=True)
                    continue
                record = fit(name, d, seed, settings)
                record["provenance"] = provenance("cpu", "float32")
                temporary = path.with_suffix(".tmp")
                temporary.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
                temporary.replace(path)
                shown = ", ".join(f"{n}: {v:.3g}" for n, v in record["test_mse"].items())
                print(f"{path.name}: {shown} ({record['cpu_seconds']:.0f} CPU s)", flush=True)


# ------------------------------------------------------------------------------- report


def _problem(record: Any) -> str | None:
    """Why ``record`` cannot be read into the table (None when it can)."""
    if not isinstance(record, dict):
        return "not a JSON object"
    if not isinstance(record.get("function"), str) or record["function"] not in FUNCTIONS:
        return "function"
    for field in ("d", "seed"):
        if not isinstance(record.get(field), int) or isinstance(record.get(field), bool):
            return field
    if not isinstance(record.get("settings"), dict):
        return "settings"
    mse = record.get("test_mse")
    if not isinstance(mse, dict):
        return "test_mse"
    for n in TEST_LENGTHS:
        value = mse.get(str(n))
        if not isinstance(value, int | float) or isinstance(value, bool):
            return f"test_mse: {n}"
        if not math.isfinite(value) or value < 0:
            return f"test_mse: {n}"
    return None


def read_records(folder: Path = RESULTS) -> list[dict[str, Any]]:
    """The records in ``folder``; one that cannot be read is skipped with a warning
    naming it."""
    kept = []
    for path in sorted(folder.glob("*.json")):
        try:
            record = json.loads(path.read_text())
            problem = _problem(record)
        except (OSError, ValueError, RecursionError) as err:
            problem = f"unreadable: {type(err).__name__}"
        if problem is None:
            kept.append(record)
        else:
            warnings.warn(f"{path}: record skipped ({problem})", stacklevel=2)
    return kept


def zero_mse(function: Function, length: int) -> float:
    """The MSE of predicting 0 everywhere: φ's mean square over the causal pairs."""
    target = function.target(length)
    return float((target[np.tril_indices(length)] ** 2).mean())


def _cell(values: Sequence[float]) -> str:
    """Median (min–max) over seeds."""
    median = statistics.median(values)
    return f"{median:.1e} ({min(values):.1e}–{max(values):.1e})"


def table(records: Sequence[dict[str, Any]]) -> str:
    """Per function and d: median test MSE over seeds (min–max) per length, the MSE of
    predicting 0 at the longest length and the median ratio to it, how many seeds
    generalise (``GENERALISES``), and the paper's reading."""
    settings = {json.dumps(r["settings"], sort_keys=True) for r in records}
    if len(settings) > 1:
        sys.exit(f"the records hold {len(settings)} different settings; keep one")
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        groups[record["function"], record["d"]].append(record)
    last = TEST_LENGTHS[-1]
    head = ["function", "kind", "d", "seeds"]
    head += [f"MSE {n}" for n in TEST_LENGTHS]
    head += [f"predicting 0: MSE {last}", f"MSE {last} / predicting 0 (median)"]
    head += [f"seeds ≤ {GENERALISES} × predicting 0 at {last}", "paper"]
    rows = []
    order = {name: i for i, name in enumerate(FUNCTIONS)}
    for (name, d), runs in sorted(groups.items(), key=lambda g: (order[g[0][0]], g[0][1])):
        function = FUNCTIONS[name]
        mse = {n: [r["test_mse"][str(n)] for r in runs] for n in TEST_LENGTHS}
        zero = zero_mse(function, last)
        good = sum(v <= GENERALISES * zero for v in mse[last])
        rows.append(
            [f"`{function.label}`", function.kind, str(d), str(len(runs))]
            + [_cell(mse[n]) for n in TEST_LENGTHS]
            + [f"{zero:.2g}", f"{statistics.median(mse[last]) / zero:.2g}"]
            + [f"{good} of {len(runs)}", PAPER.get((function.kind, d), "–")]
        )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


MARK = re.compile(rf"(<!-- table: {TABLE} -->\n)(.*?)(<!-- end table -->)", re.DOTALL)


def report(mode: str, folder: Path = RESULTS, page: Path = PAGE) -> None:
    """Print the table (``mode`` "print"), compare it with ``page``'s ("check": exit 1
    if they differ) or rewrite it there ("write")."""
    text = table(read_records(folder))
    if mode == "print":
        print(text)
        return
    old = page.read_text()
    if not MARK.search(old):
        sys.exit(f"{page}: no <!-- table: {TABLE} --> marker")
    new = MARK.sub(lambda m: f"{m[1]}{text}\n{m[3]}", old)
    if mode == "check":
        if new != old:
            sys.exit(f"{page}: the {TABLE} table differs from the records; rerun {__file__}")
        print(f"{page}: the {TABLE} table matches the records")
    elif new != old:
        page.write_text(new)
        print(f"rewrote the {TABLE} table of {page}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    fitting = modes.add_parser("run", help="fit and record every (function, d, seed)")
    fitting.add_argument("--functions", default=",".join(FUNCTIONS), help="of " + str(FUNCTIONS))
    fitting.add_argument("--dims", default=",".join(map(str, DIMS)))
    fitting.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    fitting.add_argument("--steps", type=int, default=Settings.steps)
    fitting.add_argument("--out", type=Path, default=RESULTS, help="the records' folder")
    reading = modes.add_parser("report", help="print the table, or check or write the page's")
    group = reading.add_mutually_exclusive_group()
    group.add_argument("--check", action="store_true", help="exit 1 if the page's differs")
    group.add_argument("--write", action="store_true", help="rewrite the page's table")
    args = parser.parse_args()
    if args.mode == "run":
        names = args.functions.split(",")
        unknown = [n for n in names if n not in FUNCTIONS]
        if unknown:
            parser.error(f"unknown functions {unknown}; known: {list(FUNCTIONS)}")
        dims = [int(d) for d in args.dims.split(",")]
        seeds = [int(s) for s in args.seeds.split(",")]
        settings = Settings(steps=args.steps, eval_every=min(1_000, max(1, args.steps // 10)))
        run(names, dims, seeds, settings, args.out)
    else:
        report("check" if args.check else "write" if args.write else "print")


if __name__ == "__main__":
    main()
