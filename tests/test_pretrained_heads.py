"""The per-head hook points `hook_result` and `hook_attn_in`: captured values against a NumPy recomputation,
patches that act on one head only, absent from the compiled forward unless used, and TransformerLens parity."""

from __future__ import annotations

import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import checkpoint  # noqa: E402

from lenscope.capture import EquinoxBackend, discover, match_paths, validate_selection  # noqa: E402
from lenscope.capture.patch import patched, record  # noqa: E402
from lenscope.models import from_pretrained_no_processing  # noqa: E402
from lenscope.models.pretrained import Decoder, DecoderConfig, random_decoder  # noqa: E402
from lenscope.models.pretrained.rope import inverse_frequencies  # noqa: E402

BACKEND = EquinoxBackend()
ROPE = inverse_frequencies({"rope_theta": 10000.0}, 8)
# grouped heads (4 query, 2 key/value), d_model 32: no other value of the forward is [2, 6, 4, 32]
LLAMA = DecoderConfig(family="llama", vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_head=8,
                      d_mlp=64, rope_freqs=(ROPE, ROPE), rope_dim=8, attn_scale=8 ** -0.5, out_bias=True)
IDS = jnp.asarray(np.random.default_rng(0).integers(0, 50, (2, 6)))
PER_HEAD = "f32[2,6,4,32]"


@pytest.fixture(scope="module")
def model() -> Decoder:
    decoder = random_decoder(LLAMA, seed=0, std=0.3)
    bias = jnp.asarray(np.random.default_rng(1).normal(0, 0.5, (32,)), jnp.float32)
    return eqx.tree_at(lambda m: m.blocks[1].attn.out.bias, decoder, bias)


def run(model: Decoder, paths: list[str], patch: dict | None = None, on: str = "output") -> tuple:
    forward = lambda t: model(t)  # noqa: E731
    if paths:
        return jax.jit(lambda t: record(forward, (t,), paths, patch, on=on, backend=BACKEND))(IDS)
    return jax.jit(lambda t: patched(forward, (t,), patch, on=on, backend=BACKEND))(IDS), {}


def test_discovered_in_call_order_with_transformerlens_names(model: Decoder) -> None:
    paths = discover(lambda t: model(t), (IDS,), backend=BACKEND)
    block = [p[len("blocks/1/"):] for p in paths if p.startswith("blocks/1/")]
    assert block[:3] == ["hook_resid_pre", "hook_attn_in", "ln1"]
    assert block.index("attn/hook_z") < block.index("attn/out") < block.index("attn/hook_result")
    assert match_paths("blocks.*.attn.hook_result", paths) == ["blocks/0/attn/hook_result", "blocks/1/attn/hook_result"]
    assert validate_selection(["blocks.1.hook_attn_in"], paths)[0] == ["blocks/1/hook_attn_in"]
    _, cache = run(model, ["blocks.1.attn.hook_result", "blocks.1.hook_attn_in"])
    assert cache["blocks.1.attn.hook_result"].shape == cache["blocks.1.hook_attn_in"].shape == (2, 6, 4, 32)


def test_captured_values_equal_a_numpy_recomputation(model: Decoder) -> None:
    names = ["blocks/1/attn/hook_z", "blocks/1/attn/hook_result", "blocks/1/attn", "blocks/1/hook_attn_in",
             "blocks/1/hook_resid_pre"]
    _, cache = run(model, names)
    z, result = np.asarray(cache[names[0]], np.float64), np.asarray(cache[names[1]])
    kernel = np.asarray(model.blocks[1].attn.out.kernel, np.float64)  # [heads, d_head, d_model]
    expected = np.stack([z[:, :, h] @ kernel[h] for h in range(4)], axis=2)
    np.testing.assert_allclose(result, expected, atol=1e-5, rtol=0)
    bias = np.asarray(model.blocks[1].attn.out.bias)
    np.testing.assert_allclose(result.sum(2) + bias, cache["blocks/1/attn"], atol=1e-5, rtol=0)
    resid = np.asarray(cache["blocks/1/hook_resid_pre"])
    np.testing.assert_array_equal(cache["blocks/1/hook_attn_in"], np.repeat(resid[:, :, None], 4, axis=2))


def test_patching_one_heads_result_is_zeroing_its_z(model: Decoder) -> None:
    forward = lambda x: model(x)  # noqa: E731
    patches = [{"blocks/0/hook_resid_pre": lambda x: x},
               {"blocks.1.attn.hook_result": lambda r: r.at[:, :, 2].set(0.0)},
               {"blocks.1.attn.hook_z": lambda z: z.at[:, :, 2].set(0.0)},
               {"blocks.1.attn.hook_result": lambda r: r * 1.0}]  # read back: the sum of heads
    clean, no_result, no_z, unchanged = jax.jit(  # the four runs in one program (one compilation)
        lambda t: [patched(forward, (t,), patch, backend=BACKEND) for patch in patches])(IDS)
    gap = float(jnp.abs(no_result - no_z).max())
    print(f"hook_result head 2 zeroed vs hook_z head 2 zeroed: max abs diff {gap:.1e}")
    np.testing.assert_allclose(no_result, no_z, atol=1e-5, rtol=0)
    assert float(jnp.abs(no_result - clean).max()) > 1e-2
    np.testing.assert_allclose(unchanged, clean, atol=1e-5, rtol=0)


def test_patching_one_heads_input_changes_that_head_only(model: Decoder) -> None:
    other = jnp.asarray(np.random.default_rng(2).normal(0, 1, (2, 6, 32)), jnp.float32)
    one_head = {"blocks/1/hook_attn_in": lambda x: x.at[:, :, 2].set(other)}
    names = ["blocks/1/attn/hook_q", "blocks/1/attn/hook_z"]
    forward = lambda x: model(x)  # noqa: E731
    every_head = {"blocks/1/hook_attn_in": lambda x: jnp.broadcast_to(other[:, :, None], x.shape)}

    @jax.jit
    def runs(t: jax.Array) -> tuple:  # every run below in one program (one compilation)
        clean = record(forward, (t,), names, backend=BACKEND)[1]
        changed = record(forward, (t,), names, one_head, backend=BACKEND)[1]
        every = patched(forward, (t,), every_head, backend=BACKEND)
        ln1_input = patched(forward, (t,), {"blocks/1/ln1": lambda inputs: inputs.replace(x=other)}, on="inputs",
                            backend=BACKEND)
        return clean, changed, every, ln1_input

    clean, changed, every, ln1_input = runs(IDS)
    for name in names:
        assert float(jnp.abs(changed[name][:, :, 2] - clean[name][:, :, 2]).max()) > 1e-2, name
        rest = [0, 1, 3]
        np.testing.assert_allclose(changed[name][:, :, rest], clean[name][:, :, rest], atol=1e-5, rtol=0)
    # every head's copy replaced: the attention reads `other`, the residual stream still adds to its own input
    np.testing.assert_allclose(every, ln1_input, atol=1e-5, rtol=0)


def test_absent_from_the_compiled_forward_unless_used(model: Decoder) -> None:
    plain = jax.jit(lambda t: model(t)).lower(IDS).compile().as_text()
    assert PER_HEAD not in plain
    for name in ("blocks/1/attn/hook_result", "blocks/1/hook_attn_in"):
        used = jax.jit(lambda t, n=name: record(lambda x: model(x), (t,), [n], backend=BACKEND))
        assert PER_HEAD in used.lower(IDS).compile().as_text(), name


def test_parity_with_transformerlens_hook_result_and_attn_in() -> None:
    torch = pytest.importorskip("torch", reason="pip install 'torch==2.13.0+cpu' -e '.[parity,peers]'")
    lens = pytest.importorskip("transformer_lens", reason="pip install 'torch==2.13.0+cpu' -e '.[parity,peers]'")
    from transformer_lens.pretrained.weight_conversions.gpt2 import convert_gpt2_weights

    hf, folder = checkpoint("gpt2")
    c = hf.config
    cfg = lens.HookedTransformerConfig(n_layers=c.n_layer, d_model=c.n_embd, n_ctx=c.n_positions, d_head=8,
                                       n_heads=c.n_head, d_vocab=c.vocab_size, d_mlp=4 * c.n_embd,
                                       act_fn="gelu_new", normalization_type="LN", eps=c.layer_norm_epsilon,
                                       use_attn_result=True, use_attn_in=True, device="cpu")
    tl = lens.HookedTransformer(cfg)
    tl.load_state_dict(convert_gpt2_weights(hf, cfg), strict=False)
    tl.eval()
    ours = from_pretrained_no_processing(folder, tokenizer=False).model
    ids = np.random.default_rng(0).integers(3, c.vocab_size, (2, 7))
    names = [f"blocks.{i}.{hook}" for i in range(c.n_layer) for hook in ("attn.hook_result", "hook_attn_in")]
    with torch.no_grad():
        tl_logits, cache = tl.run_with_cache(torch.tensor(ids), names_filter=names)
    logits, got = jax.jit(lambda t: record(lambda x: ours(x), (t,), names, backend=BACKEND))(ids)
    np.testing.assert_allclose(logits, tl_logits.numpy(), atol=1e-4, rtol=0)
    for name in names:
        np.testing.assert_allclose(got[name], cache[name].numpy(), atol=1e-5, rtol=0, err_msg=name)

    other = np.random.default_rng(3).normal(0, 1, (2, 7, c.n_embd)).astype(np.float32)

    def tl_patch(x: torch.Tensor, hook: object) -> torch.Tensor:
        x = x.clone()
        x[:, :, 1] = torch.tensor(other)
        return x

    with torch.no_grad():
        tl_patched = tl.run_with_hooks(torch.tensor(ids), fwd_hooks=[("blocks.1.hook_attn_in", tl_patch)])
    ours_patched = jax.jit(lambda t: patched(lambda x: ours(x), (t,), {
        "blocks.1.hook_attn_in": lambda x: x.at[:, :, 1].set(other)}, backend=BACKEND))(ids)
    np.testing.assert_allclose(ours_patched, tl_patched.numpy(), atol=1e-4, rtol=0)


def test_patching_attn_in_while_generating_with_grouped_heads_is_refused(model: Decoder) -> None:
    from lenscope.errors import UsageError
    from lenscope.models.pretrained.decoder import KV

    empty = jnp.zeros((2, 8, LLAMA.n_kv_heads, LLAMA.d_head), jnp.float32)
    caches = [KV(empty, empty) for _ in range(LLAMA.n_layers)]
    mask, positions = jnp.ones((2, 8), jnp.int32), jnp.broadcast_to(jnp.arange(6), (2, 6))
    step = lambda t: model.step(t, mask, positions, caches, 0)  # noqa: E731  one prompt pass of generation
    copy = {"blocks/1/hook_attn_in": lambda x: x * 1.0}
    with pytest.raises(UsageError, match="attn_in was patched while generating.*2 key/value heads.*hook_resid_pre"):
        jax.eval_shape(lambda t: patched(step, (t,), copy, on="output", backend=BACKEND), IDS)  # traced, not run
