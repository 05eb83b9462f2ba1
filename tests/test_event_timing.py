"""Events on time in every dtype (issue #12): every integrator x {fixed step, error control} x
{float32, float64}; event times against closed forms, update counts exact.

Three probes, each compiled once per configuration:

* ``Sampled``: a periodic discrete update (period 0.05 s) samples u = -y of y' = u. Between updates
  y' is constant, so every integrator is exact: y(1) = 0.95**20, exactly 20 updates in [0, 1) (the
  one due at t = 1 stays pending, as in Drake), and the last update time is 0.95.
* ``Clock``: x' = 1 (every integrator exact, x = t) with three witnesses: a one-time crossing at
  x = c of one of four shapes (linear, cubic, exponential, tanh: regula falsi's hard cases among
  them, and c from 1e-12 to 0.5, so the witness starts a step a hair from zero), an oscillating
  witness sin(2 pi x / 0.7) that crosses every 0.35 s (so several crossings can fall in one step),
  and a witness crossing exactly at t_final whose update must stay pending.
* a bouncing ball with a second, publish-only witness on its height (in float32 the landing margin
  used to be below the time's resolution and the publish repeated ~20,000 times).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from models import ADAPTIVE_INTEGRATORS as ADAPTIVE, FIXED_STEP_INTEGRATORS as FIXED

import jaxsys as js
from jaxsys.analysis.witness_isolation import ISOLATION_ULPS
from jaxsys.examples import BouncingBall


CONFIGS = [(cls, True) for cls in FIXED] + [(cls, False) for cls in ADAPTIVE]
DTYPES = [jnp.float32, jnp.float64]


def make_integrator(cls, fixed, dtype, h):
    """``cls`` in fixed-step mode with step ``h``, or error-controlled with maximum step ``h``."""
    if fixed:
        return cls(max_step_size=h, fixed_step_mode=True)
    return cls(max_step_size=h, target_accuracy=1e-4 if dtype == jnp.float32 else 1e-7)


def ulp(dtype, t=1.0):
    return float(jnp.finfo(dtype).eps) * max(1.0, abs(t))


PARAMS = [
    pytest.param(cls, fixed, dtype, id=f"{cls.__name__}-{'fixed' if fixed else 'adaptive'}-{jnp.dtype(dtype).name}")
    for cls, fixed in CONFIGS
    for dtype in DTYPES
]


# --- item 1: periodic events by integer ticks, in every dtype -------------------------------------
class Sampled(js.LeafSystem):
    """y' = u; every 0.05 s: u <- -y, count += 1, t_last <- t."""

    def __init__(self):
        super().__init__("sampled")
        self.declare_continuous_state(1, default=[1.0])
        self.declare_discrete_state(3)  # [u, count, t_last]
        self.declare_periodic_discrete_update_event(0.05, 0.0, self.update)
        self.declare_periodic_publish_event(0.1, 0.0, lambda c: c.get_time(), name="tick")

    def update(self, context, discrete_state):
        _, count, _ = context.get_discrete_state(0)
        y = context.get_continuous_state_vector()[0]
        return jnp.stack([-y, count + 1, context.get_time()])

    def do_calc_time_derivatives(self, context):
        return context.get_discrete_state(0)[:1]


SAMPLED = Sampled()


@pytest.mark.parametrize("cls, fixed, dtype", PARAMS)
def test_periodic_updates_exact_in_every_dtype(cls, fixed, dtype):
    ctx = SAMPLED.create_default_context(dtype)
    # h = 0.01 fixed puts every update on the step grid (a scan); error control truncates its steps
    r = js.simulate(SAMPLED, ctx, 1.0, make_integrator(cls, fixed, dtype, 0.01 if fixed else 0.1), throw=False)
    assert int(r.status) == 0, r.message()
    u, count, t_last = np.asarray(r.context.get_discrete_state(0), np.float64)
    assert count == 20  # t = 0, 0.05, ..., 0.95; the one at t = 1 is pending
    assert abs(t_last - 0.95) <= 4 * ulp(dtype)
    y = float(r.context.get_continuous_state_vector()[0])
    assert abs(y - 0.95**20) <= (1e-5 if dtype == jnp.float32 else 1e-12)  # y' piecewise constant: exact
    assert int(r.simulator_stats.num_discrete_updates) == 20
    log = r.get_publish_log("tick")
    assert int(log.count) == 11  # t = 0, 0.1, ..., 1.0 (publishes at t_final are done)
    np.testing.assert_allclose(np.asarray(log.times[:11], np.float64), np.arange(11) * 0.1, atol=8 * ulp(dtype))


@pytest.mark.parametrize("period", [0.01, 0.1, 0.25])
def test_periodic_updates_float32_other_periods(period):
    """The periods of the report, float32, the default integrator (which stalled at 0.15 s)."""

    class S(Sampled):
        def __init__(self):
            js.LeafSystem.__init__(self, "s")
            self.declare_continuous_state(1, default=[1.0])
            self.declare_discrete_state(3)
            self.declare_periodic_discrete_update_event(period, 0.0, self.update)

    s = S()
    r = js.simulate(s, s.create_default_context(jnp.float32), 1.0, throw=False)
    assert int(r.status) == 0, r.message()
    n = round(1.0 / period)
    assert float(r.context.get_discrete_state(0)[1]) == n
    assert abs(float(r.context.get_continuous_state_vector()[0]) - (1 - period) ** n) <= 1e-5


# --- items 2, 3, 4: witness isolation, crossings inside a step, an event at the last step ----------
SHAPES = ["linear", "cubic", "exp", "tanh"]
CS = [1e-12, 1e-5, 0.13, 0.5]
PERIOD = 0.7  # the oscillating witness crosses zero every 0.35 s
T_END = 3.0


class Clock(js.LeafSystem):
    """x' = 1, with the three witnesses of the module docstring. Parameter 0: [shape index, c]."""

    once: js.WitnessFunction
    wave: js.WitnessFunction
    at_end: js.WitnessFunction

    def __init__(self):
        super().__init__("clock")
        self.declare_continuous_state(1)
        self.declare_discrete_state(1)  # updates done by the at-end witness
        self.declare_numeric_parameter([0.0, 0.5])
        down = js.WitnessFunctionDirection.POSITIVE_THEN_NON_POSITIVE
        self.once = self.declare_witness_function("once", down, self.shaped, js.PublishEvent(self.now, name="once"))
        self.wave = self.declare_witness_function(
            "wave", js.WitnessFunctionDirection.CROSSES_ZERO, self.sine, js.PublishEvent(self.now, name="wave")
        )
        self.at_end = self.declare_witness_function(
            "at end",
            down,
            lambda c: T_END - c.get_time(),  # time, not x: x = t only up to rounding
            js.DiscreteUpdateEvent(lambda c, ds: c.get_discrete_state(0) + 1, name="at end"),
        )

    @staticmethod
    def now(context):
        return context.get_time()

    def shaped(self, context):
        kind, c = context.get_numeric_parameter(0)
        x = context.get_continuous_state_vector()[0]
        return jnp.select(
            [kind == 0, kind == 1, kind == 2],
            [c - x, (c - x) ** 3, 1.0 - jnp.exp(x - c)],
            jnp.tanh(50.0 * (c - x)),
        )

    def sine(self, context):
        return jnp.sin(2 * jnp.pi * context.get_continuous_state_vector()[0] / PERIOD)

    def do_calc_time_derivatives(self, context):
        return jnp.ones(1, context.time.dtype)


CLOCK = Clock()


def clock_batch(dtype):
    pairs = [(k, c) for k in range(len(SHAPES)) for c in CS if not (dtype == jnp.float32 and k == 2 and c < 1e-6)]
    # (in float32, 1 - exp(x - 1e-12) is exactly 0 at x = 0: the witness starts at zero, which by
    # Drake's definition of a crossing never triggers; that case is float64's)
    base = CLOCK.create_default_context(dtype)
    ctxs = [base.with_numeric_parameter(0, jnp.array([k, c], dtype)) for k, c in pairs]
    return pairs, jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *ctxs)


@pytest.mark.parametrize("cls, fixed, dtype", PARAMS)
def test_witness_times_crossings_and_pending(cls, fixed, dtype):
    pairs, ctxs = clock_batch(dtype)
    h = 0.25
    integ = make_integrator(cls, fixed, dtype, h)
    r = jax.vmap(lambda c: js.simulate(CLOCK, c, T_END, integ, throw=False))(ctxs)
    assert np.all(np.asarray(r.status) == 0)
    # isolation: never before the crossing, at most one window after it (x = t exactly)
    window = max(h * 2.0**-40, ISOLATION_ULPS * ulp(dtype, T_END + h))
    once = r.get_publish_log("once")
    assert np.all(np.asarray(once.count) == 1)
    for i, (k, c) in enumerate(pairs):
        t_event = float(once.times[i, 0])
        slack = 4 * ulp(dtype, c)  # rounding of the witness value itself near its zero
        assert c - slack <= t_event <= c + window + slack, (SHAPES[k], c, t_event - c)
    # crossings 0.35 s apart: several per step of 0.25 (or more, adaptive): none lost, none repeated
    wave = r.get_publish_log("wave")
    expected = 0.35 * np.arange(1, 9)  # up to T_END (the crossing at t = 0 is a start at zero)
    assert np.all(np.asarray(wave.count) == len(expected))
    times = np.asarray(wave.times[:, : len(expected)], np.float64)
    assert np.all(np.abs(times - expected) <= window + 16 * ulp(dtype, T_END)), np.abs(times - expected).max()
    # the crossing at t_final: its update is pending, not lost
    assert np.all(np.asarray(r.context.get_discrete_state(0))[:, 0] == 0)
    assert np.all(np.asarray(r.pending_witness_events)[:, 2])
    after = jax.vmap(lambda c, p: js.advance_pending_events(CLOCK, c, p))(r.context, r.pending_witness_events)
    assert np.all(np.asarray(after.get_discrete_state(0))[:, 0] == 1)


def test_pending_witness_update_through_the_simulator():
    integ = js.RungeKutta3Integrator(max_step_size=0.25, target_accuracy=1e-6)
    for dtype in DTYPES:
        sim = js.Simulator(CLOCK, CLOCK.create_default_context(dtype), integ)
        sim.advance_to(T_END)
        assert float(sim.get_context().get_discrete_state(0)[0]) == 0  # pending at the boundary (Drake)
        sim.advance_to(T_END + 1.0)
        assert float(sim.get_context().get_discrete_state(0)[0]) == 1  # done at the start of the next
        sim2 = js.Simulator(CLOCK, CLOCK.create_default_context(dtype), integ)
        sim2.advance_to(T_END)
        sim2.advance_pending_events()
        assert float(sim2.get_context().get_discrete_state(0)[0]) == 1
        sim2.advance_to(T_END + 1.0)
        assert float(sim2.get_context().get_discrete_state(0)[0]) == 1  # not repeated


def test_no_isolation_mode_fires_at_the_end_of_the_step():
    """Drake without a context accuracy: the event fires at the end of the step where the sign change
    is seen (fixed steps of 0.25: the crossing at c = 0.13 fires at 0.25, the wave's at 0.5, 0.75, ...)."""
    ctx = CLOCK.create_default_context().with_numeric_parameter(0, jnp.array([0.0, 0.13]))
    integ = js.RungeKutta4Integrator(max_step_size=0.25)
    r = js.simulate(CLOCK, ctx, 1.0, integ, witness_isolation=False)
    assert float(r.get_publish_log("once").times[0]) == 0.25
    wave = r.get_publish_log("wave")
    np.testing.assert_array_equal(np.asarray(wave.times[: int(wave.count)]), [0.5, 0.75])


# --- item 6: a publish-only witness in float32 ----------------------------------------------------
class LoggedBall(BouncingBall):
    log_impacts: js.WitnessFunction

    def __init__(self):
        super().__init__()
        self.log_impacts = self.declare_witness_function(
            "impact log",
            js.WitnessFunctionDirection.POSITIVE_THEN_NON_POSITIVE,
            self.height,
            js.PublishEvent(lambda c: c.get_time(), name="impacts"),
        )


BALL = LoggedBall()
HEIGHTS = [2.5, 6.0, 7.0]  # no impact within 0.3 s of T_BALL
T_BALL = 3.8


def ball_impacts(z0, t_end, g=9.81, e=0.8):
    t, v, out = np.sqrt(2 * z0 / g), np.sqrt(2 * g * z0), []
    while t < t_end:
        out.append(t)
        v *= e
        t += 2 * v / g
    return np.array(out)


@pytest.mark.parametrize("cls, fixed, dtype", [p for p in PARAMS if p.values[2] == jnp.float32])
def test_publish_only_witness_fires_once_per_impact(cls, fixed, dtype):
    """float32 (where the landing margin used to be below the time's resolution); float64's bouncing
    ball is checked against the analytic solution in test_witness.py."""
    base = BALL.create_default_context(dtype)
    ctxs = jax.vmap(lambda z: base.with_continuous_state(jnp.stack([z, jnp.zeros_like(z)])))(
        jnp.asarray(HEIGHTS, dtype)
    )
    first_order = cls in (js.ExplicitEulerIntegrator, js.SemiExplicitEulerIntegrator, js.ImplicitEulerIntegrator)
    # first-order methods drift by O(h) per bounce: a smaller fixed step, and a wider tolerance
    h = (1e-3 if first_order else 0.01) if fixed else 0.1
    tol = 0.05 if first_order else 2e-3
    integ = make_integrator(cls, fixed, dtype, h)
    r = jax.vmap(lambda c: js.simulate(BALL, c, T_BALL, integ, throw=False))(ctxs)
    assert np.all(np.asarray(r.status) == 0)
    log = r.get_publish_log("impacts")
    for i, z0 in enumerate(HEIGHTS):
        expected = ball_impacts(z0, T_BALL)
        assert int(log.count[i]) == len(expected)
        np.testing.assert_allclose(np.asarray(log.times[i, : len(expected)], np.float64), expected, atol=tol)


# --- item 5: witness outputs are real floating scalars --------------------------------------------
@pytest.mark.parametrize(
    "value, message",
    [
        (lambda x: (x,), "tuple"),
        (lambda x: jnp.int32(1), "dtype int32"),
        (lambda x: x + 0j, "dtype complex"),
        (lambda x: x > 0, "dtype bool"),
        (lambda x: jnp.stack([x, x]), r"shape \(2,\)"),
    ],
    ids=["tuple", "int", "complex", "bool", "vector"],
)
def test_witness_output_must_be_a_real_scalar(value, message):
    class W(js.LeafSystem):
        def __init__(self):
            super().__init__("w")
            self.declare_continuous_state(1)
            self.declare_witness_function(
                "bad",
                "crosses_zero",
                lambda c: value(c.get_continuous_state_vector()[0]),
                js.PublishEvent(lambda c: 0.0),
            )

        def do_calc_time_derivatives(self, context):
            return jnp.ones(1)

    w = W()
    with pytest.raises(js.JaxsysError, match=f"(?s)Witness function 'bad' of System ::w.*{message}"):
        js.simulate(w, w.create_default_context(), 1.0)


def test_nan_witness_is_reported():
    class W(js.LeafSystem):
        def __init__(self):
            super().__init__("w")
            self.declare_continuous_state(1)
            self.declare_witness_function(
                "nan",
                "crosses_zero",
                lambda c: c.get_continuous_state_vector()[0] * jnp.nan,
                js.PublishEvent(lambda c: 0.0),
            )

        def do_calc_time_derivatives(self, context):
            return jnp.ones(1)

    w = W()
    for dtype in DTYPES:
        r = js.simulate(w, w.create_default_context(dtype), 1.0, throw=False)
        assert int(r.status) == js.Status.WITNESS_NONFINITE.code
        assert "witness function returned NaN" in r.message()
        assert int(r.stats.num_step_attempts) == 1  # reported at once, not after max_steps
    with pytest.raises(Exception, match="witness function returned NaN"):
        js.simulate(w, w.create_default_context(), 1.0)


def test_context_accuracy_sets_the_isolation_window():
    """Drake's mapping: with an accuracy a on the context, crossings are isolated to 0.01 a times the
    characteristic time (1 s with error control, the maximum step in fixed-step mode)."""
    base = CLOCK.create_default_context().with_numeric_parameter(0, jnp.array([1.0, 0.13]))  # cubic
    integ = js.RungeKutta4Integrator(max_step_size=0.25)
    for accuracy in [1e-2, 1e-4, 1e-6]:
        ctx = base.with_accuracy(accuracy)
        assert ctx.with_time(0.5).with_continuous_state(jnp.ones(1)).get_accuracy() == accuracy
        r = js.simulate(CLOCK, ctx, 1.0, integ)
        err = float(r.get_publish_log("once").times[0]) - 0.13
        # (fixed-step mode: Drake's characteristic time is the maximum step, 0.25 s)
        assert 0.0 <= err <= 0.01 * accuracy * 0.25 + 1e-15
        assert r.context.get_accuracy() == accuracy
    # without it, the step-relative window: 0.25 * 2**-40 ~ 2e-13
    err = float(js.simulate(CLOCK, base, 1.0, integ).get_publish_log("once").times[0]) - 0.13
    assert 0.0 <= err <= 0.25 * 2.0**-40
    with pytest.raises(js.JaxsysError, match=r"accuracy .* must be a number in \(0, 1\]"):  # (Drake accepts 1)
        base.with_accuracy(0.0)


def test_context_accuracy_kept_by_diagram_contexts():
    builder = js.DiagramBuilder()
    builder.add_system(Sampled())
    builder.add_system(Clock())
    d = builder.build("d")
    ctx = d.create_default_context().with_accuracy(1e-3)
    sub = d.get_subsystem_context(ctx, d.get_systems()[1])
    moved = d.set_subsystem_context(ctx.with_time(0.25).with_continuous_state(jnp.ones(2)), d.get_systems()[1], sub)
    assert moved.get_accuracy() == 1e-3 and moved.with_accuracy(None).get_accuracy() is None


class _Down:
    """Stand-in for an EventProgram with one positive-to-non-positive witness."""

    @staticmethod
    def triggered(ref, value):
        return (ref > 0) & (value <= 0)


_R = 0.3123
HARD_SHAPES = {  # name: (witness of the step fraction, its root, trials allowed)
    "linear": (lambda t: _R - t, _R, 4),
    "quadratic": (lambda t: _R**2 - t**2, _R, 12),
    "exponential": (lambda t: jnp.exp(-20 * t) - np.exp(-20 * _R), _R, 14),
    "root at 1e-12 of the start": (lambda t: 1e-12 - t, 1e-12, 6),
    "root at 1e-5 of the start": (lambda t: 1e-5 - t * (1 + t), (np.sqrt(1 + 4e-5) - 1) / 2, 8),
    "root 1e-9 before the end": (lambda t: (1 - 1e-9) - t, 1 - 1e-9, 6),
    "cubic (flat at the root)": (lambda t: -((t - _R) ** 3), _R, 4 * 40 + 4),
    "ninth power": (lambda t: -jnp.sign(t - _R) * jnp.abs(t - _R) ** 9, _R, 4 * 40 + 4),
    "steep tanh": (lambda t: -jnp.tanh(1e6 * (t - _R)), _R, 4 * 40 + 4),
    "step": (lambda t: jnp.where(t < _R, 1.0, -1.0), _R, 4 * 40 + 4),
    "square root": (lambda t: jnp.sqrt(jnp.abs(_R - t)) * jnp.sign(_R - t), _R, 4 * 40 + 4),
}


@pytest.mark.parametrize("name", list(HARD_SHAPES))
def test_bracket_search_closes_on_every_shape(name):
    """The bracket search (Chandrupatla with a bisection safeguard) ends with [lo, hi] around the
    closed-form root, no wider than the window (2**-40 of the step), within its trial budget: a few
    trials on smooth witnesses, at most 4 per halving (the safeguard's bound) on any witness."""
    from jaxsys.analysis.witness_isolation import _bracket

    fn, root, budget = HARD_SHAPES[name]
    calls = []

    def values(tau):
        jax.debug.callback(lambda: calls.append(1))
        return fn(tau)

    lo0, hi0 = jnp.zeros(1), jnp.ones(1)
    window = jnp.asarray(2.0**-40)
    active = jnp.array([True])

    def setup(g_lo0, g_hi0):  # (no confirming trials here: the search from [0, 1] as given)
        return active, g_lo0, lo0, hi0, g_hi0

    no = jnp.asarray(False)
    _, _, lo, hi = _bracket(_Down(), values, setup, (no, no), (lo0, hi0), (fn(lo0), fn(hi0)), window)
    jax.effects_barrier()
    lo, hi = float(lo[0]), float(hi[0])
    assert fn(jnp.asarray(lo)) > 0 and fn(jnp.asarray(hi)) <= 0  # lo untriggered, hi triggered
    assert lo - 1e-15 <= root <= hi + 1e-15
    assert hi - lo <= float(window)
    assert len(calls) <= budget
