"""`run_with_saes` and `run_with_cache_with_saes` on a loaded model, as SAELens' HookedSAETransformer: the same
logits and latents on the same GPT-2 and SAE weights (the SAE saved by lenscope, read by SAELens), one compiled
program per shape and choice of SAEs, and bad SAEs refused by name before anything runs."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import checkpoint, transformerlens_gpt2  # noqa: E402

from lenscope.dictionaries import Dictionary, Spec, attach, load_saelens, save_saelens  # noqa: E402
from lenscope.errors import UsageError  # noqa: E402
from lenscope.models import from_pretrained_no_processing  # noqa: E402

SKIP = "needs sae-lens: pip install 'torch==2.13.0+cpu' -e '.[parity,peers,saelens]'"
HOOK = "blocks.0.hook_resid_post"
D_SAE = 64


def random_sae(spec: Spec, seed: int = 0) -> Dictionary:
    """An SAE with every parameter random (biases small), so many latents fire."""
    rng = np.random.default_rng(seed)
    params = {"W_enc": rng.normal(size=(spec.d_in, spec.d_sae)) * 0.3, "b_enc": rng.normal(size=spec.d_sae) * 0.1,
              "W_dec": rng.normal(size=(spec.d_sae, spec.d_in)) * 0.3, "b_dec": rng.normal(size=spec.d_in) * 0.1}
    return Dictionary.of(spec, {k: jnp.asarray(v, jnp.float32) for k, v in params.items()})


@pytest.fixture(scope="module")
def loaded():
    pytest.importorskip("torch", reason="pip install 'torch==2.13.0+cpu' -e '.[parity]'")
    hf, folder = checkpoint("gpt2")
    return hf, from_pretrained_no_processing(folder, tokenizer=False)


@pytest.fixture(scope="module")
def sae_model(loaded, tmp_path_factory):
    """SAELens' HookedSAETransformer on the same GPT-2 weights (no weight processing)."""
    sae_lens = pytest.importorskip("sae_lens", reason=SKIP)
    return transformerlens_gpt2(loaded[1], tmp_path_factory.mktemp("lens"), sae_lens.HookedSAETransformer)


@pytest.mark.parametrize("spec", [Spec("topk", 32, D_SAE, k=8), Spec("standard", 32, D_SAE)],
                         ids=lambda s: s.architecture)
@pytest.mark.parametrize("error", [False, True], ids=["spliced", "error_term"])
def test_same_logits_and_latents_as_saelens(loaded, sae_model, spec, error, tmp_path) -> None:
    torch = pytest.importorskip("torch")
    from sae_lens import SAE

    _, model = loaded
    save_saelens(random_sae(spec), tmp_path, metadata={"hook_name": HOOK})
    theirs_sae = SAE.load_from_disk(tmp_path)
    ours_sae = load_saelens(tmp_path)  # (Dictionary, cfg.json): the hook comes from cfg.json's metadata
    ids = np.random.default_rng(0).integers(4, 100, (2, 7))
    with torch.no_grad():
        tl_logits, theirs = sae_model.run_with_cache_with_saes(torch.tensor(ids), saes=[theirs_sae],
                                                               use_error_term=error)
    logits, ours = model.run_with_cache_with_saes(ids, saes=[ours_sae], use_error_term=error)
    names = [f"{HOOK}.hook_sae_{h}" for h in ("input", "acts_pre", "acts_post", "recons", "output")]
    names += [f"{HOOK}.hook_sae_error"] if error else []
    assert set(names) <= set(ours) and set(names) <= set(theirs.keys())
    assert (f"{HOOK}.hook_sae_error" in ours) == error
    for name in names:
        np.testing.assert_allclose(np.asarray(ours[name]), theirs[name].numpy(), atol=1e-5, rtol=0, err_msg=name)
    np.testing.assert_allclose(np.asarray(logits), tl_logits.numpy(), atol=1e-5, rtol=0)
    latents = np.asarray(ours[f"{HOOK}.hook_sae_acts_post"])
    assert (latents > 0).mean() > 0.1  # the comparison saw latents firing
    alone = model.run_with_saes(ids, saes=[ours_sae], use_error_term=error)
    np.testing.assert_allclose(np.asarray(alone), np.asarray(logits), atol=1e-5, rtol=0)
    plain = np.asarray(model(ids))
    if error:  # the error term puts back what the SAE missed: the model's own logits
        np.testing.assert_allclose(np.asarray(logits), plain, atol=1e-5, rtol=0)
    else:
        assert np.abs(np.asarray(logits) - plain).max() > 1e-2


def test_hooks_given_every_way_and_one_program_per_shape(loaded, tmp_path) -> None:
    _, model = loaded
    sae = random_sae(Spec("topk", 32, D_SAE, k=8))
    ids = np.random.default_rng(1).integers(4, 100, (2, 5))
    first = model.run_with_saes(ids, saes=[attach(sae, HOOK)])
    programs = model._hooked.programs
    compiled = programs.compiles  # the other tests' shapes and architectures compiled some too
    model.run_with_saes(ids + 1, saes=(sae, "blocks/0/hook_resid_post"))  # one SAE, a module path: the same choice
    model.run_with_saes(ids, saes=[(random_sae(Spec("topk", 32, D_SAE, k=8), seed=1), HOOK)])  # new weights
    assert programs.compiles == compiled
    model.run_with_saes(ids[:, :4], saes=[attach(sae, HOOK)])
    assert programs.compiles == compiled  # another length in the same bucket: the same program
    model.run_with_saes(np.tile(ids, 4), saes=[attach(sae, HOOK)])
    assert programs.compiles == compiled + 1  # a length in the next bucket: a new program
    save_saelens(sae, tmp_path, metadata={"hook_name": "blocks.1.hook_resid_post"})
    overridden = model.run_with_saes(ids, saes=[(load_saelens(tmp_path)[0], HOOK)])  # the pair's name wins
    np.testing.assert_allclose(np.asarray(overridden), np.asarray(first), atol=1e-5)
    _, cache = model.run_with_cache_with_saes(ids, saes=[attach(sae, HOOK), load_saelens(tmp_path)],
                                              names_filter=lambda name: name.endswith("hook_sae_acts_post"))
    assert list(cache) == [f"{HOOK}.hook_sae_acts_post", "blocks.1.hook_resid_post.hook_sae_acts_post"]
    assert cache[f"{HOOK}.hook_sae_acts_post"].shape == (2, 5, D_SAE)
    np.testing.assert_allclose(np.asarray(model.run_with_saes(ids, saes=[])), np.asarray(model(ids)), atol=1e-5)
    _, cache = model.run_with_cache_with_saes(ids, saes=[attach(sae, HOOK)], names_filter=HOOK)
    np.testing.assert_allclose(np.asarray(cache[HOOK]), np.asarray(sae(model.run_with_cache(
        ids, names_filter=HOOK)[1][HOOK])), atol=1e-5)  # the model's hook records what flows on: the reconstruction


def test_bad_saes_are_refused_by_name_before_anything_runs(loaded) -> None:
    _, model = loaded
    sae = random_sae(Spec("standard", 32, D_SAE))
    ids = np.ones((1, 3), np.int32)
    with pytest.raises(UsageError, match=r"'blocks.0.hook_resid_pots' is not a hook point.*such as "
                                         r"blocks.0.hook_resid_post.*nearest: blocks.0.hook_resid_post"):
        model.run_with_saes(ids, saes=[(sae, "blocks.0.hook_resid_pots")])
    with pytest.raises(UsageError, match=r"d_in=16, but the activation there is 32 wide; expected an SAE with "
                                         r"d_in=32"):
        model.run_with_cache_with_saes(ids, saes=[(random_sae(Spec("standard", 16, D_SAE)), HOOK)])
    with pytest.raises(UsageError, match=r"carries no hook name; give each SAE with its hook: attach\(dictionary, "
                                         r"'blocks.0.hook_resid_post'\)"):
        model.run_with_saes(ids, saes=[sae])
    with pytest.raises(UsageError, match="two SAEs at 'blocks.0.hook_resid_post'"):
        model.run_with_saes(ids, saes=[(sae, HOOK), attach(sae, HOOK)])
    with pytest.raises(UsageError, match="not an SAE"):
        model.run_with_saes(ids, saes=[(jax.numpy.zeros(3), HOOK)])
    transcoder = Dictionary.of(Spec("standard", 32, D_SAE, d_out=16, transcoder=True), {
        "W_enc": jnp.zeros((32, D_SAE)), "b_enc": jnp.zeros(D_SAE), "W_dec": jnp.zeros((D_SAE, 16)),
        "b_dec": jnp.zeros(16)})
    with pytest.raises(UsageError, match="is a transcoder.*run_with_features"):
        model.run_with_saes(ids, saes=[(transcoder, HOOK)])
    compiles = model._hooked.programs.compiles
    with pytest.raises(UsageError, match="d_in=16"):
        model.run_with_saes(ids, saes=[(random_sae(Spec("standard", 16, D_SAE)), HOOK)])
    assert model._hooked.programs.compiles == compiles  # the program that failed to trace was not kept


@pytest.mark.parametrize("error", [False, True], ids=["spliced", "error_term"])
def test_hooks_on_the_saes_own_points_and_add_sae_as_saelens(loaded, sae_model, error, tmp_path) -> None:
    """A latent ablated at hook_sae_acts_post, the error term scaled at hook_sae_error, an SAE added for every call
    (add_sae) and removed (reset_saes): SAELens' HookedSAETransformer on the same weights (1e-5)."""
    torch = pytest.importorskip("torch")
    from sae_lens import SAE

    _, model = loaded
    model.eager_first = False
    save_saelens(random_sae(Spec("standard", 32, D_SAE)), tmp_path, metadata={"hook_name": HOOK})
    theirs_sae, ours_sae = SAE.load_from_disk(tmp_path), load_saelens(tmp_path)
    assert ours_sae.cfg.d_sae == D_SAE and ours_sae.cfg.metadata.hook_name == HOOK and ours_sae.eval() is ours_sae
    ids = np.random.default_rng(4).integers(4, 100, (2, 6))
    latent = int(np.argmax(np.asarray(ours_sae.encode(model.run_with_cache(ids)[1][HOOK])).sum(axis=(0, 1))))

    def ablate(acts, hook):
        return acts.at[..., latent].set(0.0)

    def tl_ablate(acts, hook):
        acts[..., latent] = 0.0
        return acts

    def halve_error(err, hook):
        return err * 0.5

    points = [(f"{HOOK}.hook_sae_acts_post", ablate, tl_ablate)]
    if error:
        points.append((f"{HOOK}.hook_sae_error", halve_error, halve_error))
    with torch.no_grad():
        theirs_sae.use_error_term = error  # SAELens reads it from the SAE in this call
        want = sae_model.run_with_hooks_with_saes(torch.tensor(ids), saes=[theirs_sae],
                                                  fwd_hooks=[(name, tl) for name, _, tl in points]).numpy()
        sae_model.add_sae(theirs_sae, use_error_term=error)
        want_added = sae_model(torch.tensor(ids)).numpy()
        sae_model.reset_saes()
    got = model.run_with_hooks_with_saes(ids, saes=[ours_sae], use_error_term=error,
                                         fwd_hooks=[(name, ours) for name, ours, _ in points])
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5, rtol=0)
    plain = model.run_with_saes(ids, saes=[ours_sae], use_error_term=error)
    assert np.abs(np.asarray(got) - np.asarray(plain)).max() > 1e-4  # the ablation changed the logits
    model.add_sae(ours_sae, use_error_term=error)
    assert model.saes == (ours_sae,)
    np.testing.assert_allclose(np.asarray(model(ids)), want_added, atol=1e-5, rtol=0)
    _, cache = model.run_with_cache(ids, names_filter=f"{HOOK}.hook_sae_acts_post")
    assert cache[f"{HOOK}.hook_sae_acts_post"].shape == (2, 6, D_SAE)
    model.reset_saes()
    np.testing.assert_allclose(np.asarray(model(ids)), np.asarray(model.run_with_saes(ids)), atol=1e-6)


def test_an_sae_on_hook_z_reads_the_heads_flattened_as_saelens(loaded, sae_model, tmp_path) -> None:
    torch = pytest.importorskip("torch")
    from sae_lens import SAE

    _, model = loaded
    hook = "blocks.1.attn.hook_z"
    save_saelens(random_sae(Spec("standard", 32, D_SAE)), tmp_path,
                 metadata={"hook_name": hook}, reshape_activations="hook_z")
    theirs_sae, ours_sae = SAE.load_from_disk(tmp_path), load_saelens(tmp_path)
    ids = np.random.default_rng(5).integers(4, 100, (2, 6))
    with torch.no_grad():
        tl_logits, theirs = sae_model.run_with_cache_with_saes(torch.tensor(ids), saes=[theirs_sae])
    logits, ours = model.run_with_cache_with_saes(ids, saes=[ours_sae])
    np.testing.assert_allclose(np.asarray(logits), tl_logits.numpy(), atol=1e-5, rtol=0)
    name = f"{hook}.hook_sae_acts_post"
    np.testing.assert_allclose(np.asarray(ours[name]), theirs[name].numpy(), atol=1e-5, rtol=0)
