"""A dictionary job's sites checked against the model's module paths before anything is captured."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError, hint
from .features import Site

_BLOCK = re.compile(r"(^|/)(blocks[_/])(\d+)(?=/|$)")


def site_patterns(paths: Sequence[str]) -> list[str]:
    """The module paths with each block index written L (`blocks/L/mlp`), once each, in call order."""
    return list(dict.fromkeys(_BLOCK.sub(r"\1\2L", p) for p in paths if p))


def check_sites(model: Any, sites: Sequence[str], targets: Sequence[str] | None) -> None:
    """UsageError naming the first site or target that is not a module path of `model` (a trainer), with the valid
    ones; a transcoder's site must be a module's argument and its target that module's output."""
    found = model.find()
    listed = ", ".join(site_patterns(found))
    blocks = sorted({int(m.group(3)) for p in found for m in [_BLOCK.search(p)] if m})
    where = f" (L = {blocks[0]}..{blocks[-1]})" if blocks else ""
    for key, given in (("sae/sites", sites), ("sae/targets", targets or ())):
        for text in given:
            site = Site.parse(text)
            if site.path not in found:
                raise UsageError(f"{key}: {text!r} names no module of the {type(model).__name__} model"
                                 f"{hint(site.path, found)}; a site is a module path (its output) or "
                                 f"'path:x' (its argument x), TransformerLens names with dots accepted; "
                                 f"the modules{where}: {listed}")
    for text, target in zip(sites, targets or ()):
        site, out = Site.parse(text), Site.parse(target)
        if site.arg is None or out.arg is not None or out.path != site.path:
            raise UsageError(f"a transcoder reads a module's argument and predicts that module's output (attached, "
                             f"it replaces it): sae/sites={text!r} with sae/targets={target!r} is not such a pair; "
                             "give 'M:x' and 'M' for a module M, e.g. 'blocks.0.mlp:x' (the MLP's input: "
                             "what blocks.0.ln2.hook_normalized holds) and 'blocks.0.mlp'")
