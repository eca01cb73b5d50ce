"""Agreement of a compiled model's runtimes with the program it was compiled from.

``check_model`` samples random inputs in length buckets ``0, 1–4, 5–16, 17–64, …`` up to
``max_len`` (input k goes to bucket k mod the number of buckets) and compares, at every
position of every input and for every named output, the reference interpreter (run on
the model's stored source), the numpy executor and the torch module on the requested
device. A model without C-RASP source text is checked numpy against torch only. A bucket
that no input reached is reported as not sampled, never as agreeing.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from crasp_compiler.errors import CraspError
from crasp_compiler.languages.crasp.interpret import interpret_batch
from crasp_compiler.languages.crasp.program import parse_program
from crasp_compiler.model.model import Model
from crasp_compiler.runtime.numpy_exec import run

RUNTIMES = ("interpreter", "numpy", "torch")


def buckets(max_len: int) -> list[tuple[int, int]]:
    """Length ranges ``[0, 0], [1, 4], [5, 16], …`` (powers of 4), the last one ending at
    ``max_len``."""
    out = [(0, 0)]
    low, high = 1, 4
    while low <= max_len:
        out.append((low, min(high, max_len)))
        low, high = high + 1, high * 4
    return out


@dataclass
class Tally:
    """Positions compared and, per pair of runtimes, positions where they differ."""

    positions: int = 0
    differ: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    example: str | None = None


@dataclass
class CheckReport:
    runtimes: list[str]
    device: str
    dtype: str
    samples: int
    # (output name, bucket) -> tally
    tallies: dict[tuple[str, tuple[int, int]], Tally]
    max_raw_difference: float

    @property
    def disagreements(self) -> int:
        return sum(sum(t.differ.values()) for t in self.tallies.values())

    @property
    def unsampled(self) -> list[tuple[int, int]]:
        """The length buckets that no input reached."""
        spans = dict.fromkeys(span for (_, span), t in self.tallies.items() if not t.positions)
        return list(spans)

    @property
    def agree(self) -> bool:
        """No disagreement, and every bucket sampled."""
        return not self.disagreements and not self.unsampled

    def table(self) -> str:
        pairs = [f"{a}/{b}" for k, a in enumerate(self.runtimes) for b in self.runtimes[k + 1 :]]
        head = f"{'output':<12} {'lengths':<12} {'positions':>10}  " + "  ".join(
            f"{p:>18}" for p in pairs
        )
        lines = [head]
        for (name, span), tally in self.tallies.items():
            if tally.positions:
                cells = "  ".join(f"{tally.differ.get(p, 0):>18}" for p in pairs)
                row = f"{tally.positions:>10}  {cells}"
            else:
                row = f"{'-':>10}  " + "  ".join(f"{'-':>18}" for _ in pairs) + "  not sampled"
            lines.append(f"{name:<12} {span_text(span):<12} {row}")
        return "\n".join(lines)


def span_text(span: tuple[int, int]) -> str:
    """A length bucket as ``5-16`` (or ``0``)."""
    low, high = span
    return f"{low}" if low == high else f"{low}-{high}"


def _differ(rule: str, a: np.ndarray, b: np.ndarray, dtype: type) -> np.ndarray:
    """Positions where two runtimes disagree: decided values must be equal; raw ``value``
    outputs within a tolerance for the dtype."""
    if rule != "value":
        return a != b
    tol = 1e-9 if dtype == np.float64 else 1e-4
    return ~np.isclose(a, b, rtol=tol, atol=tol)


def check_model(
    model: Model,
    samples: int = 200,
    max_len: int = 64,
    device: str = "cpu",
    dtype: str = "float64",
    seed: int = 0,
) -> CheckReport:
    """Compare interpreter, numpy and torch on ``samples`` random inputs (see module doc)."""
    import torch

    from crasp_compiler.runtime.torch_module import TorchTransformer, torch_device

    if model.info.get("language") == "PCOC":
        raise CraspError(
            "crasp check compares C-RASP and hand-built models; compare a PCOC model with "
            "its program by `crasp run` against `crasp interpret`"
        )
    if dtype not in ("float64", "float32"):
        raise CraspError(f"dtype must be float64 or float32, not {dtype!r}")
    problem = model.guarantee.length_problem(max_len, dtype)
    if problem is not None:
        raise CraspError(f"--max-len {max_len}: {problem}")
    torch_device(device, dtype)
    torch_dtype = {"float64": torch.float64, "float32": torch.float32}[dtype]
    np_dtype = {"float64": np.float64, "float32": np.float32}[dtype]
    program = None
    if model.source and model.info.get("language") == "C-RASP":
        program = parse_program(model.source, "<model source>", alphabet=model.vocab[1:])
    runtimes = list(RUNTIMES) if program is not None else ["numpy", "torch"]
    try:
        module = TorchTransformer(model).to(device=device, dtype=torch_dtype)
    except (RuntimeError, ValueError) as err:
        raise CraspError(f"cannot use device {device!r}: {err}") from None

    rng = random.Random(seed)
    np_rng = np.random.default_rng(seed)
    ranges = buckets(max_len)
    symbols = model.vocab[1:]
    by_length: dict[int, list[list[str]]] = defaultdict(list)
    for k in range(samples):
        low, high = ranges[k % len(ranges)]
        n = rng.randint(low, high)
        by_length[n].append([rng.choice(symbols) for _ in range(n)])

    tallies: dict[tuple[str, tuple[int, int]], Tally] = {}
    for out in model.outputs:
        for span in ranges:
            tallies[(out.name, span)] = Tally()
    worst = 0.0
    for n, words in sorted(by_length.items()):
        span = next(r for r in ranges if r[0] <= n <= r[1])
        # numeric inputs, if any: standard normal values at every token
        numeric = (
            [np_rng.normal(size=(n, len(model.inputs))) for _ in words] if model.inputs else None
        )
        result = run(model, words, dtype=np_dtype, values=numeric)
        ids, lengths = module.encode(words, device=device)
        with torch.no_grad():
            tensor = module.encode_values(numeric, lengths) if numeric is not None else None
            raw = module(ids, lengths, None if tensor is None else tensor.to(torch_dtype))
        decided = {k: v.cpu().numpy() for k, v in module.decide(raw).items()}
        raw_np = raw.double().cpu().numpy()
        expected = interpret_batch(program, words) if program is not None else {}
        for k, out in enumerate(model.outputs):
            worst = max(worst, float(np.max(np.abs(raw_np[..., k] - result.outputs[out.name]))))
            values = {"numpy": result.values[out.name], "torch": decided[out.name]}
            if program is not None:
                values["interpreter"] = np.asarray(expected[out.name])
            tally = tallies[(out.name, span)]
            tally.positions += len(words) * (n + 1)
            for i, a in enumerate(runtimes):
                for b in runtimes[i + 1 :]:
                    wrong = _differ(out.rule, values[a], values[b], np_dtype)
                    if wrong.any():
                        tally.differ[f"{a}/{b}"] += int(wrong.sum())
                        if tally.example is None:
                            row, t = np.argwhere(wrong)[0]
                            tally.example = (
                                f"{out.name} on {' '.join(words[row])!r} at t={t}: "
                                f"{a} {values[a][row, t]} != {b} {values[b][row, t]}"
                            )
    return CheckReport(runtimes, device, dtype, samples, tallies, worst)
