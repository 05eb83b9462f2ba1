"""The continuous trajectory of a run: every accepted step and its continuous extension (Drake's
``StartDenseIntegration`` / ``get_dense_output``, a ``PiecewisePolynomial`` whose segments are the steps;
Diffrax's ``SaveAt(dense=True)`` solution with ``evaluate`` / ``derivative``).

`DenseTrajectory` holds the steps in fixed-size arrays (``capacity`` segments, the first ``count`` of
them used), so it is a pytree that ``jit``, ``vmap`` and ``grad`` go through; `DenseTrajectory.evaluate`
finds the segment of ``t`` and calls the integrator's own interpolant. A run records it when asked
(``simulate(..., save_at=js.SaveAt(trajectory=capacity))``); runs that do not ask carry nothing.

Imports: `integrators.base` only.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from .integrators.base import IntegratorBase


Array = jax.Array


class SegmentBuffer(NamedTuple):
    """The loop's record of accepted steps, packed in one buffer so that each step attempt writes one
    row (on a CPU every in-place write is a kernel of its own, ~0.4 us a step whatever its size: two
    buffers cost twice): ``rows[k] = [t_k, h_k, x_k..., x_new_k..., interpolation data...]`` (start
    time, step size, the states at its ends, the data rows flattened) in the wider of the time's and
    the state's dtypes; ``taken``, the number of steps accepted so far (which may exceed the capacity:
    the rest are not kept). Every attempt writes its row at ``taken`` (a rejected one is overwritten
    by the next), and a run past the capacity writes into one spare row: an in-place update each step,
    no read, no select. Rows at or past ``taken`` are not steps (`segments` reads the first
    ``taken``)."""

    rows: Array
    taken: Array

    @staticmethod
    def empty(capacity: int, x: Array, data_shape: tuple[int, ...], dtype: Any) -> SegmentBuffer:
        n = x.shape[0]
        width = 2 + n * (2 + (int(data_shape[0]) if len(data_shape) > 1 else 0))
        return SegmentBuffer(
            jnp.zeros((capacity + 1, width), jnp.result_type(dtype, x.dtype)), jnp.zeros((), jnp.int32)
        )

    @property
    def capacity(self) -> int:
        """Rows kept (the spare row is not one)."""
        return int(self.rows.shape[0]) - 1

    def written(self, accept: Array, t: Array, h: Array, x: Array, x_new: Array, data: Array) -> SegmentBuffer:
        """This buffer with the attempt written at row ``taken`` (the spare row once full), and
        ``taken`` advanced if it was accepted."""
        i = jnp.minimum(self.taken, self.capacity)
        dtype = self.rows.dtype
        parts = [jnp.stack([t, h]).astype(dtype), x.astype(dtype), x_new.astype(dtype)]
        if self.rows.shape[1] > 2 + 2 * x.shape[0]:
            parts.append(jnp.reshape(data, (-1,)).astype(dtype))
        row = jnp.concatenate(parts)[None]
        rows = jax.lax.dynamic_update_slice(self.rows, row, (i, jnp.zeros((), i.dtype)))
        return SegmentBuffer(rows, self.taken + accept.astype(jnp.int32))

    def segments(self, n: int, x_dtype: Any, t_dtype: Any) -> tuple[Array, Array, Array, Array, Array]:
        """The kept rows unpacked for a state of size ``n``: start times (``+inf`` past the steps taken,
        so that no time finds them), step sizes, the states at the starts and ends, and the
        interpolation data, shape (capacity, data rows, n)."""
        cap = self.capacity
        body = self.rows[:cap]
        kept = jnp.arange(cap) < self.taken
        t = jnp.where(kept, body[:, 0], jnp.inf).astype(t_dtype)
        h = body[:, 1].astype(t_dtype)
        x, x_new = body[:, 2 : 2 + n].astype(x_dtype), body[:, 2 + n : 2 + 2 * n].astype(x_dtype)
        data = body[:, 2 + 2 * n :].reshape(cap, -1, n) if n else jnp.zeros((cap, 0, 0), x_dtype)
        return t, h, x, x_new, data.astype(x_dtype)


class DenseTrajectory(eqx.Module):
    """The continuous trajectory of a run: its accepted steps, each with the integrator's continuous
    extension (Dormand-Prince's 4th-order interpolant; cubic Hermite for the other explicit Runge-Kutta
    methods). A pytree: evaluate it under ``jit``, ``vmap`` and ``grad`` (with respect to what the run
    depended on, or to ``t``).

    **Fields:** `t` (segment start times, s; ``+inf`` past the last), `h` (their lengths, s), `x` and
    `x_new` (states at their ends), `data` (interpolation data), `count` (steps taken: more than
    ``capacity`` means the trajectory is incomplete, see `complete`), `integrator` (whose interpolant
    evaluates them).
    """

    t: Array
    h: Array
    x: Array
    x_new: Array
    data: Array
    count: Array
    integrator: IntegratorBase = eqx.field(static=True)

    @property
    def capacity(self) -> int:
        """Rows kept (``SaveAt(trajectory=...)``)."""
        return int(self.t.shape[0])

    def get_number_of_segments(self) -> Array:
        """Segments (steps) kept (Drake's ``get_number_of_segments``)."""
        return jnp.minimum(self.count, self.capacity)

    def complete(self) -> Array:
        """Whether every step of the run is kept (False when the run took more than ``capacity``)."""
        return self.count <= self.capacity

    def start_time(self) -> Array:
        """Start of the first segment, s (Drake's ``start_time``)."""
        return self.t[0]

    def end_time(self) -> Array:
        """End of the last segment kept, s (Drake's ``end_time``)."""
        last = jnp.clip(self.get_number_of_segments() - 1, 0, self.capacity - 1)
        return self.t[last] + self.h[last]

    def evaluate(self, t: Any) -> Array:
        """The state at time ``t`` (a scalar), s: the interpolant of the segment that holds it. Outside
        [start_time, end_time] the first or last segment's end value is held (as Drake's
        PiecewisePolynomial). Vectorize over times with ``jax.vmap``."""
        t = jnp.asarray(t, self.t.dtype)
        n = self.get_number_of_segments()
        i = jnp.clip(jnp.searchsorted(self.t, t, side="right") - 1, 0, jnp.maximum(n - 1, 0))
        h = self.h[i]
        theta = (t - self.t[i]) / jnp.where(h > 0, h, 1.0)
        # (held outside [0, 1] by selects, not clip: clip's derivative is halved where it touches a bound,
        # and segment ends are where a derivative is most often asked for)
        theta = jnp.where(theta < 0.0, 0.0, jnp.where(theta > 1.0, 1.0, theta))
        return self.integrator.interpolate(self.x[i], self.x_new[i], h, self.data[i], theta)

    def derivative(self, t: Any) -> Array:
        """d/dt of `evaluate` at ``t``: the interpolant's derivative (an approximation of the vector field
        along the trajectory of the same order)."""
        t = jnp.asarray(t, self.t.dtype)
        return jax.jvp(self.evaluate, (t,), (jnp.ones_like(t),))[1]


__all__ = ["DenseTrajectory", "SegmentBuffer"]
