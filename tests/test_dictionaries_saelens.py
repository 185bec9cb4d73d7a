"""SAELens' file format both ways, checked against sae-lens itself (random weights, CPU torch): same codes and
reconstructions within 1e-5."""

import importlib.util
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

from lenscope.dictionaries import Dictionary, Spec, load_saelens, save_saelens
from lenscope.errors import UsageError

SKIP = "needs sae-lens: pip install 'torch==2.13.0+cpu' -e '.[saelens]'"
if importlib.util.find_spec("torch") is None or importlib.util.find_spec("sae_lens") is None:
    pytest.skip(SKIP, allow_module_level=True)


def _torch() -> Any:
    """torch, imported by the first test that needs it: sae-lens and torch take seconds to import, which every test
    worker would pay at collection."""
    import torch

    return torch


def _sae() -> Any:
    """sae-lens' SAE class (imported when first needed, as _torch)."""
    from sae_lens import SAE

    return SAE

D_IN, D_SAE, D_OUT = 8, 24, 5
CASES = {  # SAELens architecture -> (config overrides, lenscope Spec)
    "standard": ({}, Spec("standard", D_IN, D_SAE)),
    "topk": ({"k": 4}, Spec("topk", D_IN, D_SAE, k=4)),
    "topk-rescaled": ({"k": 4, "rescale_acts_by_decoder_norm": True},
                      Spec("topk", D_IN, D_SAE, k=4, rescale_acts_by_decoder_norm=True)),
    "jumprelu": ({}, Spec("jumprelu", D_IN, D_SAE)),
    "gated": ({}, Spec("gated", D_IN, D_SAE)),
    "transcoder": ({"d_out": D_OUT, "apply_b_dec_to_input": False},
                   Spec("standard", D_IN, D_SAE, d_out=D_OUT, transcoder=True)),
    "skip_transcoder": ({"d_out": D_OUT, "apply_b_dec_to_input": False},
                        Spec("standard", D_IN, D_SAE, d_out=D_OUT, transcoder=True, skip=True)),
    "jumprelu_transcoder": ({"d_out": D_OUT, "apply_b_dec_to_input": False},
                            Spec("jumprelu", D_IN, D_SAE, d_out=D_OUT, transcoder=True)),
    "jumprelu_skip_transcoder": ({"d_out": D_OUT, "apply_b_dec_to_input": False},
                                 Spec("jumprelu", D_IN, D_SAE, d_out=D_OUT, transcoder=True, skip=True)),
}


def saelens_dictionary(case: str) -> Any:
    """A sae-lens dictionary of the case's architecture with every parameter random."""
    overrides, _ = CASES[case]
    from sae_lens.registry import get_sae_class

    torch, arch = _torch(), case.split("-")[0]
    sae_class, cfg_class = get_sae_class(arch)
    sae = sae_class(cfg_class(d_in=D_IN, d_sae=D_SAE, **overrides))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in sae.named_parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.3 if name in ("threshold", "r_mag") else 1.0))
            if name == "threshold":
                p.abs_()
    return sae


def run_saelens(sae: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    torch = _torch()
    with torch.no_grad():
        xt = torch.from_numpy(x)
        return sae.encode(xt).numpy(), sae(xt).numpy()


def run_lenscope(d: Dictionary, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(d.encode(jnp.asarray(x))), np.asarray(d(jnp.asarray(x)))


X = np.random.default_rng(1).normal(size=(32, D_IN)).astype(np.float32)


@pytest.mark.parametrize("case", list(CASES))
def test_saelens_files_open_in_lenscope(case, tmp_path):
    sae = saelens_dictionary(case)
    sae.save_model(tmp_path)
    d, cfg = load_saelens(tmp_path)
    assert d.spec == CASES[case][1] and cfg["d_sae"] == D_SAE
    for ours, theirs in zip(run_lenscope(d, X), run_saelens(sae, X)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", list(CASES))
def test_lenscope_files_open_in_saelens(case, tmp_path):
    spec = CASES[case][1]
    rng = np.random.default_rng(2)
    params = {"W_enc": rng.normal(size=(D_IN, D_SAE)), "b_enc": rng.normal(size=D_SAE) * 0.1,
              "W_dec": rng.normal(size=(D_SAE, spec.d_out)), "b_dec": rng.normal(size=spec.d_out) * 0.1,
              "threshold": np.abs(rng.normal(size=D_SAE)) * 0.3, "W_skip": rng.normal(size=(D_IN, spec.d_out)),
              "b_mag": rng.normal(size=D_SAE) * 0.1, "r_mag": rng.normal(size=D_SAE) * 0.3}
    d = Dictionary.of(spec, {k: jnp.asarray(v, jnp.float32) for k, v in params.items()})
    save_saelens(d, tmp_path, metadata={"hook_name": "blocks_0/mlp"})
    sae = _sae().load_from_disk(tmp_path)
    assert sae.cfg.architecture() == case.split("-")[0] and sae.cfg.metadata.hook_name == "blocks_0/mlp"
    for ours, theirs in zip(run_lenscope(d, X), run_saelens(sae, X)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spec", [Spec("batchtopk", D_IN, D_SAE, k=4),
                                  Spec("matryoshka_batchtopk", D_IN, D_SAE, k=4, matryoshka_widths=(6, 12))],
                         ids=lambda s: s.architecture)
def test_batchtopk_is_saved_as_the_jumprelu_it_acts_as(spec, tmp_path):
    rng = np.random.default_rng(3)
    d = Dictionary.of(spec, {"W_enc": jnp.asarray(rng.normal(size=(D_IN, D_SAE)), jnp.float32),
                             "b_enc": jnp.zeros(D_SAE), "b_dec": jnp.zeros(D_IN), "threshold": jnp.full(D_SAE, 0.7),
                             "W_dec": jnp.asarray(rng.normal(size=(D_SAE, D_IN)), jnp.float32)})
    save_saelens(d, tmp_path)
    sae = _sae().load_from_disk(tmp_path)
    assert sae.cfg.architecture() == "jumprelu"
    np.testing.assert_allclose(run_lenscope(d, X)[1], run_saelens(sae, X)[1], rtol=1e-5, atol=1e-5)


def test_unsupported_files_are_refused_by_name(tmp_path):
    with pytest.raises(UsageError, match="lacks cfg.json"):
        load_saelens(tmp_path)
    sae = saelens_dictionary("standard")
    sae.save_model(tmp_path)
    cfg = (tmp_path / "cfg.json").read_text().replace('"architecture": "standard"', '"architecture": "topkk"')
    (tmp_path / "cfg.json").write_text(cfg)
    with pytest.raises(UsageError, match="did you mean topk"):
        load_saelens(tmp_path)
    with pytest.raises(UsageError, match="no topk transcoder.*sae/architecture=batchtopk.*transcoders=NODE"):
        save_saelens(Dictionary.of(Spec("topk", 4, 8, d_out=3, k=2, transcoder=True), {
            "W_enc": jnp.zeros((4, 8)), "b_enc": jnp.zeros(8), "W_dec": jnp.zeros((8, 3)), "b_dec": jnp.zeros(3)}),
            tmp_path / "x")
