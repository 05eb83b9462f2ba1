"""Contexts under jax.jit, jax.vmap and jax.grad."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from models import PD

import jaxsys as js
from jaxsys.examples import Pendulum


def closed_loop():
    b = js.DiagramBuilder()
    plant = b.add_system(Pendulum())
    ctrl = b.add_system(PD())
    b.connect(plant.get_output_port(), ctrl.get_input_port())
    b.connect(ctrl.get_output_port(), plant.get_input_port())
    return b.build("d"), plant, ctrl


def test_context_passes_through_jit_unchanged_in_structure():
    d, _, _ = closed_loop()
    ctx = d.create_default_context().with_continuous_state(jnp.array([0.2, 0.1]))

    @jax.jit
    def step(c):
        x = c.get_continuous_state_vector()
        xdot = d.calc_time_derivatives(c).x
        return c.with_continuous_state(x + 0.01 * xdot).with_time(c.get_time() + 0.01)

    out = step(ctx)
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(ctx)
    assert out.get_time().dtype == ctx.get_time().dtype and not out.get_time().weak_type
    expected = ctx.get_continuous_state_vector() + 0.01 * d.calc_time_derivatives(ctx).x
    np.testing.assert_allclose(out.get_continuous_state_vector(), expected, rtol=1e-14)


def test_no_recompilation_for_new_values():
    d, _, _ = closed_loop()
    ctx = d.create_default_context()

    @eqx.debug.assert_max_traces(max_traces=1)
    def f(c):
        return d.calc_time_derivatives(c).x

    jf = jax.jit(f)
    for t in (0.0, 1.0, 2.0):
        jf(ctx.with_time(t).with_continuous_state(jnp.array([t, -t])))


def test_vmap_over_batch_of_contexts():
    d, plant, _ = closed_loop()
    base = d.create_default_context()
    thetas = jnp.linspace(-1.0, 1.0, 7)
    kps = jnp.linspace(1.0, 4.0, 7)

    def make(theta, kp):
        c = base.with_continuous_state(jnp.stack([theta, 0.0]))
        return c.with_numeric_parameter(1, jnp.stack([kp, 1.0]))

    batch = jax.vmap(make)(thetas, kps)
    xdots = jax.vmap(lambda c: d.calc_time_derivatives(c).x)(batch)
    for i in range(7):
        single = d.calc_time_derivatives(make(thetas[i], kps[i])).x
        np.testing.assert_allclose(xdots[i], single, rtol=1e-14)
    np.testing.assert_allclose(xdots[:, 1], -kps * thetas - 9.81 * jnp.sin(thetas), rtol=1e-13)


def test_grad_of_derivative_wrt_parameters_is_analytic():
    d, plant, _ = closed_loop()
    theta, omega = 0.4, -0.3
    ctx = d.create_default_context().with_continuous_state(jnp.array([theta, omega]))

    def thetaddot(c):
        return d.calc_time_derivatives(c).x[1]

    g = jax.grad(thetaddot)(ctx)
    m, l, b, grav = 1.0, 1.0, 0.1, 9.81
    kp, kd = 5.0, 1.0
    tau = -kp * theta - kd * omega
    # thetaddot = (tau - b w - m g l sin th) / (m l^2)
    d_m = -(tau - b * omega) / (m**2 * l**2)
    d_l = -2 * (tau - b * omega) / (m * l**3) + grav * np.sin(theta) / l**2
    d_b = -omega / (m * l**2)
    d_g = -np.sin(theta) / l
    np.testing.assert_allclose(g.get_numeric_parameter(0), [d_m, d_l, d_b, d_g], rtol=1e-12)
    np.testing.assert_allclose(g.get_numeric_parameter(1), [-theta, -omega], rtol=1e-12)
    # gradient of an output with respect to a parameter
    gu = jax.grad(lambda c: d.get_subsystem_context(c, plant).get_continuous_state_vector()[0] ** 2)(ctx)
    np.testing.assert_allclose(gu.get_continuous_state_vector(), [2 * theta, 0.0])


def test_jacfwd_through_outputs():
    d, plant, ctrl = closed_loop()
    ctx = d.create_default_context()

    def u_of_x(x):
        c = ctx.with_continuous_state(x)
        return plant.get_input_port(0).eval(d.get_subsystem_context(c, plant))

    J = jax.jacfwd(u_of_x)(jnp.array([0.1, 0.2]))
    np.testing.assert_allclose(J, [[-5.0, -1.0]])


def test_ravel_context_round_trip_and_jit():
    d, plant, _ = closed_loop()
    ctx = d.create_default_context().with_continuous_state(jnp.array([0.3, -0.1]))
    v, unravel = js.ravel_context(ctx)
    assert v.ndim == 1 and v.shape[0] == 2 + 1 + 4 + 2 + 1 + 1  # x, times, parameters (pendulum, pd)
    back = unravel(v)
    assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(ctx)
    assert eqx.tree_equal(back, ctx)
    xdot = jax.jit(lambda w: d.calc_time_derivatives(unravel(w)).x)(v)
    np.testing.assert_allclose(xdot, d.calc_time_derivatives(ctx).x)
    # gradient w.r.t. the flat vector = gradient w.r.t. the context's values
    g = jax.grad(lambda w: d.calc_time_derivatives(unravel(w)).x[1])(v)
    gc = jax.grad(lambda c: d.calc_time_derivatives(c).x[1])(ctx)
    np.testing.assert_allclose(g, js.ravel_context(gc)[0])
