"""``crasp compare``: a trained model read against the compiled program, inside.

The compiled program is an exact reference for every intermediate quantity of the
program: each count, comparison and Boolean at every position. :func:`compare` looks for
those quantities in a model trained on the program's task (any ``crasp train`` run of a
sequence task with a C-RASP program: a registered task or ``--program``), on a fixed
probe set drawn from the task's own sampler:

- **where each variable lives**: for every definition ``v`` and every residual stage
  ``s`` of the trained model (after the embedding, after each attention and each MLP),
  a linear probe fitted on the training lengths and scored on held-out inputs of the
  training lengths and of longer ones. Features are the residual vectors ``h`` at every
  position, standardised on the fitting set; the probe is ridge regression,
  ``w = argmin ‖Xw − y‖² + λ‖w‖²`` (``λ`` = :attr:`Settings.ridge`). Targets: a
  Boolean as 0/1, scored by balanced accuracy of ``ŷ > ½`` (chance 0.5); a count ``c``
  both as ``c`` and as the fraction ``c / (t + 1)`` the compiled model stores (``t`` the
  position, the start token at 0), scored by R² (chance 0). Two controls: the same
  probes on the trained model's own initialisation (the network before training:
  the run's seed gives it, as in training), and on the trained model
  with the fitting targets shuffled across positions; and a calibration: the same
  probes on the compiled model's own residual stages, which find each variable from
  the layer that computes it on;
- **which heads do what**: each trained head's attention pattern against each compiled
  head's on the same inputs (the start token is the compiled model's BOS, so positions
  align), as the mean total-variation distance over queries,
  ``½ Σ_k |p_qk − r_qk|``, best matches listed, beside the distance of uniform causal
  attention (the baseline a head that does nothing reaches);
- **causal checks**: interchange interventions. For input pairs ``(a, b)`` of one length
  and a variable ``v`` (a count through its fraction), the trained residual of ``a`` at
  ``v``'s best stage takes ``b``'s component along the unit vector ``d`` of
  ``Σ (h − h̄)(y − ȳ)`` (for a Boolean: the difference of the class means),
  ``h'_a = h_a + ((h_b − h_a)·d) d`` at every position, and the model runs on from
  there; the compiled side is the reference interpreter with ``v`` replaced by its
  values on ``b`` (every later definition reads the replacement). Reported: at the
  scored positions where the intervention changes the program's output, the fraction
  where the patched model outputs the program's new output (``follow``), against the
  same patch along a random direction and no patch at all; at the other positions, the
  fraction left as they were (``stay``). The ridge probe's own weights are not the
  direction: they lean on low-variance directions the model does not read (on a Dyck-1
  run, moving the output ``D``'s probe reading from 0 to 1 at the last stage changed 0
  of 566 predictions; the class-mean direction changed 1,042 of 1,043);
- **length generalisation inside**: each probe's score per length bin beside the
  trained model's output accuracy on the same inputs.

A probe that finds a variable shows that the residual holds it linearly, not that the
model uses it: the interventions are the causal evidence, and they too test one
direction at one stage.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from crasp_compiler.errors import CraspError, Diagnostic
from crasp_compiler.experiments.tasks.base import Example, SequenceTask, crasp_language
from crasp_compiler.experiments.train.data import (
    Bin,
    bin_name,
    default_bins,
    encode,
    feasible_lengths,
    sample_examples,
)
from crasp_compiler.experiments.train.loop import load, resolve_task
from crasp_compiler.experiments.train.models import Block, SequenceModel, stage_names
from crasp_compiler.experiments.train.provenance import provenance
from crasp_compiler.files import writable_dir, write_text

RECORD = "compare.json"
FIGURE = "compare.png"
SCHEMA = 1


@dataclass(frozen=True)
class Settings:
    """The probe set and the probes. ``fit``: examples of the training lengths the
    probes are fitted on; ``test``: held-out examples per length bin (the training
    range, then up to ``longer`` of the run's longer bins, lengths capped at
    ``max_length``); ``pairs``: input pairs per interchange intervention; ``ridge``: λ;
    ``seed``: the probe set, the interventions' pairs and the shuffles."""

    fit: int = 256
    test: int = 128
    pairs: int = 64
    longer: int = 2
    max_length: int = 150
    ridge: float = 1.0
    seed: int = 0

    def check(self) -> None:
        """Refuse a setting out of range (a CraspError naming it)."""
        for name in ("fit", "test", "pairs", "max_length"):
            if getattr(self, name) < 1:
                raise CraspError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.fit < 8:
            raise CraspError(f"fit must be at least 8 examples, not {self.fit}")
        if self.longer < 0:
            raise CraspError(f"longer must be 0 or more, not {self.longer}")
        if not self.ridge > 0 or not math.isfinite(self.ridge):
            raise CraspError(f"ridge must be a positive number, not {self.ridge}")


# ---------------------------------------------------------------- the run and its program


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CraspError(
            [Diagnostic(f"cannot read {path}: {exc}", hint="a directory written by crasp train")]
        ) from None
    if not isinstance(data, dict):
        raise CraspError(f"{path}: not a JSON object")
    return data


def run_task(
    run_dir: Path, program: str | Path | None = None, alphabet: Sequence[str] | None = None
) -> SequenceTask:
    """The task a run was trained on, with its C-RASP program: the program saved in the
    run (``crasp train --program`` writes it), else ``program`` (checked against the
    digest the run recorded), else the registered task of the run's name."""
    from crasp_compiler.experiments.tasks.program import ProgramTask

    meta = _read_json(run_dir / "config.json")
    train = meta.get("train")
    if not isinstance(train, dict) or not isinstance(train.get("task"), str):
        raise CraspError(f"{run_dir / 'config.json'}: no task recorded (field train.task)")
    recorded = train["task"]
    if meta.get("model_class") != "SequenceModel":
        raise CraspError(
            f"{run_dir}: a {meta.get('model_class')} run; `crasp compare` reads sequence "
            "models of C-RASP programs"
        )
    saved = meta.get("program")
    if saved is not None:
        try:
            file, symbols, (lo, hi) = saved["file"], saved["alphabet"], saved["lengths"]
        except (KeyError, TypeError, ValueError):
            raise CraspError(f"{run_dir / 'config.json'}: field program is malformed") from None
        return ProgramTask.from_file(run_dir / file, alphabet or symbols, (int(lo), int(hi)))
    if "@" in recorded:  # a --program run written before runs kept their program
        if program is None:
            raise CraspError(
                [
                    Diagnostic(
                        f"{run_dir} was trained on the program {recorded.split('@')[0]!r}, "
                        "which the run does not hold",
                        hint="give it with --program (and --alphabet if it was given)",
                    )
                ]
            )
        bins = _read_json(run_dir / "results.json").get("bins") or {}
        first = next(iter(bins.values()), None)
        if not (isinstance(first, list) and len(first) == 2):
            raise CraspError(f"{run_dir / 'results.json'}: no training range (field bins)")
        task = ProgramTask.from_file(program, alphabet, (int(first[0]), int(first[1])))
        if task.identity != recorded.split(" ")[0]:
            raise CraspError(
                [
                    Diagnostic(
                        f"{program} is not the program {run_dir} was trained on "
                        f"(digest {task.identity} against the run's {recorded.split(' ')[0]})",
                        hint="give the program file and --alphabet the run was trained with",
                    )
                ]
            )
        return task
    registered = resolve_task(recorded)
    if not isinstance(registered, SequenceTask):
        raise CraspError(f"task {recorded!r} is not a sequence task")
    try:
        registered.crasp_program()
    except NotImplementedError:
        raise CraspError(
            f"task {recorded!r} has no C-RASP program: there is nothing to compare inside"
        ) from None
    return registered


# ---------------------------------------------------------------- what the models compute


@dataclass
class Probed:
    """One probe set: per example, the program's value of every definition at every
    position, and per residual stage the trained model's vectors at every position
    (examples concatenated; ``position`` and ``example`` index the rows)."""

    examples: list[Example]
    values: dict[str, np.ndarray]
    stages: list[np.ndarray]
    position: np.ndarray
    example: np.ndarray
    predicted: list[np.ndarray]


def _by_length(examples: Sequence[Example]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = defaultdict(list)
    for k, ex in enumerate(examples):
        groups[len(ex.tokens)].append(k)
    return groups


def program_values(program: Any, examples: Sequence[Example]) -> list[dict[str, np.ndarray]]:
    """Every definition's value at every position of every example (the interpreter on
    the words after the start token; entry 0 is the empty prefix)."""
    language = crasp_language()
    out: list[dict[str, np.ndarray]] = [{} for _ in examples]
    for group in _by_length(examples).values():
        values = language.definition_values(program, [examples[k].tokens[1:] for k in group])
        for row, k in enumerate(group):
            out[k] = {name: value[row] for name, value in values.items()}
    return out


def _positions(model: SequenceModel, batch_lengths: Tensor, width: int, seed: int) -> Tensor | None:
    generator = torch.Generator().manual_seed(seed)
    return model.sample_positions(batch_lengths, width, offsets=False, generator=generator)


@torch.no_grad()
def run_model(
    model: SequenceModel,
    task: SequenceTask,
    examples: Sequence[Example],
    seed: int,
    edit: Callable[[int, Tensor, list[int]], Tensor] | None = None,
    attention: bool = False,
) -> tuple[list[list[np.ndarray]], list[np.ndarray], list[np.ndarray]]:
    """The model on ``examples``, one length at a time: per example the residual at every
    stage (``(T, d)`` each), the argmax label id at every position and, with
    ``attention``, every head's weights ``(layers · heads, T, T)``. ``edit(stage, h,
    rows)`` may replace a stage's residual (``rows``: the examples of the batch)."""
    stages: list[list[np.ndarray]] = [[] for _ in examples]
    predicted: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * len(examples)
    patterns: list[np.ndarray] = [np.empty(0)] * len(examples)
    for group in _by_length(examples).values():
        batch = encode(task, [examples[k] for k in group])
        positions = _positions(model, batch.lengths, batch.tokens.shape[1], seed)
        seen: list[Tensor] = []

        def visit(
            stage: int, h: Tensor, group: list[int] = group, seen: list[Tensor] = seen
        ) -> Tensor:
            if edit is not None:
                h = edit(stage, h, group)
            seen.append(h)
            return h

        logits = model(batch.tokens, positions, visit)
        for row, k in enumerate(group):
            stages[k] = [h[row].double().numpy() for h in seen]
            predicted[k] = logits[row].argmax(-1).numpy()
        if attention:
            causal, mask = model.config.causal, batch.tokens != model.pad_id
            blocks: list[Block] = list(model.blocks)  # type: ignore[arg-type]
            inside = model.attention_positions(
                None if positions is None else positions.to(batch.tokens.device)
            )
            weights = [
                block.attn.weights(block.ln1(seen[2 * i]), causal, mask, inside)
                for i, block in enumerate(blocks)
            ]
            stacked = torch.cat(weights, dim=1).double().numpy()
            for row, k in enumerate(group):
                patterns[k] = stacked[row]
    return stages, predicted, patterns


def probe_set(
    model: SequenceModel | Any,
    task: SequenceTask,
    program: Any,
    examples: list[Example],
    seed: int,
) -> Probed:
    """:class:`Probed` of ``examples`` for a trained model or (a compiled
    :class:`~crasp_compiler.model.model.Model`, no predictions) the compiled one."""
    values = program_values(program, examples)
    if isinstance(model, SequenceModel):
        stages, predicted, _ = run_model(model, task, examples, seed)
    else:
        stages, predicted = compiled_pass(model, examples)[0], []
    names = list(crasp_language().definition_sorts(program))
    return Probed(
        examples=examples,
        values={n: np.concatenate([v[n] for v in values]) for n in names},
        stages=[np.concatenate([s[i] for s in stages]) for i in range(len(stages[0]))],
        position=np.concatenate([np.arange(len(ex.tokens)) for ex in examples]),
        example=np.concatenate([np.full(len(ex.tokens), k) for k, ex in enumerate(examples)]),
        predicted=predicted,
    )


# ---------------------------------------------------------------- probes


@dataclass
class Probe:
    """A fitted linear probe ``ŷ = ((h − mean) / scale) · w + bias``."""

    mean: np.ndarray
    scale: np.ndarray
    w: np.ndarray
    bias: float

    def __call__(self, h: np.ndarray) -> np.ndarray:
        return np.asarray(((h - self.mean) / self.scale) @ self.w + self.bias)


def fit_probe(x: np.ndarray, y: np.ndarray, ridge: float) -> Probe:
    """Ridge regression on standardised features (closed form)."""
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-12] = 1.0
    z = (x - mean) / scale
    bias = float(y.mean())
    gram = z.T @ z + ridge * np.eye(z.shape[1])
    w = np.linalg.solve(gram, z.T @ (y - bias))
    return Probe(mean, scale, w, bias)


def score(kind: str, truth: np.ndarray, guess: np.ndarray) -> float | None:
    """Balanced accuracy of ``guess > ½`` for a Boolean (``kind`` ``"bool"``), R² for a
    number; None when the truth is constant (nothing to find)."""
    if kind == "bool":
        truth = truth.astype(bool)
        if truth.all() or not truth.any():
            return None
        hit = (guess > 0.5) == truth
        return float((hit[truth].mean() + hit[~truth].mean()) / 2)
    spread = float(((truth - truth.mean()) ** 2).sum())
    if spread < 1e-12:
        return None
    return float(1 - ((truth - guess) ** 2).sum() / spread)


CHANCE = {"bool": 0.5, "count": 0.0, "fraction": 0.0}


def targets(program: Any, probed: Probed) -> dict[str, tuple[str, np.ndarray]]:
    """The probe targets: per Boolean ``v`` its 0/1 values; per count ``v`` the count
    (``v``) and the fraction ``v / (t + 1)`` (``v / (t+1)``)."""
    out: dict[str, tuple[str, np.ndarray]] = {}
    for name, sort in crasp_language().definition_sorts(program).items():
        value = probed.values[name].astype(np.float64)
        if sort == "bool":
            out[name] = ("bool", value)
        else:
            out[name] = ("count", value)
            out[f"{name} / (t+1)"] = ("fraction", value / (probed.position + 1))
    return out


def probe_scores(
    program: Any,
    fitting: Probed,
    scored: Mapping[str, Probed],
    ridge: float,
    shuffle: np.random.Generator | None = None,
) -> dict[str, dict[str, list[float | None]]]:
    """``scores[target][bin][stage]`` of probes fitted on ``fitting`` (its targets
    permuted by ``shuffle`` when given) and scored on each set of ``scored``."""
    fit_targets = targets(program, fitting)
    tests = {name: targets(program, probed) for name, probed in scored.items()}
    scores: dict[str, dict[str, list[float | None]]] = {}
    for target, (kind, y) in fit_targets.items():
        if shuffle is not None:
            y = y[shuffle.permutation(len(y))]
        scores[target] = {name: [] for name in scored}
        for stage, x in enumerate(fitting.stages):
            probe = fit_probe(x, y, ridge)
            for name, probed in scored.items():
                truth = tests[name][target][1]
                scores[target][name].append(score(kind, truth, probe(probed.stages[stage])))
    return scores


# ---------------------------------------------------------------- heads


def compiled_stages(model: Any) -> list[str]:
    """The compiled model's residual stages: ``embed``, then ``L1 attn``, ``L1 mlp``, …
    for the sublayers each layer has."""
    names = ["embed"]
    for i, layer in enumerate(model.layers):
        names += [f"L{i + 1} attn"] if layer.heads else []
        names += [f"L{i + 1} mlp"] if layer.mlp is not None else []
    return names


def compiled_pass(
    model: Any, examples: Sequence[Example], patterns: bool = False
) -> tuple[list[list[np.ndarray]], list[np.ndarray], list[str]]:
    """The compiled model on ``examples`` (numpy executor, float64): per example the
    residual at every stage (:func:`compiled_stages`), with ``patterns`` every head's
    attention ``(heads, T, T)``, and the heads' names (``L1 head 1: label``)."""
    from crasp_compiler.runtime.backend import NUMPY
    from crasp_compiler.runtime.forward import Observer, forward
    from crasp_compiler.runtime.numpy_exec import NumpyParts

    heads = [(i, h) for i, layer in enumerate(model.layers) for h in range(len(layer.heads))]
    names = [f"L{i + 1} head {h + 1}: {model.layers[i].heads[h].label or '?'}" for i, h in heads]
    points = ["blocks.0.hook_resid_pre" if model.layers else "hook_resid_final"]
    for i, layer in enumerate(model.layers):
        points += [f"blocks.{i}.hook_resid_mid"] if layer.heads else []
        points += [f"blocks.{i}.hook_resid_post"] if layer.mlp is not None else []
    keys = [f"blocks.{i}.attn.heads.{h}.hook_pattern" for i, h in heads]
    stages: list[list[np.ndarray]] = [[] for _ in examples]
    out: list[np.ndarray] = [np.empty(0)] * len(examples)
    parts = NumpyParts(model, np.float64)
    for group in _by_length(examples).values():
        words = [examples[k].tokens[1:] for k in group]
        ids = np.zeros((len(group), len(words[0]) + 1), dtype=np.int64)
        for row, word in enumerate(words):
            ids[row, 1:] = model.token_ids(list(word))
        lengths = np.full(len(group), len(words[0]), dtype=np.int64)
        seen: dict[str, np.ndarray] = {}

        def hook(name: str, value: np.ndarray, seen: dict[str, np.ndarray] = seen) -> None:
            if name in keys or name in points:
                seen[name] = np.array(value, dtype=np.float64)

        forward(NUMPY, parts, ids, lengths, None, Observer(hook, patterns=patterns))
        for row, k in enumerate(group):
            stages[k] = [seen[point][row] for point in points]
            if patterns:
                out[k] = np.stack([seen[key][row] for key in keys]) if keys else np.empty(0)
    return stages, out, names


def total_variation(first: Sequence[np.ndarray], second: Sequence[np.ndarray]) -> np.ndarray:
    """``tv[i, j]``: the mean over examples and queries of ``½ Σ_k |p_i − r_j|`` between
    head ``i`` of ``first`` and head ``j`` of ``second`` (``(heads, T, T)`` per example)."""
    total: np.ndarray | None = None
    queries = 0
    for p, r in zip(first, second, strict=True):
        tv = 0.5 * np.abs(p[:, None] - r[None]).sum(-1).sum(-1)
        total = tv if total is None else total + tv
        queries += p.shape[1]
    assert total is not None
    return total / queries


def uniform_causal(examples: Sequence[Example]) -> list[np.ndarray]:
    """Uniform attention over the keys up to each query (one head)."""
    out = []
    for ex in examples:
        size = len(ex.tokens)
        causal = np.tril(np.ones((size, size)))
        out.append((causal / causal.sum(1, keepdims=True))[None])
    return out


# ---------------------------------------------------------------- interventions


def covariance_direction(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The unit vector along ``Σ (h − h̄)(y − ȳ)``: for a Boolean, the difference of the
    two classes' mean residuals (the direction patches move along)."""
    d = (x - x.mean(axis=0)).T @ (y - y.mean())
    return np.asarray(d / np.linalg.norm(d))


def interchange(
    model: SequenceModel,
    task: SequenceTask,
    program: Any,
    pairs: Sequence[tuple[Example, Example]],
    variable: str,
    stage: int,
    direction: np.ndarray,
    seed: int,
) -> dict[str, Any]:
    """One interchange intervention on ``variable`` at ``stage`` along the unit vector
    ``direction`` over ``pairs`` (module docstring): ``a``'s residual takes ``b``'s
    component along it, ``h'_a = h_a + ((h_b − h_a) · d) d``."""
    first = [a for a, _ in pairs]
    second = [b for _, b in pairs]
    values_a = program_values(program, first)
    values_b = program_values(program, second)
    along_b = [s[stage] @ direction for s in run_model(model, task, second, seed)[0]]
    unit = torch.from_numpy(direction)

    def edit(at: int, h: Tensor, rows: list[int]) -> Tensor:
        if at != stage:
            return h
        target = torch.from_numpy(np.stack([along_b[k] for k in rows]))
        return h + ((target - h.double() @ unit)[..., None] * unit).to(h.dtype)

    patched = run_model(model, task, first, seed, edit)[1]
    plain = run_model(model, task, first, seed)[1]
    changed = follow = kept = same = stayed = unpatched = 0
    for k, (a, _) in enumerate(pairs):
        before = task.labels_from_values(a, values_a[k])
        overrides = {variable: values_b[k][variable][None]}
        after_values = crasp_language().definition_values(program, [a.tokens[1:]], overrides)
        after = task.labels_from_values(a, {n: v[0] for n, v in after_values.items()})
        for t, (old, new) in enumerate(zip(before, after, strict=True)):
            if old is None:
                continue
            guess = task.labels[int(patched[k][t])]
            if old != new:
                changed += 1
                follow += guess == new
                unpatched += task.labels[int(plain[k][t])] == new
            else:
                same += 1
                stayed += guess == old
        kept += 1
    return {
        "pairs": kept,
        "changed_positions": changed,
        "follow": follow / changed if changed else None,
        "follow_unpatched": unpatched / changed if changed else None,
        "unchanged_positions": same,
        "stay": stayed / same if same else None,
    }


# ---------------------------------------------------------------- the comparison


def _reference(task: SequenceTask, path: str | Path) -> Any:
    """The program at ``path`` over the alphabet of the run's program."""
    return crasp_language().load(path, alphabet=list(task.crasp_program().alphabet))


def _same_function(
    task: SequenceTask,
    program: Any,
    probe_sets: Sequence[Sequence[Example]],
    against: str | Path | None,
) -> None:
    """Refuse a reference program that does not give the run's labels on every probe
    input (the run's own program does, by construction)."""
    if against is None:
        return
    examples = [ex for examples in probe_sets for ex in examples]
    wrong = 0
    first: Example | None = None
    for ex, values in zip(examples, program_values(program, examples), strict=True):
        try:
            labels = task.labels_from_values(ex, values)
        except KeyError as missing:
            raise CraspError(
                f"{against} has no output {missing.args[0]}, which the run's labels read",
                filename=str(against),
            ) from None
        if labels != list(ex.targets):
            wrong += 1
            first = first or ex
    if first is not None:
        raise CraspError(
            [
                Diagnostic(
                    f"{against} computes another function than the run's program: other "
                    f"labels on {wrong} of {len(examples)} probe inputs (first: "
                    f"{' '.join(first.tokens[1:]) or 'the empty string'})",
                    hint="--against takes a program of the same outputs and labels",
                )
            ],
            filename=str(against),
        )


def initial_model(model: SequenceModel, seed: int) -> SequenceModel:
    """The model a run of ``seed`` started from: training seeds torch with the run's seed
    just before it builds the model (:func:`~crasp_compiler.experiments.train.loop.train`)."""
    torch.manual_seed(seed)
    return SequenceModel(model.config).eval()


def _bins(task: SequenceTask, run_dir: Path, settings: Settings) -> list[Bin]:
    results = (run_dir / "results.json").exists() and _read_json(run_dir / "results.json")
    recorded = results.get("bins") if isinstance(results, dict) else None
    if isinstance(recorded, dict) and recorded:
        bins = [(int(lo), int(hi)) for lo, hi in recorded.values()]
    else:
        bins = default_bins(task)
    first, later = bins[0], bins[1:]
    capped = [(lo, min(hi, settings.max_length)) for lo, hi in later if lo <= settings.max_length]
    return [first, *capped[: settings.longer]]


def _accuracy(task: SequenceTask, probed: Probed) -> dict[str, float]:
    """The trained model's exact-sequence and per-position accuracy on a probe set."""
    whole, right, total = 0, 0, 0
    for ex, guess in zip(probed.examples, probed.predicted, strict=True):
        scored = [(t, label) for t, label in enumerate(ex.targets) if label is not None]
        hits = [task.labels[int(guess[t])] == label for t, label in scored]
        whole += all(hits)
        right += sum(hits)
        total += len(hits)
    return {"sequence": whole / len(probed.examples), "position": right / max(total, 1)}


def _best(row: Sequence[float | None]) -> int | None:
    """The stage with the highest score (the first of equal ones), None if none."""
    scored = [(s, i) for i, s in enumerate(row) if s is not None]
    if not scored:
        return None
    top = max(s for s, _ in scored)
    return min(i for s, i in scored if s == top)


def compare(
    run_dir: str | Path,
    settings: Settings | None = None,
    program: str | Path | None = None,
    alphabet: Sequence[str] | None = None,
    against: str | Path | None = None,
) -> dict[str, Any]:
    """The record of a trained run read against its compiled program (module
    docstring): probes, head matches, interventions, per length bin. ``against``: read
    it against another program of the same function instead (a hypothesis of how the
    model computes it), refused unless it gives the run's labels on every probe input."""
    settings = settings or Settings()
    settings.check()
    run = Path(run_dir)
    task = run_task(run, program, alphabet)
    crasp = task.crasp_program() if against is None else _reference(task, against)
    model = load(run)
    if not isinstance(model, SequenceModel):
        raise CraspError(f"{run}: not a sequence model")
    meta = _read_json(run / "config.json")
    control = initial_model(model, int((meta.get("train") or {}).get("seed", 0)))
    bins = _bins(task, run, settings)
    train_lengths = feasible_lengths(task, *bins[0])
    rng = np.random.default_rng([settings.seed, 0])
    fitting = sample_examples(task, rng, train_lengths, settings.fit)
    sets: dict[str, list[Example]] = {}
    for index, bin_ in enumerate(bins):
        lengths = feasible_lengths(task, *bin_)
        if lengths:
            sets[bin_name(bin_)] = sample_examples(
                task, np.random.default_rng([settings.seed, 1 + index]), lengths, settings.test
            )
    seed = settings.seed
    names = stage_names(model.config.n_layers)

    _same_function(task, crasp, [fitting, *sets.values()], against)
    compiled = getattr(task, "compiled_model", None) if against is None else None
    compiled_model = compiled() if callable(compiled) else crasp_language().compile(crasp)

    def read(m: SequenceModel | Any) -> tuple[Probed, dict[str, Probed]]:
        return probe_set(m, task, crasp, fitting, seed), {
            name: probe_set(m, task, crasp, examples, seed) for name, examples in sets.items()
        }

    trained_fit, trained_sets = read(model)
    control_fit, control_sets = read(control)
    scores = probe_scores(crasp, trained_fit, trained_sets, settings.ridge)
    random_init = probe_scores(crasp, control_fit, control_sets, settings.ridge)
    own_fit, own_sets = read(compiled_model)
    own = probe_scores(crasp, own_fit, own_sets, settings.ridge)
    shuffled = probe_scores(
        crasp,
        trained_fit,
        trained_sets,
        settings.ridge,
        shuffle=np.random.default_rng([settings.seed, 99]),
    )
    fit_targets = targets(crasp, trained_fit)
    kinds = {name: kind for name, (kind, _) in fit_targets.items()}
    first = bin_name(bins[0])

    variables: list[dict[str, Any]] = []
    for target, kind in kinds.items():
        best = _best(scores[target][first])
        variables.append(
            {
                "target": target,
                "kind": kind,
                "chance": CHANCE[kind],
                "best_stage": None if best is None else names[best],
                "scores": scores[target],
                "random_init": random_init[target],
                "shuffled": shuffled[target],
                "compiled": own[target],
            }
        )

    # heads, on the in-distribution test set
    head_examples = sets[first]
    _, compiled_p, compiled_names = compiled_pass(compiled_model, head_examples, patterns=True)
    trained_p = run_model(model, task, head_examples, seed, attention=True)[2]
    control_p = run_model(control, task, head_examples, seed, attention=True)[2]
    heads = model.config.n_heads
    trained_names = [
        f"L{i // heads + 1} head {i % heads + 1}" for i in range(model.config.n_layers * heads)
    ]
    heads_record: dict[str, Any] = {"trained": trained_names, "compiled": compiled_names}
    if compiled_names:
        tv = total_variation(trained_p, compiled_p)
        tv_control = total_variation(control_p, compiled_p)
        tv_uniform = total_variation(uniform_causal(head_examples), compiled_p)[0]
        heads_record |= {
            "tv": tv.round(4).tolist(),
            "tv_random_init": tv_control.round(4).tolist(),
            "tv_uniform": tv_uniform.round(4).tolist(),
            "best_match": [
                {
                    "compiled": compiled_names[j],
                    "trained": trained_names[int(tv[:, j].argmin())],
                    "tv": round(float(tv[:, j].min()), 4),
                    "tv_random_init": round(float(tv_control[:, j].min()), 4),
                    "tv_uniform": round(float(tv_uniform[j]), 4),
                }
                for j in range(len(compiled_names))
            ],
        }

    # interchange interventions at each variable's best stage
    pair_rng = np.random.default_rng([settings.seed, 7])
    pairs: list[tuple[Example, Example]] = []
    for _ in range(settings.pairs):
        length = int(pair_rng.choice(train_lengths))
        a, b = sample_examples(task, pair_rng, [length], 2)
        pairs.append((a, b))
    interventions = []
    direction_rng = np.random.default_rng([settings.seed, 8])
    for record in variables:
        if record["best_stage"] is None or record["kind"] == "count":
            continue  # a count is patched through its fraction, which the model stores
        stage = names.index(record["best_stage"])
        variable = record["target"].split(" / ")[0]
        along = covariance_direction(trained_fit.stages[stage], fit_targets[record["target"]][1])
        noise = direction_rng.standard_normal(along.shape)
        noise /= np.linalg.norm(noise)
        own = interchange(model, task, crasp, pairs, variable, stage, along, seed)
        ctrl = interchange(model, task, crasp, pairs, variable, stage, noise, seed)
        interventions.append(
            {
                "variable": variable,
                "target": record["target"],
                "stage": record["best_stage"],
                **own,
                "follow_random_direction": ctrl["follow"],
                "stay_random_direction": ctrl["stay"],
            }
        )

    outputs = {name: _accuracy(task, probed) for name, probed in trained_sets.items()}
    return {
        "schema": SCHEMA,
        "run": run.name,
        "task": task.name,
        "train": meta.get("train"),
        "model": meta.get("model"),
        "program": {
            "definitions": list(crasp_language().definition_sorts(crasp)),
            "outputs": list(crasp.outputs),
            "against": None if against is None else Path(against).name,
        },
        "settings": asdict(settings),
        "bins": {bin_name(b): list(b) for b in bins if bin_name(b) in sets},
        "stages": names,
        "compiled_stages": compiled_stages(compiled_model),
        "variables": variables,
        "heads": heads_record,
        "interventions": interventions,
        "output_accuracy": outputs,
        "provenance": provenance("cpu", "float32"),
    }


def write(record: Mapping[str, Any], out_dir: str | Path, figure: bool = True) -> list[Path]:
    """Write ``compare.json`` (and, with ``figure``, ``compare.png``) to ``out_dir``."""
    out = writable_dir(out_dir)
    write_text(out / RECORD, json.dumps(record, indent=1) + "\n")
    paths = [out / RECORD]
    if figure:
        from crasp_compiler.experiments.compare_figure import draw

        paths.append(draw(record, out / FIGURE))
    return paths


def summary(record: Mapping[str, Any]) -> str:
    """A few lines for the terminal: the best stage of each variable, head matches and
    interventions."""
    first = next(iter(record["bins"]))
    later = list(record["bins"])[1:]
    against = record["program"].get("against")
    reference = f", against {against}" if against else ""
    lines = [f"{record['task']} ({record['run']}{reference}): probes fitted on LEN {first}"]
    head = f"  {'variable':<28} {'stage':<9} {'score':>6} {'untrained':>9} {'shuffled':>8}"
    head += "".join(f" {'@' + b:>9}" for b in later)
    lines.append(head)
    names = record["stages"]
    for v in record["variables"]:
        if v["best_stage"] is None:
            lines.append(f"  {v['target']:<28} (constant on the probe set)")
            continue
        i = names.index(v["best_stage"])
        cells = [
            v["scores"][first][i],
            max(_finite(v["random_init"][first])),
            v["shuffled"][first][i],
        ]
        line = f"  {v['target']:<28} {v['best_stage']:<9}" + "".join(
            f" {_fmt(c):>{w}}" for c, w in zip(cells, (6, 9, 8), strict=True)
        )
        line += "".join(f" {_fmt(v['scores'][b][i]):>9}" for b in later)
        lines.append(line)
    for match in record["heads"].get("best_match", []):
        lines.append(
            f"  {match['compiled']}: closest {match['trained']} (TV {match['tv']:.2f}; "
            f"untrained {match['tv_random_init']:.2f}, uniform {match['tv_uniform']:.2f})"
        )
    for iv in record["interventions"]:
        lines.append(
            f"  patch {iv['target']} at {iv['stage']}: follows {_fmt(iv['follow'])} of "
            f"{iv['changed_positions']} changed outputs (random direction "
            f"{_fmt(iv['follow_random_direction'])}, unpatched {_fmt(iv['follow_unpatched'])})"
        )
    return "\n".join(lines)


def _finite(row: Sequence[float | None]) -> list[float]:
    return [x for x in row if x is not None] or [math.nan]


def _fmt(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2f}"
