"""Exports of compiled models to torch, safetensors and TransformerLens-style files.

:data:`EXPORTERS` lists every ``crasp export --format``, in the order the CLI shows them:
what it writes, whether it needs torch, how it writes a model, and how an export
directory of its kind is recognised and read back (:func:`read_export`). A new format is
one module here and one entry.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from crasp_compiler.console import need_torch
from crasp_compiler.model.model import Model


class Exporter:
    """One export format. ``write(model, out_dir, n_ctx)`` writes the directory;
    ``read(path)`` reads an export directory (or its ``config.json``) of this format back,
    or gives None for a directory of another format. (A plain class: every ``crasp``
    command imports this module, and a dataclass costs a millisecond to make.)"""

    __slots__ = ("help", "name", "needs_torch", "read", "write")

    def __init__(
        self,
        name: str,
        help: str,
        needs_torch: bool,
        write: Callable[[Model, str | Path, int | None], Path],
        read: Callable[[str | Path], Model | None],
    ) -> None:
        self.name, self.help, self.needs_torch = name, help, needs_torch
        self.write, self.read = write, read


def _torch_files(fmt: str) -> Callable[[Model, str | Path, int | None], Path]:
    def write(model: Model, out_dir: str | Path, n_ctx: int | None) -> Path:
        from crasp_compiler.export.torch_files import export_model

        return export_model(model, out_dir, fmt)

    return write


def _read_torch_files(path: str | Path) -> Model | None:
    from crasp_compiler.export.torch_files import load_export

    need_torch("reading an export directory")
    return load_export(path)


def _write_lens(model: Model, out_dir: str | Path, n_ctx: int | None) -> Path:
    from crasp_compiler.export.lens import export_lens

    return export_lens(model, out_dir, n_ctx)


def _read_lens(path: str | Path) -> Model | None:
    from crasp_compiler.export.lens import load_lens_export, read_lens_config

    return load_lens_export(path) if read_lens_config(path) is not None else None


EXPORTERS: dict[str, Exporter] = {
    exporter.name: exporter
    for exporter in (
        Exporter(
            "safetensors",
            "the torch module's weights as safetensors",
            True,
            _torch_files("safetensors"),
            _read_torch_files,
        ),
        Exporter(
            "torch",
            "the torch module's weights (torch.save)",
            True,
            _torch_files("torch"),
            _read_torch_files,
        ),
        Exporter(
            "lens",
            "TransformerLens names and shapes (standard models only)",
            False,
            _write_lens,
            _read_lens,
        ),
    )
}


def read_export(path: str | Path) -> Model:
    """The model of an export directory (or its ``config.json``): the first format whose
    reader recognises it (those that need no torch first; the torch files' reader, which
    refuses what it does not recognise, last)."""
    by_torch = sorted(EXPORTERS.values(), key=lambda exporter: exporter.needs_torch)
    for read in dict.fromkeys(exporter.read for exporter in by_torch):  # each reader once
        model = read(path)
        if model is not None:
            return model
    raise AssertionError("unreachable: the torch files' reader refuses what it cannot read")
