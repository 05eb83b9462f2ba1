"""The stepping loop: error-controlled and event-driven simulation as one while loop of step attempts.

This follows Drake's ``Simulator::Step`` (simulator.h), in the order the code below takes it. One
*step* starts at time t with state x and runs:

1. **Start-of-step updates** (once per step, not again after a rejected attempt): the unrestricted
   updates, then the discrete updates, due at t (per-step events, periodic events whose next time is
   t, and the update events of witnesses that triggered at the end of the previous step).
   `StepLoop.start_of_step`.
2. **Choose the step**: at most to the *boundary*, the earliest of the next periodic event time, the
   loop's target (the next save time, or ``t_final``); error control's step otherwise, with Drake's
   truncation and stretch rules (``IntegrateAtMost``). `choose_step`.
3. **Attempt the step** with the integrator protocol's ``step`` and the state the integrator carries
   (``refresh``-ed when an update changed the state or the dynamics: a first-same-as-last stage is then
   stale); after 4-5 the integrator's ``next_state`` says what it carries on. `StepLoop.attempt`.
4. **Accept or reject** it: fixed steps are accepted if finite and the method succeeded; error
   control compares the weighted error norm with the accuracy, adjusts the next step
   (``CalcAdjustedStepSize``), and counts shrinkages and sub-step failures. A step whose Newton
   iteration failed is retried with half the step, in both modes. A rejected attempt retries the
   same step (go to 2).
   `error_control`.
5. **Witnesses**: if a witness function changed sign in its direction over the accepted step, the step
   is cut back to just past its first crossing (`isolate_crossing`); the
   witness's update events become pending for the next step's start, its publish events fire in 7.
   `StepLoop.isolate_witnesses`.
6. **Advance time** to the step's end and record the statistics. `StepLoop.commit`.
7. **End-of-step publishes** at the new time: per-step publishes, periodic publishes due then, and
   triggered witnesses' publishes, written into the publish logs. `StepLoop.end_of_step`.

Handlers may return an [`EventStatus`][jaxsys.EventStatus]; the carry holds the run's status (first worst).
An update that reaches termination or fails ends the run before step 3 (the step is not taken); a
publish or the monitor (called after the publishes of 7) ends it after the step. Timed events that
a system schedules with ``do_calc_next_update_time`` (asked after the updates of 1) bound the step
like periodic events do (a time equal to now is a step of zero length); mode-dependent witnesses
(``active_if``) are monitored in the steps that start with them active.

Updates due exactly at the end time stay pending (Drake's ``AdvanceTo``); the next run (or
``advance_pending_events``) performs them. The loop is a ``lax.while_loop`` when evaluated and
a bounded loop when differentiated (`while_fast_primal`); it stops when time
reaches the target, when the status is not ok, or after ``max_steps`` attempts.

Imports: the framework, `event_loop`, `integrators.base`, `loop_state`,
`loops`, `recording`, `results`, `step_size`, `witness_isolation`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context
from ..framework.event_status import FAILED, REACHED_TERMINATION
from ..framework.events import time_tolerance
from .event_loop import EventProgram, get_rest, set_rest
from .integrators.base import StepResult, step_aux
from .loop_state import Clock, Counters, DenseStep, EventCarry, FixedGrid, LoopState
from .loops import Run, WhileLoop
from .progress import NoProgressMeter
from .recording import concrete, initial_saves, record_buffer, run_with_saving
from .results import (
    STATUS_EVENT_FAILED,
    STATUS_MAX_STEPS,
    STATUS_NONFINITE,
    STATUS_OK,
    STATUS_WITNESS_NONFINITE,
    IntegratorStatistics,
    LoopOutput,
)
from .step_size import StepChoice, Verdict, choose_step, error_control
from .trajectory import SegmentBuffer
from .witness_isolation import (
    ISOLATION_ULPS,
    detect_crossings,
    first_bracket,
    isolate_crossing,
    isolation_window,
)


Array = jax.Array


class StepStart(NamedTuple):
    """The state of one step after its start-of-step updates (step 1), and what the step needs.

    **Fields:** `x` (the continuous state after the updates), `events` (the event carry after them),
    `f` (the vector field at the updated discrete state), `aux` (the integrator's auxiliary data),
    `make_ctx(t, x)` (a context at the updated discrete state), `boundary` (the step may not pass it),
    `n_u`, `n_d` (unrestricted and discrete updates dispatched, 0 or 1: when either ran, the
    first-same-as-last stage is stale), `stop` (an update reached termination or failed: the step is
    not taken; None when no update can stop the run), `witness_active` (per witness, monitored in
    this step; None: all), `timed` (the time ``do_calc_next_update_time`` asked for, which timed
    events are due then, and whether that is now: a step of zero length; None without such systems).
    """

    x: Array
    events: Any  # EventCarry, or () without events
    f: Callable[[Array, Array], Array]
    aux: Any
    make_ctx: Callable[[Array, Array], Context]
    boundary: Array
    n_u: Array
    n_d: Array
    stop: Array | None = None
    witness_active: Array | None = None
    timed: tuple[Array, Array, Array] | None = None


def _may_save_at_start(ts: Array, t0: Array) -> bool:
    """Whether a save time may be the start time (False only when both are known and it is not)."""
    c_ts, c_t0 = concrete(ts), concrete(t0)
    if c_ts is None or c_t0 is None:
        return True
    return bool(np.min(c_ts) <= float(c_t0) + 1e-12 * max(1.0, abs(float(c_t0))))


class StepLoop:
    """The static configuration of one run's stepping loop and the pure functions of its steps.

    **Arguments:**
    - `run`: the `Run` bundle.
    - `fixed`: fixed-step mode (steps on a grid) instead of error control.
    - `program`: the system's `EventProgram`, or None without events.
    - `witness_iterations`: isolation precision (see [`simulate`][jaxsys.simulate]).
    - `witness_isolation`: isolate witness crossings (False: their events fire at the step's end).
    - `dense`: dense output (keep the last step's interpolation data).
    - `while_loop`: the loop flavour (`make_while_loop`).
    """

    def __init__(
        self,
        run: Run,
        fixed: bool,
        program: EventProgram | None,
        witness_iterations: int,
        dense: bool,
        while_loop: WhileLoop,
        witness_isolation: bool = True,
        dense_window: int | None = None,
        at_least_one_step: bool = False,
        initial_step: Array | None = None,
        trajectory: int = 0,
    ) -> None:
        self.run = run
        # keep every accepted step and its interpolation data (SaveAt(trajectory=capacity))
        self.trajectory = int(trajectory)
        # (Drake's AdvanceTo takes a step even to the time it is at: a step of zero length)
        self.at_least_one_step = at_least_one_step
        # (the Simulator's next advance starts with the step error control asked for at the end of the
        # last one, as Drake's integrator keeps its ideal next step between AdvanceTo calls)
        self.initial_step = initial_step
        self.fixed = fixed
        self.program = program if program else None
        self.witness_iterations = witness_iterations
        self.witness_isolation = witness_isolation
        self.dense = dense
        self.dense_window = dense_window
        self.while_loop = while_loop
        self.integrator = run.integrator
        self.has_state = run.x0.shape[0] > 0
        self.meter, self.token = run.aux["progress"]

    # ----- the carry ---------------------------------------------------------------------------
    def initial_state(self, events0: EventCarry | tuple[()]) -> LoopState:
        """The carry at the start: time t0, the integrator's first step, no statistics yet."""
        run, integrator = self.run, self.integrator
        x0, t0, dtype = run.x0, run.t0, run.t0.dtype
        h0: Any = integrator.get_initial_step_size_target()
        if self.initial_step is not None and not self.fixed:
            h_carried = jnp.asarray(self.initial_step, dtype)
            ok = jnp.isfinite(h_carried) & (h_carried > 0)
            h0 = jnp.where(ok, jnp.minimum(h_carried, integrator.max_step_size), h0)
        # what the method carries between steps (a first-same-as-last stage, a Newton cache), and the
        # derivative evaluations its start made
        istate, evaluations = integrator.init(run.f, t0, x0, run.aux, self.program is not None)
        dense: DenseStep | tuple[()] = ()
        segments: SegmentBuffer | tuple[()] = ()
        if self.dense or self.trajectory:
            h0_ = jnp.asarray(h0, dtype)
            shapes = jax.eval_shape(lambda: integrator.step(run.f, t0, x0, h0_, run.aux, istate, t0, True))
            data = shapes.dense
        if self.dense:
            dense = DenseStep.make(t0, jnp.zeros((), dtype), x0, x0, jnp.zeros(data.shape, data.dtype))
        if self.trajectory:
            segments = SegmentBuffer.empty(self.trajectory, x0, data.shape, dtype)
        grid: FixedGrid | tuple[()] = ()
        if self.fixed:
            grid = FixedGrid(t0, jnp.zeros((), jnp.int32))
            h0 = integrator.max_step_size  # (a smaller h_try is a retry after a sub-step failure)
        counters = Counters.start(evaluations)
        # a non-finite initial state stops the run before its first step, with the status that says so
        counters = counters.replace(status=jnp.where(jnp.all(jnp.isfinite(x0)), STATUS_OK, STATUS_NONFINITE))
        return LoopState(x0, Clock.start(t0, h0), counters, grid, events0, istate, dense, segments)

    def running(self, s: LoopState) -> Array:
        """The run goes on: status ok, no event handler stopped it, and attempts left."""
        go = (s.counters.status == STATUS_OK) & (s.counters.attempts < self.integrator.max_steps)
        if self.program is not None and self.program.can_stop:
            go = go & ~EventProgram.stopped(s.events.status)
        if self.program is not None and self.program.guarded:
            go = go & ~EventProgram.guard_failed(s.events.guard)
        return go

    def context_at(self, s: LoopState, t: Array, x: Array) -> Context:
        """The context of loop state ``s`` at time ``t`` and continuous state ``x``."""
        base = self.run.context.with_time(t).with_continuous_state(x)
        return set_rest(base, s.events.rest) if self.program is not None else base

    # ----- one step attempt (the loop body) ------------------------------------------------------
    def step(self, target: Array, s: LoopState) -> LoopState:
        """One attempt of Drake's Step toward ``target`` (see the module docstring for 1-7)."""
        t = s.clock.t
        start = self.start_of_step(s, jnp.minimum(target, self.run.t_final))  # 1
        choice = choose_step(self.integrator, self.fixed, t, start.boundary, s.clock.h_try, s.grid, self.has_state)
        attempt = self.attempt(s, start, choice)  # 3
        verdict = error_control(  # 4
            self.run.system,
            self.integrator,
            self.fixed,
            self.has_state,
            self.run.aux["num_q"],
            self.run.aux["num_v"],
            lambda: start.make_ctx(choice.t_new, attempt.x_new),
            t,
            choice.h,
            attempt.x_new,
            attempt.error,
            attempt.ok,
            s.clock.h_try,
            s.counters.at_minimum,
            s.counters.status,
            choice.limited,
        )
        if start.timed is not None:
            # a step of zero length (events scheduled now) is taken as it is, whatever error control says
            now = start.timed[2]
            verdict = verdict._replace(
                accept=verdict.accept | now,
                status=jnp.where(now, s.counters.status, verdict.status),
                at_minimum=jnp.where(now, s.counters.at_minimum, verdict.at_minimum),
                shrinkage=jnp.where(now, 0, verdict.shrinkage),
                failure=jnp.where(now, 0, verdict.failure),
                limited=verdict.limited | now,
            )
        if start.stop is not None:
            # an update stopped the run: this step is not taken (nor counted)
            stop = start.stop
            verdict = verdict._replace(
                accept=verdict.accept & ~stop,
                status=jnp.where(stop, s.counters.status, verdict.status),
                shrinkage=jnp.where(stop, 0, verdict.shrinkage),
                failure=jnp.where(stop, 0, verdict.failure),
            )
        # the derivative at the step's start, for witness isolation and the guard watch (traced once)
        f0 = None
        if self.program is not None and self.program.witnesses:
            f0 = attempt.f_start if attempt.f_start is not None else start.f(t, start.x)
        *landing, w_now, status = self.isolate_witnesses(t, start, choice, attempt, verdict, f0)  # 5
        verdict = verdict._replace(status=status)
        guard = self.watch_guards(s, start, t, landing, verdict.accept, f0)
        if guard is not None:
            # the state went back through a guard after its update, where no crossing is seen: this step
            # is not taken. A bounce the step was too long to see (the witness went back to its armed
            # side and down again inside it) is found by retrying with half the step; once the step is at
            # time's resolution, the events accumulate (Zeno) or the state rests on the guard: the run
            # stops at this step's start with the failure that names the witness
            fell = jnp.any(guard[1])
            floor = ISOLATION_ULPS * jnp.finfo(t.dtype).eps * jnp.maximum(1.0, jnp.abs(t))
            retry = fell & (0.5 * choice.h >= floor)
            verdict = verdict._replace(
                accept=verdict.accept & ~fell,
                h_next=jnp.where(retry, 0.5 * choice.h, verdict.h_next),
                shrinkage=jnp.where(fell, 0, verdict.shrinkage),
                failure=jnp.where(fell, 0, verdict.failure),
            )
            guard = (guard[0], guard[1] & ~retry)
        new = self.commit(s, start, choice, attempt, verdict, tuple(landing))  # 6
        return self.end_of_step(new, start, verdict.accept, w_now, guard)  # 7

    def watch_guards(
        self, s: LoopState, start: StepStart, t: Array, landing: list[Any], accept: Array, f0: Array | None
    ) -> tuple[Array, Array] | None:
        """The guard watch of this attempt (`EventProgram.guard_start` at its start, `guard_end` at the
        end of an accepted step) and, per guarded witness, whether the state went back through its
        guard; None when no witness is guarded."""
        program = self.program
        if program is None or not program.guarded:
            return None
        ev = s.events
        consumed = ev.witness_pending & ~ev.step_open  # (the updates this step's start performed)
        active = start.witness_active
        assert f0 is not None  # (a guarded witness is a witness)
        guard = program.guard_start(ev.guard, consumed, active, start.make_ctx, f0, t, start.x)
        t_end, _, x_end, _ = landing
        ended, fell = program.guard_end(guard, active, start.make_ctx, t_end, x_end)
        # (a step not taken keeps the watch of its start)
        return jnp.where(accept & ~jnp.any(fell), ended, guard), fell & accept

    def start_of_step(self, s: LoopState, boundary: Array) -> StepStart:
        """Step 1: the start-of-step updates (skipped when the last attempt was rejected: the step is
        already open), and the boundary the step may not pass."""
        run, program = self.run, self.program
        t, x = s.clock.t, s.x
        zero = jnp.zeros((), jnp.int32)
        if program is None:

            def plain_ctx(tt: Array, xx: Array) -> Context:
                return run.context.with_time(tt).with_continuous_state(xx)

            return StepStart(x, (), run.f, run.aux, plain_ctx, boundary, zero, zero)
        ev = s.events
        base = set_rest(run.context.with_time(t).with_continuous_state(x), ev.rest)
        base, k_ev, n_u, n_d, u_status = program.updates(base, ev.periodic, ~ev.step_open, ev.witness_pending)
        status = program.fold_in(ev.status, u_status)
        stop = program.is_stopped(status) if u_status.bound >= REACHED_TERMINATION else None
        rest = get_rest(base)
        aux = dict(run.aux, v_to_qdot=step_aux(run.system, base)["v_to_qdot"])

        def make_ctx(tt: Array, xx: Array) -> Context:
            return set_rest(run.context.with_time(tt).with_continuous_state(xx), rest)

        # witness updates pending from the last step are consumed by this step's updates
        events = ev._replace(rest=rest, periodic=k_ev, witness_pending=ev.witness_pending & ev.step_open, status=status)
        # a step never jumps over a periodic event: it is truncated to land on it; an event time
        # simultaneous with the target (time_tolerance) is the target, so a save time a hair past an
        # event time sees the state before that event's updates, as the fixed-step scan's does
        t_ev = program.next_event_time(k_ev, t.dtype)
        boundary = jnp.where(t_ev < boundary - time_tolerance(boundary), t_ev, boundary)
        next_timed = program.next_timed(base)
        timed = None
        if next_timed is not None:
            # nor over a time a system asked for (Drake's CalcNextUpdateTime, after the updates); a time
            # that is now makes a step of zero length, whose publishes and next updates handle its events
            t_c, due_c = next_timed
            now = t_c <= t + time_tolerance(t)
            boundary = jnp.minimum(boundary, jnp.where(now, t, t_c))
            timed = (t_c, due_c, now)
        x = base.get_continuous_state_vector()
        f = run.system.vector_field(base)
        # mode-dependent witnesses are monitored in the steps that start with them active
        w_active = program.witness_activity(base)
        return StepStart(x, events, f, aux, make_ctx, boundary, n_u, n_d, stop, w_active, timed)

    def attempt(self, s: LoopState, start: StepStart, choice: StepChoice) -> StepResult:
        """Step 3: one step of the integrator from the updated state (the integrator protocol's
        ``step``, with its carried state; updates at this step's start that changed the state or the
        dynamics first ``refresh`` it)."""
        istate = s.integrator
        if self.program is not None:
            istate = self.integrator.refresh(istate, start.n_u + start.n_d > 0)
        dense = self.dense or self.trajectory > 0
        return self.integrator.step(start.f, s.clock.t, start.x, choice.h, start.aux, istate, choice.t_new, dense)

    def isolate_witnesses(
        self, t: Array, start: StepStart, choice: StepChoice, attempt: StepResult, verdict: Verdict, f0: Any = None
    ) -> tuple[Array, Array, Array, Array, Any, Array]:
        """Step 5: cut an accepted step from ``t`` back to just past the first witness crossing in it.

        Crossings are detected at the step's end and at interior points of its continuous extension
        (`detect_crossings`) and isolated by trial steps
        (`isolate_crossing`); without isolation (``witness_isolation=False``,
        Drake without a context accuracy) the events of a witness that changed sign fire at the end of
        the step. A non-finite witness value sets the status.

        Returns the step's end time, whether it reaches the boundary, its end state, whether it was cut,
        per witness whether it triggered (None without events), and the status."""
        program, x_new, accept = self.program, attempt.x_new, verdict.accept
        if program is not None:
            program = program.masked(start.witness_active)
        if program is None or not program.witnesses:
            w_now = jnp.zeros((0,), bool) if program is not None else None
            return choice.t_new, choice.reaches_boundary, x_new, jnp.array(False), w_now, verdict.status
        w0 = program.witness_values(start.make_ctx(t, start.x))
        if not self.witness_isolation:
            w1 = program.witness_values(start.make_ctx(choice.t_new, x_new))
            status = self._witness_status(w0, w1, accept, verdict.status)
            trig = program.triggered(w0, w1) & accept
            return choice.t_new, choice.reaches_boundary, x_new, jnp.array(False), trig, status
        if f0 is None:
            f0 = attempt.f_start if attempt.f_start is not None else start.f(t, start.x)
        fired, w1 = detect_crossings(program, start.make_ctx, t, start.x, choice.h, choice.t_new, f0, x_new, w0)
        status = self._witness_status(w0, w1, accept, verdict.status)
        candidates = jnp.any(fired, axis=0) & accept

        def isolate() -> tuple[Array, Array, Array, Array]:
            # (bracket and window computed here: only steps with a crossing pay for them)
            lo0, hi0 = first_bracket(fired, choice.h)
            window = isolation_window(
                t,
                choice.h,
                self.witness_iterations,
                self.run.context.get_accuracy(),
                self.integrator.max_step_size if self.fixed else 1.0,
            )
            return isolate_crossing(
                program,
                self.integrator,
                start.f,
                start.aux,
                start.make_ctx,
                t,
                start.x,
                choice.h,
                w0,
                w1,
                candidates,
                lo0,
                hi0,
                window,
            )

        t_new, x_new, w_now, isolated = jax.lax.cond(
            jnp.any(candidates),
            isolate,
            lambda: (choice.t_new, x_new, program.triggered(w0, w1), jnp.array(False)),
        )
        return t_new, choice.reaches_boundary & ~isolated, x_new, isolated, w_now & accept, status

    @staticmethod
    def _witness_status(w0: Array, w1: Array, accept: Array, status: Array) -> Array:
        """A non-finite witness value at an accepted step's ends stops the run."""
        bad = accept & ~jnp.all(jnp.isfinite(w0) & jnp.isfinite(w1))
        return jnp.where(bad & (status == STATUS_OK), STATUS_WITNESS_NONFINITE, status)

    def commit(
        self,
        s: LoopState,
        start: StepStart,
        choice: StepChoice,
        attempt: StepResult,
        verdict: Verdict,
        landing: tuple[Any, ...],
    ) -> LoopState:
        """Step 6: time, state and statistics after the attempt (the state is unchanged if rejected).

        ``landing``: where the step ended after step 5 (time, reaches the boundary, state, isolated)."""
        t_new, reaches_boundary, x_new, isolated = landing
        accept, h, clock = verdict.accept, choice.h, s.clock
        acc_i = accept.astype(jnp.int32)
        c = s.counters
        evaluations = attempt.evaluations
        if start.stop is not None:  # (an attempt an update stopped is not taken: nor counted)
            evaluations = jnp.where(start.stop, 0, evaluations)
        counters = c.replace(
            steps=c.steps + acc_i,
            attempts=c.attempts + (1 if start.stop is None else (~start.stop).astype(jnp.int32)),
            shrinkages=c.shrinkages + verdict.shrinkage,
            substep_failures=c.substep_failures + verdict.failure,
            status=verdict.status,
            at_minimum=verdict.at_minimum,
            evaluations=c.evaluations + evaluations,
        )
        smallest = clock.smallest
        if not self.fixed:
            h_max = start.boundary - clock.t
            smallest = jnp.where(accept & (jnp.isnan(smallest) | ((h < smallest) & (h < h_max))), h, smallest)
        # a step limited by a boundary, a Newton failure or a witness does not set the ideal step
        limited = verdict.limited | isolated
        h_ideal = jnp.where(accept & ~limited, verdict.h_next, clock.h_ideal)
        new_clock = clock.replace(
            smallest=smallest,
            largest=jnp.where(accept, jnp.maximum(clock.largest, h), clock.largest),
            initial=jnp.where(accept & jnp.isnan(clock.initial), h, clock.initial),
            previous=jnp.where(accept, h, clock.previous),
            h_try=jnp.where(accept, h_ideal, verdict.h_next),
            h_ideal=h_ideal,
            t=jnp.where(accept, t_new, clock.t),
        )
        x_acc = jnp.where(accept, x_new, start.x)
        dense = s.dense
        if self.dense:
            # the last attempt, accepted or not: the loop stops right after an accepted step passes the
            # target, so when the saving loop reads it, it is the step that passed (no select needed)
            assert attempt.dense is not None  # (the integrator was asked for it)
            dense = DenseStep.make(clock.t, h, start.x, x_new, attempt.dense)
        grid = s.grid
        if self.fixed:
            # fixed steps restart from a boundary, a witness time, or the end of a step halved after a
            # sub-step failure
            at_b = accept & (reaches_boundary | isolated | choice.limited)
            grid = FixedGrid(jnp.where(at_b, t_new, grid.origin), jnp.where(at_b, 0, grid.steps_since + acc_i))
        # what the method carries into the next attempt (e.g. the end-point derivative of an accepted
        # step, the start's of a rejected one, neither after a step cut short at a witness crossing)
        istate = self.integrator.next_state(attempt.proposal, accept, isolated)
        segments = s.segments
        if self.trajectory:
            assert attempt.dense is not None  # (asked for)
            segments = segments.written(accept, clock.t, h, start.x, x_new, attempt.dense)
        return LoopState(x_acc, new_clock, counters, grid, start.events, istate, dense, segments)

    def end_of_step(
        self, s: LoopState, start: StepStart, accept: Array, w_now: Any, guard: tuple[Array, Array] | None = None
    ) -> LoopState:
        """Step 7: publishes at the new time (if the attempt was accepted), including those of the
        witnesses that triggered; their update events become pending for the next step's start. The
        guard watch (`watch_guards`) is carried on, with the guards the state went back through."""
        if self.program is None:
            return s
        ev = s.events
        after = start.make_ctx(s.clock.t, s.x)
        if start.timed is not None:
            # the timed events fire if the step reached their time (a witness may have cut it short)
            t_c, due_c, _ = start.timed
            reached = s.clock.t >= t_c - time_tolerance(t_c)
            w_now = jnp.concatenate([w_now, due_c & reached & accept])
        program = self.program
        n_flags = len(program.witnesses) + len(program.timed)
        if w_now.shape[0] < n_flags:  # (timed events that no do_calc_next_update_time schedules)
            w_now = jnp.concatenate([w_now, jnp.zeros((n_flags - w_now.shape[0],), bool)])
        k_ev, logs, n_p, p_status = program.publishes(after, ev.periodic, accept, ev.logs, w_now)
        events = EventCarry(
            rest=ev.rest,
            periodic=k_ev,
            logs=logs,
            step_open=~accept,
            counts=ev.counts + jnp.stack([n_p, start.n_d, start.n_u]),
            witness_pending=jnp.where(accept, w_now, ev.witness_pending),
            status=program.fold_in(ev.status, p_status),
            guard=ev.guard if guard is None else guard[0].at[2].set(guard[1].astype(guard[0].dtype)),
        )
        return s._replace(events=events)

    # ----- the loops -----------------------------------------------------------------------------
    def advance(self, s: LoopState, target: Array) -> LoopState:
        """Step until time reaches ``target`` (a save time or ``t_final``), or the run fails.

        Stepping to save times (Drake's AdvanceTo), the target is a boundary a step lands on; with
        dense output it is not: the loop stops after the step that passes it."""
        body_target = self.run.t_final if self.dense else target

        def cond(c: LoopState) -> Array:
            more = c.clock.t < target
            if self.at_least_one_step:
                more = more | (c.counters.steps == 0)
            return more & self.running(c)

        def body(c: LoopState) -> LoopState:
            # (whether this run is stepping: under vmap the body runs for every member while one does)
            if not isinstance(self.meter, NoProgressMeter):
                self.meter.update(self.token, c.clock.t, c.counters.attempts, cond(c))
            return self.step(body_target, c)

        between_saves = int(self.run.ts.shape[0]) > 0  # (then run once per save time by the saving loop)
        return self.while_loop(cond, body, s, self.integrator.max_steps, between_saves)

    def simulate(self, events0: EventCarry | tuple[()]) -> LoopOutput:
        """Run from the start to ``t_final``, saving at the save times; the loop's output."""
        run = self.run
        n_save = int(run.ts.shape[0])
        s0 = self.initial_state(events0)
        if n_save:
            interpolate = self.integrator.interpolate if self.dense else None
            start_ctx = run.context
            if self.program is not None and _may_save_at_start(run.ts, run.t0):
                # a save at the start time sees the state after the updates due then (Drake's AdvanceTo(t0))
                s0 = self.start_updates(s0)
                start_ctx = self.context_at(s0, s0.clock.t, s0.x)
            saves0 = initial_saves(run.record, start_ctx, run.ts, run.t0, run.aux.get("saves_at_start"))
            s, (n_saved, buf) = run_with_saving(
                s0,
                run.ts,
                run.t_final,
                self.advance,
                self.running,
                self.context_at,
                run.record,
                saves0,
                self.while_loop,
                interpolate,
                self.dense_window,
            )
            unfinished = (s.clock.t < run.t_final) | (n_saved < n_save)
        else:
            s = self.advance(s0, run.t_final)
            buf = record_buffer(run.record, run.context, 0)
            unfinished = s.clock.t < run.t_final
        return self.output(s, buf, unfinished)

    def start_updates(self, s: LoopState) -> LoopState:
        """The first step's start-of-step updates, done before the loop (whose first step then skips
        them, as after a rejected attempt)."""
        program, ev = self.program, s.events
        assert program is not None  # (called for systems with events only)
        base = self.context_at(s, s.clock.t, s.x)
        base, k_ev, n_u, n_d, u_status = program.updates(base, ev.periodic, ~ev.step_open, ev.witness_pending)
        events = ev._replace(
            rest=get_rest(base),
            periodic=k_ev,
            step_open=jnp.array(True),
            counts=ev.counts + jnp.stack([jnp.zeros((), jnp.int32), n_d, n_u]),
            witness_pending=jnp.zeros_like(ev.witness_pending),
            status=program.fold_in(ev.status, u_status),
        )
        return s._replace(x=base.get_continuous_state_vector(), events=events)

    def output(self, s: LoopState, buf: Any, unfinished: Array) -> LoopOutput:
        """The loop's output: a run that stopped early with status ok ran out of attempts."""
        c, clock, integrator = s.counters, s.clock, self.integrator
        if self.program is not None:
            # a run an event handler stopped is finished; one that failed has that status (a guard the
            # state went back through is a failure naming its witness)
            event_status = self.program.guard_status(s.events.status, s.events.guard)
            unfinished = unfinished & ~EventProgram.stopped(event_status)
            status = jnp.where(event_status[0] == FAILED, STATUS_EVENT_FAILED, c.status)
        else:
            status = c.status
        status = jnp.where(unfinished & (status == STATUS_OK), STATUS_MAX_STEPS, status).astype(jnp.int32)
        # (the loop's packed clock and counters as they are: no kernel per number in the program)
        stats = IntegratorStatistics(clock.packed, c.packed, integrator.newton_counts(s.integrator), self.fixed)
        segments = s.segments if self.trajectory else None
        if self.program is not None:
            ev = s.events
            return LoopOutput(
                clock.t,
                s.x,
                buf,
                stats,
                status,
                ev.rest,
                ev.logs,
                ev.counts,
                ev.witness_pending,
                event_status,
                segments,
            )
        return LoopOutput(clock.t, s.x, buf, stats, status, segments=segments)
