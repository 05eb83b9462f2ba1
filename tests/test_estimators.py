"""Controllers and estimators against Drake's own numbers (tests/data/X7_estimators.json, written by
tests/data/drake_estimators.py with pydrake 1.58.0), closed forms, finite differences and vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import load_drake

import jaxsys as js


X7 = load_drake("X7_estimators")


def m(x):
    return np.asarray(x, float)


def test_discrete_riccati_and_lqr_match_drake():
    d = X7["dlqr"]
    A, B, Q, R, N = (m(d[k]) for k in ("A", "B", "Q", "R", "N"))
    S = js.discrete_algebraic_riccati_equation(A, B, Q, R)
    np.testing.assert_allclose(S, m(d["S"]), rtol=1e-10)
    K, S2 = js.discrete_time_linear_quadratic_regulator(A, B, Q, R)
    np.testing.assert_allclose(K, m(d["K"]), rtol=1e-10)
    np.testing.assert_allclose(S2, m(d["S"]), rtol=1e-10)
    KN, SN = js.discrete_time_linear_quadratic_regulator(A, B, Q, R, N)
    np.testing.assert_allclose(KN, m(d["K_N"]), rtol=1e-10)
    np.testing.assert_allclose(SN, m(d["S_N"]), rtol=1e-10)
    # the closed loop is stable
    assert np.max(np.abs(np.linalg.eigvals(A - B @ np.asarray(K)))) < 1.0


def test_discrete_riccati_gradient_and_vmap():
    d = X7["dlqr"]
    A, B, Q, R = (m(d[k]) for k in ("A", "B", "Q", "R"))

    def trace_s(r):
        return jnp.trace(js.discrete_algebraic_riccati_equation(A, B, Q, jnp.array([[r]])))

    g = jax.grad(trace_s)(0.2)
    fd = (trace_s(0.2 + 1e-6) - trace_s(0.2 - 1e-6)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-6)
    rs = jnp.array([0.1, 0.2, 1.0])
    batched = jax.vmap(lambda r: js.discrete_time_linear_quadratic_regulator(A, B, Q, jnp.array([[r]]))[0])(rs)
    np.testing.assert_allclose(batched[1], m(d["K"]), rtol=1e-10)
    with pytest.raises(js.JaxsysError, match="not stabilizable"):
        js.discrete_algebraic_riccati_equation(np.diag([1.2, 0.5]), np.array([[0.0], [1.0]]), np.eye(2), np.eye(1))


def test_steady_state_kalman_gains_match_drake():
    k = X7["kalman"]
    L = js.steady_state_kalman_filter(m(k["A"]), m(k["C"]), m(k["W"]), m(k["V"]))
    np.testing.assert_allclose(L, m(k["L_continuous"]), rtol=1e-9)
    Ld = js.discrete_time_steady_state_kalman_filter(m(k["A_discrete"]), m(k["C_discrete"]), m(k["W"]), m(k["V"]))
    np.testing.assert_allclose(Ld, m(k["L_discrete"]), rtol=1e-9)


def oscillator(B=True):
    k = X7["kalman"]
    A, C = m(k["A"]), m(k["C"])
    return js.LinearSystem(A, m(X7["luenberger"]["B"]), C, np.zeros((1, 1)))


def test_luenberger_observer_matches_drake_and_the_closed_form():
    lu = X7["luenberger"]
    builder = js.DiagramBuilder()
    plant = builder.add_system(oscillator())
    u = builder.add_system(js.ConstantVectorSource([lu["u"]]))
    pctx = plant.get_input_port(0).fix_value(plant.create_default_context(), [0.0])
    obs = builder.add_system(js.LuenbergerObserver(plant, pctx, m(lu["L"])))
    builder.connect(u.get_output_port(0), plant.get_input_port(0))
    builder.connect(u.get_output_port(0), obs.get_observed_system_input_input_port())
    builder.connect(plant.get_output_port(0), obs.get_observed_system_output_input_port())
    diagram = builder.build()
    ctx = diagram.create_default_context()
    ctx = plant.set_my_context_in_root(
        ctx, plant.get_my_context_from_root(ctx).with_continuous_state(jnp.array(lu["x0"]))
    )
    ts = [s["t"] for s in lu["samples"]]

    def record(c):
        return jnp.concatenate(
            [
                plant.get_my_context_from_root(c).get_continuous_state_vector(),
                obs.get_output_port(0).eval(obs.get_my_context_from_root(c)),
            ]
        )

    r = js.simulate(diagram, ctx, 3.0, js.RungeKutta5Integrator(target_accuracy=1e-11), save_at=ts, record=record)
    ys = np.asarray(r.ys)
    for s, y in zip(lu["samples"], ys):
        np.testing.assert_allclose(y[:2], s["x"], atol=1e-8)
        np.testing.assert_allclose(y[2:], s["xhat"], atol=1e-8)
    # the error obeys e' = (A - L C) e: closed form by the matrix exponential
    A, C, L = m(X7["kalman"]["A"]), m(X7["kalman"]["C"]), m(lu["L"])
    from scipy.linalg import expm

    e0 = np.array(lu["x0"])  # observer starts at 0
    for t, y in zip(ts, ys):
        np.testing.assert_allclose(y[:2] - y[2:], expm((A - L @ C) * t) @ e0, atol=1e-8)


def test_luenberger_bad_gain_shape_is_named():
    plant = oscillator()
    pctx = plant.get_input_port(0).fix_value(plant.create_default_context(), [0.0])
    with pytest.raises(js.JaxsysError, match=r"observer_gain must have shape .* \(2, 1\); got \(1, 2\)"):
        js.LuenbergerObserver(plant, pctx, [[1.0, 2.0]])


def ekf_reference(Ad, Bd, C, W, V, x0, P0, ys, u):
    """A hand-written discrete Kalman filter (numpy) for the linear RK4 map."""
    x, P, out = x0.copy(), P0.copy(), []
    for k, y in enumerate(ys):
        if k:
            x = Ad @ x + Bd @ u
            P = Ad @ P @ Ad.T + W
        S = C @ P @ C.T + V
        K = P @ C.T @ np.linalg.inv(S)
        x = x + K @ (y - C @ x)
        I_KC = np.eye(len(x)) - K @ C
        P = I_KC @ P @ I_KC.T + K @ V @ K.T
        out.append(x.copy())
    return np.array(out)


def ekf_diagram(W, V, h, ys_times, ys_values, u):
    plant = oscillator()
    pctx = plant.get_input_port(0).fix_value(plant.create_default_context(), [0.0])
    builder = js.DiagramBuilder()
    ekf = builder.add_system(
        js.ExtendedKalmanFilter(plant, pctx, W, V, h, initial_state=[0.5, 0.0], initial_covariance=np.eye(2))
    )
    meas = builder.add_system(js.TrajectorySource(js.PiecewisePolynomial.first_order_hold(ys_times, ys_values)))
    src = builder.add_system(js.ConstantVectorSource([u]))
    builder.connect(meas.get_output_port(0), ekf.get_input_port(0))
    builder.connect(src.get_output_port(0), ekf.get_input_port(1))
    return builder.build(), ekf


def test_extended_kalman_filter_on_a_linear_plant_is_the_kalman_filter():
    h, u, K = 0.1, 0.5, 20
    A, C = m(X7["kalman"]["A"]), m(X7["kalman"]["C"])
    B = m(X7["luenberger"]["B"])
    # the RK4 map of a linear system: x+ = T4(Ah) x + h (I + Ah/2 + (Ah)^2/6 + (Ah)^3/24) B u
    Ah = A * h
    T4 = np.eye(2) + Ah + Ah @ Ah / 2 + Ah @ Ah @ Ah / 6 + Ah @ Ah @ Ah @ Ah / 24
    Bd = h * (np.eye(2) + Ah / 2 + Ah @ Ah / 6 + Ah @ Ah @ Ah / 24) @ B
    rng = np.random.default_rng(0)
    ts = h * np.arange(K + 1)
    ys = (np.sin(2 * ts) + 0.1 * rng.standard_normal(K + 1))[:, None]
    W, V = np.diag([1e-3, 1e-2]), np.array([[0.05]])
    diagram, ekf = ekf_diagram(W, V, h, ts, ys, u)
    ctx = diagram.create_default_context()

    def record(c):
        return ekf.get_output_port(0).eval(ekf.get_my_context_from_root(c))

    # an estimate is published at each sample; read it just after (outputs hold between samples)
    probe = ts[:K] + 0.5 * h
    r = js.simulate(
        diagram, ctx, ts[K - 1] + 0.5 * h, js.RungeKutta4Integrator(max_step_size=h / 2), save_at=probe, record=record
    )
    ref = ekf_reference(T4, Bd, C, W, V, np.array([0.5, 0.0]), np.eye(2), ys[:K], np.array([u]))
    np.testing.assert_allclose(np.asarray(r.ys), ref, atol=1e-10)

    # gradient of the last estimate with respect to the measurement noise V (in the context), vs FD
    def last(v):
        c = ekf.set_my_context_in_root(ctx, ekf.get_my_context_from_root(ctx).with_numeric_parameter(1, jnp.array([v])))
        return js.simulate(
            diagram,
            c,
            ts[K - 1] + 0.5 * h,
            js.RungeKutta4Integrator(max_step_size=h / 2),
            save_at=probe[-1:],
            record=record,
        ).ys[0, 0]

    g = jax.grad(last)(0.05)
    fd = (last(0.05 + 1e-6) - last(0.05 - 1e-6)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-5)
    # vmap over V: each member equals its own reference
    vs = jnp.array([0.01, 0.05, 0.5])
    batched = jax.vmap(last)(vs)
    for v, b in zip(vs, batched):
        np.testing.assert_allclose(
            b,
            ekf_reference(T4, Bd, C, W, np.array([[float(v)]]), np.array([0.5, 0.0]), np.eye(2), ys[:K], np.array([u]))[
                -1, 0
            ],
            atol=1e-10,
        )


def test_extended_kalman_filter_bad_inputs_are_named():
    plant = oscillator()
    pctx = plant.get_input_port(0).fix_value(plant.create_default_context(), [0.0])
    with pytest.raises(js.JaxsysError, match=r"W \(process noise covariance, n x n\) must have shape \(2, 2\)"):
        js.ExtendedKalmanFilter(plant, pctx, np.eye(3), np.eye(1), 0.1)
    with pytest.raises(js.JaxsysError, match="V must be positive definite"):
        js.ExtendedKalmanFilter(plant, pctx, np.eye(2), np.zeros((1, 1)), 0.1)
    with pytest.raises(js.JaxsysError, match="period must be positive"):
        js.ExtendedKalmanFilter(plant, pctx, np.eye(2), np.eye(1), 0.0)


def test_finite_horizon_lqr_matches_drake():
    d = X7["fhlqr"]
    plant = js.LinearSystem(m(d["A"]), m(d["B"]), np.eye(2), np.zeros((2, 1)))
    ctx = plant.get_input_port(0).fix_value(plant.create_default_context(), [0.0])
    r = js.finite_horizon_linear_quadratic_regulator(plant, ctx, d["t0"], d["tf"], m(d["Q"]), m(d["R"]), Qf=m(d["Qf"]))
    # Drake integrates the Riccati equation at its default accuracy: its S differs from the converged
    # one by ~7e-6 relative; ours is converged (fixed-step RK4, h = 4 ms, agrees to 1e-9)
    fine = js.finite_horizon_linear_quadratic_regulator(
        plant,
        ctx,
        d["t0"],
        d["tf"],
        m(d["Q"]),
        m(d["R"]),
        Qf=m(d["Qf"]),
        integrator=js.RungeKutta4Integrator(max_step_size=4e-3),
    )
    for t, S, K in zip(d["times"], d["S"], d["K"]):
        np.testing.assert_allclose(r.S_at(t), S, rtol=2e-5)
        np.testing.assert_allclose(r.K_at(t), K, rtol=2e-5)
        np.testing.assert_allclose(r.S_at(t), fine.S_at(t), rtol=1e-9)
    # a long horizon approaches the infinite-horizon LQR (CARE)
    long = js.finite_horizon_linear_quadratic_regulator(plant, ctx, 0.0, 30.0, m(d["Q"]), m(d["R"]), num_steps=1500)
    K_inf, S_inf = js.linear_quadratic_regulator(m(d["A"]), m(d["B"]), m(d["Q"]), m(d["R"]))
    np.testing.assert_allclose(long.S_at(0.0), S_inf, rtol=1e-8)


def test_finite_horizon_lqr_stabilizes_the_acrobot_collocation_trajectory():
    # the acrobot swing-up by collocation diverges open loop (test_trajopt); tracking it with the
    # time-varying LQR about the collocation trajectory reaches the upright goal
    import warnings

    from jaxsys.examples import Acrobot

    plant = Acrobot()
    ctx = plant.get_input_port(0).fix_value(plant.create_default_context(), [0.0])
    goal = np.array([np.pi, 0.0, 0.0, 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        traj = js.direct_collocation(plant, ctx, 4.0, 40, lambda x, u: u @ u, x_final=goal, u_limit=20.0)
    port = plant.get_input_port(0)
    xdots = jax.vmap(lambda x, u: plant._calc_time_derivatives_raw(port.fix_value(ctx.with_continuous_state(x), u)))(
        jnp.asarray(traj.x), jnp.asarray(traj.u)
    )
    x0 = js.PiecewisePolynomial.cubic_hermite(traj.times, traj.x, xdots)
    Q, R = np.diag([10.0, 10.0, 1.0, 1.0]), np.eye(1)
    tvlqr = js.make_finite_horizon_linear_quadratic_regulator(
        plant, ctx, 0.0, 4.0, Q, R, Qf=Q, x0=x0, u0=traj.input_trajectory, num_steps=200
    )
    b = js.DiagramBuilder()
    p = b.add_system(Acrobot())
    c = b.add_system(tvlqr)
    b.connect(p.get_output_port(0), c.get_input_port(0))
    b.connect(c.get_output_port(0), p.get_input_port(0))
    d = b.build()
    r = js.simulate(d, d.create_default_context(), 4.0, js.RungeKutta4Integrator(max_step_size=0.002))
    final = np.asarray(p.get_my_context_from_root(r.context).get_continuous_state_vector())
    np.testing.assert_allclose(final, goal, atol=0.03)  # (open loop: off by radians)


def test_controllability_observability_and_pbh_tests():
    A = np.array([[0.0, 1.0], [0.0, 0.0]])
    B = np.array([[0.0], [1.0]])
    C = np.array([[1.0, 0.0]])
    np.testing.assert_allclose(js.controllability_matrix(A, B), [[0.0, 1.0], [1.0, 0.0]])
    np.testing.assert_allclose(js.observability_matrix(A, C), [[1.0, 0.0], [0.0, 1.0]])
    assert js.is_controllable(A, B) and js.is_observable(A, C)
    assert not js.is_controllable(A, np.array([[1.0], [0.0]]))  # a force on the position only
    assert not js.is_observable(A, np.array([[0.0, 1.0]]))  # velocity measured: position unseen
    # a stable uncontrollable mode is still stabilizable; an unstable one is not
    A2 = np.diag([-1.0, 2.0])
    assert js.is_stabilizable(A2, np.array([[0.0], [1.0]])) and not js.is_stabilizable(A2, np.array([[1.0], [0.0]]))
    assert js.is_detectable(A2, np.array([[0.0, 1.0]])) and not js.is_detectable(A2, np.array([[1.0, 0.0]]))
    # discrete time: |lambda| < 1 is stable
    Ad = np.diag([0.5, 1.5])
    assert js.is_stabilizable(Ad, np.array([[0.0], [1.0]]), continuous_time=False)
    assert not js.is_stabilizable(Ad, np.array([[1.0], [0.0]]), continuous_time=False)


def test_observer_and_finite_horizon_lqr_gradients_and_vmap():
    # the Luenberger estimate at t = 1 differentiates with respect to the gain (in the context) and
    # batches over gains; d trace S(t0) / d R of the finite-horizon LQR matches finite differences
    lu = X7["luenberger"]
    plant = oscillator()
    pctx = plant.get_input_port(0).fix_value(plant.create_default_context(), [0.0])
    obs = js.LuenbergerObserver(plant, pctx, m(lu["L"]))
    octx = obs.get_input_port(0).fix_value(obs.create_default_context(), [1.0])
    octx = obs.get_input_port(1).fix_value(octx, [0.5])
    integ = js.RungeKutta4Integrator(max_step_size=0.01)

    def estimate(l0):
        c = octx.with_numeric_parameter(0, jnp.array([l0, 3.0]))
        return js.simulate(obs, c, 1.0, integ).context.get_continuous_state_vector()[0]

    g = jax.grad(estimate)(2.0)
    np.testing.assert_allclose(g, (estimate(2.0 + 1e-6) - estimate(2.0 - 1e-6)) / 2e-6, rtol=1e-6)
    gains = jnp.array([1.0, 2.0, 4.0])
    np.testing.assert_allclose(jax.vmap(estimate)(gains), [estimate(float(v)) for v in gains], rtol=1e-12)

    d = X7["fhlqr"]
    lin = js.LinearSystem(m(d["A"]), m(d["B"]), np.eye(2), np.zeros((2, 1)))
    lctx = lin.get_input_port(0).fix_value(lin.create_default_context(), [0.0])

    def trace_s0(r):
        res = js.finite_horizon_linear_quadratic_regulator(
            lin, lctx, 0.0, 1.0, m(d["Q"]), jnp.array([[r]]), Qf=m(d["Qf"]), num_steps=20
        )
        return jnp.trace(res.S_at(0.0))

    g = jax.grad(trace_s0)(0.5)
    np.testing.assert_allclose(g, (trace_s0(0.5 + 1e-5) - trace_s0(0.5 - 1e-5)) / 2e-5, rtol=1e-5)
