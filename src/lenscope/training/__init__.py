"""Training: BaseTrainer lifecycle, state, checkpoints and data."""

from .config import TrainerConfig
from .state import TrainState
from .trainer import BaseTrainer

__all__ = ["BaseTrainer", "TrainState", "TrainerConfig"]
