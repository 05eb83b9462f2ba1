"""Issue #36 item 6: a hybrid model never passes through a guard silently.

Before: a bouncing ball with restitution 0 fell through the floor after its impact (z(3) = -12.1,
status ok), and one with restitution 0.5 run past its Zeno time (~4.28 s) to t = 8 ended at z = -68
with status ok: after the impact law the height was a hair below zero (the isolated crossing) and
never positive again, so the positive-then-non-positive witness could not trigger.

Now the loop watches the guard of a one-sided witness whose update left the state on its triggered
side without moving it deeper (`EventProgram.guard_status`): a bounce the step was too long to see is
found by retrying with half the step; where none is left to find, the run stops, with a failure that
names the witness, at the Zeno time (closed form t1 (1 + 2e / (1 - e)), t1 = sqrt(2 z0 / g)) or at the
resting impact (e = 0), the state on the floor. A threshold an update pushes the state on through
(dw/dt < 0 after it) is not a guard and runs on.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js
from jaxsys.examples import BouncingBall
from jaxsys.framework.witness import UnrestrictedUpdateEvent


G, Z0 = 9.81, 10.0
T1 = np.sqrt(2 * Z0 / G)


def _zeno_time(e):
    return T1 * (1 + 2 * e / (1 - e))


def _run(e, t_final, throw=False):
    ball = BouncingBall(z0=Z0, restitution=e)
    ctx = ball.create_default_context()
    return js.simulate(ball, ctx, t_final, js.RungeKutta3Integrator(target_accuracy=1e-6), throw=throw)


@pytest.mark.parametrize("x64", [True, False])
def test_a_ball_with_no_restitution_stops_on_the_floor(x64):
    # float64: within 1e-9 of the closed-form impact time, on the floor to 1e-9 m;
    # float32: within 1e-5 s and 1e-4 m (its witness isolation resolution)
    tol_t, tol_z = (1e-9, 1e-9) if x64 else (1e-5, 1e-4)
    with jax.enable_x64(x64):
        r = _run(0.0, 3.0)
        assert js.Status.from_code(r.status) is js.Status.EVENT_FAILED
        assert abs(float(r.context.get_time()) - T1) < tol_t
        z, v = np.asarray(r.context.get_continuous_state_vector())
        assert abs(z) < tol_z and abs(v) < tol_z
        status = r.simulator_status()
        assert not status.succeeded()
        assert "'impact'" in status.message() and "Zeno" in status.message()
        assert "::ball" in status.format_message()


@pytest.mark.parametrize("x64", [True, False])
def test_a_ball_run_past_its_zeno_time_stops_there(x64):
    # the bounces a long step hides are found (retry with half the step): the run goes on to the
    # Zeno time (float64 within 1e-5 s, float32 within 1e-3 s) and stops there, above the floor
    tol = 1e-5 if x64 else 1e-3
    with jax.enable_x64(x64):
        for e in (0.5, 0.8):
            r = _run(e, 20.0)
            assert js.Status.from_code(r.status) is js.Status.EVENT_FAILED
            assert abs(float(r.context.get_time()) - _zeno_time(e)) < tol, (e, float(r.context.get_time()))
            assert abs(float(r.context.get_continuous_state_vector()[0])) < 1e-4
            # every bounce before it was handled (more impacts than a long step would have seen)
            assert int(r.simulator_stats.num_unrestricted_updates) > 15


def test_throw_names_the_witness_and_the_system():
    with pytest.raises(Exception, match=r"(?s)::ball.*'impact'.*Zeno"):
        _run(0.5, 8.0, throw=True)


def test_under_jit_and_vmap_each_member_stops_at_its_own_zeno_time():
    ball = BouncingBall(z0=Z0)
    ctx = ball.create_default_context()
    integ = js.RungeKutta3Integrator(target_accuracy=1e-6)
    es = jnp.array([0.0, 0.5, 0.8, 0.8])
    t_finals = jnp.array([3.0, 8.0, 20.0, 5.0])  # the last one ends before its Zeno time: ok

    def one(e, tf):
        c = ctx.with_numeric_parameter(0, jnp.stack([G, e]))
        r = js.simulate(ball, c, tf, integ, throw=False)
        return r.context.get_time(), r.status

    times, statuses = jax.jit(jax.vmap(one))(es, t_finals)
    expected = [T1, _zeno_time(0.5), _zeno_time(0.8), 5.0]
    np.testing.assert_allclose(np.asarray(times), expected, atol=1e-5)
    failed = js.Status.EVENT_FAILED.code
    assert [int(s) for s in statuses] == [failed, failed, failed, 0]
    # and each member equals its single run
    for k in range(4):
        t_k, s_k = jax.jit(one)(es[k], t_finals[k])
        assert float(t_k) == pytest.approx(float(times[k]), abs=1e-12) and int(s_k) == int(statuses[k])


def test_bounces_before_the_zeno_time_are_unchanged():
    # restitution 0.8 to t = 8 (before its Zeno time 12.85): the analytic impact times and state
    r = _run(0.8, 8.0)
    assert int(r.status) == 0
    n = int(r.simulator_stats.num_unrestricted_updates)
    impacts = [T1 * (1 + sum(2 * 0.8**j for j in range(1, k + 1))) for k in range(n)]
    assert impacts[-1] < 8.0 < T1 * (1 + sum(2 * 0.8**j for j in range(1, n + 1)))
    t_last, v_last = impacts[-1], 0.8**n * G * T1
    z_expected = v_last * (8.0 - t_last) - 0.5 * G * (8.0 - t_last) ** 2
    assert float(r.context.get_continuous_state_vector()[0]) == pytest.approx(z_expected, abs=1e-6)


class _Kicked(js.LeafSystem):
    """x' = v, v' = 0 from x = 0, v = 1; the witness 1 - x (positive then non-positive) fires an
    update that doubles v: a threshold crossed on purpose, the state moving on through it."""

    def __init__(self):
        super().__init__("kicked")
        self.declare_continuous_state(num_q=1, num_v=1, num_z=0, default=[0.0, 1.0])
        self.declare_witness_function(
            "gate",
            "positive_then_non_positive",
            lambda c: 1.0 - c.get_continuous_state_vector()[0],
            UnrestrictedUpdateEvent(self.kick),
        )

    def kick(self, context, state):
        x = state.continuous_state.get_vector()
        new = dataclasses.replace(state.continuous_state, x=jnp.stack([x[0], 2.0 * x[1]]))
        return dataclasses.replace(state, continuous_state=new)

    def do_calc_time_derivatives(self, context):
        return jnp.stack([context.get_continuous_state_vector()[1], 0.0])


def test_a_threshold_pushed_through_is_not_a_guard():
    s = _Kicked()
    r = js.simulate(s, s.create_default_context(), 3.0, js.RungeKutta3Integrator(target_accuracy=1e-8))
    assert int(r.status) == 0
    # x = 1 at t = 1, then speed 2: x(3) = 5
    np.testing.assert_allclose(np.asarray(r.context.get_continuous_state_vector()), [5.0, 2.0], atol=1e-8)
