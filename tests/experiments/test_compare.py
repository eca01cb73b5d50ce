"""``crasp compare``: probes find a program's variables where a model built to hold them
holds them (the compiled model, with and without noise) and not in a random-init model;
interventions reach the program through the interpreter; the command end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from crasp_compiler.cli import main  # noqa: E402
from crasp_compiler.experiments import compare as C  # noqa: E402
from crasp_compiler.experiments.tasks.program import ProgramTask  # noqa: E402
from crasp_compiler.experiments.train.data import sample_examples  # noqa: E402
from crasp_compiler.experiments.train.models import (  # noqa: E402
    SequenceModel,
    SequenceModelConfig,
    stage_names,
)
from crasp_compiler.languages.crasp import interpret_batch  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "crasp"
DYCK = EXAMPLES / "dyck1.cr"
MAJORITY = EXAMPLES / "majority.crasp"


@pytest.fixture(scope="module")
def dyck() -> tuple[ProgramTask, list, list]:
    task = ProgramTask.from_file(DYCK, lengths=(1, 30))
    lengths = list(range(1, 31))
    fit = sample_examples(task, np.random.default_rng(0), lengths, 96)
    test = sample_examples(task, np.random.default_rng(1), lengths, 48)
    return task, fit, test


def _scores(task, model, fit, test, noise: float = 0.0) -> dict[str, list]:
    program = task.crasp_program()
    fitting = C.probe_set(model, task, program, fit, 0)
    scored = C.probe_set(model, task, program, test, 0)
    if noise:
        rng = np.random.default_rng(5)
        for probed in (fitting, scored):
            probed.stages = [s + noise * rng.standard_normal(s.shape) for s in probed.stages]
    scores = C.probe_scores(program, fitting, {"test": scored}, ridge=1.0)
    return {target: by_bin["test"] for target, by_bin in scores.items()}


@pytest.mark.parametrize("noise", [0.0, 0.02])
def test_probes_find_each_variable_where_the_compiled_model_computes_it(dyck, noise) -> None:
    """The compiled Dyck-1 model writes C_open / (t+1) in layer 1's attention, V and B in
    layer 1's MLP, CV / (t+1) in layer 2's attention and M in layer 2's MLP: each probe
    is (near) perfect from that stage on and clearly worse before it, with or without
    noise in the residual."""
    task, fit, test = dyck
    scores = _scores(task, task.compiled_model(), fit, test, noise)
    stages = stage_names(2)
    born = {
        "C_open / (t+1)": "L1 attn",
        "C_close / (t+1)": "L1 attn",
        "V": "L1 mlp",
        "B": "L1 mlp",
        "CV / (t+1)": "L2 attn",
        "M": "L2 mlp",
    }
    for target, stage in born.items():
        at = stages.index(stage)
        row = scores[target]
        assert min(row[at:]) > 0.97, (target, row)
        assert max(row[:at]) < 0.9, (target, row)


def test_random_init_model_does_not_hold_the_derived_variables(dyck) -> None:
    """A randomly initialised model of the trained shape: its uniform-ish attention
    gives prefix fractions (so the counts are no test) and its position table gives
    the parity of the length (half of D), but it does not hold M or D, which the
    compiled model holds (near) exactly."""
    task, fit, test = dyck
    torch.manual_seed(0)
    control = SequenceModel(SequenceModelConfig(vocab_size=3, n_labels=2)).eval()
    scores = _scores(task, control, fit, test)
    compiled = _scores(task, task.compiled_model(), fit, test)
    for target in ("M", "D"):
        assert max(scores[target]) < 0.95, (target, scores[target])
        assert max(compiled[target]) > 0.98, (target, compiled[target])


def test_scores_are_chance_on_shuffled_targets(dyck) -> None:
    task, fit, test = dyck
    program = task.crasp_program()
    fitting = C.probe_set(task.compiled_model(), task, program, fit, 0)
    scored = C.probe_set(task.compiled_model(), task, program, test, 0)
    shuffled = C.probe_scores(
        program, fitting, {"t": scored}, 1.0, shuffle=np.random.default_rng(3)
    )
    assert max(shuffled["B"]["t"]) < 0.65
    assert max(shuffled["C_open / (t+1)"]["t"]) < 0.2


def test_compiled_stages_are_the_sublayers_a_layer_has() -> None:
    """c_near_a's second layer has an MLP only: no ``L2 attn`` stage."""
    task = ProgramTask.from_file(EXAMPLES / "c_near_a.cr", lengths=(1, 10))
    model = task.compiled_model()
    names = C.compiled_stages(model)
    assert names == ["embed", "L1 attn", "L1 mlp", "L2 mlp", "L3 attn", "L3 mlp"]
    examples = sample_examples(task, np.random.default_rng(0), [3, 5], 4)
    stages, patterns, heads = C.compiled_pass(model, examples, patterns=True)
    assert all(len(s) == len(names) for s in stages)
    assert patterns[0].shape[0] == len(heads) == sum(len(layer.heads) for layer in model.layers)


def test_score_edge_cases() -> None:
    assert C.score("bool", np.array([1, 1, 1]), np.array([0.9, 0.1, 0.7])) is None
    assert C.score("bool", np.array([1, 0, 1, 0]), np.array([0.9, 0.1, 0.7, 0.6])) == 0.75
    assert C.score("count", np.array([2.0, 2.0]), np.array([1.0, 3.0])) is None
    assert C.score("count", np.array([1.0, 3.0]), np.array([1.0, 3.0])) == 1.0


def test_overrides_reach_every_later_definition() -> None:
    """The interpreter's answer to an intervention: C_open replaced, V, CV, M and D
    follow; C_close does not."""
    task = ProgramTask.from_file(DYCK)
    program = task.crasp_program()
    plain = interpret_batch(program, [["(", ")"]])
    forced = np.array([[0, 0, 0]])
    after = interpret_batch(program, [["(", ")"]], {"C_open": forced})
    assert after["C_open"].tolist() == [[0, 0, 0]]
    assert after["C_close"].tolist() == plain["C_close"].tolist()
    assert after["V"].tolist() == [[False, False, True]]  # 0 < 1 after the ")"
    assert after["D"].tolist() == [[True, True, False]]
    with pytest.raises(ValueError, match="no definition named nope"):
        interpret_batch(program, [["("]], {"nope": forced})
    with pytest.raises(ValueError, match="shape"):
        interpret_batch(program, [["("]], {"C_open": forced})


def test_visit_sees_every_stage_and_attention_weights_are_the_forward_ones() -> None:
    torch.manual_seed(1)
    model = SequenceModel(SequenceModelConfig(vocab_size=3, n_labels=2, n_layers=2)).eval()
    tokens = torch.randint(0, 3, (3, 7))
    seen: list[int] = []
    with torch.no_grad():
        plain = model(tokens)
        visited = model(tokens, visit=lambda stage, h: (seen.append(stage), h)[1])
        block = model.blocks[0]
        x = block.ln1(model.embed(tokens) + model.pos_table(torch.arange(7)))
        weights = block.attn.weights(x, True, None)
        q, k, v = block.attn._split(x)
        direct = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.equal(plain, visited)
    assert seen == [0, 1, 2, 3, 4]
    assert torch.allclose(weights @ v, direct, atol=1e-6)
    assert torch.allclose(weights.sum(-1), torch.ones(3, 2, 7))
    assert float(weights[0, 0, 0, 1:].abs().max()) == 0.0  # causal


def test_the_control_is_the_runs_own_initialisation() -> None:
    """``initial_model`` rebuilds the network a run of that seed started from, as
    ``train`` builds it (torch seeded with the run's seed just before)."""
    from crasp_compiler.experiments.train.loop import TrainConfig, build_model

    task = ProgramTask.from_file(DYCK, lengths=(1, 10))
    config = TrainConfig(task=task, seed=3)
    torch.manual_seed(3)
    started = build_model(config, task, max_positions=40)
    trained = SequenceModel(started.config)  # any weights: only its shape is read
    again = C.initial_model(trained, 3)
    other = C.initial_model(trained, 4)
    for name, value in started.state_dict().items():
        assert torch.equal(again.state_dict()[name], value), name
    assert not torch.equal(other.state_dict()["embed.weight"], started.state_dict()["embed.weight"])


def test_settings_are_checked() -> None:
    with pytest.raises(C.CraspError, match="fit must be at least 8"):
        C.Settings(fit=2).check()
    with pytest.raises(C.CraspError, match="ridge"):
        C.Settings(ridge=0.0).check()


def _write(path: Path, data: object) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(data))


def test_runs_it_cannot_read_get_one_clear_error(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(main, ["compare", str(tmp_path / "none"), "-o", str(tmp_path / "o")])
    assert missing.exit_code == 1 and "cannot read" in missing.output
    _write(tmp_path / "numeric", {"train": {"task": "cummin"}, "model_class": "NumericModel"})
    numeric = runner.invoke(main, ["compare", str(tmp_path / "numeric"), "-o", str(tmp_path / "o")])
    assert numeric.exit_code == 1 and "reads sequence models" in numeric.output
    _write(
        tmp_path / "old", {"train": {"task": "dyck1@0123456789ab"}, "model_class": "SequenceModel"}
    )
    (tmp_path / "old" / "results.json").write_text(json.dumps({"bins": {"1-50": [1, 50]}}))
    old = runner.invoke(main, ["compare", str(tmp_path / "old"), "-o", str(tmp_path / "o")])
    assert old.exit_code == 1 and "give it with --program" in old.output
    wrong = runner.invoke(
        main,
        ["compare", str(tmp_path / "old"), "-o", str(tmp_path / "o"), "--program", str(DYCK)],
    )
    assert wrong.exit_code == 1 and "is not the program" in wrong.output
    _write(tmp_path / "bad", [1, 2])
    bad = runner.invoke(main, ["compare", str(tmp_path / "bad"), "-o", str(tmp_path / "o")])
    assert bad.exit_code == 1 and "not a JSON object" in bad.output
    for result in (missing, numeric, old, wrong, bad):
        assert "Traceback" not in result.output


def test_compare_command_on_a_fresh_program_run(tmp_path: Path) -> None:
    """Train a small model on MAJORITY, then compare: the record names every variable
    (counts twice), the stages, a best match per compiled head and an intervention per
    variable found; the figure is a real PNG."""
    runner = CliRunner()
    run = tmp_path / "run"
    trained = runner.invoke(
        main,
        [
            "train", "--program", str(MAJORITY), "--steps", "150", "--d-model", "32",
            "--quiet", "--out", str(run), "--lengths", "1-20",
        ],
    )  # fmt: skip
    assert trained.exit_code == 0, trained.output
    assert (run / "program" / "majority.crasp").exists()
    out = tmp_path / "out"
    result = runner.invoke(
        main,
        [
            "compare", str(run), "-o", str(out), "--fit", "48", "--test", "24",
            "--pairs", "8", "--longer", "1", "--max-length", "40",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    record = json.loads((out / "compare.json").read_text())
    targets = [v["target"] for v in record["variables"]]
    assert targets == ["C1", "C1 / (t+1)", "C0", "C0 / (t+1)", "M"]
    assert record["stages"] == stage_names(2)
    assert record["compiled_stages"] == stage_names(1)  # MAJORITY compiles to one layer
    assert list(record["bins"]) == ["1-20", "21-40"]
    for v in record["variables"]:
        for key in ("scores", "random_init", "shuffled", "compiled"):
            assert set(v[key]) == {"1-20", "21-40"}
            stages = record["compiled_stages" if key == "compiled" else "stages"]
            assert len(v[key]["1-20"]) == len(stages)
    heads = record["heads"]
    assert len(heads["best_match"]) == len(heads["compiled"]) > 0
    assert all(0 <= m["tv"] <= 1 for m in heads["best_match"])
    assert {iv["variable"] for iv in record["interventions"]} <= {"C1", "C0", "M"}
    for iv in record["interventions"]:
        assert iv["pairs"] == 8
        assert iv["changed_positions"] + iv["unchanged_positions"] > 0
    assert record["provenance"]["torch"] == torch.__version__
    png = (out / "compare.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "probes fitted on LEN 1-20" in result.output
    # against another program of the same function (renamed variables), and a wrong one
    same = tmp_path / "same.cr"
    same.write_text('alphabet "0", "1"\nOnes = # "1"\nZeros = # "0"\nM = Ones >= Zeros\n')
    small = ["--fit", "16", "--test", "8", "--pairs", "2", "--longer", "0", "--no-figure"]
    again = runner.invoke(
        main, ["compare", str(run), "-o", str(tmp_path / "o2"), "--against", str(same), *small]
    )
    assert again.exit_code == 0, again.output
    record = json.loads((tmp_path / "o2" / "compare.json").read_text())
    assert record["program"]["against"] == "same.cr"
    assert record["variables"][0]["target"] == "Ones"
    wrong = tmp_path / "wrong.cr"
    wrong.write_text('alphabet "0", "1"\nM = # "1" > # "0"\n')
    refused = runner.invoke(
        main, ["compare", str(run), "-o", str(tmp_path / "o3"), "--against", str(wrong), *small]
    )
    assert refused.exit_code == 1 and "computes another function" in refused.output
    assert "Traceback" not in refused.output and not (tmp_path / "o3").exists()


def test_the_inside_page_matches_its_records() -> None:
    """docs/inside.md is what ``benchmarks/inside.py report`` makes of the committed
    records, which carry no machine's paths."""
    import importlib.util
    import re
    import sys

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("inside", root / "benchmarks" / "inside.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    assert module.main(["report", "--check"]) == 0
    records = sorted((root / "docs" / "results" / "inside").glob("*.json"))
    assert len(records) == 5 * len(module.READINGS)
    for path in records:
        text = path.read_text()
        assert not re.search(r'"(/tmp|/home|/root|/work|[A-Z]:\\\\)', text), path.name
        assert json.loads(text)["provenance"]["commit"]
