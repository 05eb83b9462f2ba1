"""The implicit integrators' linear algebra: dense, or banded for large systems whose Jacobian is banded.

An implicit step factors matrices ``alpha I - beta J`` (J the Jacobian of the vector field) and solves
with them. `DENSE` keeps J as an n x n matrix (``jax.jacfwd``; LAPACK's LU with partial pivoting, or up to
`SMALL_N` states the inverse, see there).
`BandedAlgebra` (``jacobian_bandwidth=(kl, ku)`` on an implicit integrator) keeps J in *row-band* form,
``R[i, c] = J[i, i - kl + c]`` (n x (kl + ku + 1)): the Jacobian costs kl + ku + 1 forward-mode
directional derivatives (columns that share no row are evaluated together: Curtis-Powell-Reid
coloring), its LU with partial pivoting O(n kl (kl + ku)) operations and memory O(n (kl + ku)), a
solve O(n (kl + ku)) (LAPACK's ``gbtrf`` / ``gbtrs`` algorithm, written as scans: one row of the band
at a time). This is what makes a 1,000-state stiff system (a discretized PDE) affordable: a dense
1,000 x 1,000 LU is ~12 ms on a CPU core, the banded one with kl = ku = 2 ~0.6 ms, and a solve 0.9 ms
against 0.03 ms.

A wrong bandwidth (J has entries outside it) gives a wrong Jacobian (entries outside the band are
added to ones inside it): the stage equations are still solved to the tolerance (their residual uses
the exact vector field), but Newton converges slowly or fails (the step is retried smaller) and the
filtered error estimates lose some fidelity. Declare the bandwidth of the state ordering you use
(interleave the variables of one grid point: u1, v1, u2, v2, ...).

Imports: nothing from jaxsys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

from ..precision import HIGHEST


Array = jax.Array


SMALL_N = 6
"""Dense systems up to this size are "factored" into their inverse (Gauss-Jordan elimination with
partial pivoting, one rolled loop over the columns) and solved by one matrix-vector product, instead
of LAPACK's LU and triangular solves. A solve is then a single array operation (Newton solves several
times a step, and under ``vmap`` a batch of small systems costs two elementwise operations instead of
a LAPACK call per member), and the program holds one small loop per factorization: unrolled
elimination (jaxsys before) put ~120 operations in the program per factorization and ~90 per solve at
n = 6, over half of the operations of a hybrid system's implicit-Euler run and of its compile time.
The inverse's solves agree with LAPACK's to rounding times the matrix's condition number (Newton's
result is set by its residual, not by the solve; derivatives by the implicit function theorem use the
same solve). A singular matrix gives non-finite values, as LAPACK's solve does."""


def small_inverse(m: Array) -> Array:
    """The inverse of a small n x n matrix (real or complex) by Gauss-Jordan elimination with partial
    pivoting, one rolled loop over the columns (differentiable, batched under ``vmap``). A zero pivot
    gives non-finite entries."""
    n = m.shape[-1]
    if n == 0:  # (no continuous state: nothing to invert)
        return m
    rows = jnp.arange(n)
    a = jnp.concatenate([m, jnp.eye(n, dtype=m.dtype)], axis=1)

    def eliminate(k: Array, a: Array) -> Array:
        col = jax.lax.dynamic_index_in_dim(a, k, axis=1, keepdims=False)
        p = jnp.argmax(jnp.where(rows >= k, jnp.abs(col), -1.0))
        a = a[jnp.where(rows == k, p, jnp.where(rows == p, k, rows))]  # rows k and p exchanged
        row = jax.lax.dynamic_index_in_dim(a, k, axis=0, keepdims=False)
        row = row / row[k]
        col = jax.lax.dynamic_index_in_dim(a, k, axis=1, keepdims=False)
        a = a - jnp.where(rows == k, 0, col)[:, None] * row[None, :]
        return jnp.where((rows == k)[:, None], row[None, :], a)

    return jax.lax.fori_loop(0, n, eliminate, a)[:, n:]


@dataclasses.dataclass(frozen=True)
class DenseAlgebra:
    """Dense Jacobians and LU factorizations (the default)."""

    def eye(self, n: int, dtype: Any) -> Array:
        """The identity in this representation."""
        return jnp.eye(n, dtype=dtype)

    def jacobian(self, fn: Callable[[Array], Array], x: Array) -> Array:
        """d fn / dx at x (forward mode)."""
        return jax.jacfwd(fn)(x)

    def empty_jacobian(self, n: int, dtype: Any) -> Array:
        """A placeholder Jacobian (for the loop's carry)."""
        return jnp.zeros((n, n), dtype)

    def lu_factor(self, m: Array) -> tuple[Any, Any]:
        """The factored matrix, (lu, piv): LAPACK's LU with partial pivoting; up to `SMALL_N` the inverse
        (and ``piv`` unused zeros)."""
        if m.shape[-1] <= SMALL_N:
            return small_inverse(m), jnp.zeros(m.shape[-1:], jnp.int32)
        return jsl.lu_factor(m)

    def lu_solve(self, lu: Any, piv: Any, b: Array) -> Array:
        """M^-1 b (b a vector) from ``lu_factor``'s output."""
        if lu.shape[-1] <= SMALL_N:
            assert b.ndim == 1, b.shape
            # (elementwise product and row sums: under vmap a batched matmul of tiny matrices is a
            # loop of tiny products on a CPU, 2.5x slower on a batch of 64 stiff systems)
            return jnp.sum(lu * b.astype(jnp.result_type(lu.dtype, b.dtype))[..., None, :], axis=-1)
        return jsl.lu_solve((lu, piv), b)

    def empty_lu(self, n: int, dtype: Any) -> tuple[Any, Any]:
        """Placeholders shaped as ``lu_factor``'s output."""
        return jnp.zeros((n, n), dtype), jnp.zeros((n,), jnp.int32)


DENSE = DenseAlgebra()


@dataclasses.dataclass(frozen=True)
class BandedAlgebra:
    """Banded Jacobians with ``kl`` sub- and ``ku`` super-diagonals, in row-band form (see the module
    docstring)."""

    kl: int
    ku: int

    @property
    def width(self) -> int:
        return self.kl + self.ku + 1

    def eye(self, n: int, dtype: Any) -> Array:
        return jnp.zeros((n, self.width), dtype).at[:, self.kl].set(1)

    def jacobian(self, fn: Callable[[Array], Array], x: Array) -> Array:
        n, w, kl = x.shape[0], self.width, self.kl
        if n == 0:
            return jnp.zeros((0, w), x.dtype)
        colors = jnp.arange(n) % w
        seeds = (colors[None, :] == jnp.arange(w)[:, None]).astype(x.dtype)  # (w, n)
        compressed = jax.vmap(lambda s: jax.jvp(fn, (x,), (s,))[1])(seeds)  # [c, i]: sum over columns of color c
        i = jnp.arange(n)[:, None]
        j = i - kl + jnp.arange(w)[None, :]
        band = compressed[j % w, i]
        return jnp.where((j >= 0) & (j < n), band, 0)

    def empty_jacobian(self, n: int, dtype: Any) -> Array:
        return jnp.zeros((n, self.width), dtype)

    def lu_factor(self, m: Array) -> tuple[Any, Any]:
        if m.shape[0] == 0:  # (no continuous state)
            return (m, jnp.zeros((0, self.kl), m.dtype)), jnp.zeros((0,), jnp.int32)
        (u, lower), piv = band_lu_factor(m, self.kl, self.ku)
        return (u, lower), piv

    def lu_solve(self, lu: Any, piv: Any, b: Array) -> Array:
        u, lower = lu
        if b.shape[0] == 0:
            return b.astype(u.dtype)
        return band_lu_solve(u, lower, piv, b, self.kl, self.ku)

    def empty_lu(self, n: int, dtype: Any) -> tuple[Any, Any]:
        return (jnp.zeros((n, self.width), dtype), jnp.zeros((n, self.kl), dtype)), jnp.zeros((n,), jnp.int32)


def band_lu_factor(band: Array, kl: int, ku: int) -> tuple[tuple[Array, Array], Array]:
    """LU with partial pivoting of the n x n matrix whose row-band form is ``band`` (n x (kl + ku + 1)).

    Returns ``((U, L), piv)``: ``U[j, c] = U[j, j + c]`` (upper bandwidth kl + ku: pivoting fills in),
    ``L[j, r]`` the multiplier of row ``j + 1 + r`` at step j, and ``piv[j]`` the offset (0..kl) of the
    row exchanged with row j at step j. The elimination works on a window of the rows j..j + kl and
    columns j..j + kl + ku, which hold every entry step j touches; a zero pivot (a singular matrix)
    is replaced by the smallest normal number, so the solve returns non-finite values rather than
    failing inside the loop (Newton then reports divergence)."""
    n = band.shape[0]
    w = kl + ku + 1
    padded = jnp.concatenate([band, jnp.zeros((kl + 1, w), band.dtype)])

    def placed(row: Array, r: Any, j: Any) -> Array:
        # row r (row-band form) in the window whose first column is j
        c = jnp.arange(w) + j - (r - kl)
        return jnp.where((c >= 0) & (c < w), row[jnp.clip(c, 0, w - 1)], 0)

    window = jnp.stack([placed(padded[r], r, 0) for r in range(kl + 1)])
    tiny = jnp.finfo(jnp.abs(band).dtype).tiny

    def step(win: Array, j: Array) -> tuple[Array, Any]:
        p = jnp.argmax(jnp.abs(win[:, 0]))
        top, chosen = win[0], win[p]
        win = win.at[p].set(top).at[0].set(chosen)
        pivot = jnp.where(win[0, 0] == 0, tiny, win[0, 0])
        mult = win[1:, 0] / pivot
        win = win.at[1:].add(-mult[:, None] * win[0][None, :])
        r = j + kl + 1
        new = jnp.where(r < n, placed(jax.lax.dynamic_index_in_dim(padded, r, keepdims=False), r, j + 1), 0)
        following = jnp.concatenate([win[1:, 1:], jnp.zeros((kl, 1), win.dtype)], axis=1)
        return jnp.concatenate([following, new[None]]), (win[0].at[0].set(pivot), mult, p.astype(jnp.int32))

    _, (u, lower, piv) = jax.lax.scan(step, window, jnp.arange(n))
    return (u, lower), piv


def band_lu_solve(u: Array, lower: Array, piv: Array, b: Array, kl: int, ku: int) -> Array:
    """M^-1 b from `band_lu_factor`'s output (b of the factors' dtype or real)."""
    n = b.shape[0]
    w = kl + ku + 1
    y = jnp.concatenate([b.astype(u.dtype), jnp.zeros((w,), u.dtype)])

    def forward(y: Array, j: Array) -> tuple[Array, None]:
        win = jax.lax.dynamic_slice(y, (j,), (kl + 1,))
        p = piv[j]
        a, c = win[0], win[p]
        win = win.at[p].set(a).at[0].set(c)
        win = win.at[1:].add(-lower[j] * win[0])
        return jax.lax.dynamic_update_slice(y, win, (j,)), None

    y, _ = jax.lax.scan(forward, y, jnp.arange(n))

    def backward(x: Array, j: Array) -> tuple[Array, None]:
        win = jax.lax.dynamic_slice(x, (j,), (w,))
        xj = (y[j] - jnp.dot(u[j, 1:], win[1:], precision=HIGHEST)) / u[j, 0]
        return x.at[j].set(xj), None

    x, _ = jax.lax.scan(backward, jnp.zeros((n + w,), u.dtype), jnp.arange(n)[::-1])
    return x[:n]
