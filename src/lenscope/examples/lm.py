"""Language-model jobs: `lm/train` (fine-tune a pretrained checkpoint, or train a decoder family from scratch)
and `lm/eval` (loss and perplexity).

`model/pretrained=ORG/NAME[@REVISION]` names a Hugging Face repo (fetched into the HF cache once) or a local
folder, and `data/text=PATH` local text or `hf://datasets/ORG/NAME` a corpus on the hub; every analysis, op and
intervention then runs on the pretrained model, on a checkpoint (`--base`) or in tandem with fine-tuning, like on
any other trainer's model.
`model/family=gpt2|gpt_neox|llama` instead builds a fresh decoder from `model/*` sizes with a BPE trained on the
text (`lm_scratch`, `lm_corpus`; `data/text=stdlib` is the interpreter's standard library).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..config import field, to_dict
from ..errors import ConfigError
from ..job_registry import job
from ..models.hub import is_hub_address
from ..training import BaseTrainer, TrainerConfig
from ..training.data import ArrayData
from ..training.lineage import Lineage, Mode, open_lineage
from ..training.phase import Phase, session
from ..training.pretrained import PretrainedConfig, PretrainedModel
from .lm_corpus import STDLIB, Corpus, Tokenized, read_corpus, tokenize
from .lm_scratch import ScratchConfig, scratch_model, scratch_optimizer, scratch_rows, scratch_schedule
from .lm_text import MAX_TOKENS, encode_stream, pieces, stream_rows, token_rows

__all__ = ["LmConfig", "LmEval", "LmTrainer", "token_loss"]


@dataclass
class LmConfig(TrainerConfig, PretrainedConfig, ScratchConfig):
    """The checkpoint (`model/pretrained`) or a family to train from scratch (`model/family`), and the local text."""

    text: str | None = field("data/text", default=None,
                             help="a .txt, .jsonl or .parquet file or a folder of them, or a corpus on the Hugging "
                                  "Face Hub, hf://datasets/ORG/NAME[/CONFIG][@REVISION] (streamed); with "
                                  "model/family also 'stdlib': this interpreter's standard-library sources")
    text_key: str = field("data/text_key", default="text",
                          help="the field holding the text in .jsonl/.parquet (and in an hf://datasets corpus)")
    split: str = field("data/split", default="train", help="the split of an hf://datasets/ORG/NAME corpus")
    seq_len: int = field("data/seq_len", default=128, gt=0, help="tokens per example")
    packing: Literal["packed", "padded"] = field("data/packing", default="packed",
                                                 help="packed: documents joined and cut into full rows; padded: "
                                                      "one document per row")
    validation_fraction: float = field("data/validation_fraction", default=0.1, ge=0, lt=1,
                                       help="held out for validation: the last fraction of rows (model/pretrained), "
                                            "or of the documents by a hash of their names (model/family)")
    max_documents: int = field("data/max_documents", default=0, ge=0, help="read at most this many documents; 0: all")
    max_tokens: int = field("data/max_tokens", default=0, ge=0,
                            help="model/pretrained: train on the first N tokens of local data/text; 0: all of it, "
                                 "refused past 2^25 tokens (the token arrays are held in memory)")
    steps: int = field("training/steps", default=100)
    batch_size: int = field("training/batch_size", default=8)
    lr: float = field("optimization/lr", default=1e-5)
    remat: bool = field("training/remat", default=False,
                        help="recompute each block's activations in the backward pass instead of keeping them "
                             "(jax.checkpoint): less memory for long rows and big batches, about a third more compute")
    validation_interval: int = field("logging/validation_interval", default=50)
    checkpoint_interval: int = field("logging/checkpoint_interval", default=100)

    def __post_init__(self) -> None:
        """Refuse model/pretrained with model/family when the config is built, before any store is opened."""
        super().__post_init__()
        if self.family is not None and self.pretrained:
            raise ConfigError(f"model/pretrained={self.pretrained} and model/family={self.family} are both set: "
                              "give model/pretrained to fine-tune a checkpoint, or model/family to train from "
                              "scratch")


def token_loss(logits: jax.Array, targets: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(mean next-token cross-entropy, accuracy) over the positions where `mask` is 1."""
    ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), targets)
    weight = mask.astype(jnp.float32)
    total = jnp.maximum(weight.sum(), 1.0)
    return (ce * weight).sum() / total, ((jnp.argmax(logits, -1) == targets) * weight).sum() / total


def _local(text: str) -> bool:
    """Whether data/text names local files (not `stdlib`, not a corpus on the hub)."""
    return text != STDLIB and not is_hub_address(text)


@job("lm/train")
class LmTrainer(PretrainedModel, BaseTrainer[LmConfig, Any]):
    """Fine-tune a pretrained decoder (model/pretrained) or train one from scratch (model/family) on local text."""

    CONFIG = LmConfig
    SHARED_STEP = True  # the step reads only the config, --base and the data its config names

    @cached_property
    def pretrained(self) -> Any:
        """The checkpoint of `model/pretrained`, or a fresh decoder of `model/family` with the corpus's tokenizer."""
        a = self.args
        if a.family is None:
            return super().pretrained
        if self.base is not None:
            self._check_corpus()
        return scratch_model(a, self.tokenized, a.seq_len + 1)  # a whole row fits: inputs and the last target

    def _check_corpus(self) -> None:
        """ConfigError when `base` was trained on other text than data/text gives now (its tokenizer would differ)."""
        saved = (self.store.config(self.base) or {}).get("data", {}).get("corpus", {}).get("sha256")
        if saved and saved != self.corpus.sha256:
            raise ConfigError(f"node {self.base} was trained on a corpus with SHA-256 {saved[:12]}..., but "
                              f"data/text={self.args.text} gives {self.corpus.sha256[:12]}... here (the stdlib "
                              "differs between Python versions): the tokenizer trained on it would not be the "
                              "model's; run on the same text (and Python version)")

    @cached_property
    def corpus(self) -> Corpus:
        """The documents of `data/text` (a model/family job's; `stdlib` is the standard library)."""
        if not self.args.text:
            raise ConfigError("data/text is required: 'stdlib', or a .txt, .jsonl or .parquet file or a folder of them")
        return read_corpus(self.args.text, self.args.text_key, self.args.max_documents, self.args.split)

    @cached_property
    def tokenized(self) -> Tokenized:
        """The BPE trained on the corpus's training split and both splits' token streams, cached beside the store."""
        a = self.args
        return tokenize(self.corpus, a.vocab_size, a.validation_fraction, Path(self.store.root) / "cache" / "corpus")

    def build_schedule(self) -> Any:
        """Warmup, then constant or cosine (`optimization/schedule`)."""
        return scratch_schedule(self.args)

    def build_optimizer(self) -> Any:
        """AdamW, weight decay on matrices only, gradients clipped to `optimization/clip` when set."""
        return scratch_optimizer(self.args, self.schedule)

    def build_data(self) -> ArrayData:
        """Local text tokenized into `inputs`/`targets` rows; validation_fraction held out."""
        a = self.args
        if a.family is not None:
            return self._scratch_data()
        if not a.text:
            raise ConfigError("data/text is required: a .txt, .jsonl or .parquet file or a folder of them")
        tokenizer = self.pretrained.tokenizer
        if tokenizer is None:
            raise ConfigError(f"{self.pretrained.path} has no tokenizer.json, which LM jobs read text with")
        eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.pad_token_id
        rows = self._local_rows(tokenizer, eos) if _local(a.text) else token_rows(
            [tokenizer.encode(t) for t in self.corpus.texts], a.seq_len, a.packing, eos=eos,
            pad=tokenizer.pad_token_id)  # a hub corpus (data/max_documents of it) or the standard library
        count = len(rows["inputs"])
        held = max(1, int(round(count * a.validation_fraction))) if a.validation_fraction > 0 else 0
        if held >= count:
            raise ConfigError(f"the text gives {count} rows of data/seq_len={a.seq_len}; too few to hold out "
                              f"data/validation_fraction={a.validation_fraction} and still train")
        train = {k: v[: count - held] for k, v in rows.items()}
        validation = {k: v[count - held:] for k, v in rows.items()} if held else train
        return ArrayData({"train": train, "validation": validation, "test": validation}, a.batch_size, a.seed)

    def _local_rows(self, tokenizer: Any, eos: int) -> dict[str, np.ndarray]:
        """Rows of local data/text, read and tokenized a piece at a time into one token stream (lm_text): memory
        is bounded by a piece and data/max_tokens (or MAX_TOKENS), whatever the file."""
        a = self.args

        def encode(text: str, first: bool) -> list[int]:
            return tokenizer.encode(text) if first else tokenizer.encode(text, prepend_bos=False)

        budget = a.max_tokens or MAX_TOKENS
        stream, starts = encode_stream(encode, pieces(a.text, a.text_key), eos, max_documents=a.max_documents,
                                       max_tokens=budget, what=f"data/text={a.text}", refuse=not a.max_tokens)
        if a.packing == "padded" and (len(starts) - 1) * (a.seq_len + 1) > max(budget, MAX_TOKENS):
            raise ConfigError(f"data/text={a.text} holds {len(starts) - 1} documents: padded to data/seq_len + 1 = "
                              f"{a.seq_len + 1} tokens each, more than {max(budget, MAX_TOKENS)} tokens in memory; "
                              "set data/max_documents, or data/packing=packed")
        return stream_rows(stream, starts, a.seq_len, a.packing, pad=tokenizer.pad_token_id)

    def _scratch_data(self) -> ArrayData:
        """Packed rows of each split's stream (training rows repeating spans when data/repeat_fraction is set)."""
        a, tokens = self.args, self.tokenized
        train = scratch_rows(tokens.streams["train"], tokens.starts["train"], a.seq_len, a.repeat_fraction, a.seed,
                             a.repeat_mode, tokens.tokenizer().get_vocab_size())
        if a.validation_fraction > 0:
            validation = scratch_rows(tokens.streams["validation"], tokens.starts["validation"], a.seq_len)
        else:
            validation = train
        return ArrayData({"train": train, "validation": validation, "test": validation}, a.batch_size, a.seed)

    def _make_lineage(self, mode: Mode) -> Lineage:
        """The job's node; a model/family run's config also records its corpus (`data/corpus`: files, SHA-256)."""
        if self.args.family is None or mode in (Mode.ATTACH, Mode.EXPORT):
            return super()._make_lineage(mode)
        config = to_dict(self.args)
        config["data"]["corpus"] = self.corpus.record(self.args.validation_fraction)
        return open_lineage(self.store, mode, self.base, name=self.name, config=config, writer=self.is_writer)

    def on_train_start(self) -> None:
        """A model/family run keeps its tokenizer on its node: artifact `tokenizer` (tokenizer.json)."""
        super().on_train_start()
        if self.args.family is not None and self.state is not None and int(self.state.step) == 0:
            self.lineage.put_artifact("tokenizer", "tokenizer.json", self.tokenized.tokenizer_json.encode())

    def model_inputs(self, batch: Mapping[str, Any]) -> tuple:
        """(token ids, attention mask); packed rows have no padding, so the ids alone (the same logits), which
        lets patching sweeps run the decoder in pieces (prefix reuse, packed rows)."""
        if self.args.packing == "packed":
            return (batch["inputs"],)
        return batch["inputs"], batch["attention_mask"]

    def token_strings(self, ids: Any) -> list[str]:
        """How tokens read in dashboards: each id decoded alone by the checkpoint's tokenizer."""
        return self.pretrained.tokenizer.to_str_tokens([int(t) for t in ids])

    def text_ids(self, text: str) -> np.ndarray:
        """A text's token ids [seq], BOS first where the tokenizer adds one: how ops take a prompt given as text."""
        return self.pretrained.tokenizer.to_tokens(text)[0][0]

    def unembed(self, params: Any, resid: jax.Array) -> jax.Array:
        """Logits of a residual stream through the final norm and unembedding (logit lens)."""
        return self.module(params).unembed_fn(resid)

    def loss(self, params: Any, batch: Mapping[str, jax.Array], key: jax.Array) -> tuple[jax.Array, dict]:
        """Mean next-token cross-entropy over the real target positions, with accuracy."""
        logits = self.module(params)(*self.model_inputs(batch), remat=self.args.remat)
        loss, accuracy = token_loss(logits, batch["targets"], batch["target_mask"])
        return loss, {"accuracy": accuracy}


@job("lm/eval")
class LmEval(LmTrainer):
    """Loss, accuracy and perplexity of a pretrained model (or a fine-tuned checkpoint, `--base`) on local text."""

    def run(self) -> None:
        """Evaluate every validation row once (no training); records test/loss, test/accuracy, test/perplexity."""
        with session(self, Phase.TEST):
            means = self._test_split("test")
            self.lineage.record({"test/perplexity": math.exp(means["loss"])})
