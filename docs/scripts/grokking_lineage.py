"""docs/lineage.md's grokking study: the crosscoder latents born during training, their Fourier frequencies and their
birth steps against the rise of validation accuracy.

    python docs/scripts/grokking_lineage.py [--root /tmp/lineage-study] [--reuse] [--out docs/img/grokking_lineage]

From a fresh store in ROOT/runs (results in ROOT/results): trains the grokking demo (`make demo`'s run, with a
checkpoint every 50 steps), then `grokking/crosscoder` over 22 of its checkpoints at the MLP output at `=`. Prints
the validation-accuracy rise window, the latents with a large decoder-norm share at the last checkpoint and a small
one at the first, how many of them are Fourier features (`latent_frequencies`: dominant frequency pair on the
diagonal at one of the model's key frequencies), their birth steps and the median; draws OUT.pdf and OUT.png.
`--reuse` reads the runs a previous call left in ROOT instead of training them again. About 3 minutes on the 2-core
CPU machine when it is quiet, 5 under load (the demo 1.5 minutes, the crosscoder 1.5 to 2.5, the read-out 15 s).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lenscope import Store, load_table, run_job  # noqa: E402
from lenscope.examples.grokking import GrokTrainer  # noqa: E402
from lenscope.examples.grokking_sae import GrokCrosscoder, latent_frequencies  # noqa: E402
from lenscope.store import Node  # noqa: E402

TRAIN = ["logging/validation_interval=50", "logging/analysis_interval=500", "logging/checkpoint_interval=50"]
STEPS = [*range(50, 801, 50), *range(1000, 2001, 200)]  # dense through the rise, sparser after it
CROSS = [f"crosscoder/steps=[{','.join(map(str, STEPS))}]", "sae/positions=[2]", "sae/expansion=4",
         "sae/l1_coefficient=1", "training/steps=2000", "training/batch_size=512", "optimization/lr=1e-3",
         "logging/validation_interval=500", "logging/checkpoint_interval=2000"]
RISE = (0.1, 0.9)  # the rise window: validation accuracy from 10% to 90% of its final value
# Thresholds on a latent's decoder-norm share, in units of the uniform share 1 / checkpoints:
FINAL_AT_LEAST = 1.0  # born: a share of at least this at the last checkpoint ...
FIRST_AT_MOST = 0.5  # ... and of at most this at the first
BIRTH = 0.5  # its birth step: the first checkpoint where its share reaches this (as `lenscope ui` sorts latents)
BIRTHS_ALSO = (0.75, 1.0)  # birth thresholds printed besides, to show how the median moves with the threshold


def crossing(steps: np.ndarray, values: np.ndarray, level: float) -> tuple[float, int]:
    """(the step where `values` first reaches `level`, linearly interpolated; the first measured step at or above)."""
    i = int(np.argmax(values >= level))
    if i == 0:
        return float(steps[0]), int(steps[0])
    s0, s1, v0, v1 = steps[i - 1], steps[i], values[i - 1], values[i]
    return float(s0 + (s1 - s0) * (level - v0) / (v1 - v0)), int(s1)


def runs(store: Store, root: Path, reuse: bool) -> tuple[Node, Node]:
    """The grokking run and its crosscoder: trained here, or with `reuse` the latest finished ones in the store."""
    if reuse:
        model = Node.parse(str(store.query().name("grokking.train").latest()["node"]))
        crosscoder = Node.parse(str(store.query().name("grokking.crosscoder").latest()["node"]))
        return model, crosscoder
    results = f"logging/results={root / 'results'}"
    model = run_job(GrokTrainer, [*TRAIN, results], store=store)
    return model, run_job(GrokCrosscoder, [*CROSS, results], base=model, store=store)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/lineage-study"))
    parser.add_argument("--reuse", action="store_true", help="read the runs already in ROOT/runs")
    parser.add_argument("--out", type=Path, default=Path("docs/img/grokking_lineage"))
    args = parser.parse_args()
    if not args.reuse and (args.root / "runs").exists():
        parser.error(f"{args.root / 'runs'} exists: give a fresh --root, or --reuse to read the runs in it")
    store = Store(args.root / "runs")
    model, crosscoder = runs(store, args.root, args.reuse)

    # 1. the validation-accuracy rise
    rows = [r for r in store.query().nonce(model.nonce).sort("seq").select(["val/accuracy", "train/accuracy"])
            if r.get("val/accuracy") is not None]
    val_steps = np.asarray([r["seq"] for r in rows])
    val, train = (np.asarray([r[k] for r in rows]) for k in ("val/accuracy", "train/accuracy"))
    (lo, lo_step), (hi, hi_step) = (crossing(val_steps, val, f * val[-1]) for f in RISE)
    print(f"model {model}: final validation accuracy {val[-1]:.3f}; rise window ({RISE[0]:.0%} -> {RISE[1]:.0%} of "
          f"it): steps {lo:.0f} -> {hi:.0f} interpolated (first validations at or above: {lo_step}, {hi_step})")
    print("validation accuracy: " + ", ".join(f"{s} {v:.3f}" for s, v in zip(val_steps, val) if s <= 1000))

    # 2. the crosscoder's table: each latent's decoder-norm share per checkpoint
    values = store.get(crosscoder).values
    table = load_table(store, crosscoder, "crosscoder")
    steps = [int(s) for s in values["crosscoder/steps"].split(",")]
    shares = np.stack([np.asarray(table[f"share_step_{s}"]) for s in steps], axis=1)  # [latents, checkpoints]
    live = np.asarray(table["density"]) > 0
    uniform = 1.0 / len(steps)
    evs = [values[f"eval/step_{s}/explained_variance"] for s in steps]
    print(f"crosscoder {crosscoder}: {len(steps)} checkpoints {steps[0]}..{steps[-1]}, {len(shares)} latents, "
          f"{int(live.sum())} live; explained variance {values['eval/explained_variance']:.3f} (per checkpoint "
          f"{min(evs):.2f}..{max(evs):.2f}), L0 {values['eval/l0']:.1f}")

    # 3. the latents born during training, their frequencies and birth steps
    trainer = GrokCrosscoder([], base=crosscoder, store=store)
    trainer.setup(attach=True)  # the trained crosscoder, restored; writes nothing
    try:
        found = latent_frequencies(trainer)
    finally:
        trainer.cleanup()
    keys, pair = found["keys"], found["pair"]
    diagonal = pair[:, 0] == pair[:, 1]
    fourier = diagonal & np.isin(pair[:, 0], keys)
    born = live & (shares[:, -1] >= FINAL_AT_LEAST * uniform) & (shares[:, 0] <= FIRST_AT_MOST * uniform)
    chosen = np.flatnonzero(born)
    births = {t: np.asarray([steps[int(np.argmax(shares[i] >= t * uniform))] for i in chosen])
              for t in (BIRTH, *BIRTHS_ALSO)}
    median = float(np.median(births[BIRTH]))
    pairs, counts = np.unique(pair[chosen], axis=0, return_counts=True)
    print(f"key frequencies (the last checkpoint's embedding, top 5): {keys}")
    print(f"born: live, share >= {FINAL_AT_LEAST:g}/{len(steps)} at step {steps[-1]} and <= {FIRST_AT_MOST:g}/"
          f"{len(steps)} at step {steps[0]}: {len(chosen)} latents; Fourier features (diagonal at a key frequency) "
          f"{int(fourier[born].sum())} = {fourier[born].mean():.0%}; on the diagonal {int(diagonal[born].sum())}")
    print("  their dominant pairs: " + ", ".join(f"({a}, {b}) x{c}" for (a, b), c in zip(pairs, counts)))
    print(f"  all live latents for comparison: {int(fourier[live].sum())} of {int(live.sum())} Fourier features "
          f"= {fourier[live].mean():.0%}; of the live ones not born: {int(fourier[live & ~born].sum())} of "
          f"{int((live & ~born).sum())} = {fourier[live & ~born].mean():.0%}")
    for final_at_least, first_at_most in ((0.75, 0.25), (0.75, 0.75), (1.25, 0.25), (1.25, 0.75), (1.5, 0.5)):
        other = live & (shares[:, -1] >= final_at_least * uniform) & (shares[:, 0] <= first_at_most * uniform)
        print(f"  thresholds >= {final_at_least:g} and <= {first_at_most:g} (/ {len(steps)}): {int(other.sum())} "
              f"latents, {int(fourier[other].sum())} Fourier features, {int(diagonal[other].sum())} on the diagonal")
    faded = live & (shares[:, 0] >= FINAL_AT_LEAST * uniform) & (shares[:, -1] <= FIRST_AT_MOST * uniform)
    peaks = np.asarray(steps)[shares[faded].argmax(1)]
    print(f"the mirror image (share >= {FINAL_AT_LEAST:g}/{len(steps)} at step {steps[0]}, <= {FIRST_AT_MOST:g}/"
          f"{len(steps)} at step {steps[-1]}): {int(faded.sum())} latents, {int(fourier[faded].sum())} Fourier "
          f"features, {int(diagonal[faded].sum())} on the diagonal; their share peaks at step "
          f"{np.median(peaks):.0f} (median)")
    inside = lo <= median <= hi
    print(f"birth step (first checkpoint with share >= {BIRTH:g}/{len(steps)}): median {median:.0f}, quartiles "
          f"{np.percentile(births[BIRTH], 25):.0f}..{np.percentile(births[BIRTH], 75):.0f}, range "
          f"{births[BIRTH].min()}..{births[BIRTH].max()}; {'inside' if inside else 'outside'} the rise window "
          f"{lo:.0f}..{hi:.0f}")
    for t in BIRTHS_ALSO:
        print(f"  with a birth threshold of {t:g}/{len(steps)}: median {np.median(births[t]):.0f}")

    # 4. the figure: accuracy, the born latents' shares sorted by birth, their mean share by frequency pair
    order = chosen[np.lexsort((-shares[chosen, -1], births[BIRTH]))]
    edges = np.concatenate([[steps[0] - 25], (np.asarray(steps[1:]) + steps[:-1]) / 2, [steps[-1] + 100]])
    fig, axes = plt.subplots(3, 1, figsize=(6.4, 6.6), sharex=True, layout="constrained",
                             gridspec_kw={"height_ratios": [1, 1.6, 1]})
    acc = axes[0]
    acc.plot(val_steps, train, color="0.5", lw=1, ls=":", label="train")
    acc.plot(val_steps, val, color="black", lw=1.5, label="validation")
    acc.set(ylabel="accuracy", ylim=(-0.02, 1.05))
    acc.axvspan(lo, hi, color="0.92", lw=0, label=f"rise {RISE[0]:.0%}-{RISE[1]:.0%}: {lo:.0f}-{hi:.0f}")
    acc.axvline(median, color="tab:red", lw=1, ls="--", label=f"median birth: {median:.0f}")
    acc.legend(frameon=False, loc="center right", fontsize=8)
    heat = axes[1].pcolormesh(edges, np.arange(len(order) + 1), shares[order] / uniform, cmap="magma", vmin=0,
                              vmax=2, rasterized=True)
    for step in (lo, hi):  # the rise window's edges, over the heatmap
        axes[1].axvline(step, color="white", lw=0.8, ls=":")
    axes[1].scatter(births[BIRTH][np.searchsorted(chosen, order)], np.arange(len(order)) + 0.5, s=9,
                    color="tab:cyan", marker="|", lw=1.2, zorder=3, label="birth")
    axes[1].set(ylabel=f"{len(order)} born latents\n(sorted by birth)", ylim=(len(order), 0))
    fig.colorbar(heat, ax=axes[1], label="share x checkpoints", pad=0.01, aspect=15)
    for (a, b), count in sorted(zip(map(tuple, pairs), counts), key=lambda x: -x[1]):
        rows_of = chosen[(pair[chosen, 0] == a) & (pair[chosen, 1] == b)]
        key = "key" if a == b and a in keys else "not key"
        axes[2].plot(steps, shares[rows_of].mean(0) / uniform, marker=".", ms=4, lw=1.2,
                     label=f"({a}, {b}) {key}: {count}")
    axes[2].axvspan(lo, hi, color="0.92", lw=0)
    axes[2].axhline(BIRTH, color="0.5", lw=0.8)
    axes[2].set(ylabel="mean share\nx checkpoints", xlabel="training step", xlim=(0, edges[-1]), ylim=(0, 2.5))
    axes[2].legend(frameon=False, fontsize=7, ncol=3, loc="upper left", bbox_to_anchor=(hi / edges[-1], 1.0),
                   handlelength=1.5, columnspacing=1.0, alignment="left", title_fontsize=7,
                   title="dominant frequency pair (k_a, k_b): latents")
    for ax in axes:
        ax.axvline(median, color="tab:red", lw=1, ls="--", zorder=2)
    for label, ax in zip("abc", axes):
        ax.set_title(label, loc="left", fontweight="bold", fontsize=10)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for suffix in (".pdf", ".png"):
        fig.savefig(args.out.with_suffix(suffix), dpi=200)
        print(f"wrote {args.out.with_suffix(suffix)}")
    store.close()


if __name__ == "__main__":
    main()
