"""Hook points of the torch module, under TransformerLens names.

Every observation point of the forward pass (:mod:`crasp_compiler.runtime.forward`) is
an identity :class:`HookPoint` submodule of :class:`~crasp_compiler.runtime.torch_module.
TorchTransformer` at the module path of the same name, so ``register_forward_hook``,
nnsight and ``module.get_submodule(name)`` reach it::

    hook_embed, hook_pos_embed, hook_numeric_embed, hook_resid_final, hook_outputs
    blocks.{l}.hook_resid_pre / hook_attn_out / hook_resid_mid / hook_mlp_out / hook_resid_post
    blocks.{l}.attn.heads.{h}.hook_q / hook_k / hook_v / hook_pattern / hook_z / hook_result
    blocks.{l}.mlp.hook_pre / hook_normalized / hook_post

Heads are addressed one by one (``attn.heads.{h}``), not along a head axis, since their
sizes differ; the cache stacks them on request (``cache["pattern", l]``, as in
TransformerLens). The pass goes through the points only while one of them is active (a hook
on it, its ``forward`` replaced as nnsight does, a global module hook) or an observer
is given; otherwise it runs exactly as without hook points. A point fires when the pass
computes it: ``hook_q`` / ``hook_k`` not on
the prefix-sums path of uniform heads, ``hook_pattern`` only for the heads whose pattern
is asked for (a hook on its point, ``run_with_cache`` keeping it, or
``module.patterns = True``, which nnsight needs to read ``hook_pattern``); those heads then take the general path, which
materialises their pattern; the others keep their fast paths. A forward hook that
returns a tensor replaces the value in the pass (patching).

:class:`ActivationCache` maps names to tensors and labels the last axis of each entry:
residual dimensions with the model's residual names, head entries with the source
expression the head computes, MLP units with theirs, outputs with their names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from crasp_compiler.model.model import labels_at

if TYPE_CHECKING:
    from crasp_compiler.runtime.torch_module import TorchTransformer

Tensor = torch.Tensor
HookFn = Callable[[Tensor, "HookPoint"], Tensor | None]


class HookPoint(nn.Module):
    """The identity at one named point of the pass; ``name`` is its full module path."""

    def __init__(self) -> None:
        super().__init__()
        self.name = ""

    def forward(self, x: Tensor) -> Tensor:
        return x

    def hooked(self) -> bool:
        """Whether a forward (pre-)hook is registered on this point."""
        return bool(self._forward_hooks or self._forward_pre_hooks)

    def active(self) -> bool:
        """Whether calling this point may do anything: a hook on it, or its ``forward``
        replaced on the instance (as nnsight does)."""
        return self.hooked() or "forward" in self.__dict__

    def add_hook(self, fn: HookFn) -> torch.utils.hooks.RemovableHandle:
        """TransformerLens style: ``fn(activation, hook)`` returns a replacement or None."""

        def call(module: nn.Module, inputs: Any, output: Tensor) -> Tensor | None:
            return fn(output, self)

        return self.register_forward_hook(call)


def point_names(module: nn.Module) -> list[str]:
    """Every hook point of ``module``, by module path (in registration order)."""
    return [name for name, sub in module.named_modules() if isinstance(sub, HookPoint)]


def name_points(module: nn.Module) -> dict[str, HookPoint]:
    """Give every hook point of ``module`` its path as ``name``; the points by name."""
    points = {}
    for name, sub in module.named_modules():
        if isinstance(sub, HookPoint):
            sub.name = name
            points[name] = sub
    return points


# TransformerLens' short names (``cache["pattern", 0]``) and where they sit in a block.
_BLOCK_POINTS = ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post")
_HEAD_POINTS = ("q", "k", "v", "pattern", "z", "result")
_MLP_POINTS = ("pre", "normalized", "post")


def act_name(short: str, layer: int | None = None) -> str:
    """The point name of a TransformerLens short name: ``("pattern", 0)`` →
    ``blocks.0.attn.hook_pattern``, ``("resid_post", 2)`` → ``blocks.2.hook_resid_post``,
    ``"embed"`` → ``hook_embed``; a full name is returned as it is."""
    if layer is None:
        return short if "." in short or short.startswith("hook_") else f"hook_{short}"
    if short in _BLOCK_POINTS:
        return f"blocks.{layer}.hook_{short}"
    if short in _HEAD_POINTS:
        return f"blocks.{layer}.attn.hook_{short}"
    if short in _MLP_POINTS:
        return f"blocks.{layer}.mlp.hook_{short}"
    raise KeyError(f"unknown activation name {short!r}")


class ActivationCache(Mapping[str, Tensor]):
    """Named activations of one pass, with :meth:`labels` for their last axis.

    Besides the cached names, ``cache["pattern", l]`` (TransformerLens' short names, see
    :func:`act_name`) and the stacked ``blocks.{l}.attn.hook_pattern`` (batch, head,
    query, key) read every head of a layer at once, as do ``hook_q`` … ``hook_result``
    (batch, position, head, width) where the layer's heads have one width."""

    def __init__(self, values: dict[str, Tensor], module: TorchTransformer) -> None:
        self._values = values
        self._module = module

    def __getitem__(self, key: str | tuple[str, int]) -> Tensor:
        name = act_name(*key) if isinstance(key, tuple) else act_name(key)
        if name in self._values:
            return self._values[name]
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == "blocks" and parts[2] == "attn":
            return self._stacked(int(parts[1]), parts[3])
        raise KeyError(name)

    def _stacked(self, layer: int, point: str) -> Tensor:
        heads = len(self._module.head_rows()[layer])
        names = [f"blocks.{layer}.attn.heads.{h}.{point}" for h in range(heads)]
        missing = [n for n in names if n not in self._values]
        if not heads or missing:
            raise KeyError(f"blocks.{layer}.attn.{point}: not cached for {missing or 'no heads'}")
        parts = [self._values[n] for n in names]
        if point == "hook_pattern":
            return torch.stack(parts, dim=1)
        widths = sorted({int(p.shape[-1]) for p in parts})
        if len(widths) > 1:
            raise KeyError(
                f"blocks.{layer}.attn.{point}: the heads have widths {widths}; "
                f"read them one by one ({names[0]}, …)"
            )
        return torch.stack(parts, dim=2)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def labels(self, key: str | tuple[str, int]) -> list[str]:
        """One label per entry of the last axis of ``self[key]`` (module docstring)."""
        name = act_name(*key) if isinstance(key, tuple) else act_name(key)
        return point_labels(self._module, name, int(self[name].shape[-1]))


RESIDUAL_POINTS = frozenset(
    {
        "hook_embed",
        "hook_pos_embed",
        "hook_numeric_embed",
        "hook_resid_pre",
        "hook_attn_out",
        "hook_resid_mid",
        "hook_mlp_out",
        "hook_resid_post",
        "hook_result",
        "hook_resid_final",
    }
)


def _stage(parts: list[str]) -> int:
    """The residual stage (:attr:`~crasp_compiler.model.model.Model.stages`) a residual
    point's values are labelled by: what the residual holds after the sublayer that
    writes them (−1: the last stage)."""
    point = parts[-1]
    if point == "hook_resid_final":
        return -1
    if parts[0] != "blocks":  # the embeddings
        return 0
    layer = int(parts[1])
    if point == "hook_resid_pre":
        return 2 * layer
    if point in ("hook_attn_out", "hook_resid_mid", "hook_result"):
        return 2 * layer + 1
    return 2 * layer + 2  # hook_mlp_out, hook_resid_post


def point_labels(module: TorchTransformer, name: str, size: int) -> list[str]:
    """Labels of the last axis (``size`` entries) of point ``name`` of ``module``."""
    parts = name.split(".")
    point = parts[-1]
    if point == "hook_outputs":
        return list(module.output_names)
    if point in RESIDUAL_POINTS:
        return labels_at(module.residual, module.occupants, _stage(parts), 2 * len(module.layers()))
    if len(parts) >= 3 and parts[0] == "blocks" and parts[2] == "mlp":
        mlp = module.layers()[int(parts[1])].mlp
        assert mlp is not None
        return list(mlp.labels)
    if len(parts) == 4 and parts[2] == "attn":  # a stacked layer
        if point == "hook_pattern":
            return [f"key {s}" for s in range(size)]
        return [f"component {i}" for i in range(size)]
    if len(parts) >= 5 and parts[2] == "attn" and parts[3] == "heads":
        head = module.head_rows()[int(parts[1])][int(parts[4])]
        if point == "hook_pattern":
            return [f"{head.label}: key {s}" for s in range(size)]
        return [head.label if size == 1 else f"{head.label} [{i}]" for i in range(size)]
    raise KeyError(f"no labels for {name!r}")
