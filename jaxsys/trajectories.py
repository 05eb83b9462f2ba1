"""Trajectories (Drake's common/trajectories): `PiecewisePolynomial`, a vector function of time that
is polynomial on each segment. Used by `TrajectorySource`, trajectory optimization and the
time-varying LQR.

Imports (within jaxsys): the framework's ``errors`` only.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .framework.errors import DeclarationError


class PiecewisePolynomial(eqx.Module):
    """A vector function of time, polynomial on each segment (Drake's ``PiecewisePolynomial``).

    **Fields:**
    - `breaks`: segment boundaries, shape (n + 1,), increasing.
    - `coeffs`: shape (n, order + 1, size): on segment i, value = Σ_k coeffs[i, k] (t − breaks[i])^k.

    Outside [breaks[0], breaks[-1]] the first/last segment's polynomial is held at its end value.
    It is a pytree: ``jax.grad`` with respect to ``coeffs`` works (the decision variables of
    trajectory optimization).
    """

    breaks: jax.Array
    coeffs: jax.Array

    @staticmethod
    def zero_order_hold(times: Any, values: Any) -> PiecewisePolynomial:
        """Piecewise constant: value[i] on [times[i], times[i+1]) (Drake: ``ZeroOrderHold``).

        ``values`` has shape (len(times), size) (one row per time, the last unused but kept as in Drake).
        """
        t, v = _tv(times, values)
        return PiecewisePolynomial(t, v[:-1, None, :])

    @staticmethod
    def first_order_hold(times: Any, values: Any) -> PiecewisePolynomial:
        """Piecewise linear through (times[i], values[i]) (Drake: ``FirstOrderHold``)."""
        t, v = _tv(times, values)
        slope = (v[1:] - v[:-1]) / (t[1:] - t[:-1])[:, None]
        return PiecewisePolynomial(t, jnp.stack([v[:-1], slope], axis=1))

    @staticmethod
    def cubic_hermite(times: Any, values: Any, derivatives: Any) -> PiecewisePolynomial:
        """Piecewise cubic matching values and derivatives at the times (Drake: ``CubicHermite``)."""
        t, v = _tv(times, values)
        d = jnp.asarray(derivatives, v.dtype).reshape(v.shape)
        h = (t[1:] - t[:-1])[:, None]
        c0, c1 = v[:-1], d[:-1]
        c2 = (3 * (v[1:] - v[:-1]) / h - 2 * d[:-1] - d[1:]) / h
        c3 = (2 * (v[:-1] - v[1:]) / h + d[:-1] + d[1:]) / (h * h)
        return PiecewisePolynomial(t, jnp.stack([c0, c1, c2, c3], axis=1))

    def rows(self) -> int:
        """Size of the value vector."""
        return int(self.coeffs.shape[2])

    def start_time(self) -> jax.Array:
        """Drake: ``start_time``."""
        return self.breaks[0]

    def end_time(self) -> jax.Array:
        """Drake: ``end_time``."""
        return self.breaks[-1]

    def value(self, t: Any, derivative_order: int = 0) -> jax.Array:
        """The value (or a derivative) at time t, shape (size,) (Drake: ``value``)."""
        t = jnp.clip(jnp.asarray(t, self.breaks.dtype), self.breaks[0], self.breaks[-1])
        i = jnp.clip(jnp.searchsorted(self.breaks, t, side="right") - 1, 0, self.coeffs.shape[0] - 1)
        tau = t - self.breaks[i]
        c = self.coeffs[i]  # (order + 1, size)
        order = c.shape[0] - 1
        out = jnp.zeros_like(c[0])
        for k in range(derivative_order, order + 1):
            factor = float(np.prod(np.arange(k - derivative_order + 1, k + 1))) if derivative_order else 1.0
            out = out + factor * c[k] * tau ** (k - derivative_order)
        return out


def _tv(times: Any, values: Any) -> tuple[jax.Array, jax.Array]:
    t = jnp.asarray(times, float).reshape(-1)
    v = jnp.asarray(values, float)
    if v.ndim == 1:
        v = v[:, None]
    if v.shape[0] != t.shape[0] or t.shape[0] < 2:
        raise DeclarationError(
            f"PiecewisePolynomial: need at least 2 times and one value row per time; got times {t.shape}, "
            f"values {v.shape}."
        )
    if not isinstance(times, jax.core.Tracer) and np.any(np.diff(np.asarray(times, float).reshape(-1)) <= 0):
        raise DeclarationError("PiecewisePolynomial: times must be strictly increasing.")
    return t, v


__all__ = ["PiecewisePolynomial"]
