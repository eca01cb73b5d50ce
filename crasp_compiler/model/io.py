"""Model files: ``.npz`` with a JSON header, loaded with ``allow_pickle=False`` and validated.

The archive holds ``header`` (a JSON string) and the weight arrays, named ``w_e``, ``w_p``,
``layer{L}.head{H}.{w_q,w_k,w_v,w_o}``, ``layer{L}.mlp.{w1,b1,w2,b2}`` and
``output{K}.weights``. A sparse matrix ``M`` (see :data:`~crasp_compiler.model.model.DENSE_LIMIT`)
is stored in CSR form as ``M.data`` (float64), ``M.indices`` and ``M.indptr`` (int64; int32
is read too, unsigned or narrower types are refused) in place of ``M``; its shape follows from the header. The header holds everything else: format name and version,
vocabulary (``vocab[0]`` is BOS), positional features, residual labels, per-head
settings, MLP activations and layer-norm groups, outputs and decision rules, guarantee, compile options,
source text and compile information. Each head's settings include its structural ``kind``
(:class:`~crasp_compiler.model.model.HeadKind`); files written before kinds were recorded
(and version 1 files) have none, and get the kind the weights bear out
(:func:`~crasp_compiler.model.model.derive_kinds`) once, when they are loaded. A recorded
kind the weights do not bear out is refused, like any header that disagrees with itself.

Hostile files are refused before they can cost memory or crash a runtime. Before any
array is read, the zip's declared sizes and every member's ``.npy`` header (shape and
dtype) are checked: a member must declare exactly the bytes its header implies, a member
above 16 MiB must not deflate more than 1000:1, and the archive must hold at most
:data:`MAX_MODEL_BYTES` (4 GiB) uncompressed. Another budget is set by
``read_model(path, max_bytes=N)`` or by the environment variable ``CRASP_MAX_MODEL_BYTES``
(a number of bytes). The JSON header may nest :data:`MAX_HEADER_DEPTH` levels; positions,
bias offsets and machine counts are at most :data:`MAX_INTEGER`. Header values have the
types they are written with: the version an integer (``true`` is not 1), tokens, labels and
names strings, scales, biases and bounds finite JSON numbers (not Booleans or strings),
and ``info.definitions`` (what ``crasp info`` and ``crasp show`` read) maps each definition
to a residual form, labels to finite numbers. The header must agree with itself: a
``relu`` C-RASP model's guarantee is at most its ``options.max_len``, a PCOC model's is
its ``info.n`` machines, and the source parses as the language ``info.language`` names,
with the model's inputs and outputs (unless ``read_model(path, check_source=False)``:
``crasp run`` reads the weights and not the source, and so imports no parser).
"""

from __future__ import annotations

import json
import math
import os
import re
import zipfile
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from tokenize import TokenError
from typing import IO, Any, Protocol

import numpy as np
from numpy.typing import NDArray

from crasp_compiler.errors import CraspError
from crasp_compiler.files import json_nesting, replacing
from crasp_compiler.lazy import deprecated
from crasp_compiler.model.features import check_feature
from crasp_compiler.model.model import (
    ACTIVATIONS,
    BOS,
    FLOAT_DTYPES,
    HEAD_KINDS,
    MASKS,
    MAX_SEND_CAPACITY,
    MLP,
    RULES,
    WEIGHTINGS,
    Activation,
    Guarantee,
    Head,
    HeadKind,
    Layer,
    Mask,
    Matrix,
    Model,
    Output,
    Provenance,
    Rule,
    SparseMatrix,
    Weighting,
    dense,
    derive_kinds,
    head_kinds,
    kind_holds,
    legacy_provenance,
)

FORMAT = "crasp-model"
VERSION = 5
# Version 1 differs only in the value of periodic features at BOS (converted on load);
# version 2 has no "occupants" (every dimension holds one variable); versions 1–3 list an
# MLP's activations and labels unit by unit, version 4 as runs ``[value, count]`` (a wide
# model's header held one word per hidden unit: 115 M characters for permute.pcoc at
# n = 256); versions 1–4 record the model's origin only in "info"/"options", version 5 in
# its own field "provenance" (null for a model built by hand).
READABLE_VERSIONS = (1, 2, 3, 4, 5)

MAX_MODEL_BYTES = 4 << 30  # default budget for a model's uncompressed size
BUDGET_VARIABLE = "CRASP_MAX_MODEL_BYTES"
MAX_HEADER_DEPTH = 64
MAX_HEADER_CHARS = 1 << 26
MAX_INTEGER = 2**31 - 1  # positions, bias offsets, machine counts
_OFFSET = re.compile(r"-?(0|[1-9][0-9]{0,99})")  # a bias offset as the header writes it
_RATIO_FLOOR = 16 << 20  # members above this size ...
_MAX_RATIO = 1000  # ... must not deflate more than this


def model_parts(
    model: Model, dense_only: bool = False
) -> tuple[dict[str, Any], dict[str, NDArray[Any]]]:
    """The JSON header and the named arrays that describe ``model``: float64, plus the
    int64 index arrays of sparse matrices (stored dense when ``dense_only``)."""
    arrays: dict[str, Matrix] = {"w_e": model.w_e, "w_p": model.w_p}
    if model.inputs:
        arrays["w_x"] = model.numeric_weights
    layers = []
    kinds = head_kinds(model)
    for l_index, layer in enumerate(model.layers):
        heads = []
        for h_index, head in enumerate(layer.heads):
            for key in ("w_q", "w_k", "w_v", "w_o"):
                arrays[f"layer{l_index}.head{h_index}.{key}"] = getattr(head, key)
            heads.append(
                {
                    "scale": head.scale,
                    "bias": {str(k): v for k, v in head.bias.items()},
                    "weighting": head.weighting,
                    "mask": head.mask,
                    "label": head.label,
                    "kind": kinds[l_index][h_index],
                }
            )
        mlp = None
        if layer.mlp is not None:
            for key in ("w1", "b1", "w2", "b2"):
                arrays[f"layer{l_index}.mlp.{key}"] = getattr(layer.mlp, key)
            mlp = {
                "activations": _runs([str(a) for a in layer.mlp.activations]),
                "labels": _runs(list(layer.mlp.labels)),
                "norm_groups": layer.mlp.norm_groups,
            }
        layers.append({"heads": heads, "mlp": mlp})
    for k, out in enumerate(model.outputs):
        arrays[f"output{k}.weights"] = out.weights
    header: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "vocab": model.vocab,
        "features": model.features,
        "inputs": model.inputs,
        "residual": model.residual,
        "occupants": occupants_header(model.occupants),
        "layers": layers,
        "outputs": [{"name": o.name, "rule": o.rule} for o in model.outputs],
        "accept": model.accept,
        "guarantee": guarantee_header(model.guarantee),
        "options": model.options,
        "source": model.source,
        "info": model.info,
        "provenance": provenance_header(model.provenance),
    }
    stored: dict[str, NDArray[Any]] = {}
    for name, array in arrays.items():
        if isinstance(array, np.ndarray) or dense_only:
            stored[name] = np.asarray(dense(array), dtype=np.float64)
        else:
            stored[f"{name}.data"] = np.asarray(array.data, dtype=np.float64)
            stored[f"{name}.indices"] = np.asarray(array.indices, dtype=np.int64)
            stored[f"{name}.indptr"] = np.asarray(array.indptr, dtype=np.int64)
    return header, stored


def save_model(model: Model, path: str | Path) -> None:
    """Write ``model`` to ``path`` (an ``.npz`` file), whole or not at all: a failure (a
    full disk, an interrupt) leaves any previous file at ``path`` as it was."""
    header, arrays = model_parts(model)
    with replacing(path, "model file") as tmp, open(tmp, "wb") as handle:
        members: dict[str, Any] = {"header": np.array(json.dumps(header)), **arrays}
        np.savez(handle, **members)


def model_from_parts(
    header: Any, arrays: Mapping[str, NDArray[Any]], filename: str = "model"
) -> Model:
    """Validate a header (already decoded from JSON) and arrays named as in
    :func:`model_parts`, and build the model; any problem raises :class:`CraspError`.
    The model may hold the float64 arrays themselves (not copies)."""
    try:
        return _parse(header, _Arrays(arrays))
    except _Invalid as err:
        raise CraspError(f"invalid model file: {err}", filename=filename) from None


class _Invalid(Exception):
    pass


class _Source(Protocol):
    """Named arrays seen through the ``NpzFile`` interface (``files``, ``[]``)."""

    files: list[str]

    def __getitem__(self, name: str, /) -> NDArray[Any]: ...


class _Arrays:
    """A mapping of arrays seen through the ``NpzFile`` interface (``files``, ``[]``)."""

    def __init__(self, arrays: Mapping[str, NDArray[Any]]) -> None:
        self.arrays = arrays
        self.files = list(arrays)

    def __getitem__(self, name: str) -> NDArray[Any]:
        return self.arrays[name]


class _Archive:
    """The members of an ``.npz`` zip, seen through the ``NpzFile`` interface. The
    declared sizes and every ``.npy`` header are checked up front (module docstring), so
    reading a member allocates no more than it declared."""

    def __init__(self, archive: zipfile.ZipFile, budget: int) -> None:
        self.archive = archive
        infos = archive.infolist()
        total = sum(info.file_size for info in infos)
        if total > budget:
            largest = max(infos, key=lambda info: info.file_size)
            raise _Invalid(
                f"the archive holds {total:,} bytes uncompressed (member "
                f"{_member_name(largest)!r}: {largest.file_size:,}), above the budget of "
                f"{budget:,} bytes (read_model(max_bytes=...) or {BUDGET_VARIABLE} sets it)"
            )
        self.members = {_member_name(info): info for info in infos}
        self.broken: dict[str, str] = {}
        for name, info in self.members.items():
            if info.file_size > _RATIO_FLOOR and info.file_size > _MAX_RATIO * info.compress_size:
                raise _Invalid(
                    f"member {name!r} would decompress from {info.compress_size:,} to "
                    f"{info.file_size:,} bytes (more than {_MAX_RATIO}:1): not model weights"
                )
            with archive.open(info) as handle:
                try:
                    shape, dtype, offset = _npy_header(handle)
                except ValueError as err:
                    self.broken[name] = str(err)
                    continue
            size = math.prod(shape) * dtype.itemsize
            _expect(
                dtype.hasobject or info.file_size == offset + size,  # np.load refuses objects
                f"member {name!r} holds {info.file_size:,} bytes, but its .npy header "
                f"declares shape {shape} of {dtype} ({offset:,} + {size:,} bytes)",
            )
        self.files = list(self.members)

    def __getitem__(self, name: str) -> NDArray[Any]:
        _expect(
            name not in self.broken,
            f"member {name!r} is not a .npy array ({self.broken.get(name)})",
        )
        with self.archive.open(self.members[name]) as handle:
            return np.lib.format.read_array(handle, allow_pickle=False)


def _member_name(info: zipfile.ZipInfo) -> str:
    """The array name of a zip member, as ``np.load`` gives it (``.npy`` removed)."""
    return info.filename.removesuffix(".npy")


def _npy_header(handle: IO[bytes]) -> tuple[tuple[int, ...], np.dtype[Any], int]:
    """Shape, dtype and data offset from the ``.npy`` header at the start of ``handle``."""
    version = np.lib.format.read_magic(handle)
    readers = {
        (1, 0): np.lib.format.read_array_header_1_0,
        (2, 0): np.lib.format.read_array_header_2_0,
    }
    if version not in readers:
        raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")
    try:
        shape, _, dtype = readers[version](handle)
    except (SyntaxError, TokenError, TypeError, MemoryError) as err:  # a mangled header dict
        raise ValueError(f"malformed .npy header ({type(err).__name__})") from None
    return shape, dtype, handle.tell()


def byte_budget(max_bytes: int | None = None, filename: str = "model") -> int:
    """The most bytes a model may hold uncompressed: ``max_bytes``, else the environment
    variable ``CRASP_MAX_MODEL_BYTES``, else :data:`MAX_MODEL_BYTES`."""
    if max_bytes is not None:
        if type(max_bytes) is not int or max_bytes < 1:
            raise CraspError(
                f"max_bytes must be a positive integer, not {max_bytes!r}", filename=filename
            )
        return max_bytes
    text = os.environ.get(BUDGET_VARIABLE)
    if text is None:
        return MAX_MODEL_BYTES
    value = text.strip()
    if not (value.isascii() and value.isdigit() and len(value) < 30 and int(value) >= 1):
        raise CraspError(
            f"{BUDGET_VARIABLE}={text!r} is not a positive number of bytes", filename=filename
        )
    return int(value)


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise _Invalid(message)


def finite_number(value: Any) -> bool:
    """Whether a header value is a JSON number (not a Boolean) that is a finite float64."""
    if type(value) not in (int, float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer beyond the float range
        return False


def _strings(header: dict[str, Any], key: str) -> list[str]:
    """The header's list ``key``, whose entries must be strings."""
    values = header[key]
    _expect(
        all(isinstance(value, str) for value in values),
        f"header field {key!r} must list strings",
    )
    return list(values)


def _array(data: _Source, name: str, shape: tuple[int, ...]) -> NDArray[Any]:
    array = _member(data, name)
    _expect(array.dtype.kind == "f", f"array {name!r} is not floating point")
    _expect(array.shape == shape, f"array {name!r} has shape {array.shape}, expected {shape}")
    _expect(bool(np.isfinite(array).all()), f"array {name!r} has non-finite values")
    return array.astype(np.float64, copy=False)  # no second copy of a large array


def _matrix(data: _Source, name: str, shape: tuple[int, int]) -> Matrix:
    """A weight matrix stored dense (``name``) or in CSR parts (``name.data`` ...)."""
    if f"{name}.data" not in data.files:
        return _array(data, name, shape)
    values = _member(data, f"{name}.data")
    indices, indptr = _indices(data, name, "indices"), _indices(data, name, "indptr")
    _expect(values.dtype.kind == "f", f"array {name!r} is not floating point")
    rows, cols = shape
    # int64 comparisons only (no differences): nothing can wrap around
    _expect(
        values.ndim == indices.ndim == indptr.ndim == 1
        and len(indptr) == rows + 1
        and len(values) == len(indices) == int(indptr[-1])
        and int(indptr[0]) == 0
        and bool(np.all(indptr[1:] >= indptr[:-1])),
        f"sparse matrix {name!r} is malformed (expected {rows} rows)",
    )
    _expect(
        bool(np.all((indices >= 0) & (indices < cols))),
        f"sparse matrix {name!r} has a column index outside 0..{cols - 1}",
    )
    _expect(bool(np.isfinite(values).all()), f"array {name!r} has non-finite values")
    from scipy import sparse  # imported only where a sparse matrix is read

    csr: SparseMatrix = sparse.csr_array((values.astype(np.float64), indices, indptr), shape=shape)
    return csr


def _indices(data: _Source, name: str, part: str) -> NDArray[Any]:
    """CSR index array ``name.part`` as int64: stored as int32 or int64 (an unsigned or
    narrower type would wrap around in the bounds checks)."""
    member = f"{name}.{part}"
    array = _member(data, member)
    _expect(
        array.dtype.kind in "iu",
        f"sparse matrix {name!r} has non-integer indices ({member!r} is {array.dtype})",
    )
    _expect(
        array.dtype.kind == "i" and array.dtype.itemsize in (4, 8),
        f"array {member!r} has dtype {array.dtype}: sparse index arrays must be int32 or int64",
    )
    return array.astype(np.int64)


def _names(data: _Source, name: str) -> set[str]:
    """The archive members of matrix ``name`` (dense or CSR)."""
    if f"{name}.data" in data.files:
        return {f"{name}.data", f"{name}.indices", f"{name}.indptr"}
    return {name}


def _member(data: _Source, name: str) -> NDArray[Any]:
    _expect(name in data.files, f"missing array {name!r}")
    array = data[name]
    # np.load returns the raw bytes of a member that is not in .npy format
    _expect(isinstance(array, np.ndarray), f"member {name!r} is not a .npy array")
    out: NDArray[Any] = array
    return out


def _read_header(data: _Source) -> Any:
    _expect("header" in data.files, "no header: not a crasp model file")
    raw = _member(data, "header")
    _expect(raw.dtype.kind == "U" and raw.shape == (), "the header is not a JSON string")
    text = str(raw)
    _expect(
        len(text) <= MAX_HEADER_CHARS,
        f"the header has {len(text):,} characters (at most {MAX_HEADER_CHARS:,})",
    )
    try:
        header = json.loads(text)
    except RecursionError:
        where = json_nesting(text, MAX_HEADER_DEPTH)
        raise _Invalid(
            f"the header nests deeper than {MAX_HEADER_DEPTH} levels"
            + (f" (in field {where})" if where else "")
        ) from None
    except ValueError as err:  # JSONDecodeError, or an integer of too many digits
        raise _Invalid(f"the header is not valid JSON ({err})") from None
    try:  # \ud800-style escapes decode to lone surrogates, which no output can print
        json.dumps(header, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, RecursionError):
        raise _Invalid("the header holds a string that is not valid Unicode") from None
    return header


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in ``value`` (counted without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _header(header: Any) -> dict[str, Any]:
    _expect(isinstance(header, dict), "the header is not a JSON object")
    _expect(
        _depth(header) <= MAX_HEADER_DEPTH,
        f"the header nests deeper than {MAX_HEADER_DEPTH} levels",
    )
    _expect(header.get("format") == FORMAT, "not a crasp model file (wrong format name)")
    version = header.get("version")
    _expect(
        type(version) is int and version in READABLE_VERSIONS,
        f"unsupported format version {version!r} (this crasp_compiler reads versions "
        f"{', '.join(map(str, READABLE_VERSIONS))})",
    )
    for key, kind in (
        ("vocab", list),
        ("features", list),
        ("residual", list),
        ("layers", list),
        ("outputs", list),
        ("guarantee", dict),
        ("options", (dict, type(None))),
        ("info", (dict, type(None))),
        ("source", (str, type(None))),
        ("accept", (str, type(None))),
    ):
        _expect(isinstance(header.get(key), kind), f"header field {key!r} is missing or malformed")
    out: dict[str, Any] = header
    return out


def _parse(raw_header: Any, data: _Source, source: bool = True) -> Model:
    header = _header(raw_header)
    vocab = _strings(header, "vocab")
    _expect(len(vocab) >= 1 and vocab[0] == BOS, "the vocabulary must start with BOS")
    _expect(len(set(vocab)) == len(vocab), "the vocabulary has duplicates")
    features = _strings(header, "features")
    for name in features:
        try:
            check_feature(name)
        except ValueError as err:
            raise _Invalid(f"header field 'features': {err}") from None
    residual = _strings(header, "residual")
    d = len(residual)
    w_e = _array(data, "w_e", (len(vocab), d))
    w_p = _matrix(data, "w_p", (d, len(features)))
    if header["version"] == 1:
        _periodic_from_version_1(w_e, w_p, features)
    inputs = header.get("inputs", [])
    _expect(
        isinstance(inputs, list) and all(isinstance(name, str) for name in inputs),
        "header field 'inputs' is malformed",
    )
    _expect(len(set(inputs)) == len(inputs), "the numeric inputs have duplicate names")
    w_x = _array(data, "w_x", (d, len(inputs))) if inputs else None
    layers = []
    for l_index, spec in enumerate(header["layers"]):
        _expect(
            isinstance(spec, dict) and isinstance(spec.get("heads"), list),
            f"layer {l_index + 1} is malformed",
        )
        heads = []
        for h_index, hs in enumerate(spec["heads"]):
            prefix = f"layer{l_index}.head{h_index}"
            where = f"layer {l_index + 1} head {h_index + 1} ({prefix})"
            _expect(isinstance(hs, dict), f"{where} is malformed")
            _expect(
                hs.get("weighting") in WEIGHTINGS,
                f"{where}: unknown weighting {hs.get('weighting')!r}",
            )
            _expect(hs.get("mask") in MASKS, f"{where}: unknown mask {hs.get('mask')!r}")
            _expect(
                hs.get("kind", HeadKind.GENERAL) in HEAD_KINDS,
                f"{where}: unknown kind {hs.get('kind')!r} (one of {', '.join(HEAD_KINDS)})",
            )
            dk, dv = _rows(data, f"{prefix}.w_q"), _rows(data, f"{prefix}.w_v")
            _expect(dk >= 1 and dv >= 1, f"{where}: malformed projection shapes")
            raw_bias, scale = hs.get("bias", {}), hs.get("scale", 1.0)
            _expect(
                isinstance(raw_bias, dict)
                and all(_OFFSET.fullmatch(k) for k in raw_bias)
                and all(type(v) in (int, float) for v in [scale, *raw_bias.values()]),
                f"{where}: malformed bias or scale (numbers, bias offsets integers)",
            )
            _expect(
                all(map(finite_number, [scale, *raw_bias.values()])),
                f"{where}: non-finite bias or scale",
            )
            bias = {int(k): float(v) for k, v in raw_bias.items()}
            _expect(
                all(abs(offset) <= MAX_INTEGER for offset in bias),
                f"{where}: a bias offset is beyond ±{MAX_INTEGER:,}",
            )
            label = hs.get("label", "")
            _expect(isinstance(label, str), f"{where}: the label is not a string")
            heads.append(
                Head(
                    _matrix(data, f"{prefix}.w_q", (dk, d)),
                    _matrix(data, f"{prefix}.w_k", (dk, d)),
                    _matrix(data, f"{prefix}.w_v", (dv, d)),
                    _matrix(data, f"{prefix}.w_o", (d, dv)),
                    float(scale),
                    bias,
                    Weighting(hs["weighting"]),
                    Mask(hs["mask"]),
                    label,
                    HeadKind(hs["kind"]) if "kind" in hs else None,
                )
            )
        mlp = None
        if spec.get("mlp") is not None:
            ms = spec["mlp"]
            prefix = f"layer{l_index}.mlp"
            where = f"layer {l_index + 1} MLP ({prefix})"
            _expect(
                isinstance(ms, dict) and isinstance(ms.get("activations"), list),
                f"{where} is malformed",
            )
            _expect(isinstance(ms.get("labels", []), list), f"{where}: malformed labels")
            if header["version"] >= 4:  # runs [value, count]; the counts agree with w1
                activations = _run_values(ms["activations"], f"{where}: activations")
                label_runs = _run_values(ms.get("labels", []), f"{where}: labels")
            else:
                activations = [(a, 1) for a in ms["activations"]]
                label_runs = [(x, 1) for x in ms.get("labels", [])]
            hidden = sum(count for _, count in activations)
            _expect(all(a in ACTIVATIONS for a, _ in activations), f"{where}: unknown activation")
            _expect(
                sum(count for _, count in label_runs) <= hidden,
                f"{where}: more labels than hidden units",
            )
            groups = ms.get("norm_groups", [])
            _expect(
                isinstance(groups, list)
                and all(
                    isinstance(g, list) and all(type(u) is int and 0 <= u < hidden for u in g)
                    for g in groups
                )
                and len({u for g in groups for u in g}) == sum(len(g) for g in groups),
                f"{where}: norm_groups must be disjoint lists of hidden-unit indices",
            )
            w1 = _matrix(data, f"{prefix}.w1", (hidden, d))  # the file holds the units
            mlp = MLP(
                w1,
                _array(data, f"{prefix}.b1", (hidden,)),
                _matrix(data, f"{prefix}.w2", (d, hidden)),
                _array(data, f"{prefix}.b2", (d,)),
                [Activation(a) for a, count in activations for _ in range(count)],
                [str(x) for x, count in label_runs for _ in range(count)],
                [list(g) for g in groups],
            )
        layers.append(Layer(heads, mlp))
    outputs = []
    for k, spec in enumerate(header["outputs"]):
        _expect(
            isinstance(spec, dict)
            and spec.get("rule") in RULES
            and isinstance(spec.get("name"), str),
            f"output {k} is malformed (a name and one of the rules {', '.join(RULES)})",
        )
        outputs.append(
            Output(spec["name"], _array(data, f"output{k}.weights", (d,)), Rule(spec["rule"]))
        )
    accept = header.get("accept")
    _expect(
        accept is None or any(o.name == accept and o.rule == "bool" for o in outputs),
        f"the acceptance output {accept!r} is not a Boolean output",
    )
    expected = {"header", "w_e"} | _names(data, "w_p")
    expected |= {f"output{k}.weights" for k in range(len(outputs))}
    if inputs:
        expected.add("w_x")
    for l_index, layer in enumerate(layers):
        for h_index in range(len(layer.heads)):
            for key in ("w_q", "w_k", "w_v", "w_o"):
                expected |= _names(data, f"layer{l_index}.head{h_index}.{key}")
        if layer.mlp is not None:
            expected |= {f"layer{l_index}.mlp.b1", f"layer{l_index}.mlp.b2"}
            expected |= _names(data, f"layer{l_index}.mlp.w1") | _names(
                data, f"layer{l_index}.mlp.w2"
            )
    extra = sorted(set(data.files) - expected)
    _expect(not extra, f"unexpected array(s) for parts the header does not declare: {extra}")
    guarantee = _guarantee(header["guarantee"], inputs)
    info = dict(header.get("info") or {})
    _check_definitions(info.get("definitions"))
    model = Model(
        vocab=vocab,
        w_e=w_e,
        features=features,
        w_p=w_p,
        layers=layers,
        outputs=outputs,
        residual=residual,
        occupants=_occupants(header.get("occupants"), d, 2 * len(layers)),
        guarantee=guarantee,
        accept=accept,
        options=dict(header.get("options") or {}),
        source=header.get("source") or "",
        info=info,
        inputs=[str(name) for name in inputs],
        w_x=w_x,
        provenance=(
            _provenance(header.get("provenance"))
            if header["version"] >= 5
            else legacy_provenance(info, dict(header.get("options") or {}))
        ),
    )
    _check_kinds(model)
    _check_origin(model, source)
    return model


def _check_definitions(raw: Any) -> None:
    """The header's ``info.definitions`` (what :func:`~crasp_compiler.show.data.definitions`
    reads): absent, or each definition's name mapped to its residual form, residual
    labels mapped to finite numbers."""
    what = "header field info 'definitions'"
    form = '(labels to finite numbers, such as {"C": 1, "D": -2})'
    _expect(
        raw is None or isinstance(raw, dict),
        f"{what} must map definitions to residual forms {form}",
    )
    for name, terms in (raw or {}).items():
        _expect(
            isinstance(terms, dict) and all(map(finite_number, terms.values())),
            f"{what}: {_clip(name)} is {_clip(terms)}, not a residual form {form}",
        )


def _clip(value: Any) -> str:
    """``value`` as JSON, cut to a readable length."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def provenance_header(provenance: Provenance | None) -> dict[str, Any] | None:
    """The header's ``provenance`` field (None: a model built by hand)."""
    if provenance is None:
        return None
    return {"language": provenance.language, "mode": provenance.mode, "size": provenance.size}


def _provenance(raw: Any) -> Provenance | None:
    """The header's ``provenance``: null, or exactly ``language`` (a name), ``mode`` (a
    name or null) and ``size`` (a positive integer or null)."""
    if raw is None:
        return None
    what = "header field 'provenance'"
    _expect(
        isinstance(raw, dict) and set(raw) == {"language", "mode", "size"},
        f"{what} is not null or an object with exactly 'language', 'mode' and 'size'",
    )
    language, mode, size = raw["language"], raw["mode"], raw["size"]
    _expect(isinstance(language, str) and language != "", f"{what}: 'language' is not a name")
    _expect(mode is None or isinstance(mode, str), f"{what}: 'mode' is not a name or null")
    _expect(
        size is None or (type(size) is int and 1 <= size <= MAX_INTEGER),
        f"{what}: 'size' is not null or an integer from 1 to {MAX_INTEGER:,}",
    )
    return Provenance(language, mode, size)


def occupants_header(occupants: list[list[tuple[int, str]]] | None) -> list[list[Any]] | None:
    """``Model.occupants`` as the header stores it (JSON lists, what a reader gets back)."""
    if occupants is None:
        return None
    return [[[stage, label] for stage, label in dim] for dim in occupants]


def _occupants(raw: Any, width: int, stages: int) -> list[list[tuple[int, str]]] | None:
    """The header's ``occupants``: null, or per dimension ``[stage, label]`` pairs with
    stages strictly increasing within 0 … ``stages``."""
    if raw is None:
        return None
    what = "header field 'occupants'"
    _expect(isinstance(raw, list) and len(raw) == width, f"{what} must list every dimension")
    out = []
    for k, dimension in enumerate(raw):
        _expect(
            isinstance(dimension, list) and len(dimension) > 0,
            f"{what}: dimension {k} is malformed",
        )
        pairs = []
        for pair in dimension:
            _expect(
                isinstance(pair, list)
                and len(pair) == 2
                and type(pair[0]) is int
                and isinstance(pair[1], str),
                f"{what}: dimension {k} has an entry that is not [stage, label]",
            )
            pairs.append((pair[0], pair[1]))
        starts = [start for start, _ in pairs]
        _expect(
            starts == sorted(set(starts)) and starts[0] >= 0 and starts[-1] <= stages,
            f"{what}: dimension {k} has stages out of order or outside 0 … {stages}",
        )
        out.append(pairs)
    return out


def _check_kinds(model: Model) -> None:
    """Every recorded kind holds for the head's weights; heads without one get the kind
    the weights bear out."""
    for l_index, (layer, row) in enumerate(zip(model.layers, derive_kinds(model), strict=True)):
        for h_index, (head, derived) in enumerate(zip(layer.heads, row, strict=True)):
            if head.kind is None:
                head.kind = derived
                continue
            _expect(
                kind_holds(head.kind, derived),
                f"layer {l_index + 1} head {h_index + 1} (layer{l_index}.head{h_index}) "
                f"records kind {str(head.kind)!r}, which its weights do not bear out (they "
                f"give {str(derived)!r})",
            )


class HeaderProblem(ValueError):
    """A header field that contradicts the rest of the model (raised by header checks)."""


# Each source language's header check, by the title it records in info 'language': it
# raises HeaderProblem; its second argument says whether to parse the source too. The
# languages register theirs (:mod:`crasp_compiler.languages`), so the file format depends
# on none of them.
HEADER_CHECKS: dict[str, Callable[[Model, bool], None]] = {}


def _check_origin(model: Model, source: bool) -> None:
    """Options, info and source agree with each other and with the model: a known
    language, then that language's own checks (mode, guarantee, and with ``source`` that
    the source parses)."""
    known = ", ".join(HEADER_CHECKS)
    language = model.provenance.language if model.provenance is not None else None
    for field, named in (("info 'language'", model.info.get("language")), ("provenance", language)):
        _expect(
            named is None or (isinstance(named, str) and named in HEADER_CHECKS),
            f"header field {field} is {named!r}, not one of {known}",
        )
    _expect(
        model.info.get("language", language) == language,
        f"header field info 'language' is {model.info.get('language')!r}, but the model's "
        f"provenance is {language!r}",
    )
    _expect(
        language is not None or "mode" not in model.options,
        "header field options 'mode' names a compile mode, but info 'language' is missing",
    )
    if language is not None:
        try:
            HEADER_CHECKS[language](model, source)
        except HeaderProblem as err:
            raise _Invalid(str(err)) from None


def hidden_units(header: dict[str, Any], mlp: Any) -> int:
    """The number of hidden units a header's MLP entry names (runs from version 4 on, a
    list before), without validating it (:func:`model_from_parts` does): 0 where the
    entry is malformed."""
    activations = mlp.get("activations") if isinstance(mlp, dict) else None
    if not isinstance(activations, list):
        return 0
    if header.get("version", VERSION) >= 4:
        return sum(
            run[1]
            for run in activations
            if isinstance(run, list) and len(run) == 2 and type(run[1]) is int
        )
    return len(activations)


def _runs(values: list[str]) -> list[list[Any]]:
    """``values`` as runs ``[value, count]`` of equal neighbours."""
    runs: list[list[Any]] = []
    for value in values:
        if runs and runs[-1][0] == value:
            runs[-1][1] += 1
        else:
            runs.append([value, 1])
    return runs


def _run_values(raw: Any, where: str) -> list[tuple[str, int]]:
    """Runs ``[value, count]`` read from a header: strings, counts from 1 up to
    :data:`MAX_INTEGER` in all."""
    _expect(
        isinstance(raw, list)
        and all(
            isinstance(run, list)
            and len(run) == 2
            and isinstance(run[0], str)
            and type(run[1]) is int
            and run[1] >= 1
            for run in raw
        ),
        f"{where} must be runs [value, count >= 1]",
    )
    _expect(sum(run[1] for run in raw) <= MAX_INTEGER, f"{where}: too many units")
    return [(run[0], run[1]) for run in raw]


def _periodic_from_version_1(w_e: NDArray[Any], w_p: Matrix, features: list[str]) -> None:
    """Version 1 had ``periodic:m:r`` = 0 at BOS; version 2 has its value at position −1
    (1 for r = m − 1). Moving those columns' contribution off the BOS embedding row keeps
    every residual the same."""
    for column, name in enumerate(features):
        parts = name.split(":")
        if parts[0] == "periodic" and int(parts[2]) == int(parts[1]) - 1:
            w_e[0] -= dense(w_p[:, [column]])[:, 0]


def guarantee_header(guarantee: Guarantee) -> dict[str, Any]:
    """The guarantee as the header stores it (``dtypes``/``input_bounds``/``destinations``/
    ``errors``/``capacities`` only when set: files written before those existed have none)."""
    out: dict[str, Any] = {"max_len": guarantee.max_len, "text": guarantee.text}
    if guarantee.dtypes:
        out["dtypes"] = dict(guarantee.dtypes)
    if guarantee.input_bounds:
        out["input_bounds"] = dict(guarantee.input_bounds)
    if guarantee.destinations:
        out["destinations"] = list(guarantee.destinations)
    if guarantee.errors:
        out["errors"] = dict(guarantee.errors)
    if guarantee.capacities:
        out["capacities"] = dict(guarantee.capacities)
    return out


def _guarantee(g: dict[str, Any], inputs: list[str]) -> Guarantee:
    """The header's guarantee, validated: lengths are integers >= 0, float limits name
    float types and do not exceed the real-arithmetic limit, bounds and send
    destinations name numeric inputs, error bounds are finite numbers >= 0 for float
    types that are covered."""
    max_len = g.get("max_len")
    _expect(max_len is None or (type(max_len) is int and max_len >= 0), "malformed guarantee")
    _expect(isinstance(g.get("text", ""), str), "malformed guarantee text")
    dtypes = g.get("dtypes", {})
    _expect(
        isinstance(dtypes, dict)
        and all(
            key in FLOAT_DTYPES and type(limit) is int and limit >= -1
            for key, limit in dtypes.items()
        ),
        "malformed guarantee: 'dtypes' must map float64/float32 to lengths >= -1",
    )
    _expect(
        max_len is None or all(limit <= max_len for limit in dtypes.values()),
        "inconsistent guarantee: a float limit exceeds the real-arithmetic limit",
    )
    bounds = g.get("input_bounds", {})
    _expect(
        isinstance(bounds, dict)
        and all(
            key in inputs and finite_number(bound) and bound >= 0 for key, bound in bounds.items()
        ),
        "malformed guarantee: 'input_bounds' must map numeric inputs to bounds >= 0",
    )
    destinations = g.get("destinations", [])
    _expect(
        isinstance(destinations, list)
        and all(isinstance(name, str) and name in inputs for name in destinations)
        and len(set(destinations)) == len(destinations),
        "malformed guarantee: 'destinations' must list distinct numeric inputs",
    )
    capacities = g.get("capacities", {})
    _expect(
        isinstance(capacities, dict)
        and all(
            key in destinations and type(c) is int and 2 <= c <= MAX_SEND_CAPACITY
            for key, c in capacities.items()
        ),
        "malformed guarantee: 'capacities' must map send destinations to integers "
        f"2..{MAX_SEND_CAPACITY}",
    )
    errors = g.get("errors", {})
    _expect(
        isinstance(errors, dict)
        and all(
            key in FLOAT_DTYPES and finite_number(bound) and bound >= 0
            for key, bound in errors.items()
        ),
        "malformed guarantee: 'errors' must map float64/float32 to finite bounds >= 0",
    )
    _expect(
        all(dtypes.get(key, 0) >= 0 for key in errors),
        "inconsistent guarantee: 'errors' bounds a float type that 'dtypes' does not cover",
    )
    return Guarantee(
        max_len,
        str(g.get("text", "")),
        {key: int(limit) for key, limit in dtypes.items()},
        {key: float(bound) for key, bound in bounds.items()},
        list(destinations),
        {key: float(bound) for key, bound in errors.items()},
        {key: int(c) for key, c in capacities.items()},
    )


def _rows(data: _Source, name: str) -> int:
    if f"{name}.indptr" in data.files:
        indptr = _member(data, f"{name}.indptr")
        _expect(indptr.ndim == 1 and len(indptr) >= 1, f"sparse matrix {name!r} is malformed")
        return len(indptr) - 1
    array = _member(data, name)
    _expect(array.ndim == 2, f"array {name!r} is not a matrix")
    return int(array.shape[0])


def read_model(
    path: str | Path, max_bytes: int | None = None, *, check_source: bool = True
) -> Model:
    """Read and validate a model file; any problem raises :class:`CraspError`.
    ``max_bytes``: the most the archive may hold uncompressed (see :func:`byte_budget`);
    ``check_source=False``: every check but parsing the source the header records (a
    runtime reads only the weights, and parsing imports the language's parser)."""
    budget = byte_budget(max_bytes, str(path))
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
        if magic != b"PK\x03\x04":
            raise _Invalid("not an .npz archive (wrong file type?)")
        with zipfile.ZipFile(path) as archive:
            data = _Archive(archive, budget)
            return _parse(_read_header(data), data, check_source)
    except _Invalid as err:
        raise CraspError(f"invalid model file: {err}", filename=str(path)) from None
    except (
        OSError,
        ValueError,
        zipfile.BadZipFile,
        zlib.error,
        EOFError,
        KeyError,
        NotImplementedError,  # a compression method zipfile does not support
        RuntimeError,  # an encrypted member
    ) as err:
        raise CraspError(f"cannot read model file: {err}", filename=str(path)) from None


__getattr__ = deprecated(__name__, {"load_model": "read_model"})
