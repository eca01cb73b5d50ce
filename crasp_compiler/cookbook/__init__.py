"""The cookbook: every construction written once, over named residual variables.

``ffn`` (feed-forward, Cookbook §4), ``attention`` (§5) and ``layernorm`` (§6) hold the
constructions; ``blocks`` the types they return, each of which evaluates itself
(``evaluate``: the semantics of one head or MLP on given variable values).
``docs/cookbook.md`` lists them all.
"""

from crasp_compiler.cookbook import attention, ffn, layernorm
from crasp_compiler.cookbook.blocks import (
    EXACT,
    Block,
    BosValues,
    Exactness,
    FFNBlock,
    Form,
    HeadBlock,
    Unit,
    evaluate_blocks,
    form_add,
    form_value,
    var,
)

__all__ = [
    "EXACT",
    "Block",
    "BosValues",
    "Exactness",
    "FFNBlock",
    "Form",
    "HeadBlock",
    "Unit",
    "attention",
    "evaluate_blocks",
    "ffn",
    "form_add",
    "form_value",
    "layernorm",
    "var",
]
