"""The training harness (:mod:`crasp_compiler.experiments.train`) on small tasks defined here.

Checked: model shapes, causal masking and padding; the four positional encodings (APE
offsets, sorted randomized positions, sinusoid values); the positional numeric model's
attention does not depend on the data (the standard one's does); tensors, bins and test
sets of the data module; the metrics; short training runs on a sequence task and a numeric
task write the three files with the documented keys, the loss falls on an easy task,
``load`` reproduces the trained model's outputs, runs are deterministic by seed, and a
parameter filter freezes the other weights. Bad config values are refused by name; an
unusable output directory is refused before training; a full disk names the file and
keeps what was written; an interrupted run resumes from its checkpoint exactly.
"""

from __future__ import annotations

import errno
import json
import math
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np
import pytest
import torch

from crasp_compiler.errors import CraspError
from crasp_compiler.experiments.tasks.base import Example, NumericTask, SequenceTask
from crasp_compiler.experiments.tasks.registry import get_task
from crasp_compiler.experiments.train import (
    NumericModel,
    NumericModelConfig,
    SequenceModel,
    SequenceModelConfig,
    TrainConfig,
    load,
    load_config,
    loop,
    train,
)
from crasp_compiler.experiments.train.data import (
    IGNORE,
    default_bins,
    encode,
    feasible_lengths,
    make_numeric_test_sets,
    make_test_sets,
)
from crasp_compiler.experiments.train.evaluate import numeric_metrics, predict, same_where_scored
from crasp_compiler.experiments.train.models import sinusoid

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@dataclass
class Majority(SequenceTask):
    """Label at each position: does ``a`` lead in the prefix? Its "program" is the truth."""

    def sample(self, rng: np.random.Generator, length: int) -> Example:
        tokens = tuple(str(t) for t in rng.choice(["a", "b"], size=length))
        lead, targets = 0, []
        for token in tokens:
            lead += 1 if token == "a" else -1
            targets.append("1" if lead > 0 else "0")
        return Example(tokens, tuple(targets), length)

    def compiled_labels(self, examples, backend="compiled"):
        return [list(ex.targets) for ex in examples]


@dataclass
class Copy(SequenceTask):
    """Label = the current token after a ``<s>`` (unscored); even LEN only."""

    def sample(self, rng: np.random.Generator, length: int) -> Example:
        body = tuple(str(t) for t in rng.choice(["a", "b", "c"], size=length))
        return Example(("<s>", *body), (None, *body), length)

    def lengths(self, lo: int, hi: int) -> list[int]:
        return [n for n in range(max(lo, self.min_length), hi + 1) if n % 2 == 0]


@dataclass
class CumSum(NumericTask):
    def target(self, inputs: np.ndarray) -> np.ndarray:
        return np.cumsum(inputs)

    def compiled_values(self, inputs, mode="hard", backend="compiled"):
        return np.cumsum(inputs, axis=1)


def majority(**kw) -> Majority:
    args = dict(name="toy-majority", family="regular", description="prefix majority")
    args |= dict(program="toy.cr", vocab=("a", "b"), labels=("0", "1"), train_max=8)
    return Majority(**(args | kw))


def copy_task() -> Copy:
    return Copy(
        name="toy-copy",
        family="algorithmic",
        description="copy the token",
        vocab=("<s>", "a", "b", "c"),
        labels=("a", "b", "c"),
        min_length=2,
        train_max=8,
    )


def cumsum() -> CumSum:
    return CumSum(name="toy-cumsum", family="numeric", description="prefix sums", program="x")


SEQUENCE_KEYS = {
    "task", "family", "kind", "model_class", "config", "model_config", "device",
    "n_parameters", "n_trainable", "steps", "early_stopped", "wall_time_s", "eval_time_s",
    "final_loss", "loss_history", "eval_history", "compiled_error", "bins", "test_size",
    "max_positions", "accuracy", "compiled_accuracy", "agreement", "resumed_from", "provenance",
}  # fmt: skip
SEQUENCE_ONLY = {"bins", "max_positions", "accuracy", "compiled_accuracy", "agreement"}
NUMERIC_KEYS = SEQUENCE_KEYS - SEQUENCE_ONLY | {"n", "scales", "metrics", "compiled_metrics"}


def small_model(pe: str, causal: bool = True, **kw) -> SequenceModel:
    torch.manual_seed(0)
    config = SequenceModelConfig(
        vocab_size=3, n_labels=4, d_model=16, n_layers=2, n_heads=2, pe=pe, max_positions=40
    )
    config.causal = causal
    for key, value in kw.items():
        setattr(config, key, value)
    return SequenceModel(config).eval()


# --- models ------------------------------------------------------------------------------


@pytest.mark.parametrize("pe", ["ape", "nope", "sin", "random", "rope", "alibi", "relative"])
def test_causal_model_ignores_later_tokens(pe):
    model = small_model(pe)
    tokens = torch.tensor([[0, 1, 2, 1, 0, 1, 2], [2, 2, 1, 0, 0, 1, 1]])
    positions = model.sample_positions(torch.tensor([7, 7]), 7, generator=torch.Generator())
    changed = tokens.clone()
    changed[:, 5] = (changed[:, 5] + 1) % 3
    with torch.no_grad():
        before, after = model(tokens, positions), model(changed, positions)
    assert before.shape == (2, 7, 4)
    torch.testing.assert_close(before[:, :5], after[:, :5])
    assert not torch.allclose(before[:, 5:], after[:, 5:])


ATTENTION_ENCODINGS = [
    ("rope", "sin"),
    ("alibi", "sin"),
    ("relative", "sin"),
    ("random", "rope"),
    ("random", "alibi"),
    ("random", "relative"),
]


@pytest.mark.parametrize(("pe", "base"), ATTENTION_ENCODINGS)
@pytest.mark.parametrize("causal", [True, False])
def test_attention_encodings_depend_on_position_differences_only(pe, base, causal):
    """Rotary, ALiBi and relative attention: shifting every position by the same amount changes
    nothing (scores see p_i − p_j only), while moving one position does; the weights
    read for interpretability are the ones the forward pass applies; nothing is added
    to the embedding; padding does not change an encoder's outputs."""
    model = small_model(pe, causal=causal, random_base=base)
    assert model.pos_table is None and model.scale == 1.0
    tokens = torch.tensor([[0, 1, 2, 1, 0, 2], [2, 2, 1, 0, 0, 1]])
    positions = torch.tensor([[0, 2, 3, 7, 9, 12]] * 2)
    moved = positions.clone()
    moved[:, 3] += 1
    with torch.no_grad():
        base_out = model(tokens, positions)
        torch.testing.assert_close(model(tokens, positions + 17), base_out)
        assert not torch.allclose(model(tokens, moved), base_out)
        attn = model.blocks[0].attn
        x = model.blocks[0].ln1(model.embed(tokens))
        weights = attn.weights(x, causal, None, positions)
        _, _, v = attn._split(x, positions)
        mixed = (weights @ v).transpose(1, 2).reshape(2, 6, -1)
        torch.testing.assert_close(attn.out(mixed), attn(x, causal, None, positions))
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 6))
        if causal:
            assert float(weights[0, :, 0, 1:].abs().max()) == 0.0
        else:
            pad = model.pad_id
            padded = torch.tensor([[0, 1, 2, pad, pad, pad]])
            alone = model(torch.tensor([[0, 1, 2]]), positions[:1, :3])
            torch.testing.assert_close(model(padded, positions[:1])[:, :3], alone)


def test_rotary_positions_need_an_even_head_width():
    with pytest.raises(CraspError, match="even head width"):
        SequenceModelConfig(vocab_size=2, n_labels=2, d_model=6, n_heads=2, pe="rope")


def test_encoder_model_sees_later_tokens():
    model = small_model("ape", causal=False)
    tokens = torch.tensor([[0, 1, 2, 1, 0]])
    changed = torch.tensor([[0, 1, 2, 1, 1]])
    with torch.no_grad():
        assert not torch.allclose(model(tokens)[:, 0], model(changed)[:, 0])


@pytest.mark.parametrize("causal", [True, False])
def test_padding_does_not_change_outputs(causal):
    model = small_model("sin", causal=causal)
    short, long_ = [0, 2, 1], [1, 1, 0, 2, 2, 0]
    pad = model.pad_id
    batch = torch.tensor([short + [pad] * 3, long_])
    with torch.no_grad():
        together = model(batch)
        alone = model(torch.tensor([short]))
    torch.testing.assert_close(together[0, :3], alone[0])


def test_ape_offsets_in_range():
    model = small_model("ape")
    lengths = torch.tensor([5, 40, 12, 1] * 50)
    generator = torch.Generator().manual_seed(1)
    positions = model.sample_positions(lengths, 40, train=True, generator=generator)
    assert positions.shape == (200, 40)
    starts = positions[:, 0]
    assert (starts >= 0).all() and (starts + lengths <= 40).all()
    assert (starts[1::4] == 0).all()  # a sequence as long as the table has no room
    assert len(set(starts[::4].tolist())) > 10  # offsets of the short ones spread out
    for row, n in zip(positions, lengths.tolist(), strict=True):
        assert torch.equal(row[:n], row[0] + torch.arange(n))
    assert positions.max() <= 39
    test_positions = model.sample_positions(lengths, 40, generator=generator)
    assert torch.equal(test_positions, torch.arange(40).expand(200, 40))
    with pytest.raises(CraspError, match="max_positions"):
        model.sample_positions(torch.tensor([41]), 41)


@pytest.mark.parametrize("train_mode", [True, False])
def test_random_positions_sorted_within_range(train_mode):
    model = small_model("random")
    generator = torch.Generator().manual_seed(3)
    lengths = torch.tensor([9, 4, 9])
    first = model.sample_positions(lengths, 9, train=train_mode, generator=generator)
    second = model.sample_positions(lengths, 9, train=train_mode, generator=generator)
    for positions in (first, second):
        assert positions.shape == (3, 9)
        assert (positions[:, 1:] > positions[:, :-1]).all()  # sorted, distinct
        assert positions.min() >= 0 and positions.max() < 40
        assert (positions == positions[0]).all()  # one draw per batch
    assert not torch.equal(first, second)
    with pytest.raises(CraspError, match="max_positions"):
        model.sample_positions(torch.tensor([41]), 41)


def test_sinusoid_values_and_nope_positions():
    enc = sinusoid(torch.tensor([0, 3]), 8)
    assert enc.shape == (2, 8)
    torch.testing.assert_close(enc[0], torch.tensor([0.0] * 4 + [1.0] * 4))
    freqs = 10_000 ** (-torch.arange(0, 8, 2).float() / 8)
    torch.testing.assert_close(enc[1, :4], torch.sin(3 * freqs))
    torch.testing.assert_close(enc[1, 4:], torch.cos(3 * freqs))
    assert small_model("nope").sample_positions(torch.tensor([3]), 3) is None
    assert small_model("nope").pos_table is None and small_model("sin").pos_table is None
    assert small_model("random", random_base="learned").pos_table.num_embeddings == 40


def test_token_mlp_baseline_reads_the_current_token_only():
    """The C-RASP paper's random baseline: the logits at position i are a function of
    token i alone (same token, same logits, wherever it stands and whatever surrounds it),
    and it trains no attention or positions."""
    config = SequenceModelConfig(vocab_size=3, n_labels=4, d_model=8, pe="nope", model="token_mlp")
    model = SequenceModel(config).eval()
    tokens = torch.tensor([[0, 1, 2, 1, 0, 2, 2], [2, 2, 1, 0, 0, 1, 1]])
    with torch.no_grad():
        logits = model(tokens)
        for t in range(3):
            rows = logits[tokens == t]
            torch.testing.assert_close(rows, rows[:1].expand_as(rows))
        assert not torch.allclose(logits[0, 0], logits[0, 1])  # tokens 0 and 1 differ
    names = {name.split(".")[0] for name, _ in model.named_parameters()}
    assert names == {"embed", "token_mlp", "ln_f", "head"}
    with pytest.raises(CraspError, match="pe must be 'nope'"):
        SequenceModelConfig(vocab_size=2, n_labels=2, pe="ape", model="token_mlp")
    with pytest.raises(CraspError, match="unknown model"):
        SequenceModelConfig(vocab_size=2, n_labels=2, model="lstm")
    with pytest.raises(CraspError, match="sequence tasks only"):
        loop.build_model(
            loop.TrainConfig(task="num_cumsum", model="token_mlp"), get_task("num_cumsum")
        )


def test_bad_model_configs_raise():
    with pytest.raises(CraspError, match="positional encoding"):
        SequenceModelConfig(vocab_size=2, n_labels=2, pe="xpos")
    with pytest.raises(CraspError, match="multiple"):
        SequenceModelConfig(vocab_size=2, n_labels=2, d_model=10, n_heads=3)
    with pytest.raises(CraspError, match="numeric model"):
        NumericModelConfig(kind="graph")


@pytest.mark.parametrize("pe", ["onehot", "learned"])
def test_positional_attention_does_not_depend_on_data(pe):
    torch.manual_seed(0)
    model = NumericModel(NumericModelConfig(n=8, kind="positional", d_model=16, pe=pe))
    assert len(model.layers) == 4  # ceil(log2 8) + 1
    x = torch.randn(3, 8)
    with torch.no_grad():
        out, attention = model(x, return_attention=True)
        out2, attention2 = model(5 * torch.randn(3, 8) + 1, return_attention=True)
    assert out.shape == (3, 8) and len(attention) == 4
    assert attention[0].shape == (3, 2, 9, 9)  # 8 inputs and the scratchpad
    for a, b in zip(attention, attention2, strict=True):
        torch.testing.assert_close(a, b)
    assert not torch.allclose(out, out2)
    assert model(torch.randn(2, 5)).shape == (2, 5)  # fewer values than n
    with pytest.raises(CraspError):
        model(torch.randn(2, 9))


def test_standard_attention_depends_on_data():
    torch.manual_seed(0)
    model = NumericModel(NumericModelConfig(n=4, kind="standard", d_model=16, n_layers=2))
    with torch.no_grad():
        _, attention = model(torch.randn(2, 4), return_attention=True)
        _, attention2 = model(torch.randn(2, 4), return_attention=True)
    assert not torch.allclose(attention[0], attention2[0])


# --- data and metrics --------------------------------------------------------------------


def test_encode_pads_and_ignores():
    task = copy_task()
    examples = [task.sample(np.random.default_rng(0), 2), task.sample(np.random.default_rng(1), 4)]
    batch = encode(task, examples)
    assert batch.tokens.shape == (2, 5) and batch.lengths.tolist() == [3, 5]
    assert batch.tokens[0, 3:].tolist() == [4, 4]  # the padding id is len(vocab)
    assert batch.labels[0].tolist()[0] == IGNORE and batch.labels[0, 3:].tolist() == [IGNORE] * 2
    assert batch.labels[1, 1:].tolist() == [task.labels.index(t) for t in examples[1].tokens[1:]]
    bad = Example(("<s>", "z"), (None, "a"), 1)
    with pytest.raises(CraspError, match="'z'"):
        encode(task, [bad])


def test_bins_and_test_sets():
    task = majority()
    assert default_bins(majority(train_max=50)) == [(1, 50), (51, 100), (101, 150), (151, 500)]
    assert default_bins(task) == [(1, 8), (9, 100), (101, 150), (151, 500)]
    assert default_bins(task, train_max=120) == [(1, 120), (121, 150), (151, 500)]
    assert feasible_lengths(copy_task(), 1, 9) == [2, 4, 6, 8]
    sets = make_test_sets(task, [(1, 8), (9, 12), (30, 20)], 50, seed=5)
    assert list(sets) == ["1-8", "9-12"]  # an empty bin is left out
    assert all(9 <= ex.length <= 12 for ex in sets["9-12"])
    assert len({ex.length for ex in sets["1-8"]}) > 4
    again = make_test_sets(task, [(1, 8), (9, 12)], 50, seed=5)
    assert again["9-12"] == sets["9-12"]
    assert make_test_sets(task, [(1, 8)], 50, seed=6)["1-8"] != sets["1-8"]
    numeric = make_numeric_test_sets(cumsum(), 8, [1, 10], 20, seed=0)
    inputs, targets = numeric["10"]
    assert inputs.shape == (20, 8) and np.abs(inputs).max() > 2
    np.testing.assert_allclose(targets, np.cumsum(inputs, axis=1))


def test_metrics():
    targets = [np.array([IGNORE, 1, 0]), np.array([0, 0, IGNORE])]
    predicted = [np.array([2, 1, 0]), np.array([0, 1, 1])]
    assert same_where_scored(targets, predicted, targets).tolist() == [True, False]
    other = [np.array([0, 1, 0]), np.array([0, 1, 0])]
    assert same_where_scored(targets, predicted, other).tolist() == [True, True]
    m = numeric_metrics(np.array([[1.0, 2.0], [0.0, 10.4]]), np.array([[1.0, 2.5], [0.0, 10.0]]))
    assert m["mse"] == pytest.approx((0.25 + 0.16) / 4)
    assert m["mae"] == pytest.approx(0.9 / 4)
    assert m["rel_error"] == pytest.approx(0.9 / 13.5)
    assert m["close_accuracy"] == 0.5  # 10.4 is within 0.05 + 5% of 10, 2.0 is not of 2.5


# --- training ----------------------------------------------------------------------------


def quick(task, out_dir=None, **kw) -> TrainConfig:
    args = dict(task=task, steps=30, eval_every=10, test_size=40, d_model=16, progress=False)
    args |= dict(out_dir=None if out_dir is None else str(out_dir), device="cpu")
    return TrainConfig(**(args | kw))


def test_sequence_run_writes_files_and_results(tmp_path):
    config = quick(majority(), tmp_path, bins=[(1, 8), (9, 16)], early_stop=False)
    results = train(config)
    assert {p.name for p in tmp_path.iterdir()} == {
        "model.safetensors",
        "config.json",
        "results.json",
    }
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert set(on_disk) == SEQUENCE_KEYS
    assert on_disk["accuracy"] == results["accuracy"]
    assert set(results["accuracy"]) == {"1-8", "9-16"} == set(results["bins"])
    assert results["steps"] == 30 and len(results["loss_history"]) == 3
    assert results["kind"] == "sequence" and results["model_class"] == "SequenceModel"
    assert results["max_positions"] == 16 and results["compiled_error"] is None
    # the toy program is the ground truth: compiled accuracy 1, agreement = accuracy
    assert results["compiled_accuracy"] == {"1-8": 1.0, "9-16": 1.0}
    assert results["agreement"] == results["accuracy"]
    assert load_config(tmp_path) == TrainConfig.from_dict(config.to_dict())
    assert load_config(tmp_path).task == "toy-majority"
    # where and how it was made: code, libraries, machine, device, threads, dtype
    made = on_disk["provenance"]
    assert made["torch"] == torch.__version__ and made["numpy"] == np.__version__
    assert made["device"] == "cpu" and made["dtype"] == "float32"
    assert made["torch_threads"] == torch.get_num_threads() >= 1
    assert made["commit"] is None or len(made["commit"]) == 40
    assert "theory" not in on_disk  # a toy task without a C-RASP class


def test_loss_falls_and_early_stop():
    task = copy_task()
    results = train(quick(task, steps=60, eval_every=20, lr=3e-3, early_stop=False, bins=[(2, 8)]))
    assert results["compiled_accuracy"] is None and results["agreement"] is None
    assert not results["early_stopped"] and results["steps"] == 60
    history = [loss for _, loss in results["loss_history"]]
    assert history[-1] < 0.2 * history[0]  # the loss falls on an easy task
    results = train(quick(task, steps=400, lr=1e-2, bins=[(2, 8)]))
    assert results["accuracy"] == {"2-8": 1.0} == {"2-8": results["eval_history"][-1][1]}
    assert results["early_stopped"] and results["steps"] < 400


@pytest.mark.parametrize("pe", ["ape", "random"])
def test_load_reproduces_predictions(tmp_path, pe):
    task = majority()
    config = quick(task, tmp_path, pe=pe, bins=[(1, 8), (9, 16)], n_layers=1)
    model = SequenceModel(
        SequenceModelConfig(2, 2, d_model=16, n_layers=1, pe=pe, max_positions=64)
    )
    results = train(config, model=model)
    loaded = load(tmp_path)
    assert isinstance(loaded, SequenceModel) and loaded.config == model.config
    examples = make_test_sets(task, [(9, 16)], 30, seed=0)["9-16"]
    batch = encode(task, examples)
    generator = torch.Generator().manual_seed(4)
    positions = model.sample_positions(batch.lengths, 16, generator=generator)
    with torch.no_grad():
        torch.testing.assert_close(loaded(batch.tokens, positions), model(batch.tokens, positions))
    assert all(
        np.array_equal(a, b)
        for a, b in zip(
            predict(loaded, task, examples), predict(model, task, examples), strict=True
        )
    )
    assert results["model_config"]["max_positions"] == 64


def test_runs_are_deterministic_by_seed(tmp_path):
    task = majority()
    runs = [
        train(quick(task, tmp_path / name, seed=seed, pe="random", early_stop=False))
        for name, seed in (("a", 1), ("b", 1), ("c", 2))
    ]
    assert runs[0]["loss_history"] == runs[1]["loss_history"] != runs[2]["loss_history"]
    states = [load(tmp_path / name).state_dict() for name in "abc"]
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    assert not torch.equal(states[0]["head.weight"], states[2]["head.weight"])


def test_train_scale_draws_the_training_values_at_that_scale(monkeypatch):
    """train_scale = c trains on values drawn at scale c (the paper's fine-tuning on 10x
    data); sequence tasks refuse it."""
    drawn = []
    real = loop.numeric_batch

    def spy(task, rng, size, n, scale=1.0, sampling="interval"):
        drawn.append(scale)
        return real(task, rng, size, n, scale, sampling)

    monkeypatch.setattr(loop, "numeric_batch", spy)
    train(quick(cumsum(), steps=3, scales=(1,), train_scale=10, compare_compiled=False))
    assert drawn == [10, 10, 10]
    with pytest.raises(CraspError, match="numeric tasks only"):
        train(quick(majority(), train_scale=10))


def test_param_filter_freezes_other_weights():
    task = majority()
    torch.manual_seed(0)
    model = SequenceModel(SequenceModelConfig(2, 2, d_model=16, n_layers=1, max_positions=16))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    results = train(
        quick(task, bins=[(1, 8)], early_stop=False, steps=5),
        model=model,
        param_filter=lambda name, _: name.startswith("head."),
    )
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {"head.weight", "head.bias"}
    assert results["n_trainable"] == 16 * 2 + 2 < results["n_parameters"]


def test_numeric_run(tmp_path):
    results = train(quick(cumsum(), tmp_path, test_size=100, scales=(1, 2, 10), steps=40))
    assert set(json.loads((tmp_path / "results.json").read_text())) == NUMERIC_KEYS
    assert set(results["metrics"]) == {"1", "2", "10"} == set(results["compiled_metrics"])
    assert results["compiled_metrics"]["10"]["mse"] == 0.0
    assert results["compiled_metrics"]["10"]["close_accuracy"] == 1.0
    mse = [results["metrics"][c]["mse"] for c in ("1", "10")]
    assert 0 < mse[0] < mse[1]
    history = [loss for _, loss in results["loss_history"]]
    assert history[-1] < history[0]
    assert results["model_config"]["n_layers"] == 4 and results["n"] == 8
    model = load(tmp_path)
    assert isinstance(model, NumericModel) and model.config.kind == "positional"
    standard = train(quick(cumsum(), numeric_kind="standard", steps=2, scales=(1,)))
    assert standard["model_config"]["kind"] == "standard"


def test_bad_training_configs_raise(tmp_path):
    with pytest.raises(CraspError, match="steps"):
        train(quick(majority(), steps=0))
    with pytest.raises(CraspError, match="feasible"):
        train(quick(copy_task(), bins=[(3, 3)]))
    with pytest.raises(CraspError, match=r"config\.json"):
        load(tmp_path)
    with pytest.raises(CraspError, match="unknown TrainConfig"):
        TrainConfig.from_dict({"task": "x", "colour": 1})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"steps": "3"}, "steps must be an integer >= 1, not '3'"),
        ({"lr": True}, "lr must be a number > 0"),
        ({"bins": [1, 8]}, "bins must be a non-empty list of [lo, hi] pairs"),
        ({"bins": [(9, 1)]}, "bins must be"),
        ({"scales": ()}, "scales must be a non-empty list of positive numbers"),
        ({"pe": "xpos"}, "pe must be one of ape, nope, sin, random, rope, alibi, relative"),
        ({"early_stop": 1}, "early_stop must be true or false"),
        ({"n_layers": 0}, "n_layers must be an integer in [1, 2147483647], not 0"),
        ({"seed": -1}, "seed must be an integer >= 0, not -1"),
        ({"bins": [(1, 10**30)]}, "bins must be a non-empty list of [lo, hi] pairs with 0"),
    ],
)
def test_train_config_refuses_bad_values(change, message):
    with pytest.raises(CraspError, match=re.escape(message)):
        quick(majority(), **change)


def test_every_train_config_field_is_checked():
    assert {f.name for f in fields(TrainConfig)} - {"task"} == set(loop.FIELD_RULES)


def test_an_unwritable_output_directory_fails_before_training(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    monkeypatch.setattr(loop, "_fit", lambda *a, **k: pytest.fail("training started"))
    with pytest.raises(CraspError, match="cannot write to the output directory") as caught:
        train(quick(majority(), tmp_path / "file" / "run", bins=[(1, 8)]))
    assert str(tmp_path / "file" / "run") in caught.value.format()


def fill_disk(monkeypatch, name: str = "") -> None:
    """From now on, writing a file whose name starts with ``name`` (all files by default)
    lands half its bytes, then fails: the disk is full."""
    real = Path.write_bytes

    def full(self, data):
        if not self.name.lstrip(".").startswith(name):  # temporary files: .NAME.xxxx.tmp
            return real(self, data)
        real(self, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full)


@pytest.mark.parametrize(
    "name", ["checkpoint.pt", "model.safetensors", "config.json", "results.json"]
)
def test_a_full_disk_names_the_file_and_keeps_the_previous_results(tmp_path, monkeypatch, name):
    config = quick(majority(), tmp_path, bins=[(1, 8)], steps=4, eval_every=2)
    train(config)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    fill_disk(monkeypatch, name)
    with pytest.raises(CraspError, match="No space left on device") as caught:
        train(config)
    assert caught.value.format().startswith(f"{tmp_path / name}: error: cannot write")
    monkeypatch.undo()
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert {name: after[name] for name in before} == before  # nothing lost or truncated
    assert set(after) - set(before) <= {loop.CHECKPOINT}  # no temporary files left


def interrupt_at_call(monkeypatch, count: int) -> None:
    """The ``count``-th training batch raises KeyboardInterrupt (a Ctrl-C mid-run)."""
    calls = []
    real = loop.sample_examples

    def sample(*args, **kw):
        calls.append(1)
        if len(calls) == count:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(loop, "sample_examples", sample)


def test_an_interrupted_run_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    def config(out):
        return quick(majority(), out, bins=[(1, 8)], steps=6, eval_every=2, early_stop=False)

    whole = train(config(tmp_path / "whole"))
    assert whole["resumed_from"] is None
    assert not (tmp_path / "whole" / loop.CHECKPOINT).exists()  # removed when finished
    interrupt_at_call(monkeypatch, 5)  # after the checkpoint at step 4
    with pytest.raises(KeyboardInterrupt):
        train(config(tmp_path / "cut"))
    assert (tmp_path / "cut" / loop.CHECKPOINT).exists()
    assert not (tmp_path / "cut" / "results.json").exists()
    monkeypatch.undo()
    resumed = train(config(tmp_path / "cut"))
    assert resumed["resumed_from"] == 4 and resumed["steps"] == 6
    assert resumed["loss_history"] == whole["loss_history"]
    assert resumed["eval_history"] == whole["eval_history"]
    assert resumed["accuracy"] == whole["accuracy"]
    states = load(tmp_path / "whole").state_dict(), load(tmp_path / "cut").state_dict()
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    assert not (tmp_path / "cut" / loop.CHECKPOINT).exists()


def test_a_checkpoint_of_another_config_is_not_resumed(tmp_path, monkeypatch):
    config = quick(majority(), tmp_path, bins=[(1, 8)], steps=6, eval_every=2, early_stop=False)
    interrupt_at_call(monkeypatch, 5)
    with pytest.raises(KeyboardInterrupt):
        train(config)
    monkeypatch.undo()
    config.lr = 0.5
    assert train(config)["resumed_from"] is None


def test_randomized_positions_see_one_length_per_batch(monkeypatch):
    """Ruoss et al.: a training batch has one length, so every sequence gets the whole
    sorted sample of positions; at test too, each chunk is one length."""
    seen: list[set[int]] = []
    original = SequenceModel.sample_positions

    def spy(self, lengths, width, **kw):
        seen.append(set(lengths.tolist()))
        return original(self, lengths, width, **kw)

    monkeypatch.setattr(SequenceModel, "sample_positions", spy)
    train(quick("d2", pe="random", steps=6, eval_every=6, test_size=30, compare_compiled=False))
    assert len(seen) > 6 and all(len(lengths) == 1 for lengths in seen)
    seen.clear()
    train(quick("d2", pe="ape", steps=6, eval_every=6, test_size=30, compare_compiled=False))
    assert any(len(lengths) > 1 for lengths in seen)  # other encodings mix lengths


@pytest.mark.parametrize("kind", ["sequence", "numeric"])
def test_select_best_scores_the_best_in_distribution_evaluation(kind):
    """``select = "best"`` (the C-RASP paper's rule): the model scored at the end is the
    one of the evaluation with the best in-distribution score (highest accuracy; lowest
    MSE), the first of equal ones, and the results say which step that was."""
    if kind == "sequence":
        config = quick(majority(), steps=60, eval_every=10, bins=[(1, 8)], early_stop=False)
    else:
        config = quick(cumsum(), steps=40, eval_every=10, scales=(1.0,), numeric_n=4)
    last = train(config)
    best = train(replace(config, select="best"))
    assert "selected_step" not in last
    history = best["eval_history"]
    assert history == last["eval_history"]  # the same training
    values = [value for _, value in history]
    pick = (max if kind == "sequence" else min)(values)
    assert best["selected_step"] == history[values.index(pick)][0]
    if kind == "sequence":
        assert best["accuracy"]["1-8"] == pytest.approx(pick)  # the same test set
    else:
        assert best["metrics"]["1.0"]["mse"] == pytest.approx(pick, rel=1e-5)
    # the last checkpoint's scores are in the same record: the two rules on one run
    field, scores = (
        ("last_accuracy", "accuracy") if kind == "sequence" else ("last_metrics", "metrics")
    )
    if best["selected_step"] == best["steps"]:
        assert field not in best
    else:
        assert best[field] == last[scores]
    assert field not in last and "best_weights" not in best


def test_a_field_added_later_keeps_earlier_run_keys():
    config = quick(majority())
    key = loop.train_key(config)
    assert "select" not in key and "model" not in key  # at their defaults: the keys runs
    assert loop.train_key(replace(config, select="best"))["select"] == "best"  # had before
    assert loop.train_key(replace(config, model="token_mlp", pe="nope"))["model"] == "token_mlp"


def test_provenance_of_a_sent_tree_takes_the_senders_commit(monkeypatch, tmp_path):
    """A tree sent to another machine (a GPU machine) may have no commit of its own, or
    a stale one; the sender's CRASP_SOURCE_COMMIT is recorded, 'modified' unknown."""
    from crasp_compiler.experiments.train import provenance

    monkeypatch.setattr(provenance, "PACKAGE", tmp_path)  # not a git checkout
    monkeypatch.delenv("CRASP_SOURCE_COMMIT", raising=False)
    assert provenance.code_revision() == {"commit": None, "modified": None}
    monkeypatch.setenv("CRASP_SOURCE_COMMIT", "a" * 40)
    assert provenance.code_revision() == {"commit": "a" * 40, "modified": None}
    monkeypatch.undo()  # in this checkout, too: the sender's word wins over a stale .git
    monkeypatch.setenv("CRASP_SOURCE_COMMIT", "b" * 40)
    assert provenance.code_revision()["commit"] == "b" * 40


@pytest.mark.parametrize("causal", [True, False])
def test_relative_attention_is_transformer_xl(causal):
    """Head h scores query i on key j as ((q_i + u)·k_j + (q_i + v)·W_R r(p_i − p_j)) / √d
    (Dai et al. 2019), computed here head by head from the weights with the T × T table of
    distances the model avoids; u, v and W_R learn, u and v without weight decay; each
    sequence of a batch may have its own positions."""
    model = small_model("relative", causal=causal)
    attn = model.blocks[0].attn
    with torch.no_grad():
        attn.content_bias.normal_()
        attn.position_bias.normal_()
    tokens = torch.tensor([[0, 1, 2, 1, 0], [2, 0, 1, 1, 2]])
    positions = torch.tensor([[0, 3, 4, 8, 11]] * 2)
    x = model.blocks[0].ln1(model.embed(tokens))
    q, k, _ = attn._split(x)
    d_head = q.shape[-1]
    distance = sinusoid(positions[0, :, None] - positions[0, None, :], 16)
    w_r = attn.relative(distance).view(5, 5, 2, d_head)
    for h in range(2):
        u, v = attn.content_bias[h, 0], attn.position_bias[h, 0]
        scores = ((q[:, h] + u) @ k[:, h].transpose(-1, -2)) / math.sqrt(d_head)
        scores = scores + torch.einsum("bid,ijd->bij", q[:, h] + v, w_r[:, :, h]) / math.sqrt(
            d_head
        )
        if causal:
            scores = scores.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), -math.inf)
        expected = torch.softmax(scores, dim=-1)
        torch.testing.assert_close(attn.weights(x, causal, None, positions)[:, h], expected)
    model.train()
    loss = model(tokens, positions).square().sum()
    loss.backward()
    for name in ("content_bias", "position_bias"):
        assert float(getattr(attn, name).grad.abs().sum()) > 0
    assert float(attn.relative.weight.grad.abs().sum()) > 0
    config = TrainConfig(task="tomita1", pe="relative", weight_decay=0.5)
    groups = loop._optimizer(config, model, None)[0].param_groups
    assert [g["weight_decay"] for g in groups] == [0.5, 0.0]
    no_decay = {id(p) for p in groups[1]["params"]}
    assert id(attn.content_bias) in no_decay and id(attn.position_bias) in no_decay
    assert id(attn.relative.weight) not in no_decay
    model.eval()
    apart = torch.tensor([[0, 1, 2, 3, 4], [5, 9, 10, 30, 31]])  # each row its own positions
    with torch.no_grad():
        together = model(tokens, apart)
        for row in range(2):
            alone = model(tokens[row : row + 1], apart[row : row + 1])
            torch.testing.assert_close(together[row : row + 1], alone)
