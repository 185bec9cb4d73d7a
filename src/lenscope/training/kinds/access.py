"""The trainer's one way to call its model, whatever the library: `self.module(params)`."""

from __future__ import annotations

from typing import Any

from .base import UNSET, ModelKind, bind_model

__all__ = ["ModelAccess"]


class ModelAccess:
    """BaseTrainer's model methods; expects `model_kind` (set from build_model's result at construction)."""

    model_kind: ModelKind

    def module(self, params: Any, model_state: Any = UNSET, *, train: bool | None = None) -> Any:
        """The model as a callable holding `params`: a bound linen module, a merged NNX module, an Equinox module.

        In `loss` during training it is in training mode and holds the state's model state (NNX batch
        statistics and RNG counts, updated by the step); elsewhere it evaluates. Call the result like the
        model (`self.module(params)(inputs)`) or any of its methods (`.unembed_fn(resid)`).
        """
        return bind_model(self.model_kind, params, model_state, train)

    def params_of(self, module: Any) -> Any:
        """The parameters a bound or captured root module holds, in the state's format (e.g. for unembed())."""
        return self.model_kind.params_of(module)

    def binding_key(self) -> str | None:
        """A key of what `module(params)` computes given params (lenscope's own binding of a definition made of
        lenscope's modules, `module` not overridden), so programs on it can be saved for the next process; None
        where lenscope cannot tell."""
        if type(self).module is not ModelAccess.module:
            return None
        key = getattr(self.model_kind, "definition_key", None)
        return key() if callable(key) else None
