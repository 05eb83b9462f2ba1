"""Drake's ``RandomSimulation`` / ``MonteCarloSimulation`` on [`batch_simulate`][jaxsys.batch_simulate]: each
sample's context is made from its own PRNG key, so any sample can be reproduced alone from the key
the result reports (Drake's generator snapshot).

Imports (within jaxsys): the framework's ``context``, ``errors``, ``system``; ``batch``, ``simulate``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context
from ..framework.errors import JaxsysError
from ..framework.system import System
from .batch import batch_simulate
from .simulate import simulate


@dataclasses.dataclass
class MonteCarloResult:
    """The outcome of [`monte_carlo_simulation`][jaxsys.monte_carlo_simulation] (Drake's list of
    ``RandomSimulationResult``).

    **Fields:** `outputs`: ``output(final context)`` for every sample, stacked along a leading axis of
    ``num_samples``; `keys`: each sample's PRNG key data, (num_samples, 2): ``random_simulation(...,
    key=result.keys[i])`` reproduces sample i (Drake's ``generator_snapshot``); `statuses`: each run's
    status code (0 ok).
    """

    outputs: Any
    keys: np.ndarray
    statuses: np.ndarray


def sample_keys(seed: int, num_samples: int) -> jax.Array:
    """The keys of samples 0..num_samples−1 for ``seed``: ``fold_in(PRNGKey(seed), i)`` (so a sample's
    key does not depend on how many samples are drawn)."""
    base = jax.random.PRNGKey(seed)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(num_samples))


def random_simulation(
    system: System,
    make_context: Callable[[jax.Array], Context],
    output: Callable[[Context], Any],
    final_time: float,
    key: Any,
    integrator: Any = None,
    **simulate_options: Any,
) -> Any:
    """One random simulation (Drake's ``RandomSimulation``): ``make_context(key)`` builds the initial
    context (random parameters, states, RandomSource seeds, ...), the system is simulated to
    ``final_time``, and ``output(final context)`` is returned. ``key``: PRNG key data or an int seed."""
    if isinstance(key, int):
        key = jax.random.PRNGKey(key)
    ctx = make_context(jnp.asarray(key))
    return output(simulate(system, ctx, final_time, integrator, **simulate_options).context)


def monte_carlo_simulation(
    system: System,
    make_context: Callable[[jax.Array], Context],
    output: Callable[[Context], Any],
    final_time: float,
    num_samples: int,
    seed: int = 0,
    integrator: Any = None,
    **batch_options: Any,
) -> MonteCarloResult:
    """Many random simulations at once (Drake's ``MonteCarloSimulation``), as one ``vmap`` (or a sharded
    batch: ``mesh=`` in ``batch_options``, see [`batch_simulate`][jaxsys.batch_simulate]).

    Sample i's context is ``make_context(key_i)`` with key_i = ``fold_in(PRNGKey(seed), i)``;
    ``make_context`` must be traceable (use ``jax.random`` with the key, not NumPy). ``output`` maps the
    final context to any pytree. A sample can be re-run alone with [`random_simulation`][jaxsys.random_simulation] and
    ``result.keys[i]``.

    **Precision.** Samples run in the dtype ``make_context`` builds (float32 unless ``jax_enable_x64``):
    statistics over many samples average out float32's rounding, but each sample's accuracy is bounded
    as in ``simulate`` (~1e-6 in float32; a finer target warns).
    """
    if not (isinstance(num_samples, (int, np.integer)) and num_samples >= 1):
        raise JaxsysError(f"monte_carlo_simulation: num_samples must be a positive integer; got {num_samples!r}.")
    keys = sample_keys(seed, int(num_samples))
    contexts = jax.vmap(make_context)(keys)
    batch = batch_simulate(system, contexts, final_time, integrator, **batch_options)
    results = batch.results()
    outputs = jax.vmap(output)(results.context)
    return MonteCarloResult(outputs, np.asarray(keys), np.asarray(results.status))


__all__ = ["MonteCarloResult", "monte_carlo_simulation", "random_simulation", "sample_keys"]
