"""Trajectory optimization: swing-ups reach the goal when the optimized input is simulated forward;
the gradients the optimizers use match finite differences; the augmented Lagrangian solves a
problem with a known answer."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js
from jaxsys.analysis.trajopt import augmented_lagrangian, direct_collocation, direct_shooting, simulate_open_loop
from jaxsys.examples import CartPole, Pendulum


def make(cls):
    plant = cls()
    return plant, plant.get_input_port(0).fix_value(plant.create_default_context(), [0.0])


def effort(x, u):
    return u @ u


def test_augmented_lagrangian_known_solution():
    # min x^2 + y^2 s.t. x + y = 1, x <= 0.3  ->  (0.3, 0.7)
    z, info = augmented_lagrangian(
        lambda z: z["x"] ** 2 + z["y"] ** 2,
        {"x": 0.0, "y": 0.0},
        equality=lambda z: jnp.stack([z["x"] + z["y"] - 1.0]),
        inequality=lambda z: jnp.stack([z["x"] - 0.3]),
    )
    np.testing.assert_allclose([z["x"], z["y"]], [0.3, 0.7], atol=1e-6)
    assert info["violation"] < 1e-6


@pytest.mark.parametrize("method", ["shooting", "multiple_shooting", "collocation"])
def test_pendulum_swing_up(method):
    goal = np.array([np.pi, 0.0])
    plant, ctx = make(Pendulum)
    if method == "collocation":
        r = direct_collocation(plant, ctx, 4.0, 40, effort, x_final=goal, u_limit=5.0)
    else:
        r = direct_shooting(
            plant,
            ctx,
            4.0,
            40,
            effort,
            x_final=goal,
            u_limit=5.0,
            num_segments=4 if method == "multiple_shooting" else 1,
        )
    assert r.constraint_violation < 1e-5
    assert np.all(np.abs(r.u) <= 5.0 + 1e-4)  # input limits hold
    # the optimized input, simulated forward with the simulator, reaches the goal
    fresh, fresh_ctx = make(Pendulum)
    xs = simulate_open_loop(fresh, fresh_ctx, r)
    tol = 1e-3 if method != "collocation" else 2e-2  # collocation's own model differs slightly from RK4
    np.testing.assert_allclose(xs[-1], goal, atol=tol)


def test_cart_pole_swing_up_by_collocation():
    goal = np.array([0.0, np.pi, 0.0, 0.0])
    plant, ctx = make(CartPole)
    r = direct_collocation(plant, ctx, 3.0, 50, effort, x_final=goal, u_limit=20.0)
    assert r.constraint_violation < 1e-4
    assert np.all(np.abs(r.u) <= 20.0 + 1e-3)
    fresh, fresh_ctx = make(CartPole)
    xs = simulate_open_loop(fresh, fresh_ctx, r)
    # open loop near the unstable top: position/angle within 0.05, velocities within 0.2
    np.testing.assert_allclose(xs[-1][:2], goal[:2], atol=0.05)
    np.testing.assert_allclose(xs[-1][2:], goal[2:], atol=0.2)


def test_cart_pole_swing_up_by_shooting_reaches_goal_exactly():
    goal = np.array([0.0, np.pi, 0.0, 0.0])
    plant, ctx = make(CartPole)
    r = direct_shooting(plant, ctx, 3.0, 30, effort, x_final=goal, u_limit=20.0)
    assert r.constraint_violation < 1e-4
    fresh, fresh_ctx = make(CartPole)
    np.testing.assert_allclose(simulate_open_loop(fresh, fresh_ctx, r)[-1], goal, atol=1e-3)


def test_gradients_used_by_the_optimizers_match_finite_differences():
    from jaxsys.analysis.trajopt import _ShootingModel

    plant, ctx = make(Pendulum)
    model = _ShootingModel(plant, ctx, 1.0, 10, 4)
    u = jnp.linspace(-1.0, 2.0, 11)[:, None]

    def final_angle(u):
        return model.rollout(model.x0.at[0].set(0.3), u)[-1, 0]

    g = jax.grad(final_angle)(u)
    for k in (0, 5, 10):
        e = jnp.zeros_like(u).at[k, 0].set(1e-6)
        fd = (final_angle(u + e) - final_angle(u - e)) / 2e-6
        np.testing.assert_allclose(g[k, 0], fd, rtol=1e-6, atol=1e-10)
    # collocation defects: Jacobian w.r.t. a knot state vs FD
    plant2, ctx2 = make(Pendulum)

    def defect(x1):
        f = lambda x, uu: plant2._calc_time_derivatives_raw(
            plant2.get_input_port(0).fix_value(ctx2.with_continuous_state(x), uu)
        )  # noqa: E731
        x0, u0, u1, h = jnp.array([0.1, 0.0]), jnp.array([0.5]), jnp.array([0.7]), 0.1
        f0, f1 = f(x0, u0), f(x1, u1)
        xm = 0.5 * (x0 + x1) + h / 8 * (f0 - f1)
        return x1 - x0 - h / 6 * (f0 + 4 * f(xm, 0.5 * (u0 + u1)) + f1)

    x1 = jnp.array([0.12, 0.3])
    J = jax.jacfwd(defect)(x1)
    for i in range(2):
        e = jnp.zeros(2).at[i].set(1e-6)
        np.testing.assert_allclose(J[:, i], (defect(x1 + e) - defect(x1 - e)) / 2e-6, rtol=1e-6, atol=1e-10)


def test_the_plant_is_never_taken_over():
    # before: a second optimization on the same plant raised "part of another diagram", and a plant
    # inside the user's own diagram could not be optimized
    plant, ctx = make(Pendulum)
    opts = dict(final_cost=lambda x: 10.0 * (x[0] - 0.5) ** 2, outer_iterations=2, inner_iterations=50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (no constraints to converge: only the reuse is tested)
        first = direct_shooting(plant, ctx, 1.0, 10, effort, **opts)
        second = direct_shooting(plant, ctx, 1.0, 10, effort, **opts)
        builder = js.DiagramBuilder()
        builder.add_system(plant)
        builder.export_input(plant.get_input_port(0))
        diagram = builder.build()
        # the plant, now inside the user's diagram, is still optimized and simulated as itself
        third = direct_shooting(plant, ctx, 1.0, 10, effort, **opts)
    np.testing.assert_allclose(second.u, first.u, atol=1e-12)
    np.testing.assert_allclose(third.u, first.u, atol=1e-12)
    np.testing.assert_allclose(simulate_open_loop(plant, ctx, third), third.x, atol=1e-6)
    assert diagram.get_input_port(0).size() == 1


def test_separate_input_bounds_and_state_bounds_hold():
    goal = np.array([np.pi, 0.0])
    plant, ctx = make(Pendulum)
    bounds = dict(u_lower=-2.0, u_upper=5.0, x_lower=[-np.inf, -4.0], x_upper=[np.inf, 4.0])
    r = direct_collocation(plant, ctx, 4.0, 40, effort, x_final=goal, inner_iterations=300, **bounds)
    assert r.success
    assert np.all(r.u >= -2.0 - 1e-5) and np.all(r.u <= 5.0 + 1e-5)
    assert np.min(r.u) < -1.99 and np.max(r.u) > 4.99  # both input bounds active
    assert np.all(np.abs(r.x[:, 1]) <= 4.0 + 1e-5) and np.max(np.abs(r.x[:, 1])) > 3.99  # the state bound too
    with pytest.raises(js.JaxsysError, match="not both"):
        direct_collocation(plant, ctx, 4.0, 10, effort, u_limit=1.0, u_lower=-1.0)
