"""Agreement of a compiled model's runtimes with the program it was compiled from.

``check_model`` samples random inputs of the model's language (its
:class:`~crasp_compiler.languages.registry.Language`) in the language's length buckets
(C-RASP: ``0, 1–4, 5–16, 17–64, …`` up to ``max_len``; PCOC: the model's n), input k
going to bucket k mod the number of buckets, and compares, at every position of every
input and for every named output, the reference interpreter (run on the model's stored
source), the numpy executor and the torch module on the requested device. Decided
outputs must be equal; raw ``value`` outputs within the language's tolerance for the
model of the interpreter's (a compiled PCOC model's recorded bound), and so within twice
it of each other. A model without source text is checked numpy against torch only; an input the
interpreter refuses (e.g. two PCOC machines sending to one) is skipped and counted. A
bucket that no input reached is reported as not sampled, never as agreeing.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from crasp_compiler.budget import require_memory
from crasp_compiler.errors import CraspError
from crasp_compiler.languages import Language, get_language, language_of_model
from crasp_compiler.model.model import Model, kept_sparse
from crasp_compiler.runtime.memory import forward_bytes, model_layers
from crasp_compiler.runtime.numpy_exec import run_tokens

RUNTIMES = ("interpreter", "numpy", "torch")


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
    skipped: int = 0  # sampled inputs the interpreter refused

    @property
    def buckets(self) -> list[tuple[int, int]]:
        """The length buckets sampled for."""
        return list(dict.fromkeys(span for _, span in self.tallies))

    @property
    def longest(self) -> int:
        """The longest input length sampled for."""
        return max((high for _, (_, high) in self.tallies), default=0)

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


def _differ(rule: str, a: np.ndarray, b: np.ndarray, tol: float) -> np.ndarray:
    """Positions where two runtimes disagree: decided values must be equal; raw ``value``
    outputs within ``tol`` of each other."""
    if rule != "value":
        unequal: np.ndarray = a != b
        return unequal
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    apart: np.ndarray = ~(np.abs(a - b) <= tol)
    return apart


def _accepted(language: Language, program: object, item: object, options: dict[str, Any]) -> bool:
    """Whether the interpreter runs ``program`` on ``item`` (sampled inputs may be outside
    the program's domain, e.g. two PCOC machines sending to one)."""
    try:
        language.interpret(program, [item], **options)
    except CraspError:
        return False
    return True


def _require_check_memory(
    model: Model, by_length: dict[int, int], itemsize: int, device: str
) -> None:
    """Refuse (:func:`~crasp_compiler.runtime.memory.require_forward_memory`) a check whose
    largest batch (``count`` inputs of one length) needs more than the memory budget: the
    numpy pass, or on the CPU the torch module's weights (dense ones whole, sparse ones
    their entries and two int64 indices each) and its pass, whichever is larger."""
    layers = model_layers(model)
    weights = 0
    if device == "cpu":
        for w in model.weights():
            if isinstance(w, np.ndarray) or not kept_sparse(w):
                weights += math.prod(w.shape) * itemsize
            else:  # its stored entries (scipy's nnz is indptr[-1]) and their two indices
                weights += int(w.indptr[-1]) * (itemsize + 16)
    for length, count in by_length.items():
        sizes = (model.width, len(model.inputs), layers, count, length + 1, itemsize)
        needed = forward_bytes(*sizes)
        if device == "cpu":
            needed = max(needed, weights + forward_bytes(*sizes, fused=True))
        require_memory(
            needed,
            f"checking the model (width {model.width:,}, {len(model.layers)} layers, "
            f"{itemsize * 8}-bit floats) on {count:,} inputs of length {length:,}",
        )


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

    if dtype not in ("float64", "float32"):
        raise CraspError(f"dtype must be float64 or float32, not {dtype!r}")
    language = language_of_model(model) or get_language("crasp")
    ranges = language.input_buckets(model, max_len)
    longest = max(high for _, high in ranges)
    problem = model.guarantee.length_problem(longest, dtype)
    if problem is not None:
        raise CraspError(f"--max-len {max_len}: {problem}")
    where = torch_device(device, dtype).type
    torch_dtype = {"float64": torch.float64, "float32": torch.float32}[dtype]
    np_dtype = {"float64": np.float64, "float32": np.float32}[dtype]
    program = language.model_program(model) if language_of_model(model) else None
    runtimes = list(RUNTIMES) if program is not None else ["numpy", "torch"]
    rng = random.Random(seed)
    np_rng = np.random.default_rng(seed)
    by_length: dict[int, int] = defaultdict(int)
    for k in range(samples):
        low, high = ranges[k % len(ranges)]
        by_length[rng.randint(low, high)] += 1
    _require_check_memory(model, by_length, np.dtype(dtype).itemsize, where)
    try:
        module = TorchTransformer(model).to(device=device, dtype=torch_dtype)
    except (RuntimeError, ValueError) as err:
        raise CraspError(f"cannot use device {device!r}: {err}") from None

    tallies: dict[tuple[str, tuple[int, int]], Tally] = {}
    for out in model.outputs:
        for span in ranges:
            tallies[(out.name, span)] = Tally()
    tol = language.tolerance(model, dtype)
    worst, skipped = 0.0, 0
    options = language.model_options(model)
    for n, count in sorted(by_length.items()):
        span = next(r for r in ranges if r[0] <= n <= r[1])
        inputs = language.sample_inputs(model, rng, n, count)
        expected = None
        if program is not None:
            try:
                expected = language.interpret(program, inputs, **options).values
            except CraspError:  # some input is refused: keep the others
                kept = [item for item in inputs if _accepted(language, program, item, options)]
                skipped += len(inputs) - len(kept)
                inputs = kept
                if not inputs:
                    continue
                expected = language.interpret(program, inputs, **options).values
        tokens, numeric = language.model_inputs(model, inputs)
        if numeric is None and model.inputs:  # a hand-built model: standard normal values
            numeric = [np_rng.normal(size=(len(t), len(model.inputs))) for t in tokens]
        result = run_tokens(model, tokens, dtype=np_dtype, values=numeric)
        ids, lengths = module.encode(tokens, device=device)
        with torch.no_grad():
            tensor = module.encode_values(numeric, lengths) if numeric is not None else None
            raw = module(ids, lengths, None if tensor is None else tensor.to(torch_dtype))
        decided = {k: v.cpu().numpy() for k, v in module.decide(raw).items()}
        raw_np = raw.double().cpu().numpy()
        for k, out in enumerate(model.outputs):
            worst = max(worst, float(np.max(np.abs(raw_np[..., k] - result.outputs[out.name]))))
            values = {
                "numpy": language.model_outputs(model, inputs, result.values[out.name]),
                "torch": language.model_outputs(model, inputs, decided[out.name]),
            }
            if expected is not None:
                values["interpreter"] = np.asarray(expected[out.name])
            tally = tallies[(out.name, span)]
            tally.positions += values["numpy"].size
            for i, a in enumerate(runtimes):
                for b in runtimes[i + 1 :]:
                    # each runtime is within tol of the interpreter: of each other, 2·tol
                    both = tol if "interpreter" in (a, b) else 2 * tol
                    wrong = _differ(out.rule, values[a], values[b], both)
                    if wrong.any():
                        tally.differ[f"{a}/{b}"] += int(wrong.sum())
                        if tally.example is None:
                            row, t = np.argwhere(wrong)[0]
                            tally.example = (
                                f"{out.name} on {language.format_input(inputs[row])!r} at "
                                f"t={t}: {a} {values[a][row, t]} != {b} {values[b][row, t]}"
                            )
    return CheckReport(runtimes, device, dtype, samples, tallies, worst, skipped)
