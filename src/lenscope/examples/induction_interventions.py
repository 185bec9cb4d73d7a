"""The induction study's interventions on a checkpoint: heads zeroed (`induction/ablate`) and each head patched at
each position from a clean repeated sequence into a corrupted one (`induction/patch`). Definitions: docs/induction.md.

Both run inside the analysis's one compiled trace (`self.forward` with patches on each block's `attn/hook_z`, the
heads' outputs before the output projection) and record their numbers as values, like the tandem analyses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..job_registry import job
from .induction_analyses import InductionView
from .induction_scores import (
    in_context_score,
    position_losses,
    prefix_matching,
    previous_token,
    repeated_halves,
    repeated_tokens,
)

__all__ = ["HeadAblation", "HeadPatching", "head_names"]


def head_names(blocks: int, heads: int) -> list[str]:
    """`L{block}H{head}` in block-major order, as the values name heads."""
    return [f"L{b}H{h}" for b in range(blocks) for h in range(heads)]


def _zeroed(blocks: int, mask: jax.Array) -> dict[str, Any]:
    """Output patches of each block's `attn/hook_z` [..., q, heads, d_head] zeroing the heads where mask[block] = 1."""
    return {f"blocks/{b}/attn/hook_z": (lambda z, b=b: z * (1 - mask[b]).astype(z.dtype)[:, None])
            for b in range(blocks)}


@job("induction/ablate")
class HeadAblation(InductionView):
    """The repeated-half advantage and in-context-learning score with heads zeroed: each head alone, the top
    `analysis/ablate_heads` induction heads (by prefix matching, found in the same trace), and as many heads that
    neither the prefix-matching nor the previous-token score marks (the lowest by the larger of the two)."""

    NAME = "head_ablation"

    def analysis_batch(self) -> dict[str, jax.Array]:
        """The repeated random tokens (`inputs`) and the in-context-learning rows of `induction/position_loss`
        (`text`: with the training variant's repeats when it has them, else plain validation text)."""
        plain, variant = self.text_rows()
        return self.repeated_batch() | self.placement.place_batch({"text": plain if variant is None else variant})

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, jax.Array]:
        """Advantage and ICL score unablated, with each head zeroed, with the top heads and with the others."""
        tokens, _, patterns = self.captured(layers, inputs)
        text, length = self.current_batch["text"], self.args.repeat_len
        prefix = jnp.stack([prefix_matching(p, length) for p in patterns])            # [blocks, heads]
        previous = jnp.stack([previous_token(p) for p in patterns])
        blocks, heads = prefix.shape
        k = min(self.args.ablate_heads, blocks * heads // 2)
        top = jnp.argsort(-prefix.ravel())[:k]
        marked = jnp.maximum(prefix, previous).ravel().at[top].set(jnp.inf)
        others = jnp.argsort(marked)[:k]

        def scores(mask: jax.Array) -> dict[str, jax.Array]:
            patch = _zeroed(blocks, mask.reshape(blocks, heads))
            first, repeated = repeated_halves(position_losses(self.forward(tokens, patch), tokens), length)
            icl = in_context_score(position_losses(self.forward(text, patch), text).mean(axis=0))
            return {"advantage": first - repeated, "repeated_half": repeated, "icl_score": icl}

        n = blocks * heads
        return {"base": scores(jnp.zeros(n)), "each": jax.vmap(scores)(jnp.eye(n)),
                "top": scores(jnp.zeros(n).at[top].set(1)), "others": scores(jnp.zeros(n).at[others].set(1)),
                "top_heads": top, "other_heads": others, "prefix": prefix, "previous": previous}

    def values(self, results: Mapping[str, Any]) -> dict[str, Any]:
        """Per set: advantage, repeated_half, icl_score; `removed_top`/`removed_others`: the share of the
        unablated advantage each set's ablation removes; the heads of each set."""
        names = head_names(*np.asarray(results["prefix"]).shape)
        floats = lambda s: {key: float(v) for key, v in s.items()}  # noqa: E731
        base = floats(results["base"])
        out: dict[str, Any] = {"base": base, "top": floats(results["top"]), "others": floats(results["others"]),
                               "each": {name: {key: float(v[i]) for key, v in results["each"].items()}
                                        for i, name in enumerate(names)}}
        for group in ("top", "others"):
            out[f"removed_{group}"] = 1 - out[group]["advantage"] / base["advantage"] if base["advantage"] else 0.0
        out["top_heads"] = ",".join(names[int(i)] for i in np.asarray(results["top_heads"]))
        out["other_heads"] = ",".join(names[int(i)] for i in np.asarray(results["other_heads"]))
        return out

    def plot(self, results: Mapping[str, Any]) -> Any:
        """The repeated-half advantage with each head zeroed (bars), the unablated advantage as a dashed line."""
        names = head_names(*np.asarray(results["prefix"]).shape)
        base = float(results["base"]["advantage"])
        fig = self.bar(names, np.asarray(results["each"]["advantage"]), xlabel="head zeroed",
                       ylabel="repeated-half advantage (nats)", title="Head ablation: one head zeroed")
        fig.set_size_inches(max(4.5, 0.7 * len(names) + 2), 3.2)
        fig.axes[0].axhline(base, color="black", linestyle="--", linewidth=1, label=f"unablated ({base:.2f})")
        fig.axes[0].legend(frameon=False, fontsize=8)
        return fig


@job("induction/patch")
class HeadPatching(InductionView):
    """Activation patching on repeated random tokens: a clean sequence [BOS, r, r] and a corrupted one whose first
    copy is other random tokens; each head's output at each position is patched from the clean run into the
    corrupted one, and the share of the repeated half's loss it restores is recorded (1: as clean, 0: as
    corrupted)."""

    NAME = "head_patching"

    def analysis_batch(self) -> dict[str, jax.Array]:
        """`analysis/patch_rows` clean sequences (`inputs`) and their corrupted twins (`corrupted`)."""
        a, vocab = self.args, self.pretrained.config.vocab_size
        clean = repeated_tokens(a.patch_rows, a.repeat_len, vocab, a.seed)
        corrupted = clean.copy()
        corrupted[:, 1:a.repeat_len + 1] = repeated_tokens(a.patch_rows, a.repeat_len, vocab, a.seed + 1)[
            :, 1:a.repeat_len + 1]
        return self.placement.place_batch({"inputs": clean, "corrupted": corrupted})

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, jax.Array]:
        """[blocks x heads, positions] of the share restored; and each head patched at every position at once."""
        clean, _, patterns = self.captured(layers, inputs)
        corrupted, length = self.current_batch["corrupted"], self.args.repeat_len
        blocks, heads = len(patterns), patterns[0].shape[1]
        paths = [f"blocks/{b}/attn/hook_z" for b in range(blocks)]
        clean_out, clean_z = self.activations(clean, paths)        # one clean run: its logits and each head's z

        def repeated(patch: Mapping[str, Any]) -> jax.Array:
            return repeated_halves(position_losses(self.forward(corrupted, patch), corrupted), length)[1]

        low = repeated_halves(position_losses(clean_out, clean), length)[1]
        high = repeated({})
        share = lambda loss: (high - loss) / jnp.where(high - low == 0, 1.0, high - low)  # noqa: E731
        grid, whole = [], []
        for path in paths:
            for h in range(heads):
                def at(p: jax.Array, path: str = path, h: int = h) -> jax.Array:
                    source = clean_z[path][:, p, h]
                    return share(repeated({path: lambda z: z.at[:, p, h].set(source)}))
                grid.append(jax.vmap(at)(jnp.arange(clean.shape[1])))
                whole.append(share(repeated({path: lambda z, path=path, h=h: z.at[..., h, :].set(
                    clean_z[path][..., h, :])})))
        return {"grid": jnp.stack(grid), "whole": jnp.stack(whole), "clean": low, "corrupted": high,
                "blocks": jnp.asarray(blocks)}

    def values(self, results: Mapping[str, Any]) -> dict[str, Any]:
        """The repeated half's loss clean and corrupted; each head's share restored patched at every position
        (`whole/L1H1`); the strongest single (head, position) cell and its share."""
        grid = np.asarray(results["grid"])
        names = head_names(int(results["blocks"]), grid.shape[0] // int(results["blocks"]))
        head, position = np.unravel_index(int(grid.argmax()), grid.shape)
        whole = np.asarray(results["whole"])
        return {"clean": float(results["clean"]), "corrupted": float(results["corrupted"]),
                "whole": {name: float(whole[i]) for i, name in enumerate(names)},
                "best_head": names[int(whole.argmax())], "best_cell": f"{names[head]}@{position}",
                "best_cell_share": float(grid[head, position])}

    def plot(self, results: Mapping[str, Any]) -> Any:
        """Heads by positions: the share of the repeated half's loss restored; the copies' boundary marked."""
        grid = np.asarray(results["grid"])
        names = head_names(int(results["blocks"]), grid.shape[0] // int(results["blocks"]))
        bound = float(np.abs(grid).max()) or 1.0
        fig = self.heatmap(grid, yticklabels=names, cmap="RdBu", vmin=-bound, vmax=bound,  # positive blue, as graphs
                           xlabel=f"position patched (copy 2 starts at {self.args.repeat_len + 1})", ylabel="head",
                           cbar_label="share restored", title="Head patching: clean into corrupted")
        fig.axes[0].axvline(self.args.repeat_len + 0.5, color="black", linewidth=0.8)
        return fig
