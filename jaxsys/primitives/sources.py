"""Signal sources: TrajectorySource over a piecewise polynomial, and RandomSource."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context, State
from ..framework.errors import DeclarationError
from ..framework.leaf_system import LeafSystem


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


class TrajectorySource(LeafSystem):
    """Outputs a PiecewisePolynomial of time (Drake's ``TrajectorySource``).

    The trajectory is abstract parameter 0, so optimizers can change and differentiate it through
    the context. Output ``y0`` (and ``y1``, ... for derivatives up to ``output_derivative_order``).
    """

    def __init__(self, trajectory: PiecewisePolynomial, output_derivative_order: int = 0, name: str = "") -> None:
        super().__init__(name)
        self.declare_abstract_parameter(trajectory)
        for k in range(output_derivative_order + 1):
            self.declare_vector_output_port(
                f"y{k}", trajectory.rows(), lambda c, k=k: c.get_abstract_parameter(0).value(c.get_time(), k)
            )

    def with_trajectory(self, context: Context, trajectory: PiecewisePolynomial) -> Context:
        """``context`` with a new trajectory of the same shape (Drake: ``UpdateTrajectory``)."""
        return context.with_abstract_parameter(0, trajectory)


_SEEDS = itertools.count()  # the default seeds of RandomSources (Drake: a counter per process)


class RandomSource(LeafSystem):
    """Samples every ``sampling_interval_sec`` from a distribution, with a JAX PRNG key in its state
    (Drake's ``RandomSource``). Output ``output`` (size ``num_outputs``), held between samples.

    ``distribution``: ``"uniform"`` on [0, 1) or ``"gaussian"`` (standard normal). The key is abstract
    state 0: the same key gives the same samples; give each batch member its own key
    (`with_seed`) to get different samples under ``vmap``.

    ``seed``: the default context's seed (Drake's ``set_fixed_seed``). None (default): as Drake, each
    RandomSource draws its own default seed from a counter (0, 1, 2, ... in construction order), so two
    sources in one diagram never produce the same stream by accident, and a program that builds its
    systems in the same order gets the same samples every run.
    """

    distribution: str = eqx.field(static=True)
    seed: int = eqx.field(static=True)
    fixed_seed: bool = eqx.field(static=True)

    def __init__(
        self,
        distribution: str,
        num_outputs: int,
        sampling_interval_sec: float,
        name: str = "",
        seed: int | None = None,
    ) -> None:
        super().__init__(name)
        if distribution not in ("uniform", "gaussian"):
            raise DeclarationError(f"RandomSource: distribution must be 'uniform' or 'gaussian'; got {distribution!r}.")
        if seed is not None and not (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0):
            raise DeclarationError(f"RandomSource {name!r}: seed must be a non-negative int or None; got {seed!r}.")
        self.distribution = distribution
        self.fixed_seed = seed is not None
        self.seed = int(seed) if seed is not None else next(_SEEDS)
        self.declare_abstract_state(jax.random.key_data(jax.random.PRNGKey(self.seed)))
        self.declare_discrete_state(num_outputs)
        self.declare_vector_output_port(
            "output", num_outputs, lambda c: c.get_discrete_state(0), direct_feedthrough=False
        )
        self.declare_periodic_unrestricted_update_event(sampling_interval_sec, 0.0, self._sample)

    def _sample(self, context: Context, state: State) -> State:
        key = jax.random.wrap_key_data(state.abstract_state.values[0])
        key, sub = jax.random.split(key)
        n = state.discrete_state.groups[0].shape[0]
        dtype = state.discrete_state.groups[0].dtype
        draw = jax.random.uniform if self.distribution == "uniform" else jax.random.normal
        sample = draw(sub, (n,), dtype)
        return dataclasses.replace(
            state,
            discrete_state=state.discrete_state.with_vector(0, sample),
            abstract_state=dataclasses.replace(state.abstract_state, values=(jax.random.key_data(key),)),
        )

    def get_fixed_seed(self) -> int | None:
        """The seed given to the constructor, or None (Drake: ``get_fixed_seed``)."""
        return self.seed if self.fixed_seed else None

    def get_default_seed(self) -> int:
        """The seed of the default context: the fixed one, or the one drawn from the counter."""
        return self.seed

    def with_seed(self, context: Context, key: Any) -> Context:
        """``context`` with the PRNG key ``key`` (an int seed or a ``jax.random`` key)."""
        if isinstance(key, int):
            key = jax.random.PRNGKey(key)
        if jnp.issubdtype(jnp.asarray(key).dtype, jax.dtypes.prng_key):
            key = jax.random.key_data(key)
        return context.with_abstract_state(0, jnp.asarray(key))
