"""One scenario through every path of Drake's Step, one answer: Drake's (issue #35, item 2).

The step is taken by the while loop (error control, or a fixed-step method that may fail), the
fixed-step scan (a known step count), the Simulator's ``advance_to`` / ``advance_pending_events`` and
the functional ``advance_pending_events``. Each scenario below once gave different answers on
different paths; each now runs through all of them and is checked against Drake's answer (worked out
from Drake's ``Simulator::AdvanceTo`` and the integrators' source, and for fixed-step implicit Euler
the numbers pydrake 1.51 prints).
"""

from __future__ import annotations

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js


class Counter(js.LeafSystem):
    """x' = 1; a discrete counter incremented every 0.1 s from 0; a per-step publish of the counter."""

    def __init__(self) -> None:
        super().__init__()
        self.declare_continuous_state(1)
        self.declare_discrete_state(jnp.zeros(1))
        self.declare_periodic_discrete_update_event(0.1, 0.0, lambda c, ds: c.get_discrete_state(0) + 1.0)
        self.declare_per_step_publish_event(lambda c: c.get_discrete_state(0)[0], name="count")

    def do_calc_time_derivatives(self, context):
        return jnp.ones(1, context.get_time().dtype)


def _paths(h: float = 0.05) -> dict[str, js.IntegratorBase]:
    return {
        "scan RK4": js.RungeKutta4Integrator(max_step_size=h),
        "scan RK3": js.RungeKutta3Integrator(max_step_size=h, fixed_step_mode=True),
        "while RK3 error-controlled": js.RungeKutta3Integrator(max_step_size=h),
        "while implicit Euler fixed": js.ImplicitEulerIntegrator(max_step_size=h, fixed_step_mode=True),
    }


@pytest.fixture(scope="module")
def counter():
    return Counter()


# Drake: the update at 0.3 happens at the start of the step after the one that lands on 0.3, so a
# record at 0.3 sees 3 updates (0, 0.1, 0.2) and one a hair later 4. Times within the simultaneity
# tolerance (js.framework.events.time_tolerance: 1e-12 relative in float64) are 0.3 itself.
@pytest.mark.parametrize("offset,count", [(0.0, 3), (1e-13, 3), (1e-10, 4), (-1e-10, 3)])
def test_periodic_counter_recorded_just_past_its_update_time(counter, offset, count):
    t_save = 0.3 + offset
    got = {}
    for name, integ in _paths().items():
        r = js.simulate(
            counter,
            counter.create_default_context(),
            0.5,
            integ,
            save_at=np.array([t_save]),
            record=lambda c: c.get_discrete_state(0)[0],
        )
        got[name] = float(r.ys[0])
    sim = js.Simulator(counter, counter.create_default_context(), js.RungeKutta4Integrator(max_step_size=0.05))
    sim.advance_to(t_save)
    got["Simulator.advance_to"] = float(sim.get_context().get_discrete_state(0)[0])
    assert got == {k: count for k in got}, got


def test_periodic_counter_float32_uses_float32_simultaneity(counter):
    # float32: times within 8 ulp (~1e-6 s at 0.3) are simultaneous; 1e-4 s past is after the update
    with jax.enable_x64(False):
        for offset, count in [(2e-7, 3), (1e-4, 4)]:
            for name, integ in _paths().items():
                ctx = counter.create_default_context()
                assert ctx.get_time().dtype == jnp.float32
                r = js.simulate(
                    counter,
                    ctx,
                    0.5,
                    integ,
                    save_at=np.array([0.3 + offset]),
                    record=lambda c: c.get_discrete_state(0)[0],
                )
                assert float(r.ys[0]) == count, (name, offset)


# pydrake 1.58.0 (tests/data/drake_one_step.py): steps taken and the per-step publish log after
# Initialize; AdvanceTo(0.1); AdvancePendingEvents(); AdvanceTo(0.1); AdvanceTo(0.2)
DRAKE_APE = {
    "fixed": [(1, [0.0, 1.0]), (2, [0.0, 1.0, 2.0]), (3, [0.0, 1.0, 2.0, 2.0]), (4, [0.0, 1.0, 2.0, 2.0, 2.0])],
    "error-controlled": [
        (2, [0.0, 1.0, 1.0]),
        (3, [0.0, 1.0, 1.0, 2.0]),
        (4, [0.0, 1.0, 1.0, 2.0, 2.0]),
        (5, [0.0, 1.0, 1.0, 2.0, 2.0, 2.0]),
    ],
}


@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
@pytest.mark.parametrize("kind", ["fixed", "error-controlled"])
def test_advance_pending_events_is_advance_to_now(counter, kind, x64):
    # (float32 too: advance_to(0.1) after reaching float32(0.1) = 0.10000000149 is "now", not backwards)
    with jax.enable_x64(x64):
        _ape_scenario(counter, kind)


def _ape_scenario(counter, kind):
    # Drake: AdvancePendingEvents() is AdvanceTo(now), and every AdvanceTo takes at least one step: a
    # step of zero length does the updates due now, then the per-step publishes. Error control goes on
    # with the step it asked for at the end of the last AdvanceTo (Drake's integrator keeps it).
    if kind == "fixed":
        integ = js.RungeKutta2Integrator(max_step_size=0.2)
    else:
        integ = js.RungeKutta3Integrator(max_step_size=0.2, target_accuracy=1e-3)
    sim = js.Simulator(counter, counter.create_default_context(), integ)
    sim.initialize()
    calls = [
        lambda: sim.advance_to(0.1),
        sim.advance_pending_events,
        lambda: sim.advance_to(0.1),
        lambda: sim.advance_to(0.2),
    ]
    for call, (steps, log) in zip(calls, DRAKE_APE[kind]):
        status = call()
        assert status.succeeded()
        assert sim.get_num_steps_taken() == steps
        assert list(sim.get_publish_log("count").data().ravel()) == log
    assert float(sim.get_context().get_discrete_state(0)[0]) == 2.0  # (the update at 0.2 is pending)
    # the functional form performs the same updates (it has no steps or publishes to count)
    ctx = js.advance_pending_events(counter, sim.get_context(), None)
    assert float(ctx.get_discrete_state(0)[0]) == 3.0


class Crossing(js.LeafSystem):
    """x' = 1 from 0; a witness 0.55 - x with a discrete update counting its crossings."""

    def __init__(self) -> None:
        super().__init__()
        self.declare_continuous_state(1)
        self.declare_discrete_state(jnp.zeros(1))
        self.declare_witness_function(
            "x reaches 0.55",
            "positive_then_non_positive",
            lambda c: 0.55 - c.get_continuous_state_vector()[0],
            js.DiscreteUpdateEvent(lambda c, ds: c.get_discrete_state(0) + 1.0),
        )

    def do_calc_time_derivatives(self, context):
        return jnp.ones(1, context.get_time().dtype)


@pytest.mark.parametrize("isolation", [True, False])
@pytest.mark.parametrize("integ", ["RK3", "RK4"])
def test_crossing_in_the_last_step_stays_pending(isolation, integ):
    # the last step (0.4 -> 0.6) crosses at 0.55; its update is pending at the end of the run, fired by
    # the next step's start or advance_pending_events (Drake keeps it pending with or without isolation)
    s = Crossing()
    integrator = {
        "RK3": js.RungeKutta3Integrator(max_step_size=0.2, target_accuracy=1e-3),
        "RK4": js.RungeKutta4Integrator(max_step_size=0.2),
    }[integ]
    r = js.simulate(s, s.create_default_context(), 0.6, integrator, witness_isolation=isolation)
    pending = bool(np.asarray(r.pending_witness_events)[0])
    if isolation:
        # the step is cut just past 0.55 and the update is done at the next step's start, before 0.6
        assert float(r.context.get_discrete_state(0)[0]) == 1.0 and not pending
    else:
        assert float(r.context.get_discrete_state(0)[0]) == 0.0 and pending
        after = js.advance_pending_events(s, r.context, r.pending_witness_events)
        assert float(after.get_discrete_state(0)[0]) == 1.0
    sim = js.Simulator(s, s.create_default_context(), integrator, witness_isolation=isolation)
    sim.advance_to(0.6)
    sim.advance_pending_events()
    assert float(sim.get_context().get_discrete_state(0)[0]) == 1.0
    assert float(sim.get_context().get_time()) == pytest.approx(0.6)


class Quadratic(js.LeafSystem):
    """x' = 14 t + 7, x(0) = 3: x = 7 t^2 + 7 t + 3."""

    def __init__(self) -> None:
        super().__init__()
        self.declare_continuous_state(1)

    def do_calc_time_derivatives(self, context):
        return jnp.reshape(14.0 * context.get_time() + 7.0, (1,))


@pytest.mark.parametrize("extrapolate,expected", [(False, 37.125), (True, 29.25)])
def test_fixed_step_implicit_euler_keeps_what_error_control_keeps(extrapolate, expected):
    # pydrake 1.51, fixed-step ImplicitEulerIntegrator, h = 1.5: 37.125 (two half steps), error
    # estimate 7.875 (= 45 - 37.125, the full step minus the half steps). jaxsys's default extrapolates
    # (2 x_half - x_full = 29.25, exact for this quadratic); the estimate is the same.
    s = Quadratic()
    ctx = s.create_default_context().with_continuous_state(jnp.array([3.0]))
    integ = js.ImplicitEulerIntegrator(max_step_size=1.5, fixed_step_mode=True, extrapolate=extrapolate)
    r = js.simulate(s, ctx, 1.5, integ)
    assert float(r.context.get_continuous_state_vector()[0]) == pytest.approx(expected, rel=1e-12)

    def f(t, x):
        return jnp.reshape(14.0 * t + 7.0, (1,))

    x_new, err, ok = integ.attempt_step(f, jnp.asarray(0.0), jnp.array([3.0]), jnp.asarray(1.5), {})
    assert bool(ok) and float(x_new[0]) == pytest.approx(expected, rel=1e-12)
    assert abs(float(err[0])) == pytest.approx(7.875, rel=1e-12)


class BareWitness(js.LeafSystem):
    """x' = 1 from 0, a witness 0.55 - x with no event, and no other event."""

    def __init__(self) -> None:
        super().__init__()
        self.declare_continuous_state(1)
        self.declare_witness_function(
            "x reaches 0.55", "positive_then_non_positive", lambda c: 0.55 - c.get_continuous_state_vector()[0]
        )

    def do_calc_time_derivatives(self, context):
        return jnp.ones(1, context.get_time().dtype)


def test_witness_without_event_ends_the_step_at_its_crossing():
    # Drake: a witness function without an event "forces the integration to end a step at the witness
    # isolation time". Before: with no other event in the system the witness was ignored (5 steps).
    s = BareWitness()
    r = js.simulate(s, s.create_default_context(), 1.0, js.RungeKutta4Integrator(max_step_size=0.2))
    # fixed steps of 0.2 from 0, a step ending just past 0.55, then steps of 0.2 from there: 6 steps
    assert r.stats.as_dict()["num_steps_taken"] == 6
    sim = js.Simulator(s, s.create_default_context(), js.RungeKutta4Integrator(max_step_size=0.2))
    sim.advance_to(1.0)
    assert sim.get_num_steps_taken() == 6
    np.testing.assert_allclose(sim.get_context().get_continuous_state_vector(), [1.0], rtol=1e-12)


# ----- the event program is built once, before tracing, and frozen (issue #35, item 3) -----


def test_event_program_is_frozen_once_built(counter):
    from jaxsys.analysis.event_loop import EventProgram, has_events

    ctx = counter.create_default_context()
    program = EventProgram(counter, ctx)
    assert bool(program) is True and has_events(counter) is True
    assert program.can_stop is False  # (the counter's handlers only succeed)
    with pytest.raises(AttributeError, match="frozen"):
        program.witnesses = []
    # a system without events: no program to run, the same truth value before and after building
    plain = js.examples.SpringMassDamper(has_input=False)
    assert has_events(plain) is False and bool(EventProgram(plain, plain.create_default_context())) is False
    # witnesses are bound when it is built: the bouncing ball's program holds its witness, and a
    # witness without any declared event makes a program that is true
    ball = js.examples.BouncingBall()
    bp = EventProgram(ball, ball.create_default_context())
    assert len(bp.witnesses) >= 1 and bool(bp)


_TRACES = itertools.count()


class Failing(js.LeafSystem):
    """x' = 1; a periodic publish that fails, its message naming how many times the handler was traced
    (a status that depends on something other than the context: what a frozen program refuses)."""

    stable: bool = eqx.field(static=True)

    def __init__(self, stable: bool) -> None:
        super().__init__()
        self.stable = stable
        self.declare_continuous_state(1)
        self.declare_periodic_publish_event(0.25, 0.0, self.check)

    def check(self, context):
        message = "x too large" if self.stable else f"x too large (trace {next(_TRACES)})"
        return js.EventStatus.failed_if(context.get_continuous_state_vector()[0] > 0.6, message)

    def do_calc_time_derivatives(self, context):
        return jnp.ones(1, context.get_time().dtype)


def test_statuses_found_when_the_program_is_built_and_refused_otherwise():
    # a handler that can fail: known before the loop is traced, so the run stops on it with its message
    s = Failing(stable=True)
    r = js.simulate(s, s.create_default_context(), 1.0, js.RungeKutta3Integrator(max_step_size=0.1), throw=False)
    assert int(r.status) == js.Status.EVENT_FAILED.code and r.simulator_status().message() == "x too large"
    np.testing.assert_allclose(float(r.context.get_time()), 0.75, atol=1e-12)
    # one whose message changes from trace to trace reports a status the program never saw: an error
    # that says so, never a silently dropped status
    bad = Failing(stable=False)
    with pytest.raises(js.JaxsysError, match="did not report when the simulation was set up"):
        js.simulate(bad, bad.create_default_context(), 1.0, js.RungeKutta3Integrator(max_step_size=0.1))
