"""Linearize / FirstOrderTaylorApproximation against Drake (X2) and hand-derived matrices; LQR
against scipy; the closed loop stabilizes the cart-pole at the top."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import jaxsys as js
from jaxsys.controllers import linear_quadratic_regulator, linear_quadratic_regulator_system
from jaxsys.examples import CartPole, Pendulum
from jaxsys.primitives.linearize import NotEquilibriumError, first_order_taylor_approximation, linearize


def pendulum_at(x, u):
    p = Pendulum()
    ctx = p.get_input_port(0).fix_value(p.create_default_context(), u)
    return p, ctx.with_continuous_state(jnp.array(x))


@pytest.mark.parametrize("case", ["upright", "down"])
def test_linearize_pendulum_matches_drake(drake, case):
    ref = drake("X2")[case]
    p, ctx = pendulum_at(ref["x0"], ref["u0"])
    lin = linearize(p, ctx)
    lc = lin.create_default_context()
    for name in "ABCD":
        np.testing.assert_allclose(getattr(lin, name)(lc), ref[name], rtol=0, atol=1e-12)


def test_not_equilibrium_error_and_taylor_approximation(drake):
    ref = drake("X2")["not_equilibrium"]
    p, ctx = pendulum_at(ref["x0"], ref["u0"])
    with pytest.raises(NotEquilibriumError, match=r"The nominal operating point \(x0,u0\) is not an equilibrium point"):
        linearize(p, ctx)
    assert "is not an equilibrium point" in ref["linearize_error"]
    taylor = first_order_taylor_approximation(p, ctx)
    tc = taylor.create_default_context()
    M = tc.get_abstract_parameter(0)
    for name in ("A", "B", "f0", "C", "D", "y0"):
        np.testing.assert_allclose(M[name], np.reshape(ref["taylor"][name], np.shape(M[name])), rtol=0, atol=1e-12)
    # an unchecked linearization gives the same A, B
    lin = linearize(p, ctx, equilibrium_check_tolerance=None)
    np.testing.assert_allclose(lin.A(lin.create_default_context()), ref["taylor"]["A"], atol=1e-12)


def test_linearize_cart_pole_upright_against_hand_derivation():
    cp = CartPole()  # mc=1, mp=0.1, l=0.5, g=9.81
    ctx = cp.get_input_port(0).fix_value(cp.create_default_context(), [0.0])
    ctx = ctx.with_continuous_state(jnp.array([0.0, np.pi, 0.0, 0.0]))
    lin = linearize(cp, ctx)
    lc = lin.create_default_context()
    mc, mp, l, g = 1.0, 0.1, 0.5, 9.81
    # at theta = pi: xdd = (f + mp g (th-pi)) / mc, thdd = (f + (mc+mp) g (th-pi)) / (l mc)
    A = np.array([[0, 0, 1, 0], [0, 0, 0, 1], [0, mp * g / mc, 0, 0], [0, (mc + mp) * g / (l * mc), 0, 0]])
    B = np.array([[0], [0], [1 / mc], [1 / (l * mc)]])
    np.testing.assert_allclose(lin.A(lc), A, atol=1e-12)
    np.testing.assert_allclose(lin.B(lc), B, atol=1e-12)


def test_linearize_discrete_system():
    A = np.array([[0.9, 0.1], [0.0, 0.8]])
    sys = js.LinearSystem(A, [[0.0], [1.0]], np.eye(2), time_period=0.05)
    ctx = sys.get_input_port(0).fix_value(sys.create_default_context(), [0.0])
    lin = linearize(sys, ctx)
    np.testing.assert_allclose(lin.A(lin.create_default_context()), A, atol=1e-14)
    assert lin.time_period == 0.05


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lqr_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    n, m = 4, 2
    A = rng.normal(size=(n, n))
    B = rng.normal(size=(n, m))
    Q = np.diag(rng.uniform(0.5, 2.0, n))
    R = np.diag(rng.uniform(0.5, 2.0, m))
    K, S = linear_quadratic_regulator(A, B, Q, R)
    S_ref = scipy.linalg.solve_continuous_are(A, B, Q, R)
    np.testing.assert_allclose(S, S_ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(K, np.linalg.solve(R, B.T @ S_ref), rtol=1e-9, atol=1e-9)
    assert np.all(np.linalg.eigvals(A - B @ np.asarray(K)).real < 0)
    # with a cross term N
    N = 0.1 * rng.normal(size=(n, m))
    K2, S2 = linear_quadratic_regulator(A, B, Q, R, N)
    np.testing.assert_allclose(S2, scipy.linalg.solve_continuous_are(A, B, Q, R, s=N), rtol=1e-8, atol=1e-8)


def test_lqr_is_differentiable():
    A = jnp.array([[0.0, 1.0], [2.0, -0.1]])
    B = jnp.array([[0.0], [1.0]])

    def cost_trace(q):
        return jnp.trace(linear_quadratic_regulator(A, B, jnp.diag(jnp.array([q, 1.0])), jnp.eye(1))[1])

    g = jax.grad(cost_trace)(3.0)
    fd = (cost_trace(3.0 + 1e-6) - cost_trace(3.0 - 1e-6)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-6)


def test_lqr_stabilizes_cart_pole_at_the_top():
    cp = CartPole()
    ctx = cp.get_input_port(0).fix_value(cp.create_default_context(), [0.0])
    ctx = ctx.with_continuous_state(jnp.array([0.0, np.pi, 0.0, 0.0]))
    controller = linear_quadratic_regulator_system(cp, ctx, Q=np.diag([10.0, 10.0, 1.0, 1.0]), R=np.eye(1))
    b = js.DiagramBuilder()
    plant = b.add_system(CartPole())
    ctrl = b.add_system(controller)
    b.connect(plant.get_output_port(), ctrl.get_input_port())
    b.connect(ctrl.get_output_port(), plant.get_input_port())
    d = b.build()
    start = d.create_default_context().with_continuous_state(jnp.array([0.3, np.pi - 0.2, 0.0, 0.0]))
    r = js.simulate(d, start, 10.0, js.RungeKutta3Integrator(target_accuracy=1e-8))
    np.testing.assert_allclose(
        d.get_subsystem_context(r.context, plant).get_continuous_state_vector(), [0.0, np.pi, 0.0, 0.0], atol=1e-3
    )
