"""`with model.hooks(fwd_hooks=...)`, `add_hook` and `reset_hooks` on a loaded model, as TransformerLens users write
them: plain calls and run_with_cache inside run with the hooks compiled in (run_with_hooks' programs)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import checkpoint, save_tokenizer  # noqa: E402

from lenscope.errors import UsageError  # noqa: E402
from lenscope.models import from_pretrained_no_processing  # noqa: E402


@pytest.fixture(scope="module")
def model():
    pytest.importorskip("torch", reason="pip install 'torch==2.13.0+cpu' -e '.[parity]'")
    _, folder = checkpoint("gpt2")
    save_tokenizer(folder)
    return from_pretrained_no_processing(folder)


def zero_head_1(z, hook):
    return z.at[:, :, 1].set(0.0)


def double(x, hook):
    return x * 2.0


IDS = np.random.default_rng(0).integers(4, 50, (2, 5))
HOOKS = [("blocks.0.attn.hook_z", zero_head_1), ("blocks.1.hook_mlp_out", double)]


def test_inside_the_context_the_call_is_run_with_hooks_and_after_it_the_plain_forward(model) -> None:
    plain = np.asarray(model(IDS))
    want = np.asarray(model.run_with_hooks(IDS, fwd_hooks=HOOKS))
    want_loss = float(model.run_with_hooks(IDS, fwd_hooks=HOOKS, return_type="loss"))
    twice = np.asarray(model.run_with_hooks(IDS, fwd_hooks=HOOKS + HOOKS))
    assert np.abs(want - plain).max() > 1e-3  # the hooks change the logits
    with model.hooks(fwd_hooks=HOOKS) as same:
        assert same is model
        np.testing.assert_allclose(np.asarray(model(IDS)), want, atol=1e-6)
        logits, loss = model(IDS, return_type="both")
        np.testing.assert_allclose(np.asarray(logits), want, atol=1e-6)
        assert float(loss) == pytest.approx(want_loss, abs=1e-5)
        np.testing.assert_allclose(np.asarray(model.run_with_hooks(IDS, fwd_hooks=HOOKS)), twice, atol=1e-5)  # on top
        cached, cache = model.run_with_cache(IDS, names_filter=["blocks.0.attn.hook_z", "blocks.1.hook_mlp_out"])
        np.testing.assert_allclose(np.asarray(cached), want, atol=1e-6)
        assert float(np.abs(np.asarray(cache["blocks.0.attn.hook_z"])[:, :, 1]).max()) == 0.0  # what the hook left
        assert model.loss_per_token(IDS).shape == (2, 4)
        with pytest.raises(UsageError, match="generate does not run the hooks"):
            model.generate(IDS, 2)
    np.testing.assert_allclose(np.asarray(model(IDS)), plain, atol=1e-6)
    _, cache = model.run_with_cache(IDS, names_filter="blocks.0.attn.hook_z")
    assert float(np.abs(np.asarray(cache["blocks.0.attn.hook_z"])[:, :, 1]).max()) > 0.0


def test_add_hook_persists_until_reset_hooks(model) -> None:
    plain = np.asarray(model(IDS))
    both = np.asarray(model.run_with_hooks(IDS, fwd_hooks=HOOKS))
    one = np.asarray(model.run_with_hooks(IDS, fwd_hooks=HOOKS[:1]))
    model.add_hook("blocks.0.attn.hook_z", zero_head_1)
    try:
        np.testing.assert_allclose(np.asarray(model(IDS)), one, atol=1e-6)
        np.testing.assert_allclose(np.asarray(model(IDS)), one, atol=1e-6)  # still there on the next call
        with model.hooks(fwd_hooks=HOOKS[1:]):  # on top of the added hook
            np.testing.assert_allclose(np.asarray(model(IDS)), both, atol=1e-6)
        np.testing.assert_allclose(np.asarray(model(IDS)), one, atol=1e-6)  # the context removed only its own
        with model.hooks(fwd_hooks=HOOKS[1:], reset_hooks_end=False):
            pass
        assert len(model._active) == 2
    finally:
        model.reset_hooks()
    np.testing.assert_allclose(np.asarray(model(IDS)), plain, atol=1e-6)


def test_bad_hook_names_say_the_nearest(model) -> None:
    with pytest.raises(UsageError, match="nearest: blocks.0.hook_resid_post"):
        model.add_hook("blocks.0.hook_resid_pots", double)
    with pytest.raises(UsageError, match="nearest: blocks.0.hook_resid_post"), model.hooks(
            fwd_hooks=[("blocks.0.hook_resid_pots", double)]):
        pass
    with pytest.raises(UsageError, match="only forward hooks"):
        model.add_hook("blocks.0.hook_resid_post", double, dir="bwd")
    assert model._active == ()


def test_two_calls_at_one_shape_in_the_context_compile_once(model) -> None:
    programs = model._hooked.programs
    with model.hooks(fwd_hooks=[("blocks.1.hook_resid_post", double)]):
        model(IDS)
        before = programs.compiles
        model(IDS + 1)
        assert programs.compiles == before
        model(IDS[:, :4])
        assert programs.compiles == before + 1  # a new length: a new program
    model.run_with_hooks(IDS, fwd_hooks=[("blocks.1.hook_resid_post", double)])  # run_with_hooks' is the same
    assert programs.compiles == before + 1
