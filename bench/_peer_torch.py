"""The peers' side of bench/peers.py: the same decoder as a TransformerLens HookedTransformer (built from a
config, no download) with lenscope's weights copied in, and nnsight wrapped around that very model.

Importing this module fails with ImportError when torch or transformer-lens is missing; nnsight is optional.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib.metadata import version
from typing import Any

import numpy as np
import torch
from _peer_common import Shape, normalized_grid
from transformer_lens import HookedTransformer, HookedTransformerConfig

try:  # nnsight is the optional third peer; without it its rows are skipped
    import nnsight
except ImportError as missing:
    nnsight, NNSIGHT_MISSING = None, str(missing)
else:
    NNSIGHT_MISSING = ""


def tensor(x: Any) -> torch.Tensor:
    return torch.tensor(np.asarray(x))


def stats(x: torch.Tensor) -> torch.Tensor:
    """The small reduction of a residual stream, as lenscope's side computes it: mean and RMS."""
    return torch.stack([x.mean(), torch.sqrt(torch.mean(x * x))])


def lenscope_weights(params: Mapping[str, Any], shape: Shape) -> dict[str, torch.Tensor]:
    """lenscope.models.Transformer's linen parameters as a HookedTransformer state dict (zero attention biases)."""
    state = {"embed.W_E": tensor(params["embed"]["embedding"]), "pos_embed.W_pos": tensor(params["pos_embed"]),
             "unembed.W_U": tensor(params["unembed"]["kernel"]), "unembed.b_U": torch.zeros(shape.vocab)}
    for i in range(shape.layers):
        attn, mlp = params[f"blocks_{i}"]["attn"], params[f"blocks_{i}"]["mlp"]
        for name, key in (("Q", "query"), ("K", "key"), ("V", "value")):
            state[f"blocks.{i}.attn.W_{name}"] = tensor(attn[key]["kernel"]).permute(1, 0, 2)  # [heads, d, d_head]
            state[f"blocks.{i}.attn.b_{name}"] = torch.zeros(shape.heads, shape.d_head)
        state[f"blocks.{i}.attn.W_O"] = tensor(attn["out"]["kernel"])
        state[f"blocks.{i}.attn.b_O"] = torch.zeros(shape.d_model)
        for name, key in (("in", "fc_in"), ("out", "fc_out")):
            state[f"blocks.{i}.mlp.W_{name}"] = tensor(mlp[key]["kernel"])
            state[f"blocks.{i}.mlp.b_{name}"] = tensor(mlp[key]["bias"])
    return state


class TorchSide:
    """TransformerLens (and nnsight around it) with lenscope's weights, tokens and answers; every timed method."""

    def __init__(self, shape: Shape, threads: int, params: Mapping[str, Any], clean: Any, corrupt: Any,
                 correct: Any, wrong: Any) -> None:
        torch.set_num_threads(threads)
        self.shape = shape
        cfg = HookedTransformerConfig(n_layers=shape.layers, d_model=shape.d_model, n_heads=shape.heads,
                                      d_head=shape.d_head, d_mlp=shape.d_mlp, d_vocab=shape.vocab, n_ctx=shape.seq,
                                      act_fn="relu", normalization_type=None, dtype=torch.float32, device="cpu")
        self.tl = HookedTransformer(cfg)
        missing, unexpected = self.tl.load_state_dict(lenscope_weights(params, shape), strict=False)
        learned = [k for k in missing if not k.endswith(("IGNORE", "mask"))]  # buffers TransformerLens builds itself
        if learned or unexpected:
            raise SystemExit(f"weight copy mismatch: missing {learned}, unexpected {unexpected}")
        self.nnsight = nnsight.NNsight(self.tl) if nnsight is not None else None
        self.clean, self.corrupt = tensor(clean).long(), tensor(corrupt).long()
        self.correct, self.wrong = tensor(correct).long(), tensor(wrong).long()
        self.rows = torch.arange(shape.batch)
        self.names = [f"blocks.{i}.hook_resid_post" for i in range(shape.layers)]

    def versions(self) -> str:
        names = ["torch", "transformer-lens"] + (["nnsight"] if nnsight is not None else [])
        return ", ".join(f"{name} {version(name)}" for name in names)

    def metric(self, logits: torch.Tensor) -> float:
        last = logits[:, -1]
        return float((last[self.rows, self.correct] - last[self.rows, self.wrong]).mean())

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor) -> np.ndarray:
        return self.tl(tokens).numpy()

    # -- capture --------------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def capture(self) -> np.ndarray:
        """[layers, 2] stats of every block's output from one `run_with_cache(names_filter=...)`."""
        _, cache = self.tl.run_with_cache(self.clean, names_filter=self.names)
        return torch.stack([stats(cache[name]) for name in self.names]).numpy()

    @torch.inference_mode()
    def nnsight_capture(self) -> np.ndarray:
        """The same from one nnsight trace saving each block's output."""
        with self.nnsight.trace(self.clean):
            saved = nnsight.save([])  # nnsight 0.8: a list of .save() calls fails inside a trace; append instead
            for block in self.nnsight.blocks:
                saved.append(block.output)
        return torch.stack([stats(x) for x in saved]).numpy()

    # -- patching -------------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def patching_loop(self, cells: Sequence[tuple[int, int]] | None = None) -> np.ndarray:
        """The normalized grid [layers, seq]: clean `run_with_cache`, then `run_with_hooks` per (layer, position);
        `cells`: those (layer, position) cells only (the others NaN)."""
        clean_logits, cache = self.tl.run_with_cache(self.clean, names_filter=self.names)
        high, low = self.metric(clean_logits), self.metric(self.tl(self.corrupt))
        out = np.full((self.shape.layers, self.shape.seq), np.nan)
        every = [(layer, pos) for layer in range(self.shape.layers) for pos in range(self.shape.seq)]
        for layer, pos in every if cells is None else cells:
            name = self.names[layer]

            def hook(act: torch.Tensor, hook: Any, pos: int = pos, name: str = name) -> torch.Tensor:
                act[:, pos] = cache[name][:, pos]
                return act
            out[layer, pos] = self.metric(self.tl.run_with_hooks(self.corrupt, fwd_hooks=[(name, hook)]))
        return normalized_grid(out, high, low)

    @torch.inference_mode()
    def start_at_layer_sweep(self) -> np.ndarray:
        """The same grid as an expert batches it by hand: for each layer, the corrupted residual stream after
        it with one position taken from the clean run, every position at once in one batch, run from the next
        layer on (`model(resid, start_at_layer=layer + 1)`, the layers before it skipped)."""
        clean_logits, clean = self.tl.run_with_cache(self.clean, names_filter=self.names)
        bad_logits, bad = self.tl.run_with_cache(self.corrupt, names_filter=self.names)
        high, low = self.metric(clean_logits), self.metric(bad_logits)
        seq, batch = self.shape.seq, self.shape.batch
        eye = torch.eye(seq, dtype=torch.bool)[:, None, :, None]  # [patched position, 1, position, 1]
        out = np.zeros((self.shape.layers, seq))
        for layer, name in enumerate(self.names):
            resid = torch.where(eye, clean[name][None], bad[name][None])  # [seq, batch, seq, d_model]
            logits = self.tl(resid.reshape(seq * batch, seq, -1), start_at_layer=layer + 1)[:, -1]
            last = logits.reshape(seq, batch, -1)  # [patched position, batch, vocab]
            diff = (torch.gather(last, 2, self.correct[None, :, None].expand(seq, -1, 1))
                    - torch.gather(last, 2, self.wrong[None, :, None].expand(seq, -1, 1)))
            out[layer] = diff[..., 0].mean(1).numpy()
        return normalized_grid(out, high, low)

    @torch.inference_mode()
    def nnsight_loop(self) -> np.ndarray:
        """The same grid with nnsight: one trace saving the clean outputs, then one trace per (layer, position)
        (nnsight cannot batch several invokes on a plain torch module)."""
        blocks = self.nnsight.blocks
        with self.nnsight.trace(self.clean):
            acts = nnsight.save([])
            for block in blocks:
                acts.append(block.output)
            clean_logits = self.nnsight.output.save()
        high, low = self.metric(clean_logits), self.metric(self.tl(self.corrupt))
        out = np.zeros((self.shape.layers, self.shape.seq))
        for layer in range(self.shape.layers):
            for pos in range(self.shape.seq):
                with self.nnsight.trace(self.corrupt):
                    blocks[layer].output[:, pos] = acts[layer][:, pos]
                    logits = self.nnsight.output.save()
                out[layer, pos] = self.metric(logits)
        return normalized_grid(out, high, low)
