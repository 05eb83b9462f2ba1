"""The continuous trajectory of a run (issue #37 item 7): SaveAt(trajectory=capacity) keeps every
accepted step with the integrator's continuous extension (Drake's dense output, a PiecewisePolynomial
whose segments are the steps; Diffrax's SaveAt(dense=True)); result.trajectory.evaluate(t) and
derivative(t) work under jit, vmap and grad."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js


W = np.sqrt(10.0)  # the oscillator q'' = -10 q


def _exact(t):
    t = np.asarray(t)
    return np.stack([np.cos(W * t), -W * np.sin(W * t)], axis=-1)


@pytest.fixture(scope="module")
def oscillator():
    s = js.examples.SpringMassDamper(damping=0.0, has_input=False)
    return s, s.create_default_context().with_continuous_state(jnp.array([1.0, 0.0]))


@pytest.mark.parametrize(
    "integrator, tol",
    [
        (js.RungeKutta5Integrator(max_step_size=0.5, target_accuracy=1e-8), 1e-7),  # Dormand-Prince's 4th order
        (js.RungeKutta3Integrator(max_step_size=0.5, target_accuracy=1e-7), 1e-5),  # cubic Hermite
        (js.RungeKutta4Integrator(max_step_size=0.02), 1e-5),  # fixed steps, cubic Hermite
    ],
)
def test_trajectory_evaluates_the_closed_form_between_steps(oscillator, integrator, tol):
    s, ctx = oscillator
    r = js.simulate(s, ctx, 2.0, integrator, save_at=js.SaveAt(trajectory=2000))
    tr = r.trajectory
    n = int(tr.get_number_of_segments())
    assert bool(tr.complete()) and n == int(r.stats.num_steps_taken)
    assert float(tr.start_time()) == 0.0 and abs(float(tr.end_time()) - 2.0) < 1e-12
    ts = np.linspace(0.0, 2.0, 201)
    np.testing.assert_allclose(jax.vmap(tr.evaluate)(ts), _exact(ts), rtol=0, atol=tol)
    # at each segment's start it is the stepped state, at the end the run's final state
    starts = np.asarray(tr.t[:n])
    np.testing.assert_allclose(jax.vmap(tr.evaluate)(starts), np.asarray(tr.x[:n]), rtol=0, atol=1e-14)
    np.testing.assert_allclose(tr.evaluate(2.0), r.context.get_continuous_state_vector(), rtol=0, atol=1e-14)
    # the derivative follows the vector field [v, -10 q] along the trajectory
    d = jax.vmap(tr.derivative)(ts)
    x = _exact(ts)
    np.testing.assert_allclose(d, np.stack([x[:, 1], -10.0 * x[:, 0]], axis=1), rtol=0, atol=200 * tol)


def test_fixed_step_trajectory_holds_the_scans_states(oscillator):
    # the while loop records the trajectory; its states at the grid are the fixed-step scan's
    s, ctx = oscillator
    rk4 = js.RungeKutta4Integrator(max_step_size=0.05)
    grid = np.linspace(0.0, 1.0, 21)
    scan = js.simulate(s, ctx, 1.0, rk4, save_at=grid)
    tr = js.simulate(s, ctx, 1.0, rk4, save_at=js.SaveAt(trajectory=20)).trajectory
    assert int(tr.get_number_of_segments()) == 20
    np.testing.assert_allclose(jax.vmap(tr.evaluate)(grid), scan.ys, rtol=0, atol=1e-13)


def test_trajectory_capacity_and_refusals(oscillator):
    s, ctx = oscillator
    rk4 = js.RungeKutta4Integrator(max_step_size=0.05)
    with pytest.raises(Exception, match=r"more steps than SaveAt\(trajectory=10\)"):
        js.simulate(s, ctx, 1.0, rk4, save_at=js.SaveAt(trajectory=10))
    r = js.simulate(s, ctx, 1.0, rk4, save_at=js.SaveAt(trajectory=10), throw=False)
    assert not bool(r.trajectory.complete()) and int(r.trajectory.get_number_of_segments()) == 10
    np.testing.assert_allclose(float(r.trajectory.end_time()), 0.5, atol=1e-12)  # (what it kept)
    with pytest.raises(js.JaxsysError, match="RadauIntegrator has none"):
        js.simulate(s, ctx, 1.0, js.RadauIntegrator(max_step_size=0.1), save_at=js.SaveAt(trajectory=50))
    ball = js.examples.BouncingBall()
    with pytest.raises(js.JaxsysError, match="without events"):
        js.simulate(ball, ball.create_default_context(), 1.0, rk4, save_at=js.SaveAt(trajectory=50))
    # a run that does not ask keeps none
    assert js.simulate(s, ctx, 1.0, rk4).trajectory is None


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_trajectory_under_jit_vmap_and_grad(oscillator, dtype):
    s, _ = oscillator
    ctx = s.create_default_context(dtype)
    integ = js.RungeKutta5Integrator(max_step_size=0.5, target_accuracy=1e-8 if dtype == jnp.float64 else 1e-5)

    def q_at(q0, t):
        c = ctx.with_continuous_state(jnp.stack([q0, jnp.zeros((), dtype)]))
        tr = js.simulate(s, c, 1.0, integ, save_at=js.SaveAt(trajectory=200)).trajectory
        return tr.evaluate(t)[0]

    tol = 1e-6 if dtype == jnp.float64 else 2e-3
    # q(t) = q0 cos(W t): d q(0.37) / d q0 = cos(0.37 W); the same through jit
    g = jax.jit(jax.grad(q_at))(jnp.asarray(1.0, dtype), jnp.asarray(0.37, dtype))
    np.testing.assert_allclose(float(g), np.cos(0.37 * W), atol=tol)
    # vmap over starts: the system is linear, so twice the start is twice the trajectory (to the run's
    # accuracy: error control scales with the state, so the two take different steps)
    qs = jax.vmap(q_at, in_axes=(0, None))(jnp.asarray([1.0, 2.0], dtype), jnp.asarray(0.37, dtype))
    np.testing.assert_allclose(float(qs[1]), 2 * float(qs[0]), atol=2 * tol)
    np.testing.assert_allclose(float(qs[0]), np.cos(0.37 * W), atol=tol)
