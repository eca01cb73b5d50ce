"""The real float horizon of compiled models, measured with adversarial inputs.

The compiler records per float type a *proven* horizon (``model.guarantee.dtypes``): the
longest input for which its rounding analysis proves every output exact. This script
measures an upper bound on the *real* one: the shortest input it can find on which the
float model disagrees with the reference interpreter at some position. Random inputs
never find it (``benchmarks/horizon.py``); the failures sit at near-ties, where rounding
of the stored counts ``C/(t+1)``, of ``ONE = 1/(t+1)`` and of the matrix rows that add
them reaches the comparison margin ``1/(2(t+1))``.

**Scenarios.** Per program, a few families of inputs that put a comparison at a near-tie
(``SCENARIOS``): *multi-position* families are one periodic string with a near-tie at
every position (Majority over ``(01)*``: ``C1 − C0 ∈ {−1, 0}`` everywhere; Dyck-1 over
``()()…``: ``C_open − C_close ∈ {0, 1}``), so one run of the model on a long string tests
every length up to it; *single-position* families put the near-tie at
the last position only (``(^k )^(k+1)``: the first violation of Dyck-1; ``1^(n−3) 000``:
the first ``000`` of Tomita 4, read through the gates ``ONE·P(i−c)``).

**Simulator** (numpy runtime only). For every candidate position t of a family up to
``--max-len`` (vectorised, in chunks) the model's computation at position t is replayed
on one residual row, with the executor's own code and weights in the run's float type
(:class:`RowSimulator`): the token embedding, each uniform head's running mean as the
executor forms it (a float64 prefix sum — here the exact sum over the prefix, which the
family gives in closed form, plus the head's value at t computed from the row — divided
by t + 1 in float64 and cast), hard lookups copying the embedding of the key, every MLP
through ``forward.block_forward`` (the same matrix products, biases, Heaviside units,
layer norms and column updates as ``runtime.run``), the readout and the decision rule.
It gives the first failing t per family and which comparison went wrong there. The
simulator is exact for the numpy executor because that one sums each matrix row left to
right (OpenBLAS with one thread; the script checks it and records ``numpy_row_order``);
a BLAS that sums in another order rounds differently, which is why the torch module
(MKL) fails elsewhere, and it is not simulated.

**Confirmation** (what counts). The failing input is built as a string and run, in a
child process, through the real runtimes — ``crasp_compiler.runtime.run_tokens(model, [tokens],
dtype)`` and the torch module ``TorchTransformer(model)`` in that dtype — and compared at
every position with ``interpret_batch``. numpy runs at the simulator's first failing
length (its first wrong position must be that length). torch runs a multi-position
family as long as memory allows; where it is first wrong at position p, the inputs of
length p, p + 1, …, p + 64 (``EXTRA``) are run until one fails (MKL sums a row in an
order that depends on where the row lies in the product, so the input ending at p may
pass), then that input once more with forward hooks on the layers that keep the residual
row at p, to name the comparison that went wrong there. A single-position family runs in
torch at the simulator's length, hooked (without hooks where they do not fit in memory,
the comparison then unnamed). A run whose estimated peak memory (a line
through calibration runs of 2^21 and 2^23 tokens, plus 15 %) exceeds ``--memory-gib`` is
cut to the longest length that fits (a multi-position family then shows agreement up to
there) or skipped with a note; the simulator's prediction is kept, marked not run.

**relu section** (``--relu``): relu-mode models compiled with ``max_len = N``
(``--relu-max-len``, default 1024) for every example, float32, run on a battery of
inputs of length N meant to push the ramps' rounding (single-symbol runs, two-block
``a^k b^(N−k)``, returns to a tie ``a^k b^k``, blocks ``(a^r b^r)*``, a long imbalance
followed by alternation, three-block patterns, the generators' members and random
strings), every position compared (so every prefix length ≤ N). Records the first
failure per runtime (or none up to N) and how far the raw outputs are from exact values.

Usage::

    python benchmarks/adversarial_horizon.py --out docs/results/adversarial_horizon.json
        # everything: 13 minutes on 2 shared cores, runs under 6 GiB each
    python benchmarks/adversarial_horizon.py --programs majority.crasp --modes layernorm
    python benchmarks/adversarial_horizon.py --max-len 20000000 --memory-gib 4 --no-relu
    python benchmarks/adversarial_horizon.py --markdown docs/results/adversarial_horizon.json

The search is deterministic (no sampling but the relu section's seeded random strings;
only the lengths of runs cut by memory follow the memory measured in the calibration);
the measured part depends only on the models' weights and the runtimes, not on the
rounding analysis, so a rerun after the analysis changes puts the new proven horizons next
to the same measurements. ``OPENBLAS_NUM_THREADS`` (and OMP/MKL) default to 1 here, and
torch runs with one thread.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _common import (  # noqa: E402
    EXAMPLES_DIR,
    ROOT,
    example_names,
    load_average,
    machine,
    provenance_line,
    revision,
)

sys.path.insert(0, str(ROOT))  # for tests.support.recognizers

from crasp_compiler import interpret_batch, load_program  # noqa: E402
from crasp_compiler.languages.crasp.compile import compile_program  # noqa: E402
from crasp_compiler.model.model import HeadKind, Mask, Rule, Weighting, head_kinds  # noqa: E402
from crasp_compiler.runtime import forward as fw  # noqa: E402
from crasp_compiler.runtime import run_tokens  # noqa: E402
from crasp_compiler.runtime.backend import NUMPY  # noqa: E402
from crasp_compiler.runtime.numpy_exec import NumpyParts, _mlp, decide, encode_vocab  # noqa: E402
from tests.support.recognizers import REGISTRY  # noqa: E402

DTYPES = {"float32": np.float32, "float64": np.float64}
PROGRAMS = ("dyck1.cr", "majority.crasp", "tomita4.crasp")
MODES = ("heaviside", "layernorm")
RUNTIMES = ("numpy", "torch")
CHUNK = 1 << 21  # candidate positions simulated at once
CALIBRATION = (1 << 21, 1 << 23)  # lengths of the runs that estimate a runtime's memory
SAFETY = 1.15  # margin on the estimated peak memory
EXTRA = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # lengths tried past a failing position


# ---------------------------------------------------------------- scenarios


@dataclass
class State:
    """What a family puts at positions ``t`` (arrays over candidates): the symbol at
    ``t − c`` (``tokens[c]``), each symbol's count up to t (inclusive), the count over
    the positions before t of Boolean definitions that uniform heads average, and the
    exact value of comparisons (by residual label) and outputs at t."""

    tokens: dict[int, np.ndarray]
    counts: dict[str, np.ndarray]
    before: dict[str, np.ndarray] = field(default_factory=dict)
    truth: dict[str, np.ndarray] = field(default_factory=dict)
    outputs: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class Scenario:
    """A family of adversarial inputs for one program (module docstring). ``multi``: one
    periodic string with a near-tie at every position (the input of length n is its
    prefix); otherwise the candidate positions are ``first, first + step, …`` and the
    input of length t puts the near-tie at its last position. ``decision`` names the
    comparison(s) the family sets near their threshold."""

    program: str
    name: str
    decision: str
    multi: bool
    first: int
    step: int
    text: Callable[[int], str]
    pattern: Callable[[int], str]
    state: Callable[[np.ndarray], State]


def _periodic(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n]


def _periodic_pattern(unit: str, n: int) -> str:
    k, rest = divmod(n, len(unit))
    return f'"{unit}"×{k}' + (f' "{unit[:rest]}"' if rest else "")


def _symbol_at(unit: str, t: np.ndarray) -> np.ndarray:
    """The symbol at position t ≥ 1 of ``unit*`` (position 0 is BOS: '')."""
    table = np.array(["", *unit])
    return np.where(t >= 1, table[(t - 1) % len(unit) + 1], "")


def _periodic_count(unit: str, symbol: str, t: np.ndarray) -> np.ndarray:
    per = unit.count(symbol)
    prefix = np.array([unit[:r].count(symbol) for r in range(len(unit))])
    return (t // len(unit)) * per + prefix[t % len(unit)]


def majority_alternating(t: np.ndarray) -> State:
    c1, c0 = _periodic_count("01", "1", t), _periodic_count("01", "0", t)
    return State(
        tokens={0: _symbol_at("01", t)},
        counts={"1": c1, "0": c0},
        truth={"M": c1 >= c0},
        outputs={"M": c1 >= c0},
    )


def dyck_alternating(t: np.ndarray) -> State:
    co, cc = _periodic_count("()", "(", t), _periodic_count("()", ")", t)
    zero = np.zeros_like(t)
    return State(
        tokens={0: _symbol_at("()", t)},
        counts={"(": co, ")": cc},
        before={"V": zero},
        truth={
            "V": co < cc,
            "C_open == C_close (<= half)": co <= cc,
            "C_open == C_close (>= half)": co >= cc,
            "CV == 0 (<= half)": np.ones_like(t, dtype=bool),
            "CV == 0 (>= half)": np.ones_like(t, dtype=bool),
        },
        outputs={"D": co == cc},
    )


def dyck_first_violation(t: np.ndarray) -> State:
    """``(^k )^(k+1)`` at t = 2k + 1: the first position where ``C_open < C_close``."""
    k = (t - 1) // 2
    ones = np.ones_like(t, dtype=bool)
    return State(
        tokens={0: np.full(t.shape, ")")},
        counts={"(": k, ")": k + 1},
        before={"V": np.zeros_like(t)},
        truth={
            "V": ones,
            "C_open == C_close (<= half)": ones,
            "C_open == C_close (>= half)": ~ones,
            "CV == 0 (<= half)": ~ones,
            "CV == 0 (>= half)": ones,
        },
        outputs={"D": ~ones},
    )


def tomita4_first_000(t: np.ndarray) -> State:
    """``1^(t−3) 000`` at t: the first ``000`` ends at the last position."""
    zeros = np.full(t.shape, "0")
    ones = np.ones_like(t, dtype=bool)
    return State(
        tokens={0: zeros, 1: zeros, 2: zeros},
        counts={"0": np.full_like(t, 3), "1": t - 3},
        before={"T": np.zeros_like(t)},
        truth={
            "P1": ones,
            "P2": ones,
            "T": ones,
            "# T == 0 (<= half)": ~ones,
            "# T == 0 (>= half)": ones,
        },
        outputs={"L": ~ones},
    )


SCENARIOS: dict[str, list[Scenario]] = {
    "majority.crasp": [
        Scenario(
            "majority.crasp",
            "alternating (01)*",
            "M = C1 >= C0 at C1 - C0 = -1 (odd t) and 0 (even t)",
            True,
            1,
            1,
            partial(_periodic, "01"),
            partial(_periodic_pattern, "01"),
            majority_alternating,
        )
    ],
    "dyck1.cr": [
        Scenario(
            "dyck1.cr",
            "alternating ()*",
            "C_open == C_close at C_open - C_close = 1 (odd t); V at C_open = C_close",
            True,
            1,
            1,
            partial(_periodic, "()"),
            partial(_periodic_pattern, "()"),
            dyck_alternating,
        ),
        Scenario(
            "dyck1.cr",
            "first violation (^k )^(k+1)",
            "V = C_open < C_close at C_open - C_close = -1; C_open == C_close (>= half)",
            False,
            1,
            2,
            lambda n: "(" * (n // 2) + ")" * (n // 2 + 1),
            lambda n: f'"("×{n // 2} ")"×{n // 2 + 1}',
            dyck_first_violation,
        ),
    ],
    "tomita4.crasp": [
        Scenario(
            "tomita4.crasp",
            "first 000 at the end, 1^(n-3) 000",
            "P1, P2 = ONE·P(i-c) >= 1: the gate ReLU(ONE + P - 1) rounds 1 + ONE",
            False,
            3,
            1,
            lambda n: "1" * (n - 3) + "000",
            lambda n: f'"1"×{n - 3} "0"×3',
            tomita4_first_000,
        )
    ],
}


# ---------------------------------------------------------------- the row simulator


def _embedding_label(label: str) -> bool:
    return label in ("BOS", "nonbos") or label.startswith("token:")


class RowSimulator:
    """The numpy executor's computation at single positions t, one residual row per
    candidate (module docstring), for models whose heads are uniform averages of
    columns the family counts, or hard lookups of the token embedding at ``t − c``."""

    def __init__(self, model, dtype: type) -> None:
        if model.features:
            raise ValueError("the row simulator takes models without positional features")
        self.model, self.dtype = model, dtype
        self.parts = NumpyParts(model, dtype)
        self.index = {s: k for k, s in enumerate(model.vocab)}
        self.layers = []
        for number, (layer, kinds) in enumerate(zip(model.layers, head_kinds(model), strict=True)):
            before = model.labels_at(2 * number)
            heads = []
            for head, kind in zip(layer.heads, kinds, strict=True):
                w_v = _dense(head.w_v).astype(dtype)
                w_o = _dense(head.w_o).astype(dtype)
                reads = [before[k] for k in np.flatnonzero(np.any(w_v != 0, axis=0))]
                averaging = head.mask is Mask.CAUSAL and head.weighting in (
                    Weighting.SOFTMAX,
                    Weighting.HARD,
                )
                if averaging and kind is HeadKind.UNIFORM:
                    heads.append(("mean", w_v, w_o, before, None))
                elif head.weighting is not Weighting.SOFTMAX and head.bias:
                    offset = max(head.bias, key=head.bias.get)
                    if offset < 1 or not all(_embedding_label(r) for r in reads):
                        raise ValueError(f"head {head.label!r}: not a lookup of a token")
                    heads.append(("lookup", w_v, w_o, before, offset))
                else:
                    raise ValueError(f"head {head.label!r}: the row simulator cannot run it")
            params = _mlp(layer.mlp, dtype) if layer.mlp is not None else None
            columns = fw.column_layer(NUMPY, [], params) if params is not None else None
            mlp = partial(fw.mlp_forward, NUMPY, params) if params is not None else None
            self.layers.append((heads, mlp, columns, written(model, number)))

    def embed(self, symbols: np.ndarray) -> np.ndarray:
        ids = np.zeros((1, len(symbols)), dtype=np.int64)  # '' (BOS) stays 0
        for symbol, k in self.index.items():
            ids[0, symbols == symbol] = k
        return self.parts.tokens(ids)

    def run(self, t: np.ndarray, state: State) -> tuple[dict[str, np.ndarray], dict]:
        """Per output, whether its decision at t is wrong; per labelled comparison the
        family knows, whether the model's bit there is wrong."""
        x = np.array(self.embed(state.tokens[0]), dtype=self.dtype)
        steps = t.astype(np.float64) + 1
        wrong_labels: dict[str, np.ndarray] = {}
        for heads, mlp, columns, after in self.layers:
            update = None
            for kind, w_v, w_o, before, offset in heads:
                if kind == "mean":
                    now = NUMPY.matmul_t(x, w_v)[0].astype(np.float64)  # (N, dv)
                    # each column the head reads, summed over the positions before t
                    total = now
                    for k in np.flatnonzero(np.any(w_v != 0, axis=0)):
                        prefix = self._column_sum(before[k], t, state)
                        total = total + prefix[:, None] * w_v[:, k].astype(np.float64)[None]
                    z = (total / steps[:, None]).astype(self.dtype)[None]
                else:
                    key = self.embed(state.tokens[offset])
                    z = NUMPY.matmul_t(key, w_v)
                result = NUMPY.matmul_t(z, w_o)
                update = result if update is None else update + result
            if update is not None:
                x = x + update
            if mlp is not None:
                x = fw.block_forward(None, mlp, x, None, None, columns)
            for label, truth in state.truth.items():
                if label in after:
                    bit = x[0, :, after[label]] > 0.5
                    wrong_labels[label] = wrong_labels.get(label, False) | (bit != truth)
        raw = self.parts.readout(x)
        wrong = {}
        for k, out in enumerate(self.model.outputs):
            decided = decide(out.rule, raw[..., k], steps[None])[0]
            wrong[out.name] = decided != state.outputs[out.name]
        return wrong, wrong_labels

    @staticmethod
    def _column_sum(label: str, t: np.ndarray, state: State) -> np.ndarray:
        """The sum of a residual column over positions 0 … t − 1 (exact, float64)."""
        if label == "BOS":
            return np.ones(t.shape)
        if label == "nonbos":
            return (t - 1).astype(np.float64)
        if label.startswith("token:"):
            symbol = label[len("token:") :]
            here = state.tokens[0] == symbol
            return (state.counts[symbol] - here).astype(np.float64)
        if label == "(free)":
            return np.zeros(t.shape)
        if label in state.before:
            return state.before[label].astype(np.float64)
        raise KeyError(f"the family does not give the prefix sum of column {label!r}")


def written(model, layer: int) -> dict[str, int]:
    """The residual columns the MLP of ``layer`` writes, by the label they hold after it."""
    mlp = model.layers[layer].mlp
    if mlp is None:
        return {}
    rows = np.any(_dense(mlp.w2) != 0, axis=1) | (np.asarray(mlp.b2) != 0)
    labels = model.labels_at(2 * layer + 2)
    return {labels[k]: int(k) for k in np.flatnonzero(rows)}


def numpy_row_order(width: int = 13, units: int = 3, rows: int = 4096) -> str:
    """Whether numpy's ``x @ W.T`` (float32, the executor's shapes) adds each row's terms
    left to right: every ordered triple of columns is probed with ``2^24``, ``−2^24`` and
    ``1`` (which of them cancel first shows in the result) at every row."""
    w = np.ones((units, width), dtype=np.float32)
    for a, b, c in itertools.permutations(range(width), 3):
        x = np.zeros((1, rows, width), dtype=np.float32)
        x[..., a], x[..., b], x[..., c] = 2.0**24, -(2.0**24), 1.0
        total = np.float32(0)
        for k in range(width):
            total = np.float32(total + x[0, 0, k])
        if not np.all(NUMPY.matmul_t(x, w) == total):
            return f"not left to right (columns {a}, {b}, {c})"
    return "left to right"


def _dense(w) -> np.ndarray:
    return w.toarray() if hasattr(w, "toarray") else np.asarray(w)


def simulate(scenario: Scenario, model, dtype_name: str, max_len: int) -> dict:
    """The first candidate position ≤ ``max_len`` at which the simulated numpy model
    decides an output wrong, and the comparisons wrong there."""
    sim = RowSimulator(model, DTYPES[dtype_name])
    start = time.perf_counter()
    span = CHUNK * scenario.step
    for lo in range(scenario.first, max_len + 1, span):
        t = np.arange(lo, min(lo + span, max_len + 1), scenario.step, dtype=np.int64)
        wrong, labels = sim.run(t, scenario.state(t))
        bad = np.zeros(t.shape, dtype=bool)
        for mask in wrong.values():
            bad |= mask
        if bad.any():
            i = int(np.argmax(bad))
            return {
                "first_failure": int(t[i]),
                "outputs_wrong": sorted(k for k, m in wrong.items() if m[i]),
                "comparisons_wrong": sorted(k for k, m in labels.items() if m[i]),
                "searched_to": int(t[i]),
                "seconds": round(time.perf_counter() - start, 1),
            }
    return {
        "first_failure": None,
        "searched_to": max_len,
        "seconds": round(time.perf_counter() - start, 1),
    }


# ---------------------------------------------------------------- real runs (child processes)


def _rss_gib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def _child(job: dict) -> dict:
    """One real run in a child process: the family's input of length n through the
    interpreter and one runtime, every position compared. With ``job["row"]`` = p (torch
    only), forward hooks on the layers keep the residual row of position p after each
    layer, and the comparisons the family knows are checked there."""
    start_rss, start = _rss_gib(), time.perf_counter()
    scenario = next(s for s in SCENARIOS[job["program"]] if s.name == job["scenario"])
    program = load_program(EXAMPLES_DIR / job["program"])
    model = compile_program(program, mode=job["mode"])
    text = scenario.text(job["n"])
    want = interpret_batch(program, [text])
    expected = {name: np.asarray(want[name])[0] for name in program.outputs}
    del want
    rows: dict[int, np.ndarray] = {}
    at = job.get("row")
    if job["runtime"] == "numpy":
        got = run_tokens(model, [text], dtype=DTYPES[job["dtype"]], on_overlength="ignore")
        values = {name: got.values[name][0] for name in program.outputs}
        del got
    else:
        import torch

        from crasp_compiler.runtime.torch_module import TorchTransformer

        torch.set_num_threads(1)
        module = TorchTransformer(model).to(dtype=getattr(torch, job["dtype"]))
        handles = []
        if at is not None:  # (a hook on a layer makes the pass take the general path)

            def keep(layer, _module, _args, output):
                rows[layer] = output[0, at].double().numpy().copy()

            for layer, block in enumerate(module.blocks):
                handles.append(block.register_forward_hook(partial(keep, layer)))
        ids, lengths = encode_vocab(model.vocab, [text])
        with torch.no_grad():
            raw = module(torch.from_numpy(ids), torch.from_numpy(lengths))
            decided = module.decide(raw)
        values = {name: decided[name][0].numpy() for name in program.outputs}
        for handle in handles:
            handle.remove()
        del raw, decided, module
    wrong_any = np.zeros(job["n"] + 1, dtype=bool)
    per_output = {}
    for name in program.outputs:
        differ = values[name].astype(np.float64) != expected[name].astype(np.float64)
        per_output[name] = int(differ.sum())
        wrong_any |= differ
    first = int(np.argmax(wrong_any)) if wrong_any.any() else None
    comparisons = None
    if rows:
        state = scenario.state(np.array([at]))
        comparisons = []
        for layer in range(len(model.layers)):
            columns = written(model, layer)
            for label, truth in state.truth.items():
                if label in columns and (rows[layer][columns[label]] > 0.5) != bool(truth[0]):
                    comparisons.append(label)
        comparisons = sorted(set(comparisons))
    return {
        "runtime": job["runtime"],
        "length": job["n"],
        "first_wrong_position": first,
        "wrong_positions": int(wrong_any.sum()),
        "wrong_by_output": per_output,
        "row_read_at": at,
        "comparisons_wrong_at_row": comparisons,
        "seconds": round(time.perf_counter() - start, 1),
        "peak_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "start_gib": round(start_rss, 2),
    }


def real_run(job: dict) -> dict:
    """``_child(job)`` in a fresh forked process (its memory is returned afterwards)."""
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(_child, job).result()


class Budget:
    """Memory of each (program, mode, dtype, runtime) as a line in the input length,
    fitted to the peaks of two calibration runs (2^21 and 2^23 tokens), and the longest
    input whose estimated peak stays below ``limit_gib`` (with a margin)."""

    def __init__(self, limit_gib: float) -> None:
        self.limit = limit_gib
        self.lines: dict[tuple, tuple[float, float]] = {}

    def _line(self, job: dict, scenario: Scenario) -> tuple[float, float]:
        key = (job["program"], job["mode"], job["dtype"], job["runtime"], _hooked(job))
        if key not in self.lines:
            sizes = [_last_candidate(scenario, n) for n in CALIBRATION]
            hook = {"row": 1} if _hooked(job) else {"row": None}
            peaks = [
                real_run({**job, **hook, "scenario": scenario.name, "n": n})["peak_gib"]
                for n in sizes
            ]
            per = max(peaks[1] - peaks[0], 0.0) / (sizes[1] - sizes[0])
            self.lines[key] = (peaks[0] - per * sizes[0], per)
        return self.lines[key]

    def longest(self, job: dict, scenario: Scenario) -> int:
        base, per = self._line(job, scenario)
        if per <= 0:
            return 1 << 62
        return int((self.limit / SAFETY - base) / per)

    def estimate(self, job: dict, n: int) -> float:
        key = (job["program"], job["mode"], job["dtype"], job["runtime"], _hooked(job))
        base, per = self.lines[key]
        return round(base + per * n, 2)


def _hooked(job: dict) -> bool:
    return job["runtime"] == "torch" and job.get("row") is not None


def plan(scenario: Scenario, runtime: str, dtype_name: str, t_sim: int | None, args):
    """The length to run ``runtime`` at: the simulator's failing length (numpy; torch on a
    single-position family), True for as long as fits (a multi-position family searched
    by torch, or agreement shown where nothing fails), None for no run (float64 and
    single-position families where nothing is predicted, unless --confirm-agreement)."""
    if runtime == "numpy" or not scenario.multi:
        if t_sim is not None:
            return t_sim
        agree = args.confirm_agreement or (scenario.multi and dtype_name == "float32")
        return True if agree else None
    if dtype_name == "float32" or args.confirm_agreement or t_sim is not None:
        return True
    return None


def _last_candidate(scenario: Scenario, n: int) -> int:
    """The largest candidate position ≤ n of a single-position family."""
    return n - (n - scenario.first) % scenario.step


# ---------------------------------------------------------------- one (program, mode, dtype)


def measure(program_name: str, mode: str, dtype_name: str, args, budget: Budget) -> dict:
    program = load_program(EXAMPLES_DIR / program_name)
    model = compile_program(program, mode=mode)
    proven = model.guarantee.dtypes.get(dtype_name)
    record: dict = {
        "program": program_name,
        "mode": mode,
        "dtype": dtype_name,
        "proven": proven,
        "scenarios": [],
    }
    for scenario in SCENARIOS[program_name]:
        sim = simulate(scenario, model, dtype_name, args.max_len)
        print(f"  {scenario.name}: simulator {sim}", flush=True)
        entry: dict = {
            "scenario": scenario.name,
            "multi_position": scenario.multi,
            "near_tie": scenario.decision,
            "simulator_numpy": sim,
            "runs": [],
        }
        t_sim = sim["first_failure"]
        for runtime in args.runtimes:
            job = {
                "program": program_name,
                "mode": mode,
                "dtype": dtype_name,
                "runtime": runtime,
                "scenario": scenario.name,
            }
            target = plan(scenario, runtime, dtype_name, t_sim, args)
            if target is None:
                continue
            # a single-position family's near-tie is its last position: torch reads the
            # residual row there (hooks) in the same run
            if runtime == "torch" and not scenario.multi and target is not True:
                job["row"] = target
            fits = budget.longest(job, scenario)
            if target is True:  # as long as fits
                target = min(args.max_len, fits)
                if not scenario.multi:
                    target = _last_candidate(scenario, target)
                job.pop("row", None)
            elif target > fits and job.get("row") is not None:
                job.pop("row")  # without the hooks (they cost memory), the comparison unread
                fits = budget.longest(job, scenario)
            if target is not True and target > fits:
                note = (
                    f"not run: length {target:,} needs about "
                    f"{budget.estimate(job, target)} GiB (--memory-gib {args.memory_gib})"
                )
                entry["runs"].append({"runtime": runtime, "length": target, "skipped": note})
                print(f"  {runtime}: {note}", flush=True)
                if not scenario.multi:
                    continue
                target = min(args.max_len, fits)  # agreement up to what fits
            done = real_run({**job, "n": target})
            print(f"  {runtime}: {done}", flush=True)
            entry["runs"].append(done)
            first = done["first_wrong_position"]
            if first is None or first == target:
                continue
            # the shortest failing input: the prefix ending at the first wrong position,
            # or (where the runtime's sums depend on the length, torch's MKL products)
            # a few positions longer
            for extra in EXTRA:
                again = real_run({**job, "n": first + extra})
                print(f"  {runtime} at {first + extra:,}: {again}", flush=True)
                entry["runs"].append(again)
                if again["first_wrong_position"] is not None:
                    break
            else:
                continue
            if runtime == "torch":  # name the comparison: the residual row there
                hooked = {**job, "row": again["first_wrong_position"]}
                if again["length"] <= budget.longest(hooked, scenario):
                    named = real_run({**hooked, "n": again["length"]})
                    print(f"  {runtime} with hooks: {named}", flush=True)
                else:
                    needs = budget.estimate(hooked, again["length"])
                    named = {
                        "runtime": runtime,
                        "length": again["length"],
                        "skipped": f"not run with hooks: needs about {needs} GiB",
                    }
                    print(f"  {runtime} with hooks: {named['skipped']}", flush=True)
                named["diagnostic"] = True
                entry["runs"].append(named)
        record["scenarios"].append(entry)
    summarise(record, args)
    return record


def summarise(record: dict, args) -> None:
    """The measured first failure (the shortest failing input a real runtime confirmed:
    its length, the position where it is first wrong, its pattern, the comparison that
    failed), and its ratio to the proven horizon."""
    best = None
    agreed: dict[str, int] = {}
    unconfirmed = []
    failures = []
    for entry in record["scenarios"]:
        scenario = next(s for s in SCENARIOS[record["program"]] if s.name == entry["scenario"])
        sim = entry["simulator_numpy"]
        for done in entry["runs"]:
            if "skipped" in done:
                if done["runtime"] == "numpy" and sim["first_failure"] is not None:
                    unconfirmed.append(
                        {
                            "runtime": "numpy",
                            "length": sim["first_failure"],
                            "input": scenario.pattern(sim["first_failure"]),
                            "comparisons": sim.get("comparisons_wrong", []),
                            "why": done["skipped"],
                        }
                    )
                continue
            if done.get("diagnostic"):
                continue
            first = done["first_wrong_position"]
            if first is None:
                if scenario.multi:
                    runtime = done["runtime"]
                    agreed[runtime] = max(agreed.get(runtime, 0), done["length"])
                continue
            if done["runtime"] == "numpy":
                comparisons = (
                    sim.get("comparisons_wrong") if first == sim["first_failure"] else None
                )
            else:
                comparisons = done.get("comparisons_wrong_at_row")
                for other in entry["runs"]:
                    if (
                        other.get("diagnostic")
                        and other["length"] == done["length"]
                        and other.get("row_read_at") == first
                    ):
                        comparisons = other["comparisons_wrong_at_row"]
            found = {
                "length": done["length"],
                "first_wrong_position": first,
                "runtime": done["runtime"],
                "scenario": scenario.name,
                "input": scenario.pattern(done["length"]),
                "comparisons": comparisons,
                "near_tie": scenario.decision,
                "simulator_predicted": first == sim["first_failure"],
            }
            failures.append(found)
            if best is None or done["length"] < best["length"]:
                best = found
    record["failures"] = failures
    record["unconfirmed_predictions"] = unconfirmed
    record["longest_agreeing_run"] = agreed
    if best is not None:
        record["measured"] = best["length"]
        record["measured_failure"] = best
        proven = record["proven"]
        record["ratio"] = round(best["length"] / proven, 1) if proven and proven > 0 else None
    else:
        searched = max(e["simulator_numpy"]["searched_to"] for e in record["scenarios"])
        longest = max(agreed.values(), default=0)
        if unconfirmed:
            t = min(u["length"] for u in unconfirmed)
            record["measured"] = f"{t:,} simulated, not run (memory)"
            record["ratio_simulated"] = round(t / record["proven"], 1)
        else:
            record["measured"] = f"none up to {searched:,} (simulator)"
        if longest:
            record["measured"] += f"; real runs right through {longest:,}"
        record["measured_failure"] = None
        record["ratio"] = None


# ---------------------------------------------------------------- relu section


def relu_battery(name: str, alphabet: tuple[str, ...], n: int) -> list[tuple[str, str]]:
    """Inputs of length n (with a short description) meant to drive the relu ramps:
    long runs far from a threshold, then counts brought back near it (module doc)."""
    rng = random.Random(f"relu:{name}:{n}")
    out: list[tuple[str, str]] = []
    for a in alphabet:
        out.append((f"{a}^{n}", a * n))
    for a, b in itertools.permutations(alphabet, 2):
        for k in sorted({1, 2, 3, n // 4, n // 2 - 1, n // 2, n // 2 + 1, 3 * n // 4, n - 3}):
            out.append((f"{a}^{k} {b}^{n - k}", a * k + b * (n - k)))
        for r in (1, 2, 3, 8, 64, n // 4):
            out.append((f"({a}^{r} {b}^{r})*", _periodic(a * r + b * r, n)))
        k = n // 3
        out.append((f"{a}^{k} {b}^{k} ({a}{b})*", a * k + b * k + _periodic(a + b, n - 2 * k)))
        out.append((f"{a}^{n // 2} {b} ({b}{a})*", _periodic_tail(a * (n // 2) + b, b + a, n)))
    for a, b, c in itertools.permutations(alphabet, 3):
        for k in (n // 3, n // 4):
            out.append((f"{a}^{k} {b}^{k} {c}^{n - 2 * k}", a * k + b * k + c * (n - 2 * k)))
        out.append((f"({a}{b}{c})*", _periodic(a + b + c, n)))
    generate = REGISTRY[name].generate if name in REGISTRY else None
    if generate is not None:
        for k in range(16):
            word = "".join(generate(rng, n))
            word = (word + "".join(rng.choice(alphabet) for _ in range(n)))[:n]
            out.append((f"generator #{k}", word))
    for k in range(8):
        out.append((f"uniform #{k}", "".join(rng.choice(alphabet) for _ in range(n))))
    for a in alphabet:
        weights = [9.0 if s == a else 1.0 for s in alphabet]
        word = "".join(rng.choices(alphabet, weights, k=n))
        out.append((f"biased to {a}", word))
    return out


def _periodic_tail(head: str, unit: str, n: int) -> str:
    return (head + _periodic(unit, n))[:n]


def relu_example(name: str, n: int, runtimes: tuple[str, ...], batch: int = 32) -> dict:
    program = load_program(EXAMPLES_DIR / name)
    model = compile_program(program, mode="relu", max_len=n)
    battery = relu_battery(name, tuple(program.alphabet), n)
    record: dict = {
        "example": name,
        "max_len": n,
        "proven_float32": model.guarantee.dtypes.get("float32"),
        "inputs": len(battery),
    }
    start = time.perf_counter()
    steps = np.arange(1, n + 2, dtype=np.float64)[None, :]
    module = None
    if "torch" in runtimes:
        import torch

        from crasp_compiler.runtime.torch_module import TorchTransformer

        torch.set_num_threads(1)
        module = TorchTransformer(model).float()
    rules = {out.name: out.rule for out in model.outputs}
    for runtime in runtimes:
        first, failing, error = None, None, 0.0
        for lo in range(0, len(battery), batch):
            chunk = battery[lo : lo + batch]
            texts = [text for _, text in chunk]
            want = interpret_batch(program, texts)
            if runtime == "numpy":
                got = run_tokens(model, texts, dtype=np.float32, on_overlength="ignore")
                raws, values = got.outputs, got.values
            else:
                import torch

                assert module is not None
                ids, lengths = encode_vocab(model.vocab, texts)
                with torch.no_grad():
                    raw = module(torch.from_numpy(ids), torch.from_numpy(lengths))
                    decided = module.decide(raw)
                raws = {o.name: raw[..., k].double().numpy() for k, o in enumerate(model.outputs)}
                values = {k: v.numpy() for k, v in decided.items()}
            for name_out in program.outputs:
                expected = np.asarray(want[name_out]).astype(np.float64)
                raw_out = np.asarray(raws[name_out], dtype=np.float64)
                if rules[name_out] is Rule.BOOL:
                    error = max(error, float(np.max(np.abs(raw_out - np.rint(raw_out)))))
                else:
                    error = max(error, float(np.max(np.abs(raw_out * steps - expected))))
                differ = np.asarray(values[name_out]).astype(np.float64) != expected
                if differ.any():
                    rows, cols = np.nonzero(differ)
                    k = int(np.argmin(cols))
                    if first is None or cols[k] < first:
                        first, failing = int(cols[k]), chunk[rows[k]][0]
        record[runtime] = {
            "first_failure": first,
            "failing_input": failing,
            "agrees_through": n if first is None else first - 1,
            "max_readout_error": error,
        }
    record["seconds"] = round(time.perf_counter() - start, 1)
    return record


# ---------------------------------------------------------------- output


def _n(value) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def _simulated(entry: dict) -> str:
    """The simulator's first failure of a family and what the numpy run made of it."""
    sim = entry["simulator_numpy"]
    t = sim["first_failure"]
    if t is None:
        return f"none ≤ {_n(sim['searched_to'])}"
    state = "not run"
    for done in entry["runs"]:
        if done["runtime"] != "numpy" or done["length"] != t:
            continue
        if "skipped" in done:
            state = "not run: " + done["skipped"].split(" needs ")[-1].split(" (")[0]
        else:
            state = "confirmed" if done["first_wrong_position"] == t else "not confirmed"
    return f"{_n(t)} ({state})"


def markdown(data: dict) -> str:
    lines = [provenance_line(data), ""]
    lines.append(
        "| program | mode | dtype | proven | shortest failing input | first wrong at "
        "| runtime | input | comparison wrong there | measured / proven "
        "| numpy simulator: first failure per family | longest run without a wrong position |"
    )
    lines.append("|---|---|---|---:|---:|---:|---|---|---|---:|---|---:|")
    for r in data["results"]:
        best = r.get("measured_failure")
        if best is None:
            cells = [str(r["measured"]), "", "", "", "", ""]
        else:
            cells = [
                _n(best["length"]),
                _n(best["first_wrong_position"]),
                best["runtime"],
                f"`{best['input']}`",
                (
                    "not read (memory)"
                    if best["comparisons"] is None
                    else ", ".join(f"`{c}`" for c in best["comparisons"])
                ),
                f"{r['ratio']}×" if r["ratio"] is not None else "",
            ]
        sims = "; ".join(_simulated(e) for e in r["scenarios"])
        agreed = ", ".join(f"{k} {_n(v)}" for k, v in r.get("longest_agreeing_run", {}).items())
        lines.append(
            f"| {r['program']} | {r['mode']} | {r['dtype']} | {_n(r['proven'])} | "
            + " | ".join(cells)
            + f" | {sims} | {agreed} |"
        )
    if data.get("relu"):
        relu = data["relu"]
        lines += [
            "",
            f"relu mode, `max_len = {relu['max_len']}`, float32, every position of "
            f"length-{relu['max_len']} inputs compared:",
            "",
            "| example | proven float32 | inputs | numpy: agrees through | torch: agrees through "
            "| max readout error numpy / torch |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for r in relu["examples"]:
            np_r, t_r = r.get("numpy", {}), r.get("torch", {})
            lines.append(
                f"| {r['example']} | {_n(r['proven_float32'])} | {r['inputs']} | "
                f"{_n(np_r.get('agrees_through', ''))} | {_n(t_r.get('agrees_through', ''))} | "
                f"{np_r.get('max_readout_error', 0):.2g} / {t_r.get('max_readout_error', 0):.2g} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", default=",".join(PROGRAMS), help="comma-separated")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated")
    parser.add_argument("--dtypes", default="float32,float64", help="comma-separated")
    parser.add_argument("--runtimes", default=",".join(RUNTIMES), help="comma-separated")
    parser.add_argument(
        "--max-len",
        type=int,
        default=1 << 27,
        help="longest input searched by the simulator and run (default 2^27)",
    )
    parser.add_argument(
        "--memory-gib",
        type=float,
        default=6.0,
        help="largest estimated peak memory of one real run (default 6)",
    )
    parser.add_argument(
        "--confirm-agreement",
        action="store_true",
        help="also run single-position families where the simulator finds no failure",
    )
    parser.add_argument("--relu", dest="relu", action="store_true", default=True)
    parser.add_argument("--no-relu", dest="relu", action="store_false", help="skip relu mode")
    parser.add_argument("--relu-only", action="store_true", help="only the relu section")
    parser.add_argument("--relu-max-len", type=int, default=1024)
    parser.add_argument("--relu-examples", help="comma-separated (default: all)")
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--markdown", help="print the tables of a JSON written by --out")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return
    args.runtimes = tuple(r for r in args.runtimes.split(",") if r)
    data: dict = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python benchmarks/adversarial_horizon.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "revision": revision(),
        "numpy_row_order": numpy_row_order(),
        "settings": {
            "max_len": args.max_len,
            "memory_gib": args.memory_gib,
            "runtimes": list(args.runtimes),
        },
        "results": [],
    }
    start = time.perf_counter()
    budget = Budget(args.memory_gib)
    if not args.relu_only:
        for program_name in args.programs.split(","):
            for mode in args.modes.split(","):
                for dtype_name in args.dtypes.split(","):
                    print(f"{program_name} {mode} {dtype_name}", flush=True)
                    record = measure(program_name, mode, dtype_name, args, budget)
                    print(
                        f"  -> proven {record['proven']}, measured {record['measured']}, "
                        f"ratio {record['ratio']}",
                        flush=True,
                    )
                    data["results"].append(record)
                    if args.out:  # what is done so far, in case a later run fails
                        Path(args.out).write_text(json.dumps(data, indent=1, ensure_ascii=False))
    if args.relu or args.relu_only:
        names = args.relu_examples.split(",") if args.relu_examples else example_names()
        relu = {"max_len": args.relu_max_len, "dtype": "float32", "examples": []}
        for name in names:
            record = relu_example(name, args.relu_max_len, args.runtimes)
            print(f"relu {name}: {record}", flush=True)
            relu["examples"].append(record)
        data["relu"] = relu
    data["seconds"] = round(time.perf_counter() - start, 1)
    data["load_average_end"] = load_average()
    if args.out:
        Path(args.out).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(markdown(data))


if __name__ == "__main__":
    main()
