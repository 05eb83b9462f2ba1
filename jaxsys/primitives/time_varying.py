"""Time-varying affine and linear systems (Drake's ``TimeVaryingAffineSystem`` / ``TimeVaryingLinearSystem``
and ``TrajectoryAffineSystem`` / ``TrajectoryLinearSystem``), continuous or discrete.

Imports (within jaxsys): the framework's ``context``, ``errors``, ``leaf_system``; ``primitives/sources``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from ..framework.context import Context
from ..framework.errors import DeclarationError
from ..framework.leaf_system import LeafSystem
from .sources import PiecewisePolynomial


class TimeVaryingAffineSystem(LeafSystem):
    """ẋ = A(t) x + B(t) u + f0(t), y = C(t) x + D(t) u + y0(t) (Drake's ``TimeVaryingAffineSystem``);
    with ``time_period > 0`` a discrete system x[n+1] = A(t) x[n] + B(t) u[n] + f0(t), updated every
    period from t = 0 (t the update time).

    ``A``, ``B``, ``f0``, ``C``, ``D``, ``y0``: functions of t (traceable) returning arrays of shapes
    (n, n), (n, m), (n,), (p, n), (p, m), (p,); None for zero. Ports ``u0`` (m > 0) and ``y0`` (p > 0).
    The state is continuous (or discrete group 0) of size ``num_states``.
    """

    fns: tuple[Any, ...] = eqx.field(static=True)
    n: int = eqx.field(static=True)
    m: int = eqx.field(static=True)
    p: int = eqx.field(static=True)
    time_period: float = eqx.field(static=True)

    def __init__(
        self,
        A: Callable | None,
        B: Callable | None,
        f0: Callable | None,
        C: Callable | None,
        D: Callable | None,
        y0: Callable | None,
        num_states: int,
        num_inputs: int,
        num_outputs: int,
        time_period: float = 0.0,
        name: str = "",
    ) -> None:
        super().__init__(name)
        self.fns = (A, B, f0, C, D, y0)
        self.n, self.m, self.p = int(num_states), int(num_inputs), int(num_outputs)
        self.time_period = float(time_period)
        # shapes are checked once, at t = 0, with named errors
        expect = {
            "A": (self.n, self.n),
            "B": (self.n, self.m),
            "f0": (self.n,),
            "C": (self.p, self.n),
            "D": (self.p, self.m),
            "y0": (self.p,),
        }
        for (key, shape), fn in zip(expect.items(), self.fns):
            if fn is None:
                continue
            got = jax.eval_shape(fn, jnp.zeros(())).shape
            if tuple(got) != shape:
                raise DeclarationError(
                    f"TimeVaryingAffineSystem {name!r}: {key}(t) must have shape {shape} (n={self.n} states, "
                    f"m={self.m} inputs, p={self.p} outputs); it returns {tuple(got)}."
                )
        if self.time_period > 0:
            self.declare_discrete_state(self.n)
            self.declare_periodic_discrete_update_event(self.time_period, 0.0, self._update)
        elif self.n:
            self.declare_continuous_state(self.n)
        if self.m:
            self.declare_vector_input_port("u0", self.m)
        if self.p:
            feed = D is not None
            self.declare_vector_output_port("y0", self.p, self.calc_y, direct_feedthrough=feed if not feed else None)

    def _mat(self, k: int, t: Any, shape: tuple[int, ...], dtype: Any) -> jax.Array:
        fn = self.fns[k]
        return jnp.zeros(shape, dtype) if fn is None else jnp.asarray(fn(t), dtype)

    def _x(self, context: Context) -> jax.Array:
        return context.get_discrete_state(0) if self.time_period > 0 else context.get_continuous_state_vector()

    def _u(self, context: Context, dtype: Any) -> jax.Array:
        return self.get_input_port(0).eval(context) if self.m else jnp.zeros((0,), dtype)

    def _f(self, context: Context) -> jax.Array:
        t = context.get_time()
        x = self._x(context)
        u = self._u(context, x.dtype)
        n, m = self.n, self.m
        return (
            self._mat(0, t, (n, n), x.dtype) @ x + self._mat(1, t, (n, m), x.dtype) @ u + self._mat(2, t, (n,), x.dtype)
        )

    def do_calc_time_derivatives(self, context: Context) -> jax.Array:
        return self._f(context)

    def _update(self, context: Context, ds: Any) -> jax.Array:
        return self._f(context)

    def calc_y(self, context: Context) -> jax.Array:
        """C(t) x + D(t) u + y0(t)."""
        t = context.get_time()
        x = self._x(context)
        p, n, m = self.p, self.n, self.m
        y = self._mat(3, t, (p, n), x.dtype) @ x + self._mat(5, t, (p,), x.dtype)
        if self.fns[4] is not None:
            y = y + self._mat(4, t, (p, m), x.dtype) @ self._u(context, x.dtype)
        return y

    def A(self, t: Any) -> jax.Array:
        """A(t) (Drake's ``A(t)``)."""
        return self._mat(0, jnp.asarray(t), (self.n, self.n), jnp.result_type(float))

    def B(self, t: Any) -> jax.Array:
        """B(t)."""
        return self._mat(1, jnp.asarray(t), (self.n, self.m), jnp.result_type(float))

    def C(self, t: Any) -> jax.Array:
        """C(t)."""
        return self._mat(3, jnp.asarray(t), (self.p, self.n), jnp.result_type(float))

    def D(self, t: Any) -> jax.Array:
        """D(t)."""
        return self._mat(4, jnp.asarray(t), (self.p, self.m), jnp.result_type(float))


def TimeVaryingLinearSystem(  # noqa: N802 - Drake's class name
    A: Callable | None,
    B: Callable | None,
    C: Callable | None,
    D: Callable | None,
    num_states: int,
    num_inputs: int,
    num_outputs: int,
    time_period: float = 0.0,
    name: str = "",
) -> TimeVaryingAffineSystem:
    """ẋ = A(t) x + B(t) u, y = C(t) x + D(t) u (Drake's ``TimeVaryingLinearSystem``)."""
    return TimeVaryingAffineSystem(A, B, None, C, D, None, num_states, num_inputs, num_outputs, time_period, name)


def _from_trajectory(traj: PiecewisePolynomial | None, shape: tuple[int, ...], what: str) -> Callable | None:
    if traj is None:
        return None
    size = 1
    for s in shape:
        size *= s
    if traj.rows() != size:
        raise DeclarationError(
            f"Trajectory system: {what} must have {size} rows (a {shape} matrix, row-major); got {traj.rows()}."
        )
    return lambda t: traj.value(t).reshape(shape)


def TrajectoryAffineSystem(  # noqa: N802 - Drake's class name
    A: PiecewisePolynomial | None,
    B: PiecewisePolynomial | None,
    f0: PiecewisePolynomial | None,
    C: PiecewisePolynomial | None,
    D: PiecewisePolynomial | None,
    y0: PiecewisePolynomial | None,
    num_states: int,
    num_inputs: int,
    num_outputs: int,
    time_period: float = 0.0,
    name: str = "",
) -> TimeVaryingAffineSystem:
    """A [`TimeVaryingAffineSystem`][jaxsys.TimeVaryingAffineSystem] whose matrices are trajectories (Drake's
    ``TrajectoryAffineSystem``): each a [`PiecewisePolynomial`][jaxsys.PiecewisePolynomial] of the matrix flattened
    row-major (e.g. ``K`` of a finite-horizon LQR); None for zero."""
    n, m, p = num_states, num_inputs, num_outputs
    A_, B_, f0_, C_, D_, y0_ = (
        _from_trajectory(tr, shape, what)
        for tr, shape, what in (
            (A, (n, n), "A"),
            (B, (n, m), "B"),
            (f0, (n,), "f0"),
            (C, (p, n), "C"),
            (D, (p, m), "D"),
            (y0, (p,), "y0"),
        )
    )
    return TimeVaryingAffineSystem(A_, B_, f0_, C_, D_, y0_, n, m, p, time_period, name)


def TrajectoryLinearSystem(  # noqa: N802 - Drake's class name
    A: PiecewisePolynomial | None,
    B: PiecewisePolynomial | None,
    C: PiecewisePolynomial | None,
    D: PiecewisePolynomial | None,
    num_states: int,
    num_inputs: int,
    num_outputs: int,
    time_period: float = 0.0,
    name: str = "",
) -> TimeVaryingAffineSystem:
    """[`TrajectoryAffineSystem`][jaxsys.TrajectoryAffineSystem] without f0 and y0 (Drake's
    ``TrajectoryLinearSystem``)."""
    return TrajectoryAffineSystem(A, B, None, C, D, None, num_states, num_inputs, num_outputs, time_period, name)


__all__ = ["TimeVaryingAffineSystem", "TimeVaryingLinearSystem", "TrajectoryAffineSystem", "TrajectoryLinearSystem"]
