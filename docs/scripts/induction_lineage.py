"""docs/lineage.md's induction study: the crosscoder latents born at the phase change, and whether they fire on
repeated tokens.

    python docs/scripts/induction_lineage.py [--root /tmp/induction-lineage] [--reuse] [--out OUT]

From a fresh store in ROOT/runs (results in ROOT/results): trains the induction study's 2-layer model
(`lenscope run induction/train`, without the control, 10000 steps, a checkpoint every 250), then `lm/crosscoder`
over CHECKPOINTS of it on the residual stream after block 1. Prints the phase-change window (the best
prefix-matching score from 10% to 90% of its last value), the latents born during training and their birth steps,
and, for the ones born inside the window, how many fire on repeated tokens (the second occurrence of a repeated
sequence, `repeat_roles`) rather than on first occurrences, and what share of their firings fall there, against the
share of all tokens and the other live latents'. Draws OUT.pdf and OUT.png (default docs/img/induction_lineage).
`--reuse` reads the runs a previous call left in ROOT (training a crosscoder if the run has none). About 25 minutes
on the 2-core CPU machine when it is quiet (training 13, the crosscoder 10).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lenscope import Store, load_table, run_job  # noqa: E402
from lenscope.examples.induction import InductionTrainer  # noqa: E402
from lenscope.examples.induction_features import repeat_firing  # noqa: E402
from lenscope.examples.lm_dictionaries import LmCrosscoder  # noqa: E402
from lenscope.store import Node  # noqa: E402

TRAIN = ["induction/control_layers=0", "training/steps=10000", "logging/checkpoint_interval=250"]
CHECKPOINTS = [1000, 3000, 5000, 6000, 7000, 7500, 7750, 8000, 8250, 8500, 8750, 9000, 9500, 10000]
POSITIONS = list(range(3, 128, 8))  # 16 of each row's 128 positions: 650k training tokens per checkpoint, not 5.2M
CROSS = [f"crosscoder/steps=[{','.join(map(str, CHECKPOINTS))}]", "sae/sites=[blocks.1.hook_resid_post]",
         f"sae/positions=[{','.join(map(str, POSITIONS))}]", "sae/expansion=8", "sae/l1_coefficient=1",
         "training/steps=3000", "training/batch_size=1024", "optimization/lr=1e-3",
         "logging/validation_interval=1000", "logging/checkpoint_interval=3000"]
PREFIX, REPEATED = "analysis/induction_heads/prefix_max", "analysis/repeated_tokens/repeated_half"
RISE = (0.1, 0.9)  # the phase-change window: the best prefix-matching score from 10% to 90% of its last value
FINAL_AT_LEAST, FIRST_AT_MOST, BIRTH = 1.0, 0.5, 0.5  # shares in units of 1 / checkpoints, as grokking_lineage.py's
N = 2  # a token is repeated when it and the one before it occurred, in that order, earlier in the row
TOP = 32  # a latent's strongest activations read
TOP_ON_REPEATS = 0.5  # a repeat latent: at least this share of its TOP strongest activations on repeats ...
FAVOUR = 2.0  # ... and at least this many times as many of its firings on repeats as on first occurrences


def crossing(steps: np.ndarray, values: np.ndarray, level: float) -> float:
    """The step where `values` first reaches `level`, linearly interpolated between measured steps."""
    i = int(np.argmax(values >= level))
    if i == 0:
        return float(steps[0])
    s0, s1, v0, v1 = steps[i - 1], steps[i], values[i - 1], values[i]
    return float(s0 + (s1 - s0) * (level - v0) / (v1 - v0))


def runs(store: Store, root: Path, reuse: bool) -> tuple[Node, Node]:
    """The induction run and its crosscoder: trained here, or with `reuse` the latest finished ones in the store (a
    run without its crosscoder gets one)."""
    results = f"logging/results={root / 'results'}"
    found = {name: store.query().name(name).latest() if reuse else None for name in ("induction.train",
                                                                                      "lm.crosscoder")}
    if found["induction.train"] is None:
        model = run_job(InductionTrainer, [*TRAIN, results], store=store)
    else:
        model = Node.parse(str(found["induction.train"]["node"]))
    if found["lm.crosscoder"] is None:
        return model, run_job(LmCrosscoder, [*CROSS, results], base=model, store=store)
    return model, Node.parse(str(found["lm.crosscoder"]["node"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/induction-lineage"))
    parser.add_argument("--reuse", action="store_true", help="read the runs already in ROOT/runs")
    parser.add_argument("--out", type=Path, default=Path("docs/img/induction_lineage"))
    args = parser.parse_args()
    if not args.reuse and (args.root / "runs").exists():
        parser.error(f"{args.root / 'runs'} exists: give a fresh --root, or --reuse to read the runs in it")
    store = Store(args.root / "runs")
    model, crosscoder = runs(store, args.root, args.reuse)

    # 1. the phase change
    rows = [r for r in store.query().nonce(model.nonce).sort("seq").select([PREFIX, REPEATED, "val/loss"])
            if r.get(PREFIX) is not None]
    curve_steps = np.asarray([r["seq"] for r in rows])
    prefix, repeated_loss = (np.asarray([r[k] for r in rows]) for k in (PREFIX, REPEATED))
    lo, hi = (crossing(curve_steps, prefix, f * prefix[-1]) for f in RISE)
    print(f"model {model}: best prefix-matching {prefix[0]:.3f} -> {prefix[-1]:.3f}, repeated half "
          f"{repeated_loss[0]:.2f} -> {repeated_loss[-1]:.2f} nats; phase change ({RISE[0]:.0%} -> {RISE[1]:.0%} of "
          f"the last prefix score): steps {lo:.0f} -> {hi:.0f}")

    # 2. the crosscoder's shares and the latents born during training
    values = store.get(crosscoder).values
    table = load_table(store, crosscoder, "crosscoder")
    steps = [int(s) for s in values["crosscoder/steps"].split(",")]
    shares = np.stack([np.asarray(table[f"share_step_{s}"]) for s in steps], axis=1)
    live = np.asarray(table["density"]) > 0
    uniform = 1.0 / len(steps)
    evs = [values[f"eval/step_{s}/explained_variance"] for s in steps]
    print(f"crosscoder {crosscoder}: {len(steps)} checkpoints {steps[0]}..{steps[-1]}, {len(shares)} latents, "
          f"{int(live.sum())} live; explained variance {values['eval/explained_variance']:.3f} (per checkpoint "
          f"{min(evs):.2f}..{max(evs):.2f}), L0 {values['eval/l0']:.1f}")
    born = live & (shares[:, -1] >= FINAL_AT_LEAST * uniform) & (shares[:, 0] <= FIRST_AT_MOST * uniform)
    birth = np.asarray([steps[int(np.argmax(s >= BIRTH * uniform))] for s in shares])
    at_change = born & (birth >= lo) & (birth <= hi + 250)  # a birth is seen at the first checkpoint past it
    print(f"born (share >= {FINAL_AT_LEAST:g}/{len(steps)} at step {steps[-1]}, <= {FIRST_AT_MOST:g}/{len(steps)} at "
          f"step {steps[0]}): {int(born.sum())}; born inside the phase change (birth step {lo:.0f}..{hi + 250:.0f}): "
          f"{int(at_change.sum())}; birth steps of all born: " + ", ".join(
              f"{s} x{c}" for s, c in zip(*np.unique(birth[born], return_counts=True))))

    # 3. where they fire: repeats (the second occurrence of a repeated sequence) against first occurrences
    trainer = LmCrosscoder([], base=crosscoder, store=store)
    trainer.setup(attach=True)  # the trained crosscoder, restored; writes nothing
    try:
        found = repeat_firing(trainer, "train", n=N, top=TOP)
    finally:
        trainer.cleanup()
    on, first, top, firings = (found[k] for k in ("on_repeats", "on_firsts", "top_on_repeats", "firings"))
    fires = firings > 0
    repeat_latent = fires & (top >= TOP_ON_REPEATS) & (on >= FAVOUR * first)
    groups = {"born at the phase change": at_change & fires, "born elsewhere": born & ~at_change & fires,
              "live, not born": live & ~born & fires}
    print(f"roles (n={N}) of the {found['tokens']} training tokens read: repeats {found['baseline']:.1%}, first "
          f"occurrences {found['baseline_firsts']:.1%}; a repeat latent: >= {TOP_ON_REPEATS:.0%} of its {TOP} "
          f"strongest activations on repeats, and >= {FAVOUR:g}x as many of its firings on repeats as on first "
          "occurrences")
    for label, mask in groups.items():
        chosen = mask & repeat_latent
        print(f"  {label}: {int(mask.sum())} latents firing on these tokens, {int(chosen.sum())} repeat latents"
              + (f" ({chosen.sum() / mask.sum():.0%})" if mask.any() else ""))
        if chosen.any():
            pooled = (on[chosen] * firings[chosen]).sum() / firings[chosen].sum()
            pooled_first = (first[chosen] * firings[chosen]).sum() / firings[chosen].sum()
            print(f"    their firings: {pooled:.1%} on repeats (each {on[chosen].min():.0%}..{on[chosen].max():.0%}), "
                  f"{pooled_first:.1%} on first occurrences ({first[chosen].min():.0%}..{first[chosen].max():.0%}); "
                  f"their {TOP} strongest: {top[chosen].min():.0%}..{top[chosen].max():.0%} on repeats; birth "
                  "steps " + ", ".join(f"{s} x{c}" for s, c in zip(*np.unique(birth[chosen], return_counts=True))))
        rest = mask & ~repeat_latent
        if rest.any():
            print(f"    the others: on repeats {np.median(on[rest]):.0%}, on first occurrences "
                  f"{np.median(first[rest]):.0%} (medians)")

    # 4. the figure: the phase change, the born latents' shares by birth, where each latent fires
    order = np.flatnonzero(born)[np.lexsort((-shares[born, -1], birth[born]))]
    edges = np.concatenate([[steps[0] - 500], (np.asarray(steps[1:]) + steps[:-1]) / 2, [steps[-1] + 250]])
    fig, axes = plt.subplots(3, 1, figsize=(6.4, 7.0), layout="constrained",
                             gridspec_kw={"height_ratios": [1, 1.6, 1.2]})
    ax = axes[0]
    ax.plot(curve_steps, prefix, color="black", lw=1.5, label="best prefix-matching score")
    ax.set(ylabel="prefix score", ylim=(-0.02, 1.0), xlim=(0, edges[-1]))
    twin = ax.twinx()
    twin.plot(curve_steps, repeated_loss, color="tab:blue", lw=1.2, ls="--", label="repeated half's loss")
    twin.set(ylabel="nats")
    ax.axvspan(lo, hi, color="0.9", lw=0, label=f"phase change: {lo:.0f}-{hi:.0f}")
    handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    ax.legend(handles=handles, frameon=False, loc="center left", fontsize=8)
    heat = axes[1].pcolormesh(edges, np.arange(len(order) + 1), shares[order] / uniform, cmap="magma", vmin=0,
                              vmax=2, rasterized=True)
    for step in (lo, hi):
        axes[1].axvline(step, color="white", lw=0.8, ls=":")
    axes[1].set(ylabel=f"{len(order)} born latents\n(sorted by birth)", ylim=(len(order), 0), xlim=(0, edges[-1]),
                xlabel="training step")
    fig.colorbar(heat, ax=axes[1], label="share x checkpoints", pad=0.01, aspect=15)
    for (label, mask), colour, size in zip(groups.items(), ("tab:red", "tab:orange", "0.65"), (22, 16, 7)):
        axes[2].scatter(first[mask], on[mask], s=size, color=colour, lw=0, label=f"{label} ({int(mask.sum())})",
                        zorder=3 if colour != "0.65" else 2)
    axes[2].axvline(found["baseline_firsts"], color="black", lw=0.8, ls=":")
    axes[2].axhline(found["baseline"], color="black", lw=0.8, ls=":", label="all tokens")
    axes[2].plot([0, 1 / FAVOUR], [0, 1], color="0.5", lw=0.8, ls="--", label=f"{FAVOUR:g}x as many on repeats")
    axes[2].set(xlabel="share of a latent's firings on first occurrences", ylabel="share on repeats",
                xlim=(0, 0.8), ylim=(0, 0.8), aspect="equal")
    axes[2].legend(frameon=False, fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    for label, ax in zip("abc", axes):
        ax.set_title(label, loc="left", fontweight="bold", fontsize=10)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for suffix in (".pdf", ".png"):
        fig.savefig(args.out.with_suffix(suffix), dpi=200)
        print(f"wrote {args.out.with_suffix(suffix)}")
    store.close()


if __name__ == "__main__":
    main()
