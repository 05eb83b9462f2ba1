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
    F = js.discrete_dynamics(plant, ctx, T / N)

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


def test_time_varying_costs_track_a_reference_exactly():
    # issue #41 item 5: the running cost sees the knot index k (and a reference passed as an argument).
    # Tracking q_ref(t) = sin(t) with a double integrator is a linear-quadratic problem: iLQR's answer must
    # equal the quadratic program's minimizer, for the k form and the reference form alike.
    plant, ctx = double_integrator()
    N, T = 40, 4.0
    h = T / N
    t = jnp.arange(N + 1) * h
    ref = jnp.stack([jnp.sin(t), jnp.cos(t)], axis=1)  # (N + 1, 2): states to track
    w = jnp.array([10.0, 1.0])

    def running_k(x, u, k):
        return jnp.sum(w * (x - ref[k]) ** 2) + 0.01 * u @ u

    def running_ref(x, u, k, r):
        return jnp.sum(w * (x - r[k]) ** 2) + 0.01 * u @ u

    def final_ref(x, r):
        return 50.0 * jnp.sum((x - r[-1]) ** 2)

    res_k = js.ilqr(plant, ctx, T, N, running_k, lambda x: final_ref(x, ref), tolerance=1e-12, regularization=0.0)
    res_r = js.ilqr(plant, ctx, T, N, running_ref, final_ref, reference=ref, tolerance=1e-12, regularization=0.0)
    F = js.discrete_dynamics(plant, ctx, h)

    def cost(u):
        def step(x, uk):
            return F(x, uk), x

        x_end, xs = jax.lax.scan(step, ctx.get_continuous_state_vector(), u)
        return h * jnp.sum(jax.vmap(running_k)(xs, u, jnp.arange(N))) + final_ref(x_end, ref)

    u0 = jnp.zeros((N, 1))
    H = jax.hessian(cost)(u0).reshape(N, N)
    u_star = -jnp.linalg.solve(H, jax.grad(cost)(u0).reshape(N))
    np.testing.assert_allclose(res_k.u[:, 0], u_star, atol=1e-9)
    np.testing.assert_allclose(res_r.u[:, 0], u_star, atol=1e-9)
    # the tracked position stays near sin(t) after the initial transient
    assert float(jnp.max(jnp.abs(res_r.x[N // 2 :, 0] - ref[N // 2 :, 0]))) < 0.05
    # ilqr_solve under jit takes the reference as an argument: a new reference, no recompilation
    traces = []

    @jax.jit
    def solve(r):
        traces.append(1)
        x0 = ctx.get_continuous_state_vector()
        return js.ilqr_solve(F, running_ref, final_ref, h, x0, u0, regularization=0.0, reference=r)[0]

    np.testing.assert_allclose(solve(ref)[:, 0], u_star, atol=1e-8)
    solve(ref * 0.5)
    assert len(traces) == 1


def test_cost_signatures_are_checked():
    plant, ctx = double_integrator()
    with pytest.raises(js.JaxsysError, match=r"running_cost\(x, u\) or running_cost\(x, u, k\)"):
        js.ilqr(plant, ctx, 1.0, 10, lambda x: x @ x, lambda x: x @ x)
    with pytest.raises(js.JaxsysError, match=r"with a reference.*running_cost\(x, u, k, reference\)"):
        js.ilqr(plant, ctx, 1.0, 10, lambda x, u: x @ x, lambda x: x @ x, reference=jnp.zeros((11, 2)))


def test_repeated_ilqr_reuses_its_compiled_programs():
    # Before: every js.ilqr call compiled its iteration again (1.2 s of a 1.5 s repeated solve). Now the
    # programs are kept per system (weakly) and the context, bounds and reference are arguments: a
    # solve from a new state, with new bounds or parameters traces nothing (counted by the cost's
    # traces), and gives what a fresh solve gives
    plant, ctx = double_integrator()
    traced = []

    def running(x, u):
        traced.append(1)
        return x @ x + 0.05 * u @ u

    def final(x):
        return 50.0 * x @ x

    first = js.ilqr(plant, ctx, 2.0, 20, running, final, tolerance=1e-10)
    n = len(traced)
    assert n > 0
    ctx2 = ctx.with_continuous_state(jnp.array([-0.3, 2.0]))
    again = js.ilqr(plant, ctx2, 2.0, 20, running, final, tolerance=1e-10, u_lower=-1.0, u_upper=1.0)
    assert len(traced) == n
    fresh = js.ilqr(plant, ctx2, 2.0, 20, lambda x, u: running(x, u), final, tolerance=1e-10, u_lower=-1.0, u_upper=1.0)
    assert len(traced) > n  # (new cost functions: compiled anew)
    np.testing.assert_allclose(again.u, fresh.u, rtol=0, atol=1e-12)
    assert again.success and first.success
    assert np.all(np.abs(again.u) <= 1.0 + 1e-12)
    np.testing.assert_allclose(again.x[0], [-0.3, 2.0])


class _Heavy(js.LeafSystem):
    """A pendulum whose vector field is padded with 600 exactly-cancelling operations (so its jaxpr is
    over ``ROLLED_STAGES_MIN_EQNS`` equations, as a MuJoCo plant's is), with one input."""

    def __init__(self):
        super().__init__("heavy")
        self.declare_continuous_state(1, 1, 0)
        self.declare_vector_input_port("u", 1)

    def do_calc_time_derivatives(self, c):
        q, v = c.get_continuous_state_vector()
        pad = jnp.zeros_like(q)
        for k in range(600):
            pad = pad + jnp.sin(q * (k + 1)) * 0.0
        return jnp.stack([v, -jnp.sin(q) + self.get_input_port(0).eval(c)[0] + pad])


def test_large_dynamics_are_traced_once_per_step_with_the_same_values():
    """Large dynamics (over ROLLED_STAGES_MIN_EQNS equations) evaluate RK4's four stages in a loop in
    ``discrete_dynamics`` as in ``simulate``: the step's jaxpr holds the dynamics once, not four
    times (what made iLQR through a MuJoCo plant compile twice as long), and gives the unrolled
    step's values to rounding."""
    from jaxsys.analysis.adjoint import count_eqns
    from jaxsys.analysis.integrators.base import ROLLED_STAGES_MIN_EQNS, step_aux

    plant = _Heavy()
    ctx = plant.create_default_context().with_continuous_state(jnp.array([0.4, -0.2]))
    x, u = ctx.get_continuous_state_vector(), jnp.array([0.3])
    f_eqns = count_eqns(jax.make_jaxpr(plant.vector_field(plant.get_input_port(0).fix_value(ctx, u)))(0.0, x).jaxpr)
    assert f_eqns > ROLLED_STAGES_MIN_EQNS
    F = js.discrete_dynamics(plant, ctx, 0.05)
    assert count_eqns(jax.make_jaxpr(F)(x, u).jaxpr) < 1.5 * f_eqns  # once, not 4 times
    # the same step with the stages unrolled
    c1 = plant.get_input_port(0).fix_value(ctx, u)
    integ = js.RungeKutta4Integrator(max_step_size=0.05)
    h = jnp.asarray(0.05)
    unrolled = integ.attempt_step(plant.vector_field(c1), jnp.asarray(0.0), x, h, step_aux(plant, c1))[0]
    np.testing.assert_allclose(np.asarray(F(x, u)), np.asarray(unrolled), rtol=1e-14, atol=1e-15)


def test_a_plant_without_exactly_one_vector_input_is_refused_before_compiling():
    """The input to optimize must be the plant's one vector input port: a clear error naming the
    system, at the call (not a trace error from inside the compiled solver)."""
    bare = js.ConstantVectorSource([1.0])  # no input at all
    with pytest.raises(js.JaxsysError, match="exactly one vector input port.*has 0"):
        js.ilqr(bare, bare.create_default_context(), 1.0, 5, lambda x, u: u @ u, lambda x: 0.0)
