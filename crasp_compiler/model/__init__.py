"""The transformer model family shared by the compilers and the runtimes, and its file format."""

from crasp_compiler.model.io import load_model, save_model
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
    "load_model",
    "save_model",
]
