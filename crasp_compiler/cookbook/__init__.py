"""The cookbook: every construction written once, over named residual variables."""

from crasp_compiler.cookbook.blocks import Block, FFNBlock, Form, HeadBlock, Unit, form_add

__all__ = ["Block", "FFNBlock", "Form", "HeadBlock", "Unit", "form_add"]
