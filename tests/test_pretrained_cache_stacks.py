"""The ActivationCache's analysis utilities (accumulated_resid, decompose_resid, stack_head_results,
apply_ln_to_stack, logit_attrs) equal TransformerLens' on the same GPT-2 weights and ids, labels included,
and bad input is refused with a UsageError naming the expected form."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import checkpoint, save_tokenizer, transformerlens_gpt2  # noqa: E402

from lenscope.errors import UsageError  # noqa: E402
from lenscope.models import from_pretrained_no_processing  # noqa: E402
from lenscope.models.pretrained import ActivationCache  # noqa: E402

ATOL = 1e-5  # float32 on both sides, the same operations in another order


@pytest.fixture(scope="module")
def loaded():
    pytest.importorskip("torch", reason="pip install 'torch==2.13.0+cpu' -e '.[parity]'")
    hf, folder = checkpoint("gpt2")
    save_tokenizer(folder)
    return hf, from_pretrained_no_processing(folder)


@pytest.fixture(scope="module")
def lens_model(loaded, tmp_path_factory):
    """TransformerLens' HookedTransformer on the same GPT-2 weights (no weight processing: its ln_final keeps
    its w and b, as ours does)."""
    return transformerlens_gpt2(loaded[1], tmp_path_factory.mktemp("lens"))


@pytest.fixture(scope="module")
def caches(loaded, lens_model):
    """(ours, TransformerLens' cache, ids): the same ids [2, 7] through the same weights."""
    torch = pytest.importorskip("torch")
    _, model = loaded
    ids = np.random.default_rng(0).integers(4, 100, (2, 7))
    with torch.no_grad():
        _, theirs = lens_model.run_with_cache(torch.tensor(ids))
    _, ours = model.run_with_cache(ids)
    return ours, theirs, ids


def close(got, want, what: str) -> float:
    """Assert got (jax) equals want (torch) to ATOL; return the max abs difference."""
    got, want = np.asarray(got), want.detach().numpy()
    assert got.shape == want.shape, (what, got.shape, want.shape)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0, err_msg=what)
    diff = float(np.abs(got - want).max()) if got.size else 0.0
    print(f"{what}: max abs diff {diff:.2e}")
    return diff


def both(ours, theirs, method: str, *args, **kwargs):
    """The method's result on each cache, with its labels when return_labels."""
    torch = pytest.importorskip("torch")
    with torch.no_grad():
        want = getattr(theirs, method)(*args, **kwargs)
    return getattr(ours, method)(*args, **kwargs), want


ACCUMULATED = [{}, {"incl_mid": True}, {"apply_ln": True}, {"pos_slice": -1}, {"layer": 1, "apply_ln": True},
               {"layer": 1, "mlp_input": True, "apply_ln": True}, {"incl_mid": True, "apply_ln": True, "pos_slice": -1},
               {"layer": 0}, {"pos_slice": [0, 3]}, {"pos_slice": (1, 5)}]


@pytest.mark.parametrize("kwargs", ACCUMULATED, ids=str)
def test_accumulated_resid_equals_transformerlens(caches, kwargs) -> None:
    ours, theirs, _ = caches
    (got, labels), (want, want_labels) = both(ours, theirs, "accumulated_resid", return_labels=True, **kwargs)
    assert labels == want_labels
    close(got, want, f"accumulated_resid{kwargs}")
    assert np.asarray(ours.accumulated_resid(**kwargs)).shape == got.shape  # without labels: the stack alone


def test_accumulated_resid_labels_and_logit_lens(caches, loaded) -> None:
    ours, _, _ = caches
    _, labels = ours.accumulated_resid(incl_mid=True, return_labels=True)
    assert labels == ["0_pre", "0_mid", "1_pre", "1_mid", "final_post"]
    lens = ours.accumulated_resid(apply_ln=True, pos_slice=-1)
    W_U = np.asarray(loaded[1].model.embed.embedding).T  # GPT-2 ties W_U to the embedding
    final_logits = np.asarray(lens[-1]) @ W_U  # the last layer of the logit lens is the model's own logits
    np.testing.assert_allclose(final_logits, np.asarray(loaded[1](caches[2]))[:, -1], atol=1e-4)


DECOMPOSED = [{}, {"mode": "attn"}, {"mode": "mlp"}, {"apply_ln": True}, {"layer": 1, "mlp_input": True},
              {"layer": 1, "mlp_input": True, "apply_ln": True}, {"pos_slice": -1, "apply_ln": True},
              {"incl_embeds": False}, {"layer": 0}]


@pytest.mark.parametrize("kwargs", DECOMPOSED, ids=str)
def test_decompose_resid_equals_transformerlens(caches, kwargs) -> None:
    ours, theirs, _ = caches
    (got, labels), (want, want_labels) = both(ours, theirs, "decompose_resid", return_labels=True, **kwargs)
    assert labels == want_labels
    close(got, want, f"decompose_resid{kwargs}")


def test_decompose_resid_sums_to_the_stream(caches) -> None:
    ours, _, _ = caches
    stack, labels = ours.decompose_resid(return_labels=True)
    assert labels == ["embed", "pos_embed", "0_attn_out", "0_mlp_out", "1_attn_out", "1_mlp_out"]
    np.testing.assert_allclose(np.asarray(stack.sum(0)), np.asarray(ours["blocks.1.hook_resid_post"]), atol=1e-5)


HEADS = [{}, {"incl_remainder": True}, {"pos_slice": [0, 3]}, {"apply_ln": True}, {"layer": 1},
         {"layer": 1, "incl_remainder": True, "apply_ln": True, "pos_slice": -1}, {"layer": 0}]


@pytest.mark.parametrize("kwargs", HEADS, ids=str)
def test_stack_head_results_equals_transformerlens(caches, kwargs) -> None:
    ours, theirs, _ = caches
    (got, labels), (want, want_labels) = both(ours, theirs, "stack_head_results", return_labels=True, **kwargs)
    assert labels == want_labels
    close(got, want, f"stack_head_results{kwargs}")


def test_stack_head_results_from_cached_hook_result_and_layer_0_remainder(loaded, caches) -> None:
    _, model = loaded
    ours, _, ids = caches
    _, opted = model.run_with_cache(ids, names_filter=["blocks.*.attn.hook_result", "blocks.1.hook_resid_post"])
    np.testing.assert_allclose(np.asarray(opted.stack_head_results(incl_remainder=True)),
                               np.asarray(ours.stack_head_results(incl_remainder=True)), atol=1e-5)
    stack, labels = ours.stack_head_results(layer=0, incl_remainder=True, return_labels=True)
    assert labels == ["remainder"]  # no heads before block 0: the rest is the stream entering it
    np.testing.assert_allclose(np.asarray(stack[0]), np.asarray(ours["blocks.0.hook_resid_pre"]), atol=0)


STACKED = [{}, {"layer": 0}, {"layer": 1, "mlp_input": True}, {"layer": 2}, {"pos_slice": -1},
           {"batch_slice": 1}, {"batch_slice": [1]}, {"pos_slice": [2, 5], "batch_slice": (0, 1)},
           {"recompute_ln": True}]


@pytest.mark.parametrize("kwargs", STACKED, ids=str)
def test_apply_ln_to_stack_equals_transformerlens(caches, kwargs) -> None:
    torch = pytest.importorskip("torch")
    ours, theirs, _ = caches
    stack = np.asarray(ours.decompose_resid())
    pos = kwargs.get("pos_slice")
    if pos is not None:  # the stack comes sliced already; apply_ln_to_stack slices the scale
        stack = stack[:, :, pos]
    with torch.no_grad():
        want = theirs.apply_ln_to_stack(torch.tensor(stack), **kwargs)
    close(ours.apply_ln_to_stack(stack, **kwargs), want, f"apply_ln_to_stack{kwargs}")


def test_apply_ln_to_stack_without_batch_dim(loaded, lens_model, caches) -> None:
    torch = pytest.importorskip("torch")
    _, model = loaded
    ids = caches[2][:1]
    ours = model.run_with_cache(ids)[1].remove_batch_dim()
    with torch.no_grad():
        theirs = lens_model.run_with_cache(torch.tensor(ids))[1].remove_batch_dim()
    stack = np.asarray(ours.accumulated_resid())
    with torch.no_grad():
        want = theirs.apply_ln_to_stack(torch.tensor(stack), layer=1, has_batch_dim=False)
    close(ours.apply_ln_to_stack(stack, layer=1, has_batch_dim=False), want, "apply_ln_to_stack, no batch")
    got, want = both(ours, theirs, "accumulated_resid", apply_ln=True, pos_slice=-1)
    close(got, want, "accumulated_resid(apply_ln, pos_slice=-1), no batch")
    got, want = both(ours, theirs, "stack_head_results", incl_remainder=True, apply_ln=True)
    close(got, want, "stack_head_results, no batch")


def test_logit_attrs_equals_transformerlens(caches) -> None:
    torch = pytest.importorskip("torch")
    ours, theirs, ids = caches
    stack = np.asarray(ours.decompose_resid(pos_slice=-1))
    right, wrong = ids[:, -1], (ids[:, -1] + 1) % 100
    with torch.no_grad():
        t_stack = torch.tensor(stack)
        want = theirs.logit_attrs(t_stack, torch.tensor(right), pos_slice=-1)
        want_diff = theirs.logit_attrs(t_stack, torch.tensor(right), torch.tensor(wrong), pos_slice=-1)
        want_one = theirs.logit_attrs(t_stack, 7, 8, pos_slice=-1)
        full = torch.tensor(np.asarray(ours.decompose_resid()))
        want_full = theirs.logit_attrs(full, torch.tensor(ids), torch.tensor((ids + 1) % 100))
        want_batch = theirs.logit_attrs(t_stack, torch.tensor(right[1:]), pos_slice=-1, batch_slice=[1])
    close(ours.logit_attrs(stack, right, pos_slice=-1), want, "logit_attrs")
    close(ours.logit_attrs(stack, right, wrong, pos_slice=-1), want_diff, "logit_attrs, incorrect_tokens")
    close(ours.logit_attrs(stack, 7, 8, pos_slice=-1), want_one, "logit_attrs, one token each")
    close(ours.logit_attrs(stack, "w3", "w4", pos_slice=-1), want_one, "logit_attrs, token strings")
    close(ours.logit_attrs(np.asarray(full), ids, (ids + 1) % 100), want_full, "logit_attrs, every position")
    close(ours.logit_attrs(stack, right[1:], pos_slice=-1, batch_slice=[1]), want_batch, "logit_attrs, batch_slice")
    # linear in the stack (one cached scale for all): the components' attributions sum to the final stream's
    total = np.asarray(ours.logit_attrs(stack, right, wrong, pos_slice=-1)).sum(0)
    final = np.asarray(ours.logit_attrs(np.asarray(ours["blocks.1.hook_resid_post"])[None, :, -1], right, wrong,
                                        pos_slice=-1))[0]
    np.testing.assert_allclose(total, final, atol=1e-4)


def test_bad_input_says_the_expected_form(loaded, caches) -> None:
    _, model = loaded
    ours, _, ids = caches
    _, resid_only = model.run_with_cache(ids, names_filter="blocks.*.hook_resid_post")
    with pytest.raises(UsageError, match=r"stack_head_results reads blocks.0.attn.hook_z and this cache lacks it"):
        resid_only.stack_head_results()
    with pytest.raises(UsageError, match=r"layer=3; expected an int in 0..2"):
        ours.accumulated_resid(layer=3)
    with pytest.raises(UsageError, match=r"layer=-2; expected an int in 0..2"):
        ours.stack_head_results(layer=-2)
    with pytest.raises(UsageError, match=r"pos_slice='last': expected None, an int, a slice"):
        ours.decompose_resid(pos_slice="last")
    with pytest.raises(UsageError, match=r"pos_slice=7 for an axis of 7; expected indices in -7..6"):
        ours.accumulated_resid(pos_slice=7)  # JAX would clamp it to the last position
    with pytest.raises(UsageError, match=r"mode='heads'; expected one of all, mlp, attn"):
        ours.decompose_resid(mode="heads")
    stack = ours.decompose_resid(pos_slice=-1)
    with pytest.raises(UsageError, match=r"tokens of shape \(2,\) and incorrect_tokens of shape \(\); expected"):
        ours.logit_attrs(stack, ids[:, -1], 5, pos_slice=-1)
    with pytest.raises(UsageError, match=r"expected ids in 0..99"):
        ours.logit_attrs(stack, np.array([5, 100]), pos_slice=-1)
    with pytest.raises(UsageError, match=r"reads ln_final.hook_scale and this cache lacks it"):
        resid_only.apply_ln_to_stack(np.ones((1, 2, 7, 32), np.float32))
    with pytest.raises(UsageError, match=r"needs the model's weights and sizes; expected a cache from "
                                         r"model.run_with_cache"):
        ActivationCache(dict(ours.to_numpy())).accumulated_resid()


def test_rmsnorm_llama_equals_transformerlens() -> None:
    """RMSNorm (no centring), grouped key/value heads and an untied W_U: the same utilities on a tiny Llama."""
    lens = pytest.importorskip("transformer_lens", reason="pip install 'torch==2.13.0+cpu' -e '.[parity,peers]'")
    torch = pytest.importorskip("torch")
    from transformer_lens.pretrained.weight_conversions.llama import convert_llama_weights

    hf, folder = checkpoint("llama")
    c = hf.config
    cfg = lens.HookedTransformerConfig(
        n_layers=c.num_hidden_layers, d_model=c.hidden_size, n_ctx=64, d_head=8, n_heads=c.num_attention_heads,
        n_key_value_heads=c.num_key_value_heads, d_vocab=c.vocab_size, d_mlp=c.intermediate_size, act_fn="silu",
        gated_mlp=True, normalization_type="RMS", final_rms=True, eps=c.rms_norm_eps,
        positional_embedding_type="rotary", rotary_dim=8, rotary_base=10000.0,
        original_architecture="LlamaForCausalLM", device="cpu")
    tl = lens.HookedTransformer(cfg)
    tl.load_state_dict(convert_llama_weights(hf, cfg), strict=False)
    model = from_pretrained_no_processing(folder, tokenizer=False)
    assert model.model.unembed.kernel is not None and model.config.norm == "rmsnorm"
    ids = np.random.default_rng(4).integers(4, 100, (2, 7))
    with torch.no_grad():
        _, theirs = tl.eval().run_with_cache(torch.tensor(ids))
    _, ours = model.run_with_cache(ids)
    for method, kwargs in [("accumulated_resid", {"apply_ln": True, "incl_mid": True}),
                           ("accumulated_resid", {"layer": 1, "apply_ln": True, "pos_slice": -1}),
                           ("decompose_resid", {"apply_ln": True, "mlp_input": True, "layer": 1}),
                           ("stack_head_results", {"incl_remainder": True, "apply_ln": True})]:
        (got, labels), (want, want_labels) = both(ours, theirs, method, return_labels=True, **kwargs)
        assert labels == want_labels
        close(got, want, f"llama {method}{kwargs}")
    stack = np.asarray(ours.decompose_resid(pos_slice=-1))
    with torch.no_grad():
        want = theirs.logit_attrs(torch.tensor(stack), torch.tensor(ids[:, -1]), torch.tensor(ids[:, 0]), pos_slice=-1)
    close(ours.logit_attrs(stack, ids[:, -1], ids[:, 0], pos_slice=-1), want, "llama logit_attrs")


def test_gemma_embed_scale_and_parallel_blocks() -> None:
    """Gemma's hook_embed is before its sqrt(d_model) scale (TransformerLens folds it into W_E): the decomposition
    scales it, so the parts still sum to the stream; GPT-NeoX's parallel blocks have no resid_mid to stack."""
    _, folder = checkpoint("gemma")
    _, cache = from_pretrained_no_processing(folder, tokenizer=False).run_with_cache(np.array([[5, 6, 7, 8]]))
    stack, labels = cache.decompose_resid(return_labels=True)
    assert labels == ["embed", "0_attn_out", "0_mlp_out", "1_attn_out", "1_mlp_out"]  # rotary: no pos_embed
    np.testing.assert_allclose(np.asarray(stack.sum(0)), np.asarray(cache["blocks.1.hook_resid_post"]), atol=1e-4)
    _, folder = checkpoint("gpt_neox")
    _, cache = from_pretrained_no_processing(folder, tokenizer=False).run_with_cache(np.array([[5, 6, 7]]))
    assert cache.accumulated_resid().shape == (3, 1, 3, 32)
    with pytest.raises(UsageError, match=r"blocks.0.hook_resid_mid and this cache lacks it \(parallel blocks"):
        cache.accumulated_resid(incl_mid=True)
