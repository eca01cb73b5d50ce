"""C-RASP as a registered :class:`~crasp_compiler.languages.registry.Language`.

Inputs are token lists; positions are the empty prefix (``ε``) and each token, which
are also the compiled model's positions (BOS is the empty prefix).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from crasp_compiler.display import value_table
from crasp_compiler.errors import CraspError
from crasp_compiler.languages.crasp.declaration import DECLARATION
from crasp_compiler.languages.crasp.interpret import interpret, interpret_batch
from crasp_compiler.languages.crasp.nodes import BoolRef, CountExpr, CountRef, Program, Sort, walk
from crasp_compiler.languages.crasp.printer import format_expr
from crasp_compiler.languages.crasp.program import parse_program, require_alphabet, tokenize
from crasp_compiler.languages.registry import Item, Language, Outputs, expect
from crasp_compiler.model.model import Model

# A stdin line holding only this token is the empty string (unless it is a symbol).
EMPTY = "ε"


def input_lines(text: str | None) -> Iterator[tuple[int, str, list[str] | CraspError]]:
    """The inputs to run: the argument (line 0), or one per stdin line, as (line number,
    text, tokens); blank lines and ``//`` comment lines are skipped, and a line that is
    not UTF-8 yields its error instead of tokens."""
    if text is not None:
        yield 0, text.strip(), tokenize(text)
        return
    if sys.stdin is None:  # started with stdin closed
        raise CraspError("no input: give INPUT, or one input per line on stdin", filename="<stdin>")
    # Read bytes and decode here: a strict text stdin would raise UnicodeDecodeError.
    stream = getattr(sys.stdin, "buffer", sys.stdin)
    for number, raw in enumerate(stream, start=1):
        try:
            line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError as err:
            yield (
                number,
                raw.decode("utf-8", "replace").strip(),
                CraspError(
                    f"the input line is not valid UTF-8 (byte {raw[err.start]:#04x} at offset "
                    f"{err.start})",
                    filename=f"<stdin>:{number}",
                ),
            )
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        yield number, stripped, tokenize(stripped)


def _typed(sort: Sort, values: np.ndarray) -> np.ndarray:
    """Interpreter values as bool, int64 where the counts fit, else exact Python ints."""
    if sort == Sort.BOOL:
        return values.astype(bool)
    if not values.size or max(abs(int(v)) for v in values.flat) < 1 << 62:
        return values.astype(np.int64)
    return values


class Crasp(Language, declared=DECLARATION):
    def parse(self, text: str, filename: str, **options: Any) -> Program:
        alphabet = options.get("alphabet")
        if isinstance(alphabet, str):
            alphabet = alphabet.split()
        return parse_program(text, filename, alphabet)

    def owns(self, program: object) -> bool:
        return isinstance(program, Program)

    def warnings(self, program: Program) -> list[str]:
        return [w.format(program.source, program.filename) for w in program.warnings]

    def summary(self, program: Program, **options: Any) -> list[str]:
        from crasp_compiler.languages.crasp.theory import reading

        sorts = [d.sort for d in program.definitions]
        width = max(len(d.name) for d in program.definitions)
        klass, prediction, *notes = reading(program).lines
        return [
            f"  class:       {klass}",
            f"  prediction:  {prediction}",
            *(f"  {note}" for note in notes),
            f"  alphabet:    {' '.join(program.alphabet)}",
            f"  definitions: {len(sorts)} ({sorts.count(Sort.BOOL)} Boolean, "
            f"{sorts.count(Sort.COUNT)} count)",
            f"  accept:      {program.accept or '-'}",
            f"  outputs:     {', '.join(program.outputs)}",
            f"  compiles:    {self._compiled(program)}",
            *(
                f"  {d.name.ljust(width)}  {d.sort.value:<5}  {format_expr(d.expr)}"
                for d in program.definitions
            ),
        ]

    def _compiled(self, program: Program) -> str:
        """What ``crasp compile`` makes of ``program`` (heaviside), after every check it
        makes (a program it refuses raises here too)."""
        from crasp_compiler.languages.crasp.compile import compile_program

        model = compile_program(program)
        bound = model.info.get("dependency_bound")
        return f"{len(model.layers)} layers (dependency bound {bound}), width {model.width}"

    # ------------------------------------------------------------ inputs

    def read_inputs(
        self, argument: str | None, source: Program | Model, **options: Any
    ) -> Iterator[Item]:
        symbols = source.alphabet if isinstance(source, Program) else source.vocab[1:]
        for number, text, tokens in input_lines(argument):
            if tokens == [EMPTY] and EMPTY not in symbols:
                tokens = []
            yield Item(number, text or EMPTY, tokens, f"<stdin>:{number}" if number else "input")

    def sample_inputs(
        self, model: Model, rng: random.Random, length: int, count: int
    ) -> list[list[str]]:
        symbols = model.vocab[1:]
        return [[rng.choice(symbols) for _ in range(length)] for _ in range(count)]

    def format_input(self, item: Any) -> str:
        return " ".join(item)

    # ------------------------------------------------------------ stages

    def interpret(self, program: Program, inputs: Sequence[Any], **options: Any) -> Outputs:
        by_length: dict[int, list[int]] = {}
        for row, tokens in enumerate(inputs):
            by_length.setdefault(len(tokens), []).append(row)
        longest = max(by_length, default=0)
        values = {
            name: np.zeros((len(inputs), longest + 1), dtype=object) for name in program.outputs
        }
        for length, rows in by_length.items():
            batch = interpret_batch(program, [inputs[row] for row in rows])
            for name in program.outputs:
                values[name][rows, : length + 1] = batch[name]
        typed = {name: _typed(program[name].sort, array) for name, array in values.items()}
        return Outputs(typed, [[EMPTY, *tokens] for tokens in inputs])

    def evaluate(self, program: Program, item: Any, **options: Any) -> Any:
        return interpret(program, item)

    def trace(self, program: Program, item: Any, **options: Any) -> list[str]:
        result = interpret(program, item)
        rows = [(name, result.values[name]) for name in program.names]
        return [value_table(result.tokens, rows)]

    def has_verdict(self, source: Program | Model) -> bool:
        return source.accept is not None

    def misuse(self, stage: str, options: dict[str, Any]) -> str | None:
        if stage == "compile" and options.get("mode") == "relu" and options.get("max_len") is None:
            return "--mode relu needs --max-len N"
        return None

    def verdict(self, source: Program | Model, outputs: Outputs, row: int) -> str | None:
        if source.accept is None:
            return None
        return str(bool(outputs.values[source.accept][row, len(outputs.labels[row]) - 1]))

    def compile(self, program: Program, **options: Any) -> Model:
        mode = options.get("mode") or "heaviside"
        if mode not in self.modes:
            raise CraspError(f"C-RASP modes are {', '.join(self.modes)}, not {mode!r}")
        max_len = options.get("max_len")
        if mode == "relu" and max_len is None:
            raise CraspError("mode relu needs max_len (--max-len N)")
        # the compiler (cookbook, assembler) is imported only to compile
        from crasp_compiler.languages.crasp.compile import compile_program

        return compile_program(
            program,
            mode=mode,
            max_len=max_len if mode == "relu" else None,
            max_parameters=options.get("max_parameters"),
            reuse=options.get("reuse"),
        )

    def headline(self, model: Model) -> str:
        bound = model.info.get("dependency_bound", "?")
        return f"{len(model.layers)} layers (dependency bound {bound})"

    def describe_model(self, model: Model) -> list[str]:
        return [
            f"source:      {model.info.get('class') or self.title}",
            f"layers:      {len(model.layers)} (dependency bound "
            f"{model.info.get('dependency_bound', '?')})",
        ]

    def model_program(self, model: Model) -> Program | None:
        if not model.source:
            return None
        return parse_program(model.source, "<model source>", alphabet=model.vocab[1:])

    def check_header(self, model: Model, source: bool = True) -> None:
        """A C-RASP compile mode, for ``relu`` a guarantee up to ``options.max_len`` at most
        (a lens export's is capped by its context), and a source that parses with the
        model's outputs."""
        mode, max_len = model.options.get("mode"), model.options.get("max_len")
        expect(
            mode in self.modes,
            f"header field options 'mode' is {mode!r}, not a C-RASP mode ({', '.join(self.modes)})",
        )
        expect(
            max_len is None or (type(max_len) is int and max_len >= 0),
            f"header field options 'max_len' is {max_len!r}, not a length",
        )
        claimed = model.guarantee.max_len
        expect(
            mode != "relu" or (max_len is not None and claimed is not None and claimed <= max_len),
            f"the guarantee (max_len {claimed!r}) is not within that of a relu model compiled "
            f"with options 'max_len' {max_len!r}: such a model is exact only up to it",
        )
        super().check_header(model, source)

    def model_inputs(
        self, model: Model, inputs: Sequence[Any]
    ) -> tuple[list[list[str]], list[np.ndarray] | None]:
        return [list(tokens) for tokens in inputs], None

    def model_outputs(self, model: Model, inputs: Sequence[Any], decided: np.ndarray) -> np.ndarray:
        return decided

    # ------------------------------------------------------------ what tools read

    def definition_sorts(self, program: Program) -> dict[str, str]:
        return {d.name: d.sort.value for d in program.definitions}

    def definition_values(
        self,
        program: Program,
        inputs: Sequence[Any],
        overrides: Mapping[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        """:func:`~crasp_compiler.languages.crasp.interpret.interpret_batch`: positions are
        the empty prefix and every token."""
        return interpret_batch(program, inputs, overrides)

    def dependencies(self, program: Program) -> dict[str, set[str]]:
        return {
            d.name: {n.name for n in walk(d.expr) if isinstance(n, BoolRef | CountRef)}
            for d in program.definitions
        }

    def theory(self, program: Program) -> dict[str, Any]:
        """:func:`~crasp_compiler.languages.crasp.theory.reading` (the class is an upper
        bound: the smallest class of the program's relations)."""
        from crasp_compiler.languages.crasp.theory import reading

        found = reading(program)
        return {
            "class": found.relation_class,
            "ape": found.ape,
            "nope": found.nope,
            "text": list(found.lines),
        }

    def require_tokens(self, program: Program) -> Program:
        return require_alphabet(program)

    def count_forms(self, model: Model) -> set[str]:
        """The count sub-expressions of the model's program (as the source writes them:
        the labels of their dimensions) and the residual forms of its count definitions."""
        program = self.model_program(model)
        counts: set[str] = set()
        count_definitions = set()
        for definition in program.definitions if program is not None else ():
            if definition.sort == Sort.COUNT:
                count_definitions.add(definition.name)
            counts |= {format_expr(n) for n in walk(definition.expr) if isinstance(n, CountExpr)}
        for name, form in (model.info.get("definitions") or {}).items():
            if name in count_definitions:
                counts |= set(form)
        return counts


CRASP = Crasp()
