"""The cookbook: every construction written once, over named residual variables.

``ffn`` (feed-forward, Cookbook §4), ``attention`` (§5) and ``layernorm`` (§6) hold the
constructions; ``blocks`` the types they return. ``docs/cookbook.md`` lists them all.
"""

from crasp_compiler.cookbook import attention, ffn, layernorm
from crasp_compiler.cookbook.blocks import (
    EXACT,
    Block,
    Exactness,
    FFNBlock,
    Form,
    HeadBlock,
    Unit,
    form_add,
    var,
)

__all__ = [
    "EXACT",
    "Block",
    "Exactness",
    "FFNBlock",
    "Form",
    "HeadBlock",
    "Unit",
    "attention",
    "ffn",
    "form_add",
    "layernorm",
    "var",
]
