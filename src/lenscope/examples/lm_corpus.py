"""A corpus for training a language model from scratch: documents split by a hash of their name, a byte-level BPE.

`data/text=stdlib` reads the running interpreter's standard-library sources (`.py` files; test folders and
site-packages left out), one document per file: real text every machine has offline. It depends on the Python
version, so the file list and a SHA-256 of the contents are recorded on the run's node.
`data/text=hf://datasets/ORG/NAME[/CONFIG][@REVISION]` streams split `data/split` of a corpus on the Hugging Face
Hub through `datasets` (models/hub/corpus.py), one document per record, stopping at `data/max_documents`. Any other
`data/text=PATH` (.txt, .jsonl, .parquet, a folder of them) is read as `lm_text.read_texts` reads it, one
document per line or record.

A document is held out for validation when the SHA-256 of its name falls in the first `fraction` of the hash
range, so the split is deterministic and a file keeps its side when others are added. The tokenizer is a
byte-level BPE (`tokenizers`) trained on the training split only, with `<|endoftext|>` as id 0; the token
streams (documents joined by id 0) and the tokenizer are cached by a digest of the corpus and the recipe.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..files import atomic_path, write_atomic
from ..models.hub import is_hub_address
from ..models.hub.corpus import stream_texts
from .lm_text import MAX_CORPUS_CHARS, read_file, text_files

__all__ = ["EOS", "STDLIB", "Corpus", "Tokenized", "is_validation", "read_corpus", "stdlib_files", "tokenize",
           "tokenizers_module"]

STDLIB = "stdlib"
EOS = 0  # <|endoftext|>, the BPE's first special token
SPECIAL = "<|endoftext|>"
SKIPPED_DIRS = frozenset({"test", "tests", "idle_test", "site-packages"})
RECIPE = 1  # bump when the tokenizer or the streams would come out differently for the same corpus


def tokenizers_module() -> Any:
    """The `tokenizers` package, or a ConfigError saying how to install it."""
    try:
        import tokenizers  # lazy: only jobs that train a tokenizer need it
    except ImportError:
        raise ConfigError("training a tokenizer (model/family without model/pretrained) needs the tokenizers "
                          "package: pip install tokenizers (or pip install 'lenscope[pretrained]')") from None
    return tokenizers


def stdlib_files() -> tuple[Path, list[str]]:
    """The standard library's folder and its `.py` files, relative and sorted (test folders, site-packages out)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [p.relative_to(root).as_posix() for p in root.rglob("*.py")
             if not SKIPPED_DIRS.intersection(p.relative_to(root).parts[:-1])]
    return root, sorted(files)


def is_validation(name: str, fraction: float) -> bool:
    """Whether the document `name` is held out: its SHA-256, read as a number, in the first `fraction` of the range."""
    return int(hashlib.sha256(name.encode()).hexdigest()[:16], 16) < fraction * 2 ** 64


@dataclass
class Corpus:
    """Named documents (`names[i]` holds `texts[i]`), the files they came from, and a digest of the whole."""

    source: str
    names: list[str]
    texts: list[str]
    files: list[str]

    @property
    def sha256(self) -> str:
        """SHA-256 over every document's name and text, in order."""
        digest = hashlib.sha256()
        for name, text in zip(self.names, self.texts):
            digest.update(name.encode() + b"\0" + hashlib.sha256(text.encode()).digest())
        return digest.hexdigest()

    def split(self, fraction: float) -> tuple[list[int], list[int]]:
        """(training, validation) document indices."""
        held = [is_validation(name, fraction) for name in self.names]
        train = [i for i, h in enumerate(held) if not h]
        validation = [i for i, h in enumerate(held) if h]
        if not train or (fraction > 0 and not validation):
            raise ConfigError(f"data/text={self.source!r}: its {len(self.names)} documents split into {len(train)} "
                              f"for training and {len(validation)} for validation at data/validation_fraction="
                              f"{fraction}; give more documents or another fraction")
        return train, validation

    def record(self, fraction: float) -> dict[str, Any]:
        """What the node's config records of the corpus: source, Python version (stdlib), files, digest, split."""
        train, validation = self.split(fraction)
        out: dict[str, Any] = {"source": self.source, "sha256": self.sha256, "files": self.files,
                               "documents": len(self.names), "validation_documents": len(validation)}
        if self.source == STDLIB:
            out["python"] = platform.python_version()
            out["validation_files"] = [self.names[i] for i in validation]
        return out


def read_corpus(text: str, key: str = "text", max_documents: int = 0, split: str = "train") -> Corpus:
    """The documents of `data/text`: the standard library (`stdlib`), a corpus on the hub (`hf://datasets/...`,
    streamed: only `max_documents` are read), else local text files."""
    if is_hub_address(text):
        texts = list(stream_texts(text, split, key, max_documents))
        if not texts:
            raise ConfigError(f"data/text={text!r} split {split!r} holds no text")
        return Corpus(text, [f"{split}#{i}" for i in range(len(texts))], texts, [f"{text}:{split}"])
    if text == STDLIB:
        root, files = stdlib_files()
        texts = [(root / f).read_text(encoding="utf-8", errors="replace") for f in files]
        corpus = Corpus(STDLIB, files, texts, files)
    else:
        paths = text_files(text)
        base = Path(text).expanduser()
        names, texts, files, held = [], [], [], 0
        for path in paths:  # at most MAX_CORPUS_CHARS in all, refused by name past them (read in pieces)
            label = path.relative_to(base).as_posix() if base.is_dir() else path.name
            files.append(label)
            for i, doc in enumerate(read_file(path, key, MAX_CORPUS_CHARS - held)):
                names.append(f"{label}#{i}")
                texts.append(doc)
                held += len(doc)
        if not texts:
            raise ConfigError(f"data/text={text!r} holds no text")
        corpus = Corpus(str(text), names, texts, files)
    if max_documents:
        corpus = Corpus(corpus.source, corpus.names[:max_documents], corpus.texts[:max_documents],
                        corpus.files if corpus.source != STDLIB else corpus.files[:max_documents])
    return corpus


@dataclass
class Tokenized:
    """A trained tokenizer (its tokenizer.json text) and each split's token stream with its documents' starts."""

    tokenizer_json: str
    streams: dict[str, np.ndarray]  # split -> ids, documents joined by EOS (each followed by one)
    starts: dict[str, np.ndarray]   # split -> offset of each document in the stream, and the stream's length

    def tokenizer(self) -> Any:
        """The Hugging Face `tokenizers.Tokenizer`."""
        return tokenizers_module().Tokenizer.from_str(self.tokenizer_json)


def _train(texts: list[str], vocab_size: int) -> Any:
    tk = tokenizers_module()
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[SPECIAL], show_progress=False,
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def _stream(tokenizer: Any, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    ids = [e.ids for start in range(0, len(texts), 64)  # in chunks: an Encoding holds far more than its ids
           for e in tokenizer.encode_batch(texts[start:start + 64])]
    lengths = np.asarray([len(i) + 1 for i in ids], np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    stream = np.fromiter((t for doc in ids for t in (*doc, EOS)), np.int32, int(starts[-1]))
    return stream, starts


def tokenize(corpus: Corpus, vocab_size: int, fraction: float, cache: Path | None) -> Tokenized:
    """Train the BPE on the training split and tokenize both splits; read from / written to `cache` when given."""
    tk = tokenizers_module()
    key = hashlib.sha256(json.dumps([RECIPE, corpus.sha256, vocab_size, fraction, tk.__version__]).encode())
    folder = cache / key.hexdigest()[:24] if cache is not None else None
    names = ("train", "validation")
    if folder is not None and (folder / "done").is_file():
        return Tokenized((folder / "tokenizer.json").read_text(),
                         {n: np.load(folder / f"{n}.npy") for n in names},
                         {n: np.load(folder / f"{n}_starts.npy") for n in names})
    train, validation = corpus.split(fraction)
    tokenizer = _train([corpus.texts[i] for i in train], vocab_size)
    streams, starts = {}, {}
    for name, chosen in zip(names, (train, validation)):
        streams[name], starts[name] = _stream(tokenizer, [corpus.texts[i] for i in chosen])
    result = Tokenized(tokenizer.to_str(), streams, starts)
    if folder is not None:
        _save(folder, result)
    return result


def _save(folder: Path, tokenized: Tokenized) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "tokenizer.json", tokenized.tokenizer_json.encode(), sync=False)
    for name in tokenized.streams:
        for suffix, array in (("", tokenized.streams[name]), ("_starts", tokenized.starts[name])):
            with atomic_path(folder / f"{name}{suffix}.npy") as tmp, open(tmp, "wb") as handle:
                np.save(handle, array)
    write_atomic(folder / "done", b"", sync=False)
