"""`run_with_cache` and `run_with_hooks` on a loaded model, as TransformerLens users write them: every default
hook and an ablation equal to TransformerLens' on the same GPT-2 weights, names by dotted name, path, glob,
predicate or (name, layer), and one compiled program per shape and choice of hooks."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import checkpoint, save_tokenizer, transformerlens_gpt2  # noqa: E402

from lenscope.errors import UsageError  # noqa: E402
from lenscope.models import from_pretrained_no_processing  # noqa: E402


@pytest.fixture(scope="module")
def loaded():
    pytest.importorskip("torch", reason="pip install 'torch==2.13.0+cpu' -e '.[parity]'")
    hf, folder = checkpoint("gpt2")
    save_tokenizer(folder)
    return hf, from_pretrained_no_processing(folder)


@pytest.fixture(scope="module")
def lens_model(loaded, tmp_path_factory):
    """TransformerLens' HookedTransformer on the same GPT-2 weights (no weight processing)."""
    return transformerlens_gpt2(loaded[1], tmp_path_factory.mktemp("lens"))


def test_every_default_hook_equals_transformerlens(loaded, lens_model) -> None:
    torch = pytest.importorskip("torch")
    hf, model = loaded
    c, tl = hf.config, lens_model
    ids = np.random.default_rng(0).integers(4, c.vocab_size, (2, 7))
    with torch.no_grad():
        tl_logits, theirs = tl.run_with_cache(torch.tensor(ids))
    logits, ours = model.run_with_cache(ids)
    np.testing.assert_allclose(np.asarray(logits), tl_logits.numpy(), atol=1e-4, rtol=0)
    assert set(ours) <= set(theirs.keys()), sorted(set(ours) - set(theirs.keys()))
    assert len(ours) >= 12 * c.n_layer  # the residual stream, attention (q k v scores pattern z), MLP, norms
    for name in ours:
        want, got = theirs[name].numpy(), np.asarray(ours[name])
        if name.endswith("hook_normalized"):  # TransformerLens' is before the norm's weight and bias, ours after
            norm = tl.get_submodule(name.rsplit(".", 1)[0])
            want = want * norm.w.detach().numpy() + norm.b.detach().numpy()
        finite = np.isfinite(want)  # masked attention scores: -inf there, a large negative number here
        assert got.shape == want.shape, name
        np.testing.assert_allclose(got[finite], want[finite], atol=1e-4, rtol=0, err_msg=name)


def test_names_by_dotted_name_path_glob_predicate_or_name_and_layer(loaded) -> None:
    _, model = loaded
    ids = model.to_tokens(["w1 w2 w3"])
    _, every = model.run_with_cache(ids)
    _, one = model.run_with_cache(ids, names_filter="blocks.1.hook_resid_post")
    assert list(one) == ["blocks.1.hook_resid_post"]
    np.testing.assert_allclose(np.asarray(one["blocks/1/hook_resid_post"]),
                                  np.asarray(every["blocks.1.hook_resid_post"]), atol=1e-5)
    _, globbed = model.run_with_cache(ids, names_filter=["blocks.*.attn.hook_z"])
    assert list(globbed) == ["blocks.0.attn.hook_z", "blocks.1.attn.hook_z"]
    _, picked = model.run_with_cache(ids, names_filter=lambda name: name.endswith("hook_pattern"))
    np.testing.assert_allclose(np.asarray(picked[("pattern", 1)]), np.asarray(every["blocks.1.attn.hook_pattern"]),
                               atol=1e-5)
    assert ("resid_pre", 0) in every and ("hook_post", 1) in every and "blocks.1.attn.hook_result" not in every
    _, opted = model.run_with_cache(ids, names_filter="blocks.0.attn.hook_result")
    assert opted["blocks.0.attn.hook_result"].shape == (1, 4, 4, 32)  # per head: asked for, as in TransformerLens
    single = every.remove_batch_dim()  # in place, as TransformerLens' (ARENA does not assign the result)
    assert single is every and every["blocks.0.hook_resid_pre"].shape == (4, 32)
    assert isinstance(single.to_numpy()["hook_embed"], np.ndarray)
    text_logits, _ = model.run_with_cache("w1 w2 w3", names_filter="hook_embed")
    np.testing.assert_allclose(np.asarray(text_logits), np.asarray(model(ids)), atol=1e-5)


def test_one_program_per_shape_bucket_and_choice_of_hooks(loaded) -> None:
    _, model = loaded
    programs = model._hooked.programs
    ids = np.random.default_rng(1).integers(4, 50, (2, 5))
    model.run_with_cache(ids, names_filter="blocks.*.hook_resid_post")
    before = programs.compiles
    model.run_with_cache(ids + 1, names_filter=["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"])
    assert programs.compiles == before  # the same hooks, however named, and the same shape: one program
    model.run_with_cache(ids[:, :4], names_filter="blocks.*.hook_resid_post")
    assert programs.compiles == before  # another length in the same bucket: the same program
    model.run_with_cache(np.tile(ids, 4), names_filter="blocks.*.hook_resid_post")
    assert programs.compiles == before + 1  # a length in the next bucket: a new program


def test_bad_names_say_the_nearest(loaded) -> None:
    _, model = loaded
    with pytest.raises(UsageError, match=r"'blocks.0.hook_resid_pots' names no hook point.*nearest: "
                                         r"blocks.0.hook_resid_post"):
        model.run_with_cache(np.ones((1, 3), np.int32), names_filter="blocks.0.hook_resid_pots")
    _, cache = model.run_with_cache(np.ones((1, 3), np.int32), names_filter="blocks.0.hook_resid_post")
    with pytest.raises(KeyError, match="nearest: blocks.0.hook_resid_post"):
        cache["blocks.0.hook_resid_pre"]


def test_run_with_hooks_ablates_as_transformerlens_does(loaded, lens_model) -> None:
    torch = pytest.importorskip("torch")
    _, model = loaded
    ids = np.random.default_rng(2).integers(4, 50, (2, 6))

    def tl_zero(x, hook):
        return torch.zeros_like(x)

    def tl_head(x, hook):
        x = x.clone()
        x[:, :, 1] = 0.0
        return x

    def zero(x, hook):
        return x * 0.0

    def head(x, hook):
        return x.at[:, :, 1].set(0.0)

    with torch.no_grad():
        ablated = lens_model.run_with_hooks(torch.tensor(ids), fwd_hooks=[
            ("blocks.0.hook_attn_out", tl_zero), ("blocks.1.attn.hook_z", tl_head)]).numpy()
    got = model.run_with_hooks(ids, fwd_hooks=[("blocks.0.hook_attn_out", zero), ("blocks.1.attn.hook_z", head)])
    np.testing.assert_allclose(np.asarray(got), ablated, atol=1e-4, rtol=0)
    assert np.abs(np.asarray(model(ids)) - ablated).max() > 1e-2  # the ablation changed the logits


def test_hooks_see_their_name_none_changes_nothing_and_programs_are_reused(loaded) -> None:
    _, model = loaded
    ids = np.random.default_rng(3).integers(4, 50, (1, 5))
    seen = []

    def look(x, hook):
        seen.append((hook.name, hook.layer(), x.shape))  # a side effect: the hook runs eagerly, once per call

    plain = np.asarray(model(ids))
    np.testing.assert_allclose(np.asarray(model.run_with_hooks(ids, fwd_hooks=[("blocks.*.hook_resid_post", look)])),
                               plain, atol=1e-5)
    assert seen == [("blocks.0.hook_resid_post", 0, (1, 5, 32)), ("blocks.1.hook_resid_post", 1, (1, 5, 32))]
    model.run_with_hooks(ids + 1, fwd_hooks=[(lambda name: name.endswith("hook_resid_post"), look)])
    assert len(seen) == 4  # as in TransformerLens: every call appends

    def double(x, hook):
        return x * 2.0

    compiles = model._hooked.programs.compiles
    model.run_with_hooks(ids, fwd_hooks=[("blocks.0.hook_resid_post", double)])
    model.run_with_hooks(ids + 1, fwd_hooks=[(lambda name: name == "blocks.0.hook_resid_post", double)])
    assert model._hooked.programs.compiles == compiles + 1  # the same hook points and function: one program
    loss = model.run_with_hooks(ids, fwd_hooks=[("blocks.0.hook_resid_post", look)], return_type="loss")
    assert float(loss) == pytest.approx(float(model(ids, return_type="loss")), abs=1e-5)
    with pytest.raises(UsageError, match=r"fwd_hooks\[0\]: expected a pair"):
        model.run_with_hooks(ids, fwd_hooks=[look])
    with pytest.raises(UsageError, match="nearest: blocks.0.hook_resid_post"):
        model.run_with_hooks(ids, fwd_hooks=[("blocks.0.hook_resid_pots", look)])


def test_loss_per_token_and_greedy_generate_equal_transformerlens(loaded, lens_model) -> None:
    torch = pytest.importorskip("torch")
    hf, model = loaded
    ids = np.random.default_rng(1).integers(4, hf.config.vocab_size, (2, 6))
    with torch.no_grad():
        theirs = lens_model(torch.tensor(ids), return_type="loss", loss_per_token=True).numpy()
        generated = lens_model.generate(torch.tensor(ids), max_new_tokens=8, do_sample=False, use_past_kv_cache=False,
                                        stop_at_eos=False, verbose=False).numpy()
    np.testing.assert_allclose(np.asarray(model.loss_per_token(ids)), theirs, atol=1e-5)
    ours = np.asarray(model.generate(ids, max_new_tokens=8, stop_at_eos=False))
    top2 = np.sort(np.asarray(model(ours[:, :-1]), np.float64)[:, ids.shape[1] - 1:], axis=-1)[..., -2:]
    clear = np.cumprod(top2[..., 1] - top2[..., 0] > 1e-4, axis=1).astype(bool)  # steps before any near-tie
    assert clear.sum() >= 8, "the random weights gave near-ties: pick another seed"
    np.testing.assert_array_equal(ours[:, ids.shape[1]:][clear], generated[:, ids.shape[1]:][clear])
