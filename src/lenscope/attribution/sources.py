"""Where an attribution op's transcoders come from: Dictionary objects, SAELens folders (or their places on the hub:
hf://ORG/REPO/PATH, saelens://RELEASE/SAE_ID), or the node of a dictionary-training job (SaeTrainer) whose
checkpoint holds one dictionary per layer."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..dictionaries import Dictionary, SaeTrainer, load_saelens
from ..errors import UsageError
from ..job_registry import jobs
from ..models.hub.dictionary import is_named_dictionary
from ..training.trainer import node_name


def node_dictionaries(node: Any, store: Any) -> list[Dictionary]:
    """The dictionaries of a SaeTrainer node (its job found by the node's name), restored from its checkpoint."""
    name = store.get(node).node.name
    trainers = {node_name(cls): cls for cls in jobs().values() if isinstance(cls, type) and issubclass(cls, SaeTrainer)}
    if name not in trainers:
        raise UsageError(f"transcoders={node!r}: node {name!r} is not a dictionary-training job's; dictionary jobs: "
                         f"{', '.join(sorted(trainers)) or 'none registered'}")
    trainer = trainers[name](base=node, store=store)
    try:
        trainer.setup(attach=True)
        return trainer.dictionaries()
    finally:
        trainer.cleanup()


def load_transcoders(given: Any, store: Any) -> list[Any]:
    """One transcoder per layer from `given`: a list of Dictionary (or Transcoder) objects or SAELens folders (or
    hf:// / saelens:// names of them), a {layer: ...} mapping, or one SaeTrainer node address."""
    if isinstance(given, Mapping):
        given = [given[k] for k in sorted(given)]
    if isinstance(given, (str, os.PathLike)):
        if os.path.isdir(given) or is_named_dictionary(given):
            return [load_saelens(given)[0]]
        return node_dictionaries(str(given), store)
    if not isinstance(given, Sequence):
        raise UsageError(f"transcoders must be a list (one per layer) of dictionaries or SAELens folders (or hf:// "
                         f"addresses of them), or a dictionary job's node; got {type(given).__name__}")
    return [load_saelens(item)[0] if isinstance(item, (str, os.PathLike)) else item for item in given]
