"""What the pictures show, computed without matplotlib: one input's pass through a model
(:func:`trace`), the outputs with and without an intervention (:func:`intervene`), what
each residual row holds (:func:`count_labels`, :func:`row_names`) and where each
definition of the program lives (:func:`sites`, :func:`definitions`).

One numbering everywhere, as ``crasp info`` and ``crasp run --trace``: layers and heads
from 1 (``L1 head 1``), positions as in the traces (BOS at −1, the first token at 0)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from crasp_compiler import api
from crasp_compiler.budget import require_memory
from crasp_compiler.errors import CraspError
from crasp_compiler.languages import language_of_model
from crasp_compiler.model.model import Mask, Model, Weighting
from crasp_compiler.runtime import numpy_exec
from crasp_compiler.runtime.backend import NUMPY
from crasp_compiler.runtime.forward import Observer, forward

# A kind of residual label: a leading name up to ``:`` or ``#`` (token:a, onehot:3, recv:x#1).
_KIND = re.compile(r"[A-Za-z_][\w^]*[:#]")
# An IR id (``cmp#4``, ``min-in-branch#21``) and a label's prefix (``onehot:``).
_ID = re.compile(r"(.+)#\d+")
_PREFIX = re.compile(r"[A-Za-z_][\w^-]*:")
# A residual entry counts as changed by a sublayer when it moves by more than this.
CHANGED = 1e-9

# The most residual values (positions × width × stages) a trace keeps in memory.
MAX_VALUES = 1 << 26

# Bytes a trace holds per residual value and per attention weight, with the temporaries
# of the two forward passes (the outputs and the observed one), measured with a margin.
TRACE_BYTES = 24

# The observation points a trace keeps.
KEPT = ("hook_pattern", "hook_resid_pre", "hook_resid_mid", "hook_resid_post")

# The position of the first column of a trace: BOS, at −1 as in ``crasp run --trace``.
FIRST = -1

# A PCOC slot made by the routing of a send (:mod:`crasp_compiler.languages.pcoc.benes`):
# round, send, then an entry field (step, entry, tuple, field) or a temporary's stem.
_ROUTED = re.compile(r"_bn(\d+)_(\d+)_(?:probe_)?(?:e(\d+)_(\d+)_(\d*)([vxs])|t\d+_(\w+))")
_FIELDS = {"v": "valid flag", "x": "payload", "s": "sender"}
# A head or site named on the command line: ``L2 head 1`` (or ``L2 h1``), ``L1 mlp``.
_HEAD = re.compile(r"L(\d+) (?:head |h)(\d+)")
_MLP = re.compile(r"L(\d+) mlp")


@dataclass(frozen=True)
class Stage:
    """The residual after one sublayer: ``values`` (T, d), which rows it changed, and
    the label of what each row holds then (rows are reused where the model frees them:
    :meth:`~crasp_compiler.model.model.Model.labels_at`)."""

    label: str
    values: np.ndarray
    changed: np.ndarray  # (d,) bool
    rows: list[str]
    names: list[str]  # what the pictures call each row (PCOC: program text, else ``rows``)
    counts: np.ndarray  # (d,) bool: the row holds a count c stored as c/(t+1)

    def count_values(self, row: int) -> np.ndarray:
        """The counts ``value · (t + 1)`` of ``row`` at every position (BOS: t = 0),
        rounded where they are within rounding of an integer."""
        counts = self.values[:, row] * np.arange(1, len(self.values) + 1)
        rounded = np.rint(counts)
        return np.where(np.abs(counts - rounded) <= 1e-6 * np.maximum(1, rounded), rounded, counts)


@dataclass(frozen=True)
class Pattern:
    """One head's attention pattern (queries × keys) on the input."""

    layer: int  # from 0
    head: int  # from 0
    label: str
    weights: np.ndarray  # (T, T)

    @property
    def site(self) -> str:
        """``L1 head 1``: the head as :func:`sites` and ``crasp info`` name it."""
        return f"L{self.layer + 1} head {self.head + 1}"

    @property
    def title(self) -> str:
        """The site and the head's label, in full."""
        return f"{self.site}: {self.label}" if self.label else self.site


@dataclass(frozen=True)
class Trace:
    """One input's pass: residual labels (rows), position labels (columns, BOS first),
    the residual after the embedding and every sublayer, every head's pattern, and the
    decided outputs at the language's positions (``output_labels``). Column k of a
    residual or pattern is position ``k + FIRST``; output column k is position
    ``k + output_first``."""

    rows: list[str]
    positions: list[str]
    stages: list[Stage]
    patterns: list[Pattern]
    output_labels: list[str]
    outputs: dict[str, np.ndarray]
    text: str = ""  # the input as the language writes it

    @property
    def output_first(self) -> int:
        """The position of the first output column: BOS's when the language's outputs
        include the empty prefix (C-RASP), else the first token's (PCOC)."""
        return FIRST + len(self.positions) - len(self.output_labels)


def read_input(model: Model, argument: str | None, line: int = 1) -> Any:
    """The ``line``-th input (from 1) that ``crasp run MODEL ARGUMENT`` would read: a token
    string for C-RASP, a vector file for PCOC."""
    language = api.model_language(model)
    for k, item in enumerate(language.read_inputs(argument, model), start=1):
        if isinstance(item.value, Exception):
            raise item.value
        if k == line:
            return item.value
    raise CraspError(f"no input on line {line}", filename=argument or "<stdin>")


def positions(model: Model, item: Any) -> int:
    """The positions (BOS included) of ``item``, an input of the model's language as
    :func:`trace` takes it."""
    language = api.model_language(model)
    if isinstance(item, str) and language.name == "crasp":
        item = item.split()
    return len(language.model_inputs(model, [item])[0][0]) + 1


def stage_count(model: Model) -> int:
    """Residual stages of ``model``: the embedding, then each attention and each MLP."""
    return 1 + sum(bool(layer.heads) + (layer.mlp is not None) for layer in model.layers)


def trace_bytes(model: Model, positions: int, patterns: bool = True) -> float:
    """The bytes :func:`trace` holds at its peak on an input of ``positions`` positions:
    the residual after every stage and (``patterns``) every head's pattern, with
    temporaries."""
    heads = sum(len(layer.heads) for layer in model.layers)
    cells = positions * model.width * (stage_count(model) + 2)
    cells += positions**2 * (heads + 2) if patterns else 0
    return float(TRACE_BYTES * cells)


def _encoded(model: Model, item: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray | None]:
    """``item`` as the language reads it (a C-RASP string split into tokens), and the
    forward pass's token ids (BOS first), lengths and numeric inputs for it."""
    language = api.model_language(model)
    if isinstance(item, str) and language.name == "crasp":
        item = item.split()
    tokens, values = language.model_inputs(model, [item])
    ids, lengths = numpy_exec.encode_vocab(model.vocab, tokens)  # CraspError: a bad token
    numeric = None
    if model.inputs or values is not None:
        numeric = numpy_exec.numeric_matrix(model.inputs, lengths, values)
    return item, ids, lengths, numeric


def trace(model: Model, item: Any, *, on_beyond: str = "error", patterns: bool = True) -> Trace:
    """Run ``model`` on one input of its language (C-RASP: a token list or string; PCOC:
    an input-vector array, one row per input slot) and record what the pictures show
    (the attention patterns only with ``patterns``)."""
    language = api.model_language(model)
    item, ids, lengths, numeric = _encoded(model, item)
    stages = stage_count(model)
    size = ids.shape[1] * model.width * stages
    if size > MAX_VALUES:
        raise CraspError(
            f"too large to picture: {ids.shape[1]} positions × width {model.width:,} × "
            f"{stages} residual stages is {size:,} values (at most {MAX_VALUES:,}); "
            "`crasp info` summarises the model"
        )
    require_memory(trace_bytes(model, ids.shape[1], patterns), "tracing the input")
    result = api.run(model, [item], on_beyond=on_beyond)
    seen: dict[str, np.ndarray] = {}

    def hook(name: str, value: np.ndarray) -> None:
        if name == "hook_resid_final" or name.endswith(KEPT):
            seen[name] = value

    parts = numpy_exec.NumpyParts(model, np.float64)
    forward(NUMPY, parts, ids, lengths, numeric, Observer(hook, patterns=patterns))
    drawn: list[Pattern] = []
    for index, layer in enumerate(model.layers):
        for h, head in enumerate(layer.heads if patterns else ()):
            weights = seen[f"blocks.{index}.attn.heads.{h}.hook_pattern"][0]
            label = head_label(model, head.label)
            drawn.append(Pattern(index, h, label, np.asarray(weights)))
    named, counted = row_names(model), count_labels(model)
    kept: list[Stage] = []
    previous: np.ndarray | None = None
    for stage, (label, name) in enumerate(_stage_points(model)):
        if name is None:
            continue
        now = np.asarray(seen[name][0], dtype=np.float64)
        moved = np.abs(now) if previous is None else np.abs(now - previous)
        rows = model.labels_at(stage)
        kept.append(
            Stage(
                label,
                now,
                np.any(moved > CHANGED, axis=0),
                rows,
                [named.get(row, row) for row in rows],
                np.array([row in counted for row in rows], dtype=bool),
            )
        )
        previous = now
    return Trace(
        rows=list(model.residual),
        positions=[str(p) for p in language.position_labels(model, item)],
        stages=kept,
        patterns=drawn,
        output_labels=list(result.labels[0]),
        outputs={name: np.asarray(v[0]) for name, v in result.values.items()},
        text=language.format_input(item),
    )


def _stage_points(model: Model) -> list[tuple[str, str | None]]:
    """For every stage ``0 … model.stages``: its label and the observation point holding
    the residual after it (None for a layer without heads or without an MLP)."""
    points: list[tuple[str, str | None]] = [
        ("embed", "blocks.0.hook_resid_pre" if model.layers else "hook_resid_final")
    ]
    for index, layer in enumerate(model.layers):
        attention = f"blocks.{index}.hook_resid_mid" if layer.heads else None
        mlp = f"blocks.{index}.hook_resid_post" if layer.mlp is not None else None
        points += [(f"layer {index + 1} attention", attention), (f"layer {index + 1} mlp", mlp)]
    return points


# ---------------------------------------------------------------- interventions


@dataclass(frozen=True)
class Intervention:
    """The decided outputs on one input as compiled (``before``) and with ``what`` done
    to the pass (``after``), at the language's positions (``labels``)."""

    what: str
    labels: list[str]
    before: dict[str, np.ndarray]
    after: dict[str, np.ndarray]


def intervene(
    model: Model, item: Any, target: str, source: Any = None, *, on_beyond: str = "error"
) -> Intervention:
    """Run ``model`` on ``item`` with ``target`` ablated (its value set to 0) or, given a
    ``source`` input of the same length, patched (its value taken from the pass on
    ``source``). ``target`` is a head (``L1 head 1``), a layer's MLP (``L2 mlp``), a
    residual label or a definition (its residual dimensions, from the sublayer that
    writes them on)."""
    points = _points(model, target)
    language = api.model_language(model)
    item, ids, lengths, numeric = _encoded(model, item)
    require_memory(trace_bytes(model, ids.shape[1], False), "intervening on the input")
    clean = api.run(model, [item], on_beyond=on_beyond)
    parts = numpy_exec.NumpyParts(model, np.float64)
    taken: dict[str, np.ndarray] = {}
    if source is not None:
        source, source_ids, source_lengths, source_numeric = _encoded(model, source)
        if source_ids.shape != ids.shape:
            raise CraspError(
                f"patching needs a source input of the same length: {ids.shape[1] - 1} "
                f"tokens, not {source_ids.shape[1] - 1}"
            )
        api.run(model, [source], on_beyond=on_beyond)  # the guarantee's checks

        def record(name: str, value: np.ndarray) -> None:
            if name in points:
                taken[name] = np.array(value)

        forward(NUMPY, parts, source_ids, source_lengths, source_numeric, Observer(record))

    def swap(name: str, value: np.ndarray) -> np.ndarray | None:
        if name not in points:
            return None
        out = np.array(value)
        columns = points[name]
        new = taken[name] if name in taken else np.zeros_like(out)
        if columns is None:
            return new
        out[..., columns] = new[..., columns]
        return out

    raw = np.asarray(forward(NUMPY, parts, ids, lengths, numeric, Observer(swap)))
    steps = np.arange(1, raw.shape[1] + 1, dtype=np.float64)[None]
    after = {
        output.name: language.model_outputs(
            model, [item], numpy_exec.decide(output.rule, raw[..., k], steps)
        )[0]
        for k, output in enumerate(model.outputs)
    }
    how = "ablated" if source is None else f"patched from {language.format_input(source)}"
    return Intervention(
        f"{target} {how}",
        list(clean.labels[0]),
        {name: np.asarray(v[0]) for name, v in clean.values.items()},
        {name: np.asarray(after[name]) for name in clean.values},
    )


def _points(model: Model, target: str) -> dict[str, list[int] | None]:
    """The observation points an intervention on ``target`` replaces: each with the
    residual columns it changes there (None: the whole value)."""
    target = " ".join(target.split())
    if match := _HEAD.fullmatch(target):
        layer, head = int(match[1]) - 1, int(match[2]) - 1
        if 0 <= layer < len(model.layers) and 0 <= head < len(model.layers[layer].heads):
            return {f"blocks.{layer}.attn.heads.{head}.hook_result": None}
    if match := _MLP.fullmatch(target):
        layer = int(match[1]) - 1
        if 0 <= layer < len(model.layers) and model.layers[layer].mlp is not None:
            return {f"blocks.{layer}.hook_mlp_out": None}
    # a definition: the dimensions of its form that a sublayer writes (not BOS, nonbos)
    form = set((model.info.get("definitions") or {}).get(target) or ())
    names = row_names(model)
    points: dict[str, list[int] | None] = {}
    stage_points = _stage_points(model)
    for k, held in enumerate(writes(model)):
        for stage, label in held:
            name = stage_points[stage][1]
            chosen = target in (label, names.get(label)) or (label in form and stage > 0)
            if name is not None and chosen:
                columns = points.setdefault(name, [])
                assert columns is not None
                columns.append(k)
    if not points:
        raise CraspError(
            f"nothing to intervene on named {target!r}: give a head (L1 head 1), a layer's "
            "MLP (L1 mlp), a definition or a residual label (`crasp info --layout` lists "
            "them)"
        )
    return points


# ---------------------------------------------------------------- what rows hold


def count_labels(model: Model) -> set[str]:
    """The residual labels of a model whose values are counts ``c`` stored as ``c/(t+1)``
    (BOS included in ``t + 1``), for a language whose models store counts so
    (:meth:`~crasp_compiler.languages.registry.Language.count_forms`, C-RASP): the
    dimensions of count definitions, count sub-expressions of the program (a dimension is
    labelled with its source expression), the gated offsets of a local count
    (``ONE·P(i-1) in …``) and what a causal uniform head writes (a prefix average of a
    Boolean, ``ONE``)."""
    language = language_of_model(model)
    counts = None if language is None else language.count_forms(model)
    if counts is None:
        return set()
    averaging = {}
    for index, layer in enumerate(model.layers):
        for h, head in enumerate(layer.heads):
            averaging[f"L{index + 1} head {h + 1}"] = (
                head.mask == Mask.CAUSAL
                and head.weighting in (Weighting.SOFTMAX, Weighting.HARD)
                and head.is_uniform
            )
    out = set()
    for held in occupant_sites(model):
        for label, site in held:
            source = re.sub(r" \[\d+\]$", "", label)  # "# V [2]": the second of that name
            if source in counts or label.startswith("ONE·") or averaging.get(site, False):
                out.add(label)
    return out


def row_group(label: str, count: bool) -> str:
    """The colour group of a residual row: counts together, an IR id by its stem
    (``cmp#4``: ``cmp``), a kind by its prefix (``onehot:``), any other label alone."""
    if count:
        return "count"
    if match := _ID.fullmatch(label):
        return match[1]
    if match := _PREFIX.match(label):
        return match[0]
    return label


def row_scales(run: Trace, rows: list[int]) -> dict[str, float]:
    """Each row group's colour scale over ``rows``: the largest magnitude of its rows at
    any stage (at least 1 for counts, stored as fractions of the prefix)."""
    scales: dict[str, float] = {"count": 1.0}
    for stage in run.stages:
        for row in rows:
            key = row_group(stage.rows[row], bool(stage.counts[row]))
            top = float(np.max(np.abs(stage.values[:, row]), initial=0.0))
            scales[key] = max(scales.get(key, 0.0), top)
    return {key: scale or 1.0 for key, scale in scales.items()}


def label_kind(label: str) -> str | None:
    """The kind of a residual label (:func:`layout_groups`): ``onehot:`` for
    ``onehot:3``; None for a label of its own kind."""
    match = _KIND.match(label)
    return match.group(0) if match else None


def row_names(model: Model) -> dict[str, str]:
    """What the pictures call a residual label where it is not what the program says:
    in a PCOC model, a value an MLP computes by the program text of its block (``min in a
    branch in `x = min(x, right)```, a routing step by its send: ``clamp (routing send x
    to d)``), a received value by its slot and round, a routed entry by its send; other
    labels are their own names (:meth:`~crasp_compiler.languages.registry.Language.
    routing_labels`: a language whose models are named by the program as they are has
    none to rename)."""
    sends = _sends(model)
    if sends is None:
        return {}
    names: dict[str, str] = {}
    for index, layer in enumerate(model.layers):
        if layer.heads:
            labels = model.labels_at(2 * index + 1)
            for head in layer.heads:
                when = head.label.split(":")[0] if head.label.startswith("round ") else ""
                for k in np.flatnonzero(_nonzero_rows(head.w_o)):
                    names.setdefault(labels[k], _received(labels[k], when, sends))
        if layer.mlp is not None:
            labels = model.labels_at(2 * index + 2)
            units = layer.mlp.labels
            rows, columns = _entries(layer.mlp.w2)
            for row, u in zip(rows, columns, strict=True):
                what = units[u] if u < len(units) else ""
                if what and not what.startswith("cancel ") and labels[row] not in names:
                    routing = "" if "`" in what or not sends else f" ({_routing(sends)})"
                    names[labels[row]] = what + routing
    return {label: name for label, name in names.items() if name != label}


def _sends(model: Model) -> dict[tuple[int, int], str] | None:
    """``(round, send) -> send x to d`` for every send statement of the model's program
    (rounds unrolled, as the routing's slot names number them); None for a model whose
    language routes no sends (or one built by hand)."""
    language = language_of_model(model)
    return None if language is None else language.routing_labels(model)


def _routing(sends: dict[tuple[int, int], str]) -> str:
    texts = sorted(set(sends.values()))
    return f"routing {texts[0]}" if len(texts) == 1 else "send routing"


def _received(label: str, when: str, sends: dict[tuple[int, int], str]) -> str:
    """``recv:x#3`` as ``x received (round 0)``; a routed slot by its send and entry."""
    if not label.startswith("recv:"):
        return label
    slot = label.removeprefix("recv:").rsplit("#", 1)[0]
    routed = _ROUTED.fullmatch(slot)
    if routed is None:
        return f"{slot} received" + (f" ({when})" if when else "")
    send = sends.get((int(routed[1]), int(routed[2])), "a send")
    if routed[7]:
        return f"{send}: {routed[7]}"
    step, entry, number, field = routed[3], routed[4], routed[5], _FIELDS[routed[6]]
    tuple_ = f" tuple {number}" if number else ""
    return f"{send}: {field}, step {step} entry {entry}{tuple_}"


def head_label(model: Model, label: str) -> str:
    """A head's label as the pictures show it: in a PCOC model, the routing slots a head
    receives counted per send (``round 1: recv 16 routing field(s) of send x to d``)
    rather than listed by their made-up names."""
    if ": recv " not in label:
        return label
    sends = _sends(model)
    if sends is None:
        return label
    when, names = label.split(": recv ", 1)
    kept: list[str] = []
    routed: dict[str, int] = {}
    for name in names.split(", "):
        match = _ROUTED.fullmatch(name)
        if match is None:
            kept.append(name)
        else:
            send = sends.get((int(match[1]), int(match[2])), "a send")
            routed[send] = routed.get(send, 0) + 1
    kept += [f"{count} routing field(s) of {send}" for send, count in routed.items()]
    return f"{when}: recv {', '.join(kept)}"


def short(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: a list (``a, b, c``) keeps its first
    items and says how many more; other text keeps its start and its end (where heads and
    rows differ)."""
    if len(text) <= limit:
        return text
    head, _, items = text.rpartition(": ")
    names = _items(items)
    lead = f"{head}: " if head else ""
    kept, length = 0, len(lead)
    while kept < len(names) - 1:  # the most names that fit with ", … (+N more)"
        length += len(names[kept]) + 2 * (kept > 0)
        if length + len(f", … (+{len(names) - kept - 1} more)") > limit:
            break
        kept += 1
    if kept:
        return f"{lead}{', '.join(names[:kept])}, … (+{len(names) - kept} more)"
    half = (limit - 1) // 2
    return f"{text[:half]}…{text[len(text) - (limit - 1 - half) :]}"


def _items(text: str) -> list[str]:
    """``text`` split at the ``, `` outside brackets (``#[j <= i, j == i - 1] "a"`` is
    one item)."""
    items, depth, start = [], 0, 0
    for k, char in enumerate(text):
        depth += (char in "([{") - (char in ")]}")
        if depth == 0 and text.startswith(", ", k):
            items.append(text[start:k])
            start = k + 2
    return [*items, text[start:]]


def _entries(matrix: Any) -> tuple[list[int], list[int]]:
    """The (row, column) of every nonzero entry of a dense or sparse matrix."""
    if hasattr(matrix, "tocoo"):
        coo = matrix.tocoo()
        return [int(r) for r in coo.row], [int(c) for c in coo.col]
    rows, columns = np.nonzero(np.asarray(matrix))
    return [int(r) for r in rows], [int(c) for c in columns]


# ---------------------------------------------------------------- where things live


def sites(model: Model) -> list[str]:
    """For every residual dimension, the sublayer that writes it: ``embed``, ``L1 head 1``
    (layers and heads from 1), ``L2 mlp``; the first writer when several do."""
    out = ["embed"] * model.width
    written = np.zeros(model.width, dtype=bool)
    for index, layer in enumerate(model.layers):
        for h, head in enumerate(layer.heads):
            rows = _nonzero_rows(head.w_o)
            for k in np.flatnonzero(rows & ~written):
                out[k] = f"L{index + 1} head {h + 1}"
            written |= rows
        if layer.mlp is not None:
            rows = _nonzero_rows(layer.mlp.w2) | (np.asarray(layer.mlp.b2) != 0)
            for k in np.flatnonzero(rows & ~written):
                out[k] = f"L{index + 1} mlp"
            written |= rows
    return out


def occupant_sites(model: Model) -> list[list[tuple[str, str]]]:
    """For every residual dimension, ``(label, site)`` of each value it holds in turn
    (one pair unless the model reuses dimensions): the site is the sublayer that writes
    the value, named as :func:`sites` names them."""
    first = sites(model)
    if model.occupants is None:
        return [[(label, site)] for label, site in zip(model.residual, first, strict=True)]
    writers: dict[int, list[tuple[str, np.ndarray]]] = {}  # stage -> (site, rows written)
    for index, layer in enumerate(model.layers):
        writers[2 * index + 1] = [
            (f"L{index + 1} head {h + 1}", _nonzero_rows(head.w_o))
            for h, head in enumerate(layer.heads)
        ]
        if layer.mlp is not None:
            rows = _nonzero_rows(layer.mlp.w2) | (np.asarray(layer.mlp.b2) != 0)
            writers[2 * index + 2] = [(f"L{index + 1} mlp", rows)]
    out = []
    for k, dimension in enumerate(model.occupants):
        here = []
        for stage, label in dimension:
            if label:
                site = next((s for s, rows in writers.get(stage, []) if rows[k]), first[k])
                here.append((label, "embed" if stage == 0 else site))
        out.append(here)
    return out


def writes(model: Model) -> list[list[tuple[int, str]]]:
    """For every residual dimension, ``(stage, label)`` of each value it holds in turn,
    from the stage that writes it (0: the embedding; the model's stage numbering)."""
    if model.occupants is not None:
        return [[(stage, label) for stage, label in held if label] for held in model.occupants]
    stage_of = {"embed": 0}
    for index, layer in enumerate(model.layers):
        stage_of |= {f"L{index + 1} head {h + 1}": 2 * index + 1 for h in range(len(layer.heads))}
        stage_of[f"L{index + 1} mlp"] = 2 * index + 2
    return [
        [(stage_of[site], label)] for label, site in zip(model.residual, sites(model), strict=True)
    ]


def _nonzero_rows(matrix: Any) -> np.ndarray:
    if hasattr(matrix, "tocsr"):
        csr = matrix.tocsr()
        return np.asarray(np.diff(csr.indptr) > 0)
    return np.asarray(np.any(np.asarray(matrix) != 0, axis=1))


def definitions(model: Model) -> list[tuple[str, str, str]]:
    """``(definition, residual form, where it is computed)`` for every definition the
    model records (C-RASP's ``info["definitions"]``); the form is ``label`` or a sum
    ``a·label + …`` of residual dimensions (labels with spaces, source expressions, in
    brackets), and the site is the latest sublayer writing
    one of them (the definition exists from there on)."""
    recorded = model.info.get("definitions") or {}
    site_of = {label: site for dim in occupant_sites(model) for label, site in dim}
    order = {site: k for k, site in enumerate(site_order(model))}
    out = []
    for name, form in recorded.items():
        terms = []
        places = []
        for label, coef in form.items():
            term = f"[{label}]" if " " in label else label  # a source expression
            terms.append(term if coef == 1 else f"-{term}" if coef == -1 else f"{coef:g}·{term}")
            if label in site_of:
                places.append(site_of[label])
        site = max(places, key=lambda s: order.get(s, -1)) if places else "-"
        out.append((name, " + ".join(terms).replace("+ -", "- "), site))
    return out


def site_order(model: Model) -> list[str]:
    """Every sublayer's site name (as :func:`sites` writes them) in the order they run."""
    order = ["embed"]
    for index, layer in enumerate(model.layers):
        order += [f"L{index + 1} head {h + 1}" for h in range(len(layer.heads))]
        order.append(f"L{index + 1} mlp")
    return order


def layout_groups(model: Model) -> list[tuple[str, int, int, int]]:
    """The residual layout compressed: ``(kind, count, first, last)`` per kind of label,
    a leading name up to ``:`` or ``#`` (``onehot:0`` … ``onehot:63`` are 64
    ``onehot:``), in order of first appearance; other labels (definitions, slots, source
    expressions) are their own kind."""
    groups: dict[str, list[int]] = {}
    for k, label in enumerate(model.residual):
        key = label_kind(label) or label
        entry = groups.setdefault(key, [0, k, k])
        entry[0] += 1
        entry[2] = k
    return [(key, count, first, last) for key, (count, first, last) in groups.items()]


def program_graph(model: Model) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The program as a graph over the model: ``(definition, site)`` per definition
    (:func:`definitions`) and ``(used, user)`` edges between definitions, from the
    model's stored source (:meth:`~crasp_compiler.languages.registry.Language.
    dependencies`: no edges when the language has no named references)."""
    nodes = [(name, site) for name, _, site in definitions(model)]
    known = {name for name, _ in nodes}
    language = api.model_language(model)
    program = language.model_program(model)
    edges: list[tuple[str, str]] = []
    reads = language.dependencies(program) if program is not None else {}
    for user, used in reads.items():
        if user in known:
            edges += [(name, user) for name in sorted(used & known)]
    return nodes, edges
