"""Implicit integration (issue #15): failed Newton steps are never accepted, stiff systems converge,
error estimates match the observed local error, options are checked as Drake checks them, and
derivatives come from the implicit function theorem.

References: closed forms (linear ODEs, a stiff two-mass spring under a constant force), a tight
scipy ``solve_ivp(method="Radau")`` solution of Robertson's problem, finite differences, and a
pure-Python transcription of Drake's fixed-step sub-step rule (integrator_base.cc,
``IntegrateNoFurtherThanTime``).
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js
from jaxsys.framework.errors import JaxsysError


IMPLICIT = [js.ImplicitEulerIntegrator, js.Radau1Integrator, js.RadauIntegrator, js.Radau5Integrator]


class Robertson(js.LeafSystem):
    """Robertson's chemical kinetics (stiffness ~1e4 growing with t), the classic stiff test."""

    def __init__(self) -> None:
        super().__init__("robertson")
        self.declare_continuous_state(3, default=[1.0, 0.0, 0.0])

    def do_calc_time_derivatives(self, context: Any) -> Any:
        y1, y2, y3 = context.get_continuous_state_vector()
        return jnp.stack([-0.04 * y1 + 1e4 * y2 * y3, 0.04 * y1 - 1e4 * y2 * y3 - 3e7 * y2**2, 3e7 * y2**2])


class StiffPair(js.LeafSystem):
    """Two masses (1 and 2 kg) joined by a spring of stiffness k, a 1 N force on the first. Started
    together at equal speed 1 m/s, they move as one 3 kg body: x(t) = t + t^2/6 for both (the
    spring's stretch, 1e-20 m for k = 1e20, and its vibration are far below any accuracy)."""

    def __init__(self, k: float = 1e20) -> None:
        super().__init__("stiff_pair")
        self.declare_continuous_state(num_q=2, num_v=2, default=[0.0, 0.0, 1.0, 1.0])
        self.declare_numeric_parameter([k])

    def do_calc_time_derivatives(self, context: Any) -> Any:
        x1, x2, v1, v2 = context.get_continuous_state_vector()
        f = context.get_numeric_parameter(0)[0] * (x2 - x1)
        return jnp.stack([v1, v2, f + 1.0, -f / 2.0])


class Linear(js.LeafSystem):
    """x' = a x + sin(t) (parameter a), x(0) = 1."""

    def __init__(self, a: float = -1.0) -> None:
        super().__init__("linear")
        self.declare_continuous_state(1, default=[1.0])
        self.declare_numeric_parameter([a])

    def do_calc_time_derivatives(self, context: Any) -> Any:
        a = context.get_numeric_parameter(0)[0]
        return a * context.get_continuous_state_vector() + jnp.sin(context.get_time())


def linear_exact(a: float, t: float, x0: float = 1.0) -> float:
    """Closed form of x' = a x + sin t."""
    particular = lambda s: (-a * np.sin(s) - np.cos(s)) / (a * a + 1)  # noqa: E731
    return (x0 - particular(0.0)) * np.exp(a * t) + particular(t)


@pytest.fixture(scope="module")
def robertson_reference():
    from scipy.integrate import solve_ivp

    def rhs(t, y):
        return [-0.04 * y[0] + 1e4 * y[1] * y[2], 0.04 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2, 3e7 * y[1] ** 2]

    ts = np.array([10.0, 1e3, 1e5, 1e11])
    sol = solve_ivp(rhs, (0.0, 1e11), [1.0, 0.0, 0.0], method="Radau", rtol=1e-11, atol=1e-16, t_eval=ts)
    assert sol.success
    return dict(zip(ts.tolist(), sol.y.T))


# ----- 1. a failed Newton iteration is never accepted ---------------------------------------------
class _FailsAboveH(js.ImplicitEulerIntegrator):
    """Implicit Euler whose steps 'fail' above a step size: the loop's failure handling, exactly."""

    fail_above: float = eqx.field(static=True, default=0.3)

    def attempt_step_cached(self, f, t, x, h, aux, cache):
        x_new, err, ok, cache, counts, evals = super().attempt_step_cached(f, t, x, h, aux, cache)
        return x_new, err, ok & (h <= self.fail_above), cache, counts, evals


def drake_fixed_steps(t0: float, tf: float, h_max: float, ok) -> tuple[list[float], int]:
    """Drake's fixed-step loop (IntegrateNoFurtherThanTime): each step targets min(tf, t + h_max) and
    halves until the sub-step succeeds, each halving one sub-step failure. Returns the steps, failures."""
    t, steps, failures = t0, [], 0
    while t < tf:
        h = min(tf, t + h_max) - t
        while not ok(h):
            failures += 1
            h *= 0.5
        steps.append(h)
        t += h
    return steps, failures


@pytest.mark.parametrize("h_max", [1.0, 0.4])
def test_fixed_step_failures_are_retried_and_counted_as_drake(h_max):
    s = Linear(-1.0)
    ctx = s.create_default_context()
    integ = _FailsAboveH(max_step_size=h_max, fixed_step_mode=True, extrapolate=False)
    r = js.simulate(s, ctx, 2.0, integ)
    steps, failures = drake_fixed_steps(0.0, 2.0, h_max, lambda h: h <= 0.3)
    st = r.stats.as_dict()
    assert int(r.status) == 0
    assert st["num_steps_taken"] == len(steps)
    assert st["num_substep_failures"] == failures
    assert st["num_step_shrinkages_from_substep_failures"] == failures
    assert st["num_step_shrinkages_from_error_control"] == 0
    # the state is the product of Drake's fixed implicit Euler steps of exactly those sizes, each kept
    # as its two half steps (x' = -x + sin t)
    x, t = 1.0, 0.0
    for h in steps:
        xm = (x + 0.5 * h * np.sin(t + 0.5 * h)) / (1 + 0.5 * h)
        x = (xm + 0.5 * h * np.sin(t + h)) / (1 + 0.5 * h)
        t += h
    np.testing.assert_allclose(float(r.context.get_continuous_state_vector()[0]), x, rtol=1e-9)


def test_fixed_step_failure_below_minimum_is_an_error():
    s = Linear(-1.0)
    integ = _FailsAboveH(max_step_size=1.0, fixed_step_mode=True, fail_above=1e-3, requested_minimum_step_size=0.01)
    r = js.simulate(s, s.create_default_context(), 2.0, integ, throw=False)
    assert js.Status.from_code(r.status) is js.Status.NEWTON_FAILED
    with pytest.raises(Exception, match="Newton iteration did not converge"):
        js.simulate(s, s.create_default_context(), 2.0, integ)


@pytest.mark.parametrize("cls", [js.ImplicitEulerIntegrator, js.RadauIntegrator, js.Radau5Integrator])
@pytest.mark.parametrize("h", [1e-2, 1.0])
def test_robertson_fixed_step_never_accepts_unconverged_steps(cls, h, robertson_reference):
    # Before: Newton failed at these steps, the unconverged steps were accepted with status ok and 0
    # sub-step failures. Now the failures are retried with smaller steps (and counted), the result
    # is right to the method's accuracy at that step, and mass is conserved (y1 + y2 + y3 = 1).
    r = Robertson()
    res = js.simulate(r, r.create_default_context(), 10.0, cls(max_step_size=h, fixed_step_mode=True))
    y = np.asarray(res.context.get_continuous_state_vector())
    assert int(res.status) == 0
    assert res.stats.as_dict()["num_substep_failures"] > 0
    assert (
        res.stats.as_dict()["num_step_shrinkages_from_substep_failures"] == res.stats.as_dict()["num_substep_failures"]
    )
    tol = {js.ImplicitEulerIntegrator: 2e-2 * h + 1e-4, js.RadauIntegrator: 1e-5, js.Radau5Integrator: 1e-6}[cls]
    np.testing.assert_allclose(y, robertson_reference[10.0], atol=tol, rtol=0)
    assert abs(y.sum() - 1.0) < 1e-12


# ----- 2. very stiff systems ----------------------------------------------------------------------
@pytest.mark.parametrize("cls", IMPLICIT)
@pytest.mark.parametrize("accuracy", [1e-3, 1e-6])
def test_stiff_pair_k1e20_matches_closed_form(cls, accuracy):
    # Before: Newton's absolute residual test failed at every step size (the residual holds h k x
    # rounding, ~1e4), so the run hit max_steps near t = 1e-8.
    s = StiffPair(1e20)
    r = js.simulate(s, s.create_default_context(), 1.0, cls(max_step_size=0.1, target_accuracy=accuracy))
    assert int(r.status) == 0
    x = np.asarray(r.context.get_continuous_state_vector())
    exact = np.array([1 + 1 / 6, 1 + 1 / 6, 1 + 1 / 3, 1 + 1 / 3])
    steps = r.stats.as_dict()["num_steps_taken"]
    # error per step: the global error is at most the sum of the local errors allowed (x'' is
    # constant: nothing amplifies them); Radau3 and Radau5 are exact on a quadratic
    bound = 1e-12 if cls in (js.RadauIntegrator, js.Radau5Integrator) else steps * accuracy
    np.testing.assert_allclose(x, exact, atol=bound, rtol=0)
    # momentum (1 x1' + 2 x2' = 3 + t) is a linear invariant, which every Runge-Kutta method keeps up
    # to its Newton error (converged to kappa = 0.05 times the accuracy a step, as Drake's)
    assert abs(x[2] + 2 * x[3] - 4.0) < 3 * steps * 0.05 * accuracy + 1e-12
    assert steps < 2000


@pytest.mark.parametrize("cls", [js.RadauIntegrator, js.Radau1Integrator, js.Radau5Integrator])
def test_robertson_to_1e11(cls, robertson_reference):
    # Drake's error norm is absolute: y2 (at most 4e-5) is weighted 1e4 so that it is resolved
    r = Robertson()
    acc = 1e-4 if cls is js.Radau1Integrator else 1e-6
    integ = cls(max_step_size=1e10, target_accuracy=acc, z_weight=(1.0, 1e4, 1.0), max_steps=100_000)
    ts = jnp.array([10.0, 1e3, 1e5, 1e11])
    res = js.simulate(r, r.create_default_context(), 1e11, integ, save_at=ts)
    assert int(res.status) == 0
    for t, y in zip(np.asarray(ts).tolist(), np.asarray(res.ys)):
        ref = robertson_reference[t]
        steps = res.stats.as_dict()["num_steps_taken"]
        # within the requested accuracy per unit weight (and the number of steps, for Radau1)
        scale = steps if cls is js.Radau1Integrator else 20
        np.testing.assert_allclose(y[[0, 2]], ref[[0, 2]], atol=scale * acc, rtol=0)
        np.testing.assert_allclose(y[1], ref[1], atol=scale * acc * 1e-4, rtol=0)
    assert res.stats.as_dict()["num_steps_taken"] < {js.Radau1Integrator: 20_000, js.RadauIntegrator: 1000}.get(
        cls, 400
    )


def test_stiff_pair_float32():
    s = StiffPair(1e20)
    ctx = s.create_default_context(jnp.float32)
    for cls in IMPLICIT:
        r = js.simulate(s, ctx, 1.0, cls(max_step_size=0.1, target_accuracy=1e-3))
        x = np.asarray(r.context.get_continuous_state_vector())
        assert x.dtype == np.float32 and int(r.status) == 0
        steps = r.stats.as_dict()["num_steps_taken"]
        np.testing.assert_allclose(x[:2], 1 + 1 / 6, atol=steps * 1e-3 + 1e-5)
    rob = Robertson()
    r = js.simulate(
        rob,
        rob.create_default_context(jnp.float32),
        10.0,
        js.RadauIntegrator(max_step_size=1.0, fixed_step_mode=True),
    )
    assert int(r.status) == 0
    np.testing.assert_allclose(
        np.asarray(r.context.get_continuous_state_vector())[[0, 2]], [0.8413637, 0.1586201], atol=1e-4
    )


# ----- 3. error estimates against the observed local error ----------------------------------------
def _one_step(integ, h, a=-0.7, t0=0.3):
    """One step of x' = a x + sin t from the exact solution: (estimate, true local error of the kept state)."""
    x0 = jnp.array([linear_exact(a, t0)])
    x1, err, ok = integ.attempt_step(lambda t, x: a * x + jnp.sin(t), jnp.asarray(t0), x0, jnp.asarray(h), {})
    assert bool(ok)
    return float(err[0]), float(x1[0]) - linear_exact(a, t0 + h)


@pytest.mark.parametrize(
    "integ",
    [js.ImplicitEulerIntegrator(max_step_size=1.0, target_accuracy=1e-6, extrapolate=False), js.Radau1Integrator()],
    ids=["ie-drake-step-doubling", "radau1"],
)
def test_error_estimate_matches_observed_local_error(integ):
    # Drake's estimators of first-order results: the estimate is the local error of the state kept,
    # to O(h) relative
    for h, tol in ((1e-2, 0.05), (1e-3, 0.005)):
        est, true = _one_step(integ, h)
        assert abs(est / true - 1.0) < tol, (h, est, true)


@pytest.mark.parametrize(
    "integ, order",
    [(js.ImplicitEulerIntegrator(max_step_size=1.0, target_accuracy=1e-6), 2), (js.RadauIntegrator(), 3)],
    ids=["ie-extrapolated", "radau3"],
)
def test_error_estimate_bounds_a_higher_order_result(integ, order):
    # local extrapolation: the kept state has local error O(h^(order+1)), the estimate (of the lower
    # order companion) is larger, and is O(h^order)... of the companion's order
    (e1, t1), (e2, t2) = _one_step(integ, 1e-2), _one_step(integ, 1e-3)
    assert abs(e1) > 10 * abs(t1) and abs(e2) > 10 * abs(t2)
    np.testing.assert_allclose(np.log10(abs(t1 / t2)), order + 1, atol=0.1)
    np.testing.assert_allclose(np.log10(abs(e1 / e2)), integ.get_error_estimate_order(), atol=0.1)


@pytest.mark.parametrize(
    "cls", [js.ImplicitEulerIntegrator, js.RadauIntegrator, js.Radau1Integrator, js.Radau5Integrator]
)
def test_global_error_tracks_accuracy(cls):
    # x' = -x + sin t on [0, 10]. Before: implicit Euler (Drake's, keeping the two half steps) ended
    # 26x and 260x the accuracy away at 1e-4 and 1e-6 (error per step adds up in a first-order
    # method). Now the extrapolated result tracks the accuracy like the explicit pairs; Radau1 (Drake's
    # first-order method, kept as Drake's) still shrinks only ~sqrt(100)x for 100x the accuracy.
    s = Linear(-1.0)
    errs = []
    for acc in (1e-4, 1e-6):
        r = js.simulate(s, s.create_default_context(), 10.0, cls(max_step_size=1.0, target_accuracy=acc))
        errs.append(abs(float(r.context.get_continuous_state_vector()[0]) - linear_exact(-1.0, 10.0)))
    if cls is js.Radau1Integrator:
        assert errs[1] < errs[0] / 8 and errs[1] < 1e-3, errs
    else:
        assert errs[0] < 5e-4 and errs[1] < 5e-6, errs
        assert errs[1] < errs[0] / 30, errs


# ----- 4. options checked as Drake checks them --------------------------------------------------
@pytest.mark.parametrize(
    "cls", [js.RungeKutta3Integrator, js.ImplicitEulerIntegrator, js.RadauIntegrator, js.Radau5Integrator]
)
def test_option_validation(cls):
    name = cls.__name__
    with pytest.raises(
        JaxsysError, match=rf"{name}: max_step_size \(0.001\) is less than requested_minimum_step_size \(0.01\)"
    ):
        cls(max_step_size=1e-3, requested_minimum_step_size=1e-2)
    with pytest.raises(
        JaxsysError,
        match=rf"{name}: initial_step_size_target \(0.001\) is smaller than requested_minimum_step_size \(0.01\)",
    ):
        cls(max_step_size=1.0, requested_minimum_step_size=1e-2, initial_step_size_target=1e-3)
    with pytest.raises(
        JaxsysError, match=rf"{name}: initial_step_size_target \(2.0\) is larger than max_step_size \(1.0\)"
    ):
        cls(max_step_size=1.0, initial_step_size_target=2.0)
    loosest = cls.loosest_accuracy
    with pytest.warns(UserWarning, match=rf"{name}: target_accuracy 0.9 is looser than this method allows; {loosest}"):
        integ = cls(max_step_size=1.0, target_accuracy=0.9)
    assert integ.get_accuracy_in_use() == loosest
    assert cls(max_step_size=1.0).get_accuracy_in_use() == cls.default_accuracy


def test_drake_accuracy_defaults():
    assert js.RungeKutta3Integrator().get_accuracy_in_use() == 1e-3
    assert js.RungeKutta5Integrator().get_accuracy_in_use() == 1e-5
    assert js.ImplicitEulerIntegrator().get_accuracy_in_use() == 1e-1
    assert js.Radau1Integrator().get_accuracy_in_use() == 1e-1
    assert js.RadauIntegrator().get_accuracy_in_use() == 1e-3
    assert js.Radau5Integrator().get_accuracy_in_use() == 1e-5  # (not in Drake: RK5's default)
    # Drake's first step: the maximum step for the implicit methods, a tenth of it for the explicit
    assert js.RadauIntegrator(max_step_size=0.5).get_initial_step_size_target() == 0.5
    assert js.RungeKutta3Integrator(max_step_size=0.5).get_initial_step_size_target() == 0.05


# ----- statistics and Jacobian reuse --------------------------------------------------------------
def test_newton_statistics_and_jacobian_reuse():
    v = js.examples.VanDerPol(mu=100.0)
    ctx = v.create_default_context()
    reused = js.simulate(v, ctx, 200.0, js.RadauIntegrator(max_step_size=10.0, target_accuracy=1e-6)).stats.as_dict()
    fresh = js.simulate(
        v, ctx, 200.0, js.RadauIntegrator(max_step_size=10.0, target_accuracy=1e-6, reuse=False)
    ).stats.as_dict()
    for st in (reused, fresh):
        assert st["num_newton_raphson_iterations"] >= st["num_step_attempts"]
        # every derivative evaluation accounted for: 2 per Newton iteration, 1 per Jacobian (forward
        # mode), 2 per attempt for the error estimate
        assert st["num_derivative_evaluations"] == (
            2 * st["num_newton_raphson_iterations"] + st["num_jacobian_evaluations"] + 2 * st["num_step_attempts"]
        )
        assert st["num_derivative_evaluations_for_jacobian"] == st["num_jacobian_evaluations"]
    # reuse: far fewer Jacobians than steps; without it, at least one a step attempt
    assert reused["num_jacobian_evaluations"] < reused["num_steps_taken"] / 3
    assert fresh["num_jacobian_evaluations"] >= fresh["num_step_attempts"]
    ie = js.simulate(v, ctx, 20.0, js.ImplicitEulerIntegrator(max_step_size=1.0, target_accuracy=1e-4)).stats.as_dict()
    # step doubling: the two half steps are the estimator's share of the iterations
    assert 0 < ie["num_error_estimator_newton_raphson_iterations"] < ie["num_newton_raphson_iterations"]
    assert ie["num_derivative_evaluations"] == ie["num_newton_raphson_iterations"] + ie["num_jacobian_evaluations"]


# ----- derivatives by the implicit function theorem -------------------------------------------------
@pytest.mark.parametrize(
    "integ",
    [
        js.ImplicitEulerIntegrator(max_step_size=0.05, target_accuracy=1e-6),
        js.Radau1Integrator(max_step_size=0.05, fixed_step_mode=True),
        js.RadauIntegrator(max_step_size=0.5, target_accuracy=1e-8),
        js.Radau5Integrator(max_step_size=0.5, target_accuracy=1e-8),
        js.Radau5Integrator(max_step_size=0.05, fixed_step_mode=True),
    ],
    ids=["ie-ec", "radau1-fixed", "radau3-ec", "radau5-ec", "radau5-fixed"],
)
def test_gradients_through_stiff_runs_match_finite_differences(integ):
    v = js.examples.VanDerPol(mu=20.0)
    base = v.create_default_context()

    def final(mu, q0):
        ctx = base.with_numeric_parameter(0, jnp.stack([mu])).with_continuous_state(jnp.stack([q0, 0.0]))
        return js.simulate(v, ctx, 5.0, integ).context.get_continuous_state_vector()[0]

    p = (jnp.asarray(20.0), jnp.asarray(2.0))
    g = jax.grad(final, argnums=(0, 1))(*p)
    _, jv = jax.jvp(final, p, (jnp.asarray(1.0), jnp.asarray(0.0)))
    eps = 1e-5
    fd = [
        (final(*[x + eps * (i == k) for i, x in enumerate(p)]) - final(*[x - eps * (i == k) for i, x in enumerate(p)]))
        / (2 * eps)
        for k in range(2)
    ]
    np.testing.assert_allclose(np.asarray(g), np.asarray(fd), rtol=2e-3, atol=1e-6)
    np.testing.assert_allclose(float(jv), float(g[0]), rtol=1e-9)


@pytest.mark.parametrize(
    "cls, dtype, reverse_by",
    [
        (js.RadauIntegrator, jnp.float32, "jacobian"),
        (js.RadauIntegrator, jnp.float64, "jacobian"),
        (js.Radau5Integrator, jnp.float32, "jacobian"),
        (js.Radau5Integrator, jnp.float64, "jacobian"),
        (js.Radau5Integrator, jnp.float64, "adjoint"),
    ],
    indirect=["reverse_by"],
)
def test_implicit_runs_under_vmap_and_grad_of_vmap(dtype, cls, reverse_by):
    # the Newton cache, the early-exit iteration and the custom_root derivatives, batched: each member
    # matches its own unbatched run, and grad(sum(vmap)) matches the unbatched gradients (by the
    # loops' Jacobian, one input a member, and by the discrete adjoint's sweep, forced)
    s = StiffPair(1e6)
    base = s.create_default_context(dtype)
    integ = cls(max_step_size=0.1, target_accuracy=1e-4)
    v0s = jnp.array([0.5, 1.0, 2.0], dtype)

    def final(v0):
        ctx = base.with_continuous_state(jnp.stack([0.0, 0.0, v0, v0]).astype(dtype))
        return js.simulate(s, ctx, 1.0, integ).context.get_continuous_state_vector()[0]

    batched = jax.vmap(final)(v0s)
    one = [float(final(v)) for v in v0s]
    tol = 1e-4 if dtype == jnp.float32 else 1e-9
    np.testing.assert_allclose(np.asarray(batched), one, rtol=tol, atol=tol)
    # closed form x1 = v0 t + t^2/6: dx1/dv0 = t = 1 for every member
    g = jax.grad(lambda v: jnp.sum(jax.vmap(final)(v)))(v0s)
    np.testing.assert_allclose(np.asarray(g), 1.0, rtol=10 * tol)


# ----- the three-stage Radau IIA (RADAU5, issue #40) -----------------------------------------------
def test_radau5_is_fifth_order_with_a_fourth_order_estimate():
    # x' = -0.7 x + sin t from the exact solution: one step's error falls as h^6 (a fifth-order
    # method's local error) and its estimate as h^4 (RADAU5's embedded third-order companion); the
    # estimate bounds the error of the kept state
    integ = js.Radau5Integrator(max_step_size=1.0, target_accuracy=1e-12)
    (e1, t1), (e2, t2) = _one_step(integ, 0.2), _one_step(integ, 0.1)
    assert abs(e1) > 10 * abs(t1) and abs(e2) > 10 * abs(t2)
    np.testing.assert_allclose(np.log2(abs(t1 / t2)), 6, atol=0.3)
    np.testing.assert_allclose(np.log2(abs(e1 / e2)), 4, atol=0.3)
    # fixed steps on [0, 4]: the global error falls as h^5
    s = Linear(-0.7)
    errs = []
    for h in (0.4, 0.2, 0.1):
        r = js.simulate(s, s.create_default_context(), 4.0, js.Radau5Integrator(max_step_size=h, fixed_step_mode=True))
        errs.append(abs(float(r.context.get_continuous_state_vector()[0]) - linear_exact(-0.7, 4.0)))
    np.testing.assert_allclose(np.log2(np.array(errs[:-1]) / np.array(errs[1:])), 5, atol=0.35)


@pytest.fixture(scope="module")
def vdp1000_reference():
    from scipy.integrate import solve_ivp

    mu = 1000.0
    sol = solve_ivp(
        lambda t, y: [y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]],
        (0.0, 2000.0),
        [2.0, 0.0],
        method="Radau",
        rtol=1e-11,
        atol=1e-13,
    )
    assert sol.success
    return sol.y[:, -1]


def test_radau5_on_van_der_pol_mu_1000(vdp1000_reference):
    # Hairer & Wanner's stiff benchmark, across a relaxation jump: the fifth-order method reaches the
    # accuracy in a quarter of Radau3's steps or fewer, and its error at the end tracks the accuracy
    # (the jump amplifies local errors ~10x)
    v = js.examples.VanDerPol(mu=1000.0)
    ctx = v.create_default_context().with_continuous_state(jnp.array([2.0, 0.0]))
    out = {}
    for cls in (js.RadauIntegrator, js.Radau5Integrator):
        r = js.simulate(v, ctx, 2000.0, cls(max_step_size=50.0, target_accuracy=1e-6, max_steps=100_000))
        assert int(r.status) == 0
        err = np.max(np.abs(np.asarray(r.context.get_continuous_state_vector()) - vdp1000_reference))
        out[cls] = (err, r.stats.as_dict())
    err5, st5 = out[js.Radau5Integrator]
    assert err5 < 2e-5, err5
    assert st5["num_steps_taken"] < out[js.RadauIntegrator][1]["num_steps_taken"] / 4
    # Drake's statistics: 3 derivatives per Newton iteration (one per stage), one per Jacobian (forward
    # mode), the estimator's (one a step attempt, two when it refines a would-be rejection)
    assert st5["num_derivative_evaluations"] == (
        3 * st5["num_newton_raphson_iterations"]
        + st5["num_jacobian_evaluations"]
        + st5["num_error_estimator_derivative_evaluations"]
    )
    assert st5["num_step_attempts"] <= st5["num_error_estimator_derivative_evaluations"] <= 2 * st5["num_step_attempts"]
    # the starting guesses extrapolated from the last step keep Newton short: under 4.5 iterations a step
    assert st5["num_newton_raphson_iterations"] < 4.5 * st5["num_step_attempts"]
    assert st5["num_jacobian_evaluations"] < st5["num_steps_taken"] / 10


def test_radau5_float32_van_der_pol():
    # float32 (JAX's default): Van der Pol mu = 100 over a relaxation jump, at an accuracy float32 can
    # deliver (1e-4): the run succeeds and ends within 1e-3 of a float64 reference. (mu = 1000 past
    # t ~ 800 fails in float32 with every method: its jump needs steps below float32's time resolution
    # there, 4.8e-7 t ~ 4e-4 s, and the run says so, naming float32.)
    from scipy.integrate import solve_ivp

    ref = solve_ivp(
        lambda t, y: [y[1], 100.0 * (1 - y[0] ** 2) * y[1] - y[0]],
        (0.0, 200.0),
        [2.0, 0.0],
        rtol=1e-11,
        atol=1e-13,
        method="Radau",
    ).y[:, -1]
    v = js.examples.VanDerPol(mu=100.0)
    ctx = v.create_default_context(jnp.float32).with_continuous_state(jnp.array([2.0, 0.0], jnp.float32))
    r = js.simulate(v, ctx, 200.0, js.Radau5Integrator(max_step_size=5.0, target_accuracy=1e-4, max_steps=100_000))
    x = np.asarray(r.context.get_continuous_state_vector())
    assert x.dtype == np.float32 and int(r.status) == 0
    np.testing.assert_allclose(x, ref, atol=1e-3)
    v = js.examples.VanDerPol(mu=1000.0)
    ctx = v.create_default_context(jnp.float32).with_continuous_state(jnp.array([2.0, 0.0], jnp.float32))
    with pytest.raises(Exception, match="float32"):
        js.simulate(v, ctx, 1000.0, js.Radau5Integrator(max_step_size=50.0, target_accuracy=1e-4))


# ----- banded Jacobians for large stiff systems (issue #40 item 2) ----------------------------------
def _random_banded(rng, n, kl, ku, complex_=False, zero_diagonal=False):
    A = np.zeros((n, n), complex if complex_ else float)
    for i in range(n):
        for j in range(max(0, i - kl), min(n, i + ku + 1)):
            A[i, j] = rng.normal() + (1j * rng.normal() if complex_ else 0.0)
    if zero_diagonal:
        A[np.arange(n), np.arange(n)] = 0.0  # pivoting is needed at every step
    return A


@pytest.mark.parametrize("n, kl, ku", [(9, 2, 2), (12, 1, 3), (7, 0, 2), (8, 3, 0), (3, 4, 4)])
@pytest.mark.parametrize("complex_", [False, True])
def test_banded_lu_solves_as_dense_lu(n, kl, ku, complex_):
    from jaxsys.analysis.integrators.linalg import BandedAlgebra

    rng = np.random.default_rng(n + kl)
    A = _random_banded(rng, n, kl, ku, complex_, zero_diagonal=kl > 0 and ku > 0)
    b = rng.normal(size=n)
    alg = BandedAlgebra(kl, ku)
    band = np.array([[A[i, i - kl + c] if 0 <= i - kl + c < n else 0 for c in range(kl + ku + 1)] for i in range(n)])
    lu, piv = alg.lu_factor(jnp.asarray(band))
    x = np.asarray(alg.lu_solve(lu, piv, jnp.asarray(b)))
    np.testing.assert_allclose(A @ x, b, atol=1e-10 * np.abs(A).sum(axis=1).max() * np.abs(x).max())
    np.testing.assert_allclose(x, np.linalg.solve(A, b), rtol=1e-8, atol=1e-10)
    # the identity and the Jacobian in band form
    np.testing.assert_allclose(np.asarray(alg.eye(n, jnp.float64))[:, kl], 1.0)
    M = jnp.asarray(A.real)
    J = alg.jacobian(lambda v: M @ v + 0.1 * v**2, jnp.asarray(b))
    dense = A.real + np.diag(0.2 * b)
    want = np.array(
        [[dense[i, i - kl + c] if 0 <= i - kl + c < n else 0 for c in range(kl + ku + 1)] for i in range(n)]
    )
    np.testing.assert_allclose(np.asarray(J), want, atol=1e-14)


BANDED = [js.ImplicitEulerIntegrator, js.RadauIntegrator, js.Radau5Integrator]


@pytest.mark.parametrize("cls", BANDED)
def test_banded_newton_equals_dense_on_the_brusselator(cls):
    # the same steps, iterations and result (to rounding) with the Jacobian kept in band form
    b = js.examples.Brusselator(10)
    ctx = b.create_default_context()
    out = []
    for bw in (None, b.bandwidth()):
        r = js.simulate(b, ctx, 2.0, cls(max_step_size=0.5, target_accuracy=1e-6, jacobian_bandwidth=bw))
        assert int(r.status) == 0
        st = r.stats.as_dict()
        out.append(
            (
                np.asarray(r.context.get_continuous_state_vector()),
                st["num_steps_taken"],
                st["num_newton_raphson_iterations"],
            )
        )
    (xd, nd, itd), (xb, nb, itb) = out
    assert (nd, itd) == (nb, itb)
    np.testing.assert_allclose(xb, xd, rtol=1e-11, atol=1e-12)


def test_banded_brusselator_float32_gradient_and_vmap():
    b = js.examples.Brusselator(6)
    integ = js.Radau5Integrator(max_step_size=0.5, target_accuracy=1e-6, jacobian_bandwidth=(2, 2))
    ctx = b.create_default_context()
    ref = np.asarray(js.simulate(b, ctx, 2.0, integ).context.get_continuous_state_vector())
    # float32: an accuracy float32 can deliver, within 1e-4 of the float64 run
    ctx32 = b.create_default_context(jnp.float32)
    r32 = js.simulate(b, ctx32, 2.0, integ.with_options(target_accuracy=1e-4))
    assert int(r32.status) == 0
    np.testing.assert_allclose(np.asarray(r32.context.get_continuous_state_vector()), ref, atol=1e-4)

    def final(alpha):
        c = ctx.with_numeric_parameter(0, jnp.stack([alpha]))
        return js.simulate(b, c, 2.0, integ).context.get_continuous_state_vector()[4]

    # d u_3(2) / d alpha: reverse mode (implicit function theorem) against central differences
    g = float(jax.grad(final)(jnp.asarray(0.02)))
    eps = 1e-5
    fd = float(final(jnp.asarray(0.02 + eps)) - final(jnp.asarray(0.02 - eps))) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-3)
    alphas = jnp.array([0.01, 0.02, 0.04])
    batched = np.asarray(jax.vmap(final)(alphas))
    np.testing.assert_allclose(batched, [float(final(a)) for a in alphas], rtol=1e-9)


def test_jacobian_bandwidth_is_checked():
    with pytest.raises(JaxsysError, match=r"Radau5Integrator: jacobian_bandwidth must be a tuple \(kl, ku\)"):
        js.Radau5Integrator(jacobian_bandwidth=2)
    with pytest.raises(JaxsysError, match="jacobian_bandwidth"):
        js.RadauIntegrator(jacobian_bandwidth=(1, -1))
