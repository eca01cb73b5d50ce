"""Fine-tuning from compiled weights: the compiled model starts exact, plain gradient steps
keep it exact (its gradient is ~0), and AdamW's normalised steps and weight decay move it."""

from __future__ import annotations

import pytest

from crasp_compiler.errors import CraspError
from crasp_compiler.experiments.train.finetune import FinetuneConfig, finetune

SMALL = {"n": 4, "steps": 20, "test_size": 32, "scales": [1.0, 10.0], "batch_size": 16}


def test_sgd_without_decay_keeps_the_compiled_model_exact(one_torch_thread):
    result = finetune(FinetuneConfig(optimizer="sgd", weight_decay=0.0, lr=1e-3, **SMALL))
    assert result["exact_before"] and result["exact_after"]
    assert result["loss_first"] < 1e-20
    assert result["largest_weight_change"] < 1e-9


def test_adamw_moves_the_weights_and_loses_exactness(one_torch_thread):
    result = finetune(FinetuneConfig(optimizer="adamw", lr=1e-3, **SMALL))
    assert result["exact_before"] and not result["exact_after"]
    assert result["largest_weight_change"] > 1e-4
    worst = max(s["max_abs_error"] for s in result["after"].values())
    assert worst > 10 * result["tolerance"]


def test_value_only_fine_tuning_trains_only_value_maps(one_torch_thread):
    result = finetune(FinetuneConfig(task="num_cummin", params="values", **SMALL))
    assert result["trainable"]
    assert all(name.endswith((".w_v", ".w_o")) for name in result["trainable"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"task": "tomita1"}, "not a numeric task"),
        ({"params": "keys"}, "params must be"),
        ({"optimizer": "lbfgs"}, "optimizer must be"),
    ],
)
def test_bad_configurations(change, message):
    with pytest.raises(CraspError, match=message):
        finetune(FinetuneConfig(**{**SMALL, **change}))
