"""Tally as a registered :class:`~crasp_compiler.languages.registry.Language`.

Inputs are token lists (``"yes no yes"`` on the command line, one per stdin line; a line
holding only ``ε`` is the empty input unless ε is a symbol; blank and ``#`` lines are
skipped); positions are the empty prefix and each token, which are also the compiled
model's positions (BOS is the empty prefix). Every rule is a Boolean output.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from crasp_compiler.display import value_table
from crasp_compiler.errors import CraspError
from crasp_compiler.languages.registry import Item, Language, Outputs, expect
from crasp_compiler.model.model import Model
from tests.support.tally.declaration import DECLARATION
from tests.support.tally.interpret import Run, run
from tests.support.tally.nodes import Program, format_rule
from tests.support.tally.parse import parse_program
from tests.support.tally.rounding import UNIT_ROUNDOFF

EMPTY = "ε"


def _tokens(text: str, symbols: Sequence[str]) -> list[str]:
    tokens = text.split()
    return [] if tokens == [EMPTY] and EMPTY not in symbols else tokens


class Tally(Language, declared=DECLARATION):
    # ------------------------------------------------------------ programs

    def parse(self, text: str, filename: str, **options: Any) -> Program:
        return parse_program(text, filename, options.get("margin") or 0)

    def owns(self, program: object) -> bool:
        return isinstance(program, Program)

    def summary(self, program: Program, **options: Any) -> list[str]:
        width = max(len(rule.name) for rule in program.rules)
        return [
            f"  symbols:     {' '.join(program.symbols)}",
            f"  rules:       {len(program.rules)}",
            f"  accept:      {program.accept or '-'}",
            f"  margin:      {program.margin}",
            *(f"  {rule.name.ljust(width)}  {format_rule(rule)}" for rule in program.rules),
        ]

    # ------------------------------------------------------------ inputs

    def read_inputs(
        self, argument: str | None, source: Program | Model, **options: Any
    ) -> Iterator[Item]:
        symbols = source.symbols if isinstance(source, Program) else source.vocab[1:]
        if argument is not None:
            yield Item(0, argument.strip() or EMPTY, _tokens(argument, symbols), "input")
            return
        for number, line in enumerate(sys.stdin, start=1):
            text = line.strip()
            if text and not text.startswith("#"):
                yield Item(number, text, _tokens(text, symbols), f"<stdin>:{number}")

    def sample_inputs(
        self, model: Model, rng: random.Random, length: int, count: int
    ) -> list[list[str]]:
        symbols = model.vocab[1:]
        return [[rng.choice(symbols) for _ in range(length)] for _ in range(count)]

    def format_input(self, item: Any) -> str:
        return " ".join(item) or EMPTY

    # ------------------------------------------------------------ stages

    def evaluate(self, program: Program, item: Any, **options: Any) -> Run:
        return run(program, item)

    def interpret(self, program: Program, inputs: Sequence[Any], **options: Any) -> Outputs:
        longest = max((len(tokens) for tokens in inputs), default=0)
        values = {
            name: np.zeros((len(inputs), longest + 1), dtype=bool) for name in program.outputs
        }
        for row, tokens in enumerate(inputs):
            result = run(program, tokens)
            for name, column in result.values.items():
                values[name][row, : len(column)] = column
        return Outputs(values, [[EMPTY, *tokens] for tokens in inputs])

    def trace(self, program: Program, item: Any, **options: Any) -> list[str]:
        result = run(program, item)
        rows: list[tuple[str, Sequence[object]]] = [
            (f"count({a})", counts) for a, counts in result.counts.items()
        ]
        rows += list(result.values.items())
        return [value_table(result.tokens, rows)]

    def has_verdict(self, program_or_model: Program | Model) -> bool:
        return program_or_model.accept is not None

    def verdict(self, program_or_model: Program | Model, outputs: Outputs, row: int) -> str | None:
        accept = program_or_model.accept
        if accept is None:
            return None
        return str(bool(outputs.values[accept][row, len(outputs.labels[row]) - 1]))

    def compile(self, program: Program, **options: Any) -> Model:
        """Exact weights (:mod:`tests.support.tally.lower`); the load options are the
        program's own (it was parsed with them)."""
        mode = options.get("mode") or self.modes[0]
        if mode not in self.modes:
            raise CraspError(f"Tally modes are {', '.join(self.modes)}, not {mode!r}")
        from tests.support.tally.lower import compile_program  # the compiler, only to compile

        return compile_program(
            program, reuse=options.get("reuse"), max_parameters=options.get("max_parameters")
        )

    def headline(self, model: Model) -> str:
        heads = sum(len(layer.heads) for layer in model.layers)
        return f"{len(model.layers)} layer ({heads} counting heads, one MLP of comparisons)"

    def describe_model(self, model: Model) -> list[str]:
        rules, symbols = model.info.get("rules", "?"), len(model.vocab) - 1
        return [
            f"source:      {self.title}: rules {rules}, symbols {symbols}, "
            f"margin {model.options.get('margin')}",
            f"layers:      {len(model.layers)} (counting heads, then Heaviside comparisons)",
        ]

    def model_program(self, model: Model) -> Program | None:
        if not model.source:
            return None
        return parse_program(model.source, "<model source>", model.options.get("margin", 0))

    def check_header(self, model: Model, source: bool = True) -> None:
        """A Tally mode, a whole margin, no length bound in real arithmetic and a float
        horizon for each float type (a type without one would be run unbounded); with
        ``source``, a program with the model's outputs whose horizons cover the claims."""
        mode = model.provenance.mode if model.provenance is not None else None
        margin = model.options.get("margin")
        expect(mode in self.modes, f"the provenance's mode is {mode!r}, not a Tally mode")
        expect(
            type(margin) is int and margin >= 0,
            f"header field options 'margin' is {margin!r}, not a whole number >= 0",
        )
        claims = model.guarantee.dtypes
        expect(
            model.guarantee.max_len is None and set(claims) == set(UNIT_ROUNDOFF),
            f"the guarantee (max_len {model.guarantee.max_len!r}, float types "
            f"{sorted(claims)}) is not a Tally model's: every length in real arithmetic, "
            "a horizon per float type",
        )
        super().check_header(model, source)
        program = self.model_program(model) if source else None
        if program is not None:
            from tests.support.tally.lower import horizons

            proven = horizons(program)
            beyond = [dtype for dtype, limit in claims.items() if limit > proven[dtype]]
            expect(
                not beyond,
                f"the guarantee claims more than the source's analysis proves in "
                f"{', '.join(beyond)} ({claims} > {proven})",
            )

    def model_inputs(
        self, model: Model, inputs: Sequence[Any]
    ) -> tuple[list[list[str]], list[np.ndarray] | None]:
        return [list(tokens) for tokens in inputs], None

    def model_outputs(self, model: Model, inputs: Sequence[Any], decided: np.ndarray) -> np.ndarray:
        return decided


TALLY = Tally()
