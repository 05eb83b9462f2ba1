"""Iterative LQR (issue #19): exact on a linear-quadratic problem (one iteration gives the optimum of
the quadratic program), a pendulum swing-up whose inputs replay exactly in ``simulate``, bounds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js
from jaxsys.examples import Pendulum


def double_integrator():
    plant = js.LinearSystem(A=[[0.0, 1.0], [0.0, 0.0]], B=[[0.0], [1.0]], C=np.eye(2), D=np.zeros((2, 1)))
    ctx = plant.create_default_context().with_continuous_state(jnp.array([1.0, 0.5]))
    return plant, ctx


def test_linear_quadratic_problem_is_solved_exactly():
    plant, ctx = double_integrator()
    Q, R, P = jnp.diag(jnp.array([1.0, 0.1])), jnp.array([[0.05]]), 50.0 * jnp.eye(2)
    N, T = 40, 2.0

    def running(x, u):
        return x @ Q @ x + u @ R @ u

    def final(x):
        return x @ P @ x

    res = js.ilqr(plant, ctx, T, N, running, final, tolerance=1e-12, regularization=0.0)
    assert res.success
    # the same problem as a quadratic program in the inputs (the RK4 map of a linear ODE is linear)
    F = js.analysis.ilqr.discrete_dynamics(plant, ctx, T / N)

    def cost(u):
        def step(x, uk):
            return F(x, uk), x

        x_end, xs = jax.lax.scan(step, ctx.get_continuous_state_vector(), u)
        return (T / N) * (jnp.sum(jax.vmap(running)(xs, u))) + final(x_end)

    u0 = jnp.zeros((N, 1))
    H = jax.hessian(cost)(u0).reshape(N, N)
    g = jax.grad(cost)(u0).reshape(N)
    u_star = -jnp.linalg.solve(H, g)
    np.testing.assert_allclose(res.u[:, 0], u_star, rtol=0, atol=1e-9)
    assert res.cost == pytest.approx(float(cost(u_star[:, None])), rel=1e-10)
    assert res.iterations <= 3  # one Newton step, then no further decrease


def pendulum():
    p = Pendulum()
    return p, p.get_input_port(0).fix_value(p.create_default_context(), [0.0])


def test_pendulum_swing_up_replays_exactly_and_respects_bounds():
    p, ctx = pendulum()
    goal = jnp.array([jnp.pi, 0.0])
    N, T = 80, 4.0
    res = js.ilqr(
        p,
        ctx,
        T,
        N,
        lambda x, u: 0.1 * u @ u,
        lambda x: 1000.0 * jnp.sum((x - goal) ** 2),
        u_lower=-4.0,
        u_upper=4.0,  # active: the unbounded optimum needs 4.47
        u_init=0.1,
    )
    assert res.success and res.cost_history[-1] < 1e-3 * res.cost_history[0]
    assert np.max(np.abs(res.u)) == pytest.approx(4.0, abs=1e-12)  # at the bound, never beyond
    np.testing.assert_allclose(res.x[-1], np.asarray(goal), atol=0.01)
    # the inputs, held over each interval, replay in simulate with the same RK4 steps: a zero-order
    # hold samples at each t_k and holds through the whole step, as the discrete map does (a trajectory
    # evaluated at the step's end, by RK4's last stage, would already give the next value)
    fresh, fctx = pendulum()
    builder = js.DiagramBuilder()
    held = js.PiecewisePolynomial.zero_order_hold(res.times, np.vstack([res.u, res.u[-1:]]))
    src = builder.add_system(js.TrajectorySource(held))
    zoh = builder.add_system(js.ZeroOrderHold(T / N, 1))
    plant = builder.add_system(fresh)
    builder.connect(src.get_output_port(0), zoh.get_input_port(0))
    builder.connect(zoh.get_output_port(0), plant.get_input_port(0))
    diagram = builder.build()
    root = diagram.create_default_context()
    record = lambda c: plant.get_my_context_from_root(c).get_continuous_state_vector()  # noqa: E731
    r = js.simulate(diagram, root, T, js.RungeKutta4Integrator(max_step_size=T / N), save_at=res.times, record=record)
    np.testing.assert_allclose(np.asarray(r.ys), res.x, atol=1e-9)


def test_float32_contexts_work():
    plant = js.LinearSystem(A=[[0.0, 1.0], [0.0, 0.0]], B=[[0.0], [1.0]], C=np.eye(2), D=np.zeros((2, 1)))
    results = []
    for dtype in (jnp.float32, jnp.float64):
        ctx = plant.create_default_context(dtype).with_continuous_state(jnp.array([1.0, 0.5], dtype))
        res = js.ilqr(plant, ctx, 2.0, 20, lambda x, u: x @ x + 0.05 * u @ u, lambda x: 50.0 * x @ x, tolerance=1e-6)
        assert res.success and res.u.dtype == np.dtype(dtype)
        results.append(res.u)
    np.testing.assert_allclose(results[0], results[1], atol=1e-3)


@pytest.mark.parametrize("x64", [True, False])
def test_a_stationary_start_that_is_not_a_minimum_is_reported(x64):
    """Issue #36 item 4: hanging at rest with u_init = 0 under a swing-up cost, iLQR took no step and
    reported success. The start is a stationary point (by symmetry) but a maximum of the cost along a
    push: success False, a warning naming u_init. A start at a true minimum (hanging, under a cost
    that wants it hanging) still succeeds, and from a perturbed start iLQR takes steps."""
    import warnings

    with jax.enable_x64(x64):
        p = Pendulum()
        ctx = p.get_input_port(0).fix_value(p.create_default_context(), [0.0])

        def swing_up(x, u):
            return 2 * (1 + jnp.cos(x[0])) + 0.1 * u[0] ** 2

        def at_top(x):
            return 10 * (1 + jnp.cos(x[0])) + x[1] ** 2

        with pytest.warns(UserWarning, match="stationary point.*u_init"):
            r = js.ilqr(p, ctx, 4.0, 40, swing_up, at_top)
        assert r.stationary_start and not r.success and r.iterations == 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ok = js.ilqr(p, ctx, 4.0, 40, lambda x, u: (1 - jnp.cos(x[0])) + 0.1 * u[0] ** 2, lambda x: 0.0 * x[0])
        assert ok.success and not ok.stationary_start
        moved = js.ilqr(p, ctx, 4.0, 40, swing_up, at_top, u_init=0.5)  # the remedy: iLQR moves
        assert moved.iterations > 1 and not moved.stationary_start
