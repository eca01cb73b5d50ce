"""What the cases in one worker share: a scratch folder, models compiled once, and the
reading and writing of model-file (npz) members."""

from __future__ import annotations

import io
import tempfile
import zipfile
from functools import cache
from pathlib import Path

from tests.fuzz import ROOT


@cache
def workdir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="crasp-fuzz-"))
    return path


@cache
def base_models() -> dict[str, dict]:
    """Models compiled from a few examples, saved once per worker:
    name -> {path, input (argv for run), kind}."""
    from crasp_compiler import load_program
    from crasp_compiler.languages.crasp.compile import compile_program
    from crasp_compiler.languages.pcoc.compile import compile_program as compile_pcoc
    from crasp_compiler.languages.pcoc.program import load_program as load_pcoc
    from crasp_compiler.model import save_model

    out = {}
    specs = [
        ("dyck1", "examples/crasp/dyck1.cr", dict(mode="heaviside"), "( ( ) )"),
        ("c_near_a_ln", "examples/crasp/c_near_a.cr", dict(mode="layernorm"), None),
        ("aa_star_relu8", "examples/crasp/aa_star.crasp", dict(mode="relu", max_len=8), None),
    ]
    for name, path, options, line in specs:
        program = load_program(ROOT / path)
        model = compile_program(program, **options)
        target = workdir() / f"{name}.npz"
        save_model(model, target)
        if line is None:
            line = " ".join(program.alphabet[k % len(program.alphabet)] for k in range(4))
        out[name] = {"path": target, "input": line, "kind": "crasp", "alphabet": program.alphabet}
    pcoc_specs = [
        ("cumsum4", "examples/pcoc/cumsum.pcoc", 4, "hard"),
        ("sort4_softmax", "examples/pcoc/sort.pcoc", 4, "softmax"),
        ("permute8", "examples/pcoc_sends/permute.pcoc", 8, "hard"),  # sparse matrices
    ]
    for name, path, n, mode in pcoc_specs:
        program = load_pcoc(ROOT / path)
        model = compile_pcoc(program, n, mode=mode)
        target = workdir() / f"{name}.npz"
        save_model(model, target)
        vectors = workdir() / f"{name}.txt"
        if name == "permute8":
            vectors.write_text(
                " ".join(str(v) for v in range(n))
                + " "
                + " ".join(str((v + 3) % n) for v in range(n))
                + "\n"
            )
        else:
            vectors.write_text(" ".join(str(v * 3 - 5) for v in range(n)) + "\n")
        out[name] = {"path": target, "input": str(vectors), "kind": "pcoc", "n": n, "program": path}
    return out


def npz_members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {info.filename: archive.read(info.filename) for info in archive.infolist()}


def npy(array, allow_pickle: bool = False) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.asanyarray(array), allow_pickle=allow_pickle)
    return buffer.getvalue()


def load_npy(data: bytes):
    import numpy as np

    return np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)


def write_npz(path: Path, members: dict[str, bytes], compress: set[str] = frozenset()) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            kind = zipfile.ZIP_DEFLATED if name in compress else zipfile.ZIP_STORED
            archive.writestr(zipfile.ZipInfo(name), data, compress_type=kind)
