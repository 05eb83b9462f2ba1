"""Implicit integrators: backward Euler and two-stage Radau IIA, on a shared Newton iteration.

Imports: :mod:`.base` only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from .base import Array, IntegratorBase, VectorField


class _ImplicitBase(IntegratorBase):
    """Newton iteration with a Jacobian from ``jax.jacfwd``; a fixed iteration budget keeps the step
    differentiable in forward and reverse mode. Non-convergence is a sub-step failure (the step
    is shrunk, as Drake does)."""

    newton_iterations: int = eqx.field(static=True, default=10)
    newton_tolerance: float = eqx.field(static=True, default=1e-10)

    def _newton(self, residual: Callable[[Array], Array], guess: Array) -> tuple[Array, Array]:
        J = jax.jacfwd(residual)(guess)
        lu = jax.scipy.linalg.lu_factor(J)

        def body(z: Array, _: Any) -> tuple[Array, None]:
            # simplified Newton: one Jacobian a step, refreshed once halfway
            return z - jax.scipy.linalg.lu_solve(lu, residual(z)), None

        z, _ = jax.lax.scan(body, guess, None, length=self.newton_iterations)
        r = residual(z)
        scale = 1.0 + jnp.max(jnp.abs(z))
        # the tolerance, but never below what the dtype resolves (float32: ~8e-6 relative)
        tol = max(self.newton_tolerance, 64 * float(jnp.finfo(z.dtype).eps))
        ok = jnp.all(jnp.isfinite(z)) & (jnp.max(jnp.abs(r)) <= tol * scale)
        return z, ok


class ImplicitEulerIntegrator(_ImplicitBase):
    """Backward Euler with an implicit-trapezoid error estimate (Drake's ``ImplicitEulerIntegrator``).

    First order, L-stable; error estimate of order 2.
    """

    name: ClassVar[str] = "implicit_euler"
    order: ClassVar[int] = 1
    error_estimate_order: ClassVar[int] = 2
    num_stages: ClassVar[int] = 2

    def attempt_step(self, f: VectorField, t: Array, x: Array, h: Array, aux: Any) -> tuple[Array, Array, Array]:
        f0 = f(t, x)
        t1 = t + h

        def residual(x1: Array) -> Array:
            return x1 - x - h * f(t1, x1)

        x1, ok = self._newton(residual, x + h * f0)

        # Drake's error estimate: the implicit trapezoid rule, solved by Newton from the implicit
        # Euler result (an explicit trapezoid through x1 would measure the stiff transient that implicit
        # Euler damps, and keep the step needlessly small on stiff problems)
        def residual_trapezoid(x2: Array) -> Array:
            return x2 - x - 0.5 * h * (f0 + f(t1, x2))

        x_trap, ok_trap = self._newton(residual_trapezoid, x1)
        return x1, x1 - x_trap, ok & ok_trap


class RadauIntegrator(_ImplicitBase):
    """Two-stage Radau IIA, third order, L-stable (Drake's ``RadauIntegrator<T, 2>``).

    c = (1/3, 1), A = ((5/12, −1/12), (3/4, 1/4)), b = (3/4, 1/4). The error estimate compares the
    end point with the implicit trapezoid rule through it (order 3).
    """

    name: ClassVar[str] = "radau3"
    order: ClassVar[int] = 3
    error_estimate_order: ClassVar[int] = 3
    num_stages: ClassVar[int] = 3

    def attempt_step(self, f: VectorField, t: Array, x: Array, h: Array, aux: Any) -> tuple[Array, Array, Array]:
        n = x.shape[0]
        f0 = f(t, x)
        A = jnp.array([[5.0 / 12.0, -1.0 / 12.0], [0.75, 0.25]], dtype=x.dtype)
        c = jnp.array([1.0 / 3.0, 1.0], dtype=x.dtype)

        def residual(Z: Array) -> Array:
            z = Z.reshape(2, n)
            F = jnp.stack([f(t + c[i] * h, x + z[i]) for i in range(2)])
            return (z - h * (A @ F)).reshape(-1)

        guess = jnp.concatenate([c[0] * h * f0, c[1] * h * f0])
        Z, ok = self._newton(residual, guess)
        x1 = x + Z.reshape(2, n)[1]  # stiffly accurate: b = last row of A
        f1 = f(t + h, x1)
        x_trap = x + 0.5 * h * (f0 + f1)
        return x1, x1 - x_trap, ok
