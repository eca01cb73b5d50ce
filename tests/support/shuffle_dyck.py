"""Shuffle-Dyck-k as C-RASP text, in the two ways a user writes it (tests/languages/
test_depth.py and benchmarks/standing.py)."""

from __future__ import annotations


def per_pair(k: int) -> str:
    """Every pair balanced and never closed early, checked pair by pair."""
    lines = []
    for p in range(k):
        lines += [
            f'O{p} = # "({p}"',
            f'C{p} = # "){p}"',
            f"V{p} = O{p} < C{p}",
            f"N{p} = (# V{p}) == 0",
            f"B{p} = O{p} == C{p}",
            f"D{p} = N{p} && B{p}",
        ]
    lines.append("D = " + " && ".join(f"D{p}" for p in range(k)))
    return "\n".join([*lines, "accept D"]) + "\n"


def one_violation(k: int) -> str:
    """The same language with one violation count over all pairs."""
    lines = []
    for p in range(k):
        lines += [f'O{p} = # "({p}"', f'C{p} = # "){p}"']
    lines.append("V = " + " || ".join(f"O{p} < C{p}" for p in range(k)))
    lines.append("NV = (# V) == 0")
    lines.append("D = NV && " + " && ".join(f"O{p} == C{p}" for p in range(k)))
    return "\n".join([*lines, "accept D"]) + "\n"
