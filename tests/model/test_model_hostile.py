"""Hostile model files: crafted archives and headers that would crash the process, exhaust
its memory, or run a model other than the one the header describes.

Each is refused at load by a :class:`CraspError` (``invalid model file: ...``) naming the
member or the header field: never another exception, never a crash, never a silent run.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from crasp_compiler import CraspError, load_program
from crasp_compiler.cli import main
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.languages.pcoc.compile import compile_program as compile_pcoc
from crasp_compiler.languages.pcoc.program import load_program as load_pcoc
from crasp_compiler.model import model as model_module
from crasp_compiler.model import read_model, save_model
from crasp_compiler.model.features import check_feature
from crasp_compiler.model.model import Model
from tests.assemble.test_sparse_weights import assert_same_weights
from tests.model.test_model_file import (
    EXAMPLES,
    arrays_of,
    assert_same_model,
    compiled,
    refused,
    write,
)

PCOC = EXAMPLES.parent / "pcoc"
Edit = Callable[[dict, dict], object]


def file_of(tmp_path: Path, model: Model, edit: Edit | None = None) -> Path:
    """``model`` saved with ``edit(header, arrays)`` applied to its header and arrays."""
    arrays = arrays_of(model, tmp_path)
    header = json.loads(str(arrays.pop("header")))
    if edit is not None:
        edit(header, arrays)
    return write(tmp_path, {"header": np.array(json.dumps(header)), **arrays})


def crasp(*args) -> subprocess.CompletedProcess:
    """The ``crasp`` command in a fresh process (a crash shows as a signal exit status)."""
    command = [sys.executable, "-c", "from crasp_compiler.cli import main; main()"]
    return subprocess.run(
        command + [str(a) for a in args], capture_output=True, text=True, timeout=120
    )


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


# ---------------------------------------------------------------- sparse index arrays


@pytest.fixture
def sparse_arrays(monkeypatch, tmp_path) -> dict[str, np.ndarray]:
    """The arrays of dyck1 (heaviside) with every matrix stored in CSR form."""
    monkeypatch.setattr(model_module, "DENSE_LIMIT", 0)
    return arrays_of(compile_program(load_program(EXAMPLES / "dyck1.cr")), tmp_path)


W1 = "layer0.mlp.w1"


def test_unsigned_decreasing_indptr_exits_cleanly(sparse_arrays, tmp_path):
    """A decreasing uint64 indptr passed ``np.diff(indptr) >= 0`` (unsigned differences
    never go negative) and scipy read out of bounds."""
    indptr = sparse_arrays[f"{W1}.indptr"]
    assert len(indptr) >= 3
    bad = indptr.astype(np.uint64)
    bad[1] = indptr[-1]  # then falls back to indptr[2] < indptr[-1]
    assert bad[1] > bad[2]
    sparse_arrays[f"{W1}.indptr"] = bad
    path = write(tmp_path, sparse_arrays)
    for args in (("info", path), ("run", path, "( )"), ("check", path, "--samples", 5)):
        result = crasp(*args)
        assert result.returncode == 1, (args, result.returncode, result.stderr)
        assert "invalid model file" in result.stderr
        assert f"{W1}.indptr" in result.stderr and "uint64" in result.stderr
        assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("part", "dtype"),
    [
        ("indptr", np.uint64),
        ("indptr", np.uint32),
        ("indices", np.uint64),
        ("indptr", np.int16),
        ("indices", np.int8),
    ],
    ids=str,
)
def test_index_arrays_must_be_int32_or_int64(sparse_arrays, tmp_path, part, dtype):
    sparse_arrays[f"{W1}.{part}"] = sparse_arrays[f"{W1}.{part}"].astype(dtype)
    refused(write(tmp_path, sparse_arrays), f"{W1}.{part}", "int32 or int64")


def test_int32_index_arrays_load(sparse_arrays, tmp_path):
    want = read_model(write(tmp_path, sparse_arrays, "good.npz"))
    for name in list(sparse_arrays):
        if name.endswith((".indices", ".indptr")):
            sparse_arrays[name] = sparse_arrays[name].astype(np.int32)
    got = read_model(write(tmp_path, sparse_arrays))
    assert got.is_sparse()
    assert_same_weights(got, want)


def test_indptr_whose_differences_wrap_is_refused(sparse_arrays, tmp_path):
    """Signed int64 differences wrap too: 0, 2^63 - 1, -2, 12 has no negative
    difference in int64 arithmetic."""
    indptr = sparse_arrays[f"{W1}.indptr"]
    bad = indptr.astype(np.int64)
    bad[1], bad[2] = 2**63 - 1, -2
    assert bool(np.all(np.diff(bad) >= 0))  # the old test passed it
    sparse_arrays[f"{W1}.indptr"] = bad
    refused(write(tmp_path, sparse_arrays), f"sparse matrix {W1!r} is malformed")


# ---------------------------------------------------------------- sizes and memory


def npy(shape: tuple[int, ...], data: bytes = b"", descr: str = "<f8") -> bytes:
    """A ``.npy`` member: a version 1.0 header for ``shape`` followed by ``data``."""
    buffer = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue() + data


def zipped(
    tmp_path: Path, arrays: dict[str, np.ndarray], raw: dict[str, bytes], deflate: bool = False
) -> Path:
    """An ``.npz`` of ``arrays`` plus members given as raw bytes (``name`` -> ``name.npy``)."""
    path = tmp_path / "crafted.npz"
    method = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=method) as archive:
        for name, array in arrays.items():
            if name not in raw:
                buffer = io.BytesIO()
                np.save(buffer, array)
                archive.writestr(f"{name}.npy", buffer.getvalue())
        for name, data in raw.items():
            archive.writestr(f"{name}.npy", data)
    return path


def test_member_declaring_a_huge_array(tmp_path):
    """A 10^12 x 10^12 shape in a few bytes: refused before anything is allocated."""
    arrays = arrays_of(compiled("dyck1.cr"), tmp_path)
    path = zipped(tmp_path, arrays, {"w_e": npy((10**12, 10**12), b"\0" * 64)})
    assert path.stat().st_size < 100_000
    refused(
        path, "invalid model file", "'w_e'", "(1000000000000, 1000000000000)", f"{8 * 10**24:,}"
    )


def test_member_whose_size_does_not_match_its_header(tmp_path):
    arrays = arrays_of(compiled("dyck1.cr"), tmp_path)
    w_e = arrays["w_e"]
    extra = npy(w_e.shape, w_e.tobytes() + b"\0" * 4096)
    refused(zipped(tmp_path, arrays, {"w_e": extra}), "'w_e'", "bytes")
    short = npy(w_e.shape, w_e.tobytes()[:-8])
    refused(zipped(tmp_path, arrays, {"w_e": short}), "'w_e'", "bytes")


def test_unsupported_npy_header(tmp_path):
    arrays = arrays_of(compiled("dyck1.cr"), tmp_path)
    data = bytearray(npy(arrays["w_e"].shape, arrays["w_e"].tobytes()))
    data[6] = 9  # format version 9.0
    refused(zipped(tmp_path, arrays, {"w_e": bytes(data)}), "'w_e'", "not a .npy array")


@pytest.mark.parametrize(("flag", "method"), [(1, None), (0, 99)], ids=["encrypted", "method"])
def test_member_that_zipfile_cannot_open(tmp_path, flag, method):
    """Encrypted members and unknown compression methods: refused, not a traceback."""
    save_model(compiled("dyck1.cr"), tmp_path / "good.npz")
    data = bytearray((tmp_path / "good.npz").read_bytes())
    start = 0
    while (start := data.find(b"PK\x01\x02", start) + 1) > 0:  # central directory entries
        data[start + 7] |= flag
        if method is not None:
            data[start + 9 : start + 11] = method.to_bytes(2, "little")
    path = tmp_path / "odd.npz"
    path.write_bytes(bytes(data))
    refused(path, "cannot read model file")


def padded(tmp_path: Path, size: int) -> Path:
    """dyck1 plus a compressed member of ``size`` zero bytes."""
    arrays = arrays_of(compiled("dyck1.cr"), tmp_path)
    arrays["pad"] = np.zeros(size // 8)
    path = tmp_path / "padded.npz"
    np.savez_compressed(path, **arrays)
    return path


def test_total_size_above_the_budget(tmp_path, monkeypatch):
    path = padded(tmp_path, 2 << 20)
    assert path.stat().st_size < 100_000
    refused(path, "unexpected array(s)", "'pad'")  # within the default budget
    with pytest.raises(CraspError, match="invalid model file") as err:
        read_model(path, max_bytes=1_000_000)
    message = str(err.value)
    assert "1,000,000" in message and f"{(2 << 20) + 128:,}" in message and "'pad'" in message
    assert "CRASP_MAX_MODEL_BYTES" in message
    monkeypatch.setenv("CRASP_MAX_MODEL_BYTES", "1000000")
    refused(path, "1,000,000", "CRASP_MAX_MODEL_BYTES")
    good = tmp_path / "good.npz"
    save_model(compiled("dyck1.cr"), good)
    assert_same_model(read_model(good), compiled("dyck1.cr"))
    for bad in ("lots", "-5", "0", "1e9"):
        monkeypatch.setenv("CRASP_MAX_MODEL_BYTES", bad)
        with pytest.raises(CraspError, match="CRASP_MAX_MODEL_BYTES"):
            read_model(good)
    monkeypatch.delenv("CRASP_MAX_MODEL_BYTES")
    for bad in (0, -1, 2.5, True):
        with pytest.raises(CraspError, match="max_bytes"):
            read_model(good, max_bytes=bad)


def test_compressed_zeros_far_above_a_low_budget(tmp_path):
    """A member of zeros that deflates a thousandfold: refused from the declared sizes,
    by the budget or by its compression ratio, before it is decompressed."""
    path = padded(tmp_path, 64 << 20)
    assert path.stat().st_size < 200_000
    refused(path, "'pad'", "compress", f"{(64 << 20) + 128:,}")
    with pytest.raises(CraspError, match="budget") as err:
        read_model(path, max_bytes=4 << 20)
    assert "'pad'" in str(err.value) and f"{4 << 20:,}" in str(err.value)


# ---------------------------------------------------------------- header values


@pytest.mark.parametrize(
    "feature",
    [
        f"periodic:{10**30}:1",
        "onehot:99999999999999999999",
        f"onehot:{2**31}",
        f"ao:{10**30}:4:1:0",
        f"ao:1:{10**30}:1:0",
        f"ao:1:4:1:{10**30}",
        f"ao:1:4:1:-{10**30}",
        "ao:1:0:0:0",
    ],
)
def test_huge_feature_integers(tmp_path, feature):
    with pytest.raises(ValueError, match="positional feature"):
        check_feature(feature)
    refused(file_of(tmp_path, compiled("aa_star.crasp"), _feature(feature)), repr(feature))


def _feature(name: str) -> Edit:
    def edit(header, arrays):
        header["features"][0] = name

    return edit


def test_largest_feature_integers_are_accepted():
    for name in (f"onehot:{2**31 - 1}", f"periodic:{2**31 - 1}:5", f"ao:7:{2**31 - 1}:3:-9"):
        check_feature(name)


def _head(key, value) -> Edit:
    def edit(header, arrays):
        header["layers"][0]["heads"][0][key] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (_head("bias", {"99999999999999999999": 1.0}), "bias offset"),
        (_head("bias", {str(2**31): 1.0}), "bias offset"),
        (_head("bias", {"1": 10**400}), "bias or scale"),
        (_head("scale", 10**400), "bias or scale"),
        (_head("scale", -(10**400)), "bias or scale"),
    ],
)
def test_huge_head_numbers(tmp_path, edit, fragment):
    message = refused(file_of(tmp_path, compiled("dyck1.cr"), edit), "invalid model file")
    assert fragment in message and "layer 1 head 1" in message


def _raw_header(tmp_path: Path, text: str) -> Path:
    arrays = arrays_of(compiled("dyck1.cr"), tmp_path)
    arrays["header"] = np.array(text)
    return write(tmp_path, arrays)


@pytest.mark.parametrize("depth", [100_000, 1_000])
def test_deeply_nested_header(tmp_path, depth):
    header = json.loads(str(arrays_of(compiled("dyck1.cr"), tmp_path)["header"]))
    text = json.dumps(header)[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}"
    refused(_raw_header(tmp_path, text), "invalid model file", "nest")
    if depth > 10_000:  # too deep for json: the field is found without parsing
        refused(_raw_header(tmp_path, text), "deeper than 64 levels (in field deep[0][0]")


def test_header_nesting_of_real_models_is_accepted(tmp_path):
    header = json.loads(str(arrays_of(compiled("dyck1.cr"), tmp_path)["header"]))
    header["info"]["deep"] = json.loads("[" * 20 + "]" * 20)
    read_model(_raw_header(tmp_path, json.dumps(header)))


# ---------------------------------------------------------------- header fields by schema


def _definitions(value) -> Edit:
    return lambda h, a: h["info"].update(definitions=value)


@pytest.mark.parametrize(
    "definitions",
    [
        {"D": 1},
        ["D"],
        "D",
        7,
        True,
        [["D", {"D": 1}]],
        {"D": ["D", 1]},
        {"D": {"D": "1"}},
        {"D": {"D": True}},
        {"D": {"D": None}},
        {"D": {"D": [1]}},
        {"D": {"D": {"x": 1}}},
        {"D": {"D": float("nan")}},
        {"D": {"D": float("inf")}},
        {"D": {"D": -float("inf")}},
        {"D": {"D": 10**400}},
        {"C_open": {"C_open": 1}, "D": {"D": 1, "V": "2"}},
    ],
    ids=repr,
)
def test_malformed_definitions_are_refused(tmp_path, definitions):
    """``info.definitions`` (read by ``crasp info`` and ``crasp show``) once reached them
    unchecked: a number for a form was an AttributeError, a string coefficient a
    ValueError, a huge one an OverflowError."""
    path = file_of(tmp_path, compiled("dyck1.cr"), _definitions(definitions))
    message = refused(path, "invalid model file", "header field info 'definitions'")
    assert "residual form" in message
    for args in (("info", path), ("show", path, "( )", "-o", tmp_path / "x.html")):
        result = cli(*args)
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert "info 'definitions'" in result.stderr and str(path) in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "x.html").exists()


def test_wellformed_definitions_are_shown(tmp_path):
    forms = {"D": {"D": 1}, "V": {"C_open": 1e300, "C_close": -3}, "E": {}}
    path = file_of(tmp_path, compiled("dyck1.cr"), _definitions(forms))
    assert read_model(path).info["definitions"] == forms
    result = cli("info", path)
    assert result.exit_code == 0, result.output
    assert "V = 1e+300·C_open - 3·C_close" in result.output
    assert cli("info", file_of(tmp_path, compiled("dyck1.cr"), _definitions(None))).exit_code == 0


@pytest.mark.parametrize("version", [True, 5.0, "5", [5], None, 0, 6], ids=repr)
def test_the_version_is_an_integer(tmp_path, version):
    """``true == 1`` in Python: a JSON true read as version 1 (and its BOS conversion)."""
    path = file_of(tmp_path, compiled("dyck1.cr"), lambda h, a: h.update(version=version))
    refused(path, "invalid model file", f"unsupported format version {version!r}")


@pytest.mark.parametrize(
    ("provenance", "fragment"),
    [
        ([], "is not null or an object with exactly 'language', 'mode' and 'size'"),
        ({"language": "C-RASP"}, "exactly 'language', 'mode' and 'size'"),
        ({"language": 3, "mode": None, "size": None}, "'language' is not a name"),
        ({"language": "C-RASP", "mode": 1, "size": None}, "'mode' is not a name or null"),
        ({"language": "C-RASP", "mode": None, "size": 0}, "'size' is not null or an integer"),
        ({"language": "C-RASP", "mode": None, "size": True}, "'size' is not null or an integer"),
        ({"language": "Brainfuck", "mode": None, "size": None}, "provenance is 'Brainfuck'"),
        ({"language": "PCOC", "mode": "hard", "size": 4}, "but the model's provenance is 'PCOC'"),
    ],
    ids=repr,
)
def test_a_bad_provenance_is_refused_by_its_field(tmp_path, provenance, fragment):
    path = file_of(tmp_path, compiled("dyck1.cr"), lambda h, a: h.update(provenance=provenance))
    refused(path, "invalid model file", fragment)


def _output(key, value) -> Edit:
    return lambda h, a: h["outputs"][0].update({key: value})


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda h, a: h["vocab"].append(7), "'vocab' must list strings"),
        (lambda h, a: h["vocab"].__setitem__(1, None), "'vocab' must list strings"),
        (lambda h, a: h["residual"].__setitem__(0, 0), "'residual' must list strings"),
        (lambda h, a: h.update(features=[["onehot", 1]]), "'features' must list strings"),
        (_output("name", None), "output 0 is malformed"),
        (_output("name", 3), "output 0 is malformed"),
        (_head("label", ["L"]), "label is not a string"),
        (_head("bias", {"1_0": 1.0}), "malformed bias or scale"),
        (_head("bias", {" 1": 1.0}), "malformed bias or scale"),
        (_head("bias", {"+1": 1.0}), "malformed bias or scale"),
        (_head("bias", {"1.0": 1.0}), "malformed bias or scale"),
        (_head("bias", {"01": 1.0}), "malformed bias or scale"),
        (_head("bias", {"1": "1.5"}), "malformed bias or scale"),
        (_head("bias", {"1": True}), "malformed bias or scale"),
        (_head("bias", [[1, 1.0]]), "malformed bias or scale"),
        (_head("bias", {"1": float("nan")}), "non-finite bias or scale"),
        (_head("bias", {"9" * 200: 1.0}), "malformed bias or scale"),
        (_head("bias", {"9" * 30: 1.0}), "bias offset is beyond"),
        (_head("scale", "2"), "malformed bias or scale"),
        (_head("scale", True), "malformed bias or scale"),
        (_head("scale", None), "malformed bias or scale"),
        (_head("scale", float("inf")), "non-finite bias or scale"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_header_values_of_the_wrong_type(tmp_path, edit, fragment):
    """Values once converted with ``str``/``int``/``float`` (a number for a token, a
    string for a scale, ``"1_0"`` for offset 10) are refused, naming the field."""
    message = refused(file_of(tmp_path, compiled("dyck1.cr"), edit), "invalid model file")
    assert fragment in message, message


def test_an_integer_scale_loads_as_a_float(tmp_path):
    model = read_model(file_of(tmp_path, compiled("dyck1.cr"), _head("scale", 3)))
    assert model.layers[0].heads[0].scale == 3.0
    assert type(model.layers[0].heads[0].scale) is float


def test_huge_guarantee_numbers(tmp_path):
    """``math.isfinite(10**400)`` raises OverflowError, which reached the user."""
    model = compile_pcoc(load_pcoc(PCOC / "cumsum.pcoc"), 4)
    assert model.guarantee.input_bounds

    def bounds(header, arrays):
        header["guarantee"]["input_bounds"] = dict.fromkeys(
            header["guarantee"]["input_bounds"], 10**400
        )

    refused(file_of(tmp_path, model, bounds), "'input_bounds'")

    def errors(header, arrays):
        header["guarantee"]["errors"] = {"float64": -(10**400)}

    refused(file_of(tmp_path, model, errors), "'errors'")


# ---------------------------------------------------------------- PCOC info


def pcoc(name: str = "compare_vectors.pcoc", n: int = 4, mode: str = "hard") -> Model:
    return compile_pcoc(load_pcoc(PCOC / name), n, mode=mode)


def _info(key, value) -> Edit:
    def edit(header, arrays):
        if value is _DROP:
            header["info"].pop(key)
        else:
            header["info"][key] = value

    return edit


def _options(key, value) -> Edit:
    def edit(header, arrays):
        if value is _DROP:
            header["options"].pop(key)
        else:
            header["options"][key] = value

    return edit


_DROP = object()


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (_info("n", _DROP), "'n'"),
        (_info("n", "4"), "'n'"),
        (_info("n", True), "'n'"),
        (_info("n", 0), "'n'"),
        (_info("n", 10**30), "'n'"),
        (_info("n", 5), "guarantee"),
        (_options("n", 5), "'n'"),
        (_info("pcoc_inputs", ["b", "a"]), "pcoc_inputs"),
        (_info("pcoc_inputs", "a b"), "pcoc_inputs"),
        (_info("pcoc_inputs", _DROP), "pcoc_inputs"),
        (_info("pcoc_outputs", ["m"]), "pcoc_outputs"),
        (_info("pcoc_outputs", [1, 2]), "pcoc_outputs"),
        (_info("slots", ["a", "b", "m"]), "slots"),
        (_info("slots", None), "slots"),
        (_options("mode", "turbo"), "mode"),
        (_options("language", "C-RASP"), "language"),
        (lambda h, a: h.update(vocab=["<bos>", "x"]), "vocab"),
        (lambda h, a: h.update(accept="m"), "accept"),
        (lambda h, a: h["outputs"][0].update(rule="bool"), "rule"),
        (_info("tolerance", "0.1"), "info 'tolerance'"),
        (_info("tolerance", float("nan")), "info 'tolerance'"),
        (_info("tolerance", -1), "info 'tolerance'"),
        (_options("tolerance", True), "options 'tolerance'"),
        (_info("rounding_estimate", 5), "rounding_estimate"),
        (_info("rounding_estimate", {"float64": "x"}), "rounding_estimate"),
        (_info("rounding_estimate", {"float16": 1.0}), "rounding_estimate"),
        (_info("rounding_estimate", {"float64": 10**400}), "rounding_estimate"),
        (_info("temperature", float("nan")), "temperature"),
        (_info("temperature", 0), "temperature"),
        (_info("temperature", True), "temperature"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_pcoc_info(tmp_path, edit, fragment):
    message = refused(file_of(tmp_path, pcoc(), edit), "invalid model file")
    assert fragment in message, message


def test_pcoc_models_load(tmp_path):
    for model in (pcoc(), pcoc("cumsum.pcoc", 8, "softmax"), pcoc("sort.pcoc", 4)):
        assert_same_model(read_model(file_of(tmp_path, model)), model)


def test_pcoc_run_refuses_a_model_without_n(tmp_path):
    path = file_of(tmp_path, pcoc(), _info("n", _DROP))
    result = cli("run", path, "1 2 3 4 5 6 7 8")
    assert result.exit_code == 1, result.output
    assert "invalid model file" in result.stderr and "'n'" in result.stderr


# ---------------------------------------------------------------- source and language


def _source(text: str) -> Edit:
    return lambda h, a: h.update(source=text)


def test_swapped_source(tmp_path):
    crasp_text = (EXAMPLES / "dyck1.cr").read_text()
    pcoc_text = (PCOC / "cumsum.pcoc").read_text()
    other = (EXAMPLES / "tomita4.crasp").read_text()  # alphabet 0 1, like majority
    refused(file_of(tmp_path, compiled("dyck1.cr"), _source(pcoc_text)), "'source'", "C-RASP")
    refused(file_of(tmp_path, compiled("dyck1.cr"), _source(other)), "'source'", "C-RASP")
    refused(file_of(tmp_path, pcoc("cumsum.pcoc"), _source(crasp_text)), "'source'", "PCOC")
    refused(file_of(tmp_path, compiled("majority.crasp"), _source(other)), "'source'", "outputs")
    refused(file_of(tmp_path, pcoc(), _source(pcoc_text)), "'source'", "inputs")
    path = file_of(tmp_path, compiled("majority.crasp"), _source(other))
    result = cli("check", path, "--samples", 5)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "invalid model file" in result.stderr and "'source'" in result.stderr


def test_run_reads_the_weights_not_the_source(tmp_path):
    """``crasp run`` loads with ``check_source=False``: a swapped source is not parsed
    (and the run is the weights' own), while the other header checks still refuse."""
    other = (EXAMPLES / "tomita4.crasp").read_text()
    for folder in ("good", "swapped", "lying"):
        (tmp_path / folder).mkdir()
    good = file_of(tmp_path / "good", compiled("majority.crasp"))
    swapped = file_of(tmp_path / "swapped", compiled("majority.crasp"), _source(other))
    refused(swapped, "'source'", "outputs")
    assert read_model(swapped, check_source=False).source == other
    for text in ("1 1 0", "0 0 1", "1"):
        result = cli("run", swapped, text)
        assert result.exit_code == 0, result.output
        assert result.output == cli("run", good, text).output
    path = file_of(tmp_path, pcoc(), _source((PCOC / "cumsum.pcoc").read_text()))
    assert read_model(path, check_source=False).inputs == pcoc().inputs
    lying = file_of(tmp_path / "lying", compiled("majority.crasp"), _options("mode", "sigmoid"))
    with pytest.raises(CraspError, match="mode"):
        read_model(lying, check_source=False)


@pytest.mark.parametrize("language", ["Python", 3, ""])
def test_unknown_language(tmp_path, language):
    refused(file_of(tmp_path, compiled("dyck1.cr"), _info("language", language)), "language")


# ---------------------------------------------------------------- headers that lie


@pytest.fixture(scope="module")
def relu30() -> Model:
    return compile_program(load_program(EXAMPLES / "dyck1.cr"), mode="relu", max_len=30)


def _guarantee(max_len) -> Edit:
    return lambda h, a: h["guarantee"].update(max_len=max_len)


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (_guarantee(None), "guarantee"),
        (_guarantee(31), "guarantee"),
        (_guarantee(64), "guarantee"),
        (_options("max_len", None), "max_len"),
        (_options("max_len", "30"), "max_len"),
        (_options("max_len", 30.0), "max_len"),
        (_options("mode", "sigmoid"), "mode"),
        (_options("mode", None), "mode"),
        (_options("mode", _DROP), "mode"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_header_that_lies_about_its_guarantee(tmp_path, relu30, edit, fragment):
    message = refused(file_of(tmp_path, relu30, edit), "invalid model file")
    assert fragment in message, message


def test_a_relu_model_may_claim_less_than_its_max_len(tmp_path, relu30):
    """What a lens export with a shorter context writes: the guarantee within max_len."""

    def shorter(header, arrays):
        header["guarantee"].update(max_len=12, dtypes={"float64": 12, "float32": 12})

    assert read_model(file_of(tmp_path, relu30, shorter)).guarantee.max_len == 12


def test_unlimited_guarantee_of_a_relu_model_is_not_run(tmp_path, relu30):
    path = file_of(tmp_path, relu30, _guarantee(None))
    result = cli("run", path, "( " * 20 + ") " * 20)
    assert result.exit_code == 1 and "invalid model file" in result.stderr


def test_pcoc_guarantee_must_match_n(tmp_path):
    refused(file_of(tmp_path, pcoc(), _guarantee(None)), "guarantee")
    refused(file_of(tmp_path, pcoc(), _guarantee(8)), "guarantee")


@pytest.mark.parametrize(
    "destinations",
    ["d", ["y"], ["d", "d"], [1], [None], {"d": True}, [["d"]]],
    ids=["string", "not-an-input", "twice", "number", "null", "mapping", "nested"],
)
def test_malformed_send_destinations_are_refused(tmp_path, destinations):
    """The send check a PCOC guarantee records (``destinations``, distinct numeric
    inputs) is validated like the input bounds: a hostile value is one clear error."""
    model = compile_pcoc(load_pcoc(PCOC.parent / "pcoc_sends" / "permute.pcoc"), 2)
    assert model.guarantee.destinations == ["d"]

    def edit(header, arrays):
        header["guarantee"]["destinations"] = destinations

    refused(file_of(tmp_path, model, edit), "'destinations' must list distinct numeric inputs")


@pytest.mark.parametrize(
    "capacities",
    [{"d": 1}, {"d": 17}, {"d": 2.0}, {"d": "2"}, {"x": 2}, {"nope": 2}, [2], {"d": True}],
    ids=["one", "over-max", "float", "string", "not-a-destination", "unknown", "list", "bool"],
)
def test_malformed_send_capacities_are_refused(tmp_path, capacities):
    """The capacity a PCOC guarantee records for a destination (``capacities``, an
    integer 2..16 per recorded destination) is validated: a hostile value is one clear
    error."""
    model = compile_pcoc(load_pcoc(PCOC.parent / "pcoc_sends" / "pairs.pcoc"), 2)
    assert model.guarantee.capacities == {"d": 2}

    def edit(header, arrays):
        header["guarantee"]["capacities"] = capacities

    refused(file_of(tmp_path, model, edit), "'capacities' must map send destinations")


def test_consistent_headers_load(tmp_path, relu30):
    assert_same_model(read_model(file_of(tmp_path, relu30)), relu30)

    # a heaviside model may claim less than it could (a guarantee up to a length)
    def weaker_guarantee(header, arrays):
        header["guarantee"].update(max_len=12)
        header["guarantee"].pop("dtypes", None)

    weaker = file_of(tmp_path, compiled("dyck1.cr"), weaker_guarantee)
    assert read_model(weaker).guarantee.max_len == 12
