"""SAELens' evaluation ratios at their zero cases (dictionaries/evaluate.py): a zero target or output, a token
at the mean target, and a site whose ablation changes nothing give the documented values, never NaN or a
ZeroDivisionError; the ordinary cases keep SAELens' formulas."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lenscope.dictionaries import Dictionary, Spec, init_params
from lenscope.dictionaries.evaluate import finish, reconstruction_sums, spliced

SPEC = Spec("standard", d_in=2, d_sae=4)


def dictionary(scale: float) -> Dictionary:
    """A ReLU SAE whose output is `scale` times its input for inputs on the first axis (0: always zero)."""
    params = init_params(jax.random.key(0), SPEC, decoder_init_norm=None)
    eye = jnp.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    return Dictionary.of(SPEC, {**params, "W_enc": eye.T, "W_dec": scale * eye})


def metrics(d: Dictionary, y: np.ndarray) -> dict[str, float]:
    return finish(jax.device_get(reconstruction_sums(d, jnp.asarray(y), jnp.asarray(y))))[0]


Y = np.array([[2.0, 0.0], [-2.0, 0.0], [0.0, 0.0]], np.float32)  # the last token is zero and the mean


def test_a_zero_output_gives_documented_values_not_nan():
    values = metrics(dictionary(0.0), Y)  # before the guards: ZeroDivisionError (E<y, ŷ> = 0)
    assert values["cossim"] == 0.0  # every output is the zero vector
    assert values["relative_reconstruction_bias"] == 1.0
    assert values["explained_variance_legacy"] == pytest.approx(1 / 3)  # the zero token at the mean: exact
    assert all(np.isfinite(v) for v in values.values())


def test_a_zero_target_token_has_cosine_zero_and_the_rest_keep_their_formula():
    values = metrics(dictionary(0.5), Y)
    assert values["cossim"] == pytest.approx(2 / 3)  # cos 1, cos 1, and 0 for the zero token
    assert values["relative_reconstruction_bias"] == pytest.approx(0.5)  # ||ŷ||² / <y, ŷ> = 0.25 / 0.5
    assert values["explained_variance_legacy"] == pytest.approx((0.75 + 0.75 + 1.0) / 3)


def _loss_fn(losses: dict, logits: dict):
    """A model whose loss and logits per patch are given (None: clean)."""
    return lambda patch: (jnp.float32(losses[patch]), jnp.asarray(logits[patch], jnp.float32))


CLEAN = [[2.0, 0.0, -1.0]]


@pytest.mark.parametrize(("sae_loss", "sae_logits", "expected"), [
    (3.0, CLEAN, 1.0),  # ablation changes nothing and neither does the dictionary: nothing lost
    (3.5, [[0.0, 2.0, -1.0]], 0.0),  # ablation changes nothing, the dictionary does: no credit
])
def test_scores_when_ablating_the_site_changes_nothing(sae_loss, sae_logits, expected):
    out = spliced(_loss_fn({None: 3.0, "sae": sae_loss, "ablate": 3.0}, {None: CLEAN, "sae": sae_logits,
                                                                          "ablate": CLEAN}), "sae", "ablate")
    assert float(out["ce_loss_score"]) == expected and float(out["kl_div_score"]) == expected


def test_scores_keep_saelens_formulas_otherwise():
    out = spliced(_loss_fn({None: 2.0, "sae": 2.5, "ablate": 4.0},
                           {None: CLEAN, "sae": [[1.5, 0.0, -1.0]], "ablate": [[0.0, 0.0, 0.0]]}), "sae", "ablate")
    assert float(out["ce_loss_score"]) == pytest.approx((4.0 - 2.5) / (4.0 - 2.0))
    kl_sae, kl_ablation = float(out["kl_div_with_sae"]), float(out["kl_div_with_ablation"])
    assert kl_ablation > kl_sae > 0 and float(out["kl_div_score"]) == pytest.approx(1 - kl_sae / kl_ablation)


def test_the_guarded_scores_trace_under_jit():
    fn = jax.jit(lambda clean: spliced(lambda patch: (clean, jnp.zeros((1, 3))), "sae", "ablate"))
    out = fn(jnp.float32(1.0))
    assert float(out["ce_loss_score"]) == 1.0 and float(out["kl_div_score"]) == 1.0
