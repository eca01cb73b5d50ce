"""A third language for the registry tests: *ballot* programs.

A ballot program is one line ``X beats Y`` (``#`` comments allowed): accept a string
when it holds more X than Y at its end. It is compiled by writing the C-RASP program
``W = # "X" > # "Y"``, and takes one option of its own, ``--margin K`` (X must lead by
more than K). Everything else — inputs, interpreter, runs — is C-RASP's, inherited.
The point is what a new language has to provide: this module and one ``register``.
"""

from __future__ import annotations

import re
from typing import Any

from crasp_compiler.errors import CraspError, Diagnostic, Span
from crasp_compiler.languages.crasp.language import Crasp
from crasp_compiler.languages.crasp.nodes import Program
from crasp_compiler.languages.crasp.program import parse_program
from crasp_compiler.languages.registry import Option
from crasp_compiler.model.model import Model

LINE = re.compile(r"\s*(\S+)\s+beats\s+(\S+)\s*")


class Ballot(Crasp):
    name = "ballot"
    title = "Ballot"
    suffixes = (".ballot",)
    options = (
        Option(
            "margin",
            "Ballot: the lead the first symbol needs (default 0).",
            frozenset({"load"}),
            kind="int",
            minimum=0,
        ),
    )

    def parse(self, text: str, filename: str, **options: Any) -> Program:
        lines = [
            (number, line)
            for number, line in enumerate(text.split("\n"), start=1)
            if line.split("#")[0].strip()
        ]
        if len(lines) != 1 or not LINE.fullmatch(lines[0][1].split("#")[0]):
            number, line = lines[0] if lines else (1, "")
            span = Span(number, 1, number, max(2, len(line) + 1))
            raise CraspError(
                [Diagnostic("a ballot program is one line: X beats Y", span)], text, filename
            )
        x, y = LINE.fullmatch(lines[0][1].split("#")[0]).groups()  # type: ignore[union-attr]
        margin = options.get("margin") or 0
        source = f'alphabet "{x}", "{y}"\nW = # "{x}" > # "{y}" + {margin}\n'
        return parse_program(source, filename)

    def owns(self, program: object) -> bool:
        return False  # its programs are C-RASP programs: the API treats them as C-RASP

    def compile(self, program: Program, **options: Any) -> Model:
        model = super().compile(program, **options)
        model.info["language"] = self.title
        return model

    def model_program(self, model: Model) -> Program | None:
        return parse_program(model.source, "<model source>") if model.source else None


BALLOT = Ballot()
