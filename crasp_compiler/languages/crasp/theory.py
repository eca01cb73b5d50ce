"""What the theory of length generalisation predicts from a C-RASP program.

Huang et al. (2025) prove that a function a C-RASP[periodic, local] program computes is
learned with length generalisation by a transformer with absolute positional encodings
(APE) under their idealised inference procedure, and one a C-RASP[∅] program computes by
one without positional encodings (NoPE). A program therefore shows *yes* for APE (every
C-RASP program is in C-RASP[periodic, local]), and *yes* for NoPE when it uses no
positional relation. It never shows *no*: its class is an upper bound on the task's, and
a *no* needs a proof that no program of the class exists (the paper's Tables 2–3).

A program is a program for its finite alphabet. Where that alphabet stands in for one that
grows with the input (copy with distinct tokens: a string longer than the alphabet has a
repeat), a program that tests the symbols one by one computes the task only up to the
alphabet's size, and predicts nothing about it. Such symbols are declared
``alphabet range 0..149``; a program that tests any of them gets no prediction. Large
families of definitions that differ only in the symbol they test (``Had_0 = # "0" >= 1``,
``Had_1 = # "1" >= 1``, …) are pointed out where no range is declared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from crasp_compiler.languages.crasp.nodes import Program, TokenIs, walk
from crasp_compiler.languages.crasp.printer import format_expr

# Definitions of one shape over this many symbols are pointed out (:func:`families`).
FAMILY_NOTE = 32

_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')


@dataclass(frozen=True)
class Reading:
    """The theory's reading of a program: its class, the prediction per encoding
    (``"yes"``, or None where the program shows nothing), and the words for it."""

    relation_class: str
    ape: str | None
    nope: str | None
    lines: tuple[str, ...]


def families(program: Program) -> list[tuple[int, list[str]]]:
    """Groups of definitions that differ only in the symbols they test, largest first:
    (how many symbols, their definitions' names), for groups over at least two symbols."""
    groups: dict[str, list[str]] = {}
    for definition in program.definitions:
        tested = {n.symbol for n in walk(definition.expr) if isinstance(n, TokenIs)}
        if tested:
            shape = _QUOTED.sub("σ", format_expr(definition.expr))
            groups.setdefault(shape, []).append(definition.name)
    found = [(len(names), names) for names in groups.values() if len(names) >= 2]
    return sorted(found, key=lambda item: -item[0])


def stand_in_tested(program: Program) -> list[str]:
    """The symbols declared ``range A..B`` that the program tests."""
    stand_in = set(program.stand_in)
    return sorted(
        {n.symbol for n in program.nodes() if isinstance(n, TokenIs) and n.symbol in stand_in},
        key=program.alphabet.index,
    )


def reading(program: Program) -> Reading:
    """What the theory predicts from ``program`` (module docstring)."""
    klass = program.relation_class
    tested = stand_in_tested(program)
    if tested:
        return Reading(
            klass,
            None,
            None,
            (
                f"none for the task ({klass} for this {len(program.alphabet)}-symbol alphabet "
                f"only: it tests {len(tested)} symbols of its `alphabet range` one by one)",
                "none: the range stands in for an alphabet that grows with the input, and "
                "the program computes the task only up to its size",
            ),
        )
    nope = "yes" if klass == "C-RASP[∅]" else None
    why = (
        "Huang et al. 2025: APE generalises on C-RASP[periodic, local], NoPE on C-RASP[∅]"
        if nope
        else "not shown: yes needs a C-RASP[∅] program, no a proof that none exists"
    )
    lines = [
        f"{klass} (an upper bound on the task's: another program may need fewer relations)",
        f"APE yes, NoPE {nope or 'unknown'} ({why})",
    ]
    largest = families(program)[:1]
    if largest and largest[0][0] >= FAMILY_NOTE:
        size, names = largest[0]
        lines.append(
            f"note: {size} definitions differ only in the symbol they test ({names[0]}, "
            f"{names[1]}, …): if those symbols stand in for an alphabet that grows with the "
            "input, declare them `alphabet range A..B` (no prediction then holds)"
        )
    return Reading(klass, "yes", nope, tuple(lines))
