"""Fixed-step runs whose step count is known while tracing: a ``lax.scan``.

Exactly ``ceil((t_final - t0) / h)`` steps with time computed as ``t0 + n h`` (Drake accumulates time
by addition and takes 10001 steps of 1e-3 to reach 10 s; jaxsys takes 10000); the last step is
shortened when the span is not a whole number of steps. With events (only when every periodic event
time lies on the step grid and there are no witnesses), each scan iteration is one Drake step:
updates, the step, publishes. Runs that do not fit (witnesses, events off the grid, times known only
at run time) go to the while loop of `stepping`.

Imports: the framework, `event_loop`, `loops`, `recording`, `results`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context
from ..framework.event_status import FAILED
from ..framework.events import SIMULTANEITY_RTOL, SIMULTANEITY_ULPS
from .event_loop import EventProgram, get_rest, set_rest
from .integrators.base import step_aux
from .linearized import scan_linearized
from .loops import Run
from .recording import record_buffer, write_row
from .results import STATUS_EVENT_FAILED, STATUS_NONFINITE, STATUS_OK, LoopOutput, pack_statistics


Array = jax.Array


def plan_fixed_steps(
    h: float, t0: float, t_final: Any, ts: np.ndarray | None, dtype: Any = np.float64
) -> tuple[int, np.ndarray | None, bool] | None:
    """Static plan of a fixed-step run: (number of steps, step index of each save time, whether the
    span is a whole number of steps), or None when the run cannot be a scan (t_final or the save
    times only known at run time, or save times off the step grid).

    Times are on the grid when they are simultaneous with a grid time in the sense of
    `time_tolerance` (for ``dtype``), the rule every loop uses: a save
    time just past a grid time (and a periodic event there) is not snapped back to it, so the record
    sees the update due at that grid time, as the while loop's record (and Drake's ``AdvanceTo``) does."""
    if t_final is None or ts is None:
        return None
    rtol = max(SIMULTANEITY_RTOL, SIMULTANEITY_ULPS * float(np.finfo(dtype).eps))
    tf = float(t_final)
    tol = rtol * max(1.0, abs(tf))
    span = tf - t0
    n = max(int(np.ceil((span - tol) / h)), 0)
    exact = abs(t0 + n * h - tf) <= tol
    if ts.size == 0:
        return n, None, exact
    ts = np.asarray(ts, np.float64)
    idx = np.rint((ts - t0) / h).astype(np.int64)
    tol_ts = rtol * np.maximum(1.0, np.abs(ts))
    at_end = np.abs(ts - tf) <= tol
    on_grid = np.abs(t0 + idx * h - ts) <= tol_ts
    if not np.all(on_grid | at_end):
        return None
    idx = np.where(at_end, n, np.minimum(idx, n))
    return n, idx, exact


class FixedStepScan:
    """One fixed-step run as a scan. ``events``: ``(program, periodic counters, logs, rest, counts,
    updates_at_start, status)`` for a system with events, else None.

    An event handler that stops the run (an [`EventStatus`][jaxsys.EventStatus] that reached termination or
    failed) turns the remaining steps into no-ops: the carry holds the status, the time the run
    stopped and the steps taken."""

    def __init__(self, run: Run, n_steps: int, save_idx: np.ndarray | None, exact: bool, events: Any = None):
        self.run = run
        self.n_steps = n_steps
        self.save_idx = save_idx if save_idx is not None else np.zeros(0, np.int64)
        self.exact = exact
        self.program: EventProgram | None = events[0] if events is not None else None
        # the first step's start-of-step updates (False once done before the loop for a save at the
        # start time; whether the periodic events due at the start are among them is in the counters)
        self.first_updates = True
        self.events0 = events
        self.h = float(run.integrator.max_step_size)
        # the integrator protocol's evaluations per step, when static (None: counted in the carry)
        self.step_evaluations: int | None = None

    def time_after(self, n: Array) -> Array:
        """Time after ``n`` steps."""
        run = self.run
        return jnp.where(n == self.n_steps, run.t_final, run.t0 + n.astype(run.t0.dtype) * self.h)

    def context_of(self, t: Array, carry: Any) -> Context:
        x, _, evc = carry
        ctx = self.run.context.with_time(t).with_continuous_state(x)
        return set_rest(ctx, evc[0]) if self.program is not None else ctx

    def step(self, carry: Any, n: Array) -> Any:
        """Step ``n`` (from ``t0 + n h``). The carry is ``(x, (the integrator's state, derivative
        evaluations so far), the event carry or ())``."""
        run, h = self.run, self.h
        x, (istate, evals), evc = carry
        dtype = run.t0.dtype
        t = run.t0 + n.astype(dtype) * h
        meter, token = run.aux["progress"]
        meter.update(token, t, n, jnp.ones((), bool))
        if self.exact:
            hn: Any = h
            t_next = run.t0 + (n + 1).astype(dtype) * h
        else:
            t_next = jnp.where(n + 1 == self.n_steps, run.t_final, run.t0 + (n + 1).astype(dtype) * h)
            hn = t_next - t
        if self.program is None:
            x_new, istate, evals = self._attempt(run.f, t, x, hn, run.aux, istate, evals, t_next, None)
            return (x_new, (istate, evals), ())
        return self._event_step(x, (istate, evals), evc, n, t, t_next, hn)

    def _attempt(
        self, f: Any, t: Array, x: Array, hn: Any, aux: Any, istate: Any, evals: Array, t_next: Array, taken: Any
    ) -> tuple[Array, Any, Array]:
        """Step 3 of the while loop, through the integrator protocol, every step accepted whole (a
        method that can fail never runs here); ``taken``: False for a step an update stopped (None: all
        are taken). Returns (x_new, the integrator's next state, evaluations so far)."""
        integrator = self.run.integrator
        res = integrator.step(f, t, x, hn, aux, istate, t_next)
        yes = jnp.array(True) if taken is None else taken
        new_state = integrator.next_state(res.proposal, yes, jnp.array(False))
        if taken is not None:
            new_state = jax.tree_util.tree_map(lambda a, b: jnp.where(taken, a, b), new_state, istate)
        if isinstance(res.evaluations, int) and taken is None:
            self.step_evaluations = res.evaluations  # (static: counted once at the end)
        else:
            evals = evals + (res.evaluations if taken is None else jnp.where(taken, res.evaluations, 0))
        return res.x_new, new_state, evals

    def _event_step(self, x: Array, integ: Any, evc: Any, n: Array, t: Array, t_next: Array, hn: Any) -> Any:
        """One Drake step with events: updates at t, the step, publishes at t_next (none of it once an
        event handler stopped the run)."""
        run, program = self.run, self.program
        assert program is not None  # (steps with events only)
        istate, evals = integ
        rest, k_ev, logs, counts, status, t_stop, n_taken = evc
        can_stop = program.can_stop
        live = ~program.stopped(status) if can_stop else jnp.array(True)
        base = set_rest(run.context.with_time(t).with_continuous_state(x), rest)
        gate = (n > 0) | self.first_updates
        gate = gate & live if can_stop else gate
        base, k_ev, n_u, n_d, u_status = program.updates(base, k_ev, gate)
        status = program.fold_in(status, u_status)
        # (an update that stops the run: the step is not taken)
        step = live & ~program.stopped(status) if can_stop else jnp.array(True)
        rest = get_rest(base)
        aux = dict(run.aux, v_to_qdot=step_aux(run.system, base)["v_to_qdot"])
        f = run.system.vector_field(base)
        x_start = base.get_continuous_state_vector()
        # (updates that changed the state or the dynamics make what the integrator carries stale)
        istate = run.integrator.refresh(istate, n_u + n_d > 0)
        x_new, istate, evals = self._attempt(f, t, x_start, hn, aux, istate, evals, t_next, step if can_stop else None)
        after = set_rest(run.context.with_time(t_next).with_continuous_state(x_new), rest)
        k_ev, logs, n_p, p_status = program.publishes(after, k_ev, step, logs)
        status = program.fold_in(status, p_status)
        if can_stop:
            x_new = jnp.where(step, x_new, x_start)
            t_stop = jnp.where(live & ~step, t, jnp.where(step & program.stopped(status), t_next, t_stop))
        if can_stop:
            n_taken = n_taken + step.astype(jnp.int32)
        evc = (rest, k_ev, logs, counts + jnp.stack([n_p, n_d, n_u]), status, t_stop, n_taken)
        return (x_new, (istate, evals), evc)

    def steps(self, carry: Any, start: Any, length: int) -> Any:
        """``length`` steps from step index ``start``."""
        if length <= 0:
            return carry
        return scan_linearized(self.step, carry, start, length)

    def simulate(self) -> LoopOutput:
        """The whole run, saving at the planned steps."""
        run, idx, n_steps = self.run, self.save_idx, self.n_steps
        ev = self.events0
        istate, evals0 = run.integrator.init(run.f, run.t0, run.x0, run.aux, self.program is not None)
        integ0 = (istate, jnp.asarray(evals0, jnp.int32))
        carry0: tuple[Any, ...]
        if self.program is not None:
            status0 = ev[6]
            t_stop0 = jnp.where(self.program.stopped(status0), run.t0, run.t_final)
            carry0 = (run.x0, integ0, (ev[3], ev[1], ev[2], ev[4], status0, t_stop0, jnp.zeros((), jnp.int32)))
        else:
            carry0 = (run.x0, integ0, ())
        n_save = int(run.ts.shape[0])
        m = int(idx[0]) if idx.size else 0
        if self.program is not None and n_save and m == 0:
            # a save at the start time sees the state after the updates due then (Drake's AdvanceTo(t0));
            # the first step then skips them
            carry0 = self._start_updates(carry0)
        if n_save == 0:
            carry = self.steps(carry0, 0, n_steps)
            buf = record_buffer(run.record, run.context, 0)
        elif m > 0 and np.array_equal(idx, m * np.arange(1, n_save + 1)):
            carry, buf = self._save_regular(carry0, m, n_save)
        else:
            carry, buf = self._save_masked(carry0, n_save)
        return self.output(carry, buf)

    def _start_updates(self, carry: Any) -> Any:
        run, program = self.run, self.program
        assert program is not None  # (systems with events only)
        x, integ, (rest, k_ev, logs, counts, status, t_stop, n_taken) = carry
        base = set_rest(run.context.with_time(run.t0).with_continuous_state(x), rest)
        gate = ~program.stopped(status) if program.can_stop else jnp.array(True)
        base, k_ev, n_u, n_d, u_status = program.updates(base, k_ev, gate)
        status = program.fold_in(status, u_status)
        if program.can_stop:
            t_stop = jnp.where(program.stopped(status), run.t0, t_stop)
        counts = counts + jnp.stack([jnp.zeros((), jnp.int32), n_d, n_u])
        self.first_updates = False
        evc = (get_rest(base), k_ev, logs, counts, status, t_stop, n_taken)
        return (base.get_continuous_state_vector(), integ, evc)

    def _save_regular(self, carry0: Any, m: int, n_save: int) -> tuple[Any, Any]:
        """Save times on a regular grid of ``m`` steps: an outer scan over save intervals of an inner
        scan of plain steps, recording once per interval (no per-step masked writes)."""

        def record(carry: Any, n: Array) -> Any:
            return self.run.record(self.context_of(self.time_after(n), carry))

        # (an outer scan over save intervals of an inner scan of steps when evaluated; differentiated,
        # possibly by batched Jacobians: `linearized`)
        carry, buf = scan_linearized(self.step, carry0, 0, n_save * m, output=record, every=m)
        return self.steps(carry, n_save * m, self.n_steps - n_save * m), buf

    def _save_masked(self, carry0: Any, n_save: int) -> tuple[Any, Any]:
        """General grid-aligned save times: one pass, a masked write at the steps that hit one."""
        run, idx = self.run, self.save_idx
        buf = record_buffer(run.record, run.context, n_save)
        k0 = int(np.sum(idx == 0))
        if k0:
            start = self.context_of(run.t0, carry0)
            buf = jax.tree_util.tree_map(lambda b, v: b.at[:k0].set(v), buf, run.record(start))
        idx_ = jnp.asarray(idx, jnp.int32)

        def step_rec(c: Any, n: Array) -> Any:
            carry, k, buf = c
            carry = self.step(carry, n)
            hit = (k < n_save) & (idx_[jnp.clip(k, 0, n_save - 1)] == n + 1)
            value = run.record(self.context_of(self.time_after(n + 1), carry))
            buf = write_row(buf, k, value, hit)
            return (carry, k + hit.astype(k.dtype), buf), None

        init = (carry0, jnp.asarray(k0, jnp.int32), buf)
        (carry, _, buf), _ = jax.lax.scan(step_rec, init, jnp.arange(self.n_steps, dtype=jnp.int32))
        return carry, buf

    def output(self, carry: Any, buf: Any) -> LoopOutput:
        """The loop's output: statistics of n fixed steps; a non-finite end state is reported."""
        run, h, n_steps = self.run, self.h, self.n_steps
        x, (_, evals), evc = carry
        dtype = run.t0.dtype
        ok = jnp.all(jnp.isfinite(x))
        n = jnp.asarray(n_steps, jnp.int32)
        last_h = (run.t_final - (run.t0 + (n_steps - 1) * h)) if n_steps else jnp.zeros((), dtype)
        per_step = self.step_evaluations or 0  # (the rest was counted in the carry)
        evaluations = n * per_step + (evals if n_steps > 0 else 0)
        stats = pack_statistics(
            steps=n,
            attempts=n,
            evaluations=evaluations,
            shrinkages=jnp.zeros((), jnp.int32),
            substep_failures=jnp.zeros((), jnp.int32),
            smallest=jnp.full((), jnp.nan, dtype),
            largest=jnp.asarray(h if n_steps > 1 else last_h, dtype),
            initial=jnp.minimum(h, run.t_final - run.t0) if n_steps else jnp.full((), jnp.nan, dtype),
            previous=jnp.asarray(last_h, dtype),
            fixed=True,
        )
        status = jnp.where(ok, STATUS_OK, STATUS_NONFINITE).astype(jnp.int32)
        if self.program is not None:
            rest, _, logs, counts, ev_status, t_stop, n_taken = evc
            status = jnp.where(ev_status[0] == FAILED, STATUS_EVENT_FAILED, status).astype(jnp.int32)
            if self.program.can_stop:
                stats = stats.replace(steps=n_taken, attempts=n_taken)
                return LoopOutput(t_stop, x, buf, stats, status, rest, logs, counts, None, ev_status)
            return LoopOutput(run.t_final, x, buf, stats, status, rest, logs, counts, None, ev_status)
        return LoopOutput(run.t_final, x, buf, stats, status)
