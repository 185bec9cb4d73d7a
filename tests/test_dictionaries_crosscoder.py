"""Crosscoders over checkpoints: the paper's loss, shared latents on identical checkpoints, a latent exclusive to the
checkpoint with a planted direction, and `grokking/crosscoder` end to end from the command line: its node descends
from every checkpoint it read, each checkpoint caches its activations, the table and the values are recorded, and a
step that is not a checkpoint is refused before anything is written."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow.parquet as pq
import pytest

from lenscope import Store, run_job
from lenscope.cli.main import main
from lenscope.dictionaries import Activations, CrosscoderTrainer, Dictionary, LossConfig, Spec, decoder_shares, loss
from lenscope.dictionaries import init_params as dictionary_params
from lenscope.dictionaries.crosscoder_records import checkpoint_metrics
from lenscope.errors import UsageError
from lenscope.store import Node

D, FEATURES, ACTIVE = 16, 32, 3  # as test_dictionaries_planted: sparse codes over known unit directions
DIRECTIONS = np.random.default_rng(0).normal(size=(FEATURES, D))
DIRECTIONS /= np.linalg.norm(DIRECTIONS, axis=1, keepdims=True)
PLANTED = np.random.default_rng(5).normal(size=D)
PLANTED /= np.linalg.norm(PLANTED)
SITE = "blocks_0/mlp"
SHARE_TOLERANCE = 0.05  # identical checkpoints: every live latent's share of each within 0.5 +- this


def planted(tokens: int, seed: int) -> np.ndarray:
    """`tokens` rows, each ACTIVE planted directions with weights in [0.5, 1.5]."""
    rng = np.random.default_rng(seed)
    codes = np.zeros((tokens, FEATURES), np.float32)
    chosen = np.argsort(rng.random((tokens, FEATURES)), axis=1)[:, :ACTIVE]
    np.put_along_axis(codes, chosen, rng.uniform(0.5, 1.5, (tokens, ACTIVE)).astype(np.float32), axis=1)
    return (codes @ DIRECTIONS).astype(np.float32)


def with_planted(x: np.ndarray, seed: int) -> np.ndarray:
    """x with PLANTED added (weight in [0.5, 1.5]) on a random tenth of its rows."""
    rng = np.random.default_rng(seed)
    on = rng.random(len(x)) < 0.1
    return (x + (on * rng.uniform(0.5, 1.5, len(x)))[:, None] * PLANTED).astype(np.float32)


def acts(x: np.ndarray) -> Activations:
    return Activations({SITE: x}, np.arange(len(x)), np.zeros(len(x), np.int64))


TRAIN, VALIDATION = planted(4096, 1), planted(1024, 2)


class IdenticalCheckpoints(CrosscoderTrainer):
    """A crosscoder over two checkpoints whose activations are the same planted data."""

    def checkpoint_activations(self) -> Iterator[tuple[int, dict[str, Activations]]]:
        for step in (10, 20):
            yield step, {"train": acts(TRAIN), "validation": acts(VALIDATION)}


class PlantedInCopy(CrosscoderTrainer):
    """A crosscoder over the planted data (step 10) and a copy with one more direction on a tenth of the rows (20)."""

    def checkpoint_activations(self) -> Iterator[tuple[int, dict[str, Activations]]]:
        yield 10, {"train": acts(TRAIN), "validation": acts(VALIDATION)}
        yield 20, {"train": acts(with_planted(TRAIN, 3)), "validation": acts(with_planted(VALIDATION, 4))}


CONFIG = [f"sae/sites=[{SITE}]", "sae/expansion=4", "sae/l1_coefficient=1", f"sae/k={ACTIVE}",
          "training/batch_size=256", "optimization/lr=3e-3", "logging/validation_interval=0",
          "logging/checkpoint_interval=0"]


def trained(cls: type, steps: int, tmp_path, architecture: str = "standard") -> CrosscoderTrainer:
    trainer = cls(CONFIG + [f"sae/architecture={architecture}", f"training/steps={steps}",
                            f"logging/report_interval={steps}", f"logging/results={tmp_path / 'results'}"],
                  store=tmp_path / "runs")
    trainer.setup()
    trainer.run()
    return trainer


def test_the_loss_is_the_papers_reconstruction_summed_over_models_and_l1_weighted_by_summed_decoder_norms():
    spec = Spec("standard", 2 * D, 64, blocks=2)

    @jax.jit  # the library's side as one program; the reference below in NumPy
    def library(x):
        d = Dictionary.of(spec, dictionary_params(jax.random.PRNGKey(0), spec))
        first = d.block_norms()
        d = d.replace(W_dec=d.W_dec * jnp.linspace(0.5, 2.0, 2 * D), b_enc=d.b_enc + 0.05)  # blocks of unequal norms
        return first, d, d.encode(x), loss(d, x, x, jnp.float32(1.0), None, LossConfig(l1_coefficient=3.0))

    x = np.concatenate([TRAIN[:64], with_planted(TRAIN[:64], 0)], axis=-1)
    first, d, f, (total, terms) = library(x)
    np.testing.assert_allclose(first, 0.1, rtol=1e-5)  # every model starts with an equal share
    f, w_dec = np.asarray(f, np.float64), np.asarray(d.W_dec, np.float64)
    out = f @ w_dec + np.asarray(d.b_dec)
    per_model = [np.mean(np.sum((x[:, m * D:(m + 1) * D] - out[:, m * D:(m + 1) * D]) ** 2, -1)) for m in (0, 1)]
    norms = [np.linalg.norm(w_dec[:, m * D:(m + 1) * D], axis=-1) for m in (0, 1)]
    l1 = 3.0 * np.mean(np.sum(f * (norms[0] + norms[1]), -1))
    assert np.sum(f > 0) > 0
    np.testing.assert_allclose(terms["mse_loss"], per_model[0] + per_model[1], rtol=1e-5)
    np.testing.assert_allclose(terms["l1_loss"], l1, rtol=1e-5)
    np.testing.assert_allclose(total, per_model[0] + per_model[1] + l1, rtol=1e-5)


@pytest.mark.parametrize("architecture", ["standard", "batchtopk"])
def test_identical_checkpoints_share_every_live_latent_equally(tmp_path, architecture):
    trainer = trained(IdenticalCheckpoints, 100, tmp_path, architecture)
    try:
        _, shares = decoder_shares(trainer)
        values, density = checkpoint_metrics(trainer)
        live = density > 0
        assert live.sum() >= 16 and trainer.spec.blocks == 2 and trainer.spec.d_sae == 4 * D
        np.testing.assert_allclose(shares[live], 0.5, atol=SHARE_TOLERANCE)
        blocks = np.asarray(trainer.state.params["W_dec"][0]).reshape(-1, 2, D)[live]
        cosine = np.sum(blocks[:, 0] * blocks[:, 1], -1) / np.prod(np.linalg.norm(blocks, axis=-1), -1)
        assert np.median(cosine) > 0.99  # a latent's two decoder blocks, drawn independently, learned one direction
        assert values["eval/step_10/l0"] == values["eval/step_20/l0"]  # one set of latents for both
        for name in ("explained_variance", "mse"):  # both reconstructed alike (the blocks are near equal)
            assert values[f"eval/step_10/{name}"] == pytest.approx(values[f"eval/step_20/{name}"], rel=0.02)
        assert values["eval/step_10/explained_variance"] > 0.7
    finally:
        trainer.cleanup()


def test_a_direction_planted_in_one_checkpoint_gets_a_latent_exclusive_to_it(tmp_path):
    trainer = trained(PlantedInCopy, 300, tmp_path)
    try:
        _, shares = decoder_shares(trainer)
        _, density = checkpoint_metrics(trainer)
        live = density > 0
        exclusive = np.flatnonzero(live & (shares[:, 1] >= 0.9))
        assert len(exclusive) == 1, np.sort(shares[live, 1])[-4:]
        assert not np.any(live & (shares[:, 0] >= 0.9))  # nothing is exclusive to the checkpoint without it
        row = np.asarray(trainer.state.params["W_dec"][0])[exclusive[0], D:]  # its decoder for the copy
        assert row @ PLANTED / np.linalg.norm(row) > 0.9
        assert 0.05 < density[exclusive[0]] < 0.3  # it fires about where the direction was planted (a tenth)
    finally:
        trainer.cleanup()


class TwoSites(CrosscoderTrainer):
    """An acausal crosscoder: two sites (layers) at each of two checkpoints."""

    def checkpoint_activations(self) -> Iterator[tuple[int, dict[str, Activations]]]:
        for step, seed in ((10, 3), (20, 4)):
            both = {"train": (TRAIN, with_planted(TRAIN, seed)), "validation": (VALIDATION, VALIDATION)}
            yield step, {split: Activations({"blocks_0/mlp": a, "blocks_1/mlp": b}, np.arange(len(a)),
                                            np.zeros(len(a), np.int64)) for split, (a, b) in both.items()}


def test_several_sites_make_one_block_per_checkpoint_and_site(tmp_path):
    trainer = TwoSites(CONFIG + ["sae/sites=[blocks_0/mlp,blocks_1/mlp]", "training/steps=5",
                                 f"logging/results={tmp_path / 'results'}"], store=tmp_path / "runs")
    try:
        trainer.setup()
        trainer.run()
        assert trainer.blocks == [(10, "blocks_0/mlp"), (10, "blocks_1/mlp"), (20, "blocks_0/mlp"),
                                  (20, "blocks_1/mlp")]
        assert trainer.spec.blocks == 4 and trainer.spec.d_in == 4 * D and trainer.spec.d_sae == 4 * D
        column = trainer.activations["train"].sites["crosscoder"]
        np.testing.assert_array_equal(column[:, 3 * D:], with_planted(TRAIN, 4))  # checkpoint by checkpoint
        norms, shares = decoder_shares(trainer)
        blocks = np.asarray(Dictionary.of(trainer.spec, jax.tree_util.tree_map(lambda v: v[0], trainer.state.params))
                            .block_norms())
        np.testing.assert_allclose(norms, blocks.reshape(-1, 2, 2).sum(-1), rtol=1e-6)  # a checkpoint's sites summed
        np.testing.assert_allclose(shares.sum(-1), 1.0, rtol=1e-6)
        values = trainer.store.get(trainer.node).values
        assert {f"eval/step_{s}/{i}/explained_variance" for s in (10, 20) for i in (0, 1)} <= set(values)
    finally:
        trainer.cleanup()


# -- the job end to end --------------------------------------------------------------------------------------------
JOB = ["sae/expansion=2", "training/steps=10", "training/batch_size=128", "optimization/lr=3e-3",
       "logging/validation_interval=10", "logging/checkpoint_interval=10", "logging/report_interval=10"]


@pytest.fixture(scope="module")
def lineage(trained_base):
    """The worker's trained run (a checkpoint at step 20) resumed to step 40 with checkpoints every 10 steps."""
    node = run_job("grokking/train", trained_base.sources + ["training/steps=40", "logging/checkpoint_interval=10"],
                   base=trained_base.node, store=trained_base.store_root)
    return trained_base, node


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_step_that_is_not_a_checkpoint_is_refused_before_anything_is_written(lineage, capsys):
    base, node = lineage
    with Store(base.store_root) as store:
        before = store.query().count(), {n: store.artifact_names(n) for n in store.query().checkpoint().all()}
    results = f"logging/results={base.root / 'results'}"
    code, _, err = run(capsys, "run", "grokking/crosscoder", "--store", str(base.store_root), "--base", str(node),
                       *JOB, results, "crosscoder/steps=[20,25]")
    assert code == 2
    assert "step 25 is not a checkpoint of the lineage of" in err and "nearest: 20, 30" in err, err
    assert "expected all or a list of its checkpoint steps" in err and "its checkpoints: 20, 30, 40" in err, err
    code, _, err = run(capsys, "run", "grokking/crosscoder", "--store", str(base.store_root), "--base", str(node),
                       *JOB, results, "crosscoder/steps=[30]")
    assert code == 2 and "give two or more" in err, err
    with pytest.raises(UsageError, match="a crosscoder is standard or batchtopk"):
        CrosscoderTrainer(JOB + [results, "sae/architecture=topk"], base=node, store=base.store_root)
    with Store(base.store_root) as store:
        after = store.query().count(), {n: store.artifact_names(n) for n in store.query().checkpoint().all()}
    assert after == before  # no node, no cached activations


@pytest.fixture(scope="module")
def job(lineage):
    """`lenscope run grokking/crosscoder ... crosscoder/steps=all` on the lineage: (exit code, stdout, stderr)."""
    base, node = lineage
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", "grokking/crosscoder", "--store", str(base.store_root), "--base", str(node), *JOB,
                     f"logging/results={base.root / 'results'}", "crosscoder/steps=all"])
    return code, out.getvalue(), err.getvalue()


def test_the_job_descends_from_every_checkpoint_and_records_shares_and_metrics(lineage, job):
    base, node = lineage
    code, out, err = job
    assert code == 0, err
    final = Node.parse(out.split("node ")[-1].strip())
    with Store(base.store_root) as store:
        first = store.query().nonce(final.nonce).seq(0).all()[0]
        checkpoints = [Node(node.name, node.nonce, s) for s in (20, 30, 40)]
        assert store.parents(first) == checkpoints  # one edge to each checkpoint read, in step order
        for checkpoint in checkpoints:  # each checkpoint's activations cached on its own node (train, validation)
            assert len([a for a in store.artifact_names(checkpoint) if a.startswith("activations-")]) == 2
        record = store.get(final)
        table = pq.read_table(io.BytesIO(record.artifacts["crosscoder.parquet"].content))
        values = record.values
    assert record.config["crosscoder"]["steps"] == "all" and values["crosscoder/steps"] == "20,30,40"
    assert table.num_rows == 2 * 32 and table.column_names == [
        "latent", "density", "share_step_20", "share_step_30", "share_step_40",
        "norm_step_20", "norm_step_30", "norm_step_40"]
    shares = np.stack([table.column(f"share_step_{s}").to_numpy() for s in (20, 30, 40)], axis=1)
    np.testing.assert_allclose(shares.sum(1), 1.0, rtol=1e-5)
    live = table.column("density").to_numpy() > 0
    assert values["crosscoder/live_latents"] == live.sum() > 0
    assert sum(values[f"crosscoder/mean_share/step_{s}"] for s in (20, 30, 40)) == pytest.approx(1.0, rel=1e-5)
    for step in (20, 30, 40):
        assert values[f"crosscoder/exclusive_latents/step_{step}"] == int((shares[live, (step - 20) // 10] >= 0.9)
                                                                          .sum())
        for name in ("explained_variance", "mse", "cossim", "l0", "dead_latents"):
            assert np.isfinite(values[f"eval/step_{step}/{name}"]), (step, name)
    assert np.isfinite(values["eval/explained_variance"]) and values["eval/l0"] > 0  # the whole crosscoder's


def test_the_fourier_read_out_encodes_every_checkpoint_side_by_side(lineage, job):
    """`latent_frequencies` of the job's crosscoder (three checkpoints): each checkpoint's model over every (a, b)
    pair, at `=`, in the crosscoder's block order; on the validation pairs at `=` its latents are the crosscoder's
    own codes of its cached activations, and the key frequencies are the last checkpoint's."""
    from lenscope.examples.grokking_sae import GrokCrosscoder, grid_latents, key_frequencies, latent_frequencies

    base, _ = lineage
    code, out, err = job
    assert code == 0, err
    final = Node.parse(out.split("node ")[-1].strip())
    trainer = GrokCrosscoder([], base=final, store=base.store_root)
    trainer.setup(attach=True)
    try:
        grid = grid_latents(trainer)
        p = grid.shape[0]
        validation = trainer.activations["validation"]
        at = validation.position == 2  # the rows read at `=` (the job read every position)
        assert 0 < at.sum() < len(at) and len(trainer.checkpoints) == 3
        model = trainer.model_at(trainer.checkpoints[-1])
        try:
            tokens = model.data.splits["validation"]["inputs"][validation.example[at]]
            keys = key_frequencies(model)
        finally:
            model.cleanup()
        codes = np.asarray(trainer.dictionaries()[0].encode(jnp.asarray(validation.sites["crosscoder"][at])))
        assert grid.shape == (p, p, trainer.spec.d_sae) and codes.any()
        np.testing.assert_allclose(grid[tokens[:, 0], tokens[:, 1]], codes, atol=1e-4)
        found = latent_frequencies(trainer)
    finally:
        trainer.cleanup()
    assert found["pair"].shape == (trainer.spec.d_sae, 2) and found["keys"] == keys and len(keys) == 5
    assert ((found["pair"] >= 0) & (found["pair"] <= p // 2)).all()
    np.testing.assert_allclose(found["density"], (grid > 0).mean((0, 1)))


def brute_role(row: np.ndarray, t: int, n: int) -> int:
    """2 when the n tokens ending at t also end at an earlier position of the row, 1 when at a later one, else 0."""
    if t < n - 1:
        return 0
    gram = list(row[t - n + 1:t + 1])
    ends = [s for s in range(n - 1, len(row)) if s != t and list(row[s - n + 1:s + 1]) == gram]
    return 2 if any(s < t for s in ends) else 1 if ends else 0


def test_the_repeat_read_out_counts_a_crosscoders_firings_on_repeated_tokens(lineage, job):
    """`repeat_firing` of the job's crosscoder against a token-by-token count: grokking's rows `a b =` repeat a token
    exactly where b == a (and a is then its first occurrence), so with n=1 each latent's shares are checked one
    token at a time."""
    from lenscope.examples.grokking_sae import GrokCrosscoder
    from lenscope.examples.induction_features import repeat_firing

    base, _ = lineage
    code, out, err = job
    assert code == 0, err
    trainer = GrokCrosscoder([], base=Node.parse(out.split("node ")[-1].strip()), store=base.store_root)
    trainer.setup(attach=True)
    try:
        found = repeat_firing(trainer, "validation", n=1, top=3)
        acts = trainer.activations["validation"]
        codes = np.asarray(trainer.dictionaries()[0].encode(jnp.asarray(acts.sites["crosscoder"])))
        model = trainer.model_at(trainer.checkpoints[0])
        try:
            rows = np.asarray(model.data.splits["validation"]["inputs"])
        finally:
            model.cleanup()
    finally:
        trainer.cleanup()
    roles = np.asarray([brute_role(rows[e], p, 1) for e, p in zip(acts.example, acts.position)])
    assert 0 < (roles == 2).sum() == (roles == 1).sum() < len(roles)  # b == a: one first occurrence, one repeat
    assert found["baseline"] == pytest.approx((roles == 2).mean()) and found["tokens"] == len(roles)
    assert found["baseline_firsts"] == pytest.approx((roles == 1).mean())
    fires = codes > 0
    np.testing.assert_array_equal(found["firings"], fires.sum(0))
    for j in range(codes.shape[1]):
        strongest = np.argsort(-codes[:, j], kind="stable")[:min(3, int(fires[:, j].sum()))]
        for name, role in (("repeats", 2), ("firsts", 1)):
            if not fires[:, j].any():
                assert np.isnan(found[f"on_{name}"][j]) and np.isnan(found[f"top_on_{name}"][j])
                continue
            assert found[f"on_{name}"][j] == pytest.approx((roles[fires[:, j]] == role).mean(), abs=1e-6)
            assert found[f"top_on_{name}"][j] == pytest.approx((roles[strongest] == role).mean(), abs=1e-6)
