"""Trajectory optimization: swing-ups reach the goal when the optimized input is simulated forward;
the gradients the optimizers use match finite differences; the augmented Lagrangian solves a
problem with a known answer."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js
from jaxsys.examples import Acrobot, CartPole, DoubleIntegrator, Pendulum
from jaxsys.optimization.trajopt import augmented_lagrangian, direct_collocation, direct_shooting, simulate_open_loop


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
        tolerance=1e-9,
    )
    np.testing.assert_allclose([z["x"], z["y"]], [0.3, 0.7], atol=1e-6)
    assert info["violation"] < 1e-6 and info["converged"]
    # the same with the bound as a variable bound, and by SLSQP
    for solve in (augmented_lagrangian, js.slsqp):
        z, info = solve(
            lambda z: z["x"] ** 2 + z["y"] ** 2,
            {"x": 0.0, "y": 0.0},
            equality=lambda z: jnp.stack([z["x"] + z["y"] - 1.0]),
            upper={"x": 0.3, "y": np.inf},
            tolerance=1e-9,
        )
        np.testing.assert_allclose([z["x"], z["y"]], [0.3, 0.7], atol=1e-6)
        assert info["converged"]


@pytest.mark.parametrize("method", ["shooting", "multiple_shooting", "collocation", "collocation_al"])
def test_pendulum_swing_up(method):
    goal = np.array([np.pi, 0.0])
    plant, ctx = make(Pendulum)
    if method == "collocation":
        r = direct_collocation(plant, ctx, 4.0, 40, effort, x_final=goal, u_limit=5.0)
    elif method == "collocation_al":  # the pure-JAX augmented Lagrangian (L-BFGS inside)
        r = direct_collocation(plant, ctx, 4.0, 40, effort, x_final=goal, u_limit=5.0, solver="augmented_lagrangian")
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
    assert r.success and r.constraint_violation < 1e-6
    assert np.all(np.abs(r.u) <= 5.0 + 1e-6)  # input limits hold
    # the optimized input, simulated forward with the simulator, reaches the goal
    fresh, fresh_ctx = make(Pendulum)
    xs = simulate_open_loop(fresh, fresh_ctx, r)
    tol = 1e-3 if "collocation" not in method else 2e-2  # collocation's own model differs slightly from RK4
    np.testing.assert_allclose(xs[-1], goal, atol=tol)


def test_cart_pole_swing_up_by_collocation():
    goal = np.array([0.0, np.pi, 0.0, 0.0])
    plant, ctx = make(CartPole)
    r = direct_collocation(plant, ctx, 3.0, 50, effort, x_final=goal, u_limit=20.0)
    assert r.constraint_violation < 1e-4
    assert np.all(np.abs(r.u) <= 20.0 + 1e-3)
    fresh, fresh_ctx = make(CartPole)
    xs = simulate_open_loop(fresh, fresh_ctx, r)
    # Hermite-Simpson's model error (h = 0.06 s) is small where the motion is stable, amplified near the
    # unstable top: the replay follows the collocation states for the first 60% of the knots, and ends
    # with position and angle within 0.25 (the shooting test below reaches the goal exactly)
    assert np.max(np.abs(xs[:30] - r.x[:30])) < 0.05
    np.testing.assert_allclose(xs[-1][:2], goal[:2], atol=0.25)


@pytest.mark.parametrize("num_segments", [1, 5])
def test_cart_pole_swing_up_by_shooting_reaches_goal_exactly(num_segments):
    goal = np.array([0.0, np.pi, 0.0, 0.0])
    plant, ctx = make(CartPole)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # converges with the default options
        r = direct_shooting(plant, ctx, 3.0, 30, effort, x_final=goal, u_limit=20.0, num_segments=num_segments)
    assert r.constraint_violation < 1e-4
    fresh, fresh_ctx = make(CartPole)
    np.testing.assert_allclose(simulate_open_loop(fresh, fresh_ctx, r)[-1], goal, atol=1e-3)


def test_gradients_used_by_the_optimizers_match_finite_differences():
    from jaxsys.optimization.trajopt import _ShootingModel

    plant, ctx = make(Pendulum)
    model = _ShootingModel(plant, ctx, 10, 10, 4)
    u = jnp.linspace(-1.0, 2.0, 11)[:, None]

    def final_angle(u):
        return model.rollout(model.x0.at[0].set(0.3), u, 1.0)[-1, 0]

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
    opts = dict(final_cost=lambda x: 10.0 * (x[0] - 0.5) ** 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
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
    r = direct_collocation(plant, ctx, 4.0, 40, effort, x_final=goal, **bounds)
    assert r.success
    assert np.all(r.u >= -2.0 - 1e-5) and np.all(r.u <= 5.0 + 1e-5)
    assert np.min(r.u) < -1.99 and np.max(r.u) > 4.99  # both input bounds active
    assert np.all(np.abs(r.x[:, 1]) <= 4.0 + 1e-5) and np.max(np.abs(r.x[:, 1])) > 3.99  # the state bound too
    with pytest.raises(js.JaxsysError, match="not both"):
        direct_collocation(plant, ctx, 4.0, 10, effort, u_limit=1.0, u_lower=-1.0)


def replay_in_a_diagram(plant_factory, result, substeps):
    """The optimized input fed to a fresh plant by a TrajectorySource in the user's own diagram,
    simulated with fixed-step RK4 (the optimizer's integration rule); the final state."""
    builder = js.DiagramBuilder()
    plant = builder.add_system(plant_factory())
    source = builder.add_system(js.TrajectorySource(result.input_trajectory))
    builder.connect(source.get_output_port(0), plant.get_input_port(0))
    diagram = builder.build()
    h = result.final_time / (len(result.times) - 1) / substeps
    sim = js.simulate(
        diagram, diagram.create_default_context(), result.final_time, js.RungeKutta4Integrator(max_step_size=h)
    )
    return np.asarray(sim.context.get_continuous_state_vector())


ACROBOT_GOAL = np.array([np.pi, 0.0, 0.0, 0.0])


def test_acrobot_swing_up_by_multiple_shooting_with_default_options():
    # before: multiple shooting never converged; the defaults now do (SLSQP)
    plant, ctx = make(Acrobot)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "did not converge" warning
        r = direct_shooting(plant, ctx, 4.0, 40, effort, x_final=ACROBOT_GOAL, u_limit=20.0, num_segments=10)
    assert r.success and r.constraint_violation < 1e-6
    assert np.all(np.abs(r.u) <= 20.0 + 1e-6)
    # the input replayed on a fresh plant in a diagram reaches the upright goal (the upright is
    # unstable: open-loop replay is exact only with the optimizer's own integration rule)
    np.testing.assert_allclose(replay_in_a_diagram(Acrobot, r, 4), ACROBOT_GOAL, atol=1e-4)


def test_acrobot_swing_up_by_collocation_with_default_options():
    plant, ctx = make(Acrobot)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = direct_collocation(plant, ctx, 4.0, 40, effort, x_final=ACROBOT_GOAL, u_limit=20.0)
    assert r.success and r.constraint_violation < 1e-6
    np.testing.assert_allclose(r.x[-1], ACROBOT_GOAL, atol=1e-6)
    # Hermite-Simpson on 40 intervals is accurate to ~1e-2 per interval on this fast motion; the
    # unstable upright amplifies that, so the open-loop replay is checked where amplification is small
    # (the first 0.6 s), against a fine RK4 simulation
    xs = simulate_open_loop(plant, ctx, r, substeps=50)
    assert np.max(np.abs(xs[:7] - r.x[:7])) < 2e-2


class PlanarQuadrotor(js.LeafSystem):
    """A user's planar quadrotor: state [x, y, theta, xd, yd, thetad], inputs two rotor thrusts (N)."""

    def __init__(self):
        super().__init__("quadrotor")
        self.declare_continuous_state(num_q=3, num_v=3, num_z=0)
        self.declare_vector_input_port("thrusts", 2)

    def do_calc_time_derivatives(self, context):
        m, inertia, arm, g = 0.5, 0.01, 0.15, 9.81
        x = context.get_continuous_state_vector()
        u = self.get_input_port(0).eval(context)
        th = x[2]
        acc = jnp.stack(
            [-jnp.sin(th) * (u[0] + u[1]) / m, jnp.cos(th) * (u[0] + u[1]) / m - g, arm * (u[1] - u[0]) / inertia]
        )
        return jnp.concatenate([x[3:], acc])


@pytest.mark.parametrize("num_segments", [0, 4])  # 0: collocation
def test_user_planar_quadrotor_to_a_hover(num_segments):
    plant = PlanarQuadrotor()
    ctx = plant.get_input_port(0).fix_value(plant.create_default_context(), [0.0, 0.0])
    goal = np.array([1.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    hover = 0.5 * 9.81 / 2
    cost = lambda x, u: jnp.sum((u - hover) ** 2)  # noqa: E731
    common = dict(x_final=goal, u_lower=0.0, u_upper=6.0, u_init=hover)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if num_segments:
            r = direct_shooting(plant, ctx, 2.0, 20, cost, num_segments=num_segments, **common)
        else:
            r = direct_collocation(plant, ctx, 2.0, 20, cost, **common)
    assert r.success and np.all(r.u >= -1e-6) and np.all(r.u <= 6.0 + 1e-6)
    final = replay_in_a_diagram(PlanarQuadrotor, r, 50)
    np.testing.assert_allclose(final, goal, atol=1e-3 if num_segments else 2e-2)


@pytest.mark.parametrize("method", ["collocation", "shooting"])
def test_free_final_time_minimum_time_double_integrator(method):
    # rest at 0 to rest at 1 with |u| <= 1: the minimum time is 2 s (bang-bang), analytic
    plant, ctx = make(DoubleIntegrator)
    opts = dict(x_final=[1.0, 0.0], u_limit=1.0, final_time_bounds=(0.5, 5.0), time_cost=1.0)
    tiny = lambda x, u: 1e-4 * u @ u  # noqa: E731
    if method == "collocation":
        r = direct_collocation(plant, ctx, 3.0, 20, tiny, **opts)
    else:
        r = direct_shooting(plant, ctx, 3.0, 20, tiny, num_segments=4, **opts)
    assert r.success
    # first-order hold cannot switch instantly: within one interval's worth of 2 s
    assert 2.0 - 1e-6 <= r.final_time < 2.0 * (1 + 2.0 / 20)
    np.testing.assert_allclose(r.times[-1], r.final_time)
    np.testing.assert_allclose(
        replay_in_a_diagram(DoubleIntegrator, r, 10), [1.0, 0.0], atol=1e-6 if method == "shooting" else 1e-3
    )
    with pytest.raises(js.JaxsysError, match="final_time_bounds"):
        direct_collocation(plant, ctx, 3.0, 20, tiny, final_time_bounds=(2.0, 1.0))


def test_pendulum_swing_up_in_float32():
    # float32 (JAX's default): a looser default tolerance (1e-4), the swing-up still reached
    with jax.enable_x64(False):
        plant, ctx = make(Pendulum)
        ctx = plant.create_default_context(jnp.float32)
        ctx = plant.get_input_port(0).fix_value(ctx, [0.0])
        r = direct_collocation(plant, ctx, 4.0, 30, effort, x_final=np.array([np.pi, 0.0]), u_limit=5.0)
        assert r.success and r.tolerance == 1e-4 and r.x.dtype == np.float32
        xs = simulate_open_loop(plant, ctx, r)
    np.testing.assert_allclose(xs[-1], [np.pi, 0.0], atol=5e-2)


# ----- IPOPT with sparse Jacobians (issue #40 item 6) ----------------------------------------------
def test_sparse_jacobian_by_coloring_equals_the_dense_one():
    from jaxsys.optimization.nlp import SparseJacobian

    # a chain of defects (each couples neighbours, as collocation's do) and one dense row
    def fn(z):
        defects = z[1:] - z[:-1] - 0.1 * jnp.sin(z[1:] * z[:-1])
        return jnp.concatenate([defects, jnp.stack([jnp.sum(z**2)])])

    z0 = jnp.linspace(0.0, 1.0, 30)
    jac = SparseJacobian(fn, z0)
    z = z0 + 0.3 * jnp.cos(jnp.arange(30.0))
    dense = np.asarray(jax.jacfwd(fn)(z))
    got = np.zeros_like(dense)
    got[jac.rows, jac.cols] = np.asarray(jac.values(z))
    np.testing.assert_allclose(got, dense, rtol=1e-13, atol=1e-14)
    assert jac.rows.size == 2 * 29 + 30  # the structural nonzeros only
    # the dense row forces one color per column; without it two colors suffice
    assert jac.num_colors == 30
    assert SparseJacobian(lambda z: fn(z)[:-1], z0).num_colors == 2


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_ipopt_known_solution(dtype):
    pytest.importorskip("cyipopt")
    # min x^2 + y^2 s.t. x + y = 1, x <= 0.3 (an inequality; then a bound): (0.3, 0.7)
    tol = 1e-9 if dtype == jnp.float64 else 1e-5
    with jax.enable_x64(dtype == jnp.float64):
        for kwargs in ({"inequality": lambda z: jnp.stack([z["x"] - 0.3])}, {"upper": {"x": 0.3, "y": np.inf}}):
            z, info = js.solve_nlp(
                lambda z: z["x"] ** 2 + z["y"] ** 2,
                {"x": jnp.asarray(0.0, dtype), "y": jnp.asarray(0.0, dtype)},
                equality=lambda z: jnp.stack([z["x"] + z["y"] - 1.0]),
                solver="ipopt",
                tolerance=tol,
                **kwargs,
            )
            np.testing.assert_allclose([float(z["x"]), float(z["y"])], [0.3, 0.7], atol=10 * tol)
            assert info["converged"] and info["solver"] == "ipopt" and info["iterations"] > 0
            assert z["x"].dtype == dtype


def test_acrobot_collocation_by_ipopt_matches_slsqp():
    pytest.importorskip("cyipopt")
    # the same nonlinear program (40 intervals) solved by IPOPT with sparse Jacobians: the same local
    # optimum as SLSQP's (cost to 1e-6 relative), constraints met, the goal reached
    plant, ctx = make(Acrobot)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = direct_collocation(plant, ctx, 4.0, 40, effort, x_final=ACROBOT_GOAL, u_limit=20.0)
        r = direct_collocation(plant, ctx, 4.0, 40, effort, x_final=ACROBOT_GOAL, u_limit=20.0, solver="ipopt")
    assert r.success and r.constraint_violation < 1e-6
    np.testing.assert_allclose(r.x[-1], ACROBOT_GOAL, atol=1e-6)
    assert np.max(np.abs(r.u)) <= 20.0 + 1e-8
    assert r.cost == pytest.approx(ref.cost, rel=1e-6)


def test_ipopt_missing_is_a_named_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_cyipopt(name, *args, **kwargs):
        if name == "cyipopt":
            raise ImportError("No module named 'cyipopt'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cyipopt)
    with pytest.raises(js.JaxsysError, match=r"solver='ipopt' needs cyipopt: pip install cyipopt-wheels"):
        js.solve_nlp(lambda z: z @ z, jnp.ones(2), solver="ipopt")
