"""PCOC as a registered :class:`~crasp_compiler.languages.registry.Language`.

An input is one run's input vectors, an array ``(slots, n)``; positions are the
machines 0..n−1. A compiled model reads machine i's inputs as numeric inputs at token
position i + 1 (BOS is position 0), so its outputs are the columns after BOS.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from crasp_compiler.errors import CraspError
from crasp_compiler.languages.pcoc.check import check_pcoc
from crasp_compiler.languages.pcoc.compile import compile_program, machines
from crasp_compiler.languages.pcoc.declaration import DECLARATION
from crasp_compiler.languages.pcoc.interpret import (
    NUMBER,
    format_vector,
    interpret_batch,
    interpret_program,
    read_vectors,
    require_interpreter_memory,
)
from crasp_compiler.languages.pcoc.lower import TOKEN
from crasp_compiler.languages.pcoc.nodes import Program
from crasp_compiler.languages.pcoc.program import parse_program
from crasp_compiler.languages.registry import Item, Language, Outputs, expect
from crasp_compiler.model.io import MAX_INTEGER, finite_number
from crasp_compiler.model.model import BOS, FLOAT_DTYPES, Model


def _vector_text(argument: str | None) -> tuple[str, str]:
    """The text of the input vectors: the file ``argument`` (``-`` or none: stdin), or
    ``argument`` itself when it is one vector written out (``"3 1 4 1"``, :func:`_inline`)."""
    if argument is not None and _inline(argument):
        return argument, "<input>"
    if argument is not None and argument != "-":
        try:
            raw: bytes | str = Path(argument).read_bytes()
        except OSError as err:
            raise CraspError(
                f"cannot read the input vectors: {err.strerror}", filename=argument
            ) from None
        filename = argument
    else:
        if sys.stdin is None:
            raise CraspError(
                "no input: give a file of vectors, or vectors on stdin", filename="<stdin>"
            )
        stream = getattr(sys.stdin, "buffer", sys.stdin)
        raw = stream.read()
        filename = "<stdin>"
    if isinstance(raw, str):
        return raw, filename
    try:
        return raw.decode("utf-8"), filename
    except UnicodeDecodeError as err:
        raise CraspError(
            f"the input is not valid UTF-8 (byte {raw[err.start]:#04x} at offset {err.start})",
            filename=filename,
        ) from None


def _inline(argument: str) -> bool:
    """Whether ``argument`` is a vector written on the command line rather than a file's
    name: no file of that name exists, and it holds several words or one number (a bad
    number among several is then reported where it stands)."""
    fields = argument.split()
    written = len(fields) > 1 or (len(fields) == 1 and NUMBER.fullmatch(fields[0]) is not None)
    return written and not Path(argument).exists()


def machine_table(labels: Sequence[str], rows: Sequence[tuple[str, Sequence[Any]]]) -> str:
    """One column per machine (or model position), one row per named value."""
    table = [["machine", *labels]] + [
        [name, *(format_vector([v]) if np.ndim(v) == 0 else str(v) for v in values)]
        for name, values in rows
    ]
    widths = [max(len(row[c]) for row in table) for c in range(len(table[0]))]
    lines = [
        "  ".join(
            cell.ljust(w) if c == 0 else cell.rjust(w)
            for c, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in table
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(line.rstrip() for line in lines)


# The machines `crasp check` compiles a program for when it is given no --n.
CHECK_MACHINES = 4


class Pcoc(Language, declared=DECLARATION):
    def parse(self, text: str, filename: str, **options: Any) -> Program:
        return parse_program(text, filename)

    def owns(self, program: object) -> bool:
        return isinstance(program, Program)

    def summary(self, program: Program, **options: Any) -> list[str]:
        slots = {slot.name: slot for slot in program.slots}

        def slot_text(name: str) -> str:
            bound = slots[name].bound
            return name if bound is None else f"{name} (|{name}| <= {bound:g})"

        lines = [
            f"  inputs:      {', '.join(slot_text(s) for s in program.inputs) or '(none)'}",
            f"  outputs:     {', '.join(program.outputs)}",
            f"  slots:       {', '.join(slot_text(s.name) for s in program.slots)}",
        ]
        n = options.get("n")
        probe = n if n is not None else CHECK_MACHINES
        rounds = check_pcoc(program, probe)
        sends = sum(1 for rnd, _ in rounds if rnd.sends)
        lines.append(
            f"  rounds:      {len(rounds)} for n = {probe}"
            + (f" ({sends} with data-dependent sends)" if sends else "")
        )
        model = compile_program(program, probe)  # every check `crasp compile` makes
        lines.append(
            f"  compiles:    for n = {probe}"
            + (" (--n checks another)" if n is None else "")
            + f": {len(model.layers)} layers, width {model.width}"
        )
        return lines

    # ------------------------------------------------------------ inputs

    def read_inputs(
        self, argument: str | None, source: Program | Model, **options: Any
    ) -> Iterator[Item]:
        if isinstance(source, Model):
            n, slots = machines(source), len(source.inputs)
        else:
            n, slots = options["n"], len(source.inputs)
            require_interpreter_memory(source, n, 1)  # before reading n numbers a line
            check_pcoc(source, n)
        if slots == 0:  # a program without input slots runs once, on nothing
            yield Item(0, "", np.zeros((0, n)), "input")
            return
        text, filename = _vector_text(argument)
        # `//` comment lines are skipped, as for token inputs
        lines = ["" if line.strip().startswith("//") else line for line in text.split("\n")]
        numbered = [k for k, line in enumerate(lines, start=1) if line.strip()]
        vectors = read_vectors("\n".join(lines), n, filename, slots=slots)
        for number, vector in zip(numbered, vectors, strict=True):
            yield Item(number, lines[number - 1].strip(), vector, f"{filename}:{number}")

    def sample_inputs(
        self, model: Model, rng: random.Random, length: int, count: int
    ) -> list[np.ndarray]:
        """Per input, one of: normal values, integers in ``[0, n)``, or a permutation of
        ``0..n−1`` (programs that route data by value need valid destinations), clipped
        to the declared bounds."""
        n, names = machines(model), model.inputs
        out = []
        for k in range(count):
            kind = k % 3
            columns = []
            for name in names:
                if kind == 0:
                    column = np.array([rng.gauss(0, 1) for _ in range(n)])
                elif kind == 1:
                    column = np.array([float(rng.randrange(n)) for _ in range(n)])
                else:
                    column = np.array(rng.sample(range(n), n), dtype=np.float64)
                bound = model.guarantee.input_bounds.get(name)
                if bound is not None:
                    column = np.clip(column, -bound, bound)
                columns.append(column)
            out.append(np.array(columns).reshape(len(names), n))
        return out

    def input_buckets(self, model: Model, max_len: int) -> list[tuple[int, int]]:
        n = machines(model)
        return [(n, n)]

    def tolerance(self, model: Model, dtype: str) -> float:
        """The model's own bound in ``dtype`` (``Guarantee.errors``: every output within it
        of the interpreter's); for a model without one, an older file's first-order
        rounding estimate (absolute, in the outputs' units) or the softmax tolerance it
        recorded, else the float type's resolution at values of about 1."""
        bound = model.guarantee.errors.get(dtype)
        if bound is not None:
            return bound
        estimate = max(model.info.get("rounding_estimate", {}).values(), default=0.0)
        base = model.info.get("tolerance") or model.options.get("tolerance") or 0.0
        scale = 1.0 if dtype == "float64" else 2.0**29
        return float(base) + 2 * estimate * scale + (1e-9 if dtype == "float64" else 1e-4)

    def format_input(self, item: Any) -> str:
        return format_vector(item)

    # ------------------------------------------------------------ stages

    def interpret(self, program: Program, inputs: Sequence[Any], **options: Any) -> Outputs:
        """``check_promises=True`` also refuses inputs that break a promise the compiled
        models rely on (a value beyond its bound, a data comparison within its margin)."""
        n = options["n"]
        on_beyond = options.get("on_beyond", "error")
        if not inputs:
            values = {name: np.zeros((0, n)) for name in program.outputs}
        else:
            trace = interpret_batch(
                program,
                n,
                np.stack(list(inputs)),
                check_promises=options.get("check_promises", False),
                on_beyond=on_beyond,
            )
            values = {name: np.asarray(trace.outputs[name]) for name in program.outputs}
        return Outputs(values, [[str(i) for i in range(n)] for _ in inputs])

    def misuse(self, stage: str, options: dict[str, Any]) -> str | None:
        softmax_only = options.get("tolerance") is not None or options.get("dtype") is not None
        if stage == "compile" and options.get("mode") in (None, "hard") and softmax_only:
            return "--tolerance and --dtype are for --mode softmax"
        return None

    def evaluate(self, program: Program, item: Any, **options: Any) -> Any:
        """``interpret``; ``n`` defaults to the length of the input vectors."""
        vectors = np.asarray(item, dtype=np.float64)
        n = options.get("n") or (vectors.shape[-1] if vectors.size else None)
        if n is None:
            raise CraspError("give n: the program reads no inputs to take it from")
        return interpret_program(program, n, item, on_beyond=options.get("on_beyond", "error"))

    def trace(self, program: Program, item: Any, **options: Any) -> list[str]:
        result = self.evaluate(program, item, **options)
        lines = []
        for number, memory in enumerate(result.rounds):
            lines.append(f"== {'initial' if number == 0 else f'after round {number}'}")
            lines += [f"{name}: {format_vector(values)}" for name, values in memory.items()]
        lines.append("== outputs")
        return lines

    def verdict(self, source: Program | Model, outputs: Outputs, row: int) -> str | None:
        names = list(outputs.values)
        lines = [format_vector(outputs.values[name][row]) for name in names]
        if len(names) > 1:
            lines = [f"{name}: {line}" for name, line in zip(names, lines, strict=True)]
        return "\n".join(lines)

    def table(self, labels: Sequence[str], rows: Sequence[tuple[str, Sequence[Any]]]) -> str:
        return machine_table(labels, rows)

    def compile(self, program: Program, **options: Any) -> Model:
        n = options.get("n")
        if n is None:
            raise CraspError("a PCOC program needs n, the number of machines (--n N)")
        mode = options.get("mode") or "hard"
        if mode not in self.modes:
            raise CraspError(f"PCOC modes are {', '.join(self.modes)}, not {mode!r}")
        tolerance, dtype = options.get("tolerance"), options.get("dtype")
        if mode == "hard" and (tolerance is not None or dtype is not None):
            raise CraspError("tolerance and dtype (--tolerance, --dtype) are for mode softmax")
        return compile_program(
            program,
            n,
            mode=mode,
            tolerance=tolerance,
            dtype=dtype or "float64",
            reuse=options.get("reuse"),
        )

    def headline(self, model: Model) -> str:
        return shape(model)

    def describe_model(self, model: Model) -> list[str]:
        info = model.info
        lines = [
            f"source:      PCOC, n = {info.get('n', '?')} machines",
            f"layers:      {shape(model)}",
            f"inputs:      {', '.join(model.inputs) or '(none)'} (numeric)",
        ]
        if info.get("temperature") is not None:
            lines.append(
                f"softmax:     temperature {info['temperature']:.6g}, tolerance "
                f"{info.get('tolerance', '?')} ({info.get('dtype', '?')})"
            )
        return lines

    def model_program(self, model: Model) -> Program | None:
        return parse_program(model.source, "<model source>") if model.source else None

    def model_options(self, model: Model) -> dict[str, Any]:
        return {"n": machines(model)}

    def check_header(self, model: Model, source: bool = True) -> None:
        """What ``machines``, ``run_pcoc`` and ``crasp info`` read from a PCOC model, and
        a source that parses with the model's inputs and outputs."""
        options, info = model.options, model.info
        n = info.get("n")
        expect(
            type(n) is int and 1 <= n <= MAX_INTEGER,
            f"header field info 'n' is {n!r}, not a number of machines (1 to {MAX_INTEGER:,})",
        )
        expect(
            model.guarantee.max_len == n,
            f"the guarantee (max_len {model.guarantee.max_len!r}) does not cover exactly the "
            f"info 'n' = {n} machines",
        )
        for key, want in (("language", self.title), ("n", n)):
            expect(
                options.get(key) == want,
                f"header field options {key!r} is {options.get(key)!r}, but info {key!r} "
                f"is {want!r}",
            )
        mode = options.get("mode")
        expect(
            mode in self.modes,
            f"header field options 'mode' is {mode!r}, not a PCOC mode ({', '.join(self.modes)})",
        )
        names = [o.name for o in model.outputs]
        for key, want in (("pcoc_inputs", model.inputs), ("pcoc_outputs", names)):
            expect(
                info.get(key) == want,
                f"header field info {key!r} is {info.get(key)!r}, not the model's {want!r}",
            )
        slots = info.get("slots")
        expect(
            isinstance(slots, list)
            and all(isinstance(slot, str) for slot in slots)
            and set(model.inputs + names) <= set(slots),
            f"header field info 'slots' is {slots!r}, not a list holding the inputs and outputs",
        )
        expect(
            model.vocab == [BOS, TOKEN],
            f"header field 'vocab' of a PCOC model is {model.vocab!r}, not {[BOS, TOKEN]!r}",
        )
        expect(
            model.accept is None and all(o.rule == "value" for o in model.outputs),
            "a PCOC model's outputs are numbers: rule 'value' and no acceptance output",
        )
        benes, temperature = info.get("benes") or {}, info.get("temperature")
        counts = {"send_rounds", "bound_2Rlog2n"}
        expect(
            isinstance(info.get("theorem", {}), dict)
            and (benes == {} or (isinstance(benes, dict) and counts <= set(benes)))
            and (temperature is None or (finite_number(temperature) and temperature > 0)),
            "header field info 'theorem', 'benes' or 'temperature' is malformed",
        )
        for where, tolerance in (("info", info), ("options", options)):
            value = tolerance.get("tolerance")
            expect(
                value is None or (finite_number(value) and value >= 0),
                f"header field {where} 'tolerance' is {value!r}, not a finite number >= 0",
            )
        estimate = info.get("rounding_estimate", {})
        expect(
            isinstance(estimate, dict)
            and all(
                key in FLOAT_DTYPES and finite_number(value) and value >= 0
                for key, value in estimate.items()
            ),
            "header field info 'rounding_estimate' must map float64/float32 to finite numbers >= 0",
        )
        super().check_header(model, source)

    def model_inputs(
        self, model: Model, inputs: Sequence[Any]
    ) -> tuple[list[list[str]], list[np.ndarray] | None]:
        n = machines(model)
        tokens = [[TOKEN] * n for _ in inputs]
        values = [np.asarray(vectors, dtype=np.float64).reshape(-1, n).T for vectors in inputs]
        return tokens, values

    def model_outputs(self, model: Model, inputs: Sequence[Any], decided: np.ndarray) -> np.ndarray:
        return decided[:, 1:]

    def position_labels(self, model: Model, item: Any) -> list[str]:
        return ["bos", *(str(i) for i in range(machines(model)))]

    # ------------------------------------------------------------ what tools read

    def input_bounds(self, program: Program) -> dict[str, float | None]:
        return {name: program.slot(name).bound for name in program.inputs}

    def rebound(self, program: Program, bound: float) -> Program:
        """:func:`~crasp_compiler.languages.pcoc.rebound.rebound_program`: every number
        literal equal to the one bound B the program declares (the slots' bounds, and the
        defaults ±B that must dominate every value) becomes ``bound``."""
        from crasp_compiler.languages.pcoc.rebound import rebound_program

        return rebound_program(program, bound)

    def routing_labels(self, model: Model) -> dict[tuple[int, int], str]:
        from crasp_compiler.languages.pcoc.static import unroll

        program = self.model_program(model)
        if program is None:
            return {}
        return {
            (number, q): f"send {send.slot} to {send.dest}"
            for number, (rnd, _) in enumerate(unroll(program, int(model.info.get("n", 1))))
            for q, send in enumerate(rnd.sends)
        }


def shape(model: Model) -> str:
    """Layers and heads of a compiled PCOC model next to the simulation theorem's counts
    (one layer per round and one head per memory slot, for MLPs of any depth: the
    layers beyond it are the local computations of one-hidden-layer MLPs)."""
    info = model.info
    theorem = info.get("theorem", {})
    benes = info.get("benes")
    sends = (
        f"; {benes['send_rounds']} send round(s) routed in those rounds "
        f"(Theorem 5.1's Beneš routing: 2R⌈log₂ n⌉ = {benes['bound_2Rlog2n']})"
        if benes
        else ""
    )
    return (
        f"{len(model.layers)} layers for {info.get('rounds', '?')} round(s) (theorem: "
        f"{theorem.get('layers', '?')} layers, {theorem.get('heads_per_layer', '?')} heads per "
        f"layer, with MLPs of any depth: one layer per round; these MLPs have one hidden "
        f"layer, so a round's local computation may take more{sends}), heads per layer "
        f"{[len(layer.heads) for layer in model.layers]}"
    )


PCOC = Pcoc()
