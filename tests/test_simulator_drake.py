"""Agreement with Drake 1.51.1's own output (tests/data/*.json)."""

import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js
from jaxsys.examples import Pendulum, SpringMassDamper, VanDerPol


def pendulum_context():
    p = Pendulum()  # m=1, l=1, b=0.1, g=9.81
    ctx = p.get_input_port(0).fix_value(p.create_default_context(), [0.0])
    return p, ctx.with_continuous_state(jnp.array([1.0, 0.0]))


def test_s1_semi_explicit_euler_spring_mass(drake):
    # Drake takes 10001 steps (time accumulated by addition leaves a 3e-16 s sliver); jaxsys
    # computes t = n h and takes exactly 10000. Same arithmetic otherwise: agreement to 1e-10.
    d = drake("S1")
    s = SpringMassDamper(1.0, 10.0, 0.1, has_input=False)
    ctx = s.create_default_context().with_continuous_state(jnp.array([1.0, 0.0]))
    r = js.simulate(s, ctx, 10.0, js.SemiExplicitEulerIntegrator(max_step_size=1e-3), save_at=jnp.arange(1.0, 11.0))
    np.testing.assert_allclose(r.context.get_continuous_state_vector(), d["final_state"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(r.ys, np.array(d["samples_t_x"])[:, 1:], rtol=0, atol=1e-10)
    assert int(r.stats.num_steps_taken) == 10000 == d["integrator_stats"]["num_steps_taken"] - 1
    assert float(r.context.get_time()) == 10.0


@pytest.mark.parametrize(
    "case,variant,cls",
    [
        ("S2a", "bogacki_shampine3", js.BogackiShampine3Integrator),
        ("S2a", "runge_kutta3", js.RungeKutta3Integrator),
        ("S2b", "runge_kutta5", js.RungeKutta5Integrator),
    ],
)
def test_s2_error_controlled_pendulum_reproduces_drakes_steps(drake, case, variant, cls):
    run = next(r for r in drake(case)["runs"] if r["variant"] == variant)
    settings = run["integrator_settings"]
    # fsal=False evaluates every stage of every attempt, as Drake does (its counts below).
    integrator = cls(max_step_size=settings["max_step_size"], target_accuracy=settings["target_accuracy"], fsal=False)
    p, ctx = pendulum_context()
    r = js.simulate(p, ctx, 10.0, integrator)
    ds, ours = run["integrator_stats"], r.stats.as_dict()
    # Same algorithm: identical step sequence and counts.
    for key in (
        "num_steps_taken",
        "num_derivative_evaluations",
        "num_step_shrinkages_from_error_control",
        "num_substep_failures",
    ):
        assert ours[key] == ds[key], key
    # Step sizes come from err^(1/order); err is a difference of nearly equal numbers that Drake
    # sums in another order, so sizes agree to ~1e-8 relative, not to the last bit.
    for key in ("actual_initial_step_size_taken", "smallest_adapted_step_size_taken", "largest_step_size_taken"):
        np.testing.assert_allclose(ours[key], ds[key], rtol=1e-7)
    np.testing.assert_allclose(r.context.get_continuous_state_vector(), run["final_state"], rtol=0, atol=1e-11)
    # The default (first same as last, for BS3 and Dormand-Prince) reuses the end-point derivative:
    # the same steps and the same result to the last bit, one evaluation fewer per attempt.
    reuse = js.simulate(p, ctx, 10.0, integrator.with_options(fsal=True))
    mine = reuse.stats.as_dict()
    fsal = integrator.with_options(fsal=True).uses_fsal()
    assert fsal == (cls is not js.RungeKutta3Integrator)
    for key in ours:
        if key != "num_derivative_evaluations":
            assert mine[key] == ours[key] or (np.isnan(mine[key]) and np.isnan(ours[key])), key
    per = cls.num_stages - int(fsal)
    assert mine["num_derivative_evaluations"] == ours["num_step_attempts"] * per + int(fsal)
    np.testing.assert_array_equal(reuse.context.get_continuous_state_vector(), r.context.get_continuous_state_vector())


def test_s2_accepted_step_times_match(drake):
    run = next(r for r in drake("S2b")["runs"] if r["variant"] == "runge_kutta5")
    steps = np.array(run["accepted_steps_t_x"])
    p, ctx = pendulum_context()
    # record at Drake's accepted times: our steps must land on them (same sequence)
    integrator = js.RungeKutta5Integrator(max_step_size=0.1, target_accuracy=1e-8)
    r = js.simulate(p, ctx, 10.0, integrator)
    assert int(r.stats.num_steps_taken) == steps.shape[0] - 1


@pytest.mark.parametrize(
    "variant,cls",
    [
        ("runge_kutta2", js.RungeKutta2Integrator),
        ("runge_kutta3_fixed", js.RungeKutta3Integrator),
        ("runge_kutta5_fixed", js.RungeKutta5Integrator),
    ],
)
def test_s2c_fixed_step(drake, variant, cls):
    run = next(r for r in drake("S2c")["runs"] if r["variant"] == variant)
    p, ctx = pendulum_context()
    integ = cls(max_step_size=1e-3, fixed_step_mode=True)
    r = js.simulate(p, ctx, 10.0, integ)
    # Drake's extra 3e-16 s step changes the result by far less than 1e-10.
    np.testing.assert_allclose(r.context.get_continuous_state_vector(), run["final_state"], rtol=0, atol=1e-10)
    per_step = run["integrator_stats"]["num_derivative_evaluations"] // run["integrator_stats"]["num_steps_taken"]
    fsal = integ.uses_fsal()  # Dormand-Prince reuses its last stage: one evaluation fewer a step
    assert int(r.stats.num_derivative_evaluations) == 10000 * (per_step - int(fsal)) + int(fsal)
    drake_way = js.simulate(p, ctx, 10.0, integ.with_options(fsal=False))
    assert int(drake_way.stats.num_derivative_evaluations) == 10000 * per_step
    np.testing.assert_array_equal(
        drake_way.context.get_continuous_state_vector(), r.context.get_continuous_state_vector()
    )


def test_s3a_van_der_pol(drake):
    d = drake("S3a")
    v = VanDerPol(mu=1.0)
    ctx = v.create_default_context()
    r = js.simulate(v, ctx, 20.0, js.RungeKutta5Integrator(max_step_size=0.1, target_accuracy=1e-8, fsal=False))
    np.testing.assert_allclose(r.context.get_continuous_state_vector(), d["final_state"], rtol=0, atol=1e-9)
    assert int(r.stats.num_steps_taken) == d["integrator_stats"]["num_steps_taken"]
    assert int(r.stats.num_derivative_evaluations) == d["integrator_stats"]["num_derivative_evaluations"]
    assert (
        int(r.stats.num_step_shrinkages_from_error_control)
        == d["integrator_stats"]["num_step_shrinkages_from_error_control"]
    )
    # and Drake's samples, recorded by stepping to the sample times as Drake's AdvanceTo does
    r2 = js.simulate(
        v, ctx, 20.0, js.RungeKutta5Integrator(max_step_size=0.1, target_accuracy=1e-8), save_at=jnp.arange(0.0, 21.0)
    )
    np.testing.assert_allclose(r2.ys, np.array(d["samples_t_x"])[:, 1:], rtol=0, atol=1e-9)
    np.testing.assert_allclose(r2.ys, np.array(d["truth_samples_t_x"])[:, 1:], rtol=0, atol=1e-6)


@pytest.mark.parametrize("n", [10, 100, 300])
def test_s8_chain_of_lags(drake, n):
    run = next(r for r in drake("S8")["runs"] if r["n"] == n)
    b = js.DiagramBuilder()
    src = b.add_named_system("one", js.ConstantVectorSource([1.0]))
    prev = src.get_output_port()
    for i in range(n):
        lag = b.add_named_system(f"lag{i}", js.FirstOrderLowPassFilter(1.0, 1))
        b.connect(prev, lag.get_input_port())
        prev = lag.get_output_port()
    d = b.build("chain")
    ctx = d.create_default_context()
    r = js.simulate(d, ctx, 10.0, js.RungeKutta5Integrator(max_step_size=1.0, target_accuracy=1e-6))
    np.testing.assert_allclose(r.context.get_continuous_state_vector(), run["final_state"], rtol=0, atol=1e-11)
    np.testing.assert_allclose(r.context.get_continuous_state_vector(), run["exact_final_state"], rtol=0, atol=5e-7)
    assert int(r.stats.num_steps_taken) == run["integrator_stats"]["num_steps_taken"]
