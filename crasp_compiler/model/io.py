"""Model files: ``.npz`` with a JSON header, loaded with ``allow_pickle=False`` and validated.

The archive holds ``header`` (a JSON string) and the weight arrays, named ``w_e``, ``w_p``,
``layer{L}.head{H}.{w_q,w_k,w_v,w_o}``, ``layer{L}.mlp.{w1,b1,w2,b2}`` and
``output{K}.weights``. A sparse matrix ``M`` (see :data:`~crasp_compiler.model.model.DENSE_LIMIT`)
is stored in CSR form as ``M.data`` (float64), ``M.indices`` and ``M.indptr`` (int64) in
place of ``M``; its shape follows from the header. The header holds everything else: format name and version,
vocabulary (``vocab[0]`` is BOS), positional features, residual labels, per-head
settings, MLP activations and layer-norm groups, outputs and decision rules, guarantee, compile options,
source text and compile information.
"""

from __future__ import annotations

import json
import math
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from scipy import sparse

from crasp_compiler.errors import CraspError
from crasp_compiler.model.features import check_feature
from crasp_compiler.model.model import (
    ACTIVATIONS,
    BOS,
    MASKS,
    MLP,
    RULES,
    WEIGHTINGS,
    Guarantee,
    Head,
    Layer,
    Matrix,
    Model,
    Output,
    dense,
    is_sparse,
)

FORMAT = "crasp-model"
VERSION = 1


def model_parts(
    model: Model, dense_only: bool = False
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The JSON header and the named arrays that describe ``model``: float64, plus the
    int64 index arrays of sparse matrices (stored dense when ``dense_only``)."""
    arrays: dict[str, Matrix] = {"w_e": model.w_e, "w_p": model.w_p}
    if model.inputs:
        arrays["w_x"] = model.numeric_weights
    layers = []
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
                }
            )
        mlp = None
        if layer.mlp is not None:
            for key in ("w1", "b1", "w2", "b2"):
                arrays[f"layer{l_index}.mlp.{key}"] = getattr(layer.mlp, key)
            mlp = {
                "activations": layer.mlp.activations,
                "labels": layer.mlp.labels,
                "norm_groups": layer.mlp.norm_groups,
            }
        layers.append({"heads": heads, "mlp": mlp})
    for k, out in enumerate(model.outputs):
        arrays[f"output{k}.weights"] = out.weights
    header = {
        "format": FORMAT,
        "version": VERSION,
        "vocab": model.vocab,
        "features": model.features,
        "inputs": model.inputs,
        "residual": model.residual,
        "layers": layers,
        "outputs": [{"name": o.name, "rule": o.rule} for o in model.outputs],
        "accept": model.accept,
        "guarantee": {"max_len": model.guarantee.max_len, "text": model.guarantee.text},
        "options": model.options,
        "source": model.source,
        "info": model.info,
    }
    out: dict[str, np.ndarray] = {}
    for name, array in arrays.items():
        if is_sparse(array) and not dense_only:
            out[f"{name}.data"] = np.asarray(array.data, dtype=np.float64)
            out[f"{name}.indices"] = np.asarray(array.indices, dtype=np.int64)
            out[f"{name}.indptr"] = np.asarray(array.indptr, dtype=np.int64)
        else:
            out[name] = np.asarray(dense(array), dtype=np.float64)
    return header, out


def save_model(model: Model, path: str | Path) -> None:
    """Write ``model`` to ``path`` (an ``.npz`` file)."""
    header, arrays = model_parts(model)
    try:
        with open(path, "wb") as handle:
            np.savez(handle, header=np.array(json.dumps(header)), **arrays)
    except OSError as err:
        raise CraspError(f"cannot write model file: {err}", filename=str(path)) from None


def model_from_parts(
    header: Any, arrays: Mapping[str, np.ndarray], filename: str = "model"
) -> Model:
    """Validate a header (already decoded from JSON) and arrays named as in
    :func:`model_parts`, and build the model; any problem raises :class:`CraspError`."""
    try:
        return _parse(header, _Arrays(arrays))
    except _Invalid as err:
        raise CraspError(f"invalid model file: {err}", filename=filename) from None


class _Invalid(Exception):
    pass


class _Arrays:
    """A mapping of arrays seen through the ``NpzFile`` interface (``files``, ``[]``)."""

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.arrays = arrays
        self.files = list(arrays)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise _Invalid(message)


def _array(data, name: str, shape: tuple[int, ...]) -> np.ndarray:
    array = _member(data, name)
    _expect(array.dtype.kind == "f", f"array {name!r} is not floating point")
    _expect(array.shape == shape, f"array {name!r} has shape {array.shape}, expected {shape}")
    _expect(bool(np.isfinite(array).all()), f"array {name!r} has non-finite values")
    return array.astype(np.float64)


def _matrix(data, name: str, shape: tuple[int, int]) -> Matrix:
    """A weight matrix stored dense (``name``) or in CSR parts (``name.data`` ...)."""
    if f"{name}.data" not in data.files:
        return _array(data, name, shape)
    values = _member(data, f"{name}.data")
    indices, indptr = _member(data, f"{name}.indices"), _member(data, f"{name}.indptr")
    _expect(values.dtype.kind == "f", f"array {name!r} is not floating point")
    _expect(
        indices.dtype.kind in "iu" and indptr.dtype.kind in "iu",
        f"sparse matrix {name!r} has non-integer indices",
    )
    rows, cols = shape
    _expect(
        values.ndim == indices.ndim == indptr.ndim == 1
        and len(indptr) == rows + 1
        and len(values) == len(indices) == int(indptr[-1])
        and int(indptr[0]) == 0
        and bool(np.all(np.diff(indptr) >= 0)),
        f"sparse matrix {name!r} is malformed (expected {rows} rows)",
    )
    _expect(
        bool(np.all((indices >= 0) & (indices < cols))),
        f"sparse matrix {name!r} has a column index outside 0..{cols - 1}",
    )
    _expect(bool(np.isfinite(values).all()), f"array {name!r} has non-finite values")
    return sparse.csr_array(
        (values.astype(np.float64), indices.astype(np.int64), indptr.astype(np.int64)),
        shape=shape,
    )


def _names(data, name: str) -> set[str]:
    """The archive members of matrix ``name`` (dense or CSR)."""
    if f"{name}.data" in data.files:
        return {f"{name}.data", f"{name}.indices", f"{name}.indptr"}
    return {name}


def _member(data, name: str) -> np.ndarray:
    _expect(name in data.files, f"missing array {name!r}")
    array = data[name]
    # np.load returns the raw bytes of a member that is not in .npy format
    _expect(isinstance(array, np.ndarray), f"member {name!r} is not a .npy array")
    return array


def _read_header(data) -> Any:
    _expect("header" in data.files, "no header: not a crasp model file")
    raw = _member(data, "header")
    _expect(raw.dtype.kind == "U" and raw.shape == (), "the header is not a JSON string")
    try:
        return json.loads(str(raw))
    except json.JSONDecodeError as err:
        raise _Invalid(f"the header is not valid JSON ({err})") from None


def _header(header: Any) -> dict[str, Any]:
    _expect(isinstance(header, dict), "the header is not a JSON object")
    _expect(header.get("format") == FORMAT, "not a crasp model file (wrong format name)")
    version = header.get("version")
    _expect(
        version == VERSION,
        f"unsupported format version {version!r} (this crasp_compiler reads version {VERSION})",
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
    return header


def _parse(raw_header: Any, data) -> Model:
    header = _header(raw_header)
    vocab = [str(v) for v in header["vocab"]]
    _expect(len(vocab) >= 1 and vocab[0] == BOS, "the vocabulary must start with BOS")
    _expect(len(set(vocab)) == len(vocab), "the vocabulary has duplicates")
    features = [str(f) for f in header["features"]]
    for name in features:
        try:
            check_feature(name)
        except ValueError as err:
            raise _Invalid(str(err)) from None
    d = len(header["residual"])
    w_e = _array(data, "w_e", (len(vocab), d))
    w_p = _matrix(data, "w_p", (d, len(features)))
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
            f"layer {l_index} is malformed",
        )
        heads = []
        for h_index, hs in enumerate(spec["heads"]):
            prefix = f"layer{l_index}.head{h_index}"
            _expect(isinstance(hs, dict), f"{prefix} is malformed")
            _expect(
                hs.get("weighting") in WEIGHTINGS,
                f"{prefix}: unknown weighting {hs.get('weighting')!r}",
            )
            _expect(hs.get("mask") in MASKS, f"{prefix}: unknown mask {hs.get('mask')!r}")
            dk, dv = _rows(data, f"{prefix}.w_q"), _rows(data, f"{prefix}.w_v")
            _expect(dk >= 1 and dv >= 1, f"{prefix}: malformed projection shapes")
            try:
                bias = {int(k): float(v) for k, v in dict(hs.get("bias", {})).items()}
                scale = float(hs.get("scale", 1.0))
            except (TypeError, ValueError):
                raise _Invalid(f"{prefix}: malformed bias or scale") from None
            _expect(
                all(map(math.isfinite, [scale, *bias.values()])),
                f"{prefix}: non-finite bias or scale",
            )
            heads.append(
                Head(
                    _matrix(data, f"{prefix}.w_q", (dk, d)),
                    _matrix(data, f"{prefix}.w_k", (dk, d)),
                    _matrix(data, f"{prefix}.w_v", (dv, d)),
                    _matrix(data, f"{prefix}.w_o", (d, dv)),
                    scale,
                    bias,
                    hs["weighting"],
                    hs["mask"],
                    str(hs.get("label", "")),
                )
            )
        mlp = None
        if spec.get("mlp") is not None:
            ms = spec["mlp"]
            prefix = f"layer{l_index}.mlp"
            _expect(
                isinstance(ms, dict) and isinstance(ms.get("activations"), list),
                f"{prefix} is malformed",
            )
            _expect(isinstance(ms.get("labels", []), list), f"{prefix}: malformed labels")
            hidden = len(ms["activations"])
            _expect(
                all(a in ACTIVATIONS for a in ms["activations"]), f"{prefix}: unknown activation"
            )
            labels = [str(x) for x in ms.get("labels", [])]
            groups = ms.get("norm_groups", [])
            _expect(
                isinstance(groups, list)
                and all(
                    isinstance(g, list) and all(type(u) is int and 0 <= u < hidden for u in g)
                    for g in groups
                )
                and len({u for g in groups for u in g}) == sum(len(g) for g in groups),
                f"{prefix}: norm_groups must be disjoint lists of hidden-unit indices",
            )
            mlp = MLP(
                _matrix(data, f"{prefix}.w1", (hidden, d)),
                _array(data, f"{prefix}.b1", (hidden,)),
                _matrix(data, f"{prefix}.w2", (d, hidden)),
                _array(data, f"{prefix}.b2", (d,)),
                list(ms["activations"]),
                labels,
                [list(g) for g in groups],
            )
        layers.append(Layer(heads, mlp))
    outputs = []
    for k, spec in enumerate(header["outputs"]):
        _expect(isinstance(spec, dict) and spec.get("rule") in RULES, f"output {k} is malformed")
        outputs.append(
            Output(str(spec.get("name")), _array(data, f"output{k}.weights", (d,)), spec["rule"])
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
    g = header["guarantee"]
    max_len = g.get("max_len")
    _expect(max_len is None or (type(max_len) is int and max_len >= 0), "malformed guarantee")
    return Model(
        vocab=vocab,
        w_e=w_e,
        features=features,
        w_p=w_p,
        layers=layers,
        outputs=outputs,
        residual=[str(r) for r in header["residual"]],
        guarantee=Guarantee(max_len, str(g.get("text", ""))),
        accept=accept,
        options=dict(header.get("options") or {}),
        source=header.get("source") or "",
        info=dict(header.get("info") or {}),
        inputs=[str(name) for name in inputs],
        w_x=w_x,
    )


def _rows(data, name: str) -> int:
    if f"{name}.indptr" in data.files:
        indptr = _member(data, f"{name}.indptr")
        _expect(indptr.ndim == 1 and len(indptr) >= 1, f"sparse matrix {name!r} is malformed")
        return len(indptr) - 1
    array = _member(data, name)
    _expect(array.ndim == 2, f"array {name!r} is not a matrix")
    return int(array.shape[0])


def load_model(path: str | Path) -> Model:
    """Read and validate a model file; any problem raises :class:`CraspError`."""
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
        if magic != b"PK\x03\x04":
            raise _Invalid("not an .npz archive (wrong file type?)")
        with np.load(path, allow_pickle=False) as data:
            return _parse(_read_header(data), data)
    except _Invalid as err:
        raise CraspError(f"invalid model file: {err}", filename=str(path)) from None
    except (OSError, ValueError, zipfile.BadZipFile, zlib.error, EOFError, KeyError) as err:
        raise CraspError(f"cannot read model file: {err}", filename=str(path)) from None
