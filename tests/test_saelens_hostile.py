"""Hostile SAELens folders (real files): a cfg.json that is not JSON, not an object, nested too deep, lacking d_in
or giving it as text or NaN; weights that disagree with cfg.json, an extra tensor, NaN or integer weights, and a
JumpReLU without its threshold. Each is a UsageError naming the file and the field."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

from lenscope.dictionaries import Dictionary, Spec, load_saelens, save_saelens
from lenscope.errors import UsageError

safetensors = pytest.importorskip("safetensors.numpy", reason="pip install safetensors")


def _folder(tmp_path, architecture: str = "standard"):
    spec = Spec(architecture, 4, 16)
    params = {"W_enc": jnp.ones((4, 16)) * 0.1, "b_enc": jnp.zeros(16), "W_dec": jnp.ones((16, 4)) * 0.1,
              "b_dec": jnp.zeros(4), "threshold": jnp.full(16, 0.01)}
    return save_saelens(Dictionary.of(spec, params), tmp_path / "sae")


def test_a_good_folder_loads(tmp_path):
    d, cfg = load_saelens(_folder(tmp_path))
    assert (d.spec.d_in, d.spec.d_sae) == (4, 16)


@pytest.mark.parametrize("text, fragment", [
    ("not json", "cfg.json is not valid JSON"), ("[1]", "cfg.json is a JSON list"),
    ("[" * 100_000 + "]" * 100_000, "cfg.json is not valid JSON"),
    ('{"d_sae": 16}', "d_in=None: expected an integer"), ('{"d_in": "eight", "d_sae": 16}', "d_in='eight'"),
    ('{"d_in": NaN, "d_sae": 16}', "d_in=nan"), ('{"d_in": 4, "d_sae": 1000000000000}', "d_sae=1000000000000"),
])
def test_a_bad_cfg_json_is_refused_naming_the_field(tmp_path, text, fragment):
    folder = _folder(tmp_path)
    (folder / "cfg.json").write_text(text)
    with pytest.raises(UsageError, match="cfg.json") as caught:
        load_saelens(folder)
    assert fragment in str(caught.value), str(caught.value)


def _rewrite(folder, change):
    path = folder / "sae_weights.safetensors"
    tensors = safetensors.load_file(path)
    change(tensors)
    safetensors.save_file(tensors, path)


@pytest.mark.parametrize("case, change, fragment", [
    ("d_sae disagrees", None, "has the shape (16, 4), but cfg.json (d_in=4, d_sae=32) implies (32, 4)"),
    ("extra tensor", lambda t: t.update(W_extra=np.zeros(3, np.float32)), "no place for: W_extra"),
    ("all NaN", lambda t: t.update(W_enc=np.full((4, 16), np.nan, np.float32)), "'W_enc' holds NaN"),
    ("int64", lambda t: t.update(W_dec=np.zeros((16, 4), np.int64)), "'W_dec' has dtype int64"),
])
def test_weights_that_disagree_with_cfg_json_are_refused(tmp_path, case, change, fragment):
    folder = _folder(tmp_path)
    if change is None:
        cfg = json.loads((folder / "cfg.json").read_text())
        (folder / "cfg.json").write_text(json.dumps({**cfg, "d_sae": 32}))
    else:
        _rewrite(folder, change)
    with pytest.raises(UsageError, match="sae_weights.safetensors") as caught:
        load_saelens(folder)
    assert fragment in str(caught.value), str(caught.value)


def test_a_jumprelu_without_its_threshold_is_refused(tmp_path):
    folder = _folder(tmp_path, "jumprelu")
    assert load_saelens(folder)[0].spec.architecture == "jumprelu"
    _rewrite(folder, lambda t: t.pop("threshold"))
    with pytest.raises(UsageError, match="a jumprelu dictionary needs a threshold"):
        load_saelens(folder)
