"""docs/induction.md's curves and table, read from the lineage of a finished `lenscope run induction/train`.

    python docs/scripts/induction_figures.py STORE [OUT.png]

Prints a Markdown table of both models every `--every` steps and draws the curves (main and control) from the
values the tandem analyses recorded on each validation node; then the main model's head-ablation and
head-patching figures beside OUT.png (induction_ablation.png, induction_patching.png).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lenscope import Store  # noqa: E402
from lenscope.examples.induction_interventions import HeadAblation, HeadPatching  # noqa: E402
from lenscope.store import Node  # noqa: E402

KEYS = {"val/loss": "val loss", "analysis/position_loss/icl_score": "ICL (text)",
        "analysis/position_loss/variant/icl_score": "ICL (variant)",
        "analysis/repeated_tokens/repeated_half": "repeated half",
        "analysis/repeated_tokens/first_half": "copy 1",
        "analysis/induction_heads/prefix_max": "best prefix", "analysis/induction_heads/prefix_best": "head",
        "analysis/induction_heads/previous_max": "best previous"}


def curves(store: Store, nonce: str) -> list[dict]:
    """The validation nodes' values of one run, in step order."""
    rows = store.query().nonce(nonce).sort("seq").select(list(KEYS))
    return [row for row in rows if row.get("analysis/induction_heads/prefix_max") is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("out", nargs="?", default="docs/img/induction_curves.png")
    parser.add_argument("--every", type=int, default=1000)
    args = parser.parse_args()
    with Store(args.store, readonly=True) as store:
        main_row = store.query().name("induction.train").where("induction/role", "==", "main").latest()
        main_node = Node.parse(str(main_row["node"]))
        control = store.values(main_node)["induction/control"]
        runs = {"main (2 layers)": curves(store, main_node.nonce),
                "control (1 layer)": curves(store, store.get(control).node.nonce)}
    print("| step | model | " + " | ".join(KEYS.values()) + " |")
    print("|---" * (len(KEYS) + 2) + "|")
    for label, rows in runs.items():
        for row in rows:
            if row["seq"] % args.every == 0 or row is rows[-1]:
                cells = [f"{row[k]:.3f}" if isinstance(row[k], float) else str(row[k]) for k in KEYS]
                print(f"| {row['seq']} | {label.split()[0]} | " + " | ".join(cells) + " |")
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2), layout="constrained")
    panels = (("analysis/position_loss/variant/icl_score", "analysis/position_loss/icl_score"),
              ("analysis/repeated_tokens/repeated_half", "val/loss"), ("analysis/induction_heads/prefix_max",))
    titles = ("in-context-learning score (nats)", "loss (nats)", "best prefix-matching score")
    for ax, keys, title in zip(axes, panels, titles):
        for (label, rows), colour in zip(runs.items(), ("tab:blue", "tab:gray")):
            for key, style in zip(keys, ("-", ":")):
                ax.plot([r["seq"] for r in rows], [r[key] for r in rows], style, color=colour,
                        label=f"{label.split()[0]}: {KEYS[key]}")
        ax.set(title=title, xlabel="training step")
        ax.legend(frameon=False, fontsize=7)
    fig.savefig(args.out, dpi=150)
    print(f"wrote {args.out}")
    for name, cls in (("ablation", HeadAblation), ("patching", HeadPatching)):
        analysis = cls([], base=main_node, store=args.store)          # restored, attached: writes nothing
        analysis.setup()
        out = Path(args.out).with_name(f"induction_{name}.png")
        analysis.plot(analysis.compute()).savefig(out, dpi=150)
        analysis.cleanup()
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
