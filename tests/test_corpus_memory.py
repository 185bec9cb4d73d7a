"""lm/train on a 1 GiB corpus of one line, built on the fly, in bounded memory (measured: the process's peak RSS
under 1 GiB): the text is read and tokenized a piece at a time (lm_text), refused by name past the token budget,
and `data/max_tokens=N` trains on its first N tokens without reading the rest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hf_models import checkpoint, save_tokenizer, torch_or_skip
from multiproc import cpu_env

from lenscope.examples.lm_text import CHUNK_CHARS, encode_stream, pieces, read_texts

GiB = 1 << 30
# This process's own peak RSS: /proc's VmHWM is reset by exec, while ru_maxrss starts at the RSS of the process that
# forked it (a large pytest worker would set every child's peak).
PEAK = r'''
def peak():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
'''
_DRIVER = PEAK + r'''
import json, sys
from lenscope.cli import main
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "peak": peak()}))
'''


@pytest.fixture(scope="module")
def one_line(tmp_path_factory) -> Path:
    """1 GiB of words, one line, no newline at all."""
    path = tmp_path_factory.mktemp("corpus") / "one-line.txt"
    block = (" ".join(f"w{i % 40}" for i in range(300_000)) + " ").encode()[:1 << 20]
    with open(path, "wb") as handle:
        for _ in range(GiB // len(block)):
            handle.write(block)
    return path


def _train(tmp_path: Path, text: Path, *extra: str) -> tuple[dict, str]:
    torch_or_skip()
    _, folder = checkpoint("llama")
    save_tokenizer(folder)
    argv = ["run", "lm/train", f"model/pretrained={folder}", f"data/text={text}", "training/steps=1",
            "training/batch_size=2", "data/seq_len=16", "logging/validation_interval=0",
            "logging/checkpoint_interval=0", "training/analyze=false", *extra, "--store", str(tmp_path / "runs")]
    done = subprocess.run([sys.executable, "-c", _DRIVER, *argv], env=cpu_env(), capture_output=True, text=True,
                          timeout=600, check=False)
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.mark.slow
def test_a_one_line_gibibyte_is_refused_past_the_token_budget_in_bounded_memory(tmp_path, one_line) -> None:
    result, err = _train(tmp_path, one_line)
    print(f"peak RSS {result['peak'] / (1 << 20):.0f} MiB")
    assert result["rc"] == 2 and "holds more than 33554432 tokens" in err and "data/max_tokens" in err, err[-2000:]
    assert result["peak"] < GiB


@pytest.mark.slow
def test_its_first_tokens_train_without_reading_the_rest(tmp_path, one_line) -> None:
    result, err = _train(tmp_path, one_line, "data/max_tokens=100000")
    print(f"peak RSS {result['peak'] / (1 << 20):.0f} MiB")
    assert result["rc"] == 0, err[-2000:]
    assert result["peak"] < GiB


def test_a_long_line_is_cut_before_a_space_and_tokenizes_as_the_whole(tmp_path) -> None:
    words = [f"w{i % 40}" for i in range(CHUNK_CHARS)]  # a line of about 3.7 million characters
    path = tmp_path / "long.txt"
    path.write_text("w1\n\n" + " ".join(words) + "\nw2\n")
    got = list(pieces(path))
    assert got[0] == ("w1", True) and got[-1] == ("w2", True) and len(got) >= 5
    assert [last for _, last in got[1:-1]] == [False] * (len(got) - 3) + [True]  # one document in pieces
    assert all(len(text) <= CHUNK_CHARS for text, _ in got)
    assert all(text.startswith(" ") for text, _ in got[2:-1])  # each continuation cut before a space
    assert read_texts(path) == ["w1", " ".join(words), "w2"]  # the documents as one reads them whole
    stream, starts = encode_stream(lambda text, first: [int(w[1:]) for w in text.split()], iter(got), -1)
    assert len(starts) == 4 and list(stream[starts[1]:starts[2] - 1]) == [int(w[1:]) for w in words]


def test_a_corpus_read_whole_is_refused_past_its_characters_naming_the_file(tmp_path) -> None:
    from lenscope.errors import ConfigError
    from lenscope.examples.lm_corpus import read_corpus
    from lenscope.examples.lm_text import read_file

    path = tmp_path / "big.txt"
    path.write_text(("w1 w2 " * 1000 + "\n") * 20)
    assert len(read_file(path)) == 20
    with pytest.raises(ConfigError, match="big.txt: data/text holds more than 50000 characters"):
        read_file(path, max_chars=50_000)
    assert len(read_corpus(str(path)).texts) == 20


_READ = PEAK + r'''
import json, sys
from lenscope.errors import ConfigError
from lenscope.examples.lm_corpus import read_corpus
try:
    read_corpus(sys.argv[1])
    said = ""
except ConfigError as err:
    said = str(err)
print(json.dumps({"said": said, "peak": peak()}))
'''


@pytest.mark.slow
def test_a_one_line_gibibyte_for_a_bpe_is_refused_in_bounded_memory(one_line) -> None:
    """model/family reads its corpus whole (its BPE is trained on it): past 2^28 characters it is refused by name."""
    done = subprocess.run([sys.executable, "-c", _READ, str(one_line)], env=cpu_env(), capture_output=True, text=True,
                          timeout=600, check=False)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"peak RSS {result['peak'] / (1 << 20):.0f} MiB")
    assert "one-line.txt: data/text holds more than 268435456 characters" in result["said"], done.stderr[-2000:]
    assert result["peak"] < GiB
