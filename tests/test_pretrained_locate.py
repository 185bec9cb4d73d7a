"""Finding a checkpoint (a folder, or a repo id already in the Hugging Face cache, offline) and reading safetensors with
NumPy: the errors name where lenscope looked and what was missing. No torch needed."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from lenscope.errors import UsageError
from lenscope.models.pretrained import locate
from lenscope.models.pretrained.safetensors import SafetensorsFiles


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """A safetensors file written by hand: an 8-byte header length, the JSON table, the raw bytes."""
    names = {np.dtype(np.float32): "F32", np.dtype(ml_dtypes.bfloat16): "BF16"}
    table, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        blob = np.ascontiguousarray(array).tobytes()
        table[name] = {"dtype": names[array.dtype], "shape": list(array.shape),
                       "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    header = json.dumps(table).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"".join(blobs))


def test_a_repo_id_is_found_in_the_hub_cache(tmp_path, monkeypatch) -> None:
    snapshot = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot / "model.safetensors").write_bytes(b"")
    (tmp_path / "hub" / "models--org--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert locate("org/tiny") == snapshot
    assert locate("org/tiny@main") == snapshot
    assert locate(snapshot) == snapshot
    with pytest.raises(UsageError, match=r"model org/other@main is not in the Hugging Face cache .*hub and "
                                         r"HF_HUB_OFFLINE is set: unset HF_HUB_OFFLINE to download it"):
        locate("org/other")
    with pytest.raises(UsageError, match=r"revision='v2' was given with the folder"):
        locate(snapshot, revision="v2")
    with pytest.raises(UsageError, match="has no config.json"):
        locate(tmp_path)


def test_safetensors_are_read_tensor_by_tensor(tmp_path) -> None:
    weights = {"a.weight": np.arange(6, dtype=np.float32).reshape(2, 3),
               "b.weight": np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)}
    write_safetensors(tmp_path / "model.safetensors", weights)
    files = SafetensorsFiles(tmp_path)
    with files.opened():
        a = files.read("a.weight", lambda view: view.T.copy())
        b = files.read("transformer.b.weight", lambda view: view.astype(np.float32))  # a prefix the file lacks
    np.testing.assert_array_equal(a, weights["a.weight"].T)
    np.testing.assert_array_equal(b, [1.5, -2.0])
    with pytest.raises(UsageError, match=r"no tensor 'a.bias'.*holds 2 tensors, e.g. a.weight, b.weight"):
        files.find("a.bias")


def test_a_folder_without_safetensors_says_what_it_holds(tmp_path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(UsageError, match=r"neither model.safetensors nor model.safetensors.index.json.*"
                                         r"it holds: config.json, pytorch_model.bin"):
        SafetensorsFiles(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x01")
    with pytest.raises(UsageError, match="not a safetensors file"):
        SafetensorsFiles(tmp_path)
