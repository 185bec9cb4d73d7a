"""Language models trained from scratch: a decoder family built from a config, its BPE trained on the corpus.

`model/family=gpt2|gpt_neox|llama` (with `model/n_layers`, `model/d_model`, `model/n_heads`, `model/d_mlp`) makes the
config.json a Hugging Face folder of that family would hold, reads it with the same config map as a checkpoint
(`decoder_config`), and draws the weights (`random_decoder`: N(0, init_std), the writes into the residual
stream scaled by 1/sqrt(2 n_layers) as GPT-2 does). The parameters therefore carry the family's leaf names and
the checkpoint exports to that family's Hugging Face layout. `model/attn_only=true` zeroes the MLPs for good (one hidden
unit, weights 0, no biases: its gradients are 0 too), an attention-only model as in Olsson et al. (not a
Hugging Face architecture).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..config import field
from ..errors import ConfigError
from ..models.pretrained import Decoder, Pretrained, Tokenizer, decoder_config, random_decoder
from .lm_corpus import EOS, Tokenized

__all__ = ["FAMILIES", "ScratchConfig", "hf_config", "repeat_rows", "scratch_model", "scratch_optimizer",
           "scratch_rows", "scratch_schedule"]

FAMILIES = ("gpt2", "gpt_neox", "llama")


@dataclass
class ScratchConfig:
    """A decoder built from a config (`model/family`) instead of loaded, its tokenizer, data variant and schedule."""

    family: Literal["gpt2", "gpt_neox", "llama"] | None = field(
        "model/family", default=None,
        help="train this decoder family from scratch (instead of model/pretrained); its tokenizer, a byte-level "
             "BPE of data/vocab_size tokens, is trained on the training split of data/text")
    n_layers: int = field("model/n_layers", default=2, ge=1, help="blocks of a model/family model")
    d_model: int = field("model/d_model", default=128, ge=1, help="residual stream width of a model/family model")
    n_heads: int = field("model/n_heads", default=4, ge=1, help="attention heads per block (d_model / n_heads each)")
    d_mlp: int = field("model/d_mlp", default=0, ge=0, help="MLP hidden width; 0: 4 x d_model")
    attn_only: bool = field("model/attn_only", default=False,
                            help="MLPs that are zero and stay zero: an attention-only model (not a Hugging Face "
                                 "architecture)")
    init_std: float = field("model/init_std", default=0.02, gt=0, help="standard deviation of the initial weights")
    vocab_size: int = field("data/vocab_size", default=1024, ge=258,
                            help="tokens of the BPE trained for a model/family model (256 bytes and <|endoftext|> "
                                 "at least)")
    repeat_fraction: float = field(
        "data/repeat_fraction", default=0.0, ge=0, le=1,
        help="share of training rows whose second half repeats an earlier span of the same document (a variant "
             "of the corpus; 0: the plain text)")
    repeat_mode: Literal["span", "half", "random"] = field(
        "data/repeat_mode", default="span",
        help="with data/repeat_fraction: span (the second half repeats an earlier span of the document), half "
             "(the row's first half, then the same text again) or random (a span of 16 to seq_len/2 random ids "
             "and its repeat, inserted at a random point of the row's real text)")
    schedule: Literal["constant", "cosine"] = field(
        "optimization/schedule", default="constant",
        help="after the warmup: constant, or cosine decay to 10% of optimization/lr at training/steps")
    clip: float = field("optimization/clip", default=0.0, ge=0, help="clip gradients to this global norm; 0: off")


def hf_config(args: Any, vocab_size: int, n_positions: int) -> dict[str, Any]:
    """The config.json of the family's Hugging Face folder that this model would be (untied unembedding)."""
    d_mlp = args.d_mlp or 4 * args.d_model
    if args.d_model % args.n_heads:
        raise ConfigError(f"model/d_model={args.d_model} is not divisible by model/n_heads={args.n_heads}; each "
                          "head is d_model / n_heads wide")
    common = {"vocab_size": vocab_size, "bos_token_id": EOS, "eos_token_id": EOS, "tie_word_embeddings": False}
    if args.family == "gpt2":
        return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": args.d_model,
                "n_layer": args.n_layers, "n_head": args.n_heads, "n_inner": d_mlp, "n_positions": n_positions,
                "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, **common}
    if args.family == "gpt_neox":  # GPT-2's block (LayerNorm, GELU, sequential) with rotary positions
        return {"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"], "hidden_size": args.d_model,
                "num_hidden_layers": args.n_layers, "num_attention_heads": args.n_heads, "intermediate_size": d_mlp,
                "hidden_act": "gelu_new", "layer_norm_eps": 1e-5, "use_parallel_residual": False, "rotary_pct": 1.0,
                "rotary_emb_base": 10000, "max_position_embeddings": n_positions, "attention_bias": True, **common}
    if args.family == "llama":
        return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": args.d_model,
                "num_hidden_layers": args.n_layers, "num_attention_heads": args.n_heads,
                "num_key_value_heads": args.n_heads, "intermediate_size": d_mlp, "hidden_act": "silu",
                "rms_norm_eps": 1e-5, "max_position_embeddings": n_positions, "rope_theta": 10000.0, **common}
    raise ConfigError(f"model/family={args.family!r}: expected one of {', '.join(FAMILIES)}")


def _scaled(model: Decoder, n_layers: int) -> Decoder:
    """GPT-2's initialization: each write into the residual stream scaled by 1/sqrt(2 n_layers), positions halved."""
    factor = 1 / math.sqrt(2 * n_layers)
    writes = lambda m: [w for b in m.blocks for w in (b.attn.out.kernel, b.mlp.fc_out.kernel)]  # noqa: E731
    model = eqx.tree_at(writes, model, [w * factor for w in writes(model)])
    if model.pos_embed is not None:
        model = eqx.tree_at(lambda m: m.pos_embed.embedding, model, model.pos_embed.embedding * 0.5)
    return model


def _without_mlps(model: Decoder) -> Decoder:
    """Every MLP zero: one hidden unit, all weights 0 and no biases, so its output and all its gradients are 0 and
    AdamW keeps it 0 (an attention-only model in the decoder's one block layout)."""
    weights = lambda m: [d.kernel for b in m.blocks for d in (b.mlp.fc_in, b.mlp.gate, b.mlp.fc_out)  # noqa: E731
                         if d is not None]
    return eqx.tree_at(weights, model, [jnp.zeros_like(w) for w in weights(model)])


def scratch_model(args: Any, tokenized: Tokenized, n_positions: int) -> Pretrained:
    """A freshly initialized decoder of `model/family` with the corpus's tokenizer, as a loaded checkpoint reads."""
    backend = tokenized.tokenizer()
    raw = hf_config(args, backend.get_vocab_size(), n_positions)
    cfg = decoder_config(raw)
    if args.attn_only:
        cfg = cfg.replace(d_mlp=1, mlp_bias=False)
    model = _scaled(random_decoder(cfg, seed=args.seed, std=args.init_std), cfg.n_layers)
    if args.attn_only:
        model = _without_mlps(model)
    tokenizer = Tokenizer(backend, eos_token_id=EOS, pad_token_id=EOS)
    return Pretrained(model, cfg, tokenizer, Path(f"({args.family} from scratch)"), raw)


def _random_repeat(row: np.ndarray, vocab: int, rng: np.random.Generator) -> np.ndarray:
    """The row's text with a span of random ids (EOS excluded) and the same span again inserted at a random point:
    the repeated-sequence probe's structure at no fixed position, so no positional head can stand in for induction."""
    width = len(row)
    span = int(rng.integers(min(16, width // 2), width // 2 + 1))
    at = int(rng.integers(0, width - 2 * span + 1))
    ids = rng.integers(1, vocab, span).astype(row.dtype)
    return np.concatenate([row[:at], ids, ids, row[at:]])[:width]


def _repeating_row(stream: np.ndarray, starts: np.ndarray, width: int, rng: np.random.Generator,
                   mode: str = "span") -> np.ndarray | None:
    """A row whose second half repeats an earlier span of one document, or (`half`) its own first half again
    (None: the drawn document is too short)."""
    doc = int(rng.integers(len(starts) - 1))
    a, b = int(starts[doc]), int(starts[doc + 1])
    half = width // 2
    if b - a < width + 1:
        return None
    lo = int(rng.integers(a, b - half))
    src = int(rng.integers(a, lo + 1))
    first = stream[lo:lo + half]
    if mode == "half":
        return np.concatenate([first, stream[lo:lo + width - half]])
    second = stream[src:src + width - half] if src < lo else first[: width - half]
    return np.concatenate([first, second]) if len(second) == width - half else None


def scratch_rows(stream: np.ndarray, starts: np.ndarray, seq_len: int, repeat_fraction: float = 0.0,
                 seed: int = 0, mode: str = "span", vocab: int = 0) -> dict[str, np.ndarray]:
    """Packed rows of seq_len + 1 tokens of one split's stream; with `repeat_fraction`, that share of the rows
    (drawn from `seed`) replaced by rows that repeat text of their document (`_repeating_row`) or, mode `random`,
    that carry a repeated span of random ids below `vocab` (`_random_repeat`)."""
    width = seq_len + 1
    count = len(stream) // width
    if count == 0:
        raise ConfigError(f"the split has {len(stream)} tokens, fewer than one row of data/seq_len + 1 = {width}")
    rows = stream[: count * width].reshape(count, width).copy()
    if repeat_fraction > 0:
        rows = repeat_rows(rows, repeat_fraction, seed, mode, stream, starts, vocab)
    ones = np.ones((count, seq_len), np.int32)
    return {"inputs": rows[:, :-1], "targets": rows[:, 1:], "attention_mask": ones, "target_mask": ones,
            "labels": rows[:, -1]}


def repeat_rows(rows: np.ndarray, fraction: float, seed: int, mode: str, stream: np.ndarray, starts: np.ndarray,
                vocab: int) -> np.ndarray:
    """A copy of `rows` with a `fraction` of them (drawn from `seed`) replaced by the repeat variant `mode`."""
    if mode == "random" and vocab < 2:
        raise ConfigError(f"data/repeat_mode=random draws ids below the vocabulary's size; got vocab={vocab}")
    rows, width = rows.copy(), rows.shape[1]
    rng = np.random.default_rng([seed, 1])
    for i in np.flatnonzero(rng.random(len(rows)) < fraction):
        row = _random_repeat(rows[i], vocab, rng) if mode == "random" else _repeating_row(stream, starts, width, rng,
                                                                                            mode)
        if row is not None:
            rows[i] = row
    return rows


def scratch_schedule(args: Any) -> optax.Schedule:
    """Linear warmup to `optimization/lr`, then constant or cosine decay to 10% of it at the last step."""
    warmup = max(0, min(args.warmup_steps, args.steps))
    if args.schedule == "cosine":
        return optax.warmup_cosine_decay_schedule(0.0, args.lr, warmup, max(args.steps, warmup + 1), args.lr * 0.1)
    if warmup:
        return optax.join_schedules([optax.linear_schedule(0.0, args.lr, warmup), optax.constant_schedule(args.lr)],
                                    [warmup])
    return optax.constant_schedule(args.lr)


def scratch_optimizer(args: Any, schedule: optax.Schedule) -> optax.GradientTransformation:
    """AdamW on the schedule with weight decay on matrices only (not norms, biases), after optional clipping."""
    decay = lambda params: jax.tree_util.tree_map(lambda x: jnp.ndim(x) >= 2, params)  # noqa: E731
    adamw = optax.adamw(schedule, b1=args.b1, b2=args.b2, weight_decay=args.weight_decay, mask=decay)
    return optax.chain(optax.clip_by_global_norm(args.clip), adamw) if args.clip > 0 else adamw
