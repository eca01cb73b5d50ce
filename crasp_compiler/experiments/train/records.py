"""The schema of a training run's results, checked wherever results are read.

A run's ``results.json`` (:func:`~crasp_compiler.experiments.train.loop.train`) and its
copy in a grid's ``results`` directory are read by the sweep (is the run finished?),
``crasp plot`` and ``benchmarks/length_generalization_report.py``, all through
:func:`read_results`; the report reads the fine-tuning records of ``finetune.json``
through :func:`read_finetune_records`. A file that does not fit (not JSON, nested too deeply, a field
missing, renamed or of the wrong type) is a :class:`CraspError` naming the file and the
field, and its run counts as unfinished: the sweep trains it again, the plot and the
report skip it with a one-line warning (:func:`skipped`).

The schema is what ``train`` writes (the module docstring of :mod:`.loop` lists the
fields); the ``config`` is checked by :class:`~.loop.TrainConfig`'s own rules, and the
record returned has it completed with the defaults of fields it leaves out.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crasp_compiler.errors import CraspError
from crasp_compiler.experiments.tasks.base import PROGRAM_FAMILY
from crasp_compiler.files import json_nesting

# A check: ``(value, where) -> problem`` (None when the value fits); ``where`` names the
# value's field path, e.g. ``accuracy["1-50"]``.
Check = Callable[[object, str], "str | None"]
# per-position fields: sequence tasks of these families (``per_position_metrics``)
PER_POSITION_FAMILIES = ("chomsky", PROGRAM_FAMILY)
PER_POSITION = ("balanced_accuracy", "position_accuracy", "label_balance")

# Records nest a few levels; too deep for json, a record is refused naming the field
# where it passes this depth.
MAX_RECORD_DEPTH = 64


def _shown(value: object) -> str:
    """``value`` in a message: a short scalar as JSON, a list or an object by its type."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    text = json.dumps(value) if isinstance(value, str | bool | None) else repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _bad(where: str, what: str, value: object) -> str:
    """``field WHERE must be WHAT, not VALUE`` (the top level: without ``field WHERE``)."""
    return f"{f'field {where} ' if where else ''}must be {what}, not {_shown(value)}"


def _key(where: str, key: object) -> str:
    return f"{where}[{json.dumps(key)[:40]}]"


def _simple(what: str, ok: Callable[[object], bool]) -> Check:
    return lambda value, where: None if ok(value) else _bad(where, what, value)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


STRING = _simple("a string", lambda v: isinstance(v, str))
BOOL = _simple("true or false", lambda v: type(v) is bool)
COUNT = _simple("an integer >= 0", lambda v: type(v) is int and v >= 0)
NUMBER = _simple("a number", _is_number)
FRACTION = _simple("a number in [0, 1]", lambda v: _is_number(v) and 0 <= v <= 1)  # type: ignore[operator]
BIN = _simple(
    "[lo, hi] with 0 <= lo <= hi",
    lambda v: (
        isinstance(v, list) and len(v) == 2 and all(type(x) is int for x in v) and 0 <= v[0] <= v[1]
    ),
)


def _nullable(check: Check) -> Check:
    return lambda value, where: None if value is None else check(value, where)


def _list(item: Check) -> Check:
    def check(value: object, where: str) -> str | None:
        if not isinstance(value, list):
            return _bad(where, "a list", value)
        return next((p for k, v in enumerate(value) if (p := item(v, f"{where}[{k}]"))), None)

    return check


def _table(value_check: Check, key_check: Callable[[str], bool] = lambda k: True) -> Check:
    """An object whose keys pass ``key_check`` and whose values pass ``value_check``."""

    def check(value: object, where: str) -> str | None:
        if not isinstance(value, dict):
            return _bad(where, "an object", value)
        for key, item in value.items():
            if not key_check(key):
                return f"field {_key(where, key)}: not a valid key here"
            if problem := value_check(item, _key(where, key)):
                return problem
        return None

    return check


def _fields(required: dict[str, Check], optional: dict[str, Check] | None = None) -> Check:
    """An object with every ``required`` field (and maybe the ``optional`` ones)."""

    def check(value: object, where: str) -> str | None:
        if not isinstance(value, dict):
            return _bad(where, "an object", value)
        prefix = f"{where}." if where else ""
        missing = next((name for name in required if name not in value), None)
        if missing is not None:
            return f"field {prefix}{missing} is missing"
        for name, field in {**required, **(optional or {})}.items():
            if name in value and (problem := field(value[name], prefix + name)):
                return problem
        return None

    return check


def _scale_key(key: str) -> bool:
    try:
        return float(key) > 0
    except ValueError:
        return False


PAIR = _simple(
    "[step, number]",
    lambda v: isinstance(v, list) and len(v) == 2 and type(v[0]) is int and _is_number(v[1]),
)
SHARES = _table(FRACTION)
METRICS = _table(
    _fields({name: NUMBER for name in ("mse", "mae", "rel_error", "close_accuracy")}),
    _scale_key,
)
PROVENANCE = _fields(
    {
        name: _nullable(STRING) if name == "commit" else STRING
        for name in ("commit", "python", "numpy", "torch", "cpu", "platform", "device", "dtype")
    },
    {
        "modified": _nullable(BOOL),
        "torch_threads": COUNT,
        "package_version": STRING,
        "device_name": STRING,
    },
)
PREDICTION = _nullable(_simple('"yes", "no" or null', lambda v: v in ("yes", "no")))
THEORY = _fields(
    {"source": STRING, "class": STRING, "ape": PREDICTION, "nope": PREDICTION},
    {"text": _list(STRING)},
)
OPTIONAL = {"provenance": PROVENANCE, "theory": THEORY, "selected_step": COUNT}
KIND = _fields({"kind": _simple('"sequence" or "numeric"', lambda v: v in ("sequence", "numeric"))})
COMMON = {
    "task": STRING,
    "family": STRING,
    "kind": _simple('"sequence" or "numeric"', lambda v: v in ("sequence", "numeric")),
    "model_class": STRING,
    "config": _simple("an object", lambda v: isinstance(v, dict)),
    "model_config": _simple("an object", lambda v: isinstance(v, dict)),
    "device": STRING,
    "n_parameters": COUNT,
    "n_trainable": COUNT,
    "steps": COUNT,
    "early_stopped": BOOL,
    "wall_time_s": NUMBER,
    "eval_time_s": NUMBER,
    "final_loss": _nullable(NUMBER),
    "loss_history": _list(PAIR),
    "eval_history": _list(PAIR),
    "compiled_error": _nullable(STRING),
    "resumed_from": _nullable(COUNT),
    "test_size": COUNT,
}
SEQUENCE = _fields(
    {
        **COMMON,
        "bins": _table(BIN),
        "max_positions": COUNT,
        "accuracy": _table(FRACTION),
        "compiled_accuracy": _nullable(_table(FRACTION)),
        "agreement": _nullable(_table(FRACTION)),
    },
    {
        "balanced_accuracy": _table(FRACTION),
        "position_accuracy": _table(FRACTION),
        "label_balance": _table(_fields({"positions": SHARES, "last": SHARES})),
        "last_accuracy": _table(FRACTION),
        **OPTIONAL,
    },
)
NUMERIC = _fields(
    {
        **COMMON,
        "n": COUNT,
        "scales": _list(NUMBER),
        "metrics": METRICS,
        "compiled_metrics": _nullable(METRICS),
    },
    {"agreement": _nullable(_table(NUMBER, _scale_key)), "last_metrics": METRICS, **OPTIONAL},
)


def _per_bin_problem(data: dict[str, Any]) -> str | None:
    """Bins named ``lo-hi``, and every per-bin field with exactly the bins' keys."""
    bins = data["bins"]
    if not bins:
        return "field bins is empty"
    for name, (lo, hi) in bins.items():
        if name != f"{lo}-{hi}":
            return f'field {_key("bins", name)} must be named "{lo}-{hi}"'
    names = ["accuracy", "compiled_accuracy", "agreement", *PER_POSITION]
    if data["family"] in PER_POSITION_FAMILIES:
        missing = next((name for name in PER_POSITION if name not in data), None)
        if missing:
            return f"field {missing} is missing (a {data['family']} task)"
    if (data["compiled_accuracy"] is None) != (data["agreement"] is None):
        return "fields compiled_accuracy and agreement must both be null or both objects"
    for name in names:
        if isinstance(data.get(name), dict) and set(data[name]) != set(bins):
            return f"field {name} must have the bins' keys ({', '.join(bins)})"
    return None


def results_problem(data: object) -> str | None:
    """What is wrong with ``data`` as a run's results (one line naming the field), or
    None when it fits the schema."""
    problem = KIND(data, "")  # which fields the rest must have
    if problem is None:
        assert isinstance(data, dict)
        problem = (SEQUENCE if data["kind"] == "sequence" else NUMERIC)(data, "")
    if problem is not None or not isinstance(data, dict):
        return problem
    if data["kind"] == "sequence" and (problem := _per_bin_problem(data)):
        return problem
    if data["kind"] == "numeric" and not data["metrics"]:
        return "field metrics is empty"
    return _config_problem(data)


def _config_problem(data: dict[str, Any]) -> str | None:
    """The ``config`` as TrainConfig accepts it; the results' task, family and bins
    those of the config (a program's config names the program's file and digest)."""
    from crasp_compiler.experiments.tasks.registry import all_tasks
    from crasp_compiler.experiments.train.loop import TrainConfig

    try:
        config = TrainConfig.from_dict(data["config"])
    except CraspError as err:
        return f"field config: {err.diagnostics[0].message}"
    except RecursionError:
        return "field config: nested too deeply"
    if data["family"] != PROGRAM_FAMILY:
        if config.task != data["task"]:
            return f"field task {_shown(data['task'])} is not the config's {_shown(config.task)}"
        registered = all_tasks().get(data["task"])
        if registered is not None and registered.family != data["family"]:
            return f"field family must be {_shown(registered.family)} for task {data['task']}"
    if data["kind"] == "sequence" and config.bins is not None:
        bins = [tuple(b) for b in config.bins]
        for name, bin_ in data["bins"].items():
            if tuple(bin_) not in bins:
                return f"field {_key('bins', name)} is not one of the config's bins"
    return None


def load_json(path: Path) -> object:
    """The JSON value of the file ``path``; a CraspError naming it when it cannot be read
    or is not JSON (nested too deeply included)."""
    data = b""
    try:
        data = path.read_bytes()
        return json.loads(data)
    except OSError as err:
        message = f"cannot read: {err.strerror or err}"
    except UnicodeDecodeError as err:
        message = f"not UTF-8 text (byte {err.start})"
    except RecursionError:
        where = json_nesting(data.decode("utf-8", "replace"), MAX_RECORD_DEPTH)
        message = "invalid JSON: nested too deeply" + (f" (in field {where})" if where else "")
    except ValueError as err:  # JSONDecodeError, an integer of thousands of digits
        message = f"invalid JSON: {' '.join(str(err).split())}"
    raise CraspError(message, filename=str(path))


def read_results(path: str | Path) -> dict[str, Any]:
    """The results in the file ``path``, checked against the schema, with the config
    completed by its defaults; a CraspError naming the file and the field otherwise
    (its message is ``not a complete results.json (WHY)``)."""
    from crasp_compiler.experiments.train.loop import TrainConfig

    path = Path(path)
    try:
        data = load_json(path)
    except CraspError as err:
        problem: str | None = err.diagnostics[0].message
    else:
        problem = results_problem(data)
    if problem is not None:
        raise CraspError(f"not a complete results.json ({problem})", filename=str(path))
    assert isinstance(data, dict)
    return {**data, "config": TrainConfig.from_dict(data["config"]).to_dict()}


def skipped(err: CraspError) -> str:
    """The one-line warning for a file :func:`read_results` refused: ``FILE: skipped,
    not a complete results.json (WHY)``."""
    return f"{err.filename}: skipped, {err.diagnostics[0].message}"


FINETUNE_CONFIG = _fields(
    {
        "task": STRING,
        "optimizer": STRING,
        "lr": NUMBER,
        "params": STRING,
    }
)
_ERROR = _simple(
    'a number (or "nan", "inf", "-inf")',
    lambda v: _is_number(v) or v in ("nan", "inf", "-inf"),
)
FINETUNE = _fields(
    {
        "config": FINETUNE_CONFIG,
        "bound": _ERROR,
        "tolerance": NUMBER,
        "exact_before": BOOL,
        "exact_after": BOOL,
        "worst_error_before": _ERROR,
        "worst_error_after": _ERROR,
    },
    {"provenance": PROVENANCE},
)


def finetune_problem(record: object) -> str | None:
    """What is wrong with ``record`` as a fine-tuning record (one line naming the
    field), or None when it fits (non-finite numbers may be the strings of
    :func:`~crasp_compiler.experiments.train.finetune.dump_records`)."""
    return FINETUNE(record, "")


def read_finetune_records(path: str | Path) -> list[dict[str, Any]]:
    """The fine-tuning records of the file ``path`` as written (non-finite numbers as
    strings) that fit the schema; each other record is skipped with a warning naming the
    file, the record and the field. A CraspError naming the file when it is not a JSON
    list."""
    path = Path(path)
    records = load_json(path)
    if not isinstance(records, list):
        raise CraspError(
            f"must be a JSON list of records, not {_shown(records)}", filename=str(path)
        )
    kept = []
    for index, record in enumerate(records):
        problem = finetune_problem(record)
        if problem is None:
            kept.append(record)
        else:
            warnings.warn(f"{path}: record {index} skipped ({problem})", stacklevel=2)
    return kept
