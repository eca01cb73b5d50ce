"""The transformer model family shared by the compilers and the runtimes, and its file format.

``load_model`` is the old name of :func:`read_model` (deprecated: ``crasp_compiler.load_model``
also checks the model against its language; this one reads and validates the file)."""

from crasp_compiler.lazy import deprecated
from crasp_compiler.model.io import read_model, save_model
from crasp_compiler.model.model import (
    BOS,
    MLP,
    Guarantee,
    Head,
    Layer,
    Model,
    Output,
    Provenance,
)

__all__ = [
    "BOS",
    "MLP",
    "Guarantee",
    "Head",
    "Layer",
    "Model",
    "Output",
    "Provenance",
    "read_model",
    "save_model",
]

__getattr__ = deprecated(__name__, {"load_model": "read_model"})
