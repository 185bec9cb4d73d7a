"""Features matched across checkpoints: the optimal assignment by decoder cosine recovers a known permutation of a
dictionary's latents exactly, and tracks are born, live and die where the dictionaries say."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from lenscope.dictionaries import Dictionary, Spec, Track, feature_tracks, init_params, match_decoders
from lenscope.errors import UsageError

SPEC = Spec("standard", d_in=16, d_sae=48)


def permuted(d: Dictionary, order: np.ndarray) -> Dictionary:
    """The same dictionary with its latents reordered: latent j of the result is latent order[j] of d."""
    return d.replace(W_enc=d.W_enc[:, order], b_enc=d.b_enc[order], W_dec=d.W_dec[order],
                     threshold=d.threshold[order])


@pytest.fixture(scope="module")
def dictionary() -> Dictionary:
    return Dictionary.of(SPEC, init_params(jax.random.PRNGKey(0), SPEC))


def test_matching_recovers_a_permutation_of_the_latents_exactly(dictionary):
    order = np.random.default_rng(1).permutation(SPEC.d_sae)
    other = permuted(dictionary, order)
    x = jax.random.normal(jax.random.PRNGKey(2), (8, SPEC.d_in))
    np.testing.assert_allclose(other.encode(x), dictionary.encode(x)[:, order], rtol=1e-6)  # the same dictionary
    found, cosine = match_decoders(dictionary, other)
    np.testing.assert_array_equal(found, np.argsort(order))  # latent i of the first is latent found[i] of the other
    np.testing.assert_allclose(cosine, 1.0, rtol=1e-6)
    scaled, _ = match_decoders(np.asarray(dictionary.W_dec) * 3.0, other)  # decoders as arrays; norms do not matter
    np.testing.assert_array_equal(scaled, found)


def test_tracks_are_born_live_and_die_where_the_features_change(dictionary):
    rng = np.random.default_rng(3)
    first, second = rng.permutation(SPEC.d_sae), rng.permutation(SPEC.d_sae)
    at_200 = permuted(dictionary, first)
    rows = np.asarray(permuted(at_200, second).W_dec).copy()
    rows[5] = rng.normal(size=SPEC.d_in)  # at step 300 one latent's direction is replaced by a new one
    tracks = feature_tracks([dictionary, at_200, rows], steps=[100, 200, 300])
    assert all(isinstance(t, Track) for t in tracks)
    died = [t for t in tracks if t.death is not None]
    born = [t for t in tracks if t.birth != 100]
    assert len(tracks) == SPEC.d_sae + 1 and len(died) == 1 and len(born) == 1
    old = int(first[second[5]])  # the latent of step 100 whose direction row 5 held at step 300
    assert died[0].latents == {100: old, 200: int(np.argsort(first)[old])} and died[0].death == 300
    assert born[0].latents == {300: 5} and born[0].birth == 300 and born[0].death is None
    for t in tracks:
        if t not in died and t not in born:  # every other feature lives through all three steps, exactly matched
            assert t.steps == [100, 200, 300] and t.death is None
            np.testing.assert_allclose(t.similarity, 1.0, rtol=1e-6)
            assert np.allclose(np.asarray(dictionary.W_dec)[t.latents[100]], rows[t.latents[300]])


def test_bad_input_is_refused_naming_what_was_expected(dictionary):
    with pytest.raises(UsageError, match="one dictionary per step"):
        feature_tracks([dictionary], steps=[100, 200])
    with pytest.raises(UsageError, match="steps must increase"):
        feature_tracks([dictionary, dictionary], steps=[200, 100])
    with pytest.raises(UsageError, match="decoders of width 16 and 8 cannot be matched"):
        match_decoders(dictionary, np.ones((4, 8)))
