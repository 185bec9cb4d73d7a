"""The op feature_tracks: its table and summary from known tracks, and its refusals before anything is written
(docs/lineage.md runs it on SAEs at two checkpoints of one run)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import lenscope.ops
from lenscope.attribution.tracks_op import track_rows, track_summary
from lenscope.dictionaries import Dictionary, Spec, feature_tracks, init_params
from lenscope.errors import UsageError
from lenscope.examples.grokking import GrokTrainer
from lenscope.store import Store


def _permuted(d: Dictionary, order: np.ndarray) -> Dictionary:
    return d.replace(W_enc=d.W_enc[:, order], b_enc=d.b_enc[order], W_dec=d.W_dec[order],
                     threshold=d.threshold[order])


def test_rows_follow_a_known_permutation_and_a_replaced_latent():
    spec = Spec("standard", d_in=8, d_sae=6)
    a = Dictionary.of(spec, init_params(jax.random.PRNGKey(0), spec))
    order = np.array([3, 0, 5, 1, 4, 2])
    b = _permuted(a, order)
    rows_b = np.asarray(b.W_dec, np.float64)
    fresh = np.random.default_rng(7).standard_normal(8)
    fresh -= rows_b.T @ np.linalg.lstsq(rows_b.T, fresh, rcond=None)[0]  # latent 2 of c: orthogonal to every latent
    fresh = fresh.astype(np.float32)
    c = b.replace(W_dec=b.W_dec.at[2].set(fresh))
    tracks = feature_tracks([a, b, c], steps=[10, 20, 30], threshold=0.9)
    rows = track_rows(tracks)
    summary = track_summary(tracks, [10, 20, 30])
    assert summary["born"]["10"] == 6 and summary["born"]["20"] == 0
    assert summary["born"]["30"] == summary["died"]["30"] == 1  # the replaced latent: one track ends, one starts
    assert summary["tracks"] == len(tracks) == 7 and summary["alive_at_last"] == 6
    for latent in range(6):  # step 10's latent i is latent inverse[i] of b: the rows say so
        at_20 = (rows["track"] == latent) & (rows["step"] == 20)
        assert rows["latent"][at_20].tolist() == [int(np.flatnonzero(order == latent)[0])]
        assert rows["similarity"][at_20][0] == pytest.approx(1.0)
    births = rows["step"] == rows["birth"]
    assert np.isnan(rows["similarity"][births]).all() and not np.isnan(rows["similarity"][~births]).any()
    assert set(rows["death"].tolist()) <= {-1, 30}


def test_refusals_name_the_expected_form_and_write_nothing(trained_copy):
    store = Store(trained_copy.store_root)
    trainer = GrokTrainer(trained_copy.sources, base=trained_copy.node, store=store)
    trainer.setup(resume=True)
    before = store.artifact_names(trained_copy.node)
    try:
        with pytest.raises(UsageError, match=r"dictionaries=\[NODE,NODE,...\]"):
            lenscope.ops.feature_tracks(trainer)
        with pytest.raises(UsageError, match=r"two or more"):
            lenscope.ops.feature_tracks(trainer, dictionaries=[str(trained_copy.node)])
        with pytest.raises(UsageError, match=r"read 0 checkpoints; tracks follow dictionaries each trained on one"):
            lenscope.ops.feature_tracks(trainer, dictionaries=[str(trained_copy.node)] * 2)
    finally:
        trainer.cleanup()
    assert store.artifact_names(trained_copy.node) == before
    store.close()
