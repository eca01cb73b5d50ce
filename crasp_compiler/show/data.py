"""What the pictures show, computed without matplotlib: one input's pass through a model
(:func:`trace`) and where each definition of the program lives (:func:`sites`,
:func:`definitions`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from crasp_compiler import api
from crasp_compiler.budget import require_memory
from crasp_compiler.errors import CraspError
from crasp_compiler.model.model import Model
from crasp_compiler.runtime import numpy_exec
from crasp_compiler.runtime.backend import NUMPY
from crasp_compiler.runtime.forward import Observer, forward

# A kind of residual label: a leading name up to ``:`` or ``#`` (token:a, onehot:3, recv:x#1).
_KIND = re.compile(r"[A-Za-z_][\w^]*[:#]")
# A residual entry counts as changed by a sublayer when it moves by more than this.
CHANGED = 1e-9

# The most residual values (positions × width × stages) a trace keeps in memory.
MAX_VALUES = 1 << 26

# Bytes a trace holds per residual value and per attention weight, with the temporaries
# of the two forward passes (the outputs and the observed one), measured with a margin.
TRACE_BYTES = 24

# The observation points a trace keeps.
KEPT = ("hook_pattern", "hook_resid_pre", "hook_resid_mid", "hook_resid_post")


@dataclass(frozen=True)
class Stage:
    """The residual after one sublayer: ``values`` (T, d), which rows it changed, and
    the label of what each row holds then (rows are reused where the model frees them:
    :meth:`~crasp_compiler.model.model.Model.labels_at`)."""

    label: str
    values: np.ndarray
    changed: np.ndarray  # (d,) bool
    rows: list[str]


@dataclass(frozen=True)
class Pattern:
    """One head's attention pattern (queries × keys) on the input."""

    layer: int  # from 0
    head: int
    label: str
    weights: np.ndarray  # (T, T)


@dataclass(frozen=True)
class Trace:
    """One input's pass: residual labels (rows), position labels (columns, BOS first),
    the residual after the embedding and every sublayer, every head's pattern, and the
    decided outputs at the language's positions (``output_labels``)."""

    rows: list[str]
    positions: list[str]
    stages: list[Stage]
    patterns: list[Pattern]
    output_labels: list[str]
    outputs: dict[str, np.ndarray]
    text: str = ""  # the input as the language writes it


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


def trace(model: Model, item: Any, *, on_beyond: str = "error", patterns: bool = True) -> Trace:
    """Run ``model`` on one input of its language (C-RASP: a token list or string; PCOC:
    an input-vector array, one row per input slot) and record what the pictures show
    (the attention patterns only with ``patterns``)."""
    language = api.model_language(model)
    if isinstance(item, str) and language.name == "crasp":
        item = item.split()
    tokens, values = language.model_inputs(model, [item])
    stages = stage_count(model)
    size = (len(tokens[0]) + 1) * model.width * stages
    if size > MAX_VALUES:
        raise CraspError(
            f"too large to picture: {len(tokens[0]) + 1} positions × width {model.width:,} × "
            f"{stages} residual stages is {size:,} values (at most {MAX_VALUES:,}); "
            "`crasp info` summarises the model"
        )
    require_memory(trace_bytes(model, len(tokens[0]) + 1, patterns), "tracing the input")
    result = api.run(model, [item], on_beyond=on_beyond)
    ids = np.zeros((1, len(tokens[0]) + 1), dtype=np.int64)
    ids[0, 1:] = model.token_ids(list(tokens[0]))
    lengths = np.array([len(tokens[0])], dtype=np.int64)
    numeric = None
    if model.inputs or values is not None:
        numeric = numpy_exec.numeric_matrix(model.inputs, lengths, values)
    seen: dict[str, np.ndarray] = {}

    def hook(name: str, value: np.ndarray) -> None:
        if name == "hook_resid_final" or name.endswith(KEPT):
            seen[name] = value

    parts = numpy_exec.NumpyParts(model, np.float64)
    forward(NUMPY, parts, ids, lengths, numeric, Observer(hook, patterns=patterns))
    points = [("embed", "blocks.0.hook_resid_pre" if model.layers else "hook_resid_final", 0)]
    drawn: list[Pattern] = []
    for index, layer in enumerate(model.layers):
        if layer.heads:
            name = f"blocks.{index}.hook_resid_mid"
            points.append((f"layer {index + 1} attention", name, 2 * index + 1))
        if layer.mlp is not None:
            name = f"blocks.{index}.hook_resid_post"
            points.append((f"layer {index + 1} mlp", name, 2 * index + 2))
        for h, head in enumerate(layer.heads if patterns else ()):
            weights = seen[f"blocks.{index}.attn.heads.{h}.hook_pattern"][0]
            drawn.append(Pattern(index, h, head.label or f"head {h + 1}", np.asarray(weights)))
    kept: list[Stage] = []
    previous: np.ndarray | None = None
    for label, name, stage in points:
        now = np.asarray(seen[name][0], dtype=np.float64)
        moved = np.abs(now) if previous is None else np.abs(now - previous)
        kept.append(Stage(label, now, np.any(moved > CHANGED, axis=0), model.labels_at(stage)))
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


# ---------------------------------------------------------------- where things live


def sites(model: Model) -> list[str]:
    """For every residual dimension, the sublayer that writes it: ``embed``, ``L1 head 0``
    (from 1 for layers, from 0 for heads), ``L2 mlp``; the first writer when several do."""
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
        match = _KIND.match(label)
        key = match.group(0) if match else label
        entry = groups.setdefault(key, [0, k, k])
        entry[0] += 1
        entry[2] = k
    return [(key, count, first, last) for key, (count, first, last) in groups.items()]


def program_graph(model: Model) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The program as a graph over the model: ``(definition, site)`` per definition
    (:func:`definitions`) and ``(used, user)`` edges between definitions, from the
    model's stored source (empty edges when the language has no named references)."""
    from crasp_compiler.languages.crasp.nodes import walk

    nodes = [(name, site) for name, _, site in definitions(model)]
    known = {name for name, _ in nodes}
    program = api.model_language(model).model_program(model)
    edges: list[tuple[str, str]] = []
    for definition in getattr(program, "definitions", ()):
        expr = getattr(definition, "expr", None)
        if expr is None or definition.name not in known:
            continue
        used = {str(getattr(n, "name", "")) for n in walk(expr) if type(n).__name__.endswith("Ref")}
        edges += [(name, str(definition.name)) for name in sorted(used & known)]
    return nodes, edges
