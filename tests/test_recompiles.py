"""Speed as users meet it, without timing anything (issue #22, item 1): a repeated plain ``simulate``
call, a call with a new horizon, and a new ``Simulator`` on the same diagram reuse compiled code
(counted by traces, not timed), and give the same results as the uncached path."""

from __future__ import annotations

from typing import Any

import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np
import pytest
from models import Decay

import jaxsys as js
from jaxsys.analysis import simulate as simulate_module, simulator as simulator_module


class Sampled(js.LeafSystem):
    """y' = u; every 0.1 s: u <- -y (a discrete update)."""

    def __init__(self) -> None:
        super().__init__("sampled")
        self.declare_continuous_state(1, default=[1.0])
        self.declare_discrete_state(1)
        self.declare_periodic_discrete_update_event(0.1, 0.0, lambda c, d: -c.get_continuous_state_vector())

    def do_calc_time_derivatives(self, context: Any) -> Any:
        return context.get_discrete_state(0)


def uncached(*args: Any, **kwargs: Any) -> Any:
    """``js.simulate(*args, **kwargs)`` without the entry cache (the path under user transformations)."""
    simulate_module._ENTRY_CACHE["enabled"] = False
    try:
        return js.simulate(*args, **kwargs)
    finally:
        simulate_module._ENTRY_CACHE["enabled"] = True


def traces() -> int:
    return simulate_module._ENTRY_CACHE["traces"]


def test_repeated_plain_call_does_not_retrace():
    s = Decay()
    ctx = s.create_default_context()
    integ = js.RungeKutta5Integrator(max_step_size=0.1, target_accuracy=1e-10)
    r0 = js.simulate(s, ctx, 2.0, integ)
    n = traces()
    for tf, a in ((2.0, 1.0), (3.0, 1.0), (1.5, 2.0)):  # a new horizon, a new parameter value: no retrace
        r = js.simulate(s, ctx.with_numeric_parameter(0, jnp.array([a])), tf, integ)
        np.testing.assert_allclose(float(r.context.get_continuous_state_vector()[0]), np.exp(-a * tf), rtol=1e-8)
        assert float(r.context.get_time()) == tf
    assert traces() == n
    np.testing.assert_allclose(float(r0.context.get_continuous_state_vector()[0]), np.exp(-2.0), rtol=1e-8)
    # save times of the same count are arguments too
    js.simulate(s, ctx, 2.0, integ, save_at=jnp.array([0.5, 1.0]))
    n = traces()
    r = js.simulate(s, ctx, 2.0, integ, save_at=jnp.array([0.25, 1.5]))
    assert traces() == n
    np.testing.assert_allclose(np.asarray(r.ys)[:, 0], np.exp(-np.array([0.25, 1.5])), rtol=1e-8)


def test_receding_horizon_fixed_step_calls_compile_once_and_match_one_run():
    """A loop of fixed-step calls over equal spans (an MPC or replay loop: ``simulate(.., (k + 1) h)``
    from the previous result) traces once, keyed on the step plan, not on the times; the pieces
    equal one run over the whole span (RK4 on x' = -a x: the same steps), times and saves included.
    Before, each call compiled anew (60 calls of the robot swing-up replay: 12 s)."""
    s = Decay()
    h = 0.05
    integ = js.RungeKutta4Integrator(max_step_size=h)
    ctx = s.create_default_context()
    whole = js.simulate(s, ctx, 20 * h, integ, save_at=jnp.arange(1, 21) * h)
    n = None
    for k in range(20):
        r = js.simulate(s, ctx, (k + 1) * h, integ, initialize=False, save_at=jnp.array([(k + 1) * h]))
        ctx = r.context
        if k == 0:
            n = traces()
        np.testing.assert_allclose(np.asarray(r.ys)[0], np.asarray(whole.ys)[k], rtol=1e-13)
        assert float(ctx.get_time()) == pytest.approx((k + 1) * h, rel=1e-15)
    assert traces() == n
    np.testing.assert_allclose(
        ctx.get_continuous_state_vector(), whole.context.get_continuous_state_vector(), rtol=1e-13
    )
    # the steps are RK4's: one step of h on x' = -x is the degree-4 Taylor polynomial of exp(-h)
    p4 = sum((-h) ** i / np.prod(np.arange(1, i + 1)) for i in range(5))
    np.testing.assert_allclose(float(ctx.get_continuous_state_vector()[0]), p4**20, rtol=1e-13)
    # a span of another step count, or a partial last step, is another plan: one trace each
    js.simulate(s, ctx, float(ctx.get_time()) + 3 * h, integ, initialize=False)
    assert traces() == n + 1
    r = js.simulate(s, ctx, float(ctx.get_time()) + 2.5 * h, integ, initialize=False)
    assert traces() == n + 2
    np.testing.assert_allclose(float(r.context.get_time()), 22.5 * h, rtol=1e-15)


def test_a_new_tolerance_does_not_recompile_and_is_right():
    # issue #22: the target accuracy of an error-controlled integrator is an argument of the compiled
    # function; each result equals the uncached run's (which has the accuracy as a constant)
    s = Decay()
    ctx = s.create_default_context()
    js.simulate(s, ctx, 1.0, js.RungeKutta3Integrator(max_step_size=0.1, target_accuracy=1e-6))
    n = traces()
    for acc in (1e-9, 1e-4, 1e-7):
        integ = js.RungeKutta3Integrator(max_step_size=0.1, target_accuracy=acc)
        r = js.simulate(s, ctx, 1.0, integ)
        direct = uncached(s, ctx, 1.0, integ)
        assert int(r.stats.num_steps_taken) == int(direct.stats.num_steps_taken)
        np.testing.assert_allclose(
            r.context.get_continuous_state_vector(), direct.context.get_continuous_state_vector(), rtol=1e-14
        )
    assert traces() == n
    np.testing.assert_allclose(float(r.context.get_continuous_state_vector()[0]), np.exp(-1.0), rtol=1e-6)
    # another option (the maximum step) is still part of the configuration
    js.simulate(s, ctx, 1.0, js.RungeKutta3Integrator(max_step_size=0.05, target_accuracy=1e-6))
    assert traces() == n + 1


@pytest.mark.parametrize(
    "integ",
    [js.RungeKutta4Integrator(max_step_size=0.01), js.RungeKutta3Integrator(max_step_size=0.05, target_accuracy=1e-8)],
    ids=["fixed", "ec"],
)
def test_cached_and_direct_runs_agree_with_events(integ):
    s = Sampled()
    ctx = s.create_default_context()
    ts = jnp.array([0.3, 0.75, 1.0])
    cached = js.simulate(s, ctx, 1.0, integ, save_at=ts)
    cached_again = js.simulate(s, ctx, 1.0, integ, save_at=ts)
    direct = uncached(s, ctx, 1.0, integ, save_at=ts)
    for r in (cached, cached_again):
        np.testing.assert_array_equal(np.asarray(r.ys), np.asarray(direct.ys))
        np.testing.assert_array_equal(
            np.asarray(r.context.get_discrete_state(0)), np.asarray(direct.context.get_discrete_state(0))
        )
        assert int(r.simulator_stats.num_discrete_updates) == int(direct.simulator_stats.num_discrete_updates) == 10


def test_a_new_simulator_on_the_same_diagram_does_not_retrace():
    s = Decay()
    integ = js.RungeKutta3Integrator(max_step_size=0.1, target_accuracy=1e-8)
    sim = js.Simulator(s, s.create_default_context(), integ)
    sim.advance_to(1.0)
    n = simulator_module._ADVANCE_TRACES[0]
    sim2 = js.Simulator(s, s.create_default_context().with_continuous_state(jnp.array([2.0])), integ)
    sim2.advance_to(0.5)
    sim2.advance_to(1.5)
    assert simulator_module._ADVANCE_TRACES[0] == n
    np.testing.assert_allclose(float(sim2.get_context().get_continuous_state_vector()[0]), 2 * np.exp(-1.5), rtol=1e-6)


def test_the_advance_after_advance_pending_events_reuses_the_compiled_advance():
    """``Simulator.advance_pending_events`` (a step of zero length) then ``advance_to``: the second
    advance, which must not repeat the updates due at its start, runs the program the first advance
    compiled (whether those updates run is an argument). Drake's counts: periodic updates every 0.1 s,
    10 on [0, 1) by the first advance, the one at t = 1 by advance_pending_events, 9 more to t = 2 (20;
    21 if the one at t = 1 were repeated); the state equals plain runs chained the same way."""
    s = Sampled()
    integ = js.RungeKutta3Integrator(max_step_size=0.05, target_accuracy=1e-8)
    ctx = s.create_default_context()
    sim = js.Simulator(s, ctx, integ)
    n0 = simulator_module._ADVANCE_TRACES[0]
    sim.advance_to(1.0)
    assert simulator_module._ADVANCE_TRACES[0] == n0 + 1
    sim.advance_pending_events()
    assert simulator_module._ADVANCE_TRACES[0] == n0 + 2  # (the step of zero length: its own program)
    sim.advance_to(2.0)
    assert simulator_module._ADVANCE_TRACES[0] == n0 + 2  # (reused, not compiled again)
    assert sim.get_num_discrete_updates() == 20
    r1 = js.simulate(s, ctx, 1.0, integ)
    mid = js.advance_pending_events(s, r1.context, r1.pending_witness_events)
    r2 = js.simulate(s, mid, 2.0, integ, initialize=False, updates_at_start=False)
    for get in (lambda c: c.get_continuous_state_vector(), lambda c: c.get_discrete_state(0)):
        np.testing.assert_allclose(
            np.asarray(get(sim.get_context())), np.asarray(get(r2.context)), rtol=1e-9, atol=1e-12
        )


def test_runtime_errors_of_a_plain_call_are_clean():
    import equinox as eqx

    s = Decay()
    with pytest.raises(eqx.EquinoxRuntimeError, match="maximum number of integrator step attempts"):
        js.simulate(s, s.create_default_context(), 10.0, js.RungeKutta3Integrator(max_steps=3))


def test_repeated_call_path_keeps_every_value_check():
    # issue #40 item 3: a repeated call (same system, integrator, options) skips the checks of those,
    # never the checks of what changes per call: the context, the times
    s, other = Decay(), Sampled()
    ctx = s.create_default_context()
    integ = js.RungeKutta3Integrator(max_step_size=0.1, target_accuracy=1e-6)
    js.simulate(s, ctx, 1.0, integ)
    assert len(simulate_module._FAST) >= 1
    with pytest.raises(js.JaxsysError, match="before the context's time"):
        js.simulate(s, ctx.with_time(2.0), 1.0, integ)
    with pytest.raises(js.JaxsysError, match="finite"):
        js.simulate(s, ctx, float("nan"), integ)
    with pytest.raises(js.JaxsysError, match="strictly increasing"):
        js.simulate(s, ctx, 1.0, integ, save_at=np.array([0.5, 0.2]))
    with pytest.raises(js.JaxsysError, match="scalar"):
        js.simulate(s, ctx, np.array([1.0, 2.0]), integ)
    with pytest.raises(js.JaxsysError):  # a context of another system
        js.simulate(s, other.create_default_context(), 1.0, integ)
    # and a float32 context asking for float64 accuracy is warned on every call, the repeated ones too
    fine = js.RungeKutta3Integrator(max_step_size=0.1, target_accuracy=1e-9)
    ctx32 = s.create_default_context(jnp.float32)
    for _ in range(2):
        with pytest.warns(js.PrecisionWarning):
            js.simulate(s, ctx32, 0.1, fine)
    # the repeated call gives the uncached call's answer
    r = js.simulate(s, ctx, 1.0, integ)
    ref = uncached(s, ctx, 1.0, integ)
    np.testing.assert_array_equal(
        np.asarray(r.context.get_continuous_state_vector()), np.asarray(ref.context.get_continuous_state_vector())
    )


_COMPILES: list[str] = []
_COUNTING = [False]
jax.monitoring.register_event_duration_secs_listener(
    lambda name, duration, **kw: _COMPILES.append(name) if _COUNTING[0] else None
)


def test_eager_derivatives_go_through_the_compiled_entry():
    """An eager ``jax.grad`` / ``jax.hessian`` / ``jax.vmap`` of a function that simulates (state or
    parameters traced, the time known) runs the cached compiled entry, which JAX differentiates or
    batches as one program: the run is traced once for all these calls (before, each call traced the
    run op by op: every loop compiled on its own, each time). Values equal the jitted transformations
    and the closed form of x' = -a x (d x(T)/d a = -T x0 exp(-a T), its second derivative T^2 x0 exp(-a T))."""
    s = Decay()
    integ = js.RungeKutta5Integrator(max_step_size=0.1, target_accuracy=1e-12)
    ctx = s.create_default_context()

    def final(a):
        return js.simulate(
            s, ctx.with_numeric_parameter(0, jnp.stack([a])), 2.0, integ
        ).context.get_continuous_state_vector()[0]

    final(1.0)
    n = traces()
    g = jax.grad(final)(1.5)
    h = jax.hessian(final)(1.5)
    v = jax.vmap(final)(jnp.array([0.5, 1.0, 1.5]))
    _COMPILES.clear()
    _COUNTING[0] = True
    try:
        g2 = jax.grad(final)(1.7)  # a repeated eager gradient compiles nothing (op by op: each loop anew)
    finally:
        _COUNTING[0] = False
    assert not [e for e in _COMPILES if "backend_compile" in e], _COMPILES
    assert traces() == n  # (the compiled entry's trace is reused by every transformation)
    np.testing.assert_allclose(float(g), -2.0 * np.exp(-3.0), rtol=1e-9)
    np.testing.assert_allclose(float(g2), -2.0 * np.exp(-3.4), rtol=1e-9)
    np.testing.assert_allclose(float(h), 4.0 * np.exp(-3.0), rtol=1e-7)
    np.testing.assert_allclose(np.asarray(v), np.exp(-2.0 * np.array([0.5, 1.0, 1.5])), rtol=1e-10)
    np.testing.assert_allclose(float(jax.jit(jax.grad(final))(1.5)), float(g), rtol=1e-13)


@pytest.mark.parametrize("integ", ["error-controlled", "fixed"])
def test_eager_vmap_over_contexts_batched_with_their_times_runs_one_compiled_program(integ):
    """Contexts stacked whole (their times too) under an eager ``jax.vmap``: the run goes through the
    compiled entry as well (the start time taken from each context), so a repeated call compiles
    nothing (op by op it compiled ~100 small programs and the loop again, ~1.4 s a call, each call).
    Each member equals its own single run, with events (a periodic update) and without:
    error-controlled members starting at different times, fixed-step ones from one start time
    (``start_time``: a traced time's fixed-step plan needs it, as under ``jit``) and different states."""
    fixed = integ == "fixed"
    integrator = (
        js.RungeKutta4Integrator(max_step_size=0.01, fixed_step_mode=True)
        if fixed
        else js.RungeKutta5Integrator(max_step_size=0.1, target_accuracy=1e-10)
    )
    starts = [0.25, 0.25, 0.25] if fixed else [0.0, 0.25, 0.5]
    x0 = [1.0, 2.0, -0.5]
    options = {"start_time": 0.25} if fixed else {}
    for system in (Decay(), Sampled()):
        ctxs = [
            system.create_default_context().with_time(t0).with_continuous_state(jnp.array([x]))
            for t0, x in zip(starts, x0)
        ]
        stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *ctxs)

        def batched(c, system=system):
            return jax.vmap(lambda cc: js.simulate(system, cc, 1.0, integrator, **options).context)(c)

        out = batched(stacked)
        n = traces()
        _COMPILES.clear()
        _COUNTING[0] = True
        try:
            again = batched(stacked)
        finally:
            _COUNTING[0] = False
        assert not [e for e in _COMPILES if "backend_compile" in e], _COMPILES
        assert traces() == n
        for i, c in enumerate(ctxs):
            single = js.simulate(system, c, 1.0, integrator).context
            np.testing.assert_allclose(
                np.asarray(out.get_continuous_state_vector()[i]),
                np.asarray(single.get_continuous_state_vector()),
                rtol=1e-12,
                atol=1e-14,
            )
        np.testing.assert_array_equal(np.asarray(again.get_time()), np.ones(3))
        if isinstance(system, Decay):  # x(1) = x0 exp(-(1 - t0))
            want = np.array(x0) * np.exp(-(1.0 - np.array(starts)))
            np.testing.assert_allclose(np.asarray(out.get_continuous_state_vector()[:, 0]), want, rtol=1e-9)


def test_advance_pending_events_runs_one_compiled_program_eager_and_under_vmap():
    """``js.advance_pending_events`` called eagerly (and under an eager ``jax.vmap``) runs one compiled
    program per system: a repeated call compiles nothing (op by op it took 38 ms a call, 16 ms under
    vmap). Its values: the periodic update due at t_final = 1, which the run leaves pending (Drake),
    is performed: u <- -y(1), with y(1) from the run, for each member of a batch as for one context."""
    system = Sampled()
    integrator = js.RungeKutta3Integrator(max_step_size=0.05, target_accuracy=1e-8)
    ctxs = [system.create_default_context().with_continuous_state(jnp.array([y0])) for y0 in (1.0, -2.0, 0.5)]
    runs = [js.simulate(system, c, 1.0, integrator) for c in ctxs]
    for r in runs:  # (the update at t = 1 is still pending: u holds the value set at t = 0.9)
        assert float(r.context.get_discrete_state(0)[0]) != -float(r.context.get_continuous_state_vector()[0])
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *[r.context for r in runs])
    flags = jnp.stack([r.pending_witness_events for r in runs])

    def batched(c: Any, p: Any) -> Any:
        return jax.vmap(lambda cc, pp: js.advance_pending_events(system, cc, pp))(c, p)

    singles = [js.advance_pending_events(system, r.context, r.pending_witness_events) for r in runs]
    out = batched(stacked, flags)
    _COMPILES.clear()
    _COUNTING[0] = True
    try:
        again_single = js.advance_pending_events(system, runs[0].context, runs[0].pending_witness_events)
        again = batched(stacked, flags)
    finally:
        _COUNTING[0] = False
    assert not [e for e in _COMPILES if "backend_compile" in e], _COMPILES
    for i, (r, single) in enumerate(zip(runs, singles)):
        y1 = float(r.context.get_continuous_state_vector()[0])
        assert float(single.get_discrete_state(0)[0]) == -y1
        assert float(out.get_discrete_state(0)[i, 0]) == -y1
        assert float(again.get_discrete_state(0)[i, 0]) == -y1
        assert float(single.get_time()) == 1.0  # (no integration)
    assert float(again_single.get_discrete_state(0)[0]) == float(singles[0].get_discrete_state(0)[0])


@pytest.mark.parametrize("t0, ts", [(0.0, [0.0, 0.5, 1.0]), (0.25, [0.25, 0.5, 1.0]), (0.25, [0.3, 0.9]), (0.0, [1.0])])
@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_the_entry_checks_and_counts_the_times_at_the_call_as_the_run_would(t0, ts, dtype):
    # the compiled entry takes known times as arguments, checks them and counts the save times at the
    # start on the host (not in the program): the same rows as the uncached run, which counts them
    # itself, and as the closed form x(t) = exp(-(t - t0))
    s = Decay()
    ctx = s.create_default_context(dtype).with_time(t0).with_continuous_state(jnp.array([1.0], dtype))
    f32 = dtype == jnp.float32
    integ = js.RungeKutta3Integrator(target_accuracy=1e-5 if f32 else 1e-8)
    a = js.simulate(s, ctx, 1.0, integ, save_at=jnp.asarray(ts, dtype))
    b = uncached(s, ctx, 1.0, integ, save_at=jnp.asarray(ts, dtype))
    assert a.ys.dtype == dtype
    np.testing.assert_allclose(np.asarray(a.ys), np.asarray(b.ys), rtol=1e-6)
    closed = np.exp(-(np.asarray(ts) - t0))
    np.testing.assert_allclose(np.asarray(a.ys).reshape(-1), closed, rtol=1e-4 if f32 else 1e-6)
    assert int(a.stats.num_steps_taken) == int(b.stats.num_steps_taken)
