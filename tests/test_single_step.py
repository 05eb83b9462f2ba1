"""Stepping an integrator outside a simulation (issue #37 item 6): Drake's
IntegrateWithSingleFixedStepToTime, restating Drake's own integrator tests (rk2_integrator_test.cc
QuadraticTest, rk3_integrator_test.cc CubicTest, integrator_base_test.cc) and the pydrake numbers of
fixed-step implicit Euler."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js


class Polynomial(js.LeafSystem):
    """x' = p'(t) for a polynomial p: x(t) = p(t) - p(0) + x(0)."""

    def __init__(self, coefficients):
        super().__init__()
        self.declare_continuous_state(1)
        self.declare_numeric_parameter(jnp.asarray(coefficients, float))

    def do_calc_time_derivatives(self, context):
        c = context.get_numeric_parameter(0)
        t = context.get_time()
        return jnp.stack([sum(k * c[k] * t ** (k - 1) for k in range(1, c.shape[0]))])


def test_rk2_is_exact_on_a_quadratic_in_one_step():
    # Drake's RK3IntegratorErrorEstimatorTest.QuadraticTest (rk2): f = 4 t^2 + 4 t, one step to t = 1
    s = Polynomial([0.0, 4.0, 4.0])
    r = js.RungeKutta2Integrator(max_step_size=1.0).integrate_with_single_fixed_step_to_time(
        s, s.create_default_context(), 1.0
    )
    assert bool(r.success) and float(r.context.get_time()) == 1.0
    np.testing.assert_allclose(r.context.get_continuous_state_vector()[0], 8.0, atol=10 * np.finfo(float).eps)


def test_rk3_is_exact_on_a_cubic_and_its_estimate_shrinks_eightfold():
    # Drake's RK3IntegratorErrorEstimatorTest.CubicTest: f = t^3 + t^2 + 12 t + C; the 2nd-order error
    # estimate of one step h is ~8 times that of two steps h/2 (its Taylor remainder is O(h^3))
    s = Polynomial([0.0, 12.0, 1.0, 1.0])
    rk3 = js.RungeKutta3Integrator(max_step_size=1.0, fixed_step_mode=True)
    ctx = s.create_default_context()
    one = rk3.integrate_with_single_fixed_step_to_time(s, ctx, 1.0)
    np.testing.assert_allclose(one.context.get_continuous_state_vector()[0], 14.0, rtol=0, atol=14 * 1e-15)
    half = rk3.integrate_with_single_fixed_step_to_time(s, ctx, 0.5)
    two = rk3.integrate_with_single_fixed_step_to_time(s, half.context, 1.0)
    ratio = float(one.error_estimate[0]) / float(two.error_estimate[0])
    np.testing.assert_allclose(ratio, 8.0, rtol=1e-10)


@pytest.mark.parametrize("extrapolate, expected", [(False, 37.125), (True, 29.25)])
def test_fixed_step_implicit_euler_gives_pydrakes_numbers(extrapolate, expected):
    # x = 7 t^2 + 7 t + 3, h = 1.5: pydrake 1.51's fixed-step implicit Euler keeps the two-half-step
    # result (37.125, error estimate 7.875); extrapolation (jaxsys's default) gives 29.25 (the same
    # numbers the simulation loop gives: tests/test_one_step.py)
    s = Polynomial([3.0, 7.0, 7.0])
    ctx = s.create_default_context().with_continuous_state(jnp.array([3.0]))
    ie = js.ImplicitEulerIntegrator(max_step_size=1.5, fixed_step_mode=True, extrapolate=extrapolate)
    r = ie.integrate_with_single_fixed_step_to_time(s, ctx, 1.5)
    assert bool(r.success)
    np.testing.assert_allclose(r.context.get_continuous_state_vector()[0], expected, rtol=1e-12)
    np.testing.assert_allclose(abs(float(r.error_estimate[0])), 7.875, rtol=1e-12)


def test_refusals_name_the_integrator():
    s = Polynomial([0.0, 1.0])
    ctx = s.create_default_context().with_time(1.0)
    with pytest.raises(js.JaxsysError, match="requires fixed stepping"):
        js.RungeKutta3Integrator(max_step_size=0.1).integrate_with_single_fixed_step_to_time(s, ctx, 1.1)
    with pytest.raises(js.JaxsysError, match="RungeKutta4Integrator.*before the context's time"):
        js.RungeKutta4Integrator(max_step_size=0.1).integrate_with_single_fixed_step_to_time(s, ctx, 0.5)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_single_step_under_jit_vmap_and_grad(dtype):
    # the oscillator q'' = -10 q: one RK4 step of h from q0 is linear in q0, its derivative the map's
    s = js.examples.SpringMassDamper(damping=0.0, has_input=False)
    ctx = s.create_default_context(dtype)
    rk4 = js.RungeKutta4Integrator(max_step_size=0.1)

    def q1(q0, h):
        c = ctx.with_continuous_state(jnp.stack([q0, 0.0]))
        return rk4.integrate_with_single_fixed_step_to_time(s, c, h).context.get_continuous_state_vector()[0]

    h = 0.1
    z = -10.0 * h * h  # the RK4 amplification of q for q' = v, v' = -10 q from (q0, 0)
    rtol = 1e-12 if dtype == jnp.float64 else 1e-6
    g = jax.jit(jax.grad(q1))(jnp.asarray(1.0, dtype), jnp.asarray(h, dtype))
    assert g.dtype == dtype
    np.testing.assert_allclose(g, 1 + z / 2 + z * z / 24, rtol=rtol)
    qs = jax.vmap(q1, in_axes=(0, None))(jnp.array([1.0, 2.0], dtype), jnp.asarray(h, dtype))
    np.testing.assert_allclose(qs[1], 2 * qs[0], rtol=rtol)
