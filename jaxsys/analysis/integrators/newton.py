"""The Newton-Raphson machinery of the implicit integrators (Drake's ``ImplicitIntegrator``).

* `NewtonCache`: the Jacobian of the vector field and the factored iteration matrices, carried
  from step to step so that they are reused (Drake's ``set_reuse(true)``, its default) and recomputed
  only when Newton converges too slowly.
* `solve_stage`: solve one implicit stage equation ``R(z) = 0`` by simplified Newton with Drake's
  fallback *trials*: (1) the cached Jacobian and factorization (refactored first if the step size
  changed by more than 20% since it was factored), (2) a fresh factorization, (3) a fresh Jacobian at
  the step's start (unless it is already fresh), then failure, which the loop answers with a smaller
  step. The solution is differentiated by the implicit function theorem on ``R`` at the converged
  point (``jax.lax.custom_root``), never through the iterations.
* Convergence is Drake's (``CheckNewtonConvergence``, after Hairer & Wanner IV.8): the update is zero
  at the state's precision, or, from the third iteration on, the contraction rate theta = |dz_k| /
  |dz_k-1| gives an estimated remaining error ``theta / (1 - theta) |dz_k|`` below ``kappa *
  accuracy`` (kappa = 0.05); theta > 1 is divergence. The norm is the infinity norm of the update,
  scaled per component by ``max(1, |x_i|)`` (absolute for states of order one, as Drake's error
  norm; relative for large ones, so that states of 1e6 converge in float32). A residual test would
  fail on a stiff system whatever the step: its residual holds ``h f(x)``, whose rounding error is
  ``h |J| |x| eps`` (a stiffness of 1e20 makes that 1e4 for h = 1e-3).

Imports: `linalg` only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .linalg import DENSE, DenseAlgebra


Array = jax.Array

KAPPA = 0.05
"""Drake's (and Hairer's) factor on the accuracy for the Newton convergence test."""
REFACTOR_RATIO = 0.2
"""A cached factorization is reused while the step size is within 20% of the one it was made for."""

_RUNNING, _CONVERGED, _FAILED = 0, 1, 2

STAT_FIELDS = (
    "num_newton_raphson_iterations",
    "num_jacobian_evaluations",
    "num_iteration_matrix_factorizations",
    "num_derivative_evaluations_for_jacobian",
    "num_error_estimator_newton_raphson_iterations",
    "num_error_estimator_derivative_evaluations",
    "num_error_estimator_jacobian_evaluations",
    "num_error_estimator_iteration_matrix_factorizations",
)
"""Drake's implicit-integrator statistics, in the order of a counts vector (int32)."""
N_STATS = len(STAT_FIELDS)


class Factorization(NamedTuple):
    """An LU-factored iteration matrix and the step size it was made for (NaN: none yet). A matrix
    factored in pieces (the three-stage Radau's real and complex blocks) holds tuples of them."""

    lu: Any
    piv: Any
    h: Array


class IterationMatrix(NamedTuple):
    """How one iteration matrix M(J, h) is made and used (static): its order and whether it is complex,
    ``factor(J, h) -> (lu, piv)``, and ``solve(factorization, r) -> M^-1 r``. ``empty(dtype) -> (lu,
    piv)``: placeholders shaped as ``factor``'s output, for a matrix factored in several pieces (None:
    one ``size`` x ``size`` LU)."""

    size: int
    complex: bool
    factor: Callable[[Array, Array], tuple[Any, Any]]
    solve: Callable[[Factorization, Array], Array]
    empty: Callable[[Any], tuple[Any, Any]] | None = None


def dense_matrix(n: int, make: Callable[[Array, Array, Array], Array], algebra: Any = None) -> IterationMatrix:
    """A real n x n iteration matrix ``make(J, h, I)`` (I the identity in ``algebra``'s representation),
    LU-factored: dense by default, banded with a `linalg.BandedAlgebra`."""
    if algebra is None or isinstance(algebra, DenseAlgebra):
        dense = DENSE

        def factor(jac: Array, h: Array) -> tuple[Array, Array]:
            return dense.lu_factor(make(jac, h, jnp.eye(n, dtype=jac.dtype)))

        def solve(fac: Factorization, r: Array) -> Array:
            return dense.lu_solve(fac.lu, fac.piv, r)

        return IterationMatrix(n, False, factor, solve)

    def factor_banded(jac: Array, h: Array) -> tuple[Any, Any]:
        return algebra.lu_factor(make(jac, h, algebra.eye(n, jac.dtype)))

    def solve_banded(fac: Factorization, r: Array) -> Array:
        return algebra.lu_solve(fac.lu, fac.piv, r).astype(r.dtype)

    return IterationMatrix(n, False, factor_banded, solve_banded, lambda dtype: algebra.empty_lu(n, dtype))


class NewtonCache(NamedTuple):
    """What the implicit integrators carry from one step to the next.

    **Fields:** `jac` (the Jacobian df/dx, n x n, made at some earlier step start), `fresh` (it was made
    at the start of the current step: trial 3 has nothing new to try), `valid` (there is one),
    `factors` (one `Factorization` per iteration matrix the method uses) and `extra` (what a method
    carries besides: the three-stage Radau's last stages, to extrapolate its next starting guess).
    """

    jac: Array
    fresh: Array
    valid: Array
    factors: tuple[Factorization, ...]
    extra: Any = ()


class NewtonState(NamedTuple):
    """What an implicit method carries between steps (its integrator-protocol state): the Newton cache
    (Jacobian, factored iteration matrices) and the Newton statistics so far (int32, in the order of
    `STAT_FIELDS`)."""

    cache: NewtonCache
    counts: Array


def empty_cache(n: int, matrices: tuple[IterationMatrix, ...], dtype: Any, jac: Array | None = None) -> NewtonCache:
    """A cache with no Jacobian yet, with room for the method's iteration matrices (``jac``: a placeholder
    Jacobian in the method's representation; default a dense n x n one)."""
    cdtype = (jnp.zeros((), dtype) * 1j).dtype

    def empty(m: IterationMatrix) -> Factorization:
        if m.empty is not None:
            lu, piv = m.empty(dtype)
        else:
            lu, piv = jnp.zeros((m.size, m.size), cdtype if m.complex else dtype), jnp.zeros((m.size,), jnp.int32)
        return Factorization(lu, piv, jnp.full((), jnp.nan, dtype))

    factors = tuple(empty(m) for m in matrices)
    jac = jnp.zeros((n, n), dtype) if jac is None else jac
    return NewtonCache(jac, jnp.array(False), jnp.array(False), factors)


def start_step(cache: NewtonCache) -> NewtonCache:
    """The cache at a new step start: its Jacobian is no longer fresh."""
    return cache._replace(fresh=jnp.array(False))


def update_scale(x: Array) -> Array:
    """Per-component scale of Newton updates: ``max(1, |x_i|)``."""
    return jnp.maximum(1.0, jnp.abs(x))


def newton_iterations(
    residual: Callable[[Array], Array],
    z0: Array,
    fac: Factorization,
    matrix: IterationMatrix,
    scale: Array,
    tolerance: float,
    max_iterations: int,
) -> tuple[Array, Array, Array]:
    """Simplified Newton from ``z0`` with the factored iteration matrix ``fac``.

    Returns (z, converged, iterations). ``matrix`` solves with ``fac``; ``scale``: per-component scale
    of the update norm (tiled over stages); ``tolerance``: kappa times the accuracy. Stops at
    convergence, divergence (theta > 1 from the third iteration), a non-finite update, or
    ``max_iterations``.
    """
    eps = 10.0 * float(jnp.finfo(z0.dtype).eps)

    def cond(c: Any) -> Array:
        i, _, _, status = c
        return (status == _RUNNING) & (i < max_iterations)

    def body(c: Any) -> Any:
        i, z, last, _ = c
        dz = -matrix.solve(fac, residual(z))
        z = z + dz
        norm = jnp.max(jnp.abs(dz) / scale) if dz.shape[0] else jnp.zeros((), dz.dtype)
        zero = jnp.all(jnp.abs(dz) <= eps * jnp.maximum(1.0, jnp.abs(z)))
        theta = norm / last
        late = i >= 2  # Drake: the rate is only trusted from the third iteration on
        converged = zero | (late & (theta < 1) & (theta / (1 - theta) * norm < tolerance))
        failed = ~jnp.isfinite(norm) | (late & (theta > 1) & ~zero)
        status = jnp.where(converged, _CONVERGED, jnp.where(failed, _FAILED, _RUNNING))
        return i + 1, z, norm, status

    init = (jnp.zeros((), jnp.int32), z0, jnp.full((), jnp.inf, z0.dtype), jnp.asarray(_RUNNING))
    i, z, _, status = jax.lax.while_loop(cond, body, init)
    return z, status == _CONVERGED, i


def ensure_factored(
    cache: NewtonCache, which: int, matrix: IterationMatrix, h: Array
) -> tuple[Factorization, NewtonCache, Array]:
    """The cached factorization ``which`` for step ``h`` (refactored from the cached Jacobian if it
    was made for a step more than 20% different, or for an older Jacobian). Returns (factorization,
    cache, whether it was refactored). Not differentiated."""
    fac = cache.factors[which]
    stale = ~(jnp.abs(h - fac.h) <= REFACTOR_RATIO * jnp.abs(fac.h))

    def refactor() -> Factorization:
        lu, piv = matrix.factor(cache.jac, h)
        return Factorization(lu, piv, h)

    fac = jax.lax.cond(stale, refactor, lambda: fac)
    factors = tuple(fac if k == which else f for k, f in enumerate(cache.factors))
    return fac, cache._replace(factors=factors), stale


def solve_stage(
    residual: Callable[[Array], Array],
    z0: Array,
    cache: NewtonCache,
    which: int,
    matrix: IterationMatrix,
    h: Array,
    jacobian: Callable[[], Array],
    scale: Array,
    tolerance: float,
    max_iterations: int,
) -> tuple[Array, Array, NewtonCache, Array]:
    """Solve ``residual(z) = 0`` from ``z0`` with Drake's fallback trials (see the module docstring).

    ``which``: the index of this equation's iteration matrix in ``cache.factors``; ``matrix`` factors
    and solves with it; ``jacobian()`` evaluates df/dx at the step's start. Returns (z, converged,
    cache, counts) with counts = [Newton iterations, Jacobian evaluations, factorizations]. The value
    of z is differentiable (implicit function theorem on ``residual``); ``converged``, the cache and
    the counts are not.
    """

    def factor(jac: Array) -> Factorization:
        lu, piv = matrix.factor(jac, h)
        return Factorization(lu, piv, h)

    def solve(res: Callable[[Array], Array], guess: Array) -> tuple[Array, Any]:
        def trial_cond(c: Any) -> Array:
            trial, _, ok, _, _ = c
            return ~ok & (trial <= 3)

        def trial_body(c: Any) -> Any:
            trial, _, _, cache_, counts = c
            fac = cache_.factors[which]
            # trial 3 (reached only with a stale Jacobian), no Jacobian yet, or a non-finite one: a
            # fresh Jacobian at the step's start
            need_jac = ~cache_.valid | ~jnp.all(jnp.isfinite(cache_.jac)) | (trial == 3)
            jac = jax.lax.cond(need_jac, jacobian, lambda: cache_.jac)
            # trial 2, a new Jacobian, or a step size far from the factorization's: refactor
            stale_h = ~(jnp.abs(h - fac.h) <= REFACTOR_RATIO * jnp.abs(fac.h))
            need_factor = need_jac | (trial == 2) | stale_h
            fac = jax.lax.cond(need_factor, lambda: factor(jac), lambda: fac)
            z, ok, iters = newton_iterations(res, guess, fac, matrix, scale, tolerance, max_iterations)
            # a new Jacobian makes the other factorizations stale
            factors = tuple(
                fac if k == which else f._replace(h=jnp.where(need_jac, jnp.nan, f.h))
                for k, f in enumerate(cache_.factors)
            )
            fresh = cache_.fresh | need_jac
            cache_ = cache_._replace(jac=jac, fresh=fresh, valid=jnp.array(True), factors=factors)
            i32 = jnp.int32
            counts = counts + jnp.stack([iters, need_jac.astype(i32), need_factor.astype(i32)])
            # the next trial: a refactorization if this one did not refactor, else a fresh Jacobian if
            # this one's was stale, else nothing is left to try
            nxt = jnp.where((trial == 1) & ~need_factor, 2, jnp.where(fresh, 4, 3))
            return nxt, z, ok, cache_, counts

        init = (jnp.asarray(1), guess, jnp.array(False), cache, jnp.zeros((3,), jnp.int32))
        _, z, ok, cache_out, counts = jax.lax.while_loop(trial_cond, trial_body, init)
        # (custom_root's JVP gives integer and boolean auxiliary outputs tangents of their own dtype,
        # which JAX then rejects: they travel as floats of the state's dtype, exact for these sizes)
        return z, jax.tree_util.tree_map(as_inexact, (ok, cache_out, counts))

    def tangent_solve(g: Callable[[Array], Array], y: Array) -> Array:
        lu, piv = DENSE.lu_factor(jax.jacfwd(g)(y))
        return DENSE.lu_solve(lu, piv, y)

    real = cache.jac.dtype

    def as_inexact(a: Array) -> Array:
        return a if jnp.issubdtype(a.dtype, jnp.inexact) else a.astype(real)

    like = (jnp.array(False), cache, jnp.zeros((3,), jnp.int32))
    z, aux = jax.lax.custom_root(residual, z0, solve, tangent_solve, has_aux=True)
    ok, cache_out, counts = jax.tree_util.tree_map(lambda a, ref: jax.lax.stop_gradient(a).astype(ref.dtype), aux, like)
    return z, ok, cache_out, counts
