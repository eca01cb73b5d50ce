"""Every C-RASP example through ``to_transformer_lens`` on TransformerLens 3.x, compared
with the numpy executor (tests/support/lens_compare.py). Run in its own interpreter with
TransformerLens 3.x first on ``PYTHONPATH`` (3.x and 4.x cannot share an environment);
prints one JSON object: the version, the model class, the inputs compared per example,
and the counts of the tokenizer, export-tokenizer, stage-label, padding-head and circuitsvis
checks.
An assertion error (a disagreement) exits non-zero."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from crasp_compiler.export.lens import export_lens
from crasp_compiler.export.lens_loader import to_transformer_lens
from tests.support.lens_compare import (
    EXAMPLES,
    circuitsvis_pages,
    compare,
    compiled,
    exported_tokenizer,
    inputs_for,
    padding_heads,
    stage_labels,
    through_tokenizer,
)


def main() -> None:
    report: dict[str, object] = {"examples": {}}
    for path in EXAMPLES:
        model = compiled(path)
        lens = to_transformer_lens(model)
        report["version"], report["class"] = lens.version, type(lens.model).__name__
        rng = np.random.default_rng(len(path.name))
        report["examples"][path.name] = compare(lens, model, inputs_for(model, rng, 12))  # type: ignore[index]
    model = compiled(EXAMPLES[0])  # its own tokenizer: to_tokens, to_str_tokens, model(text)
    inputs = inputs_for(model, np.random.default_rng(0), 3)
    report["tokenizer"] = through_tokenizer(to_transformer_lens(model), model, inputs)
    dyck = compiled(EXAMPLES[0].parent / "dyck1.cr")  # reuses dimensions; 3 + 1 heads
    lens = to_transformer_lens(dyck)
    words = list("(()))(()")
    report["stage_labels"] = stage_labels(lens, dyck, words)
    report["padding_heads"] = padding_heads(lens, words)
    report["circuitsvis"] = circuitsvis_pages(lens, "( ( ) ) )")
    with tempfile.TemporaryDirectory() as scratch:
        out = export_lens(dyck, Path(scratch) / "lens")
        report["export_tokenizer"] = exported_tokenizer(out, dyck)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
