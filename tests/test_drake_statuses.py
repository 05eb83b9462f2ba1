"""Drake's SimulatorStatus, forced events and timed-event checks, as a ported script expects (issue #37).

Restated from Drake's systems/analysis/test/simulator_status_test.cc and simulator_test.cc
(MonitorFunctionAndStatusReturn, EventStatusReturnHandlingForAdvanceTo), framework/test/
leaf_system_test.cc (forced events, CalcNextUpdateTime) and Drake's own message formats
(simulator_status.cc FormatMessage, event_status.cc ThrowOnFailure, system.cc CalcNextUpdateTime);
the counter scenario's numbers are pydrake's (tests/data/X6_event_status.json).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import load_drake

import jaxsys as js


@pytest.fixture(scope="module")
def x6():
    return load_drake("X6_event_status")


class Counter(js.LeafSystem):
    """x' = 1; a periodic discrete update every 0.25 s counts, and fails once x > 0.6 (pydrake's
    counter_fail scenario) or terminates at the third update."""

    mode: str = eqx.field(static=True)

    def __init__(self, mode: str) -> None:
        super().__init__("counter")
        self.mode = mode
        self.declare_continuous_state(1)
        self.declare_discrete_state(1)
        self.declare_periodic_discrete_update_event(0.25, 0.0, self.update)

    def update(self, context, discrete_state):
        n = context.get_discrete_state_vector()[0]
        x = context.get_continuous_state_vector()[0]
        if self.mode == "fail":
            return (n + 1)[None], js.EventStatus.failed_if(x > 0.6, "x too large")
        return (n + 1)[None], js.EventStatus.reached_termination_if(n + 1 >= 3, "three updates")

    def do_calc_time_derivatives(self, context):
        return jnp.ones((1,), context.get_time().dtype)


def test_succeeded_only_when_the_boundary_was_reached(x6):
    # Drake: SimulatorStatus::succeeded() is "reached the boundary time with no surprises"; pydrake
    # returns False after a termination
    c = Counter("terminate")
    sim = js.Simulator(c, c.create_default_context(), js.RungeKutta3Integrator(max_step_size=0.1))
    st = sim.advance_to(2.0)
    assert st.reached_termination() and not st.succeeded()
    assert st.return_time() == x6["counter_terminate"]["return_time"]
    # Drake's FormatMessage, word for word
    assert st.format_message() == (
        "Simulator returned early at time 0.5 because Counter System '::counter' requested termination with "
        'message: "three updates"'
    )
    ok = js.Simulator(c, c.create_default_context(), js.RungeKutta3Integrator(max_step_size=0.1)).advance_to(0.3)
    assert ok.succeeded() and ok.format_message() == "Simulator successfully reached the boundary time (0.3)."
    # the same from a plain simulate's result
    r = js.simulate(c, c.create_default_context(), 2.0)
    assert not r.simulator_status().succeeded() and r.simulator_status().reached_termination()


def test_monitor_termination_is_not_success():
    s = js.examples.SpringMassDamper(has_input=False)
    sim = js.Simulator(s, s.create_default_context().with_continuous_state(jnp.array([1.0, 0.0])))
    sim.set_monitor(lambda c: js.EventStatus.reached_termination_if(c.get_time() >= 0.35, "late"))
    st = sim.advance_to(1.0)
    assert st.reached_termination() and not st.succeeded()
    assert 'requested termination with message: "late"' in st.format_message()


@pytest.mark.parametrize(
    "integ", [js.RungeKutta3Integrator(max_step_size=0.1), js.RungeKutta2Integrator(max_step_size=0.05)]
)
def test_a_failure_raised_by_advance_to_says_when_and_keeps_the_context_there(x6, integ):
    # pydrake: "Simulator stopped at time 0.75 because System failed with message: "x too large"";
    # after the throw the context is at 0.75 with the count 3 and Drake's statistics count what ran
    d = x6["counter_fail"]
    c = Counter("fail")
    sim = js.Simulator(c, c.create_default_context(), integ)
    with pytest.raises(
        js.JaxsysError,
        match=r'Simulator stopped at time 0.75 because Counter System \'::counter\' failed with message: "x too large"',
    ):
        sim.advance_to(2.0)
    assert float(sim.get_context().get_time()) == pytest.approx(d["context_time"], abs=1e-12)
    assert float(sim.get_context().get_discrete_state_vector()[0]) == d["count"]
    assert sim.get_num_discrete_updates() == d["num_discrete_updates"]
    assert sim.get_num_steps_taken() > 0


class Forced(js.LeafSystem):
    """Forced publish, discrete and unrestricted events whose handlers fail when x > 1."""

    def __init__(self) -> None:
        super().__init__("forced")
        self.declare_continuous_state(1)
        self.declare_discrete_state(1)
        self.declare_forced_publish_event(
            lambda c: (c.get_continuous_state_vector()[0], js.EventStatus.failed_if(self._big(c), "publish: x > 1"))
        )
        self.declare_forced_discrete_update_event(
            lambda c, ds: (ds.get_vector(0) + 1.0, js.EventStatus.failed_if(self._big(c), "discrete: x > 1"))
        )
        self.declare_forced_unrestricted_update_event(
            lambda c, st: (st, js.EventStatus.failed_if(self._big(c), "unrestricted: x > 1"))
        )

    @staticmethod
    def _big(context):
        return context.get_continuous_state_vector()[0] > 1.0

    def do_calc_time_derivatives(self, context):
        return jnp.zeros((1,), context.get_time().dtype)


def test_forced_events_throw_on_failure():
    # Drake: ForcedPublish / CalcForcedDiscreteVariableUpdate / CalcForcedUnrestrictedUpdate call
    # ThrowOnFailure: "<Function>(): An event handler in <Type> system '<path>' failed with message: "...".
    s = Forced()
    good = s.create_default_context().with_continuous_state(jnp.array([0.5]))
    bad = good.with_continuous_state(jnp.array([2.0]))
    assert float(s.force_publish(good)[0]) == 0.5
    assert float(s.calc_forced_discrete_variable_update(good).get_vector(0)[0]) == 1.0
    s.calc_forced_unrestricted_update(good)
    who = "An event handler in Forced system '::forced' failed with message"
    with pytest.raises(js.JaxsysError, match=rf'ForcedPublish\(\): {who}: "publish: x > 1"\.'):
        s.force_publish(bad)
    with pytest.raises(js.JaxsysError, match=rf'CalcForcedDiscreteVariableUpdate\(\): {who}: "discrete: x > 1"'):
        s.calc_forced_discrete_variable_update(bad)
    with pytest.raises(js.JaxsysError, match=rf'CalcForcedUnrestrictedUpdate\(\): {who}: "unrestricted: x > 1"'):
        s.calc_forced_unrestricted_update(bad)
    # under jit the check runs with the compiled function
    f = jax.jit(lambda c: s.calc_forced_discrete_variable_update(c).get_vector(0))
    np.testing.assert_allclose(f(good), [1.0])
    with pytest.raises(Exception, match="discrete: x > 1"):
        jax.block_until_ready(f(bad))


class Timed(js.LeafSystem):
    """x' = 1; a timed discrete update whose next time the test chooses."""

    when: str = eqx.field(static=True)
    tick: js.Event = eqx.field(static=True)

    def __init__(self, when: str) -> None:
        super().__init__("timer")
        self.when = when
        self.declare_continuous_state(1)
        self.declare_discrete_state(1)
        self.tick = self.declare_timed_discrete_update_event(lambda c, ds: ds.get_vector(0) + 1.0, name="tick")

    def do_calc_next_update_time(self, context):
        if self.when == "nan":
            return jnp.nan, (self.tick,)
        return context.get_time() + 0.5, ()  # a finite time and no event

    def do_calc_time_derivatives(self, context):
        return jnp.ones((1,), context.get_time().dtype)


@pytest.mark.parametrize("when", ["nan", "finite without events"])
def test_bad_next_update_time_is_an_error_naming_the_system(when):
    # Drake's System::CalcNextUpdateTime throws for both, naming the system. Before: a NaN time gave
    # advance_to(1) "success" at time NaN; a finite time with no events looped to MAX_STEPS.
    s = Timed("nan" if when == "nan" else "empty")
    ctx = s.create_default_context()
    pattern = (
        r"CalcNextUpdateTime\(\): Timed system '::timer' overrode do_calc_next_update_time\(\) but it returned "
        + ("NaN" if when == "nan" else "a finite update time with no events")
    )
    with pytest.raises(js.JaxsysError, match=pattern):
        s.calc_next_update_time(ctx)
    with pytest.raises(Exception, match=pattern):
        js.simulate(s, ctx, 1.0)
    with pytest.raises(Exception, match=pattern):
        js.Simulator(s, ctx).advance_to(1.0)


def test_small_api_differences_a_port_trips_on():
    s = js.examples.SpringMassDamper(has_input=False)
    # Drake's SetAccuracy accepts 1 (its witness-isolation test starts there)
    assert s.create_default_context().with_accuracy(1.0).get_accuracy() == 1.0
    with pytest.raises(js.JaxsysError, match=r"\(0, 1\]"):
        s.create_default_context().with_accuracy(1.5)
    # the realtime rate is NaN before the Simulator is initialized (Drake's start time is unset)
    sim = js.Simulator(s)
    assert np.isnan(sim.get_actual_realtime_rate())
    sim.initialize()
    assert sim.get_actual_realtime_rate() == 0.0  # (no simulated time has passed)
    # the statistics getters read 0 while nothing was counted
    assert (sim.get_num_publishes(), sim.get_num_discrete_updates(), sim.get_num_unrestricted_updates()) == (0, 0, 0)
    # methods without an error estimate refuse an accuracy or an initial step request, as Drake's do
    for cls in (js.ExplicitEulerIntegrator, js.SemiExplicitEulerIntegrator, js.RungeKutta2Integrator):
        with pytest.raises(js.JaxsysError, match="no error estimate"):
            cls(max_step_size=0.1, target_accuracy=1e-3)
        with pytest.raises(js.JaxsysError, match="initial_step_size_target"):
            cls(max_step_size=0.1, initial_step_size_target=0.01)


class RightNow(js.LeafSystem):
    """Drake's MissedPublishEventIssue13296 RightNowEventSystem: a timed publish "right now" (at the
    context's time) while a message is waiting, else none."""

    waiting: bool = eqx.field(static=True)
    now: js.Event = eqx.field(static=True)

    def __init__(self, waiting: bool) -> None:
        super().__init__("right_now")
        self.waiting = waiting
        self.now = self.declare_timed_publish_event(lambda c: c.get_time(), name="right_now")

    def do_calc_next_update_time(self, context):
        t = context.get_time()
        return (t, (self.now,)) if self.waiting else (jnp.inf, ())


class PeriodicPublish(js.LeafSystem):
    def __init__(self) -> None:
        super().__init__("periodic")
        self.declare_periodic_publish_event(0.25, 0.0, lambda c: c.get_time(), name="periodic")


@pytest.mark.parametrize("waiting,t0,expected", [(False, 0.0, (0, 1)), (True, -1.0, (1, 0)), (True, 0.0, (1, 1))])
def test_initialize_dispatches_right_now_timed_publishes(waiting, t0, expected):
    # Drake's SimulatorTest.MissedPublishEventIssue13296: Initialize publishes the "right now" event
    # with the periodic one due at the start: (right now, periodic) = (0, 1) at t = 0 without a message,
    # (1, 0) at t = -1 and (1, 1) at t = 0 with one.
    b = js.DiagramBuilder()
    b.add_system(RightNow(waiting))
    b.add_system(PeriodicPublish())
    d = b.build()
    sim = js.Simulator(d, d.create_default_context().with_time(t0))
    sim.initialize()
    counts = tuple(len(sim.get_publish_log(name).sample_times()) for name in ("right_now", "periodic"))
    assert counts == expected


def test_right_now_schedule_publishes_once_through_simulate_and_simulator():
    # a schedule that starts at the start time: its publish at t0 belongs to Initialize, its update to
    # the first step's start (then the schedule moves on): one publish at 0, on both paths
    b = js.DiagramBuilder()
    b.add_system(Ticker())
    d = b.build()
    ctx = d.create_default_context()
    r = js.simulate(d, ctx, 1.0, js.RungeKutta3Integrator(max_step_size=0.1))
    np.testing.assert_allclose(r.get_publish_log("tick_pub").sample_times(), [0.0, 0.3, 0.6, 0.9], atol=1e-12)
    sim = js.Simulator(d, ctx, js.RungeKutta3Integrator(max_step_size=0.1))
    sim.advance_to(1.0)
    np.testing.assert_allclose(sim.get_publish_log("tick_pub").sample_times(), [0.0, 0.3, 0.6, 0.9], atol=1e-12)


class Ticker(js.LeafSystem):
    """A timed update every 0.3 s from 0 (its next time in discrete state) and a timed publish with it."""

    tick: js.Event = eqx.field(static=True)
    tick_pub: js.Event = eqx.field(static=True)

    def __init__(self) -> None:
        super().__init__("ticker")
        self.declare_continuous_state(1)
        self.declare_discrete_state(1)
        self.tick = self.declare_timed_discrete_update_event(lambda c, ds: ds.get_vector(0) + 0.3, name="tick")
        self.tick_pub = self.declare_timed_publish_event(lambda c: c.get_time(), name="tick_pub")

    def do_calc_next_update_time(self, context):
        return context.get_discrete_state_vector()[0], (self.tick, self.tick_pub)

    def do_calc_time_derivatives(self, context):
        return jnp.ones((1,), context.get_time().dtype)


class TwoUpdates(js.LeafSystem):
    """x' = 1; two discrete updates every 0.25 s: 0 counts into group 0 and fails once x > 0.6, 1 counts
    into group 1 (it never fails)."""

    def __init__(self, name: str = "two") -> None:
        super().__init__(name)
        self.declare_continuous_state(1)
        self.declare_discrete_state(1)
        self.declare_discrete_state(1)
        self.declare_periodic_discrete_update_event(0.25, 0.0, self.first)
        self.declare_periodic_discrete_update_event(0.25, 0.0, self.second)

    def first(self, context, ds):
        x = context.get_continuous_state_vector()[0]
        return ds.with_vector(0, ds.get_vector(0) + 1.0), js.EventStatus.failed_if(x > 0.6, "first: x > 0.6")

    def second(self, context, ds):
        return ds.with_vector(1, ds.get_vector(1) + 1.0)

    def do_calc_time_derivatives(self, context):
        return jnp.ones((1,), context.get_time().dtype)


class CountOnly(js.LeafSystem):
    """A second leaf of the diagram: one discrete update every 0.25 s counting."""

    def __init__(self) -> None:
        super().__init__("count")
        self.declare_discrete_state(1)
        self.declare_periodic_discrete_update_event(0.25, 0.0, lambda c, ds: ds.get_vector(0) + 1.0)


def test_updates_stop_at_the_first_failure():
    # Drake's update dispatchers stop at the first failed handler, in a leaf (events in order) and in a
    # diagram (subsystems in order): at t = 0.75 the first update fails, so neither the second update of
    # the same leaf nor the update of the next leaf runs there. Counts: updates at 0, 0.25, 0.5 only.
    b = js.DiagramBuilder()
    two = b.add_system(TwoUpdates())
    count = b.add_system(CountOnly())
    d = b.build()
    r = js.simulate(d, d.create_default_context(), 2.0, js.RungeKutta3Integrator(max_step_size=0.1), throw=False)
    assert int(r.status) == js.Status.EVENT_FAILED.code
    assert float(r.context.get_time()) == pytest.approx(0.75)
    two_ctx = d.get_subsystem_context(r.context, two)
    np.testing.assert_allclose([two_ctx.get_discrete_state(0)[0], two_ctx.get_discrete_state(1)[0]], [3.0, 3.0])
    np.testing.assert_allclose(d.get_subsystem_context(r.context, count).get_discrete_state(0), [3.0])


class InitStops(js.LeafSystem):
    """An initialization publish that reaches termination (or fails), and a per-step publish."""

    mode: str = eqx.field(static=True)

    def __init__(self, mode: str) -> None:
        super().__init__("init")
        self.mode = mode
        self.declare_continuous_state(1)
        make = js.EventStatus.reached_termination if mode == "terminate" else js.EventStatus.failed
        self.declare_initialization_publish_event(lambda c: make(message="init says stop"))
        self.declare_per_step_publish_event(lambda c: c.get_time(), name="per_step")

    def do_calc_time_derivatives(self, context):
        return jnp.ones((1,), context.get_time().dtype)


@pytest.mark.parametrize("mode", ["terminate", "fail"])
def test_initialize_runs_every_publish_whatever_an_initialization_publish_returns(mode):
    # Drake's Initialize merges the initialization, per-step and timed publishes into one dispatch:
    # all handlers run, and the status (termination, or the failure it throws) comes after. Before:
    # the per-step publish was skipped.
    s = InitStops(mode)
    sim = js.Simulator(s)
    if mode == "terminate":
        st = sim.initialize()
        assert st.reached_termination() and st.message() == "init says stop"
    else:
        with pytest.raises(js.JaxsysError, match="init says stop"):
            sim.initialize()
    np.testing.assert_allclose(sim.get_publish_log("per_step").sample_times(), [0.0])


def test_an_empty_simulator_says_so():
    # Drake: reset_context(nullptr) leaves the Simulator without a context; has_context() is false and
    # Initialize throws "Context has not been set"
    s = js.examples.SpringMassDamper(has_input=False)
    sim = js.Simulator(s)
    assert sim.has_context()
    sim.reset_context(None)
    assert not sim.has_context()
    for call in (sim.initialize, lambda: sim.advance_to(1.0), sim.get_context):
        with pytest.raises(js.JaxsysError, match="Context has not been set"):
            call()
    sim.reset_context(s.create_default_context().with_continuous_state(jnp.array([1.0, 0.0])))
    assert sim.advance_to(0.5).succeeded()


def test_current_witness_time_isolation_is_drakes():
    # Drake's GetCurrentWitnessTimeIsolation: 0.01 * accuracy * (1 s with error control, the maximum step
    # in fixed-step mode); jaxsys: None without an accuracy (it then isolates relative to each step)
    s = js.examples.BouncingBall()
    ctx = s.create_default_context()
    ec = js.Simulator(s, ctx.with_accuracy(1e-3), js.RungeKutta3Integrator(max_step_size=0.1))
    assert ec.get_current_witness_time_isolation() == pytest.approx(1e-5)
    fixed = js.Simulator(s, ctx.with_accuracy(1e-3), js.RungeKutta4Integrator(max_step_size=0.1))
    assert fixed.get_current_witness_time_isolation() == pytest.approx(1e-6)
    assert js.Simulator(s, ctx).get_current_witness_time_isolation() is None
