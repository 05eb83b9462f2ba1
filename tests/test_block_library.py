"""The block library against pydrake's outputs for the same inputs (tests/data/X8_primitives.json,
written by tests/data/drake_primitives.py with pydrake 1.58.0), closed forms, gradients and vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import load_drake

import jaxsys as js


X8 = load_drake("X8_primitives")
TIMES = np.asarray(X8["times"])


def run(block, setup=None, params=None):
    """A Sine (1, 2 rad/s, phase 0.3) into ``block``; its output at TIMES (as pydrake's script)."""
    b = js.DiagramBuilder()
    src = b.add_system(js.Sine(1.0, 2.0, 0.3))
    blk = b.add_system(block)
    b.connect(src.get_output_port(0), blk.get_input_port(0))
    d = b.build()
    ctx = d.create_default_context()
    if setup is not None:
        ctx = blk.set_my_context_in_root(ctx, setup(blk, blk.get_my_context_from_root(ctx)))

    def record(c):
        return blk.get_output_port(0).eval(blk.get_my_context_from_root(c))

    return d, ctx, record


def outputs(block, setup=None):
    d, ctx, record = run(block, setup)
    r = js.simulate(
        d, ctx, float(TIMES[-1]), js.RungeKutta4Integrator(max_step_size=0.01), save_at=TIMES, record=record
    )
    return np.asarray(r.ys)


@pytest.mark.parametrize(
    "key, make, setup",
    [
        ("derivative_suppress", lambda: js.DiscreteDerivative(1, 0.1, True), None),
        ("derivative_no_suppress", lambda: js.DiscreteDerivative(1, 0.1, suppress_initial_transient=False), None),
        ("delay_3", lambda: js.DiscreteTimeDelay(0.1, 3, 1), None),
        ("zoh", lambda: js.ZeroOrderHold(0.1, 1, offset_sec=0.05), None),
        (
            "interpolator_initial_position",
            lambda: js.StateInterpolatorWithDiscreteDerivative(1, 0.1, True),
            lambda blk, c: blk.set_initial_position(c, jnp.array([0.5])),
        ),
        ("wrap", lambda: js.WrapToSystem(1, {0: (-0.5, 0.5)}), None),
        ("saturation", lambda: js.Saturation([-0.4], [0.6]), None),
    ],
)
def test_matches_drake(key, make, setup):
    np.testing.assert_allclose(outputs(make(), setup), np.asarray(X8[key]), rtol=1e-12, atol=1e-12)


def test_interpolator_initial_state_and_history():
    # set_initial_state(q, v): the velocity output is v until the first update replaces the history
    blk = js.StateInterpolatorWithDiscreteDerivative(2, 0.1)
    ctx = blk.get_input_port(0).fix_value(blk.create_default_context(), jnp.array([1.0, 2.0]))
    ctx = blk.set_initial_state(ctx, jnp.array([1.0, 2.0]), jnp.array([0.3, -0.4]))
    np.testing.assert_allclose(blk.get_output_port(0).eval(ctx), [1.0, 2.0, 0.3, -0.4], atol=1e-12)


def test_abstract_zero_order_hold_and_delay_hold_pytrees():
    model = {"pos": jnp.zeros(2), "mode": jnp.zeros((), jnp.int32)}

    class Clock(js.LeafSystem):
        def __init__(self):
            super().__init__("clock")
            self.declare_abstract_output_port(
                "y", model, lambda c: {"pos": jnp.stack([c.get_time(), -c.get_time()]), "mode": jnp.int32(7)}
            )

    for blk, expect in (
        (js.ZeroOrderHold(0.1, model), lambda t: np.floor(t / 0.1 + 1e-9) * 0.1),  # the last sample
        (js.DiscreteTimeDelay(0.1, 2, model), lambda t: max(np.floor(t / 0.1 + 1e-9) - 2, -np.inf) * 0.1),
    ):
        b = js.DiagramBuilder()
        clock = b.add_system(Clock())
        h = b.add_system(blk)
        b.connect(clock.get_output_port(0), h.get_input_port(0))
        d = b.build()
        ts = np.array([0.05, 0.15, 0.25, 0.35, 0.45])
        r = js.simulate(
            d,
            d.create_default_context(),
            0.5,
            js.RungeKutta4Integrator(max_step_size=0.05),
            save_at=ts,
            record=lambda c, h=h: h.get_output_port(0).eval(h.get_my_context_from_root(c)),
        )
        for t, pos, mode in zip(ts, np.asarray(r.ys["pos"]), np.asarray(r.ys["mode"])):
            want = expect(t)
            if want < 0:  # the delay line still holds its initial (model) value
                np.testing.assert_allclose(pos, [0.0, 0.0])
                assert mode == 0
            else:
                np.testing.assert_allclose(pos, [want, -want], atol=1e-12)
                assert mode == 7


def test_saturation_limits_from_ports_and_port_switch():
    sat = js.Saturation(2)
    ctx = sat.get_input_port(0).fix_value(sat.create_default_context(), jnp.array([-3.0, 3.0]))
    with pytest.raises(js.JaxsysError, match="neither limit port"):
        sat.get_output_port(0).eval(ctx)
    ctx1 = sat.get_max_value_port().fix_value(ctx, jnp.array([1.0, 2.0]))
    np.testing.assert_allclose(sat.get_output_port(0).eval(ctx1), [-3.0, 2.0])  # no lower limit
    ctx2 = sat.get_min_value_port().fix_value(ctx1, jnp.array([-1.0, -1.0]))
    np.testing.assert_allclose(sat.get_output_port(0).eval(ctx2), [-1.0, 2.0])
    # gradient with respect to the limit flows through the active bound
    g = jax.grad(lambda hi: sat.get_output_port(0).eval(sat.get_max_value_port().fix_value(ctx2, hi))[1])(
        jnp.array([1.0, 2.0])
    )
    np.testing.assert_allclose(g, [0.0, 1.0])
    sw = js.PortSwitch(2, ["a", "b", "c"])
    c = sw.create_default_context()
    for i, name in enumerate("abc"):
        c = sw.get_input_port(name).fix_value(c, jnp.array([float(i), 10.0 * i]))
    picks = jax.vmap(lambda k: sw.get_output_port(0).eval(sw.get_port_selector_input_port().fix_value(c, k)))(
        jnp.arange(3, dtype=jnp.int32)
    )
    np.testing.assert_allclose(picks, [[0.0, 0.0], [1.0, 10.0], [2.0, 20.0]])


def test_constant_value_source_and_wrap_gradient():
    src = js.ConstantValueSource({"gain": jnp.array(2.5), "name_id": jnp.int32(3)})
    ctx = src.create_default_context()
    out = src.get_output_port(0).eval(ctx)
    assert float(out["gain"]) == 2.5 and int(out["name_id"]) == 3
    w = js.WrapToSystem(2, {1: (-np.pi, np.pi)})
    wc = w.create_default_context()
    f = lambda u: w.get_output_port(0).eval(w.get_input_port(0).fix_value(wc, u))  # noqa: E731
    np.testing.assert_allclose(f(jnp.array([7.0, 4.0])), [7.0, 4.0 - 2 * np.pi])
    np.testing.assert_allclose(jax.jacfwd(f)(jnp.array([7.0, 4.0])), np.eye(2))  # wrapping is locally identity
    with pytest.raises(js.DeclarationError, match="outside the input"):
        js.WrapToSystem(2, {2: (0.0, 1.0)})


def test_multilayer_perceptron_closed_form_and_setters():
    mlp = js.MultilayerPerceptron([2, 3, 1], "tanh")
    assert mlp.num_parameters() == 2 * 3 + 3 + 3 * 1 + 1
    ctx = mlp.create_default_context()
    W0, b0 = np.arange(6.0).reshape(3, 2) / 10, np.array([0.1, -0.2, 0.3])
    W1, b1 = np.array([[1.0, -2.0, 0.5]]), np.array([0.25])
    ctx = mlp.set_biases(mlp.set_weights(ctx, 0, W0), 0, b0)
    ctx = mlp.set_biases(mlp.set_weights(ctx, 1, W1), 1, b1)
    x = np.array([0.7, -1.2])
    ctx = mlp.get_input_port(0).fix_value(ctx, x)
    np.testing.assert_allclose(mlp.get_output_port(0).eval(ctx), W1 @ np.tanh(W0 @ x + b0) + b1, rtol=1e-12)
    np.testing.assert_allclose(mlp.get_weights(ctx, 1), W1)
    with pytest.raises(js.JaxsysError, match=r"layer 0 has W of shape \(3, 2\)"):
        mlp.set_weights(ctx, 0, np.zeros((2, 3)))
    other = mlp.set_random_parameters(ctx, 1)
    assert not np.allclose(mlp.get_parameters(other), mlp.get_parameters(ctx))


def test_multilayer_perceptron_trained_through_a_simulation():
    # x' = -x + MLP(x): learn the network so that x(1) from x(0) = 1 reaches 0.5; the gradient through
    # the simulation matches finite differences, a few Adam steps reduce the loss, and vmap over
    # parameter vectors equals single runs
    import optax

    mlp = js.MultilayerPerceptron([1, 4, 1], "tanh", seed=3)
    b = js.DiagramBuilder()
    plant = b.add_system(js.FunctionSystem(lambda t, x, u, p: -x + u, num_states=1, num_inputs=1, x0=[1.0]))
    net = b.add_system(mlp)
    b.connect(plant.get_output_port(0), net.get_input_port(0))
    b.connect(net.get_output_port(0), plant.get_input_port(0))
    d = b.build()
    ctx0 = d.create_default_context()
    integ = js.RungeKutta4Integrator(max_step_size=0.05)

    def loss(params):
        c = net.set_my_context_in_root(ctx0, net.set_parameters(net.get_my_context_from_root(ctx0), params))
        r = js.simulate(d, c, 1.0, integ)
        return (plant.get_my_context_from_root(r.context).get_continuous_state_vector()[0] - 0.5) ** 2

    p0 = net.get_parameters(net.get_my_context_from_root(ctx0))
    g = jax.grad(loss)(p0)
    for k in (0, 5, 12):
        e = jnp.zeros_like(p0).at[k].set(1e-6)
        np.testing.assert_allclose(g[k], (loss(p0 + e) - loss(p0 - e)) / 2e-6, rtol=1e-5, atol=1e-10)
    opt = optax.adam(0.05)

    @jax.jit
    def step(p, s):
        value, grad = jax.value_and_grad(loss)(p)
        updates, s = opt.update(grad, s)
        return optax.apply_updates(p, updates), s, value

    p, s = p0, opt.init(p0)
    for _ in range(30):
        p, s, _ = step(p, s)
    assert loss(p) < 0.05 * loss(p0)  # (30 steps: ~70x lower)
    batch = jnp.stack([p0, p, 0.5 * (p0 + p)])
    np.testing.assert_allclose(jax.vmap(loss)(batch), [loss(q) for q in batch], rtol=1e-10)


def test_monte_carlo_simulation_mean_and_reproducible_samples():
    # x' = -a x, x(0) = 1, a ~ U(0.5, 1.5): E[x(T)] = (exp(-0.5 T) - exp(-1.5 T)) / T (closed form)
    plant = js.FunctionSystem(lambda t, x, u, p: -p[0] * x, num_states=1, params=[1.0], x0=[1.0])
    base = plant.create_default_context()

    def make_context(key):
        return base.with_numeric_parameter(0, jax.random.uniform(key, (1,), minval=0.5, maxval=1.5))

    def output(ctx):
        return ctx.get_continuous_state_vector()[0]

    T, n = 2.0, 2048
    integ = js.RungeKutta4Integrator(max_step_size=0.05)
    mc = js.monte_carlo_simulation(plant, make_context, output, T, n, seed=7, integrator=integ)
    exact = (np.exp(-0.5 * T) - np.exp(-1.5 * T)) / T
    values = np.asarray(mc.outputs)
    assert values.shape == (n,) and np.all(mc.statuses == 0)
    assert abs(values.mean() - exact) < 4 * values.std() / np.sqrt(n)  # 4 standard errors
    # any sample alone, from its key, gives the same value (Drake's generator snapshot)
    for i in (0, 123, n - 1):
        alone = js.random_simulation(plant, make_context, output, T, mc.keys[i], integrator=integ)
        np.testing.assert_allclose(alone, values[i], rtol=1e-12)
    # the same seed, fewer samples: the same first samples
    few = js.monte_carlo_simulation(plant, make_context, output, T, 10, seed=7, integrator=integ)
    np.testing.assert_allclose(np.asarray(few.outputs), values[:10], rtol=1e-12)


def test_transfer_function_realizations_match_scipy_and_closed_forms():
    from scipy import signal

    tf = js.TransferFunction([2.0, 3.0], [1.0, 4.0, 5.0])  # (2s + 3) / (s^2 + 4s + 5)
    sys = tf.to_state_space()
    ctx = sys.create_default_context()
    A, B, C, D = (np.asarray(sys.__getattribute__(k)(ctx)) for k in ("A", "B", "C", "D"))
    # the same frequency response as SciPy's realization, and back to the same polynomials
    num_ref, den_ref = signal.ss2tf(A, B, C, D)
    np.testing.assert_allclose(den_ref, [1.0, 4.0, 5.0], atol=1e-12)
    np.testing.assert_allclose(num_ref[0][-2:], [2.0, 3.0], atol=1e-12)
    back = js.state_space_to_transfer_function(A, B, C, D)
    np.testing.assert_allclose(back.den, [1.0, 4.0, 5.0], atol=1e-12)
    np.testing.assert_allclose(np.trim_zeros(np.round(back.num, 12), "f"), [2.0, 3.0], atol=1e-12)
    for s in (0.3j, 1.0 + 2.0j, 5.0):
        np.testing.assert_allclose((C @ np.linalg.solve(s * np.eye(2) - A, B) + D)[0, 0], tf.evaluate(s), rtol=1e-12)
    # step response of 1 / (s + 1): 1 - exp(-t), simulated
    lag = js.TransferFunction([1.0], [1.0, 1.0]).to_state_space()
    lc = lag.get_input_port(0).fix_value(lag.create_default_context(), [1.0])
    r = js.simulate(
        lag,
        lc,
        2.0,
        js.RungeKutta5Integrator(target_accuracy=1e-12),
        save_at=[0.5, 1.0, 2.0],
        record=lambda c: lag.get_output_port(0).eval(c)[0],
    )
    np.testing.assert_allclose(r.ys, 1.0 - np.exp(-np.array([0.5, 1.0, 2.0])), atol=1e-9)
    # discrete: H(z) = 1 / (z - 0.5) sampled every 0.1 s: impulse response 0, 1, 0.5, 0.25, ...
    dz = js.TransferFunction([1.0], [1.0, -0.5], time_step=0.1).to_state_space()
    dc = dz.create_default_context()
    x, ys = np.zeros(1), []
    dA, dB, dC = (np.asarray(dz.__getattribute__(k)(dc)) for k in ("A", "B", "C"))
    for k in range(5):
        u = 1.0 if k == 0 else 0.0
        ys.append(float((dC @ x)[0]))
        x = dA @ x + dB[:, 0] * u
    np.testing.assert_allclose(ys, [0.0, 1.0, 0.5, 0.25, 0.125])
    assert dz.time_period == 0.1
    with pytest.raises(js.JaxsysError, match="improper"):
        js.TransferFunction([1.0, 0.0, 0.0], [1.0, 1.0]).to_state_space()


def test_barycentric_mesh_system_matches_drake_and_is_exact_for_affine_functions():
    b = X8["barycentric"]
    mesh = js.BarycentricMeshSystem(b["grid"], np.asarray(b["values"]))
    ctx = mesh.create_default_context()
    f = lambda q: mesh.get_output_port(0).eval(mesh.get_input_port(0).fix_value(ctx, jnp.asarray(q)))  # noqa: E731
    for q, want in zip(b["queries"], b["outputs"]):
        np.testing.assert_allclose(f(q), want, rtol=1e-12)
    # values of an affine function at the mesh points are reproduced exactly in between
    grid = b["grid"]
    pts = np.array([[x0, x1] for x1 in grid[1] for x0 in grid[0]])  # first dimension fastest
    c2 = ctx.with_numeric_parameter(0, jnp.asarray(2.0 * pts[:, 0] - 0.5 * pts[:, 1] + 1.0))
    g = lambda q: mesh.get_output_port(0).eval(mesh.get_input_port(0).fix_value(c2, jnp.asarray(q)))[0]  # noqa: E731
    for q in ([0.3, 1.7], [2.2, -0.4], [1.0, 3.9]):
        np.testing.assert_allclose(g(q), 2.0 * q[0] - 0.5 * q[1] + 1.0, rtol=1e-12)
    np.testing.assert_allclose(jax.grad(g)(jnp.array([0.3, 1.7])), [2.0, -0.5], rtol=1e-12)


def test_selector_and_sparse_matrix_gain():
    from scipy import sparse

    sel = js.Selector([2, 3], [[(1, 2), (0, 0)], [(1, 0), (1, 0), (0, 1)]])
    c = sel.get_input_port(0).fix_value(sel.create_default_context(), jnp.array([1.0, 2.0]))
    c = sel.get_input_port(1).fix_value(c, jnp.array([10.0, 20.0, 30.0]))
    np.testing.assert_allclose(sel.get_output_port(0).eval(c), [30.0, 1.0])
    np.testing.assert_allclose(sel.get_output_port(1).eval(c), [10.0, 10.0, 2.0])
    with pytest.raises(js.DeclarationError, match="selects element 3 of input 1"):
        js.Selector([2, 3], [[(1, 3)]])
    dense = np.array([[0.0, 2.0, 0.0], [1.0, 0.0, -3.0], [0.0, 0.0, 0.0], [4.0, 0.0, 0.0]])
    u = jnp.array([0.5, -1.0, 2.0])
    for D in (dense, sparse.csr_matrix(dense)):
        g = js.SparseMatrixGain(D)
        gc = g.get_input_port(0).fix_value(g.create_default_context(), u)
        np.testing.assert_allclose(g.get_output_port(0).eval(gc), dense @ np.asarray(u), rtol=1e-12)
    # the gradient with respect to the stored nonzeros is u at their columns
    vals_grad = jax.grad(lambda v: jnp.sum(g.get_output_port(0).eval(gc.with_numeric_parameter(0, v))))(
        gc.get_numeric_parameter(0)
    )
    np.testing.assert_allclose(vals_grad, np.asarray(u)[list(g.cols)])


def test_time_varying_and_trajectory_systems():
    # x' = -t x: x(t) = x0 exp(-t^2 / 2) (closed form); the trajectory form gives the same
    tv = js.TimeVaryingAffineSystem(lambda t: -t * jnp.eye(1), None, None, lambda t: jnp.eye(1), None, None, 1, 0, 1)
    ctx = tv.create_default_context().with_continuous_state(jnp.array([2.0]))
    r = js.simulate(tv, ctx, 1.5, js.RungeKutta5Integrator(target_accuracy=1e-12), save_at=[0.5, 1.0, 1.5])
    np.testing.assert_allclose(np.asarray(r.ys)[:, 0], 2.0 * np.exp(-(np.array([0.5, 1.0, 1.5]) ** 2) / 2), rtol=1e-9)
    ts = np.linspace(0.0, 2.0, 5)
    A_traj = js.PiecewisePolynomial.first_order_hold(ts, -ts[:, None])  # -t exactly (linear)
    traj = js.TrajectoryLinearSystem(
        A_traj, None, js.PiecewisePolynomial.zero_order_hold(ts, np.ones((5, 1))), None, 1, 0, 1
    )
    r2 = js.simulate(
        traj,
        traj.create_default_context().with_continuous_state(jnp.array([2.0])),
        1.5,
        js.RungeKutta5Integrator(target_accuracy=1e-12),
        save_at=[0.5, 1.0, 1.5],
    )
    np.testing.assert_allclose(r2.ys, r.ys, rtol=1e-9)
    # discrete: x[n+1] = (1 + t_n) x[n] + u, t_n = 0.1 n, u = 1 (closed-form recursion)
    dtv = js.TimeVaryingAffineSystem(
        lambda t: (1.0 + t) * jnp.eye(1),
        lambda t: jnp.eye(1),
        None,
        lambda t: jnp.eye(1),
        None,
        None,
        1,
        1,
        1,
        time_period=0.1,
    )
    dc = dtv.get_input_port(0).fix_value(dtv.create_default_context(), [1.0])
    rd = js.simulate(dtv, dc, 0.35, save_at=[0.35], record=lambda c: c.get_discrete_state(0))
    x = 0.0
    for n in range(4):  # updates at 0, 0.1, 0.2, 0.3
        x = (1.0 + 0.1 * n) * x + 1.0
    np.testing.assert_allclose(np.asarray(rd.ys)[0, 0], x, rtol=1e-12)
    with pytest.raises(js.DeclarationError, match=r"A\(t\) must have shape \(2, 2\)"):
        js.TimeVaryingLinearSystem(lambda t: jnp.eye(3), None, None, None, 2, 0, 0)


def _tv_lag():
    return js.TimeVaryingAffineSystem(
        lambda t: -(1.0 + t) * jnp.eye(1), lambda t: jnp.eye(1), None, lambda t: jnp.eye(1), None, None, 1, 1, 1
    )


BLOCKS = {
    "DiscreteDerivative": lambda: js.DiscreteDerivative(1, 0.1),
    "DiscreteTimeDelay": lambda: js.DiscreteTimeDelay(0.1, 2, 1),
    "ZeroOrderHold": lambda: js.ZeroOrderHold(0.1, 1),
    "StateInterpolatorWithDiscreteDerivative": lambda: js.StateInterpolatorWithDiscreteDerivative(1, 0.1),
    "WrapToSystem": lambda: js.WrapToSystem(1, {0: (-0.5, 0.5)}),
    "Saturation": lambda: js.Saturation([-0.4], [0.6]),
    "TransferFunction": lambda: js.TransferFunction([1.0, 2.0], [1.0, 3.0, 2.0]).to_state_space(),
    "TimeVaryingAffineSystem": _tv_lag,
    "SparseMatrixGain": lambda: js.SparseMatrixGain(np.array([[0.0], [2.5]])),
    "BarycentricMeshSystem": lambda: js.BarycentricMeshSystem([[-1.0, 0.0, 1.0]], [[1.0, 0.0, 2.0]]),
    "MultilayerPerceptron": lambda: js.MultilayerPerceptron([1, 3, 1]),
    "Selector": lambda: js.Selector([1], [[(0, 0), (0, 0)]]),
}


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_every_block_differentiates_and_batches_in_float64_and_float32(name):
    # the block driven by a Sine: d(output at t = 0.37)/d(frequency) equals central finite
    # differences, and vmap over the frequency equals the single runs; then in float32 (JAX's
    # default), jitted and vmapped over the frequency, it equals the float64 run to float32's
    # resolution, its gradient to 1e-3 relative
    d, ctx, record = run(BLOCKS[name]())
    sine = [s for s in d.get_systems() if isinstance(s, js.Sine)][0]
    integ = js.RungeKutta4Integrator(max_step_size=0.01)

    def out(w):
        c = sine.update_my_context_in_root(ctx, lambda sc: sc.with_numeric_parameter(1, jnp.array([w])))
        return jnp.sum(js.simulate(d, c, 0.4, integ, save_at=jnp.array([0.37]), record=record).ys[0])

    g = jax.grad(out)(2.0)
    fd = (out(2.0 + 1e-6) - out(2.0 - 1e-6)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-8)
    ws = jnp.array([1.0, 2.0, 3.0])
    values64 = np.asarray(jax.vmap(out)(ws))
    np.testing.assert_allclose(values64, [out(float(w)) for w in ws], rtol=1e-12, atol=1e-14)

    with jax.enable_x64(False):
        d, _, record = run(BLOCKS[name]())
        ctx32 = d.create_default_context(jnp.float32)
        sine = [s for s in d.get_systems() if isinstance(s, js.Sine)][0]

        def out32(w):
            c = sine.update_my_context_in_root(ctx32, lambda sc: sc.with_numeric_parameter(1, jnp.stack([w])))
            return jnp.sum(js.simulate(d, c, 0.4, integ, save_at=jnp.array([0.37]), record=record).ys[0])

        values = jax.jit(jax.vmap(out32))(jnp.asarray(ws, jnp.float32))
        grad = jax.jit(jax.grad(out32))(jnp.float32(2.0))
        assert values.dtype == jnp.float32, name
        np.testing.assert_allclose(np.asarray(values), values64, rtol=2e-4, atol=2e-4, err_msg=name)
        np.testing.assert_allclose(float(grad), float(g), rtol=1e-3, atol=1e-3, err_msg=name)
