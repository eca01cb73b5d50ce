"""The ``records`` family: mutated training records through ``crasp plot`` and the tables
of ``benchmarks/length_generalization_report.py``."""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import shutil
from functools import cache
from pathlib import Path
from typing import Any

from tests.fuzz import ROOT
from tests.fuzz.case import Case, invoke, progress, quiet_warnings, shorten
from tests.fuzz.mutate import DELETE, dump_header, hostile_json, json_paths, set_path
from tests.fuzz.workspace import workdir

RECORDS = ROOT / "docs" / "results" / "length-generalization"
REPORT = ROOT / "benchmarks" / "length_generalization_report.py"
GRID_NAMES = ("length_generalization", "chomsky", "value_generalization")
NEST = "__NEST__"


@cache
def record_files() -> list[Path]:
    """The committed training records (every sequence and numeric task kind)."""
    return sorted(RECORDS.glob("*/*.json"))


def mutate_record(rng: random.Random, record: Any) -> tuple[str, list[str]]:
    """A mutated training record: its JSON text and what changed (fields deleted,
    renamed, retyped or deeply nested; or the whole record replaced)."""
    described = []
    if rng.random() < 0.1:
        choice = rng.choice(["list", "string", "null", "truncated", "empty", "nan", "deep"])
        text = json.dumps(record)
        whole = {
            "list": json.dumps([record]),
            "string": json.dumps(text[:50]),
            "null": "null",
            "truncated": text[: rng.randrange(len(text))],
            "empty": "",
            "nan": re.sub(r"\d+\.\d+", "NaN", text, count=1),
            "deep": "[" * 100_000 + "]" * 100_000,
        }[choice]
        return whole, [f"record: {choice}"]
    nested = None  # (depth, value) of the field nested in lists, written as text
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        paths = [p for p in json_paths(record) if p]
        if not paths:
            break
        top = [p for p in paths if len(p) == 1]
        path = rng.choice(top if rng.random() < 0.5 else paths)
        parent = record
        for key in path[:-1]:
            parent = parent[key]
        op = rng.choice(["delete", "rename", "retype", "retype", "nest"])
        if op == "delete":
            set_path(record, path, DELETE)
        elif op == "rename" and isinstance(parent, dict):
            new = rng.choice([str(path[-1]) + "_old", str(path[-1]).upper(), "", "\u0000"])
            parent[new] = parent.pop(path[-1])
        elif op == "nest" and nested is None:
            nested = (rng.choice([2, 20, 500, 100_000]), parent[path[-1]])
            set_path(record, path, NEST)
            op = f"nest x{nested[0]}"
        else:
            value = hostile_json(rng)
            set_path(record, path, value)
            op = f"retype to {shorten(repr(value), 40)}"
        described.append(f"{op} {list(path)}")
    text = dump_header(record)
    if nested is not None:
        depth, value = nested
        inner = "[" * depth + dump_header(value) + "]" * depth
        text = text.replace(json.dumps(NEST), inner, 1)
    return text, described


@cache
def report_module() -> Any:
    """benchmarks/length_generalization_report.py reading a private copy of the records."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("crasp_report", REPORT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    copy = workdir() / "report"
    shutil.copytree(RECORDS, copy / "records")
    (copy / "grids").mkdir()
    for name in GRID_NAMES:
        text = (module.GRIDS / f"{name}.toml").read_text()
        folder = re.search(r'^results = "[^"]*/([^/"]+)"', text, re.M)
        assert folder is not None
        text = re.sub(r'^out = ".*"', f"out = {json.dumps(str(copy / 'runs'))}", text, flags=re.M)
        results = json.dumps(str(copy / "records" / folder.group(1)))
        text = re.sub(r'^results = ".*"', f"results = {results}", text, flags=re.M)
        (copy / "grids" / f"{name}.toml").write_text(text)
    module.GRIDS = copy / "grids"
    module.FINETUNE = copy / "records" / "finetune.json"
    return module


def _call(case: Case, step: str, fn, *args) -> None:
    """A script's function as a step: SystemExit 0 is ok, another exit status with a
    message a refusal."""
    progress(step)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), quiet_warnings():
            case.attempt(step, fn, *args)
    except SystemExit as err:
        if err.code in (0, None):
            case.ran.append(step)
        elif isinstance(err.code, str) or stderr.getvalue().strip():
            message = err.code if isinstance(err.code, str) else stderr.getvalue()
            case.note("refused", step, message.strip().splitlines()[-1])
        else:
            case.note("traceback", step, f"exit status {err.code} without a message")


def fuzz_records(case: Case, rng: random.Random) -> None:
    files = record_files()
    source = rng.choice(files)
    data = json.loads(source.read_text())
    if isinstance(data, list):  # finetune.json: a list of records
        index = rng.randrange(len(data))
        text, described = mutate_record(rng, data[index])
        data[index] = "__RECORD__"
        text = json.dumps(data).replace('"__RECORD__"', text, 1)
    else:
        text, described = mutate_record(rng, data)
    target = rng.choice(["plot", "plot", "report"])
    good = target == "plot" and source.name != "finetune.json" and rng.random() < 0.5
    case.repro.update(
        {
            "record": str(source.relative_to(ROOT)),
            "mutations": described,
            "through": target + (" (beside the unmutated record)" if good else ""),
            "text": shorten(text, 800),
        }
    )
    if case.dry:
        return
    if target == "plot":
        folder = workdir() / "plot" / str(case.index % 3)
        shutil.rmtree(folder, ignore_errors=True)
        (folder / "runs" / "bad").mkdir(parents=True)
        (folder / "runs" / "bad" / "results.json").write_text(text, "utf-8", "surrogatepass")
        if good:
            (folder / "runs" / "good").mkdir()
            shutil.copy(source, folder / "runs" / "good" / "results.json")
        invoke(case, "crasp plot", ["plot", str(folder / "runs"), "-o", str(folder / "figures")])
        return
    report = report_module()
    copy = workdir() / "report" / "records" / source.relative_to(RECORDS)
    original = copy.read_bytes()
    try:
        copy.write_text(text, "utf-8", "surrogatepass")
        _call(case, "report tables", report.tables)
    finally:
        copy.write_bytes(original)
