"""TransformerLens' `utils` helpers the tutorials call, for a loaded model: `get_act_name`, `to_numpy`,
`test_prompt` (`from lenscope.models.pretrained import utils`)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

__all__ = ["get_act_name", "test_prompt", "to_numpy"]

_ATTN = ("q", "k", "v", "z", "rot_q", "rot_k", "result", "pattern", "attn_scores")
_MLP = ("pre", "post", "mid", "pre_linear")
_NAMES = {"attn": "pattern", "attn_logits": "attn_scores", "key": "k", "query": "q", "value": "v",
          "mlp_pre": "pre", "mlp_mid": "mid", "mlp_post": "post"}
_TYPES = {"a": "attn", "attention": "attn", "m": "mlp", "b": "", "block": "", "blocks": ""}


def get_act_name(name: str, layer: int | str | None = None, layer_type: str | None = None) -> str:
    """A hook point's full name from TransformerLens' shorthand: `get_act_name("z", 0)` is `blocks.0.attn.hook_z`,
    `"pre5"` `blocks.5.mlp.hook_pre`, `"embed"` `hook_embed`, `("scale", 4, "ln1")` `blocks.4.ln1.hook_scale`."""
    if layer is None and layer_type is None and ("." in name or name.startswith("hook_")):
        return name
    packed = re.fullmatch(r"([a-z]+)(\d+)([a-z]?.*)", name)
    if packed:
        name, layer, layer_type = packed.group(1), packed.group(2), packed.group(3) or None
    name = _NAMES.get(name, name)
    if name in _ATTN:
        layer_type = "attn"
    elif name in _MLP:
        layer_type = "mlp"
    elif layer_type in _TYPES:
        layer_type = _TYPES[layer_type]
    parts = ([f"blocks.{layer}"] if layer is not None else []) + ([layer_type] if layer_type else []) + [f"hook_{name}"]
    if name in ("scale", "normalized") and layer is None:
        parts.insert(0, "ln_final")
    return ".".join(parts)


def to_numpy(x: Any) -> np.ndarray:
    """An array (JAX, NumPy, a torch tensor, a list) as NumPy."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def test_prompt(prompt: str, answer: str | list[str], model: Any, prepend_space_to_answer: bool = True,
                print_details: bool = True, prepend_bos: bool | None = None, top_k: int = 10) -> None:
    """TransformerLens' `test_prompt`: the prompt's tokens, then for each answer token its rank, logit and
    probability after what precedes it, with the top `top_k` predictions."""
    answers = [answer] if isinstance(answer, str) else list(answer)
    for one in answers:
        text = (" " + one.lstrip()) if prepend_space_to_answer else one
        prompt_ids = np.asarray(model.to_tokens(prompt, prepend_bos=prepend_bos))[0]
        answer_ids = np.asarray(model.to_tokens(text, prepend_bos=False))[0]
        ids = np.concatenate([prompt_ids, answer_ids])[None]
        logits = np.asarray(model(ids))[0].astype(np.float64)
        if print_details:
            print("Tokenized prompt:", [model.to_string(np.asarray([t])) for t in prompt_ids])
            print("Tokenized answer:", [model.to_string(np.asarray([t])) for t in answer_ids])
        for i, target in enumerate(answer_ids):
            row = logits[len(prompt_ids) - 1 + i]
            probs = np.exp(row - row.max())
            probs /= probs.sum()
            order = np.argsort(-row)
            rank = int(np.nonzero(order == target)[0][0])
            word = model.to_string(np.asarray([target]))
            print(f"Performance on answer token:\nRank: {rank: <8} Logit: {row[target]:5.2f} Prob: "
                  f"{probs[target]:6.2%} Token: |{word}|")
            if print_details:
                for k, t in enumerate(order[:top_k]):
                    print(f"Top {k}th token. Logit: {row[t]:5.2f} Prob: {probs[t]:6.2%} Token: "
                          f"|{model.to_string(np.asarray([t]))}|")
