"""Export a model as torch weights plus a JSON config, and load it back.

An export is a directory::

    OUT/config.json         {"format": "crasp-torch-export", "version": 1,
                             "weights": "model.safetensors" | "model.pt",
                             "model": <the .npz header: vocabulary, layers, outputs, ...>}
    OUT/model.safetensors   or OUT/model.pt: the state dict of
                            :class:`crasp_compiler.runtime.torch_module.TorchTransformer`

The weights are tensors only (``model.pt`` is read with ``torch.load(weights_only=True)``),
so loading never runs pickled code; they must be dense and floating point (integer
weights would be a different model). Names follow the torch module: ``embed.w_e``,
``pos.w_p``, ``blocks.{L}.attn.heads.{H}.w_q`` …, ``blocks.{L}.mlp.w1`` …, and
``readout.weight`` (one row per output). Exports are written as
:mod:`crasp_compiler.export.directory` describes: all or nothing, replacing a previous
export completely.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from crasp_compiler.errors import CraspError
from crasp_compiler.export.directory import CONFIG_FILE, write_export
from crasp_compiler.model.io import MAX_HEADER_CHARS, byte_budget, model_from_parts, model_parts
from crasp_compiler.model.model import Model, require_dense

FORMAT = "crasp-torch-export"
VERSION = 1
WEIGHT_FILES = {"safetensors": "model.safetensors", "torch": "model.pt"}

_HEAD = re.compile(r"^layer(\d+)\.head(\d+)\.(w_q|w_k|w_v|w_o)$")
_MLP = re.compile(r"^layer(\d+)\.mlp\.(w1|b1|w2|b2)$")
_MODULE_HEAD = re.compile(r"^blocks\.(\d+)\.attn\.heads\.(\d+)\.(w_q|w_k|w_v|w_o)$")
_MODULE_MLP = re.compile(r"^blocks\.(\d+)\.mlp\.(w1|b1|w2|b2)$")


def state_dict_arrays(model: Model) -> dict[str, np.ndarray]:
    """The model's arrays under the torch module's parameter names."""
    require_dense(model, "a torch export")
    _, arrays = model_parts(model, dense_only=True)
    out: dict[str, np.ndarray] = {}
    for name, array in arrays.items():
        if name in ("w_e", "w_p", "w_x"):
            out[{"w_e": "embed.w_e", "w_p": "pos.w_p", "w_x": "numeric.w_x"}[name]] = array
        elif match := _HEAD.match(name):
            out[f"blocks.{match[1]}.attn.heads.{match[2]}.{match[3]}"] = array
        elif match := _MLP.match(name):
            out[f"blocks.{match[1]}.mlp.{match[2]}"] = array
    out["readout.weight"] = (
        np.stack([o.weights for o in model.outputs])
        if model.outputs
        else np.zeros((0, model.width))
    )
    return out


def _file_arrays(state: dict[str, np.ndarray], outputs: int) -> dict[str, np.ndarray]:
    """Inverse of :func:`state_dict_arrays`: back to the ``.npz`` array names."""
    arrays: dict[str, np.ndarray] = {}
    for name, array in state.items():
        if name in ("embed.w_e", "pos.w_p", "numeric.w_x"):
            arrays[name.split(".")[1]] = array
        elif match := _MODULE_HEAD.match(name):
            arrays[f"layer{match[1]}.head{match[2]}.{match[3]}"] = array
        elif match := _MODULE_MLP.match(name):
            arrays[f"layer{match[1]}.mlp.{match[2]}"] = array
        elif name == "readout.weight":
            if array.ndim != 2 or array.shape[0] != outputs:
                raise CraspError(
                    f"invalid export: readout.weight has shape {array.shape}, "
                    f"expected {outputs} rows"
                )
            for k in range(outputs):
                arrays[f"output{k}.weights"] = array[k]
        else:
            raise CraspError(f"invalid export: unexpected tensor {name!r}")
    return arrays


def export_model(model: Model, out_dir: str | Path, fmt: str = "safetensors") -> Path:
    """Write ``model`` to the directory ``out_dir`` in format ``safetensors`` or ``torch``."""
    import torch

    if fmt not in WEIGHT_FILES:
        raise CraspError(f"unknown export format {fmt!r} (choose from {', '.join(WEIGHT_FILES)})")
    header, _ = model_parts(model)
    tensors = {
        k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state_dict_arrays(model).items()
    }
    config = {"format": FORMAT, "version": VERSION, "weights": WEIGHT_FILES[fmt], "model": header}

    def write(directory: Path) -> None:
        weights = directory / WEIGHT_FILES[fmt]
        if fmt == "safetensors":
            from safetensors.torch import save_file

            save_file(tensors, str(weights), metadata={"format": FORMAT})
        else:
            torch.save(tensors, weights)
        (directory / CONFIG_FILE).write_text(json.dumps(config, indent=1))

    return write_export(out_dir, write)


def load_export(path: str | Path) -> Model:
    """Read an export directory (or its ``config.json``) back into a validated model."""
    import torch

    path = Path(path)
    directory = path.parent if path.name == CONFIG_FILE else path
    config_path = directory / CONFIG_FILE
    budget = byte_budget(filename=str(directory))
    try:
        size = config_path.stat().st_size
        if size > MAX_HEADER_CHARS:
            raise ValueError(f"{size:,} bytes (at most {MAX_HEADER_CHARS:,})")
        config = json.loads(config_path.read_text())
    except (OSError, ValueError, RecursionError) as err:  # ValueError: bad JSON or UTF-8
        raise CraspError(f"cannot read export config: {err}", filename=str(config_path)) from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise CraspError("not a crasp torch export (wrong format name)", filename=str(config_path))
    if config.get("version") != VERSION:
        raise CraspError(
            f"unsupported export version {config.get('version')!r}", filename=str(config_path)
        )
    name = config.get("weights")
    if not isinstance(name, str) or name not in WEIGHT_FILES.values():
        raise CraspError(
            f"invalid export: unknown weights file {name!r}", filename=str(config_path)
        )
    weights = directory / name
    try:
        size = weights.stat().st_size
        if size > budget:
            raise ValueError(f"{size:,} bytes, above the budget of {budget:,} (see load_model)")
        if name == WEIGHT_FILES["safetensors"]:
            from safetensors.torch import load_file

            tensors = load_file(str(weights))
        else:
            tensors = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as err:  # corrupt files raise many kinds of errors
        raise CraspError(f"cannot read export weights: {err}", filename=str(weights)) from None
    if not isinstance(tensors, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in tensors.items()
    ):
        raise CraspError("invalid export: weights are not a dict of tensors", filename=str(weights))
    for key, tensor in tensors.items():
        if tensor.layout != torch.strided:
            raise CraspError(
                f"invalid export: tensor {key!r} is sparse ({tensor.layout}); weights are dense",
                filename=str(weights),
            )
        if not tensor.dtype.is_floating_point:
            raise CraspError(
                f"invalid export: tensor {key!r} has dtype {tensor.dtype}, not floating point",
                filename=str(weights),
            )
    header = config.get("model")
    if not isinstance(header, dict):
        raise CraspError(
            "invalid export: the config has no model header", filename=str(config_path)
        )
    outputs = header.get("outputs")
    count = len(outputs) if isinstance(outputs, list) else 0
    state = {k: v.detach().to(torch.float64).numpy() for k, v in tensors.items()}
    try:
        arrays = _file_arrays(state, count)
    except CraspError as err:
        err.filename = str(weights)
        raise
    return model_from_parts(header, arrays, filename=str(directory))
