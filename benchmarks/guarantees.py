"""The float horizons the compiler proves for every example program.

For each example and each mode (heaviside, layernorm, relu with each ``--relu-max-len``),
the proven horizon in float64 and float32 (``Guarantee.dtypes``: the longest input every
output is proven exact for in that float type, capped at the relu max-len) and the check
of the rounding analysis that limits it. Compiling is cheap: the run takes seconds.

Usage::

    python benchmarks/guarantees.py --out docs/results/guarantees.json
    python benchmarks/guarantees.py --markdown docs/results/guarantees.json
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from _common import EXAMPLES_DIR, example_names, machine, provenance_line, revision

from crasp_compiler import load_program
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.languages.crasp.lower import lower_program
from crasp_compiler.languages.crasp.printer import format_expr
from crasp_compiler.languages.crasp.rounding import horizon

DTYPES = ("float64", "float32")


def limiting(program, mode: str, max_len: int | None, dtype: str) -> str:
    """What limits the horizon: the check's construction and expression, or the cap."""
    lowered = lower_program(program, mode, max_len)
    _, check = horizon(lowered.rounding[dtype].checks, dtype, max_len)
    if check is None:
        return "max-len" if max_len is not None else "2^53 - 1 (prefix sums)"
    node = check.node
    where = format_expr(node) if hasattr(node, "span") else ""
    return f"{check.what}" + (f" ({where})" if where and where not in check.what else "")


def measure(relu_lens: list[int]) -> list[dict]:
    rows = []
    for name in example_names():
        program = load_program(EXAMPLES_DIR / name)
        for mode, max_len in [("heaviside", None), ("layernorm", None)] + [
            ("relu", n) for n in relu_lens
        ]:
            model = compile_program(program, mode=mode, max_len=max_len)
            row = {"example": name, "mode": mode, "max_len": max_len}
            for dtype in DTYPES:
                row[dtype] = model.guarantee.dtypes[dtype]
                row[f"{dtype}_limited_by"] = limiting(program, mode, max_len, dtype)
            rows.append(row)
    return rows


def markdown(data: dict) -> str:
    lines = [
        "| example | mode | float64 | float32 | float32 limited by |",
        "|---|---|---:|---:|---|",
    ]
    for row in data["rows"]:
        mode = row["mode"] + (f" {row['max_len']}" if row["max_len"] else "")
        lines.append(
            f"| {row['example']} | {mode} | {row['float64']:,} | {row['float32']:,} | "
            f"{row['float32_limited_by']} |"
        )
    relu = [r for r in data["rows"] if r["mode"] == "relu"]
    for n in sorted({r["max_len"] for r in relu}):
        full = sum(r["float32"] >= n for r in relu if r["max_len"] == n)
        total = sum(r["max_len"] == n for r in relu)
        lines.append(f"\nrelu --max-len {n}: proven float32 horizon {n:,} on {full} of {total}")
    lines.append("\n" + provenance_line(data))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--relu-max-len", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--markdown", help="print the table of a JSON result and exit")
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return 0
    data = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python benchmarks/guarantees.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "revision": revision(),
        "rows": measure(args.relu_max_len),
    }
    print(markdown(data))
    if args.out:
        Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
