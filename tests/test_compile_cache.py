"""Compiled programs are cached per system, bounded, and freed with the system (issue #35 item 4).

Every cache of compiled code jaxsys keeps between calls (``simulate``'s entries, the Simulator's
advances, ``batch_simulate``'s runners, ``fit_parameters``' steps) holds its system weakly: a user who
builds and drops many diagram variants (a notebook sweeping designs) gets them freed, compiled
programs included.
"""

from __future__ import annotations

import gc
import warnings
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js
from jaxsys.analysis.compile_cache import SystemCache, cache_sizes


N = 12  # distinct systems per path (each compiles its own program)


def _decay(rate: float) -> js.LeafSystem:
    return js.examples.SpringMassDamper(stiffness=rate, damping=0.5, has_input=False)


def _ctx(system: js.LeafSystem) -> js.Context:
    return system.create_default_context().with_continuous_state(jnp.array([1.0, 0.0]))


def _through(path: str, i: int) -> weakref.ref:
    s = _decay(1.0 + i)
    ctx = _ctx(s)
    integ = js.RungeKutta2Integrator(max_step_size=0.1)
    if path == "simulate":
        r = js.simulate(s, ctx, 0.3, integ)
        # (the run is right: x(t) of the undamped part stays bounded by its initial energy)
        assert np.isfinite(float(r.context.get_continuous_state_vector()[0]))
    elif path == "Simulator":
        sim = js.Simulator(s, ctx, integ)
        sim.advance_to(0.3)
        sim.advance_to(0.4)
    elif path == "advance_pending_events":
        r = js.simulate(s, ctx, 0.3, integ)
        after = js.advance_pending_events(s, r.context, r.pending_witness_events)
        assert float(after.get_time()) == float(r.context.get_time())  # (no integration)
    elif path == "batch_simulate":
        batch = jax.tree_util.tree_map(lambda x: jnp.stack([x, 0.5 * x]), ctx)
        js.batch_simulate(s, batch, 0.3, integ)
    elif path == "fit_parameters":
        ts = np.array([0.1, 0.2, 0.3])
        meas = js.simulate(s, ctx, 0.3, integ, save_at=ts, record=lambda c: c.get_continuous_state_vector()).ys
        js.fit_parameters(s, ctx, {"k": js.FitParameter(0, 1)}, ts, meas[None], integrator=integ, steps=2)
    elif path == "ilqr":
        s = js.examples.Pendulum()
        c = (
            s.get_input_port(0)
            .fix_value(s.create_default_context(), [0.0])
            .with_continuous_state(jnp.array([1.0, 0.0]))
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            js.ilqr(s, c, 1.0, 5, lambda x, u: x @ x + u @ u, lambda x: x @ x, max_iterations=2)
    return weakref.ref(s)


@pytest.mark.parametrize(
    "path", ["simulate", "Simulator", "advance_pending_events", "batch_simulate", "fit_parameters", "ilqr"]
)
def test_dropped_systems_are_freed_with_their_compiled_programs(path):
    refs = [_through(path, i) for i in range(N)]
    gc.collect()
    alive = sum(r() is not None for r in refs)
    assert alive == 0, f"{alive} of {N} systems simulated through {path} are still alive after collection"
    # (and their cache entries went with them)
    assert all(n == 0 for n in cache_sizes().values()), cache_sizes()


def test_cache_is_bounded_and_keeps_live_entries():
    cache: SystemCache[int] = SystemCache("test", maxsize=3)
    systems = [_decay(1.0 + i) for i in range(5)]
    built: list[int] = []

    def build(i: int):
        def make(ref):
            assert ref() is systems[i]
            built.append(i)
            return i

        return make

    for i in range(5):
        assert cache.get(systems[i], "k", build(i)) == i
    assert len(cache) == 3  # the two least recently used went
    assert cache.get(systems[4], "k", build(4)) == 4 and built == [0, 1, 2, 3, 4]  # (a hit: not rebuilt)
    assert cache.get(systems[0], "k", build(0)) == 0 and built[-1] == 0  # (evicted: rebuilt)
    del systems[1:]
    gc.collect()
    assert len(cache) == 1  # only the entry of the live system is left
