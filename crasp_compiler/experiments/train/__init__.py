"""The training harness: trained transformers on the tasks of
:mod:`crasp_compiler.experiments.tasks`, evaluated per length bin (sequence tasks) or per value scale
(numeric tasks) and compared with the tasks' compiled programs."""

from crasp_compiler.experiments.train.loop import TrainConfig, load, load_config, train
from crasp_compiler.experiments.train.models import (
    NumericModel,
    NumericModelConfig,
    SequenceModel,
    SequenceModelConfig,
)

__all__ = [
    "NumericModel",
    "NumericModelConfig",
    "SequenceModel",
    "SequenceModelConfig",
    "TrainConfig",
    "load",
    "load_config",
    "train",
]
