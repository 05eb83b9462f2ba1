"""Parameter fitting recovers known parameters from noisy synthetic data."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxsys as js
from jaxsys.examples import Pendulum, SpringMassDamper
from jaxsys.optimization.fitting import FitParameter, fit_parameters, set_parameters, trajectory_loss


def synthetic(system, base, truth_params, x0s, ts, observe, noise, seed):
    truth = base.with_numeric_parameter(0, jnp.asarray(truth_params))
    ctxs, data = [], []
    for i, x0 in enumerate(x0s):
        c = truth.with_continuous_state(jnp.asarray(x0))
        ys = js.simulate(
            system, c, float(ts[-1]), js.RungeKutta4Integrator(max_step_size=0.01), save_at=ts, record=observe
        ).ys
        data.append(ys + noise * jax.random.normal(jax.random.PRNGKey(seed + i), ys.shape))
        ctxs.append(base.with_continuous_state(jnp.asarray(x0)))
    return ctxs, jnp.stack(data)


def test_recovers_pendulum_length_and_damping():
    p = Pendulum()
    base = p.get_input_port(0).fix_value(p.create_default_context(), [0.0])
    ts = jnp.linspace(0.1, 5.0, 50)
    angle = lambda c: c.get_continuous_state_vector()[:1]  # noqa: E731 - we measure the angle only
    ctxs, data = synthetic(p, base, [1.0, 1.3, 0.2, 9.81], [[0.5, 0.0], [1.0, 0.0], [1.5, 0.0]], ts, angle, 0.01, 0)
    res = fit_parameters(
        p,
        ctxs,
        {"l": FitParameter(0, 1, positive=True), "b": FitParameter(0, 2, lower=0.0, upper=1.0)},
        ts,
        data,
        initial={"l": 1.0, "b": 0.1},
        observe=angle,
        steps=200,
    )
    assert abs(res.params["l"] - 1.3) < 0.01 * 1.3  # 1 %
    assert abs(res.params["b"] - 0.2) < 0.02 * 0.2  # 2 % (noise sigma 0.01 rad)
    assert res.loss_history[-1] < 1e-3 * res.loss_history[0]
    assert float(res.context.get_numeric_parameter(0)[1]) == res.params["l"]


def test_recovers_spring_mass_damper_k_and_c():
    s = SpringMassDamper(has_input=False)
    base = s.create_default_context()
    ts = jnp.linspace(0.1, 4.0, 40)
    full = lambda c: c.get_continuous_state_vector()  # noqa: E731
    ctxs, data = synthetic(s, base, [1.0, 10.0, 0.5], [[1.0, 0.0], [0.0, 2.0]], ts, full, 0.005, 10)
    res = fit_parameters(
        s,
        ctxs,
        {"k": FitParameter(0, 1, positive=True), "c": FitParameter(0, 2, positive=True)},
        ts,
        data,
        initial={"k": 8.0, "c": 0.3},
        observe=full,
        steps=300,
        optimizer=optax.adam(0.05),
    )
    assert abs(res.params["k"] - 10.0) < 0.01 * 10.0
    assert abs(res.params["c"] - 0.5) < 0.03 * 0.5


def test_loss_gradient_matches_finite_differences():
    p = Pendulum()
    base = p.get_input_port(0).fix_value(p.create_default_context(), [0.0]).with_continuous_state(jnp.array([1.0, 0.0]))
    ts = jnp.linspace(0.1, 2.0, 20)
    spec = {"l": FitParameter(0, 1)}
    target = js.simulate(
        p, set_parameters(base, spec, {"l": 1.2}), 2.0, js.RungeKutta4Integrator(max_step_size=0.01), save_at=ts
    ).ys
    batch = jax.tree_util.tree_map(lambda x: x[None], base)

    def loss(length):
        ctxs = jax.vmap(lambda c: set_parameters(c, spec, {"l": length}))(batch)
        return trajectory_loss(p, ctxs, ts, target[None])

    g = jax.grad(loss)(1.0)
    fd = (loss(1.0 + 1e-6) - loss(1.0 - 1e-6)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-6)


def smd_experiments(noise, seed):
    s = SpringMassDamper(has_input=False)
    base = s.create_default_context()
    ts = np.linspace(0.1, 4.0, 40)  # NumPy inputs are accepted
    full = lambda c: c.get_continuous_state_vector()  # noqa: E731
    ctxs, data = synthetic(s, base, [1.0, 10.0, 0.5], [[1.0, 0.0]], ts, full, noise, seed)
    return s, ctxs, ts, np.asarray(data), full


SPEC = {"k": FitParameter(0, 1, positive=True), "c": FitParameter(0, 2, positive=True)}


def test_levenberg_marquardt_and_gauss_newton_recover_exact_parameters():
    s, ctxs, ts, data, full = smd_experiments(0.0, 0)
    for method in ("levenberg_marquardt", "gauss_newton"):
        res = js.fit_parameters(s, ctxs, SPEC, ts, data, initial={"k": 8.0, "c": 0.3}, observe=full, method=method)
        assert res.converged and res.method == method and res.steps < 30
        assert abs(res.params["k"] - 10.0) < 1e-7 and abs(res.params["c"] - 0.5) < 1e-7
        assert res.final_loss < 1e-18


def test_standard_errors_match_a_monte_carlo_of_refits():
    # the covariance s^2 (J^T J)^-1 predicts the spread of refits on independent noisy data sets
    sigma, fits, predicted = 0.02, [], []
    s, ctxs, ts, clean, full = smd_experiments(0.0, 0)
    for seed in range(40):
        data = clean + sigma * np.asarray(jax.random.normal(jax.random.PRNGKey(seed), clean.shape))
        res = js.fit_parameters(
            s, ctxs, SPEC, ts, data, initial={"k": 9.0, "c": 0.4}, observe=full, method="levenberg_marquardt"
        )
        fits.append([res.params["k"], res.params["c"]])
        predicted.append([res.standard_errors["k"], res.standard_errors["c"]])
        assert res.residual_variance == pytest.approx(sigma**2, rel=0.35)
    fits = np.asarray(fits)
    spread = np.std(fits, axis=0, ddof=1)
    pred = np.mean(np.asarray(predicted), axis=0)
    # 40 refits estimate a standard deviation to ~11 %: allow 35 %
    np.testing.assert_allclose(spread / pred, [1.0, 1.0], rtol=0.35)
    # unbiased: the mean of the refits is the truth within 3 standard errors of a mean of 40
    assert np.all(np.abs(fits.mean(axis=0) - [10.0, 0.5]) < 3 * pred / np.sqrt(40))


def test_adam_stops_at_the_tolerance_with_the_parameters_that_met_it():
    s, ctxs, ts, data, full = smd_experiments(0.0, 0)
    res = js.fit_parameters(
        s, ctxs, SPEC, ts, data, initial={"k": 8.0, "c": 0.3}, observe=full, steps=400, tolerance=1e-4
    )
    assert res.converged and res.loss_history[-1] < 1e-4 and np.all(res.loss_history[:-1] >= 1e-4)
    assert res.final_loss == res.loss_history[-1]
    # the reported parameters are those whose loss met the tolerance
    check = js.fit_parameters(s, ctxs, SPEC, ts, data, initial=res.params, observe=full, steps=1)
    assert check.loss_history[0] == pytest.approx(res.final_loss, rel=1e-9)
    assert js.set_parameters is set_parameters
    with pytest.raises(js.JaxsysError, match="method must be"):
        js.fit_parameters(s, ctxs, SPEC, ts, data, observe=full, method="bfgs")


def test_levenberg_marquardt_in_float32():
    # float32 (JAX's default): the same fit converges to float32's resolution, with finite standard errors
    with jax.enable_x64(False):
        s = SpringMassDamper(has_input=False)
        base = s.create_default_context(jnp.float32)
        ts = np.linspace(0.1, 4.0, 40)
        full = lambda c: c.get_continuous_state_vector()  # noqa: E731
        ctxs, data = synthetic(s, base, [1.0, 10.0, 0.5], [[1.0, 0.0]], ts, full, 0.01, 0)
        res = js.fit_parameters(
            s,
            ctxs,
            SPEC,
            ts,
            np.asarray(data),
            initial={"k": 8.0, "c": 0.3},
            observe=full,
            method="levenberg_marquardt",
        )
    assert res.converged
    assert abs(res.params["k"] - 10.0) < 0.05 and abs(res.params["c"] - 0.5) < 0.02  # noise 0.01
    assert np.isfinite(res.standard_errors["k"]) and 0 < res.standard_errors["k"] < 0.05


@pytest.mark.parametrize("noise, warns", [(1e-6, True), (1e-2, False)])
def test_float32_fit_at_tiny_noise_says_it_is_quantized(noise, warns):
    # Before: at sigma = 1e-6 a float32 Levenberg-Marquardt fit returned standard errors at float32's own
    # resolution of k (the estimate quantized there) without a word. Now a PrecisionWarning names float32
    # and jax_enable_x64; at a noise float32 resolves (1e-2) there is none
    import warnings as w

    with jax.enable_x64(False):
        s = SpringMassDamper(has_input=False)
        base = s.create_default_context(jnp.float32)
        ts = np.linspace(0.1, 4.0, 40)
        full = lambda c: c.get_continuous_state_vector()  # noqa: E731
        ctxs, data = synthetic(s, base, [1.0, 10.0, 0.5], [[1.0, 0.0]], ts, full, noise, 0)
        with w.catch_warnings(record=True) as caught:
            w.simplefilter("always")
            res = js.fit_parameters(
                s,
                ctxs,
                SPEC,
                ts,
                np.asarray(data),
                initial={"k": 9.5, "c": 0.45},
                observe=full,
                method="levenberg_marquardt",
            )
    quantized = [c for c in caught if issubclass(c.category, js.PrecisionWarning) and "quantized" in str(c.message)]
    assert bool(quantized) == warns, [str(c.message) for c in caught]
    if warns:
        assert "float32" in str(quantized[0].message) and "jax_enable_x64" in str(quantized[0].message)
        # the standard error of k really is at float32's resolution of k = 10 (ulp 9.5e-7)
        assert res.standard_errors["k"] < 100 * 1.2e-7 * 10
    assert abs(res.params["k"] - 10.0) < 10 * res.standard_errors["k"] + 1e-5


def test_covariance_is_formed_in_the_parameters_themselves():
    """The least-squares covariance s^2 (J^T J)^-1 uses J = d residuals / d parameters (not the
    unconstrained variables the solver steps in): checked against jacfwd of the residuals in the
    parameters, for a softplus-mapped and a sigmoid-mapped (bounded) parameter, to 1e-8 relative.
    (jaxsys forms it from the solver's compiled Jacobian, scaled column by column.)"""
    p = Pendulum()
    base = p.get_input_port(0).fix_value(p.create_default_context(), [0.0])
    ts = jnp.linspace(0.1, 3.0, 30)
    angle = lambda c: c.get_continuous_state_vector()[:1]  # noqa: E731
    ctxs, data = synthetic(p, base, [1.0, 1.3, 0.2, 9.81], [[0.5, 0.0], [1.2, 0.0]], ts, angle, 0.01, 3)
    spec = {"l": FitParameter(0, 1, positive=True), "b": FitParameter(0, 2, lower=0.0, upper=1.0)}
    integ = js.RungeKutta4Integrator(max_step_size=0.01)
    res = fit_parameters(
        p, ctxs, spec, ts, data, initial={"l": 1.2, "b": 0.3}, observe=angle, integrator=integ, method="gauss_newton"
    )

    def residuals(v):
        out = []
        for c, y in zip(ctxs, data):
            c = set_parameters(c, spec, {"l": v[0], "b": v[1]})
            out.append((js.simulate(p, c, 3.0, integ, save_at=ts, record=angle).ys - y).reshape(-1))
        return jnp.concatenate(out)

    v = jnp.array([res.params["l"], res.params["b"]])
    r, J = np.asarray(residuals(v)), np.asarray(jax.jacfwd(residuals)(v))
    want = float(r @ r) / (r.size - 2) * np.linalg.inv(J.T @ J)
    np.testing.assert_allclose(res.covariance, want, rtol=1e-8)
    assert abs(res.params["l"] - 1.3) < 4 * res.standard_errors["l"]
