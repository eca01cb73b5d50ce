"""The ``crasp`` command in-process, as the CLI tests call it."""

from __future__ import annotations

from click.testing import CliRunner, Result

from crasp_compiler.cli import main


def invoke(*args: object, input: str | bytes | None = None) -> Result:
    """``crasp ARGS`` (each argument as ``str``), with ``input`` on stdin."""
    return CliRunner().invoke(main, [str(a) for a in args], input=input)
