"""Event status, termination and failure, monitors, custom event times and mode-dependent witnesses
(issue #14), against Drake 1.58's output for the same scenarios (tests/data/X6_event_status.json,
made by tests/data/drake_event_status.py) and analytic values."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import load_drake

import jaxsys as js


G = 9.81


@pytest.fixture(scope="module")
def x6():
    return load_drake("X6_event_status")


class Ball(js.LeafSystem):
    """Falling ball (height, velocity); the ground witness's event reaches termination."""

    def __init__(self, kind="unrestricted"):
        super().__init__()
        self.declare_continuous_state(1, 1, 0)
        if kind == "unrestricted":
            event = js.UnrestrictedUpdateEvent(
                lambda c, s: (s, js.EventStatus.reached_termination(message="hit ground"))
            )
        else:
            event = js.PublishEvent(lambda c: js.EventStatus.reached_termination(message="hit ground"))
        self.declare_witness_function("ground", "positive_then_non_positive", self.height, event)

    def height(self, context):
        return context.get_continuous_state_vector()[0]

    def do_calc_time_derivatives(self, context):
        return jnp.stack([context.get_continuous_state_vector()[1], jnp.asarray(-G, context.get_time().dtype)])


def drop(system, h, dtype=jnp.float64, **kw):
    ctx = system.create_default_context(dtype).with_continuous_state(jnp.array([h, 0.0], dtype))
    integ = js.RungeKutta3Integrator(max_step_size=0.1, target_accuracy=1e-8 if dtype == jnp.float64 else 1e-5)
    return js.simulate(system, ctx, 2.0, integ, **kw)


@pytest.mark.parametrize("kind", ["unrestricted", "publish"])
def test_terminating_witness_stops_at_the_crossing_like_drake(x6, kind):
    d = x6["ball"]
    ball = Ball(kind)
    r = drop(ball, 1.0, save_at=jnp.array([0.0, 0.2, 0.4, 0.5, 1.0]))
    t = float(r.context.get_time())
    # Drake isolates to 0.01 * accuracy = 1e-10 s; jaxsys to ~1e-12 of the step
    assert abs(t - d["analytic_time"]) < 1e-11
    assert abs(t - d["return_time"]) < 1e-10
    assert bool(r.reached_termination()) and int(r.status) == 0
    st = r.simulator_status()
    assert st.reason() is js.SimulatorStatusReason.REACHED_TERMINATION_CONDITION
    assert st.message() == d["message"] == "hit ground"
    assert "Ball" in st.system() and st.return_time() == t and st.boundary_time() == 2.0
    np.testing.assert_allclose(r.context.get_continuous_state_vector(), d["state"], atol=1e-9)
    # save times after the stop were not reached: NaN; before it: the analytic height
    ys = np.asarray(r.ys)
    np.testing.assert_allclose(ys[:3, 0], 1.0 - 0.5 * G * np.array([0.0, 0.2, 0.4]) ** 2, atol=1e-9)
    assert np.all(np.isnan(ys[3:]))


def test_termination_time_is_differentiable_float64_and_float32():
    ball = Ball()
    grad64 = jax.grad(lambda h: drop(ball, h).context.get_time())(1.0)
    assert abs(float(grad64) - 1.0 / np.sqrt(2 * G)) < 1e-7  # d/dh sqrt(2h/g)
    t32 = jax.jit(lambda h: drop(ball, h, jnp.float32).context.get_time())
    g32 = jax.grad(lambda h: drop(ball, h, jnp.float32).context.get_time())(jnp.float32(1.0))
    assert abs(float(t32(jnp.float32(1.0))) - np.sqrt(2 / G)) < 2e-5
    assert abs(float(g32) - 1.0 / np.sqrt(2 * G)) < 1e-3
    # under vmap each member stops at its own time
    hs = jnp.array([0.5, 1.0, 2.0])
    times = jax.vmap(lambda h: drop(ball, h).context.get_time())(hs)
    np.testing.assert_allclose(times, np.sqrt(2 * np.asarray(hs) / G), atol=1e-9)


class Counter(js.LeafSystem):
    """x' = 1; a periodic discrete update (0.25 s) counts, and fails, terminates or does nothing as
    the Drake scenario of the same name (tests/data/drake_event_status.py)."""

    mode: str = eqx.field(static=True)

    def __init__(self, mode):
        super().__init__()
        self.mode = mode
        self.declare_continuous_state(1)
        self.declare_discrete_state(1)
        self.declare_periodic_discrete_update_event(0.25, 0.0, self.update)

    def update(self, context, discrete_state):
        n = context.get_discrete_state_vector()[0]
        x = context.get_continuous_state_vector()[0]
        new = (n + 1)[None]
        if self.mode == "fail":
            return new, js.EventStatus.failed_if(x > 0.6, "x too large")
        if self.mode == "terminate":
            return new, js.EventStatus.reached_termination_if(n + 1 >= 3, "three updates")
        odd = (n.astype(jnp.int32) % 2 == 1) & (context.get_time() > 0.3)
        return new, js.EventStatus.select(odd, js.EventStatus.did_nothing(), js.EventStatus.succeeded())

    def do_calc_time_derivatives(self, context):
        return jnp.ones((1,), context.get_time().dtype)


# error-controlled (the while loop) and fixed steps on the event grid (the scan)
INTEGRATORS = [js.RungeKutta3Integrator(max_step_size=0.1), js.RungeKutta2Integrator(max_step_size=0.05)]


@pytest.mark.parametrize("integ", INTEGRATORS, ids=["error_control", "fixed_scan"])
def test_failed_update_stops_the_run_with_drakes_state(x6, integ):
    d = x6["counter_fail"]
    c = Counter("fail")
    ctx = c.create_default_context()
    r = js.simulate(c, ctx, 2.0, integ, throw=False)
    assert int(r.status) == js.Status.EVENT_FAILED.code
    assert float(r.context.get_time()) == pytest.approx(d["context_time"], abs=1e-12)
    # the failed update is not applied (Drake: count 3 after the updates at 0, 0.25, 0.5)
    assert float(r.context.get_discrete_state_vector()[0]) == d["count"] == 3
    assert float(r.context.get_continuous_state_vector()[0]) == pytest.approx(d["x"], abs=1e-9)
    assert int(r.simulator_stats.num_discrete_updates) == d["num_discrete_updates"]
    st = r.simulator_status()
    assert st.reason() is js.SimulatorStatusReason.EVENT_HANDLER_FAILED and not st.succeeded()
    assert st.message() == "x too large" and "Counter" in st.system()
    assert "x too large" in r.message() and "failed" in d["error"]
    with pytest.raises(Exception, match=r"System .*Counter.* failed with message 'x too large'"):
        js.simulate(c, ctx, 2.0, integ)
    sim = js.Simulator(c, ctx, integ)
    with pytest.raises(Exception, match="x too large"):
        sim.advance_to(2.0)


@pytest.mark.parametrize("integ", INTEGRATORS, ids=["error_control", "fixed_scan"])
def test_terminating_update_keeps_its_result_and_takes_no_step(x6, integ):
    d = x6["counter_terminate"]
    c = Counter("terminate")
    r = js.simulate(c, c.create_default_context(), 2.0, integ, save_at=jnp.array([0.25, 0.5, 0.75]))
    assert bool(r.reached_termination())
    assert float(r.context.get_time()) == d["return_time"] == 0.5
    assert float(r.context.get_discrete_state_vector()[0]) == d["count"] == 3
    assert float(r.context.get_continuous_state_vector()[0]) == pytest.approx(d["x"], abs=1e-12)
    assert int(r.simulator_stats.num_discrete_updates) == d["num_discrete_updates"]
    assert r.simulator_status().message() == d["message"]
    np.testing.assert_allclose(np.asarray(r.ys)[:2, 0], [0.25, 0.5], atol=1e-12)
    assert np.isnan(np.asarray(r.ys)[2, 0])
    # the Simulator returns the same status and goes on from there on the next advance_to
    sim = js.Simulator(c, c.create_default_context(), integ)
    st = sim.advance_to(2.0)
    assert st.reached_termination() and st.return_time() == 0.5 and st.boundary_time() == 2.0
    assert "three updates" in st.format_message()
    assert sim.advance_to(2.0).reached_termination()  # every later update terminates again (n >= 3)


def test_did_nothing_update_is_neither_applied_nor_counted(x6):
    d = x6["counter_did_nothing"]
    c = Counter("did_nothing")
    r = js.simulate(c, c.create_default_context(), 2.0, INTEGRATORS[0])
    assert float(r.context.get_discrete_state_vector()[0]) == d["count"] == 3
    assert int(r.simulator_stats.num_discrete_updates) == d["num_discrete_updates"] == 3
    assert r.simulator_status().reason() is js.SimulatorStatusReason.REACHED_BOUNDARY_TIME


class Clock(js.LeafSystem):
    """x' = 1 with an initialization, a per-step and a periodic (0.25 s) publish."""

    def __init__(self):
        super().__init__()
        self.declare_continuous_state(1)
        self.declare_initialization_publish_event(lambda c: c.get_time())
        self.declare_per_step_publish_event(lambda c: c.get_time(), name="per_step")
        self.declare_periodic_publish_event(0.25, 0.0, lambda c: c.get_time())

    def do_calc_time_derivatives(self, context):
        return jnp.ones((1,), context.get_time().dtype)


def x_above(threshold):
    def monitor(context):
        return js.EventStatus.reached_termination_if(
            context.get_continuous_state_vector()[0] > threshold, "x above 0.25"
        )

    return monitor


def test_monitor_terminates_after_the_step_like_drake(x6):
    d = x6["monitor_and_counts"]
    clock = Clock()
    fixed = js.RungeKutta2Integrator(max_step_size=0.1)
    r = js.simulate(clock, clock.create_default_context(), 1.0, fixed, monitor=x_above(0.25))
    assert float(r.context.get_time()) == pytest.approx(d["return_time"], abs=1e-12)  # 0.35: steps .1 .2 .25 .35
    assert int(r.stats.num_steps_taken) == d["num_steps_taken"] == 4
    assert int(r.simulator_stats.num_publishes) == d["num_publishes"] == 5  # 1 at initialization + 4 steps
    assert r.simulator_status().message() == d["message"]
    np.testing.assert_allclose(r.get_publish_log("per_step").sample_times(), [0.0] + d["monitor_times"], atol=1e-12)
    # the Simulator: Initialize counts one publish (Drake handles its publishes together), then the monitor
    sim = js.Simulator(clock, clock.create_default_context(), fixed)
    assert sim.initialize().reason() is js.SimulatorStatusReason.REACHED_BOUNDARY_TIME
    assert sim.get_statistics()["num_publishes"] == d["after_init"]["num_publishes"] == 1
    sim.set_monitor(x_above(0.25))
    st = sim.advance_to(1.0)
    assert st.reached_termination() and st.return_time() == pytest.approx(0.35, abs=1e-12)
    assert sim.get_statistics()["num_publishes"] == d["num_publishes"]
    assert sim.get_monitor() is not None
    sim.clear_monitor()
    assert sim.get_monitor() is None


def test_monitor_failure_and_bad_monitor():
    clock = Clock()
    ctx = clock.create_default_context()

    def fails(context):
        return js.EventStatus.failed_if(context.get_time() > 0.5, "too late")

    r = js.simulate(clock, ctx, 1.0, js.RungeKutta3Integrator(max_step_size=0.1), monitor=fails, throw=False)
    assert int(r.status) == js.Status.EVENT_FAILED.code and r.simulator_status().message() == "too late"
    assert 0.5 < float(r.context.get_time()) <= 0.6 + 1e-12
    assert r.simulator_status().system() == "monitor"
    with pytest.raises(js.JaxsysError, match="monitor must return None or a jaxsys.EventStatus"):
        js.simulate(clock, ctx, 1.0, monitor=lambda c: 1.0)
    with pytest.raises(js.JaxsysError, match="monitor must be a function"):
        js.simulate(clock, ctx, 1.0, monitor=3)


class Latch(js.LeafSystem):
    """An initialization update that reaches termination: nothing after it runs."""

    def __init__(self):
        super().__init__()
        self.declare_continuous_state(1)
        self.declare_discrete_state(1)
        self.declare_initialization_discrete_update_event(
            lambda c, ds: (jnp.ones(1), js.EventStatus.reached_termination(message="done at start"))
        )
        self.declare_per_step_publish_event(lambda c: c.get_time(), name="per_step")

    def do_calc_time_derivatives(self, context):
        return jnp.ones((1,), context.get_time().dtype)


def test_termination_at_initialization_runs_nothing():
    latch = Latch()
    r = js.simulate(latch, latch.create_default_context(), 1.0)
    assert bool(r.reached_termination()) and float(r.context.get_time()) == 0.0
    assert float(r.context.get_discrete_state_vector()[0]) == 1.0  # the terminating update is kept
    assert int(r.stats.num_steps_taken) == 0 and int(r.get_publish_log("per_step").count) == 0
    assert js.Simulator(latch).initialize().reached_termination()


class Timer(js.LeafSystem):
    """Schedules its own next event: discrete state [next time, count]; each event sets the next one
    0.1 (count + 2) s later (a state-dependent, non-periodic schedule)."""

    tick: js.Event = eqx.field(static=True)
    tick_pub: js.Event = eqx.field(static=True)

    def __init__(self):
        super().__init__()
        self.declare_continuous_state(1)
        self.declare_discrete_state(2)
        self.tick = self.declare_timed_discrete_update_event(self.on_time, name="tick")
        self.tick_pub = self.declare_timed_publish_event(lambda c: c.get_continuous_state_vector()[0], name="tick_pub")

    def on_time(self, context, ds):
        n = ds.get_vector(0)[1]
        return jnp.stack([context.get_time() + 0.1 * (n + 2), n + 1])

    def do_calc_next_update_time(self, context):
        return context.get_discrete_state_vector()[0], (self.tick, self.tick_pub)

    def do_calc_time_derivatives(self, context):
        return jnp.ones((1,), context.get_time().dtype)


@pytest.mark.parametrize("integ", INTEGRATORS, ids=["error_control", "fixed"])
def test_do_calc_next_update_time_schedules_state_dependent_events(integ):
    timer = Timer()
    ctx = timer.create_default_context().with_discrete_state(0, jnp.array([0.25, 0.0]))
    r = js.simulate(timer, ctx, 2.0, integ)
    expected = [0.25, 0.45, 0.75, 1.15, 1.65]  # t_{k+1} = t_k + 0.1 (k + 2)
    log = r.get_publish_log("tick_pub")
    np.testing.assert_allclose(log.sample_times(), expected, atol=1e-12)
    np.testing.assert_allclose(log.data(), expected, atol=1e-12)  # x = t, published at each event time
    np.testing.assert_allclose(r.context.get_discrete_state_vector(), [2.25, 5.0], atol=1e-12)
    assert int(r.simulator_stats.num_discrete_updates) == 5
    # "right now" events: a schedule that starts at the current time
    ctx0 = ctx.with_discrete_state(0, jnp.array([0.0, 0.0]))
    r0 = js.simulate(timer, ctx0, 1.0, integ)
    np.testing.assert_allclose(r0.get_publish_log("tick_pub").sample_times(), [0.0, 0.2, 0.5, 0.9], atol=1e-12)
    # continued by a Simulator: an update due at a boundary is pending until the next advance_to
    sim = js.Simulator(timer, ctx, integ)
    sim.advance_to(0.45)
    np.testing.assert_allclose(sim.get_context().get_discrete_state_vector(), [0.45, 1.0], atol=1e-12)
    sim.advance_to(2.0)
    np.testing.assert_allclose(sim.get_context().get_discrete_state_vector(), [2.25, 5.0], atol=1e-12)


class BadTimer(Timer):
    def do_calc_next_update_time(self, context):
        return 1.0, ("tick",)


def test_do_calc_next_update_time_bad_return():
    timer = BadTimer()
    with pytest.raises(js.JaxsysError, match="must be this system's timed events"):
        js.simulate(timer, timer.create_default_context(), 1.0)


class Modes(js.LeafSystem):
    """x' = +1 in mode 0, -1 in mode 1; 'top' (active in mode 0) and 'bottom' (mode 1) switch modes;
    'middle' (x - 0.5 either way, active in mode 0 only) counts its crossings (Drake's scenario)."""

    top: js.WitnessFunction = eqx.field(static=True)
    bottom: js.WitnessFunction = eqx.field(static=True)
    middle: js.WitnessFunction = eqx.field(static=True)

    def __init__(self):
        super().__init__()
        self.declare_continuous_state(1)
        self.declare_discrete_state(2)  # [mode, middle crossings]
        x = lambda c: c.get_continuous_state_vector()[0]  # noqa: E731
        self.top = self.make_witness_function(
            "top", "positive_then_non_positive", lambda c: 1.0 - x(c), js.UnrestrictedUpdateEvent(self.set_mode(1))
        )
        self.bottom = self.make_witness_function(
            "bottom", "positive_then_non_positive", x, js.UnrestrictedUpdateEvent(self.set_mode(0))
        )
        self.middle = self.make_witness_function(
            "middle", "crosses_zero", lambda c: x(c) - 0.5, js.UnrestrictedUpdateEvent(self.count)
        )

    @staticmethod
    def set_mode(mode):
        def handler(context, state):
            d = state.discrete_state.get_vector(0)
            return state.with_discrete_state(0, d.at[0].set(mode))

        return handler

    @staticmethod
    def count(context, state):
        d = state.discrete_state.get_vector(0)
        return state.with_discrete_state(0, d.at[1].add(1))

    def do_get_witness_functions(self, context):
        mode0 = context.get_discrete_state_vector()[0] == 0
        return [self.top.active_if(mode0), self.middle.active_if(mode0), self.bottom.active_if(~mode0)]

    def do_calc_time_derivatives(self, context):
        mode = context.get_discrete_state_vector()[0]
        return jnp.where(mode == 0, 1.0, -1.0)[None]


def test_mode_dependent_witnesses_match_drake(x6):
    d = x6["modes"]
    m = Modes()
    ctx = m.create_default_context()
    r = js.simulate(m, ctx, 3.3, js.RungeKutta3Integrator(max_step_size=0.1, target_accuracy=1e-8))
    assert float(r.context.get_continuous_state_vector()[0]) == pytest.approx(d["x"], abs=1e-8)
    mode, crossings = np.asarray(r.context.get_discrete_state_vector())
    assert (mode, crossings) == (d["mode"], d["middle_crossings"]) == (1.0, 2.0)  # 'middle' not seen going down
    assert int(r.simulator_stats.num_unrestricted_updates) == d["num_unrestricted_updates"] == 5
    # outside the loop the active subset is listed, as Drake's GetWitnessFunctions
    names = [w.description for w in m.get_witness_functions(ctx)]
    assert names == ["top", "middle"]


class PythonBranching(Modes):
    def do_get_witness_functions(self, context):
        return [self.top] if context.get_discrete_state_vector()[0] == 0 else [self.bottom]


def test_witness_subset_chosen_by_python_if_is_an_error():
    m = PythonBranching()
    with pytest.raises(js.JaxsysError, match="active_if"):
        js.simulate(m, m.create_default_context(), 1.0)


def test_event_status_values_and_combination():
    s = js.EventStatus
    a = s.reached_termination("sys", "stop")
    assert bool(a.reached_termination()) and not bool(a.failed()) and a.message() == "stop" and a.system() == "sys"
    worst = s.succeeded().keep_more_severe(a).keep_more_severe(s.reached_termination(message="later"))
    assert worst.message() == "stop"  # first worst
    assert worst.keep_more_severe(s.failed(message="boom")).message() == "boom"
    sel = jax.jit(lambda c: s.failed_if(c, "bad"))(jnp.array(False))
    assert bool(sel.succeeded())
    with pytest.raises(TypeError, match="must be a str"):
        s.failed(None, 3)


class HalfPlusOne(js.LeafSystem):
    """Drake's X5 system: x[n+1] = 0.5 x[n] + 1, period 0.1 from 0."""

    def __init__(self):
        super().__init__()
        self.declare_discrete_state(1)
        self.declare_periodic_discrete_update_event(0.1, 0.0, lambda c, ds: 0.5 * c.get_discrete_state(0) + 1.0)


@pytest.mark.parametrize("integ", [js.RungeKutta3Integrator(), js.RungeKutta2Integrator(max_step_size=0.1)])
def test_save_at_start_time_sees_the_updates_due_then(drake, integ):
    # Drake: AdvanceTo(0) performs the update at 0 (x = 1), AdvanceTo(0.1 k) leaves the update at
    # 0.1 k pending; sampling after each AdvanceTo gives [1.0] + the X5 C++ samples
    d = drake("X5")
    s = HalfPlusOne()
    ts = jnp.round(jnp.arange(11) * 0.1, 12)
    r = js.simulate(s, s.create_default_context(), 1.0, integ, save_at=ts, record=lambda c: c.get_discrete_state(0))
    expected = [1.0] + [x for _, x in d["cpp_LinearSystem_discrete_t_x_after_AdvanceTo_0p1k"]]
    np.testing.assert_array_equal(np.asarray(r.ys)[:, 0], expected)
    assert int(r.simulator_stats.num_discrete_updates) == 10  # (the one at 1.0 is pending)


def test_timed_events_and_mode_dependent_witnesses_in_float32_and_under_vmap():
    # custom event times per member (vmap) and in float32 (times within float32's resolution)
    timer = Timer()
    starts = jnp.array([0.25, 0.4], jnp.float32)

    def final_count(t_first):
        ctx = timer.create_default_context(jnp.float32).with_discrete_state(0, jnp.stack([t_first, 0.0]))
        return js.simulate(
            timer, ctx, 2.0, js.RungeKutta2Integrator(max_step_size=0.05)
        ).context.get_discrete_state_vector()

    out = np.asarray(jax.vmap(final_count)(starts))
    # from 0.25: 0.25, 0.45, 0.75, 1.15, 1.65 (5 events); from 0.4: 0.4, 0.6, 0.9, 1.3, 1.8 (5 events)
    np.testing.assert_allclose(out[:, 1], [5.0, 5.0])
    np.testing.assert_allclose(out[:, 0], [2.25, 2.4], atol=1e-5)
    # mode-dependent witnesses in float32, batched over start positions
    m = Modes()

    def crossings(x0):
        ctx = m.create_default_context(jnp.float32).with_continuous_state(jnp.stack([x0]))
        r = js.simulate(m, ctx, 3.3, js.RungeKutta3Integrator(max_step_size=0.1, target_accuracy=1e-5))
        return r.context.get_discrete_state_vector()

    modes = np.asarray(jax.vmap(crossings)(jnp.array([0.0, 0.6], jnp.float32)))
    # from 0: up through 0.5 at 0.5 and 2.5 (counted), down at 1.5 (not: inactive in mode 1)
    # from 0.6: top at 0.4, bottom at 1.4, middle upward at 1.9 (counted), top again at 2.4: mode 1
    np.testing.assert_allclose(modes, [[1.0, 2.0], [1.0, 1.0]])
