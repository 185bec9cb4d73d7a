"""CrosscoderTrainer: one sparse dictionary over several checkpoints of a model lineage (Lindsey et al. 2024).

`--base` is a run (any node of its lineage) and `crosscoder/steps` names checkpoints of that lineage (`all`, or a
list of steps). Each checkpoint's activations at the sites are captured over the same tokens, in one compiled
program per checkpoint, and cached on that checkpoint's node (as an SAE's are on its model's node); they are put side
by side, one block per (checkpoint, site), each block normalized on its own. The crosscoder is then a Dictionary whose
Spec has that many `blocks`, trained by SaeTrainer's step: the reconstruction error is summed over the blocks and the
L1 penalty weighs each latent by the sum of its blocks' decoder norms (`standard`, the paper's loss), or BatchTopK
ranks by that sum. Its first node descends from every checkpoint it read (the store keeps several parents, in order).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cached_property

import numpy as np

from ..config import to_dict
from ..errors import UsageError
from ..store import Node, Store
from ..text import parse_value
from ..training.lineage import Lineage, Mode, open_lineage
from ..training.progress import announced
from .activations import Activations, norm_scale
from .config import CrosscoderConfig
from .core import Spec
from .crosscoder_records import TABLE, checkpoint_metrics, records
from .sites import check_sites
from .trainer import SaeTrainer

COLUMN = "crosscoder"  # the one activation column the stack reads: every block side by side [tokens, blocks * d]
SHOWN = 6  # checkpoint steps named in a message, at each end of a long list
ARCHITECTURES = ("standard", "batchtopk")  # the crosscoders offered (the others would train, untested)


class CrosscoderTrainer(SaeTrainer):
    """A crosscoder over checkpoints of one model lineage; its node descends from each checkpoint it read."""

    CONFIG = CrosscoderConfig

    # -- what it reads -----------------------------------------------------------------
    @cached_property
    def checkpoints(self) -> list[Node]:
        """The checkpoint nodes read, by step: those crosscoder/steps names in the source's lineage, or, going on
        from a crosscoder's own node, the ones its lineage read."""
        if self.base is not None:
            return lineage_inputs(self.store, self.base, self.name)
        found = {n.seq: n for n in self.store.query().nonce(self.source.nonce).checkpoint().all()}
        return [found[s] for s in choose_steps(self.args.checkpoint_steps, sorted(found), self.source)]

    @property
    def inputs(self) -> list[str]:
        """The one column the crosscoder reads and reconstructs: every (checkpoint, site) block side by side."""
        return [COLUMN]

    @property
    def outputs(self) -> list[str]:
        """As `inputs`: a crosscoder reconstructs what it reads."""
        return [COLUMN]

    @property
    def blocks(self) -> list[tuple[int, str]]:
        """(checkpoint step, site) of each block, in the column's order."""
        return [(step, site) for step in self.steps for site in self.args.sites]

    def checkpoint_activations(self) -> Iterator[tuple[int, dict[str, Activations]]]:
        """(step, {"train": ..., "validation": ...}) of each checkpoint in turn, its model restored only meanwhile."""
        refuse_unsupported(self.args)
        for i, node in enumerate(self.checkpoints):
            what = f"{self.name}: capturing activations of checkpoint {node} ({i + 1}/{len(self.checkpoints)})"
            with announced(what):
                model = self.model_at(node)
                try:
                    if i == 0:
                        check_sites(model, self.args.sites, None)
                    validation = "validation" if "validation" in model.data.splits else self.args.split
                    acts = {"train": self._capture(self.args.split, model),
                            "validation": self._capture(validation, model)}
                finally:
                    model.cleanup()
            yield node.seq, acts

    @cached_property
    def activations(self) -> dict[str, Activations]:
        """Every checkpoint's activations over the same tokens, side by side in one column (`COLUMN`)."""
        self.steps: list[int] = []
        parts: dict[str, list[Activations]] = {"train": [], "validation": []}
        for step, acts in self.checkpoint_activations():
            self.steps.append(step)
            for split, part in parts.items():
                part.append(acts[split])
        return {split: side_by_side(part, self.steps, list(self.args.sites), split) for split, part in parts.items()}

    @cached_property
    def scales(self) -> tuple[np.ndarray, np.ndarray]:
        """Per feature [1, blocks * d] the scale of its block (each block to mean norm sqrt(d); 1 without)."""
        x = self.activations["train"].sites[COLUMN]
        width = x.shape[-1] // len(self.blocks)
        per_block = [1.0 if self.args.normalize == "none" else norm_scale(x[:, b * width:(b + 1) * width])
                     for b in range(len(self.blocks))]
        scale = np.repeat(np.asarray(per_block, np.float32), width)[None, :]
        return scale, scale

    @cached_property
    def spec(self) -> Spec:
        """One dictionary over every block: d_sae = sae/d_sae, else sae/expansion * one block's width."""
        width = self.activations["train"].sites[COLUMN].shape[-1] // len(self.blocks)
        return self.spec_of(width * len(self.blocks), self.width_of(width), blocks=len(self.blocks))

    def _make_lineage(self, mode: Mode) -> Lineage:
        """A new crosscoder's node is a child of every checkpoint it read, in step order."""
        if mode is Mode.NEW and self.base is None and self.args.source:
            first, *rest = self.checkpoints
            return open_lineage(self.store, mode, first, name=self.name, config=to_dict(self.args),
                                writer=self.is_writer, parents=tuple(rest))
        return super()._make_lineage(mode)

    # -- what it records ---------------------------------------------------------------
    def validation_values(self) -> dict[str, float]:
        """SAELens' metrics of the whole crosscoder (`eval/NAME`) and of each checkpoint's part (`eval/step_S/NAME`)."""
        return {**super().validation_values(), **checkpoint_metrics(self)[0]}

    def on_train_end(self) -> None:
        """As SaeTrainer's (the activations stored on each checkpoint's node), then the crosscoder's records on the last
        node: each checkpoint's metrics, the decoder-norm shares as values and the per-latent table."""
        super().on_train_end()
        with announced(f"{self.name}: recording each checkpoint's metrics and the latent table"):
            values, table = records(self)
        self.lineage.record(values)
        self.lineage.save(self.results_dir() / TABLE, TABLE, table)


def refuse_unsupported(args: CrosscoderConfig) -> None:
    """UsageError for a setting a crosscoder does not take (before anything is captured or written)."""
    if args.architecture not in ARCHITECTURES:
        raise UsageError(f"sae/architecture={args.architecture}: a crosscoder is {' or '.join(ARCHITECTURES)} (the "
                         "paper's L1 loss, or BatchTopK)")
    if args.targets is not None:
        raise UsageError(f"a crosscoder reconstructs the activations it reads; sae/targets={args.targets} makes a "
                         "transcoder, which crosscoders are not: leave sae/targets unset")
    if args.eval_spliced:
        raise UsageError("crosscoders have no spliced evaluation (a checkpoint's part depends on every checkpoint's "
                         "activations); sae/eval_spliced=true: set it to false")


def choose_steps(text: str, available: Sequence[int], source: Node) -> list[int]:
    """The checkpoint steps `crosscoder/steps` names (`all` or a list of steps) among `available`, sorted.

    UsageError naming the step, the expected form and the nearest checkpoints, for a step that is not one, a
    malformed value, a repeated step or fewer than two checkpoints.
    """
    where = f"the lineage of {source}"
    have = f"its checkpoints: {listing(available)}" if available else "it has no checkpoints"
    example = ",".join(str(s) for s in available[-2:]) or "1000,2000"
    if text.strip() == "all":
        chosen = list(available)
    else:
        value = parse_value(text)
        value = [value] if isinstance(value, int) and not isinstance(value, bool) else value
        if not isinstance(value, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in value):
            raise UsageError(f"crosscoder/steps={text!r}: expected all or a list of checkpoint steps, e.g. "
                             f"[{example}]; {have}")
        for step in value:
            if step not in available:
                near = sorted(available, key=lambda s: (abs(s - step), s))[:2]
                nearest = f"nearest: {', '.join(map(str, sorted(near)))}; " if near else ""
                raise UsageError(f"crosscoder/steps: step {step} is not a checkpoint of {where} (expected all or a "
                                 f"list of its checkpoint steps); {nearest}{have}")
        repeated = sorted({s for s in value if value.count(s) > 1})
        if repeated:
            raise UsageError(f"crosscoder/steps={text!r} names step {repeated[0]} twice; name each checkpoint once")
        chosen = sorted(value)
    if len(chosen) < 2:
        raise UsageError(f"a crosscoder compares checkpoints, but crosscoder/steps={text!r} names "
                         f"{len(chosen)} of {where} ({have}); give two or more (a run writes one every "
                         "logging/checkpoint_interval steps), or train an SAE on a single checkpoint")
    return chosen


def listing(steps: Sequence[int]) -> str:
    """Steps as `10, 20, 30`, a long list cut in the middle: `10, 20, ..., 990, 1000 (100 checkpoints)`."""
    if len(steps) <= 2 * SHOWN:
        return ", ".join(map(str, steps))
    return (", ".join(map(str, steps[:SHOWN])) + ", ..., " + ", ".join(map(str, steps[-SHOWN:]))
            + f" ({len(steps)} checkpoints)")


def lineage_inputs(store: Store, node: Node, name: str) -> list[Node]:
    """The checkpoints a crosscoder's lineage read: its first node's parents (through branches of crosscoders)."""
    first = store.query().nonce(node.nonce).seq(0).all()[0]
    parents = store.parents(first)
    if len(parents) == 1 and parents[0].name == name:  # a branch of another crosscoder: what that one read
        return lineage_inputs(store, parents[0], name)
    return parents


def side_by_side(parts: Sequence[Activations], steps: Sequence[int], sites: Sequence[str], split: str) -> Activations:
    """One checkpoint's activations after another as blocks of one column [tokens, checkpoints * sites * d]; the
    checkpoints must have seen the same tokens, and the sites must have one width."""
    first = parts[0]
    for step, part in zip(steps[1:], parts[1:]):
        if not (np.array_equal(part.example, first.example) and np.array_equal(part.position, first.position)):
            raise UsageError(f"the {split} activations of checkpoint {step} are not over the tokens of checkpoint "
                             f"{steps[0]}'s ({part.tokens} rows against {first.tokens}); a crosscoder reads the same "
                             "tokens through every checkpoint: their data must be the same")
    widths = {s: first.sites[s].shape[-1] for s in sites}
    if len(set(widths.values())) > 1:
        raise UsageError(f"sites {', '.join(f'{s} ({w})' for s, w in widths.items())} differ in width; a crosscoder's "
                         "blocks need one width: give sites of one width")
    column = np.concatenate([part.sites[s] for part in parts for s in sites], axis=-1)
    return Activations({COLUMN: column}, first.example, first.position)

