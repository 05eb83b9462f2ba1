"""JAX's persistent compilation cache reuses a plain ``simulate``'s program in a new process (issue #40:
compile time as users meet it, e.g. a restarted notebook kernel).

JAX does not cache programs that hold host callbacks, and ``throw=True``'s error is one (an
``equinox.error_if``). With the cache configured (``jax_compilation_cache_dir``), a top-level call
compiles its run without it and raises the same error after the run, from its status;
``batch_simulate`` always does so at top level (its error then names the failing member)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from models import Decay

import jaxsys as js
from jaxsys.analysis import simulate as simulate_module


ROOT = pathlib.Path(__file__).resolve().parents[1]

SCRIPT = """
import sys
import jax
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
hits = []
jax.monitoring.register_event_listener(
    lambda name, **kw: hits.append(name) if name == "/jax/compilation_cache/cache_hits" else None
)
import jaxsys as js
from jaxsys.examples import BouncingBall
ball = BouncingBall()
integ = js.RungeKutta5Integrator(target_accuracy=1e-10)
r = js.simulate(ball, ball.create_default_context(), 3.0, integ)
z, v = (float(a) for a in r.context.get_continuous_state_vector())
sim = js.Simulator(ball, ball.create_default_context(), integ)
sim.advance_to(3.0)
zs, vs = (float(a) for a in sim.get_context().get_continuous_state_vector())
print("RESULT", len(hits), repr(z), repr(v), repr(zs), repr(vs))
"""


def test_a_new_process_reuses_the_compiled_run(tmp_path):
    """Two processes run the same plain ``simulate`` and ``Simulator.advance_to`` of Drake's bouncing
    ball (z0 = 10 m, e = 0.8, to t = 3 s, one impact) with one cache directory: the first compiles (no
    hit), the second finds both programs in the cache; both give the same states, the closed form's
    to 1e-7."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = []
    for _ in range(2):
        p = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=300, env=env
        )
        assert p.returncode == 0, p.stderr
        line = [s for s in p.stdout.splitlines() if s.startswith("RESULT")][0].split()
        out.append((int(line[1]), *(float(a) for a in line[2:])))
    assert out[0][0] == 0 and out[1][0] >= 2, out  # (the run's program and the Simulator's advance)
    assert out[0][1:] == out[1][1:]
    g, e, z0, t = 9.81, 0.8, 10.0, 3.0
    t1 = np.sqrt(2 * z0 / g)
    v1 = e * g * t1  # (up, after the impact)
    dt = t - t1
    want = [v1 * dt - g * dt**2 / 2, v1 - g * dt]
    np.testing.assert_allclose(out[1][1:3], want, rtol=0, atol=1e-7)
    np.testing.assert_allclose(out[1][3:], want, rtol=0, atol=1e-7)


class Clock(js.LeafSystem):
    """t' = 1."""

    def __init__(self) -> None:
        super().__init__("clock")
        self.declare_continuous_state(1)

    def do_calc_time_derivatives(self, context: Any) -> Any:
        return jnp.ones(1)


def _error(monkeypatch: Any, cache_on: bool, run: Any) -> str:
    monkeypatch.setattr(simulate_module, "_persistent_cache_on", lambda: cache_on)
    with pytest.raises(eqx.EquinoxRuntimeError) as info:
        run()
    return str(info.value)


def test_errors_checked_after_the_run_are_throws_errors(monkeypatch):
    """With the cache on, a plain call that fails raises ``throw=True``'s error (an
    ``EquinoxRuntimeError`` with the same message) after the run: the step limit, a monitor's
    failure naming the monitor and its message, a float32 run's minimum step in float32's figures;
    with ``throw=False`` the result comes back. Under eager ``jax.grad`` and ``jax.vmap`` (not top
    level) the run keeps its error inside: values against the closed form x(T) = exp(-a T)."""
    clock = Clock()
    ctx = clock.create_default_context()

    def steps() -> Any:
        return js.simulate(clock, ctx, 10.0, js.RungeKutta3Integrator(max_steps=3))

    def monitored() -> Any:
        fails = lambda c: js.EventStatus.failed_if(c.get_time() > 0.5, "too late")  # noqa: E731
        return js.simulate(clock, ctx, 1.0, js.RungeKutta3Integrator(max_step_size=0.1), monitor=fails)

    decay = Decay()

    def stiff32() -> Any:  # (a float32 run below its dtype's minimum step: the message speaks of float32)
        c = decay.create_default_context(jnp.float32).with_numeric_parameter(0, jnp.asarray([1e4], jnp.float32))
        integ = js.RungeKutta3Integrator(target_accuracy=1e-4, requested_minimum_step_size=0.01)
        return js.simulate(decay, c, 1.0, integ)

    for run, text in (
        (steps, "maximum number of integrator step attempts"),
        (monitored, "failed with message 'too late'"),
        (stiff32, "4.8e-07 max(1, |t|) in float32"),
    ):
        inside = _error(monkeypatch, False, run)
        after = _error(monkeypatch, True, run)
        assert text in after and after in inside  # (equinox adds the stack to the one raised inside)
    monkeypatch.setattr(simulate_module, "_persistent_cache_on", lambda: True)
    r = js.simulate(clock, ctx, 10.0, js.RungeKutta3Integrator(max_steps=3), throw=False)
    assert int(r.status) != 0 and float(r.context.get_time()) < 10.0


def test_batches_check_their_members_after_the_run():
    """``batch_simulate`` (a top-level call) checks its members' statuses after the run: members that
    succeed give the closed form x0 exp(-a T); a batch where one member (a stiff rate, many steps)
    runs out of step attempts raises ``throw=True``'s error naming that member, with the message that
    member's own ``simulate`` raises (before, JAX's wrapped runtime error, naming no member)."""
    s = Decay()
    ctx = s.create_default_context()
    rates = jnp.array([0.5, 1.0, 400.0])
    members = [ctx.with_numeric_parameter(0, jnp.stack([a])) for a in rates]
    integ = js.RungeKutta3Integrator(target_accuracy=1e-6, max_steps=200)
    ok = js.batch_simulate(s, js.stack_contexts(members[:2]), 1.0, integ)
    x = np.asarray(ok.result.context.get_continuous_state_vector()[:, 0])
    np.testing.assert_allclose(x, np.exp(-np.asarray(rates[:2])), rtol=1e-5)
    with pytest.raises(eqx.EquinoxRuntimeError) as batch:
        js.batch_simulate(s, js.stack_contexts(members), 1.0, integ)
    with pytest.raises(eqx.EquinoxRuntimeError) as single:
        js.simulate(s, members[2], 1.0, integ)
    text = str(batch.value)
    assert text.startswith("batch_simulate: member 2: ") and "maximum number of integrator step attempts" in text
    assert text.removeprefix("batch_simulate: member 2: ") in str(single.value)
    failed = js.batch_simulate(s, js.stack_contexts(members), 1.0, integ, throw=False)
    assert [int(c) for c in failed.result.status][:2] == [0, 0] and int(failed.result.status[2]) != 0
    s = Decay()
    integ = js.RungeKutta5Integrator(max_step_size=0.1, target_accuracy=1e-12)

    def final(a: Any) -> Any:
        c = s.create_default_context().with_numeric_parameter(0, jnp.stack([a]))
        return js.simulate(s, c, 2.0, integ).context.get_continuous_state_vector()[0]

    np.testing.assert_allclose(float(final(1.5)), np.exp(-3.0), rtol=1e-10)
    np.testing.assert_allclose(float(jax.grad(final)(1.5)), -2.0 * np.exp(-3.0), rtol=1e-9)
    a = jnp.array([0.5, 1.0])
    np.testing.assert_allclose(np.asarray(jax.vmap(final)(a)), np.exp(-2.0 * np.asarray(a)), rtol=1e-10)
