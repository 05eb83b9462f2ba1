"""Drake's statistics as a run hands them back: packed as the stepping loop keeps them, read by name.

A plain run's program returns the loop's clock and counters vectors as they are (no kernel per number
for XLA to compile); `IntegratorStatistics` and `SimulatorStatistics` read them by Drake's names. The
readings must agree however the result was made: eagerly (read on the host), inside ``jax.jit``
(sliced in the program), batched (one per member), and through ``as_dict``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js
from jaxsys.analysis.results import _INTEGRATOR_NAMES


def _decay() -> js.LeafSystem:
    return js.examples.SpringMassDamper(stiffness=4.0, damping=0.5, has_input=False)


SYSTEM = _decay()
CTX = SYSTEM.create_default_context().with_continuous_state(jnp.array([1.0, 0.0]))
INTEGRATORS = {
    "RK3 error control": js.RungeKutta3Integrator(target_accuracy=1e-5),
    "RK4 fixed step": js.RungeKutta4Integrator(max_step_size=0.05),
    "implicit Euler": js.ImplicitEulerIntegrator(target_accuracy=1e-3),
}


@pytest.mark.parametrize("name", list(INTEGRATORS))
def test_statistics_read_alike_eagerly_under_jit_and_batched(name):
    integ = INTEGRATORS[name]
    r = js.simulate(SYSTEM, CTX, 1.0, integ)
    eager = {k: np.asarray(getattr(r.stats, k)) for k in _INTEGRATOR_NAMES}
    # every name, read by property and by as_dict, is the same number
    as_dict = r.stats.as_dict()
    assert set(as_dict) == set(_INTEGRATOR_NAMES)
    for k, v in eager.items():
        np.testing.assert_array_equal(v, as_dict[k], err_msg=k)
    # the same run traced inside jit, its statistics read in the program
    traced = jax.jit(lambda c: {k: getattr(js.simulate(SYSTEM, c, 1.0, integ).stats, k) for k in _INTEGRATOR_NAMES})(
        CTX
    )
    for k, v in eager.items():
        np.testing.assert_array_equal(v, np.asarray(traced[k]), err_msg=k)
    # two members, the first the run above: one reading per member
    batch = js.stack_contexts([CTX, CTX.with_continuous_state(jnp.array([0.5, 1.0]))])
    b = js.batch_simulate(SYSTEM, batch, 1.0, integ)
    for k, v in eager.items():
        got = np.asarray(getattr(b.result.stats, k))
        assert got.shape == (2,), (k, got.shape)
        np.testing.assert_array_equal(got[0], v, err_msg=k)
    # Drake's meanings: steps taken and attempted, the ideal step only under error control, Newton counts
    # only for the implicit method; a system without events dispatched none, its steps the integrator's
    steps = int(r.stats.num_steps_taken)
    assert steps > 0 and int(r.stats.num_step_attempts) >= steps
    if name == "RK4 fixed step":
        assert steps == 20 and np.isnan(float(r.stats.ideal_next_step_size))
        assert np.isnan(float(r.stats.smallest_adapted_step_size_taken))
        assert float(r.stats.largest_step_size_taken) == pytest.approx(0.05)
    else:
        assert 0 < float(r.stats.ideal_next_step_size) < 1.0
        assert 0 < float(r.stats.smallest_adapted_step_size_taken) <= float(r.stats.largest_step_size_taken)
    newton = int(r.stats.num_newton_raphson_iterations)
    assert (newton > 0) == (name == "implicit Euler")
    # printed by Drake's names (unbatched), or as packed with the batch's shape
    assert f"num_steps_taken={steps}" in repr(r.stats) and "num_publishes=0" in repr(r.simulator_stats)
    assert "batch shape (2,)" in repr(b.result.stats)
    sim = r.simulator_stats.as_dict()
    assert sim == dict(num_steps_taken=steps, num_publishes=0, num_discrete_updates=0, num_unrestricted_updates=0)


def test_statistics_in_float32_read_alike_eagerly_under_jit_and_batched():
    # the packed clock keeps the run's dtype; its readings agree however the result was made
    ctx32 = SYSTEM.create_default_context(jnp.float32).with_continuous_state(jnp.array([1.0, 0.0], jnp.float32))
    integ = js.RungeKutta3Integrator(target_accuracy=1e-4)
    r = js.simulate(SYSTEM, ctx32, 1.0, integ)
    assert r.stats.clock.dtype == jnp.float32 and r.stats.largest_step_size_taken.dtype == jnp.float32
    traced = jax.jit(lambda c: js.simulate(SYSTEM, c, 1.0, integ).stats)(ctx32)
    batch = js.batch_simulate(SYSTEM, js.stack_contexts([ctx32, ctx32]), 1.0, integ).result.stats
    for k in _INTEGRATOR_NAMES:
        eager = np.asarray(getattr(r.stats, k))
        np.testing.assert_array_equal(np.asarray(getattr(traced, k)), eager, err_msg=k)
    # batched: each member's readings are its own run's (a float32 batch rounds in other orders than a
    # single run, so its members are compared with themselves, read whole by as_dict)
    for i in range(2):
        member = jax.tree_util.tree_map(lambda a, i=i: a[i], batch).as_dict()
        for k in _INTEGRATOR_NAMES:
            np.testing.assert_array_equal(np.asarray(getattr(batch, k))[i], member[k], err_msg=k)
    assert int(r.stats.num_steps_taken) > 0 and 0 < float(r.stats.ideal_next_step_size) < 1.0


def test_simulator_statistics_count_events():
    # a periodic publish every 0.1 s over [0, 1]: 11 dispatches (t = 0 included), as Drake counts them
    class Ticker(js.LeafSystem):
        def __init__(self) -> None:
            super().__init__("ticker")
            self.declare_continuous_state(1)
            self.declare_periodic_publish_event(0.1, 0.0, lambda ctx: None)

        def do_calc_time_derivatives(self, context):
            return -context.get_continuous_state_vector()

    s = Ticker()
    ctx = s.create_default_context().with_continuous_state(jnp.array([1.0]))
    r = js.simulate(s, ctx, 1.0, js.RungeKutta3Integrator(target_accuracy=1e-6))
    assert int(r.simulator_stats.num_publishes) == 11
    assert int(r.simulator_stats.num_discrete_updates) == 0
    assert int(r.simulator_stats.num_steps_taken) == int(r.stats.num_steps_taken)
    np.testing.assert_allclose(float(r.context.get_continuous_state_vector()[0]), np.exp(-1.0), rtol=1e-5)


def test_events_without_a_status_count_only_where_they_ran():
    # a leaf whose handlers mix a status-less callback and one returning an EventStatus: a dispatch
    # counts only where an event was due (every 0.1 s on [0, 1], t = 0 included: 11 of 40 steps),
    # alike in the fixed-step scan, the while loop and under error control (they counted every step)
    class Mixed(js.LeafSystem):
        def __init__(self) -> None:
            super().__init__("mixed")
            self.declare_continuous_state(1, default=[1.0])
            self.declare_discrete_state(1)
            self.declare_periodic_publish_event(0.1, 0.0, lambda c: None)
            self.declare_periodic_publish_event(0.1, 0.0, lambda c: js.EventStatus.succeeded())
            self.declare_periodic_discrete_update_event(0.1, 0.0, lambda c, d: c.get_discrete_state(0) + 1.0)
            self.declare_periodic_discrete_update_event(
                0.1, 0.0, lambda c, d: (d, js.EventStatus.reached_termination_if(c.get_time() > 5.0))
            )

        def do_calc_time_derivatives(self, context):
            return -context.get_continuous_state_vector()

    s = Mixed()
    ctx = s.create_default_context()
    rk4 = js.RungeKutta4Integrator(max_step_size=0.025)
    runs = {
        "scan": js.simulate(s, ctx, 1.0, rk4),
        "while": js.simulate(s, ctx, 1.0, rk4, at_least_one_step=True),
        "error control": js.simulate(s, ctx, 1.0, js.RungeKutta3Integrator(target_accuracy=1e-3, max_step_size=0.025)),
    }
    for name, r in runs.items():
        stats = r.simulator_stats.as_dict()
        assert stats["num_publishes"] == 11, (name, stats)
        # (updates at 0.1 ... 0.9 and, at t = 0, the first step's: those due at t_final stay pending)
        assert stats["num_discrete_updates"] == 10, (name, stats)
        assert float(r.context.get_discrete_state(0)[0]) == 10.0, name
