"""Each primitive against its definition (values, shapes, feedthrough), closed-form checks of
LinearSystem and the PID loop, sources."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import jaxsys as js


def fixed(system, *values):
    ctx = system.create_default_context()
    for port, v in zip(range(system.num_input_ports()), values):
        ctx = system.get_input_port(port).fix_value(ctx, v)
    return ctx


def test_stateless_blocks():
    a = js.Adder(3, 2)
    np.testing.assert_allclose(a.get_output_port().eval(fixed(a, [1, 2], [3, 4], [5, 6])), [9, 12])
    assert a.get_direct_feedthroughs() == {(0, 0), (1, 0), (2, 0)}
    g = js.Gain([2.0, -1.0], 2)
    np.testing.assert_allclose(g.get_output_port().eval(fixed(g, [3, 4])), [6, -4])
    m = js.MatrixGain([[1.0, 2.0, 3.0], [0.0, 1.0, 0.0]])
    assert (m.get_input_port().size(), m.get_output_port().size()) == (3, 2)
    np.testing.assert_allclose(m.get_output_port().eval(fixed(m, [1, 1, 1])), [6, 1])
    s = js.Saturation([-1.0, 0.0], [1.0, 0.5])
    np.testing.assert_allclose(s.get_output_port().eval(fixed(s, [-3, 0.7])), [-1, 0.5])
    with pytest.raises(js.DeclarationError, match="lower limit above upper limit"):
        js.Saturation(1.0, 0.0)
    mux = js.Multiplexer([2, 1])
    np.testing.assert_allclose(mux.get_output_port().eval(fixed(mux, [1, 2], [3])), [1, 2, 3])
    demux = js.Demultiplexer([1, 2])
    c = fixed(demux, [7, 8, 9])
    np.testing.assert_allclose(demux.get_output_port(0).eval(c), [7])
    np.testing.assert_allclose(demux.get_output_port(1).eval(c), [8, 9])
    assert demux.get_direct_feedthroughs() == {(0, 0), (0, 1)}
    p = js.PassThrough(2)
    np.testing.assert_allclose(p.get_output_port().eval(fixed(p, [5, 6])), [5, 6])


def test_sine_and_its_derivatives():
    s = js.Sine(2.0, 3.0, 0.5, size=2)
    c = s.create_default_context().with_time(0.7)
    arg = 3.0 * 0.7 + 0.5
    np.testing.assert_allclose(s.get_output_port(0).eval(c), [2 * np.sin(arg)] * 2)
    d = jax.jacfwd(lambda t: s.get_output_port(0).eval(c.with_time(t)))(0.7)
    np.testing.assert_allclose(d, s.get_output_port(1).eval(c), rtol=1e-13)
    np.testing.assert_allclose(s.get_output_port(2).eval(c), [-2 * 9 * np.sin(arg)] * 2)


def test_integrator_and_lag_derivatives():
    i = js.Integrator(2)
    assert i.calc_time_derivatives(fixed(i, [1.5, -2])).x.tolist() == [1.5, -2]
    assert not i.has_any_direct_feedthrough()
    lag = js.FirstOrderLowPassFilter([0.5, 2.0], 2)
    c = fixed(lag, [1.0, 1.0]).with_continuous_state(jnp.array([0.0, 3.0]))
    np.testing.assert_allclose(lag.calc_time_derivatives(c).x, [2.0, -1.0])


def test_continuous_linear_system_against_matrix_exponential():
    A = np.array([[0.0, 1.0], [-4.0, -0.4]])
    B = np.array([[0.0], [1.0]])
    C = np.array([[1.0, 0.0]])
    D = np.array([[0.5]])
    sys = js.LinearSystem(A, B, C, D)
    assert sys.get_direct_feedthroughs() == {(0, 0)}
    ctx = fixed(sys, [2.0]).with_continuous_state(jnp.array([1.0, 0.0]))
    r = js.simulate(sys, ctx, 2.0, js.RungeKutta5Integrator(target_accuracy=1e-12))
    # x(t) = e^{At} x0 + A^{-1}(e^{At} - I) B u for constant u
    eA = scipy.linalg.expm(A * 2.0)
    x_exact = eA @ [1.0, 0.0] + np.linalg.solve(A, (eA - np.eye(2)) @ B @ [2.0])
    np.testing.assert_allclose(r.context.get_continuous_state_vector(), x_exact, rtol=1e-9)
    np.testing.assert_allclose(sys.get_output_port().eval(r.context), C @ x_exact + D @ [2.0], rtol=1e-9)

    # gradient w.r.t. a matrix entry (the matrices are a parameter in the context)
    def final(a10):
        M = dict(ctx.get_abstract_parameter(0))
        M["A"] = M["A"].at[1, 0].set(a10)
        return js.simulate(
            sys, ctx.with_abstract_parameter(0, M), 2.0, js.RungeKutta4Integrator(max_step_size=1e-3)
        ).context.get_continuous_state_vector()[0]

    g = jax.grad(final)(-4.0)
    fd = (final(-4.0 + 1e-6) - final(-4.0 - 1e-6)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-6)


def test_discrete_linear_system_closed_form():
    A = np.array([[0.5, 0.1], [0.0, 0.9]])
    B = np.array([[1.0], [0.5]])
    sys = js.LinearSystem(A, B, np.eye(2), time_period=0.1)
    ctx = fixed(sys, [1.0])
    r = js.simulate(sys, ctx, 1.0)
    x = np.zeros(2)
    for _ in range(10):  # updates at 0.0, ..., 0.9; the one at 1.0 is pending (Drake)
        x = A @ x + B @ [1.0]
    np.testing.assert_allclose(r.context.get_discrete_state(0), x, rtol=1e-14)
    assert not sys.has_any_direct_feedthrough()  # D = 0


def test_zero_order_hold_and_discrete_derivative():
    b = js.DiagramBuilder()
    sine = b.add_system(js.Sine(1.0, 2.0, 0.0))
    zoh = b.add_system(js.ZeroOrderHold(0.1, 1))
    deriv = b.add_system(js.DiscreteDerivative(1, 0.1))
    b.connect(sine.get_output_port(0), zoh.get_input_port())
    b.connect(sine.get_output_port(0), deriv.get_input_port())
    b.export_output(zoh.get_output_port(), "held")
    b.export_output(deriv.get_output_port(), "dudt")
    d = b.build()
    assert not zoh.has_any_direct_feedthrough() and not deriv.has_any_direct_feedthrough()
    ctx = d.create_default_context()
    r = js.simulate(
        d,
        ctx,
        0.55,
        save_at=jnp.array([0.05, 0.15, 0.55]),
        record=lambda c: jnp.concatenate([d.get_output_port(0).eval(c), d.get_output_port(1).eval(c)]),
    )
    # held: sin(2 t_k) at the last sample t_k <= t; derivative (u[n] - u[n-1]) / 0.1 after two samples
    np.testing.assert_allclose(r.ys[:, 0], [np.sin(0.0), np.sin(0.2), np.sin(1.0)], atol=1e-14)
    np.testing.assert_allclose(
        r.ys[:, 1], [0.0, (np.sin(0.2) - 0.0) / 0.1, (np.sin(1.0) - np.sin(0.8)) / 0.1], atol=1e-12
    )


def test_continuous_pid_loop_closed_form():
    # plant xdot = u (integrator), PID with kd = 0 on e = r - x: a second-order linear loop
    kp, ki = 2.0, 5.0
    b = js.DiagramBuilder()
    plant = b.add_system(js.Integrator(1))
    mux = b.add_system(js.Multiplexer(2))  # estimated state [x, 0]
    zero = b.add_system(js.ConstantVectorSource([0.0]))
    ref = b.add_system(js.ConstantVectorSource([1.0, 0.0]))
    pid = b.add_system(js.PidController(kp, ki, 0.0))
    b.connect(plant.get_output_port(), mux.get_input_port(0))
    b.connect(zero.get_output_port(), mux.get_input_port(1))
    b.connect(mux.get_output_port(), pid.get_input_port("estimated_state"))
    b.connect(ref.get_output_port(), pid.get_input_port("desired_state"))
    b.connect(pid.get_output_port(), plant.get_input_port())
    d = b.build()
    r = js.simulate(d, d.create_default_context(), 3.0, js.RungeKutta5Integrator(target_accuracy=1e-12))
    # [x, I]' = [[-kp, ki], [-1, 0]] [x, I] + [kp, 1] r
    A = np.array([[-kp, ki], [-1.0, 0.0]])
    eA = scipy.linalg.expm(A * 3.0)
    z = np.linalg.solve(A, (eA - np.eye(2)) @ np.array([kp, 1.0]))
    x = d.get_subsystem_context(r.context, plant).get_continuous_state_vector()[0]
    np.testing.assert_allclose(x, z[0], rtol=1e-9)


def test_discrete_pid_controller_against_hand_loop():
    kp, ki, kd, T = 10.0, 1.0, 5.0, 0.01
    b = js.DiagramBuilder()
    plant = b.add_system(js.LinearSystem([[0.0, 1.0], [0.0, 0.0]], [[0.0], [1.0]], np.eye(2)))
    ref = b.add_system(js.ConstantVectorSource([1.0, 0.0]))
    pid = b.add_system(js.DiscretePidController(kp, ki, kd, T))
    b.connect(plant.get_output_port(), pid.get_input_port("estimated_state"))
    b.connect(ref.get_output_port(), pid.get_input_port("desired_state"))
    b.connect(pid.get_output_port(), plant.get_input_port())
    d = b.build()
    r = js.simulate(d, d.create_default_context(), 1.0, js.RungeKutta4Integrator(max_step_size=T))
    q = v = integral = 0.0
    for _ in range(100):
        e, edot = 1.0 - q, -v
        integral += e * T
        u = kp * e + ki * integral + kd * edot
        q, v = q + v * T + 0.5 * u * T * T, v + u * T
    np.testing.assert_allclose(
        d.get_subsystem_context(r.context, plant).get_continuous_state_vector(), [q, v], rtol=1e-10
    )


def test_piecewise_polynomial_and_trajectory_source():
    times = jnp.array([0.0, 1.0, 3.0])
    values = jnp.array([[0.0, 1.0], [2.0, 1.0], [2.0, -1.0]])
    foh = js.PiecewisePolynomial.first_order_hold(times, values)
    np.testing.assert_allclose(foh.value(0.5), [1.0, 1.0])
    np.testing.assert_allclose(foh.value(2.0), [2.0, 0.0])
    np.testing.assert_allclose(foh.value(5.0), [2.0, -1.0])  # held after the end
    zoh = js.PiecewisePolynomial.zero_order_hold(times, values)
    np.testing.assert_allclose(zoh.value(1.5), [2.0, 1.0])
    derivs = jnp.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    cub = js.PiecewisePolynomial.cubic_hermite(times, values, derivs)
    for i, t in enumerate(times):
        np.testing.assert_allclose(cub.value(t), values[i], atol=1e-14)
        np.testing.assert_allclose(cub.value(t, 1), derivs[i], atol=1e-12)
    np.testing.assert_allclose(jax.jacfwd(lambda t: cub.value(t))(0.7), cub.value(0.7, 1), rtol=1e-12)
    src = js.TrajectorySource(foh, output_derivative_order=1)
    c = src.create_default_context().with_time(2.0)
    np.testing.assert_allclose(src.get_output_port(0).eval(c), [2.0, 0.0])
    np.testing.assert_allclose(src.get_output_port(1).eval(c), [0.0, -1.0])
    # the trajectory is a differentiable parameter
    g = jax.grad(lambda tr: src.get_output_port(0).eval(src.with_trajectory(c, tr))[1])(foh)
    assert g.coeffs.shape == foh.coeffs.shape and float(jnp.abs(g.coeffs).sum()) > 0


def test_random_source_reproducible_and_distinct_per_key():
    r = js.RandomSource("gaussian", 3, 0.1)
    base = r.create_default_context()
    run = jax.jit(lambda c: js.simulate(r, c, 1.0).context.get_discrete_state(0))
    a = run(r.with_seed(base, 1))
    np.testing.assert_array_equal(a, run(r.with_seed(base, 1)))  # same key, same samples
    keys = jax.random.split(jax.random.PRNGKey(7), 4)
    batch = jax.vmap(lambda k: run(r.with_seed(base, k)))(keys)
    assert len({tuple(np.asarray(row).round(12)) for row in batch}) == 4  # different per member
    # statistics of many samples
    samples = jax.vmap(lambda k: run(r.with_seed(base, k)))(jax.random.split(jax.random.PRNGKey(0), 2000))
    assert abs(float(samples.mean())) < 0.05 and abs(float(samples.std()) - 1.0) < 0.05


@pytest.mark.parametrize("x64", [True, False])
def test_random_sources_have_distinct_reproducible_default_seeds(x64):
    """Issue #36 item 3: two sources built without a seed gave identical streams (a Kalman diagram's
    process noise equalled its measurement noise). As Drake, each draws its default seed from a counter;
    an explicit seed fixes it; the same program gives the same samples every run."""
    with jax.enable_x64(x64):
        a, b = js.RandomSource("gaussian", 5, 0.1), js.RandomSource("gaussian", 5, 0.1)
        assert a.get_default_seed() != b.get_default_seed() and a.get_fixed_seed() is None

        def stream(src, ctx=None):
            ctx = src.create_default_context() if ctx is None else ctx
            ts = jnp.linspace(0.0, 0.4, 5)
            return np.asarray(js.simulate(src, ctx, 0.45, save_at=ts, record=lambda c: c.get_discrete_state(0)).ys)

        sa, sb = stream(a), stream(b)
        assert sa.dtype == (np.float64 if x64 else np.float32)
        assert np.min(np.abs(sa - sb)) > 0  # no equal sample anywhere
        fixed = js.RandomSource("gaussian", 5, 0.1, seed=a.get_default_seed())
        assert fixed.get_fixed_seed() == a.get_default_seed()
        np.testing.assert_array_equal(stream(fixed), sa)  # an explicit seed reproduces a stream
        np.testing.assert_array_equal(stream(b, b.with_seed(b.create_default_context(), a.get_default_seed())), sa)
    with pytest.raises(js.DeclarationError, match="seed"):
        js.RandomSource("gaussian", 1, 0.1, seed=-1)


def test_random_sources_default_seeds_are_the_same_in_every_run_of_a_program():
    """The same program, run twice, samples the same: the default seeds' counter starts afresh in
    each process (three sources, three distinct samples)."""
    code = (
        "import jaxsys as js, numpy as np; s = [js.RandomSource('uniform', 2, 0.1) for _ in range(3)]; "
        "print([float(js.simulate(x, x.create_default_context(), 0.05).context.get_discrete_state(0)[0]) for x in s])"
    )
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300) for _ in range(2)]
    assert runs[0].returncode == 0, runs[0].stderr
    assert runs[0].stdout == runs[1].stdout and len(set(runs[0].stdout.strip("[]\n").split(","))) == 3


def test_function_system_one_liner():
    pend = js.FunctionSystem(
        lambda t, x, u, p: jnp.stack([x[1], -p[0] * jnp.sin(x[0]) + u[0]]),
        lambda t, x, u, p: x[:1],
        num_states=2,
        num_inputs=1,
        num_outputs=1,
        params=[9.81],
        x0=[0.5, 0.0],
    )
    c = fixed(pend, [1.0])
    np.testing.assert_allclose(pend.calc_time_derivatives(c).x, [0.0, -9.81 * np.sin(0.5) + 1.0])
    np.testing.assert_allclose(pend.get_output_port().eval(c), [0.5])
    assert not pend.has_any_direct_feedthrough()
    static_gain = js.FunctionSystem(None, lambda t, x, u, p: 3.0 * u, num_inputs=2, num_outputs=2)
    assert static_gain.get_direct_feedthroughs() == {(0, 0)}


def test_affine_system_offsets():
    sys = js.AffineSystem(A=[[-1.0]], B=[[2.0]], f0=[0.5], C=[[3.0]], D=[[0.0]], y0=[1.0])
    ctx = fixed(sys, [1.0]).with_continuous_state(jnp.array([4.0]))
    np.testing.assert_allclose(sys.calc_time_derivatives(ctx).x, [-4.0 + 2.0 + 0.5])
    np.testing.assert_allclose(sys.get_output_port().eval(ctx), [13.0])
    assert not sys.has_any_direct_feedthrough()  # D = 0, as Drake declares
    # steady state x* = (B u + f0) / 1 = 2.5 reached by simulation
    r = js.simulate(sys, ctx, 20.0, js.RungeKutta5Integrator(target_accuracy=1e-10))
    np.testing.assert_allclose(r.context.get_continuous_state_vector(), [2.5], atol=1e-7)
    with pytest.raises(js.DeclarationError, match="A must be square"):
        js.AffineSystem(A=[[1.0, 2.0]])
