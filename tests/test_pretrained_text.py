"""Text for LM jobs without torch: .txt/.jsonl/.parquet files and folders read, rows packed or padded with their
masks and labels, and the tokenizer's BOS handling and left/right padding."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import save_tokenizer  # noqa: E402

from lenscope.errors import ConfigError, UsageError  # noqa: E402
from lenscope.examples.lm_text import read_texts, token_rows  # noqa: E402
from lenscope.models.pretrained import Tokenizer  # noqa: E402


def test_txt_jsonl_parquet_and_folders_are_read(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    (tmp_path / "a.txt").write_text("first line\n\nsecond line\n")
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps({"body": t, "n": i}) for i, t in enumerate("xy")) + "\n")
    pq.write_table(pa.table({"body": ["from parquet"]}), tmp_path / "c.parquet")
    assert read_texts(tmp_path / "a.txt") == ["first line", "second line"]
    assert read_texts(tmp_path / "b.jsonl", "body") == ["x", "y"]
    assert read_texts(tmp_path / "c.parquet", "body") == ["from parquet"]
    with pytest.raises(ConfigError, match=r"record 0 has no string field 'text' \(data/text_key\); it has: body, n"):
        read_texts(tmp_path / "b.jsonl")
    (tmp_path / "a.txt").unlink()
    assert read_texts(tmp_path, "body") == ["x", "y", "from parquet"]  # a folder: its files in name order
    with pytest.raises(ConfigError, match="unknown suffix '.csv'"):
        (tmp_path / "d.csv").write_text("x")
        read_texts(tmp_path / "d.csv")


def test_rows_packed_and_padded() -> None:
    documents = [[5, 6, 7], [8, 9], [10, 11, 12, 13, 14]]
    packed = token_rows(documents, 3, "packed", eos=2, pad=0)  # 5 6 7 2 | 8 9 2 10 | 11 12 13 14 | (2 dropped)
    np.testing.assert_array_equal(packed["inputs"], [[5, 6, 7], [8, 9, 2], [11, 12, 13]])
    np.testing.assert_array_equal(packed["targets"], [[6, 7, 2], [9, 2, 10], [12, 13, 14]])
    np.testing.assert_array_equal(packed["labels"], [2, 10, 14])
    assert packed["attention_mask"].all() and packed["target_mask"].all()
    padded = token_rows(documents, 3, "padded", eos=2, pad=0)
    np.testing.assert_array_equal(padded["inputs"], [[5, 6, 7], [8, 9, 0], [10, 11, 12]])
    np.testing.assert_array_equal(padded["attention_mask"], [[1, 1, 1], [1, 1, 0], [1, 1, 1]])
    np.testing.assert_array_equal(padded["target_mask"], [[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    with pytest.raises(ConfigError, match="fewer than one row"):
        token_rows([[5]], 3, "packed", eos=2, pad=0)


def test_tokenizer_bos_and_padding_sides(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers", reason="pip install -e '.[pretrained]'")
    save_tokenizer(tmp_path)  # word level; its post-processor prepends <bos> (1); w0 is id 4
    tok = Tokenizer.from_file(tmp_path / "tokenizer.json", bos_token_id=1, eos_token_id=2, pad_token_id=0)
    assert tok.encode("w0 w1") == [1, 4, 5]
    assert tok.encode("w0 w1", prepend_bos=False) == [4, 5]
    ids, mask = tok.to_tokens(["w0 w1 w2", "w3"])
    np.testing.assert_array_equal(ids, [[1, 4, 5, 6], [1, 7, 0, 0]])
    np.testing.assert_array_equal(mask, [[1, 1, 1, 1], [1, 1, 0, 0]])
    ids, mask = tok.to_tokens(["w0 w1 w2", "w3"], prepend_bos=False, padding_side="left")
    np.testing.assert_array_equal(ids, [[4, 5, 6], [0, 0, 7]])
    np.testing.assert_array_equal(mask, [[1, 1, 1], [0, 0, 1]])
    assert tok.to_string([4, 5, 6]) == "w0 w1 w2"
    assert tok.to_string(np.asarray([[1, 4], [1, 5]]), skip_special_tokens=True) == ["w0", "w1"]
    with pytest.raises(UsageError, match="padding_side='middle'"):
        tok.to_tokens("w0", padding_side="middle")


def test_to_string_drops_the_padding_and_tokens_read_one_by_one(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers", reason="pip install -e '.[pretrained]'")
    save_tokenizer(tmp_path)  # <pad> 0, <bos> 1, <eos> 2; w0 is id 4
    tok = Tokenizer.from_file(tmp_path / "tokenizer.json", bos_token_id=1, eos_token_id=2, pad_token_id=0)
    ids, mask = tok.to_tokens(["w0 w1 w2", "w3"], padding_side="left")
    assert tok.to_string(ids) == ["<bos> w0 w1 w2", "<bos> w3"]            # the left pads gone, not '<pad> <pad> ...'
    assert tok.to_string(ids, mask) == ["<bos> w0 w1 w2", "<bos> w3"]
    assert tok.to_string([0, 4, 0, 5, 0, 0]) == "w0 <pad> w1"            # a pad inside the text is kept
    assert tok.to_string([0, 4, 0, 5], mask=[0, 1, 1, 1]) == "w0 <pad> w1"
    with pytest.raises(UsageError, match=r"mask of shape \(3,\) for ids of shape \(4,\)"):
        tok.to_string([0, 4, 0, 5], mask=[1, 1, 1])
    same = Tokenizer.from_file(tmp_path / "tokenizer.json", bos_token_id=1, eos_token_id=2, pad_token_id=2)
    assert same.to_string([4, 2]) == "w0 <eos>"                          # pad = EOS: only a mask tells them apart
    assert same.to_string([4, 2], mask=[1, 0]) == "w0"
    assert tok.to_str_tokens("w0 w1") == ["<bos>", "w0", "w1"]
    assert tok.to_str_tokens("w0 w1", prepend_bos=False) == ["w0", "w1"]
    assert tok.to_str_tokens(np.asarray([[4, 5], [6, 0]])) == [["w0", "w1"], ["w2", "<pad>"]]
    assert tok.to_single_token("w3") == 7
    with pytest.raises(UsageError, match=r"'w0 w1' is 2 tokens \['w0', 'w1'\], not one"):
        tok.to_single_token("w0 w1")
    with pytest.raises(UsageError, match="to_str_tokens: expected a string or integer ids"):
        tok.to_str_tokens(np.zeros((2, 2, 2), np.int32))
