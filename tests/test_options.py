"""simulate's options grouped by concern (issue #35, item 5): SaveAt, EventOptions and the adjoint
objects give the same run as the flat keywords they group, and a conflict between the two is an error."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js


@pytest.fixture(scope="module")
def ball():
    b = js.examples.BouncingBall()
    return b, b.create_default_context().with_continuous_state(jnp.array([1.0, 0.0]))


def test_save_at_groups_times_record_and_dense():
    p = js.examples.Pendulum()
    ctx = (
        p.get_input_port(0)
        .fix_value(p.create_default_context(), jnp.zeros(1))
        .with_continuous_state(jnp.array([1.0, 0.0]))
    )
    ts = np.linspace(0.0, 2.0, 9)
    integ = js.RungeKutta5Integrator(max_step_size=0.1, target_accuracy=1e-8)
    rec = lambda c: c.get_continuous_state_vector()[0]  # noqa: E731
    flat = js.simulate(p, ctx, 2.0, integ, save_at=ts, record=rec, dense_output=True)
    grouped = js.simulate(p, ctx, 2.0, integ, save_at=js.SaveAt(ts, record=rec, dense=True))
    np.testing.assert_array_equal(grouped.ys, flat.ys)
    # the dense values differ from the stepped ones (the option took effect), by the run's own error
    stepped = js.simulate(p, ctx, 2.0, integ, save_at=js.SaveAt(ts, record=rec))
    assert not np.array_equal(stepped.ys, grouped.ys)
    np.testing.assert_allclose(stepped.ys, grouped.ys, atol=1e-6)
    with pytest.raises(js.JaxsysError, match="conflicts with save_at=SaveAt"):
        js.simulate(p, ctx, 2.0, integ, save_at=js.SaveAt(ts, record=rec), record=lambda c: c.get_time())


def test_event_options_group_witness_and_monitor_settings(ball):
    b, ctx = ball
    integ = js.RungeKutta3Integrator(max_step_size=0.05, target_accuracy=1e-6)
    stop = lambda c: js.EventStatus.reached_termination_if(c.get_time() > 0.5, "late")  # noqa: E731
    flat = js.simulate(b, ctx, 1.0, integ, witness_isolation=False, monitor=stop, throw=False)
    grouped = js.simulate(
        b, ctx, 1.0, integ, events=js.EventOptions(witness_isolation=False, monitor=stop), throw=False
    )
    assert float(grouped.context.get_time()) == float(flat.context.get_time()) < 0.6
    np.testing.assert_array_equal(
        grouped.context.get_continuous_state_vector(), flat.context.get_continuous_state_vector()
    )
    # isolation on (the default) lands the bounce elsewhere than off: the option took effect
    isolated = js.simulate(b, ctx, 1.0, integ, events=js.EventOptions(monitor=stop), throw=False)
    assert not np.array_equal(
        isolated.context.get_continuous_state_vector(), grouped.context.get_continuous_state_vector()
    )
    with pytest.raises(js.JaxsysError, match="witness_iterations=10 conflicts with events=EventOptions"):
        js.simulate(b, ctx, 1.0, integ, witness_iterations=10, events=js.EventOptions(witness_iterations=20))
    with pytest.raises(js.JaxsysError, match="must be a jaxsys.EventOptions"):
        js.simulate(b, ctx, 1.0, integ, events={"witness_isolation": False})


def test_adjoint_objects_choose_the_loop():
    # x' = -x + u (a first-order lag, u = 0): d x(1) / d x0 = exp(-1) up to the run's error
    lag = js.FirstOrderLowPassFilter(1.0, 1)
    ctx = lag.get_input_port(0).fix_value(lag.create_default_context(), jnp.zeros(1))
    integ = js.RungeKutta3Integrator(max_step_size=0.1, target_accuracy=1e-8)

    def final(x0, **kw):
        c = ctx.with_continuous_state(jnp.stack([x0]))
        return js.simulate(lag, c, 1.0, integ, **kw).context.get_continuous_state_vector()[0]

    g_flat = jax.grad(lambda x: final(x, loop="checkpointed", checkpoints=8))(1.0)
    g_grouped = jax.grad(lambda x: final(x, adjoint=js.RecursiveCheckpointAdjoint(checkpoints=8)))(1.0)
    g_default = jax.grad(lambda x: final(x, adjoint=js.DiscreteAdjoint()))(1.0)
    assert float(g_grouped) == float(g_flat)
    np.testing.assert_allclose(float(g_default), float(g_flat), rtol=1e-12)
    np.testing.assert_allclose(float(g_flat), np.exp(-1.0), rtol=1e-6)
    # the checkpointed loop has no forward mode: the option reached the loop
    with pytest.raises(Exception):  # noqa: B017 - JAX's own error for jvp of a checkpointed while loop
        jax.jacfwd(lambda x: final(x, adjoint=js.RecursiveCheckpointAdjoint(checkpoints=8)))(1.0)
    with pytest.raises(js.JaxsysError, match="adjoint must be"):
        final(1.0, adjoint="checkpointed")
