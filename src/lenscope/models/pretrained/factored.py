"""FactoredMatrix: a matrix kept as the product A @ B of two thin factors, as TransformerLens offers it.

A head's OV circuit (W_V @ W_O) and QK circuit (W_Q @ W_Kᵀ) are [d_model, d_model] matrices of rank d_head; kept
factored, their products, singular values, eigenvalues and norms cost d_head-sized work. Leading axes (layers,
heads) broadcast. Computed in NumPy (float32 or float64) on the host: a few small linear-algebra calls, which
jax.numpy would compile one by one per shape. Results are NumPy arrays (jax.numpy takes them as they are).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np

from ...errors import UsageError

__all__ = ["FactoredMatrix"]


def _host(x: Any) -> np.ndarray:
    """x as a NumPy float array (float64 kept, every other float type, bfloat16 included, as float32)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor, read without importing torch
        x = x.detach().cpu().numpy()
    array = np.asarray(x)
    return array if array.dtype in (np.float32, np.float64) else array.astype(np.float32)


def _swap(x: np.ndarray) -> np.ndarray:
    """The last two axes exchanged."""
    return np.swapaxes(x, -1, -2)


def _kept(index: Any) -> Any:
    """An int index as the one-element slice that keeps its axis (a matrix axis is never dropped)."""
    if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
        return slice(int(index), int(index) + 1 if index != -1 else None)
    return index


class FactoredMatrix:
    """The matrix A @ B, A [..., ldim, mdim] and B [..., mdim, rdim], with its leading axes broadcast."""

    __array_ufunc__ = None  # `ndarray @ FactoredMatrix` defers to __rmatmul__

    def __init__(self, A: Any, B: Any) -> None:
        a, b = _host(A), _host(B)
        if a.ndim < 2 or b.ndim < 2:
            raise UsageError(f"FactoredMatrix(A, B): expected A [..., ldim, mdim] and B [..., mdim, rdim], got "
                             f"shapes {a.shape} and {b.shape}")
        if a.shape[-1] != b.shape[-2]:
            raise UsageError(f"FactoredMatrix(A, B): A's last axis ({a.shape[-1]}) must equal B's second to last "
                             f"({b.shape[-2]}); shapes were {a.shape} and {b.shape}")
        try:
            lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError as err:
            raise UsageError(f"FactoredMatrix(A, B): the leading axes of A {a.shape} and B {b.shape} do not "
                             "broadcast") from err
        self.A = np.broadcast_to(a, (*lead, *a.shape[-2:]))
        self.B = np.broadcast_to(b, (*lead, *b.shape[-2:]))
        self.ldim, self.mdim, self.rdim = a.shape[-2], a.shape[-1], b.shape[-1]
        self.shape: tuple[int, ...] = (*lead, self.ldim, self.rdim)
        self.has_leading_dims = len(lead) > 0

    # -- the matrix -------------------------------------------------------------------------------------------------
    @property
    def AB(self) -> np.ndarray:
        """The full product [..., ldim, rdim] (as large as the matrix: prefer the factored operations)."""
        return self.A @ self.B

    @property
    def BA(self) -> np.ndarray:
        """The reverse product B @ A [..., mdim, mdim]; square matrices only."""
        if self.ldim != self.rdim:
            raise UsageError(f"FactoredMatrix.BA: needs a square matrix (ldim == rdim), shape was {self.shape}")
        return self.B @ self.A

    @property
    def T(self) -> FactoredMatrix:
        """The transpose, Bᵀ @ Aᵀ."""
        return FactoredMatrix(_swap(self.B), _swap(self.A))

    @property
    def pair(self) -> tuple[np.ndarray, np.ndarray]:
        """(A, B)."""
        return self.A, self.B

    @property
    def ndim(self) -> int:
        """The number of axes of the matrix, leading ones included."""
        return len(self.shape)

    # -- products ---------------------------------------------------------------------------------------------------
    def __matmul__(self, other: Any) -> Any:
        """self @ other: a FactoredMatrix for a matrix or a FactoredMatrix, an array [..., ldim] for a vector."""
        if isinstance(other, FactoredMatrix):
            return (self @ other.A) @ other.B
        right = _host(other)
        if right.ndim == 0:
            raise UsageError("FactoredMatrix @ x: x is a scalar; expected a vector or matrix (use * to scale)")
        rows = right.shape[-1 if right.ndim == 1 else -2]
        if rows != self.rdim:
            raise UsageError(f"FactoredMatrix @ array: the array's rows ({rows}) must equal the "
                             f"matrix's columns ({self.rdim}); shapes were {self.shape} and {right.shape}")
        if right.ndim == 1:  # a vector: the product collapses to one (over the leading axes)
            return (self.A @ (self.B @ right[:, None]))[..., 0]
        if self.rdim > self.mdim:  # keep the thin middle
            return FactoredMatrix(self.A, self.B @ right)
        return FactoredMatrix(self.AB, right)

    def __rmatmul__(self, other: Any) -> Any:
        """other @ self: a FactoredMatrix for a matrix, an array [..., rdim] for a vector."""
        left = _host(other)
        if not left.ndim or left.shape[-1] != self.ldim:
            raise UsageError(f"array @ FactoredMatrix: the array's columns ({left.shape[-1]}) must equal the "
                             f"matrix's rows ({self.ldim}); shapes were {left.shape} and {self.shape}")
        if left.ndim == 1:
            return ((left[None, :] @ self.A) @ self.B)[..., 0, :]
        if self.ldim > self.mdim:
            return FactoredMatrix(left @ self.A, self.B)
        return FactoredMatrix(left, self.AB)

    def __mul__(self, scalar: Any) -> FactoredMatrix:
        """The matrix times a scalar (applied to A)."""
        value = _host(scalar)
        if value.size != 1:
            raise UsageError(f"FactoredMatrix * x: x must be a scalar, got shape {value.shape}; use @ for products")
        return FactoredMatrix(self.A * value.reshape(()), self.B)

    __rmul__ = __mul__

    # -- spectra ----------------------------------------------------------------------------------------------------
    @cached_property
    def _svd(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(U, S, V) from the QR factors of A and Bᵀ and the SVD of the small matrix between them."""
        qa, ra = np.linalg.qr(self.A)
        qb, rb = np.linalg.qr(_swap(self.B))
        u, s, vh = np.linalg.svd(ra @ _swap(rb), full_matrices=False)
        return qa @ u, s, qb @ _swap(vh)

    def svd(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(U [..., ldim, k], S [..., k], V [..., rdim, k]) with U @ diag(S) @ Vᵀ the matrix, k = min(l, m, r)."""
        return self._svd

    @property
    def U(self) -> np.ndarray:
        """The left singular vectors [..., ldim, k]."""
        return self._svd[0]

    @property
    def S(self) -> np.ndarray:
        """The singular values [..., k], largest first."""
        return self._svd[1]

    @property
    def V(self) -> np.ndarray:
        """The right singular vectors [..., rdim, k] (not transposed: M = U diag(S) Vᵀ)."""
        return self._svd[2]

    @property
    def eigenvalues(self) -> np.ndarray:
        """The eigenvalues of the square matrix [..., mdim] (complex): those of BA, AB's nonzero ones."""
        return np.linalg.eigvals(self.BA)

    def norm(self) -> np.ndarray:
        """The Frobenius norm [...]: the root of the sum of the squared singular values."""
        return np.sqrt((self.S ** 2).sum(-1))

    def make_even(self) -> FactoredMatrix:
        """The same matrix as (U sqrt(S), sqrt(S) Vᵀ): each factor carries half of the spectrum."""
        root = np.sqrt(self.S)
        return FactoredMatrix(self.U * root[..., None, :], root[..., :, None] * _swap(self.V))

    def collapse_l(self) -> np.ndarray:
        """diag(S) Vᵀ [..., k, rdim]: the matrix with its left orthogonal factor U dropped."""
        return self.S[..., :, None] * _swap(self.V)

    def collapse_r(self) -> np.ndarray:
        """U diag(S) [..., ldim, k]: the matrix with its right orthogonal factor V dropped."""
        return self.U * self.S[..., None, :]

    # -- shape ------------------------------------------------------------------------------------------------------
    def __getitem__(self, index: Any) -> FactoredMatrix:
        """Index the leading axes; an index one or two longer also picks rows, then columns (kept as axes)."""
        idx = index if isinstance(index, tuple) else (index,)
        counted = sum(i is not None for i in idx)
        lead = self.ndim - 2
        if counted <= lead:
            return FactoredMatrix(self.A[idx], self.B[idx])
        if counted == lead + 1:
            return FactoredMatrix(self.A[(*idx[:-1], _kept(idx[-1]))], self.B[idx[:-1]])
        if counted == lead + 2:
            rows, cols = _kept(idx[-2]), _kept(idx[-1])
            return FactoredMatrix(self.A[(*idx[:-2], rows)], self.B[(*idx[:-2], slice(None), cols)])
        raise UsageError(f"FactoredMatrix[{index!r}]: at most {self.ndim} indices for a matrix of shape {self.shape}")

    def unsqueeze(self, axis: int) -> FactoredMatrix:
        """A new leading axis of size 1 at `axis` (of both factors)."""
        return FactoredMatrix(np.expand_dims(self.A, axis), np.expand_dims(self.B, axis))

    def get_corner(self, k: int = 3) -> np.ndarray:
        """The first k entries along every axis (leading ones too) of the matrix."""
        corner = self.A[..., :k, :] @ self.B[..., :, :k]
        return corner[(slice(0, k),) * corner.ndim]

    def __repr__(self) -> str:
        return f"FactoredMatrix: Shape({self.shape}), Hidden Dim({self.mdim})"
