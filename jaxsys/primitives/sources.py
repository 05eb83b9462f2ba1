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
from ..trajectories import PiecewisePolynomial


class TrajectorySource(LeafSystem):
    """Outputs a PiecewisePolynomial of time (Drake's ``TrajectorySource``).

    The trajectory is abstract parameter 0, so optimizers can change and differentiate it through
    the context. Output ``y0`` (and ``y1``, ... for derivatives up to ``output_derivative_order``).
    """

    def __init__(self, trajectory: PiecewisePolynomial, output_derivative_order: int = 0, name: str = "") -> None:
        super().__init__(name)
        self.declare_abstract_parameter(trajectory)
        for k in range(output_derivative_order + 1):

            def derivative(c: Context, k: int = k) -> Any:
                return c.get_abstract_parameter(0).value(c.get_time(), k)

            self.declare_vector_output_port(f"y{k}", trajectory.rows(), derivative)

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
