"""The public API, the same for every source language (the CLI is a view of it).

From the repository root (these lines run as doctests: ``tests/test_api_doctest.py``):

>>> from crasp_compiler import load, interpret, compile, run
>>> program = load("examples/crasp/dyck1.cr")          # language from the suffix
>>> interpret(program, ["(", ")"]).accepted             # the language's own trace
True
>>> model = compile(program)                            # exact weights
>>> run(model, [["(", ")"], ["(", "("]]).values["D"].tolist()  # every position, BOS first
[[True, False, True], [True, False, False]]
>>> sums = load("examples/pcoc/cumsum.pcoc")
>>> interpret(sums, [1, 2, 3, 4]).outputs["x"].tolist()  # n from the input
[1.0, 3.0, 6.0, 10.0]
>>> run(compile(sums, n=4), [[[1, 2, 3, 4]]]).values["x"].tolist()
[[1.0, 3.0, 6.0, 10.0]]

``load`` takes a path or program text (``language=`` names the language of text);
options (``alphabet``, ``mode``, ``max_len``, ``n``, ``tolerance``, ``dtype``) are the
registered languages' (:data:`crasp_compiler.languages.registry.Language.options`);
``compile(program, reuse=False)`` gives every variable its own residual dimension.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from crasp_compiler.errors import CraspError
from crasp_compiler.languages import (
    Language,
    Outputs,
    get_language,
    language_for_path,
    language_of_model,
    language_of_program,
)
from crasp_compiler.model.io import read_model
from crasp_compiler.model.model import Model


def load(source: str | Path, language: str | None = None, **options: Any) -> Any:
    """A checked program from a file path (language from its suffix unless ``language``
    names it) or from program text (``language`` required unless the text is a path)."""
    if isinstance(source, Path) or ("\n" not in source and Path(source).is_file()):
        lang = get_language(language) if language else language_for_path(source)
        return lang.load(source, **_options(lang, "load", options))
    if language is None:
        raise CraspError("program text needs language= (e.g. 'crasp' or 'pcoc')")
    lang = get_language(language)
    return lang.parse(source, "<string>", **_options(lang, "load", options))


def check(program: Any, **options: Any) -> list[str]:
    """A checked program's summary lines (what ``crasp check PROGRAM`` prints)."""
    lang = language_of_program(program)
    return lang.summary(program, **_options(lang, "check", options))


def interpret(program: Any, input: Any, **options: Any) -> Any:
    """The reference interpreter on one input: the language's trace (C-RASP: every
    definition at every prefix; PCOC: every slot after every round, ``n`` defaulting to
    the length of the input vectors)."""
    lang = language_of_program(program)
    return lang.evaluate(program, input, **_options(lang, "interpret", options))


def compile(program: Any, **options: Any) -> Model:
    """Exact transformer weights for ``program`` (options: the language's, ``mode``, and
    ``reuse``: ``False`` gives every variable its own residual dimension, one label per
    dimension at every stage; ``True`` reuses dead dimensions; the default, None, takes
    whichever makes the smaller model)."""
    lang = language_of_program(program)
    return lang.compile(program, **_options(lang, "compile", options, extra=("mode", "reuse")))


def load_model(path: str | Path, *, check_source: bool = True) -> Model:
    """A compiled model from a ``.npz`` file or an export directory (``crasp export``;
    torch export directories need torch, TransformerLens ones safetensors).
    ``check_source=False``: an ``.npz`` file's recorded source is not parsed (running a
    model reads only its weights; :func:`~crasp_compiler.model.io.read_model`)."""
    path = Path(path)
    if not (path.is_dir() or path.name == "config.json"):
        return read_model(path, check_source=check_source)
    from crasp_compiler.export import read_export

    return read_export(path)


def run(
    model: Model,
    inputs: Sequence[Any],
    *,
    dtype: str = "float64",
    on_beyond: str = "error",
    residuals: bool = False,
) -> Outputs:
    """Run a compiled model on a batch of the language's inputs with the numpy executor;
    decided outputs at the language's positions (a hand-built model's inputs are token
    lists, as C-RASP's)."""
    from crasp_compiler.runtime.numpy_exec import run_tokens

    lang = model_language(model)
    if dtype not in ("float64", "float32"):
        raise CraspError(f"dtype must be float64 or float32, not {dtype!r}")
    tokens, values = lang.model_inputs(model, inputs)
    result = run_tokens(
        model,
        tokens,
        dtype=np.dtype(dtype).type,
        residuals=residuals,
        on_overlength=on_beyond,
        values=values,
    )
    labels = [  # the model's position labels, mapped to the language's positions
        lang.model_outputs(model, [item], np.array([lang.position_labels(model, item)]))[0]
        for item in inputs
    ]
    return Outputs(
        {name: lang.model_outputs(model, inputs, v) for name, v in result.values.items()},
        [[str(label) for label in row] for row in labels],
        {name: lang.model_outputs(model, inputs, v) for name, v in result.outputs.items()},
        result.residuals,
    )


def model_language(model: Model) -> Language:
    """The language whose inputs a model reads (hand-built models read token lists)."""
    return language_of_model(model) or get_language("crasp")


def _options(
    language: Language, stage: str, given: dict[str, Any], extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``given`` checked against the options ``language`` takes at ``stage``."""
    known = {o.name for o in language.options if stage in o.stages or "load" in o.stages}
    known |= set(extra) | {"max_parameters", "on_beyond"}
    unknown = builtins.sorted(set(given) - known)
    if unknown:
        raise CraspError(
            f"{language.title} {stage} takes no option(s) {', '.join(unknown)} "
            f"(it takes: {', '.join(builtins.sorted(known))})"
        )
    return given
