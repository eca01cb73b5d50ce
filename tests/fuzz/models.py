"""The ``models`` family: mutated and crafted model files through ``crasp info``, ``run``
and ``check``."""

from __future__ import annotations

import io
import json
import random
import struct
import zipfile
from functools import cache
from pathlib import Path

from tests.fuzz import ROOT
from tests.fuzz.case import Case, invoke, quiet_warnings, shorten
from tests.fuzz.mutate import DELETE, dump_header, hostile_json, json_paths, set_path
from tests.fuzz.workspace import base_models, load_npy, npy, npz_members, workdir, write_npz


def _header_lie(rng: random.Random, header: dict, base: dict, models: dict) -> str:
    """Plausible-looking but false header content; returns a description."""
    lies = [
        ("guarantee.max_len=None", lambda h: h["guarantee"].__setitem__("max_len", None)),
        ("guarantee.max_len=10**30", lambda h: h["guarantee"].__setitem__("max_len", 10**30)),
        ("guarantee.max_len=-1", lambda h: h["guarantee"].__setitem__("max_len", -1)),
        ("guarantee.max_len=True", lambda h: h["guarantee"].__setitem__("max_len", True)),
        (
            "guarantee.dtypes={float32: 10**9}",
            lambda h: h["guarantee"].__setitem__("dtypes", {"float32": 10**9}),
        ),
        (
            "guarantee.dtypes={float16: 3}",
            lambda h: h["guarantee"].__setitem__("dtypes", {"float16": 3}),
        ),
        (
            "guarantee.input_bounds={x: -1}",
            lambda h: h["guarantee"].__setitem__("input_bounds", {"x": -1}),
        ),
        (
            "guarantee.input_bounds={x: 1e-300}",
            lambda h: h["guarantee"].__setitem__("input_bounds", {"x": 1e-300}),
        ),
        ("options.mode=relu", lambda h: h["options"].__setitem__("mode", "relu")),
        (
            "options.mode=heaviside,max_len=None",
            lambda h: h["options"].update(mode="heaviside", max_len=None),
        ),
        ("options=None", lambda h: h.__setitem__("options", None)),
        ("info.language=PCOC", lambda h: h["info"].__setitem__("language", "PCOC")),
        ("info.language=PCOC,n='x'", lambda h: h["info"].update(language="PCOC", n="x")),
        ("info.language=PCOC,n=10**9", lambda h: h["info"].update(language="PCOC", n=10**9)),
        ("info.language=PCOC,n=0", lambda h: h["info"].update(language="PCOC", n=0)),
        ("info.n=-3", lambda h: h["info"].__setitem__("n", -3)),
        ("info.n=[1]", lambda h: h["info"].__setitem__("n", [1])),
        ("info.language=C-RASP", lambda h: h["info"].__setitem__("language", "C-RASP")),
        ("info=None", lambda h: h.__setitem__("info", None)),
        ("info.theorem=5", lambda h: h["info"].__setitem__("theorem", 5)),
        ("info.benes='x'", lambda h: h["info"].__setitem__("benes", "x")),
        ("info.temperature='hot'", lambda h: h["info"].__setitem__("temperature", "hot")),
        (
            "source=other example",
            lambda h: h.__setitem__("source", (ROOT / "examples/crasp/majority.crasp").read_text()),
        ),
        ("source=garbage", lambda h: h.__setitem__("source", "A = = =\x00")),
        (
            "source=dyck with outputs renamed",
            lambda h: h.__setitem__(
                "source", (ROOT / "examples/crasp/dyck1.cr").read_text().replace("D =", "E =")
            ),
        ),
        ("vocab duplicated", lambda h: h.__setitem__("vocab", h["vocab"] + h["vocab"][1:2])),
        ("vocab without BOS", lambda h: h.__setitem__("vocab", [*h["vocab"][1:], "zz"])),
        ("vocab ints", lambda h: h.__setitem__("vocab", ["<bos>", *range(1, len(h["vocab"]))])),
        (
            "vocab with ''/space",
            lambda h: h.__setitem__("vocab", ["<bos>", "", " ", *h["vocab"][3:]]),
        ),
        ("vocab [<bos>,<bos>...]", lambda h: h.__setitem__("vocab", ["<bos>"] * len(h["vocab"]))),
        ("residual +1", lambda h: h["residual"].append("extra")),
        ("residual -1", lambda h: h["residual"].pop()),
        (
            "accept=count output",
            lambda h: (
                h.__setitem__("accept", h["outputs"][0]["name"])
                or h["outputs"][0].__setitem__("rule", "count")
            ),
        ),
        ("accept=missing", lambda h: h.__setitem__("accept", "nope")),
        ("outputs rule=value", lambda h: [o.__setitem__("rule", "value") for o in h["outputs"]]),
        (
            "outputs duplicated names",
            lambda h: [o.__setitem__("name", "same") for o in h["outputs"]],
        ),
        ("outputs name=int", lambda h: h["outputs"][0].__setitem__("name", 5)),
        ("features += onehot:10**12", lambda h: h["features"].append("onehot:1000000000000")),
        ("features += periodic:0:0", lambda h: h["features"].append("periodic:0:0")),
        ("features += ao:x", lambda h: h["features"].append("ao:1:2:3:4")),
        ("features = [index^9]", lambda h: h.__setitem__("features", ["index^9"])),
        ("inputs = ['x','x']", lambda h: h.__setitem__("inputs", ["x", "x"])),
        ("inputs = [5]", lambda h: h.__setitem__("inputs", [5])),
        ("inputs = []", lambda h: h.__setitem__("inputs", [])),
        ("version=2", lambda h: h.__setitem__("version", 2)),
        ("version=1.0", lambda h: h.__setitem__("version", 1.0)),
        ("version=True", lambda h: h.__setitem__("version", True)),
    ]
    layer_lies = [
        ("head bias {'x': 1}", lambda hd: hd.__setitem__("bias", {"x": 1})),
        ("head bias {10**30: 1}", lambda hd: hd.__setitem__("bias", {str(10**30): 1.0})),
        ("head bias {-5: 1e308}", lambda hd: hd.__setitem__("bias", {"-5": 1e308})),
        ("head bias {1: NaN}", lambda hd: hd.__setitem__("bias", {"1": float("nan")})),
        ("head bias [1,2]", lambda hd: hd.__setitem__("bias", [1, 2])),
        ("head bias {'1': '2'}", lambda hd: hd.__setitem__("bias", {"1": "2"})),
        ("head scale 1e308", lambda hd: hd.__setitem__("scale", 1e308)),
        ("head scale '1e400'", lambda hd: hd.__setitem__("scale", "1e400")),
        ("head scale True", lambda hd: hd.__setitem__("scale", True)),
        ("head scale 1e-320", lambda hd: hd.__setitem__("scale", 1e-320)),
        ("head weighting hard-left", lambda hd: hd.__setitem__("weighting", "hard-left")),
        ("head weighting max", lambda hd: hd.__setitem__("weighting", "max")),
        ("head mask none", lambda hd: hd.__setitem__("mask", "none")),
        ("head mask strict-past", lambda hd: hd.__setitem__("mask", "strict-past")),
        ("head label 5", lambda hd: hd.__setitem__("label", 5)),
    ]
    mlp_lies = [
        (
            "mlp activations gelu",
            lambda m: m.__setitem__("activations", ["gelu"] * len(m["activations"])),
        ),
        ("mlp activations +1", lambda m: m["activations"].append("relu")),
        ("mlp activations []", lambda m: m.__setitem__("activations", [])),
        ("mlp norm_groups [[0,0]]", lambda m: m.__setitem__("norm_groups", [[0, 0]])),
        ("mlp norm_groups [[10**9]]", lambda m: m.__setitem__("norm_groups", [[10**9]])),
        ("mlp norm_groups [[True]]", lambda m: m.__setitem__("norm_groups", [[True]])),
        (
            "mlp norm_groups all",
            lambda m: m.__setitem__("norm_groups", [list(range(len(m["activations"])))]),
        ),
        ("mlp labels 5", lambda m: m.__setitem__("labels", 5)),
        ("mlp = []", None),
    ]
    roll = rng.random()
    heads = [hd for layer in header.get("layers", []) for hd in layer.get("heads", [])]
    mlps = [layer for layer in header.get("layers", []) if layer.get("mlp")]
    if roll < 0.5 or (not heads and not mlps):
        name, fn = rng.choice(lies)
        fn(header)
        return name
    if roll < 0.75 and heads:
        name, fn = rng.choice(layer_lies)
        fn(rng.choice(heads))
        return name
    if mlps:
        name, fn = rng.choice(mlp_lies)
        layer = rng.choice(mlps)
        if fn is None:
            layer["mlp"] = []
        else:
            fn(layer["mlp"])
        return name
    return "none"


def _array_mutation(rng: random.Random, members: dict[str, bytes]) -> str:
    import numpy as np

    names = [m for m in members if m.endswith(".npy") and m != "header.npy"]
    target = rng.choice(names)
    array = load_npy(members[target])
    label = target[:-4]
    sparse_parts = [m for m in names if m.endswith(".indptr.npy") or m.endswith(".indices.npy")]
    kind = rng.randrange(12)
    if kind <= 5 and sparse_parts:
        target = rng.choice(sparse_parts)
        label = target[:-4]
        array = load_npy(members[target])
        choice = rng.choice(
            [
                "uint64",
                "uint64-huge",
                "uint64-nonmonotone",
                "uint64-nonmonotone",
                "int64-nonmonotone",
                "int32",
                "float",
                "negative",
                "out-of-range",
                "decreasing",
                "short",
                "2d",
                "int8",
                "overflow-last",
            ]
        )
        if choice == "uint64":
            new = array.astype(np.uint64)
        elif choice == "uint64-huge":
            new = array.astype(np.uint64)
            new[rng.randrange(len(new))] = np.uint64(2**64 - 1 - rng.randrange(3))
        elif choice.endswith("nonmonotone") and len(array) >= 3:
            # a middle entry above the next one: np.diff of uint64 wraps around
            new = array.astype(np.uint64 if choice.startswith("uint64") else np.int64)
            k = rng.randrange(1, len(array) - 1)
            new[k] = rng.choice([int(new[k + 1]) + 1, 2**62, 2**63 + 5]) % (
                2**64 if choice.startswith("uint64") else 2**63
            )
        elif choice == "int32":
            new = array.astype(np.int32)
        elif choice == "float":
            new = array.astype(np.float64) + 0.5
        elif choice == "negative":
            new = array.copy()
            new[rng.randrange(len(new))] = -rng.choice([1, 2**62, 2**63 - 1])
        elif choice == "out-of-range":
            new = array.copy()
            new[rng.randrange(len(new))] = rng.choice([10**6, 2**31, 2**62])
        elif choice == "decreasing":
            new = array[::-1].copy()
        elif choice == "short":
            new = array[: max(0, len(array) - rng.randint(1, 3))]
        elif choice == "2d":
            new = array.reshape(1, -1)
        elif choice == "int8":
            new = array.astype(np.int8)
        else:
            new = array.copy()
            new[-1] = np.iinfo(np.int64).max
        members[target] = npy(new)
        return f"{label}: {choice}"
    choice = rng.choice(
        [
            "int64",
            "uint64",
            "float32",
            "float16",
            "complex",
            "bool",
            "str",
            "object",
            "transpose",
            "flat",
            "3d",
            "empty",
            "nan",
            "inf",
            "1e308",
            "1e200",
            "subnormal",
            "fortran",
            "bigendian",
            "0d",
        ]
    )
    if choice in ("int64", "uint64", "float32", "float16", "bool"):
        new = array.astype(choice)
    elif choice == "complex":
        new = array.astype(np.complex128)
    elif choice == "str":
        new = array.astype(str)
    elif choice == "object":
        members[target] = npy(array.astype(object), allow_pickle=True)
        return f"{label}: object (pickled)"
    elif choice == "transpose":
        new = array.T.copy()
    elif choice == "flat":
        new = array.ravel()
    elif choice == "3d":
        new = array[None]
    elif choice == "empty":
        new = np.zeros((0, *array.shape[1:]))
    elif choice == "0d":
        new = np.array(1.0)
    elif choice == "fortran":
        new = np.asfortranarray(array)
    elif choice == "bigendian":
        new = array.astype(">f8")
    else:
        new = array.astype(np.float64).copy()
        if new.size:
            value = {
                "nan": np.nan,
                "inf": np.inf,
                "1e308": 1e308,
                "1e200": 1e200,
                "subnormal": 5e-324,
            }[choice]
            flat = new.reshape(-1)
            for _ in range(rng.randint(1, 3)):
                flat[rng.randrange(flat.size)] = value * rng.choice([1, -1])
    members[target] = npy(new)
    return f"{label}: {choice}"


BOMB_FLOATS = 2**25  # 256 MiB of zeros


@cache
def bomb_member() -> bytes:
    """A compressed .npy member: BOMB_FLOATS float64 zeros (256 MiB) in about 0.25 MiB."""

    import zlib

    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate, as in a zip member
    chunk = b"\0" * (1 << 22)
    parts = [compressor.compress(_npy_header_bytes())]
    for _ in range(BOMB_FLOATS * 8 // len(chunk)):
        parts.append(compressor.compress(chunk))
    parts.append(compressor.flush())
    return b"".join(parts)


def _write_with_bomb(path: Path, members: dict[str, bytes], target: str) -> None:
    """``members`` with ``target`` replaced by the pre-compressed bomb."""
    write_npz(path, {name: data for name, data in members.items() if name != target})
    crc, size = bomb_crc()
    _append_raw_member(path, target, bomb_member(), crc, size)


@cache
def _npy_header_bytes() -> bytes:
    import numpy as np

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (BOMB_FLOATS,)}
    )
    return header.getvalue()


@cache
def bomb_crc() -> tuple[int, int]:
    import zlib

    header = _npy_header_bytes()
    crc = zlib.crc32(header)
    chunk = b"\0" * (1 << 22)
    for _ in range(BOMB_FLOATS * 8 // len(chunk)):
        crc = zlib.crc32(chunk, crc)
    return crc, len(header) + BOMB_FLOATS * 8


def _append_raw_member(path: Path, name: str, payload: bytes, crc: int, size: int) -> None:
    """Rewrite the archive at ``path`` with one more member whose deflated bytes are
    ``payload`` (local header, data, then a new central directory)."""
    with zipfile.ZipFile(path) as archive:
        existing = [(info, archive.read(info.filename)) for info in archive.infolist()]
    out = io.BytesIO()
    central = []
    entries = [
        (info.filename, data, zipfile.ZIP_STORED, zlib_crc(data), len(data), len(data))
        for info, data in existing
    ]
    entries.append((name, payload, zipfile.ZIP_DEFLATED, crc, len(payload), size))
    for fname, data, method, crc32, csize, usize in entries:
        offset = out.tell()
        encoded = fname.encode("utf-8")
        out.write(
            struct.pack(
                "<4sHHHHHIIIHH",
                b"PK\x03\x04",
                20,
                0,
                method,
                0,
                0,
                crc32,
                csize,
                usize,
                len(encoded),
                0,
            )
        )
        out.write(encoded)
        out.write(data)
        central.append(
            struct.pack(
                "<4sHHHHHHIIIHHHHHII",
                b"PK\x01\x02",
                20,
                20,
                0,
                method,
                0,
                0,
                crc32,
                csize,
                usize,
                len(encoded),
                0,
                0,
                0,
                0,
                0,
                offset,
            )
            + encoded
        )
    start = out.tell()
    for entry in central:
        out.write(entry)
    end = out.tell()
    out.write(
        struct.pack(
            "<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(central), len(central), end - start, start, 0
        )
    )
    path.write_bytes(out.getvalue())


def zlib_crc(data: bytes) -> int:
    import zlib

    return zlib.crc32(data)


def mutate_model(rng: random.Random, base: dict, models: dict, target: Path) -> str:
    """Write a mutated copy of ``base``'s model file to ``target``; returns what changed."""
    import numpy as np

    raw = base["path"].read_bytes()
    roll = rng.random()
    if roll < 0.12:  # byte flips
        data = bytearray(raw)
        flips = []
        for _ in range(rng.randint(1, 8)):
            k = rng.randrange(len(data))
            value = rng.randrange(256)
            flips.append(f"@{k}={value}")
            data[k] = value
        target.write_bytes(bytes(data))
        return "byte flips " + " ".join(flips)
    if roll < 0.2:
        cut = rng.choice([0, 1, 4, 30, rng.randrange(len(raw)), len(raw) - 1, len(raw) - 22])
        target.write_bytes(raw[:cut])
        return f"truncated to {cut} of {len(raw)} bytes"
    members = npz_members(base["path"])
    header = json.loads(str(load_npy(members["header.npy"])))
    if roll < 0.5:
        if rng.random() < 0.55:
            what = _header_lie(rng, header, base, models)
        else:
            paths = [p for p in json_paths(header) if p]
            path = rng.choice(paths)
            if rng.random() < 0.3:
                set_path(header, path, DELETE)
                what = f"delete header{list(path)}"
            else:
                value = hostile_json(rng)
                set_path(header, path, value)
                what = f"header{list(path)} = {shorten(repr(value), 40)}"
        members["header.npy"] = npy(np.array(dump_header(header)))
        write_npz(target, members)
        return "header: " + what
    if roll < 0.62:
        choice = rng.choice(
            [
                "not-json",
                "json-list",
                "bytes",
                "2d",
                "int",
                "bom",
                "deep",
                "huge-string",
                "trailing",
                "nan",
            ]
        )
        text = json.dumps(header)
        value = {
            "not-json": np.array(text[: len(text) // 2]),
            "json-list": np.array(json.dumps([header])),
            "bytes": np.array(text.encode()),
            "2d": np.array([[text]]),
            "int": np.array(7),
            "bom": np.array("\ufeff" + text),
            "deep": np.array("[" * 100_000 + "]" * 100_000),
            "huge-string": np.array(json.dumps({**header, "source": "x" * 5_000_000})),
            "trailing": np.array(text + " garbage"),
            "nan": np.array(text.replace('"version": 1', '"version": NaN')),
        }[choice]
        members["header.npy"] = npy(value)
        write_npz(target, members)
        return f"header member: {choice}"
    if roll < 0.85:
        what = _array_mutation(rng, members)
        write_npz(target, members, compress=set(members) if rng.random() < 0.3 else set())
        return "array " + what
    choice = rng.choice(
        [
            "extra",
            "extra-declared",
            "missing",
            "missing-header",
            "non-npy",
            "dotdot",
            "duplicate",
            "huge-shape",
            "bomb",
            "empty-zip",
            "dir-entry",
        ]
    )
    names = [m for m in members if m != "header.npy"]
    if choice == "extra":
        members["junk.npy"] = npy(np.zeros(3))
    elif choice == "extra-declared":
        members["layer99.head0.w_q.npy"] = npy(np.zeros((1, 1)))
    elif choice == "missing":
        del members[rng.choice(names)]
    elif choice == "missing-header":
        del members["header.npy"]
    elif choice == "non-npy":
        members[rng.choice(names)] = b"this is not an npy file"
    elif choice == "dotdot":
        members["../../evil.npy"] = npy(np.zeros(2))
    elif choice == "duplicate":
        name = rng.choice(names)
        with zipfile.ZipFile(target, "w") as archive, quiet_warnings():
            for member, data in members.items():
                archive.writestr(zipfile.ZipInfo(member), data)
            archive.writestr(zipfile.ZipInfo(name), npy(np.zeros(1)))
        return f"members: duplicate {name}"
    elif choice == "huge-shape":
        name = rng.choice(names)
        header_bytes = io.BytesIO()
        shape = rng.choice([(2**40,), (2**31, 2**31), (10**6, 10**6)])
        np.lib.format.write_array_header_1_0(
            header_bytes, {"descr": "<f8", "fortran_order": False, "shape": shape}
        )
        members[name] = header_bytes.getvalue() + b"\0" * 64
        write_npz(target, members)
        return f"members: {name} claims shape {shape}"
    elif choice == "bomb":
        name = rng.choice(names)
        _write_with_bomb(target, members, name)
        return f"members: {name} is a 256 MiB compressed bomb"
    elif choice == "empty-zip":
        members = {}
    elif choice == "dir-entry":
        members["dir/"] = b""
    write_npz(target, members)
    return f"members: {choice}"


def fuzz_models(case: Case, rng: random.Random) -> None:
    models = base_models()
    name = rng.choice([*sorted(models), "permute8", "permute8"])  # permute8: sparse CSR
    base = models[name]
    target = workdir() / f"mutated-{case.index % 4}.npz"
    what = mutate_model(rng, base, models, target)
    case.repro.update({"base_model": name, "mutation": shorten(what, 300)})
    if case.dry:
        return
    if base["kind"] == "pcoc":
        run_args = ["run", str(target), base["input"]]
    else:
        run_args = ["run", str(target), base["input"]]
    invoke(case, "info", ["info", str(target)])
    invoke(case, "run", run_args)
    if rng.random() < 0.5 or base["kind"] == "crasp":
        invoke(case, "check", ["check", str(target), "--samples", "5", "--max-len", "8"])
