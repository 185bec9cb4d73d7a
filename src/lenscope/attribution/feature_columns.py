"""The active features' columns of a batch of attribution rows, on the host: each feature's entry is the row's
gradient at the feature's site (layer, position) dotted with its scaled decoder row.

The edge program returns the site gradients (edges.py), so its shapes depend on the padded length alone: a prompt
with more active features than any before it runs the programs already compiled (before, the features were padded
to a capacity the first prompt of a length set, and a later prompt that outgrew it compiled new programs). The
features are grouped by occupied site, padded to the prompt's own fullest site, so a batch is one stacked matmul
(one BLAS product per occupied site) rather than a gather of [B, F, d_model].
"""

from __future__ import annotations

import numpy as np


class FeatureColumns:
    """The feature columns of rows, given each row's gradient at the sites; built once per prompt."""

    def __init__(self, features: np.ndarray, decoder: np.ndarray, width: int) -> None:
        """`features` [F, 3] (layer, position, feature) sorted by site, `decoder` [F, d_model] (activation times
        decoder row), `width` the positions the program runs at (sites are layer * width + position)."""
        self.site = (features[:, 0].astype(np.int64) * width + features[:, 1]) if len(features) else np.zeros(0, int)
        self.occupied, first, group = np.unique(self.site, return_index=True, return_inverse=True)
        self.group = group.reshape(-1)
        self.slot = np.arange(len(self.site)) - first[self.group]
        slots = int(self.slot.max()) + 1 if len(self.slot) else 1
        self.grid = np.zeros((len(self.occupied), slots, decoder.shape[1]), np.float32)  # [sites, slots, d_model]
        self.grid[self.group, self.slot] = decoder  # whole rows: 20x faster than scattering columns

    def __len__(self) -> int:
        return len(self.site)

    def __call__(self, grads: np.ndarray) -> np.ndarray:
        """Rows' feature columns [B, F] from their site gradients [B, used, d_model]: a feature at a site at or
        beyond `used` (at or above the program's top layer) gets 0, it reaches none of the rows."""
        out = np.zeros((grads.shape[0], len(self)), np.float32)
        sites = int(np.searchsorted(self.occupied, grads.shape[1]))  # occupied sites below `used`
        if sites == 0:
            return out
        reached = int(np.searchsorted(self.site, grads.shape[1]))  # sorted by site: a prefix of the features
        by_site = np.matmul(grads.transpose(1, 0, 2)[self.occupied[:sites]],  # [sites, B, slots]
                            self.grid[:sites].transpose(0, 2, 1))
        out[:, :reached] = by_site[self.group[:reached], :, self.slot[:reached]].T
        return out
