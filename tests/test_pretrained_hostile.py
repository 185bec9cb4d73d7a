"""Hostile checkpoint folders (real files, read by the real loader): damaged safetensors headers, shard names that
leave the model folder, config.json values of the wrong type or range, token ids outside the vocabulary and garbage
tokenizer files are each a UsageError naming the file and the expected form, before any array is made."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
from hf_models import save_tokenizer
from hostile_checkpoints import BAD_CONFIGS, BAD_WEIGHTS, CONFIG, GOOD, checkpoint, gpt2_tensors, safetensors_bytes

from lenscope.cli import main
from lenscope.errors import ConfigError, UsageError
from lenscope.examples.lm_text import read_texts
from lenscope.models.pretrained.load import load_decoder
from lenscope.models.pretrained.tokenizer import load_tokenizer


def test_the_good_checkpoint_loads(tmp_path):
    model, cfg, _, size = load_decoder(checkpoint(tmp_path / "good"))
    assert (cfg.vocab_size, cfg.d_model, cfg.n_layers) == (40, 8, 1) and size == len(GOOD)


@pytest.mark.parametrize("case", sorted(BAD_WEIGHTS))
def test_a_damaged_safetensors_file_is_refused_naming_it(tmp_path, case):
    weights, fragment = BAD_WEIGHTS[case]
    folder = checkpoint(tmp_path / "ckpt", weights=weights)
    with pytest.raises(UsageError) as caught:
        load_decoder(folder)
    assert fragment in str(caught.value) and "model.safetensors" in str(caught.value), str(caught.value)


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_a_bad_config_value_is_refused_before_any_array(tmp_path, case):
    config, fragment = BAD_CONFIGS[case]
    with pytest.raises(UsageError, match="config.json") as caught:
        load_decoder(checkpoint(tmp_path / "ckpt", config=config))
    assert fragment in str(caught.value), str(caught.value)


def test_a_config_nested_100000_deep_is_not_json(tmp_path):
    folder = checkpoint(tmp_path / "ckpt")
    (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UsageError, match=r"config.json is not valid JSON"):
        load_decoder(folder)


@pytest.mark.parametrize("tensor, shape", [("wte", (41, 8)), ("c_attn", (8, 27))])
def test_a_shape_mismatch_says_so_not_buffer_error(tmp_path, tensor, shape):
    tensors = gpt2_tensors(vocab=41) if tensor == "wte" else gpt2_tensors(width=9)
    folder = checkpoint(tmp_path / "ckpt", weights=safetensors_bytes(tensors))
    with pytest.raises(UsageError, match=rf"shape \({shape[0]}, {shape[1]}\)") as caught:
        load_decoder(folder)
    assert "but the config implies" in str(caught.value) and not isinstance(caught.value.__context__, BufferError)


def _index(folder, shards):
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {name: shard for name, shard in zip(gpt2_tensors(), shards)}}))


@pytest.mark.parametrize("shard, fragment", [
    ("../x.safetensors", "no absolute path, no '..'"), ("../../../../etc/passwd", "'..'"),
    ("/proc/self/environ", "no absolute path"), ("sub/../../x.safetensors", "'..'"),
])
def test_shard_names_leaving_the_folder_are_refused(tmp_path, shard, fragment):
    (tmp_path / "x.safetensors").write_bytes(GOOD)  # good weights outside the model folder
    folder = checkpoint(tmp_path / "ckpt")
    _index(folder, [shard] * 16)
    with pytest.raises(UsageError, match="names the shard") as caught:
        load_decoder(folder)
    assert fragment in str(caught.value)


@pytest.mark.parametrize("target", ["outside", "/dev/zero"])
def test_symlinks_out_of_the_folder_are_refused(tmp_path, target):
    (tmp_path / "outside").write_bytes(GOOD)
    folder = checkpoint(tmp_path / "ckpt")
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to(tmp_path / target if target == "outside" else target)
    with pytest.raises(UsageError, match="outside the model folder"):
        load_decoder(folder)
    (folder / "model.safetensors").unlink()
    (folder / "shard.safetensors").symlink_to(tmp_path / target if target == "outside" else target)
    _index(folder, ["shard.safetensors"] * 16)
    with pytest.raises(UsageError, match="outside the model folder"):
        load_decoder(folder)


def test_a_device_inside_the_folder_is_refused(tmp_path):
    folder = checkpoint(tmp_path / "ckpt")
    (folder / "model.safetensors").unlink()
    os.mkfifo(folder / "model.safetensors")
    with pytest.raises(UsageError, match="not a regular file"):
        load_decoder(folder)


def test_a_hugging_face_cache_snapshot_links_into_its_blobs(tmp_path):
    repo = tmp_path / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc").write_bytes(GOOD)
    snapshot = checkpoint(repo / "snapshots" / "rev1")
    (snapshot / "model.safetensors").unlink()
    (snapshot / "model.safetensors").symlink_to("../../blobs/abc")
    assert load_decoder(snapshot)[1].vocab_size == 40


@pytest.mark.parametrize("text, fragment", [
    ("not json", "is not a safetensors index"), ("[1, 2]", "is not a safetensors index"),
    ('{"weight_map": [1]}', "has weight_map [1]"), ('{"weight_map": {"a": 7}}', "has weight_map"),
])
def test_a_bad_index_file_is_refused(tmp_path, text, fragment):
    folder = checkpoint(tmp_path / "ckpt")
    (folder / "model.safetensors.index.json").write_text(text)
    with pytest.raises(UsageError, match="model.safetensors.index.json") as caught:
        load_decoder(folder)
    assert fragment in str(caught.value)


@pytest.mark.parametrize("name, text, fragment", [
    ("tokenizer.json", "garbage", "is not a tokenizer file"),
    ("tokenizer_config.json", "garbage", "tokenizer_config.json is not valid JSON"),
    ("tokenizer_config.json", "[1]", "tokenizer_config.json is a JSON list"),
    ("tokenizer_config.json", '{"eos_token": "<nope>"}', None),
])
def test_garbage_tokenizer_files_are_refused(tmp_path, name, text, fragment):
    folder = save_tokenizer(checkpoint(tmp_path / "ckpt"))
    (folder / name).write_text(text)
    if fragment is None:  # an unknown token leaves the id unset rather than failing
        assert load_tokenizer(folder, CONFIG).eos_token_id == 2
        return
    with pytest.raises(UsageError, match=fragment):
        load_tokenizer(folder, CONFIG)


def test_a_token_id_beyond_the_tokenizer_vocabulary_is_refused(tmp_path):
    folder = save_tokenizer(checkpoint(tmp_path / "ckpt"))
    with pytest.raises(UsageError, match=r"eos_token_id=5000: expected a token id from 0 to \d+"):
        load_tokenizer(folder, {**CONFIG, "eos_token_id": 5000})
    assert np.isfinite(load_tokenizer(folder, CONFIG).eos_token_id)


@pytest.mark.parametrize("name, data, fragment", [
    ("bad.parquet", b"garbage, not parquet", "bad.parquet is not a readable Parquet file"),
    ("bad.jsonl", b'{"text": "ok"}\n{"text": \n', "bad.jsonl line 2 is not a JSON record"),
    ("deep.jsonl", b"[" * 100_000 + b"]" * 100_000 + b"\n", "deep.jsonl line 1 is not a JSON record"),
    ("latin.txt", "caf\u00e9\n".encode("latin-1"), "latin.txt is not UTF-8 text (byte 3"),
])
def test_garbage_text_files_are_config_errors_naming_the_file(tmp_path, name, data, fragment):
    (tmp_path / name).write_bytes(data)
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        read_texts(tmp_path / name)


def test_a_garbage_parquet_is_blamed_on_the_file_not_the_users_code(tmp_path, capsys):
    folder = save_tokenizer(checkpoint(tmp_path / "ckpt"))
    (tmp_path / "bad.parquet").write_bytes(b"garbage, not parquet")
    argv = ["run", "lm/eval", f"model/pretrained={folder}", f"data/text={tmp_path / 'bad.parquet'}",
            "--store", str(tmp_path / "runs")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "bad.parquet is not a readable Parquet file" in err and "your code" not in err, err
