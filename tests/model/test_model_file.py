"""Model files: save/load round trips, and every kind of bad file refused cleanly.

A bad file must raise :class:`CraspError` (never another exception) with a message that
says what is wrong; the archive is read with ``allow_pickle=False``, so a pickled object
inside it is refused without being unpickled.
"""

from __future__ import annotations

import functools
import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from crasp_compiler import CraspError, load_program
from crasp_compiler.languages.crasp.compile import compile_program
from crasp_compiler.model import read_model, save_model
from crasp_compiler.model.io import VERSION
from crasp_compiler.model.model import HeadKind, Model, derive_kinds, head_kinds
from crasp_compiler.runtime.numpy_exec import run_tokens
from tests.support.strategies import all_inputs, random_inputs, random_program

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "crasp"
EXAMPLE_FILES = sorted(p.name for p in EXAMPLES.iterdir() if p.suffix in (".cr", ".crasp"))


@functools.cache
def compiled(name: str, mode: str = "heaviside") -> Model:
    return compile_program(
        load_program(EXAMPLES / name), mode=mode, max_len=64 if mode == "relu" else None
    )


def assert_same_model(a: Model, b: Model) -> None:
    """Every array bit-for-bit equal and every header field equal."""
    np.testing.assert_array_equal(a.w_e, b.w_e)
    np.testing.assert_array_equal(a.w_p, b.w_p)
    assert a.w_p.shape == b.w_p.shape
    assert (a.vocab, a.features, a.residual) == (b.vocab, b.features, b.residual)
    assert a.inputs == b.inputs
    np.testing.assert_array_equal(a.numeric_weights, b.numeric_weights)
    assert a.numeric_weights.shape == b.numeric_weights.shape
    assert (a.accept, a.options, a.source, a.info) == (b.accept, b.options, b.source, b.info)
    assert a.guarantee == b.guarantee
    assert len(a.layers) == len(b.layers)
    for la, lb in zip(a.layers, b.layers, strict=True):
        assert len(la.heads) == len(lb.heads)
        for ha, hb in zip(la.heads, lb.heads, strict=True):
            for key in ("w_q", "w_k", "w_v", "w_o"):
                np.testing.assert_array_equal(getattr(ha, key), getattr(hb, key))
                assert getattr(ha, key).shape == getattr(hb, key).shape
            assert (ha.scale, ha.bias, ha.weighting, ha.mask, ha.label) == (
                hb.scale,
                hb.bias,
                hb.weighting,
                hb.mask,
                hb.label,
            )
        assert (la.mlp is None) == (lb.mlp is None)
        if la.mlp is not None:
            for key in ("w1", "b1", "w2", "b2"):
                np.testing.assert_array_equal(getattr(la.mlp, key), getattr(lb.mlp, key))
            assert la.mlp.activations == lb.mlp.activations
            assert la.mlp.labels == lb.mlp.labels
            assert la.mlp.norm_groups == lb.mlp.norm_groups
    assert [(o.name, o.rule) for o in a.outputs] == [(o.name, o.rule) for o in b.outputs]
    for oa, ob in zip(a.outputs, b.outputs, strict=True):
        np.testing.assert_array_equal(oa.weights, ob.weights)
    assert a.parameter_count() == b.parameter_count()
    assert head_kinds(a) == head_kinds(b)


def assert_same_outputs(a: Model, b: Model, words: list[list[str]]) -> None:
    ra, rb = run_tokens(a, words), run_tokens(b, words)
    for out in a.outputs:
        np.testing.assert_array_equal(ra.outputs[out.name], rb.outputs[out.name])
        np.testing.assert_array_equal(ra.values[out.name], rb.values[out.name])


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("mode", ["heaviside", "relu", "layernorm"])
@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_round_trip_examples(tmp_path, name, mode):
    model = compiled(name, mode)
    path = tmp_path / "model.npz"
    save_model(model, path)
    again = read_model(path)
    assert_same_model(model, again)
    symbols = model.vocab[1:]
    words = [[], symbols, symbols[::-1] * 5, (symbols * 11)[:30]]
    assert_same_outputs(model, again, words)
    # saving the loaded model again gives an identical model
    save_model(again, tmp_path / "again.npz")
    assert_same_model(model, read_model(str(tmp_path / "again.npz")))


@pytest.mark.parametrize("seed", range(12))
def test_round_trip_random_programs(tmp_path, seed):
    program = random_program(seed, max_definitions=6)
    mode = ("heaviside", "relu", "layernorm")[seed % 3]
    model = compile_program(program, mode=mode, max_len=12 if mode == "relu" else None)
    save_model(model, tmp_path / "m.npz")
    again = read_model(tmp_path / "m.npz")
    assert_same_model(model, again)
    words = all_inputs(program, 3) + random_inputs(program, seed, count=20, max_len=12)
    assert_same_outputs(model, again, words)


def test_file_layout(tmp_path):
    """The archive holds a JSON header and float64 arrays named as documented."""
    model = compiled("induction_head.crasp")
    save_model(model, tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz", allow_pickle=False) as data:
        header = json.loads(str(data["header"]))
        names = set(data.files)
        assert all(data[n].dtype == np.float64 for n in names - {"header"})
    assert header["format"] == "crasp-model"
    assert header["version"] == VERSION
    assert header["vocab"][0] == "<bos>"
    assert {"w_e", "w_p", "output0.weights", "layer0.head0.w_q", "layer0.mlp.w1"} <= names
    heads = sum(len(layer["heads"]) for layer in header["layers"])
    mlps = sum(layer["mlp"] is not None for layer in header["layers"])
    assert len(names) == 1 + 2 + 4 * heads + 4 * mlps + len(header["outputs"])


# ---------------------------------------------------------------- bad files


def arrays_of(model: Model, tmp_path: Path) -> dict[str, np.ndarray]:
    path = tmp_path / "good.npz"
    save_model(model, path)
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def write(tmp_path: Path, arrays: dict, name: str = "bad.npz") -> Path:
    path = tmp_path / name
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)
    return path


def edited(tmp_path: Path, edit: Callable[[dict, dict], None], name: str = "dyck1.cr") -> Path:
    """A file of the compiled example with ``edit(header, arrays)`` applied."""
    arrays = arrays_of(compiled(name), tmp_path)
    header = json.loads(str(arrays.pop("header")))
    edit(header, arrays)
    return write(tmp_path, {"header": np.array(json.dumps(header)), **arrays})


def refused(path: Path, *fragments: str) -> str:
    with pytest.raises(CraspError) as info:
        read_model(path)
    message = str(info.value)
    assert str(path) in message
    assert "Traceback" not in message
    assert "model file" in message
    for fragment in fragments:
        assert fragment in message, message
    return message


@pytest.mark.parametrize("keep", [0, 3, 4, 30, 0.25, 0.5, 0.75, -22, -1])
def test_truncated_file(tmp_path, keep):
    save_model(compiled("dyck1.cr"), tmp_path / "good.npz")
    data = (tmp_path / "good.npz").read_bytes()
    cut = int(len(data) * keep) if isinstance(keep, float) else keep % len(data)
    path = tmp_path / "bad.npz"
    path.write_bytes(data[:cut])
    refused(path)


def test_corrupted_bytes(tmp_path):
    save_model(compiled("dyck1.cr"), tmp_path / "good.npz")
    data = bytearray((tmp_path / "good.npz").read_bytes())
    for k in range(len(data) // 3, len(data) // 3 + 40):
        data[k] ^= 0xFF
    path = tmp_path / "bad.npz"
    path.write_bytes(bytes(data))
    refused(path)


def test_corrupted_compressed_archive(tmp_path):
    arrays = arrays_of(compiled("dyck1.cr"), tmp_path)
    path = tmp_path / "compressed.npz"
    np.savez_compressed(path, **arrays)
    assert_same_model(compiled("dyck1.cr"), read_model(path))
    data = bytearray(path.read_bytes())
    for k in range(200, 260):
        data[k] ^= 0xFF
    path.write_bytes(bytes(data))
    refused(path, "cannot read")


@pytest.mark.parametrize("seed", range(4))
def test_random_bytes(tmp_path, seed):
    rng = np.random.default_rng(seed)
    path = tmp_path / "random.npz"
    path.write_bytes(rng.integers(0, 256, 2000, dtype=np.uint8).tobytes())
    refused(path, "not an .npz archive")
    # random bytes behind a zip signature
    path.write_bytes(b"PK\x03\x04" + rng.integers(0, 256, 2000, dtype=np.uint8).tobytes())
    refused(path)


def test_empty_and_text_files(tmp_path):
    path = tmp_path / "empty.npz"
    path.write_bytes(b"")
    refused(path, "not an .npz archive")
    path = tmp_path / "program.npz"
    path.write_text((EXAMPLES / "dyck1.cr").read_text())
    refused(path, "not an .npz archive")
    path = tmp_path / "header.json"
    path.write_text(json.dumps({"format": "crasp-model", "version": 1}))
    refused(path, "not an .npz archive")


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(CraspError, match="cannot read model file"):
        read_model(tmp_path / "nope.npz")
    with pytest.raises(CraspError, match="cannot read model file"):
        read_model(tmp_path)


def test_zip_that_is_not_npz(tmp_path):
    path = tmp_path / "plain.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hello")
    refused(path, "no header")


def test_member_not_in_npy_format(tmp_path):
    arrays = arrays_of(compiled("dyck1.cr"), tmp_path)
    path = tmp_path / "bad.npz"
    for broken in ("header", "w_e", "layer0.head0.w_q"):
        with zipfile.ZipFile(path, "w") as archive:
            for name, array in arrays.items():
                buffer = io.BytesIO()
                np.save(buffer, array)
                archive.writestr(f"{name}.npy", b"garbage" if name == broken else buffer.getvalue())
        refused(path, repr(broken))


def test_npz_without_header(tmp_path):
    arrays = arrays_of(compiled("dyck1.cr"), tmp_path)
    del arrays["header"]
    refused(write(tmp_path, arrays), "no header")


@pytest.mark.parametrize(
    ("header", "fragment"),
    [
        (np.array("{not json"), "not valid JSON"),
        (np.array(""), "not valid JSON"),
        (np.array("[1, 2]"), "not a JSON object"),
        (np.array(3.0), "not a JSON string"),
        (np.array(["{}", "{}"]), "not a JSON string"),
    ],
)
def test_header_not_json(tmp_path, header, fragment):
    arrays = arrays_of(compiled("dyck1.cr"), tmp_path)
    arrays["header"] = header
    refused(write(tmp_path, arrays), fragment)


def case_id(value) -> str:
    return value if isinstance(value, str) else "edit"


def _set(key, value):
    return lambda header, arrays: header.__setitem__(key, value)


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (_set("format", "onnx"), "wrong format name"),
        (lambda h, a: h.pop("format"), "wrong format name"),
        (_set("version", VERSION + 1), f"unsupported format version {VERSION + 1}"),
        (_set("version", "1"), "unsupported format version '1'"),
        (lambda h, a: h.pop("version"), "unsupported format version None"),
        (_set("vocab", ["a", "b"]), "must start with BOS"),
        (_set("vocab", ["<bos>", "(", "("]), "duplicates"),
        (_set("vocab", "<bos> ( )"), "'vocab' is missing or malformed"),
        (lambda h, a: h.pop("layers"), "'layers' is missing or malformed"),
        (_set("features", ["sine:3"]), "unknown positional feature 'sine:3'"),
        (_set("features", ["periodic:2:5"]), "unknown positional feature"),
        (_set("guarantee", {"max_len": -1, "text": ""}), "malformed guarantee"),
        (_set("guarantee", {"max_len": True, "text": ""}), "malformed guarantee"),
        (_set("guarantee", None), "'guarantee' is missing or malformed"),
        (_set("accept", "NOPE"), "acceptance output 'NOPE'"),
        (_set("accept", 7), "'accept' is missing or malformed"),
        (_set("options", "relu"), "'options' is missing or malformed"),
        (_set("info", [1, 2]), "'info' is missing or malformed"),
        (_set("source", 5), "'source' is missing or malformed"),
    ],
    ids=case_id,
)
def test_bad_header_fields(tmp_path, edit, fragment):
    refused(edited(tmp_path, edit), "invalid model file", fragment)


def _head(key, value):
    def edit(header, arrays):
        header["layers"][0]["heads"][0][key] = value

    return edit


def _mlp(key, value):
    def edit(header, arrays):
        layer = next(layer for layer in header["layers"] if layer["mlp"] is not None)
        layer["mlp"][key] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (_head("weighting", "sparsemax"), "unknown weighting 'sparsemax'"),
        (_head("weighting", None), "unknown weighting None"),
        (_head("mask", "bidirectional"), "unknown mask 'bidirectional'"),
        (_head("kind", "diagonal"), "unknown kind 'diagonal'"),
        (_head("kind", ["uniform"]), "unknown kind ['uniform']"),
        (_head("scale", "big"), "malformed bias or scale"),
        (_head("scale", float("nan")), "non-finite bias or scale"),
        (_head("bias", {"x": 1.0}), "malformed bias or scale"),
        (_head("bias", {"1": float("inf")}), "non-finite bias or scale"),
        (_head("bias", [1, 2, 3]), "malformed bias or scale"),
        (_mlp("activations", [["relu", 1], ["swish", 1]]), "unknown activation"),
        (_mlp("activations", [["relu", 0]]), "activations must be runs"),
        (_mlp("activations", [["relu", 2**40]]), "too many units"),
        (_mlp("activations", ["relu", "relu"]), "activations must be runs"),
        (_mlp("labels", [["a", 1], ["b", 10**6]]), "more labels than hidden units"),
        (_mlp("norm_groups", [[0, 0]]), "norm_groups must be disjoint"),
        (_mlp("norm_groups", [[0], [0]]), "norm_groups must be disjoint"),
        (_mlp("norm_groups", [[10_000]]), "norm_groups must be disjoint"),
        (_mlp("norm_groups", [["0"]]), "norm_groups must be disjoint"),
        (_mlp("norm_groups", {"0": 1}), "norm_groups must be disjoint"),
        (_mlp("activations", "relu"), "malformed"),
        (_mlp("labels", 5), "malformed labels"),
        (lambda h, a: h["layers"].__setitem__(0, [1]), "layer 1 is malformed"),
        (lambda h, a: h["outputs"][0].__setitem__("rule", "softmax"), "output 0 is malformed"),
    ],
    ids=case_id,
)
def test_bad_layer_settings(tmp_path, edit, fragment):
    refused(edited(tmp_path, edit), "invalid model file", fragment)


def test_unknown_activation_count_mismatch(tmp_path):
    """More activations than hidden units: the weight shapes no longer match."""

    def edit(header, arrays):
        layer = next(layer for layer in header["layers"] if layer["mlp"] is not None)
        layer["mlp"]["activations"].append(["relu", 1])

    refused(edited(tmp_path, edit), "has shape", "expected")


@pytest.mark.parametrize(
    "name",
    ["w_e", "w_p", "layer0.head0.w_k", "layer0.head0.w_o", "layer0.mlp.b2", "output0.weights"],
)
def test_missing_array(tmp_path, name):
    model = "tomita4.crasp"  # has a first-layer MLP
    refused(edited(tmp_path, lambda h, a: a.pop(name), model), f"missing array {name!r}")


@pytest.mark.parametrize(
    ("name", "reshape"),
    [
        ("w_e", lambda x: x[:, :-1]),
        ("w_e", lambda x: x.T),
        ("layer0.head0.w_q", lambda x: x.ravel()),
        ("layer0.head0.w_k", lambda x: np.vstack([x, x])),
        ("layer0.head0.w_o", lambda x: x[:-1]),
        ("layer0.mlp.w1", lambda x: x[:-1]),
        ("layer0.mlp.b1", lambda x: x[None]),
        ("output0.weights", lambda x: np.append(x, 0.0)),
    ],
)
def test_array_with_wrong_shape(tmp_path, name, reshape):
    def edit(header, arrays):
        arrays[name] = reshape(arrays[name])

    message = refused(edited(tmp_path, edit, "tomita4.crasp"), "invalid model file")
    assert repr(name) in message


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("name", ["w_e", "layer0.head0.w_v", "layer0.mlp.w2", "output0.weights"])
def test_non_finite_weights(tmp_path, name, bad):
    def edit(header, arrays):
        arrays[name] = arrays[name].copy()
        arrays[name].flat[0] = bad

    refused(edited(tmp_path, edit, "tomita4.crasp"), f"array {name!r} has non-finite values")


def test_integer_and_string_arrays(tmp_path):
    def integers(header, arrays):
        arrays["w_e"] = arrays["w_e"].astype(np.int64)

    refused(edited(tmp_path, integers), "'w_e' is not floating point")

    def strings(header, arrays):
        arrays["w_p"] = np.array(["a"])

    refused(edited(tmp_path, strings), "'w_p' is not floating point")


UNPICKLED: list[str] = []


def _record_unpickling() -> str:
    UNPICKLED.append("code ran")
    return "payload"


class _Payload:
    """Unpickling this would call ``_record_unpickling``: proof that pickle ran."""

    def __reduce__(self):
        return (_record_unpickling, ())


@pytest.mark.parametrize("member", ["header", "w_e", "extra"])
def test_pickled_object_array_refused(tmp_path, member):
    arrays = arrays_of(compiled("dyck1.cr"), tmp_path)
    payload = np.empty(1, dtype=object)
    payload[0] = _Payload()
    arrays[member] = payload
    path = write(tmp_path, arrays)
    UNPICKLED.clear()
    if member == "extra":
        # an undeclared array is refused by name, never read, hence never unpickled
        refused(path, "unexpected array(s)", "'extra'")
    else:
        refused(path, "cannot read model file", "allow_pickle=False")
    assert UNPICKLED == []


def test_save_to_unwritable_path(tmp_path):
    with pytest.raises(CraspError, match="cannot write model file"):
        save_model(compiled("dyck1.cr"), tmp_path / "no" / "such" / "dir" / "m.npz")


# ---------------------------------------------------------------- head kinds


def test_files_record_head_kinds(tmp_path):
    """Every head's settings hold its kind, the one the weights bear out."""
    model = compiled("c_near_a.cr")
    save_model(model, tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz", allow_pickle=False) as data:
        header = json.loads(str(data["header"]))
    stored = [[head["kind"] for head in layer["heads"]] for layer in header["layers"]]
    assert stored == [[str(kind) for kind in row] for row in derive_kinds(model)]
    assert {"uniform", "bos-keyed"} <= {kind for row in stored for kind in row}
    assert head_kinds(read_model(tmp_path / "m.npz")) == derive_kinds(model)


def test_files_without_kinds_get_them_from_the_weights(tmp_path):
    """Files written before kinds were recorded load with the kinds the weights bear
    out, and run as before."""
    model = compiled("c_near_a.cr")

    def drop(header, arrays):
        for layer in header["layers"]:
            for head in layer["heads"]:
                del head["kind"]

    loaded = read_model(edited(tmp_path, drop, "c_near_a.cr"))
    assert [[h.kind for h in layer.heads] for layer in loaded.layers] == derive_kinds(model)
    words = [[], list("abcab"), list("cab" * 9)]
    assert_same_outputs(model, loaded, words)


def test_a_kind_the_weights_do_not_bear_out_is_refused(tmp_path):
    model = compiled("c_near_a.cr")
    kinds = derive_kinds(model)
    layer, head = next(
        (n, h) for n, row in enumerate(kinds) for h, k in enumerate(row) if k is HeadKind.BOS_KEYED
    )

    def claim(kind: str):
        def edit(header, arrays):
            header["layers"][layer]["heads"][head]["kind"] = kind

        return edit

    refused(
        edited(tmp_path, claim("uniform"), "c_near_a.cr"),
        "invalid model file",
        f"layer {layer + 1} head {head + 1}",
        "records kind 'uniform', which its weights do not bear out (they give 'bos-keyed')",
    )
    # a weaker claim holds: the head is evaluated on the general path, with the same result
    loaded = read_model(edited(tmp_path, claim("general"), "c_near_a.cr"))
    assert loaded.layers[layer].heads[head].kind is HeadKind.GENERAL
    assert_same_outputs(model, loaded, [[], list("abcab"), list("cab" * 9)])


def test_version_1_files_with_periodic_features_load_as_the_same_model(tmp_path):
    """Version 1 had periodic features 0 at BOS: such a file is converted on load so
    that the model computes what it computed (every residual unchanged)."""
    program = load_program(EXAMPLES / "abab_star.cr")
    model = compile_program(program)
    assert any(name.startswith("periodic:") for name in model.features)
    path = tmp_path / "v1.npz"
    save_model(model, path)
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    header = json.loads(str(arrays.pop("header")))
    header["version"] = 1
    for layer in header["layers"]:  # version 1 lists an MLP's activations and labels
        if layer["mlp"] is not None:
            for key in ("activations", "labels"):
                layer["mlp"][key] = [v for v, count in layer["mlp"][key] for _ in range(count)]
    w_e = arrays["w_e"].copy()
    for column, name in enumerate(header["features"]):
        m, r = map(int, name.split(":")[1:])
        if r == m - 1:  # version 1 had this feature's 1 at BOS in the BOS embedding row
            w_e[0] += arrays["w_p"][:, column]
    arrays["w_e"] = w_e
    np.savez(path, header=np.array(json.dumps(header)), **arrays)
    loaded = read_model(path)
    words = [*random_inputs(program, 5, count=30, max_len=12), []]
    np.testing.assert_array_equal(loaded.w_e, model.w_e)
    for name, values in run_tokens(loaded, words).values.items():
        np.testing.assert_array_equal(values, run_tokens(model, words).values[name])


def test_version_3_files_list_activations_and_labels_unit_by_unit(tmp_path):
    """Version 4 stores an MLP's activations and labels as runs; a version 3 file lists
    them unit by unit and loads as the same model. A wide model's header is a fraction of
    its version 3 size (permute.pcoc at n = 256 wrote 115 M characters, over the cap)."""
    model = compile_program(load_program(EXAMPLES / "dyck1.cr"))
    path = tmp_path / "v3.npz"
    save_model(model, path)
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    header = json.loads(str(arrays.pop("header")))
    assert header["version"] == VERSION == 5
    mlp = next(layer["mlp"] for layer in header["layers"] if layer["mlp"] is not None)
    assert all(isinstance(run, list) and len(run) == 2 for run in mlp["activations"])
    header["version"] = 3
    del header["provenance"]  # version 5 on
    for layer in header["layers"]:
        if layer["mlp"] is not None:
            for key in ("activations", "labels"):
                layer["mlp"][key] = [v for v, count in layer["mlp"][key] for _ in range(count)]
    np.savez(path, header=np.array(json.dumps(header)), **arrays)
    loaded = read_model(path)
    assert loaded.provenance == model.provenance  # read from info and options
    for old, new in zip(loaded.layers, model.layers, strict=True):
        if new.mlp is not None:
            assert old.mlp is not None
            assert old.mlp.activations == new.mlp.activations
            assert old.mlp.labels == new.mlp.labels


@pytest.mark.parametrize("example", ["dyck1.cr", "../pcoc/cumsum.pcoc"])
def test_the_provenance_is_a_header_field_of_its_own(tmp_path, example):
    """Version 5 stores the typed origin in its own field; an older file gets the same from
    its info and options."""
    from crasp_compiler import compile, load

    model = compile(load(EXAMPLES / example), **({"n": 4} if example.endswith(".pcoc") else {}))
    assert model.provenance is not None
    path = tmp_path / "m.npz"
    save_model(model, path)
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    header = json.loads(str(arrays.pop("header")))
    assert header["provenance"] == {
        "language": model.provenance.language,
        "mode": model.provenance.mode,
        "size": model.provenance.size,
    }
    assert read_model(path).provenance == model.provenance
    header["version"] = 4
    del header["provenance"]
    np.savez(path, header=np.array(json.dumps(header)), **arrays)
    assert read_model(path).provenance == model.provenance
