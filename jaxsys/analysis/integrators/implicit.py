"""Implicit integrators: implicit Euler, one-stage Radau (Radau1), two-stage Radau IIA (Radau3) and
three-stage Radau IIA (Radau5, Hairer's RADAU5).

Each step solves its stage equations by simplified Newton (`newton`): the Jacobian of the
vector field and the factored iteration matrices are carried from step to step and recomputed only
when Newton converges slowly or fails (Drake's trials), convergence is Drake's contraction-rate test
against the accuracy, and a step whose Newton iteration does not converge is reported as failed (the
loop retries it with half the step, in fixed-step mode too: never accepted). Derivatives of a step
come from the implicit function theorem on the converged stage equations.

Imports: `base` and `newton` only.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ...framework.errors import JaxsysError
from .base import Array, IntegratorBase, StepResult, VectorField
from .linalg import DENSE, BandedAlgebra, DenseAlgebra
from .newton import (
    KAPPA,
    N_STATS,
    Factorization,
    IterationMatrix,
    NewtonCache,
    NewtonState,
    dense_matrix,
    empty_cache,
    ensure_factored,
    solve_stage,
    start_step,
    update_scale,
)


class _ImplicitBase(IntegratorBase):
    """Options and the step interface shared by the implicit integrators (Drake's ``ImplicitIntegrator``).

    **Arguments** (besides [`IntegratorBase`][jaxsys.IntegratorBase]'s; Drake's setter in brackets):
    - `max_newton_raphson_iterations`: Newton iterations per trial (Drake's 10).
    - `reuse`: reuse the Jacobian and the factored iteration matrices across iterations and steps
      (``set_reuse``; Drake's default True). False: a fresh Jacobian and factorization every step.
    - `jacobian_bandwidth`: ``(kl, ku)``, the numbers of sub- and super-diagonals of the Jacobian of the
      vector field, for large systems whose Jacobian is banded (discretized PDEs; order the state so
      that coupled variables are near each other). The Jacobian is then evaluated with ``kl + ku + 1``
      directional derivatives and kept, factored and solved in band form: memory and work linear in
      the state size instead of quadratic and cubic (see `jaxsys.analysis.integrators.linalg`; not in
      Drake, whose implicit integrators are dense; scipy's ``jac_sparsity``, Hairer's ``MLJAC/MUJAC``).
      None (default): dense. A bandwidth narrower than the Jacobian's gives Newton a wrong Jacobian:
      the stage equations are still solved to the tolerance (their residual uses the exact vector
      field) but Newton converges slowly or fails (smaller steps), and Radau's filtered error
      estimates lose some fidelity: declare the true bandwidth.
    """

    max_newton_raphson_iterations: int = eqx.field(static=True, default=10)
    reuse: bool = eqx.field(static=True, default=True)
    jacobian_bandwidth: tuple[int, int] | None = eqx.field(static=True, default=None)

    initial_step_fraction: ClassVar[float] = 1.0  # Drake: the first step is the maximum step
    may_fail: ClassVar[bool] = True
    implicit: ClassVar[bool] = True
    stage_count: ClassVar[int] = 1  # implicit stages (the Newton unknowns are stage_count * n)

    def __check_init__(self) -> None:
        bw = self.jacobian_bandwidth
        if bw is not None and not (
            isinstance(bw, tuple) and len(bw) == 2 and all(isinstance(b, int) and b >= 0 for b in bw)
        ):
            raise JaxsysError(
                f"{type(self).__name__}: jacobian_bandwidth must be a tuple (kl, ku) of two integers >= 0 (the "
                f"numbers of sub- and super-diagonals of the Jacobian); got {bw!r}."
            )
        if self.max_newton_raphson_iterations < 1:
            raise JaxsysError(
                f"{type(self).__name__}: max_newton_raphson_iterations must be >= 1; got "
                f"{self.max_newton_raphson_iterations}."
            )

    def algebra(self) -> Any:
        """The linear algebra of the Newton iteration: `linalg.DENSE`, or a `linalg.BandedAlgebra` with
        ``jacobian_bandwidth``."""
        if self.jacobian_bandwidth is None:
            return DENSE
        kl, ku = self.jacobian_bandwidth
        return BandedAlgebra(int(kl), int(ku))

    @abc.abstractmethod
    def iteration_matrices(self, n: int) -> tuple[IterationMatrix, ...]:
        """The method's iteration matrices for a state of size ``n`` (their slots in the cache)."""

    def init_newton_cache(self, x: Array) -> NewtonCache:
        """An empty cache for states like ``x`` (the first step computes the Jacobian)."""
        n = x.shape[0]
        return empty_cache(n, self.iteration_matrices(n), x.dtype, self.algebra().empty_jacobian(n, x.dtype))

    def newton_tolerance(self, dtype: Any) -> float:
        """The convergence threshold on the estimated Newton error (scaled norm, see `newton`).

        Error-controlled: Drake's, kappa (0.05) times the accuracy in use, so that the Newton error is
        well below the error the step is allowed. Fixed-step mode has no accuracy to lean on, so the
        iteration converges tightly: kappa times ``target_accuracy`` if one is set, else 1e-10. Never
        below 100 epsilon of the dtype (float32: 1.2e-5), where rounding noise makes the contraction
        rate meaningless (an update at rounding level counts as converged anyway).
        """
        if self.get_fixed_step_mode():
            tol = 1e-10 if self.target_accuracy is None else KAPPA * self.get_accuracy_in_use()
        else:
            tol = KAPPA * self.get_accuracy_in_use()
        floor = 100.0 * float(jnp.finfo(dtype).eps)
        return jnp.maximum(tol, floor) if isinstance(tol, jax.core.Tracer) else max(tol, floor)

    # ----- the integrator protocol: the Newton cache and statistics are the state ------------------
    def init(self, f: VectorField, t: Array, x: Array, aux: Any, events: bool = False) -> tuple[Any, int]:
        """An empty Newton cache (the first step computes the Jacobian) and zero statistics."""
        return NewtonState(self.init_newton_cache(x), jnp.zeros((N_STATS,), jnp.int32)), 0

    def step(
        self,
        f: VectorField,
        t: Array,
        x: Array,
        h: Array,
        aux: Any,
        state: Any,
        t_end: Array,
        dense: bool = False,
    ) -> StepResult:
        if dense:
            raise JaxsysError(f"{type(self).__name__} has no dense output.")
        x_new, err, ok, cache, counts, evals = self.attempt_step_cached(f, t, x, h, aux, state.cache)
        return StepResult(x_new, err, ok, NewtonState(cache, state.counts + counts), self.num_evaluations() + evals)

    def newton_counts(self, state: Any) -> Array | None:
        return state.counts

    def attempt_step(self, f: VectorField, t: Array, x: Array, h: Array, aux: Any) -> tuple[Array, Array, Array]:
        """One step with a fresh Jacobian (no cache): (x_new, error estimate, Newton converged)."""
        x_new, err, ok, _, _, _ = self.attempt_step_cached(f, t, x, h, aux, self.init_newton_cache(x))
        return x_new, err, ok

    def attempt_step_cached(
        self, f: VectorField, t: Array, x: Array, h: Array, aux: Any, cache: NewtonCache
    ) -> tuple[Array, Array, Array, NewtonCache, Array, Array]:
        """One step reusing ``cache``: (x_new, error estimate, ok, cache, counts, derivative evaluations).

        ``counts`` is the int32 vector of `STAT_FIELDS`."""
        if not self.reuse:
            cache = self.init_newton_cache(x)
        cache = start_step(cache)
        return self._step(f, t, x, h, cache, self.newton_scale(x, aux))

    def newton_scale(self, x: Array, aux: Any) -> Array:
        """Per-component scale of Newton updates: ``max(1, |x_i|) / w_i`` with w the error norm's
        weights (``qbar_weight`` for v, and for q when N(q) = I; ``z_weight`` for z), so that Newton
        converges in the norm error control measures (a weight of 1e4 on a small species of a
        chemical system asks its Newton error to be 1e4 times smaller too)."""
        scale = update_scale(x)
        if self.qbar_weight is None and self.z_weight is None:
            return scale
        n = x.shape[0]
        nq, nv = int(aux.get("num_q", 0)), int(aux.get("num_v", 0))
        w = np.ones(n)
        if self.qbar_weight is not None:
            w[nq : nq + nv] = self.qbar_weight
            if nq == nv:
                w[:nq] = self.qbar_weight
        if self.z_weight is not None:
            w[nq + nv :] = self.z_weight
        return scale / jnp.asarray(np.maximum(w, 1e-300), x.dtype)

    @abc.abstractmethod
    def _step(
        self, f: VectorField, t: Array, x: Array, h: Array, cache: NewtonCache, scale: Array
    ) -> tuple[Array, Array, Array, NewtonCache, Array, Array]:
        """One step from (t, x) with the Newton cache; ``scale``: the Newton update norm's scale."""

    def _solve(
        self, residual: Any, z0: Array, cache: NewtonCache, which: int, h: Array, jac: Any, scale: Array
    ) -> tuple[Array, Array, NewtonCache, Array]:
        return solve_stage(
            residual,
            z0,
            cache,
            which,
            self.iteration_matrices(z0.shape[0] // self.stage_count)[which],
            h,
            jac,
            scale,
            self.newton_tolerance(z0.dtype),
            self.max_newton_raphson_iterations,
        )


def _complex(dtype: Any) -> Any:
    """The complex dtype of a real one's precision."""
    return (jnp.zeros((), dtype) * 1j).dtype


def _collocation_residual(
    f: VectorField, t: Array, x: Array, h: Array, A: Array, c: tuple[float, ...]
) -> Callable[[Array], Array]:
    """The Radau IIA stage equations on the stacked stage increments Z = (z_1 .. z_s):
    ``z_i - h sum_j A_ij f(t + c_j h, x + z_j) = 0`` (Radau3 and Radau5)."""
    s, n = len(c), x.shape[0]

    def residual(Z: Array) -> Array:
        z = Z.reshape(s, n)
        F = jnp.stack([f(t + c[i] * h, x + z[i]) for i in range(s)])
        return (z - h * (A @ F)).reshape(-1)

    return residual


def _stats(main: Array, estimator: Array | None = None, estimator_evals: Array | int = 0) -> Array:
    """A counts vector (`STAT_FIELDS`) from [iterations, Jacobians, factorizations] of
    all solves and of the error estimator's solves."""
    i32 = jnp.int32
    est = jnp.zeros((3,), i32) if estimator is None else estimator
    total = main + est
    out = jnp.stack(
        [total[0], total[1], total[2], total[1], est[0], jnp.asarray(estimator_evals, i32) + est[1], est[1], est[2]]
    )
    assert out.shape == (N_STATS,)
    return out


def _ie_matrix(jac: Array, h: Array, eye: Array) -> Array:
    """I - h J: implicit Euler's iteration matrix."""
    return eye - h * jac


def _half_matrix(jac: Array, h: Array, eye: Array) -> Array:
    """I - (h/2) J: the implicit trapezoid's iteration matrix, and implicit Euler's at half the step."""
    return eye - 0.5 * h * jac


class ImplicitEulerIntegrator(_ImplicitBase):
    """Backward Euler, first order, L-stable (Drake's ``ImplicitEulerIntegrator``).

    The error estimate is Drake's default, *step doubling*: the step is also taken as two implicit
    Euler half steps x_half, and the estimate is x_full - x_half (``h^2 x''/4``, the local error of
    x_half). Drake keeps x_half, a first-order result: error per step then adds up to a global error
    far above the accuracy (``x' = -x + sin t`` on [0, 10]: 2.6e-4 at accuracy 1e-6, and ~sqrt of the
    accuracy in general). jaxsys keeps the Richardson extrapolation ``2 x_half - x_full`` instead
    (``extrapolate=True``, the default): second order, still L-stable (its stability function
    ``2/(1 - z/2)^2 - 1/(1 - z)`` is at most 1 on the left half-plane and 0 at infinity), with the
    estimate bounding the error of the less accurate x_half, as the explicit pairs do (local
    extrapolation), so the global error tracks the accuracy. ``extrapolate=False`` keeps x_half, as
    Drake does. ``use_implicit_trapezoid_error_estimation=True``: the result is the full step and the
    estimate is its difference from the implicit trapezoid rule (``h^2 x''/2``, Drake's
    ``set_use_implicit_trapezoid_error_estimation(true)``; this is [`Radau1Integrator`][jaxsys.Radau1Integrator]).

    Drake's accuracy defaults for this method: 1e-1 when no target is set, at most 5e-1. Fixed-step
    mode takes the same steps (three implicit solves each, the estimate made), as Drake's does: on
    ``x' = 14 t + 7`` from 3 with h = 1.5 the kept result is 37.125 with ``extrapolate=False``
    (Drake's), 29.25 (exact) with the default extrapolation; the estimate is 7.875 either way.
    """

    use_implicit_trapezoid_error_estimation: bool = eqx.field(static=True, default=False)
    extrapolate: bool = eqx.field(static=True, default=True)

    name: ClassVar[str] = "implicit_euler"
    order: ClassVar[int] = 1
    error_estimate_order: ClassVar[int] = 2
    num_stages: ClassVar[int] = 0  # derivative evaluations are counted as they happen
    default_accuracy: ClassVar[float] = 1e-1
    loosest_accuracy: ClassVar[float] = 5e-1

    def iteration_matrices(self, n: int) -> tuple[IterationMatrix, ...]:
        a = self.algebra()
        return (dense_matrix(n, _ie_matrix, a), dense_matrix(n, _half_matrix, a))  # I - h J, I - (h/2) J

    def _step(
        self, f: VectorField, t: Array, x: Array, h: Array, cache: NewtonCache, scale: Array
    ) -> tuple[Array, Array, Array, NewtonCache, Array, Array]:
        t1 = t + h

        def jac() -> Array:
            return self.algebra().jacobian(lambda xx: f(t, xx), x)

        def residual(x1: Array) -> Array:
            return x1 - x - h * f(t1, x1)

        # (in fixed-step mode too, as Drake's: the error estimate is made and the step kept is the one
        # error control would keep, so a fixed-step run equals an error-controlled one on the same steps)
        x1, ok, cache, c_full = self._solve(residual, x, cache, 0, h, jac, scale)
        if self.use_implicit_trapezoid_error_estimation:
            f0 = f(t, x)

            def residual_trapezoid(x2: Array) -> Array:
                return x2 - x - 0.5 * h * (f0 + f(t1, x2))

            x_tr, ok_tr, cache, c_est = self._solve(residual_trapezoid, x1, cache, 1, h, jac, scale)
            counts = _stats(c_full, c_est, estimator_evals=1)
            evals = 1 + c_full[0] + c_full[1] + c_est[0] + c_est[1]
            return x1, x1 - x_tr, ok & ok_tr, cache, counts, evals
        # step doubling: two half steps from x, the second from the first's result (one scan of two
        # solves: the Newton iteration appears once in the program for both halves, not twice)
        half = 0.5 * h

        def half_step(carry: Any, k: Array) -> tuple[Any, tuple[Array, Array]]:
            base, cache_ = carry
            tk = t + half * (k + 1).astype(half.dtype)

            def residual_half(z: Array) -> Array:
                return z - base - half * f(tk, z)

            z, ok_k, cache_, c_k = self._solve(residual_half, base, cache_, 1, h, jac, scale)
            return (z, cache_), (ok_k, c_k)

        (x2, cache), (oks, cs) = jax.lax.scan(half_step, (x, cache), jnp.arange(2, dtype=jnp.int32))
        c_est = cs[0] + cs[1]
        counts = _stats(c_full, c_est)
        evals = c_full[0] + c_full[1] + c_est[0] + c_est[1]
        x_kept = 2.0 * x2 - x1 if self.extrapolate else x2
        return x_kept, x1 - x2, ok & oks[0] & oks[1], cache, counts, evals


class Radau1Integrator(ImplicitEulerIntegrator):
    """One-stage Radau IIA (implicit Euler) with the implicit-trapezoid error estimate: Drake's
    ``RadauIntegrator<T, 1>`` (first order, L-stable; accuracy default 1e-1, at most 5e-1)."""

    use_implicit_trapezoid_error_estimation: bool = eqx.field(static=True, default=True)

    name: ClassVar[str] = "radau1"

    def __check_init__(self) -> None:
        if not self.use_implicit_trapezoid_error_estimation:
            raise JaxsysError(
                "Radau1Integrator estimates its error with the implicit trapezoid rule; for step doubling use "
                "ImplicitEulerIntegrator."
            )


# Two-stage Radau IIA: A, its inverse's complex eigenvalue lambda = 2 + i sqrt(2) and eigenvector
# matrix T = [v, conj(v)] (so A^-1 = T diag(lambda, conj(lambda)) T^-1)
_RADAU_A = np.array([[5.0 / 12.0, -1.0 / 12.0], [0.75, 0.25]])
_RADAU_C = (1.0 / 3.0, 1.0)
_RADAU_AINV = np.linalg.inv(_RADAU_A)
_w, _V = np.linalg.eig(_RADAU_AINV)
_RADAU_LAMBDA = complex(_w[int(np.argmax(_w.imag))])
_v = _V[:, int(np.argmax(_w.imag))]
_RADAU_T = np.stack([_v, _v.conj()], axis=1)
_RADAU_TINV = np.linalg.inv(_RADAU_T)
del _w, _V, _v


def _radau_matrix(n: int, algebra: Any = DENSE) -> IterationMatrix:
    """The stage equations' Newton matrix I - h (A kron J), factored as Hairer's RADAU5 does: with A^-1
    = T diag(lambda, conj lambda) T^-1 it is block-diagonal in T's basis, so one complex n x n matrix
    lambda / h I - J is factored and solved (half the work of the real 2n x 2n LU, and well-conditioned
    where that one is not: a 1e20 stiffness gives the 2n x 2n matrix a condition number above 1/eps)."""

    def factor(jac: Array, h: Array) -> tuple[Any, Any]:
        cj = jac.astype((jnp.zeros((), jac.dtype) * 1j).dtype)
        return algebra.lu_factor((_RADAU_LAMBDA / h) * algebra.eye(n, cj.dtype) - cj)

    def solve(fac: Factorization, r: Array) -> Array:
        # M dZ = r  <=>  (A^-1/h kron I - I kron J) dZ = (A^-1 kron I) r / h; in T's basis the first
        # block is (lambda/h I - J) dW1 = (T^-1 A^-1 kron I)[0] r / h and dW2 = conj(dW1)
        cdtype = (jnp.zeros((), r.dtype) * 1j).dtype
        g = jnp.asarray(_RADAU_TINV[0] @ _RADAU_AINV, cdtype) @ r.reshape(2, n).astype(cdtype)
        dw = algebra.lu_solve(fac.lu, fac.piv, g / fac.h)
        return jnp.stack([2.0 * jnp.real(_RADAU_T[i, 0] * dw) for i in range(2)]).reshape(-1).astype(r.dtype)

    empty = None if isinstance(algebra, DenseAlgebra) else (lambda dtype: algebra.empty_lu(n, _complex(dtype)))
    return IterationMatrix(n, True, factor, solve, empty)


class RadauIntegrator(_ImplicitBase):
    """Two-stage Radau IIA, third order, L-stable (Drake's ``RadauIntegrator<T, 2>``, "Radau3").

    c = (1/3, 1), A = ((5/12, -1/12), (3/4, 1/4)), b = (3/4, 1/4); stiffly accurate, so the end point
    is the last stage. The 2n stage equations are solved by simplified Newton with the matrix
    I - h (A kron J), factored in the eigenbasis of A as Hairer's RADAU5 does (one complex n x n LU).
    The error estimate compares the end point with the implicit trapezoid rule, as Drake's, but
    linearized at the end point (one Newton step with the cached Jacobian instead of a Newton solve):
    ``(I - h/2 J)^-1 (x_new - x - h/2 (f(t, x) + f(t + h, x_new)))``, third order, bounded on stiff
    systems. Drake's accuracy defaults: 1e-3, at most 1e-2. In fixed-step mode no estimate is made.
    """

    name: ClassVar[str] = "radau3"
    order: ClassVar[int] = 3
    error_estimate_order: ClassVar[int] = 3
    num_stages: ClassVar[int] = 0  # derivative evaluations are counted as they happen
    default_accuracy: ClassVar[float] = 1e-3
    loosest_accuracy: ClassVar[float] = 1e-2
    stage_count: ClassVar[int] = 2

    def iteration_matrices(self, n: int) -> tuple[IterationMatrix, ...]:
        # the stage equations' (in A's eigenbasis, complex n x n); the estimator's I - (h/2) J
        a = self.algebra()
        return (_radau_matrix(n, a), dense_matrix(n, _half_matrix, a))

    def _step(
        self, f: VectorField, t: Array, x: Array, h: Array, cache: NewtonCache, scale: Array
    ) -> tuple[Array, Array, Array, NewtonCache, Array, Array]:
        n = x.shape[0]
        A = jnp.asarray(_RADAU_A, x.dtype)

        def jac() -> Array:
            return self.algebra().jacobian(lambda xx: f(t, xx), x)

        residual = _collocation_residual(f, t, x, h, A, _RADAU_C)

        # Hairer's (and Drake's) start: Z = 0. The update norm is that of the stage increments, each
        # scaled by the state's.
        Z, ok, cache, c_main = self._solve(residual, jnp.zeros((2 * n,), x.dtype), cache, 0, h, jac, jnp.tile(scale, 2))
        x1 = x + Z.reshape(2, n)[1]
        if self.get_fixed_step_mode():  # no error estimate to make
            return x1, jnp.zeros_like(x1), ok, cache, _stats(c_main), 2 * c_main[0] + c_main[1]
        # The error estimate: the implicit trapezoid rule through the end point, linearized there (one
        # Newton step from x1 with the cached Jacobian): (I - h/2 J) e = x1 - x - h/2 (f(t, x) + f(t + h,
        # x1)). The explicit trapezoid difference alone holds h f(x1), which on a stiff system is
        # rounding error times the stiffness (a 1e20 spring drives the step to 1e-10); the filter
        # bounds it, as Hairer's RADAU5 filters its estimate with (I - h gamma J)^-1.
        sg = jax.lax.stop_gradient
        f0, f1 = f(t, x), f(t + h, x1)
        raw = x1 - x - 0.5 * h * (f0 + f1)
        matrix = self.iteration_matrices(n)[1]
        fac, cache, refactored = ensure_factored(cache, 1, matrix, sg(h))
        err = matrix.solve(fac, sg(raw))
        zero = jnp.zeros((), jnp.int32)
        counts = _stats(c_main, jnp.stack([zero, zero, refactored.astype(jnp.int32)]), estimator_evals=2)
        evals = 2 * c_main[0] + c_main[1] + 2
        return x1, err, ok, cache, counts, evals


# Three-stage Radau IIA (Hairer & Wanner's RADAU5, order 5): c, A (its last row is b: stiffly accurate),
# A^-1 = T diag(gamma, lambda, conj lambda) T^-1 with one real eigenvalue gamma and a complex pair, and the
# embedded error estimate's weights E (Hairer's DD1..DD3; scipy's Radau uses the same)
_S6 = float(np.sqrt(6.0))
_RADAU5_C = ((4.0 - _S6) / 10.0, (4.0 + _S6) / 10.0, 1.0)
_RADAU5_A = np.array(
    [
        [(88.0 - 7.0 * _S6) / 360.0, (296.0 - 169.0 * _S6) / 1800.0, (-2.0 + 3.0 * _S6) / 225.0],
        [(296.0 + 169.0 * _S6) / 1800.0, (88.0 + 7.0 * _S6) / 360.0, (-2.0 - 3.0 * _S6) / 225.0],
        [(16.0 - _S6) / 36.0, (16.0 + _S6) / 36.0, 1.0 / 9.0],
    ]
)
_RADAU5_AINV = np.linalg.inv(_RADAU5_A)
_RADAU5_E = np.array([-13.0 - 7.0 * _S6, -13.0 + 7.0 * _S6, -1.0]) / 3.0


def _radau5_basis() -> tuple[float, complex, np.ndarray, np.ndarray]:
    w, V = np.linalg.eig(_RADAU5_AINV)
    real = int(np.argmin(np.abs(w.imag)))
    pair = int(np.argmax(w.imag))
    v0 = V[:, real].real / np.linalg.norm(V[:, real].real)
    T = np.stack([v0.astype(complex), V[:, pair], V[:, pair].conj()], axis=1)
    return float(w[real].real), complex(w[pair]), T, np.linalg.inv(T)


_RADAU5_GAMMA, _RADAU5_LAMBDA, _RADAU5_T, _RADAU5_TINV = _radau5_basis()
# M^-1 r needs (T^-1 A^-1) r / h: its real row (for gamma) and its first complex row (for lambda)
_RADAU5_G_REAL = (_RADAU5_TINV[0] @ _RADAU5_AINV).real
_RADAU5_G_COMPLEX = _RADAU5_TINV[1] @ _RADAU5_AINV


def _radau5_matrix(n: int, algebra: Any = DENSE) -> IterationMatrix:
    """The three-stage Newton matrix I - h (A kron J), factored as RADAU5 does: in the eigenbasis of
    A^-1 it splits into one real n x n matrix gamma/h I - J and one complex n x n matrix lambda/h I - J
    (the third block is the conjugate of the second). Both LUs travel as one `Factorization` (tuples);
    the real one also filters the error estimate. Dense or banded (``algebra``)."""

    def empty(dtype: Any) -> tuple[Any, Any]:
        (lu_r, piv_r), (lu_c, piv_c) = algebra.empty_lu(n, dtype), algebra.empty_lu(n, _complex(dtype))
        return (lu_r, lu_c), (piv_r, piv_c)

    def factor(jac: Array, h: Array) -> tuple[Any, Any]:
        eye = algebra.eye(n, jac.dtype)
        lu_r, piv_r = algebra.lu_factor((_RADAU5_GAMMA / h) * eye - jac)
        cj = jac.astype(_complex(jac.dtype))
        lu_c, piv_c = algebra.lu_factor((_RADAU5_LAMBDA / h) * eye.astype(cj.dtype) - cj)
        return (lu_r, lu_c), (piv_r, piv_c)

    def solve(fac: Factorization, r: Array) -> Array:
        R = r.reshape(3, n)
        (lu_r, lu_c), (piv_r, piv_c) = fac.lu, fac.piv
        cdtype = _complex(r.dtype)
        g0 = jnp.asarray(_RADAU5_G_REAL, r.dtype) @ R / fac.h
        g1 = jnp.asarray(_RADAU5_G_COMPLEX, cdtype) @ R.astype(cdtype) / fac.h
        w0 = algebra.lu_solve(lu_r, piv_r, g0)
        w1 = algebra.lu_solve(lu_c, piv_c, g1)
        rows = [_RADAU5_T[i, 0].real * w0 + 2.0 * jnp.real(_RADAU5_T[i, 1] * w1) for i in range(3)]
        return jnp.stack(rows).reshape(-1).astype(r.dtype)

    return IterationMatrix(n, True, factor, solve, empty)


def radau5_error_filter(fac: Factorization, v: Array, algebra: Any = DENSE) -> Array:
    """(gamma/h I - J)^-1 v with the real block of a three-stage Radau factorization."""
    (lu_r, _), (piv_r, _) = fac.lu, fac.piv
    return algebra.lu_solve(lu_r, piv_r, v).astype(v.dtype)


class Radau5Integrator(_ImplicitBase):
    """Three-stage Radau IIA, fifth order, L-stable, stiffly accurate: Hairer & Wanner's RADAU5
    (*Solving ODEs II*, IV.8), on Drake's integrator options and error control. Drake has no
    three-stage Radau (its ``RadauIntegrator`` takes 1 or 2 stages): the nearest are scipy's
    ``solve_ivp(method="Radau")`` and Hairer's Fortran code, whose method and error estimate this is.

    c = ((4 - sqrt 6)/10, (4 + sqrt 6)/10, 1). The 3n stage equations are solved by simplified Newton with
    I - h (A kron J), split in the eigenbasis of A^-1 into one real and one complex n x n system (one
    real and one complex LU, reused across iterations and steps as the other implicit methods' are:
    Drake's trials, refactored when the step changes by more than 20%). The error estimate is RADAU5's:
    ``e = (gamma/h I - J)^-1 (f(t, x) + (E . Z)/h)`` with Hairer's weights E (the difference from an
    embedded third-order method, filtered by the real block so that it stays bounded on stiff
    components); where it would reject the step it is refined once, as RADAU5 does on first and rejected
    steps: ``(gamma/h I - J)^-1 (f(t, x + e) + (E . Z)/h)``. Its local term is O(h^4)
    (``error_estimate_order`` 4).

    Accuracy defaults (Drake-style; this method is not in Drake): 1e-5, at most 1e-2. In fixed-step mode
    no estimate is made. Derivatives of a step come from the implicit function theorem on the converged
    stage equations, as for the other implicit methods. Error control measures Drake's absolute
    weighted infinity norm (not RADAU5's rtol/atol mix): give large states weights (``qbar_weight``,
    ``z_weight``) or scale them.
    """

    name: ClassVar[str] = "radau5"
    order: ClassVar[int] = 5
    error_estimate_order: ClassVar[int] = 4
    num_stages: ClassVar[int] = 0  # derivative evaluations are counted as they happen
    default_accuracy: ClassVar[float] = 1e-5
    loosest_accuracy: ClassVar[float] = 1e-2
    stage_count: ClassVar[int] = 3

    def iteration_matrices(self, n: int) -> tuple[IterationMatrix, ...]:
        return (_radau5_matrix(n, self.algebra()),)

    def init_newton_cache(self, x: Array) -> NewtonCache:
        """An empty cache, with room for the last attempt (its start, end, stages and step, and whether
        its Newton iteration converged) from which the next starting guess is extrapolated."""
        n, dt = x.shape[0], x.dtype
        nan = jnp.full((), jnp.nan, dt)
        last = (nan, jnp.zeros((n,), dt), nan, jnp.zeros((n,), dt), jnp.zeros((3 * n,), dt), nan, jnp.array(False))
        return super().init_newton_cache(x)._replace(extra=last)

    @staticmethod
    def _starting_guess(t: Array, x: Array, h: Array, last: Any) -> Array:
        """RADAU5's starting values: the stages of the last attempt, as the collocation polynomial p
        through (0, 0), (c1, z1), (c2, z2), (1, z3) in units of its step, continued. A step that starts
        where the last one ended (it was accepted and no event changed the state) starts from p(1 +
        c_i r) - z3, a retry of a rejected step from the same point from p(c_i r) (r: the step ratio);
        anything else (the first step, after an event or a Newton failure) from zero."""
        t0, x0, t1, x1, Z, h_last, ok = last
        n = x.shape[0]
        nodes = (0.0,) + _RADAU5_C
        r = h / h_last
        after = ok & (jnp.abs(t - t1) < 0.5 * jnp.abs(h_last)) & jnp.all(x == x1)
        retry = ok & (t == t0) & jnp.all(x == x0)
        theta = jnp.asarray(_RADAU5_C, x.dtype) * r + jnp.where(after, 1.0, 0.0)
        z = Z.reshape(3, n)

        def basis(j: int) -> Array:
            out = jnp.ones_like(theta)
            for m, node in enumerate(nodes):
                if m != j:
                    out = out * (theta - node) / (nodes[j] - node)
            return out

        L = jnp.stack([basis(j) for j in (1, 2, 3)], axis=1)  # L[i, j-1] = L_j(theta_i)
        guess = L @ z - jnp.where(after, 1.0, 0.0) * z[2]
        use = (after | retry) & jnp.all(jnp.isfinite(guess))
        return jnp.where(use, guess, 0.0).reshape(-1)

    def _step(
        self, f: VectorField, t: Array, x: Array, h: Array, cache: NewtonCache, scale: Array
    ) -> tuple[Array, Array, Array, NewtonCache, Array, Array]:
        n = x.shape[0]
        A = jnp.asarray(_RADAU5_A, x.dtype)

        def jac() -> Array:
            return self.algebra().jacobian(lambda xx: f(t, xx), x)

        residual = _collocation_residual(f, t, x, h, A, _RADAU5_C)

        sg = jax.lax.stop_gradient
        last = cache.extra
        guess = sg(self._starting_guess(t, x, h, last)) if last else jnp.zeros((3 * n,), x.dtype)
        Z, ok, cache, c_main = self._solve(residual, guess, cache, 0, h, jac, jnp.tile(scale, 3))
        x1 = x + Z.reshape(3, n)[2]
        if last:
            cache = cache._replace(extra=(sg(t), sg(x), sg(t + h), sg(x1), sg(Z), sg(h), ok))
        if self.get_fixed_step_mode():
            return x1, jnp.zeros_like(x1), ok, cache, _stats(c_main), 3 * c_main[0] + c_main[1]
        fac = cache.factors[0]
        Zs, hs = sg(Z).reshape(3, n), sg(h)
        f2 = jnp.asarray(_RADAU5_E, x.dtype) @ Zs / hs
        f0 = sg(f(t, x))
        # (the factorization may be for a step within 20% of h: the filter is that approximate, as the
        # simplified Newton matrix is)
        err = radau5_error_filter(fac, f0 + f2, self.algebra())
        acc = self.get_accuracy_in_use()

        def refine() -> Array:
            return radau5_error_filter(fac, sg(f(t, x + err)) + f2, self.algebra())

        refined = (jnp.max(jnp.abs(err)) > acc) if n else jnp.array(False)
        err = jax.lax.cond(refined, refine, lambda: err)
        zero = jnp.zeros((), jnp.int32)
        counts = _stats(c_main, jnp.stack([zero, zero, zero]), estimator_evals=1 + refined.astype(jnp.int32))
        evals = 3 * c_main[0] + c_main[1] + 1 + refined.astype(jnp.int32)
        return x1, err, ok, cache, counts, evals
