"""Small pieces every ``crasp`` command group shares."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import click

from crasp_compiler.errors import CraspError


@contextlib.contextmanager
def warnings_on_stderr(where: str | None = None) -> Iterator[None]:
    """Python warnings raised inside, printed as ``warning: ...`` lines on stderr
    (``WHERE: warning: ...`` when ``where`` names the input)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for warning in caught:
        prefix = f"{where}: " if where else ""
        click.echo(f"{prefix}warning: {warning.message}", err=True)


def need_torch(what: str = "this") -> None:
    """CraspError unless torch can be imported (``what`` needs it)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise CraspError(
            f"{what} needs torch: pip install 'crasp-compiler[torch]' (torch>=2.4)"
        ) from None
