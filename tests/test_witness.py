"""Witness functions: isolated crossings, impacts against the analytic bouncing ball, gradients
through event times, vmap, errors."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js
from jaxsys.examples import BouncingBall


G, E, Z0 = 9.81, 0.8, 10.0


def analytic(t, z0=Z0, g=G, e=E):
    """Height and velocity of the ideal bouncing ball at time t; and its impact times."""
    t1 = np.sqrt(2 * z0 / g)
    impacts = [t1]
    if t < t1:
        return np.array([z0 - 0.5 * g * t * t, -g * t]), impacts
    tk, v = t1, e * g * t1
    while True:
        tn = tk + 2 * v / g
        if t < tn:
            dt = t - tk
            return np.array([v * dt - 0.5 * g * dt * dt, v - g * dt]), impacts
        impacts.append(tn)
        tk, v = tn, e * v


class LoggedBall(BouncingBall):
    """The ball plus a second witness on the same height that publishes (time, velocity)."""

    log_impacts: js.WitnessFunction

    def __init__(self, **kw):
        super().__init__(**kw)
        self.log_impacts = self.declare_witness_function(
            "impact log",
            js.WitnessFunctionDirection.POSITIVE_THEN_NON_POSITIVE,
            self.height,
            js.PublishEvent(lambda c: c.get_continuous_state_vector(), name="impacts"),
        )


INTEGRATORS = [
    js.RungeKutta5Integrator(max_step_size=0.1, target_accuracy=1e-10),
    js.RungeKutta3Integrator(max_step_size=0.1, target_accuracy=1e-8),
    js.RungeKutta4Integrator(max_step_size=1e-2),
]


@pytest.mark.parametrize("integrator", INTEGRATORS, ids=["rk5", "rk3", "rk4-fixed"])
def test_bouncing_ball_impact_times_and_states(integrator):
    ball = LoggedBall()
    r = jax.jit(lambda c: js.simulate(ball, c, 5.0, integrator, save_at=jnp.array([1.0, 3.0, 5.0])))(
        ball.create_default_context()
    )
    log = r.get_publish_log("impacts")
    _, impacts = analytic(5.0)
    assert int(log.count) == len(impacts) == 2
    # Impact times to the isolation tolerance (2**-40 of a step) plus the integration error.
    np.testing.assert_allclose(log.sample_times(), impacts, rtol=0, atol=1e-7)
    # The state at the impact (just past it): z ~ 0, v = pre-impact velocity -g t1 (publish sees
    # the state before the unrestricted update, which runs at the start of the next step)
    np.testing.assert_allclose(log.data()[0], [0.0, -G * impacts[0]], atol=1e-6)
    for t, y in zip([1.0, 3.0, 5.0], r.ys):
        np.testing.assert_allclose(y, analytic(t)[0], rtol=0, atol=1e-6)
    assert int(r.simulator_stats.num_unrestricted_updates) == 2


def test_gradients_through_impacts_match_finite_differences():
    integrator = js.RungeKutta5Integrator(max_step_size=0.1, target_accuracy=1e-11)
    ball = BouncingBall()
    base = ball.create_default_context()

    @eqx.filter_jit
    def height_at_3(z0, e):
        c = base.with_continuous_state(jnp.stack([z0, 0.0])).with_numeric_parameter(0, jnp.stack([G, e]))
        return js.simulate(ball, c, 3.0, integrator).context.get_continuous_state_vector()[0]

    z0, e = jnp.array(Z0), jnp.array(E)
    g_rev = jax.grad(height_at_3, argnums=(0, 1))(z0, e)
    g_fwd = jax.jacfwd(height_at_3, argnums=(0, 1))(z0, e)
    eps = 1e-5
    fd_z0 = (height_at_3(z0 + eps, e) - height_at_3(z0 - eps, e)) / (2 * eps)
    fd_e = (height_at_3(z0, e + eps) - height_at_3(z0, e - eps)) / (2 * eps)
    # and the analytic derivatives of the closed form (one impact before t = 3)
    an = lambda z, ee: analytic(3.0, z0=z, e=ee)[0][0]  # noqa: E731
    an_z0 = (an(Z0 + eps, E) - an(Z0 - eps, E)) / (2 * eps)
    an_e = (an(Z0, E + eps) - an(Z0, E - eps)) / (2 * eps)
    np.testing.assert_allclose(g_rev, [fd_z0, fd_e], rtol=1e-5)
    np.testing.assert_allclose(g_rev, [an_z0, an_e], rtol=1e-5)
    np.testing.assert_allclose(g_fwd, g_rev, rtol=1e-9)
    # without the event-time sensitivity the derivative w.r.t. z0 would be wrong by O(1)
    assert abs(float(g_rev[0]) - an_z0) < 1e-4 * abs(an_z0)


def test_vmap_members_bounce_at_different_times():
    integrator = js.RungeKutta5Integrator(max_step_size=0.1, target_accuracy=1e-10)
    ball = LoggedBall()
    base = ball.create_default_context()
    z0s = jnp.array([2.0, 5.0, 10.0, 20.0])
    run = eqx.filter_jit(lambda c: js.simulate(ball, c, 4.0, integrator))
    batch = jax.vmap(run)(jax.vmap(lambda z: base.with_continuous_state(jnp.stack([z, 0.0])))(z0s))
    xs = jax.vmap(lambda c: c.get_continuous_state_vector())(batch.context)
    for i, z in enumerate(z0s):
        single = run(base.with_continuous_state(jnp.stack([z, 0.0])))
        np.testing.assert_allclose(xs[i], single.context.get_continuous_state_vector(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(xs[i], analytic(4.0, z0=float(z))[0], atol=1e-6)
        assert int(batch.publish_logs[0].count[i]) == len(analytic(4.0, z0=float(z))[1])


def test_several_crossings_in_one_step_fire_in_order():
    """Two witnesses crossing within one (large, fixed) step: the first fires first."""

    class Clock(js.LeafSystem):
        def __init__(self):
            super().__init__("clock")
            self.declare_continuous_state(1)  # x = t
            for level in (0.3, 0.7, 0.5):
                self.declare_witness_function(
                    f"x={level}",
                    "negative_then_non_negative",
                    lambda c, level=level: c.get_continuous_state_vector()[0] - level,
                    js.PublishEvent(lambda c: c.get_continuous_state_vector(), name=f"at {level}"),
                )

        def do_calc_time_derivatives(self, c):
            return jnp.ones(1)

    s = Clock()
    r = js.simulate(s, s.create_default_context(), 2.0, js.RungeKutta2Integrator(max_step_size=1.0))
    for level in (0.3, 0.5, 0.7):
        log = r.get_publish_log(f"at {level}")
        assert int(log.count) == 1
        np.testing.assert_allclose(log.sample_times(), [level], atol=1e-10)


def test_witness_errors():
    class Bad(js.LeafSystem):
        def __init__(self):
            super().__init__("bad")
            self.declare_continuous_state(1)
            self.w = self.declare_witness_function(
                "vector", "crosses_zero", lambda c: c.get_continuous_state_vector() * jnp.ones(2)
            )

        w: js.WitnessFunction = eqx.field(static=True)

        def do_calc_time_derivatives(self, c):
            return jnp.ones(1)

    b = Bad()
    with pytest.raises(js.StateError, match=r"Witness function 'vector' of System ::bad \(Bad\) must return a scalar"):
        b.evaluate_witness(b.create_default_context(), b.w)

    class BadDirection(js.LeafSystem):
        def __init__(self):
            super().__init__("bd")
            self.declare_witness_function("w", "sideways", lambda c: 0.0)

    with pytest.raises(js.DeclarationError, match="unknown direction 'sideways'"):
        BadDirection()
    ball = BouncingBall()
    ws = ball.get_witness_functions(ball.create_default_context())
    assert [w.get_description() for w in ws] == ["impact"]
    assert float(ball.evaluate_witness(ball.create_default_context(), ws[0])) == 10.0
    assert ws[0].get_event().kind == "unrestricted_update"
