"""Files at fault are the user's input: each hostile file below is a UsageError (exit 2) naming the file, not a raw
library error (exit 1). SAELens folders with a garbage or huge weights header, or `"architecture": ["standard"]`;
`export --to mlflow` at a tracking URI MLflow refuses."""

from __future__ import annotations

import json
import os
import struct

import jax.numpy as jnp
import pytest
from cli_runner import run_cli

from lenscope.cli.report import exit_code
from lenscope.dictionaries import Dictionary, Spec, load_saelens, save_saelens
from lenscope.errors import UsageError
from lenscope.store import Store

pytest.importorskip("safetensors.numpy", reason="pip install safetensors")


def _folder(tmp_path):
    params = {"W_enc": jnp.ones((4, 16)) * 0.1, "b_enc": jnp.zeros(16), "W_dec": jnp.ones((16, 4)) * 0.1,
              "b_dec": jnp.zeros(4)}
    return save_saelens(Dictionary.of(Spec("standard", 4, 16), params), tmp_path / "sae")


WEIGHTS = {
    "a garbage header": os.urandom(8) + b"\x00" * 64,
    "a huge header": struct.pack("<Q", 1 << 40) + b"{" * 64,
    "a header that is not JSON": struct.pack("<Q", 16) + b"not json at all!" + b"\x00" * 8,
    "data past the end": struct.pack("<Q", 64) + json.dumps(
        {"W_enc": {"dtype": "F32", "shape": [4, 16], "data_offsets": [0, 256]}}).encode().ljust(64) + b"\x00" * 8,
}


@pytest.mark.parametrize("case", list(WEIGHTS))
def test_a_hostile_weights_file_is_a_usage_error_naming_it(tmp_path, case):
    folder = _folder(tmp_path)
    (folder / "sae_weights.safetensors").write_bytes(WEIGHTS[case])
    with pytest.raises(UsageError, match="sae_weights.safetensors is not a readable safetensors file") as caught:
        load_saelens(folder)
    assert str(folder) in str(caught.value) and exit_code(caught.value) == 2


@pytest.mark.parametrize("key, value", [("architecture", ["standard"]), ("architecture", {"a": 1}),
                                        ("normalize_activations", ["none"]), ("reshape_activations", 3),
                                        ("apply_b_dec_to_input", "yes")])
def test_a_cfg_setting_of_the_wrong_type_is_a_usage_error_naming_it(tmp_path, key, value):
    folder = _folder(tmp_path)
    cfg = json.loads((folder / "cfg.json").read_text())
    (folder / "cfg.json").write_text(json.dumps({**cfg, key: value}))
    with pytest.raises(UsageError, match=f"cfg.json {key}=") as caught:
        load_saelens(folder)
    assert exit_code(caught.value) == 2


def test_export_to_an_mlflow_uri_mlflow_refuses_is_exit_2_naming_it(tmp_path):
    pytest.importorskip("mlflow", reason="the MLflow export needs: pip install -e '.[export]'")
    root = tmp_path / "runs"
    with Store(root) as store:
        node = store.new_node("grokking/train")
        store.record(node, {"train/loss": 1.0})
        store.set_status(node, "done")
    target = tmp_path / "not-a-folder"
    target.write_text("a file")
    for uri in (f"file://{target}", f"file://{tmp_path / 'mlruns'}"):
        done = run_cli("--store", str(root), "export", node.address, "--to", "mlflow", uri, cwd=tmp_path,
                       env={k: v for k, v in os.environ.items() if k != "MLFLOW_ALLOW_FILE_STORE"})
        assert done.rc == 2 and uri in done.err and "MLflow refused it" in done.err, done.err
