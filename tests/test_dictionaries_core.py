"""Each architecture's encode, decode and training loss against a direct NumPy computation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lenscope.dictionaries import Dictionary, LossConfig, Spec, init_params, loss
from lenscope.dictionaries.core import centered_matmul
from lenscope.errors import ConfigError

jax.config.update("jax_enable_x64", False)
D_IN, D_SAE, TOKENS, K = 6, 16, 10, 3


def random_dictionary(spec: Spec, seed: int = 0) -> Dictionary:
    """Every parameter random (biases, thresholds and skip too), so no term hides behind a zero."""
    rng = np.random.default_rng(seed)
    params = {
        "W_enc": rng.normal(size=(spec.d_in, spec.d_sae)), "b_enc": rng.normal(size=spec.d_sae) * 0.1,
        "W_dec": rng.normal(size=(spec.d_sae, spec.d_out)), "b_dec": rng.normal(size=spec.d_out) * 0.1,
        "threshold": np.abs(rng.normal(size=spec.d_sae)) * 0.3,
    }
    if spec.skip:
        params["W_skip"] = rng.normal(size=(spec.d_in, spec.d_out)) * 0.1
    if spec.architecture == "gated":
        params.update(b_mag=rng.normal(size=spec.d_sae) * 0.1, r_mag=rng.normal(size=spec.d_sae) * 0.5)
    return Dictionary.of(spec, {k: jnp.asarray(v, jnp.float32) for k, v in params.items()})


def np_pre(d, x):
    p = {k: np.asarray(v, np.float64) for k, v in d.params.items()}
    sae_in = x - p["b_dec"] if d.spec.apply_b_dec_to_input else x
    if d.spec.architecture == "gated":  # the magnitude path: its own weights W_enc * exp(r_mag)
        return p, sae_in @ (p["W_enc"] * np.exp(p["r_mag"])) + p["b_mag"]
    pre = sae_in @ p["W_enc"] + p["b_enc"]
    if d.spec.rescale_acts_by_decoder_norm:
        pre = pre * np.linalg.norm(p["W_dec"], axis=1)
    return p, pre


def np_topk(pre, k):
    out = np.zeros_like(pre)
    for i, row in enumerate(pre):
        top = np.argsort(-row)[:k]
        out[i, top] = np.maximum(row[top], 0)
    return out


def np_gate(d, x):
    p = {k: np.asarray(v, np.float64) for k, v in d.params.items()}
    sae_in = x - p["b_dec"] if d.spec.apply_b_dec_to_input else x
    return sae_in @ p["W_enc"] + p["b_enc"]  # b_enc is the gate's bias (SAELens' b_gate)


def np_encode(d, x):
    p, pre = np_pre(d, x)
    arch = d.spec.architecture
    if arch == "gated":
        return (np_gate(d, x) > 0) * np.maximum(pre, 0)
    if arch == "standard":
        return np.maximum(pre, 0)
    if arch == "topk":
        return np_topk(pre, d.spec.k)
    return np.maximum(pre, 0) * (pre > np.maximum(p["threshold"], 0))


def np_decode(d, f, x):
    p = {k: np.asarray(v, np.float64) for k, v in d.params.items()}
    if d.spec.rescale_acts_by_decoder_norm:
        f = f / np.linalg.norm(p["W_dec"], axis=1)
    out = f @ p["W_dec"] + p["b_dec"]
    return out + x @ p["W_skip"] if d.spec.skip else out


SPECS = [
    Spec("standard", D_IN, D_SAE),
    Spec("topk", D_IN, D_SAE, k=K),
    Spec("topk", D_IN, D_SAE, k=K, rescale_acts_by_decoder_norm=True),
    Spec("batchtopk", D_IN, D_SAE, k=K),
    Spec("jumprelu", D_IN, D_SAE),
    Spec("standard", D_IN, D_SAE, d_out=4, transcoder=True),
    Spec("jumprelu", D_IN, D_SAE, d_out=4, transcoder=True, skip=True),
    Spec("topk", D_IN, D_SAE, d_out=4, k=K, transcoder=True, skip=True),
    Spec("gated", D_IN, D_SAE),
    Spec("gated", D_IN, D_SAE, d_out=4, transcoder=True, skip=True),
    Spec("matryoshka_batchtopk", D_IN, D_SAE, k=K, matryoshka_widths=(4, 10)),
    Spec("matryoshka_batchtopk", D_IN, D_SAE, k=K, matryoshka_widths=(3, 7, 16), rescale_acts_by_decoder_norm=True),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.architecture}-tc{int(s.transcoder)}-skip{int(s.skip)}"
                         f"-rescale{int(s.rescale_acts_by_decoder_norm)}")
def test_encode_decode_match_numpy(spec):
    d = random_dictionary(spec)
    x = np.random.default_rng(1).normal(size=(TOKENS, D_IN)).astype(np.float32)
    f = np.asarray(d.encode(jnp.asarray(x)))
    np.testing.assert_allclose(f, np_encode(d, x.astype(np.float64)), rtol=1e-5, atol=1e-5)
    y = np.asarray(d(jnp.asarray(x)))
    np.testing.assert_allclose(y, np_decode(d, f.astype(np.float64), x.astype(np.float64)), rtol=1e-4, atol=1e-4)
    if spec.architecture == "topk":
        values, indices = d.encode_sparse(jnp.asarray(x))
        np.testing.assert_allclose(np.asarray(d.decode_sparse(values, indices, jnp.asarray(x))), y,
                                   rtol=1e-5, atol=1e-5)


def np_loss(d, x, target, coefficient, dead, cfg):
    p, pre = np_pre(d, x)
    arch = d.spec.architecture
    if arch in ("batchtopk", "matryoshka_batchtopk"):
        flat = np.maximum(pre, 0).ravel()
        keep = np.argsort(-flat)[: d.spec.k * len(x)]
        f = np.zeros_like(flat)
        f[keep] = flat[keep]
        f = f.reshape(pre.shape)
    else:
        f = np_encode(d, x)
    out = np_decode(d, f, x)
    mse = np.mean(np.sum((out - target) ** 2, -1))
    norms = np.linalg.norm(p["W_dec"], axis=1)
    inner = 0.0
    for width in d.spec.matryoshka_widths[:-1]:  # each inner prefix of the latents decoded alone
        prefix = np.where(np.arange(d.spec.d_sae) < width, f, 0.0)
        inner += np.mean(np.sum((np_decode(d, prefix, x) - target) ** 2, -1))
    if arch == "gated":
        gate = np.maximum(np_gate(d, x), 0)
        l1 = cfg.l1_coefficient * coefficient * np.mean(np.sum(gate * norms, -1))
        return mse + l1 + np.mean(np.sum((np_decode(d, gate, x) - target) ** 2, -1)), mse
    if arch == "standard":
        return mse + cfg.l1_coefficient * coefficient * np.mean(np.sum(f * norms, -1)), mse
    if arch == "jumprelu":
        return mse + cfg.l0_coefficient * coefficient * np.mean(np.sum(pre > p["threshold"], -1)), mse
    k_aux = d.spec.d_in // 2
    n_dead = int(dead.sum())
    if n_dead == 0:
        return mse + inner, mse
    masked = np.where(dead, pre, -np.inf)
    aux = np.zeros_like(pre)
    for i, row in enumerate(masked):
        top = np.argsort(-row)[: min(k_aux, n_dead)]
        aux[i, top] = row[top]
    if d.spec.rescale_acts_by_decoder_norm:
        aux = aux / norms
    residual = target - out
    aux_loss = np.mean(np.sum((aux @ p["W_dec"] - residual) ** 2, -1))
    return mse + inner + cfg.aux_coefficient * min(n_dead / k_aux, 1.0) * aux_loss, mse


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.architecture}-tc{int(s.transcoder)}-skip{int(s.skip)}"
                         f"-rescale{int(s.rescale_acts_by_decoder_norm)}")
@pytest.mark.parametrize("n_dead", [0, 2, 9])
def test_loss_matches_numpy(spec, n_dead):
    d = random_dictionary(spec, seed=2)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(TOKENS, D_IN)).astype(np.float32)
    target = x if not spec.transcoder else rng.normal(size=(TOKENS, spec.d_out)).astype(np.float32)
    dead = np.zeros(D_SAE, bool)
    dead[rng.permutation(D_SAE)[:n_dead]] = True
    cfg = LossConfig(l1_coefficient=0.7, l0_coefficient=0.3, aux_coefficient=0.5)
    total, terms = loss(d, jnp.asarray(x), jnp.asarray(target), jnp.float32(0.5), jnp.asarray(dead), cfg)
    want, mse = np_loss(d, x.astype(np.float64), target.astype(np.float64), 0.5, dead, cfg)
    np.testing.assert_allclose(float(terms["mse_loss"]), mse, rtol=1e-4)
    np.testing.assert_allclose(float(total), want, rtol=1e-4)


def test_jumprelu_threshold_gradient_is_the_rectangle_estimate():
    """d loss / d threshold through the straight-through step: -(1/bw) * sum of the rectangle kernel (L0 term)."""
    spec = Spec("jumprelu", D_IN, D_SAE)
    d = random_dictionary(spec, seed=4)
    x = jnp.asarray(np.random.default_rng(5).normal(size=(TOKENS, D_IN)), jnp.float32)
    cfg = LossConfig(l0_coefficient=1.0, bandwidth=2.0)  # wide: many tokens fall inside the rectangle

    def l0_term(threshold):
        return loss(d.replace(threshold=threshold), x, x, jnp.float32(1.0), jnp.zeros(D_SAE, bool), cfg)[1]["l0_loss"]

    grad = np.asarray(jax.grad(l0_term)(d.threshold))
    _, pre = np_pre(d, np.asarray(x, np.float64))
    thr = np.asarray(d.threshold, np.float64)
    inside = np.abs((pre - thr) / 2.0) < 0.5
    np.testing.assert_allclose(grad, -(1 / 2.0) * inside.sum(0) / TOKENS, rtol=1e-5, atol=1e-6)


def test_init_follows_saelens():
    spec = Spec("topk", 8, 32, k=4)
    p = init_params(jax.random.PRNGKey(0), spec, decoder_init_norm=0.1)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(p["W_dec"]), axis=1), 0.1, rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(p["W_enc"]), np.asarray(p["W_dec"]).T)
    assert not np.asarray(p["b_enc"]).any() and not np.asarray(p["b_dec"]).any()


def test_fold_decoder_norms_keeps_the_function():
    for spec in (Spec("topk", D_IN, D_SAE, k=K, rescale_acts_by_decoder_norm=True), Spec("jumprelu", D_IN, D_SAE),
                 Spec("gated", D_IN, D_SAE)):
        d = random_dictionary(spec, seed=6)
        x = jnp.asarray(np.random.default_rng(7).normal(size=(TOKENS, D_IN)), jnp.float32)
        folded = d.fold_decoder_norms()
        assert not folded.spec.rescale_acts_by_decoder_norm
        np.testing.assert_allclose(np.linalg.norm(np.asarray(folded.W_dec), axis=1), 1.0, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(folded(x)), np.asarray(d(x)), rtol=1e-4, atol=1e-4)


def test_bad_specs_are_refused_with_the_choices():
    with pytest.raises(ConfigError, match="did you mean topk"):
        Spec("topkk", 4, 8)
    with pytest.raises(ConfigError, match="transcoder=True"):
        Spec("standard", 4, 8, d_out=3)
    with pytest.raises(ConfigError, match="k=9 exceeds d_sae=8"):
        Spec("topk", 4, 8, k=9)
    with pytest.raises(ConfigError, match="strictly increasing"):
        Spec("matryoshka_batchtopk", 4, 8, k=2, matryoshka_widths=(4, 2))
    with pytest.raises(ConfigError, match="matryoshka_batchtopk only"):
        Spec("batchtopk", 4, 8, k=2, matryoshka_widths=(4,))
    assert Spec("matryoshka_batchtopk", 4, 8, k=2, matryoshka_widths=[2, 4]).matryoshka_widths == (2, 4, 8)


def test_gated_auxiliary_reconstruction_can_leave_the_decoder_untrained():
    """The paper's gated loss decodes the gate through a frozen decoder: that term gives W_dec no gradient."""
    d = random_dictionary(Spec("gated", D_IN, D_SAE), seed=10)
    x = jnp.asarray(np.random.default_rng(11).normal(size=(TOKENS, D_IN)), jnp.float32)

    def aux(d, detach):
        cfg = LossConfig(detach_gated_decoder=detach)
        return loss(d, x, x, jnp.float32(1.0), None, cfg)[1]["auxiliary_reconstruction_loss"]

    frozen, trained = jax.grad(aux)(d, True), jax.grad(aux)(d, False)
    assert not np.asarray(frozen.W_dec).any()  # b_dec still trains: the encoder reads x - b_dec
    assert np.asarray(trained.W_dec).any()
    np.testing.assert_allclose(np.asarray(frozen.W_enc), np.asarray(trained.W_enc), rtol=1e-5, atol=1e-6)


def test_topk_gather_path_has_the_dense_gradients():
    """TopK trains through its k chosen pre-activations and gathered decoder rows; its gradients are the dense
    computation's."""
    spec = Spec("topk", D_IN, D_SAE, k=K, rescale_acts_by_decoder_norm=True)
    d = random_dictionary(spec, seed=8)
    x = jnp.asarray(np.random.default_rng(9).normal(size=(TOKENS, D_IN)), jnp.float32)

    def dense(d):
        return jnp.mean(jnp.sum((d(x) - x) ** 2, -1))

    gather = jax.grad(lambda d: loss(d, x, x, jnp.float32(1.0), None, LossConfig())[0])(d)
    want = jax.grad(dense)(d)
    for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
        np.testing.assert_allclose(np.asarray(getattr(gather, name)), np.asarray(getattr(want, name)),
                                   rtol=1e-4, atol=1e-5, err_msg=name)


def test_centered_matmul_has_autodiffs_gradients_for_x_b_and_w():
    """The encoder's (x - b_dec) @ W_enc sums b_dec's gradient over tokens before the matmul; the same numbers."""
    rng = np.random.default_rng(10)
    x, b, w = (jnp.asarray(rng.normal(size=shape), jnp.float32) for shape in ((3, 5, 6), (6,), (6, 7)))
    weights = jnp.asarray(rng.normal(size=(3, 5, 7)), jnp.float32)

    def objective(matmul):
        return jax.grad(lambda x, b, w: jnp.sum(jnp.tanh(matmul(x, b, w)) * weights), argnums=(0, 1, 2))(x, b, w)

    for got, want in zip(objective(centered_matmul), objective(lambda x, b, w: (x - b) @ w)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
    stacked = jax.vmap(lambda b: jax.grad(lambda b: jnp.sum(centered_matmul(x, b, w) ** 2))(b))(jnp.stack([b, -b]))
    plain = jax.vmap(lambda b: jax.grad(lambda b: jnp.sum(((x - b) @ w) ** 2))(b))(jnp.stack([b, -b]))
    np.testing.assert_allclose(np.asarray(stacked), np.asarray(plain), rtol=1e-5, atol=1e-5)
