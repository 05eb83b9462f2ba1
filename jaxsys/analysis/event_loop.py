"""Events inside the simulation loop (Drake's ``Simulator::Step`` ordering).

One Drake step starting at time t:

1. unrestricted updates: per-step events and periodic events due at t;
2. discrete updates: the same, seeing the state after step 1;
3. one integration step to at most the next event time (truncated to land on it, with the stretch
   rule), the next ``save_at`` time, or ``t_final``;
4. publishes at the new time: per-step events and periodic events due then; their values are
   recorded in the publish log.

``simulate`` runs initialization events first (unrestricted, discrete, then publishes, including
periodic publishes due at the start time). Updates due exactly at ``t_final`` are left pending, as
Drake's ``AdvanceTo`` does; [`advance_pending_events`][jaxsys.advance_pending_events] performs them. Periodic event
times are
``offset + k * period`` from integer counters (no accumulated rounding); times within a relative
1e-12 are simultaneous.

Imports (within jaxsys): the framework's ``context``, ``dispatch``, ``events``, ``system``; ``compile_cache``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context, DiscreteValues
from ..framework.dispatch import (
    all_events,
    dispatch_discrete_with_status,
    dispatch_publish,
    dispatch_publish_with_status,
    dispatch_unrestricted_with_status,
    event_leaves,
    leaf_contexts_with_inputs,
    leaf_next_time,
    timed_leaves,
    witness_leaves,
)
from ..framework.errors import JaxsysError
from ..framework.event_status import DID_NOTHING, FAILED, REACHED_TERMINATION, SUCCEEDED, EventStatus, split_status
from ..framework.events import (
    DISCRETE_UPDATE,
    PUBLISH,
    UNRESTRICTED_UPDATE,
    Event,
    EventCollection,
    TriggerType,
    _time_tolerance,
)
from ..framework.system import System
from ..framework.witness import WitnessFunctionDirection
from .compile_cache import SystemCache, deref
from .precision import full_precision


Array = jax.Array


class PublishLog(eqx.Module):
    """Values recorded by one publish event during a simulation.

    **Fields:**
    - `times`: shape ``(capacity,)``; entries past ``count`` are NaN.
    - `values`: the callback's pytree with a leading axis ``capacity`` (zeros past ``count``).
    - `count`: number of publishes (may exceed ``capacity``: only the first ``capacity`` are kept).
    - `name`: the event's name (static).
    """

    times: Array
    values: Any
    count: Array
    name: str = eqx.field(static=True, default="")
    event_uid: int = eqx.field(static=True, default=0)

    def sample_times(self) -> Array:
        """The publish times (concrete results only): Drake ``VectorLog::sample_times``."""
        return self.times[: int(min(int(self.count), self.times.shape[0]))]

    def data(self) -> Any:
        """The recorded values (concrete results only), leading axis = time (Drake ``VectorLog::data``
        is its transpose)."""
        n = int(min(int(self.count), self.times.shape[0]))
        return jax.tree_util.tree_map(lambda v: v[:n], self.values)


def set_rest(context: Context, rest: tuple[Any, Any]) -> Context:
    """``context`` with discrete groups and abstract values ``rest`` (flattened diagram order)."""
    groups, abstract = rest
    if groups:
        context = context.with_discrete_state(DiscreteValues(tuple(groups), context.system_id))
    for i, v in enumerate(abstract):
        context = context.with_abstract_state(i, v)
    return context


def get_rest(context: Context) -> tuple[Any, Any]:
    """The discrete groups and abstract values of ``context`` (the non-continuous state)."""
    return (tuple(context.get_discrete_state().groups), tuple(context.get_abstract_state().values))


def has_events(system: System, monitor: Any = None) -> bool:
    """Whether a run of ``system`` has events to handle: declared events, a monitor, timed events
    (``do_calc_next_update_time``) or witness functions (a witness without an event still ends the step
    at its isolated time, as Drake's does). This is the truth value of its `EventProgram`."""
    return bool(all_events(system)) or monitor is not None or bool(timed_leaves(system)) or bool(witness_leaves(system))


class EventProgram:
    """The static event structure of a system for one run, and the pure functions the loop calls.

    Built by its constructor, before the loop is traced, and frozen then: the witness functions
    (every one ``do_get_witness_functions`` returns), the table of every reason a handler or the
    monitor may report (found by tracing them once, abstractly) and whether any of them can stop the
    run (`can_stop`) are fixed; setting an attribute afterwards is an error. ``context``: a context of
    the system (its structure is what counts; values are not read)."""

    _frozen: bool = False

    def __init__(self, system: System, context: Context, monitor: Any = None) -> None:
        self.system = system
        self.monitor = monitor
        # (system path, message) of every status a handler may report: the loop carries a status as
        # (severity, index into this table)
        self._reasons: list[tuple[str, str]] = []
        self._stop_bound = DID_NOTHING  # the most severe status any handler may report
        evs = [e for _, e in all_events(system)]
        self.periodic = [e for e in evs if e.trigger is TriggerType.PERIODIC]
        self.by = {
            (trig, kind): [e for e in evs if e.trigger is trig and e.kind == kind]
            for trig in (TriggerType.PERIODIC, TriggerType.PER_STEP, TriggerType.INITIALIZATION)
            for kind in (PUBLISH, DISCRETE_UPDATE, UNRESTRICTED_UPDATE)
        }
        self.witnesses: list[Any] = []
        self.conditional_witnesses = False
        self.witness_of: dict[int, int] = {}
        # events a leaf schedules with do_calc_next_update_time (Drake's timed events), and the
        # leaves that override it
        self.timed = [e for e in evs if e.trigger is TriggerType.TIMED]
        self.timed_leaves = timed_leaves(system)
        # the publish events that are logged during the loop
        self.loop_publish = (
            self.by[(TriggerType.PER_STEP, PUBLISH)]
            + self.by[(TriggerType.PERIODIC, PUBLISH)]
            + [e for e in self.timed if e.kind == PUBLISH]
        )
        self.has_events = has_events(system, monitor)
        self.witnesses = []
        # (witness index, sign) of the one-sided witnesses whose event is an update: their guards are
        # watched after each update (see `guard_status`)
        self.guarded: list[tuple[int, float]] = []
        if witness_leaves(system):
            self._bind_witnesses(context)
        # the failure each guard may report (see `guard_status`): registered as a reason, carried by
        # the guard watch itself, so that it costs the handlers' statuses nothing
        self.guard_reasons: list[int] = []
        for j, _ in self.guarded:
            self._reasons.append(self._guard_reason(j))
            self.guard_reasons.append(len(self._reasons) - 1)
        # Every stop of the loop is an occurrence of every periodic event when the run has no
        # continuous state (no integrator steps between events), no witnesses or timed events, and
        # its periodic events share one grid: then the updates are due at (nearly) every step (not
        # at a final step off the grid), and the handlers run unconditionally and select (see
        # `EventCollection`'s ``dense``) instead of branching (unless a handler has side effects: see
        # `_probe`).
        grids = {_timing(e) for e in self.periodic}
        self.dense = (
            len(grids) == 1
            and context.num_continuous_states() == 0
            and not self.witnesses
            and not self.timed
            and not self.timed_leaves
        )
        self._probe(context)
        self._frozen = True

    def __setattr__(self, name: str, value: Any) -> None:
        if self._frozen:
            raise AttributeError(f"EventProgram is frozen once built (setting {name!r}).")
        object.__setattr__(self, name, value)

    @property
    def reasons(self) -> tuple[tuple[str, str], ...]:
        """(system path, message) of every status a handler or the monitor may report."""
        return tuple(self._reasons)

    @property
    def can_stop(self) -> bool:
        """Whether any handler (or the monitor) may stop the run (reach termination or fail): if none
        can, the loop carries no status logic."""
        return self._stop_bound >= REACHED_TERMINATION

    # ----- statuses ------------------------------------------------------------------------------
    def pack(self, status: EventStatus) -> Array:
        """``status`` as the loop carries it: int32 ``[severity, index into self.reasons]`` (while the
        program is built, its reasons are registered; afterwards a reason or a severity that its
        handlers did not show then is an error, never a silently dropped status)."""
        index = []
        for r in status.reasons:
            if r not in self._reasons:
                if self._frozen:
                    raise JaxsysError(
                        f"An event handler or monitor of System {self.system.get_system_id_string()} reported a "
                        f"status ({r[0]}: {r[1]!r}) it did not report when the simulation was set up: the statuses "
                        f"a handler may return must not depend on the values of the context (return "
                        f"EventStatus.failed(...) / reached_termination(...) under a jnp condition, e.g. with "
                        f"EventStatus.select)."
                    )
                self._reasons.append(r)
            index.append(self._reasons.index(r))
        if self._frozen and status.bound > self._stop_bound and status.bound >= REACHED_TERMINATION:
            raise JaxsysError(
                f"An event handler or monitor of System {self.system.get_system_id_string()} may stop the run, which "
                f"it did not show when the simulation was set up: the statuses a handler may return must not "
                f"depend on the values of the context."
            )
        if not self._frozen:
            self._stop_bound = max(self._stop_bound, status.bound)
        if not index:
            return jnp.stack([jnp.asarray(status.severity, jnp.int32), jnp.asarray(-1, jnp.int32)])
        table = jnp.asarray(index, jnp.int32)
        which = jnp.where(status.which >= 0, table[jnp.clip(status.which, 0, len(index) - 1)], -1)
        return jnp.stack([jnp.asarray(status.severity, jnp.int32), which.astype(jnp.int32)])

    def _probe(self, context: Context) -> None:
        """Trace every handler once, abstractly (``jax.eval_shape``): initialization events, the step's
        updates and publishes (witness and timed ones included) and the monitor, registering every
        reason they may report and the most severe status."""
        if not self.has_events:
            return
        k = self.init_counters(context.get_time(), True, True)
        logs = self.allocate_logs(context, [1] * len(self.loop_publish))

        def initialization(ctx: Context) -> None:
            self.pack(self.initialize(ctx)[2])

        def step(ctx: Context, k: Array, logs: Any, flags: Array, gate: Array) -> None:
            self.pack(self.updates(ctx, k, gate, flags)[4])
            self.pack(self.publishes(ctx, k, gate, logs, flags)[3])

        jax.eval_shape(initialization, context)
        flags = jnp.ones((len(self.witnesses) + len(self.timed),), bool)
        jaxpr = jax.make_jaxpr(step)(context, k, logs, flags, jnp.array(True))
        if jaxpr.effects:
            # a handler with side effects (``jax.debug.callback``, ``io_callback``, ...) must not run
            # where its event is not due: branch, as Drake dispatches only the due events
            self.dense = False

    def fold_in(self, packed: Array, status: EventStatus) -> Array:
        """``packed`` with ``status`` folded in (first worst); unchanged when no handler can stop the
        run (what the loop carries is then only the initialization's status)."""
        if not self.can_stop:
            return packed
        return self.fold(packed, self.pack(status))

    def is_stopped(self, packed: Array) -> Array | None:
        """Whether the run stopped (None when no handler can stop it)."""
        return self.stopped(packed) if self.can_stop else None

    @staticmethod
    def fold(packed: Array, later: Array) -> Array:
        """First worst: ``later`` replaces ``packed`` only if more severe."""
        return jnp.where(later[0] > packed[0], later, packed)

    @staticmethod
    def stopped(packed: Array) -> Array:
        """The run stops: a status that reached termination or failed."""
        return packed[0] >= REACHED_TERMINATION

    def run_monitor(self, context: Context) -> EventStatus | None:
        """The monitor's status at ``context`` (None without a monitor; succeeded if it returns None)."""
        if self.monitor is None:
            return None
        value = self.monitor(context)
        if value is None:
            return EventStatus.succeeded()
        _, status = split_status(value)
        if status is None:
            raise JaxsysError(
                f"simulate: the monitor must return None or a jaxsys.EventStatus (Drake's monitor returns an "
                f"EventStatus); got {type(value).__name__}."
            )
        return status.with_default_system("monitor")

    def _bind_witnesses(self, context: Context) -> None:
        """Fix the witness functions (static for a simulation): every one the system's
        ``do_get_witness_functions`` returns for a context whose values are unknown (traced), so the
        list cannot depend on them; mode-dependent ones carry a condition (``active_if``)."""
        box: dict[str, Any] = {}

        def probe(c: Context) -> Any:
            box["items"] = self.system._witness_items(c)
            return None

        try:
            jax.eval_shape(probe, context)
        except (jax.errors.TracerBoolConversionError, jax.errors.ConcretizationTypeError) as e:
            raise JaxsysError(
                f"do_get_witness_functions of a subsystem of System {self.system.get_system_id_string()} chooses "
                f"its witnesses with Python control flow on a value of the context. The set of witnesses is fixed "
                f"when the simulation is traced: return every witness, and a mode-dependent one as "
                f"w.active_if(condition) (condition a jnp bool of the context); it is then monitored only in the "
                f"steps that start with the condition true."
            ) from e
        items = box["items"]
        self.witnesses = [w for w, _ in items]
        self.conditional_witnesses = any(cond is not None for _, cond in items)
        self.witness_of = {id(w.event): j for j, w in enumerate(self.witnesses) if w.event is not None}
        self.loop_publish = self.loop_publish + [
            w.event for w in self.witnesses if w.event is not None and w.event.kind == PUBLISH
        ]
        self.has_events = self.has_events or bool(self.witnesses)
        signs = {
            WitnessFunctionDirection.POSITIVE_THEN_NON_POSITIVE: 1.0,
            WitnessFunctionDirection.NEGATIVE_THEN_NON_NEGATIVE: -1.0,
        }
        self.guarded = [
            (j, signs[w.direction])
            for j, w in enumerate(self.witnesses)
            if w.event is not None and w.event.kind != PUBLISH and w.direction in signs
        ]

    def aligned(self, t0: float, h: float) -> bool:
        """True if every periodic event time lies on the fixed-step grid t0 + n h (so a fixed-step
        run never has to shorten a step to land on one)."""
        for e in self.periodic:
            period, offset = _timing(e)
            for value in ((offset - t0) / h, period / h):
                if abs(value - round(value)) > 1e-9 * max(1.0, abs(value)):
                    return False
            if offset < t0 and abs((t0 - offset) / period - round((t0 - offset) / period)) > 1e-9:
                return False
        return True

    def _witness_events(self, kind: str) -> list[Event]:
        return [w.event for w in self.witnesses if w.event is not None and w.event.kind == kind]

    def witness_values(self, context: Context) -> Array:
        """All witness values at ``context``, shape (number of witnesses,)."""
        return jnp.stack([self.system._evaluate_witness_raw(context, w) for w in self.witnesses])

    def witness_activity(self, context: Context) -> Array | None:
        """Per witness, whether it is active in ``context`` (None when none is mode-dependent)."""
        if not self.conditional_witnesses:
            return None
        return self.system.witness_activity(context)[1]

    def masked(self, active: Array | None) -> Any:
        """This program with the witnesses not ``active`` silenced for a step (their values read as a
        constant 1, which never triggers); itself when ``active`` is None."""
        return self if active is None else _MaskedWitnesses(self, active)

    def triggered(self, w0: Array, w1: Array) -> Array:
        """Per witness: does going from w0 to w1 trigger it (its direction)?"""
        return jnp.stack([w.direction.triggered(w0[j], w1[j]) for j, w in enumerate(self.witnesses)])

    def initial_guard(self, dtype: Any) -> Any:
        """The guard watch at the start of a run: nothing watched (() when no witness is guarded)."""
        return jnp.zeros((3, len(self.guarded)), dtype) if self.guarded else ()

    def _guard_values(self, make_ctx: Any, t: Array, x: Array) -> Array:
        """The guarded witnesses' values at ``(t, x)``, signed so that the triggered side is <= 0."""
        idx = np.asarray([j for j, _ in self.guarded])
        sign = jnp.asarray([sg for _, sg in self.guarded], t.dtype)
        return sign * self.witness_values(make_ctx(t, x))[idx]

    def guard_start(
        self, guard: Array, consumed: Array, active: Array | None, make_ctx: Any, f0: Array, t: Array, x: Array
    ) -> Array:
        """The guard watch after a step's start-of-step updates (see `guard_status`): ``guard`` as
        carried (``[watched, highest value since the update, failed]`` per guarded witness),
        ``consumed`` (per witness: its update ran at this step's start), ``active`` (per witness,
        monitored; None: all), the step's context maker, the derivative ``f0`` at its start, and the
        start ``(t, x)``. A guard whose update just ran is watched if it left the witness on its
        triggered side, not moving deeper."""
        idx = np.asarray([j for j, _ in self.guarded])
        t_, x_ = jax.lax.stop_gradient(t), jax.lax.stop_gradient(x)
        updated = consumed[idx] if active is None else consumed[idx] & active[idx]
        # the signed witnesses and their rates along the vector field at the updated start (a lax.cond
        # on `updated` measured no faster: it is a select under vmap, and a conditional costs a step too)
        y, dy = jax.jvp(
            lambda tt, xx: self._guard_values(make_ctx, tt, xx),
            (t_, x_),
            (jnp.ones_like(t_), jax.lax.stop_gradient(f0)),
        )
        fresh = updated & (y <= 0) & (dy >= 0)
        return jnp.stack([jnp.where(fresh, 1.0, guard[0]).astype(t.dtype), jnp.where(fresh, y, guard[1]), guard[2]])

    def guard_end(self, guard: Array, active: Array | None, make_ctx: Any, t: Array, x: Array) -> tuple[Array, Array]:
        """The guard watch at an accepted step's end ``(t, x)``: per guarded witness, whether the state
        went back through its guard (lower than its highest value since the update: the step is not
        taken), and the watch carried on (ended where the witness is back on its armed side)."""
        y = self._guard_values(make_ctx, jax.lax.stop_gradient(t), jax.lax.stop_gradient(x))
        watched = guard[0] > 0
        if active is not None:
            watched = watched & active[np.asarray([j for j, _ in self.guarded])]
        high = guard[1]
        fell = watched & (y < high - 8.0 * jnp.finfo(t.dtype).eps * jnp.abs(high))
        keep = watched & (y <= 0) & ~fell
        return jnp.stack([keep.astype(t.dtype), jnp.where(keep, jnp.maximum(high, y), high), guard[2]]), fell

    def _guard_reason(self, j: int) -> tuple[str, str]:
        """(system path, message) of the failure of guarded witness ``j`` (see `guard_status`)."""
        w = self.witnesses[j]
        side = "w <= 0" if w.direction is WitnessFunctionDirection.POSITIVE_THEN_NON_POSITIVE else "w >= 0"
        message = (
            f"the update event of witness {w.description!r} left the state on its guard ({side} after the "
            f"update, not moving deeper) and the state then went back through the guard, where no crossing "
            f"can be detected: the events accumulate (Zeno behaviour, e.g. bounces shrinking below what "
            f"witness isolation resolves) or the model reaches a resting contact its events do not handle. "
            f"The run stopped here rather than pass through the guard. Model the contact (a mode entered "
            f"when the speed after an impact is below a threshold), or end the run with a termination."
        )
        return EventStatus.failed(w.system, message).reasons[0]

    def guard_status(self, status: Array, guard: Any) -> Array:
        """The packed status of the first guarded witness whose guard the state went back through
        without a crossing (``guard``'s failed row), else ``status``.

        The rule (issue #36: never pass a guard silently). A one-sided witness (positive then
        non-positive, or the reverse) whose event is an update is a guard the update is meant to send
        the state away from (an impact law). After such an update leaves the witness on its triggered
        side (w <= 0 for positive-then-non-positive) and not moving deeper (dw/dt >= 0 along the vector
        field), the loop watches it: back on the armed side (w > 0) at a step's end, the watch ends;
        lower than the highest value it had since the update, the state has gone back through the guard
        where no crossing can be detected (a crossing needs a positive start), so that step is not
        taken: it is retried with half the step (a bounce the long step hid is then seen and handled),
        and once the step is at time's resolution the run stops with this status at its start (the
        state the update left) instead of passing through. This is what Zeno behaviour (a bouncing ball
        whose bounces shrink below what isolation resolves) and a resting contact (restitution 0) look
        like. An
        update that leaves the state moving on through the guard (dw/dt < 0: a threshold crossed on
        purpose) is not watched."""
        if not self.guarded:
            return status
        failed = guard[2] > 0
        which = jnp.asarray(self.guard_reasons, jnp.int32)[jnp.argmax(failed)]
        return jnp.where(jnp.any(failed), jnp.stack([jnp.asarray(FAILED, jnp.int32), which]), status)

    @staticmethod
    def guard_failed(guard: Any) -> Array:
        """Whether the state went back through a guard (the run stops)."""
        return jnp.any(guard[2] > 0)

    def no_witness_flags(self, xp: Any = jnp) -> Array:
        """All-false event flags: one per witness function, then one per timed event (``xp=np``: on
        the host, for a compiled program's argument)."""
        return xp.zeros((len(self.witnesses) + len(self.timed),), bool)

    # ----- timed events (do_calc_next_update_time) ------------------------------------------------
    def next_timed(self, context: Context) -> tuple[Array, Array] | None:
        """The earliest time a leaf's ``do_calc_next_update_time`` asks for, and per timed event
        whether it is scheduled then (None when no leaf overrides it)."""
        if not self.timed_leaves:
            return None
        t = context.get_time()
        leaves = event_leaves(self.system)
        ctxs = leaf_contexts_with_inputs(self.system, context)
        times, asked = [], []
        for li in self.timed_leaves:
            leaf = leaves[li]
            t_i, flags = leaf_next_time(leaf, ctxs[li], self.timed, t)
            times.append(t_i)
            asked.append(flags)
        times_ = jnp.stack(times)
        t_next = jnp.min(times_)
        tol = _time_tolerance(t_next)
        mask = jnp.zeros((len(self.timed),), bool)
        for t_i, flags in zip(times, asked):
            mask = mask | (flags & (t_i <= t_next + tol))
        return t_next, mask

    def __bool__(self) -> bool:
        return self.has_events

    # ----- counters of periodic events ------------------------------------------------------
    def init_counters(self, t0: Array, updates_at_start: bool | Array, publishes_at_start: bool) -> Array:
        ks = []
        for e in self.periodic:
            inclusive = updates_at_start if e.kind != PUBLISH else publishes_at_start
            ks.append(e.next_time_index(t0, inclusive=inclusive))
        return jnp.stack(ks) if ks else jnp.zeros((0,), jnp.int32)

    def next_times(self, k: Array, dtype: Any) -> Array:
        if not self.periodic:
            return jnp.zeros((0,), dtype)
        return jnp.stack([e.occurrence(k[i], dtype) for i, e in enumerate(self.periodic)])

    def next_event_time(self, k: Array, dtype: Any) -> Array:
        if not self.periodic:
            return jnp.asarray(jnp.inf, dtype)
        return jnp.min(self.next_times(k, dtype))

    def due(self, k: Array, t: Array) -> Array:
        """Per periodic event: is its next occurrence at t (within the simultaneity tolerance,
        `time_tolerance`)? An occurrence found before t (which the
        loop's truncation of steps at event times prevents) is due too: late, never lost."""
        if not self.periodic:
            return jnp.zeros((0,), bool)
        return self.next_times(k, t.dtype) <= t + _time_tolerance(t)

    def _mask(self, events: list[Event], due: Array, gate: Array, witness_flags: Array | None) -> Array:
        """Activity of ``events``: periodic ones when due, witness and timed ones when their flag is
        set (``witness_flags``: per witness, then per timed event), per-step ones always; all gated."""
        act = []
        n_w = len(self.witnesses)
        flags: Any = witness_flags  # (given whenever witness or timed events are among ``events``)
        for e in events:
            if e.trigger is TriggerType.PERIODIC:
                act.append(due[self.periodic.index(e)] & gate)
            elif e.trigger is TriggerType.WITNESS:
                act.append(flags[self.witness_of[id(e)]] & gate)
            elif e.trigger is TriggerType.TIMED:
                act.append(flags[n_w + _index_of(self.timed, e)] & gate)
            else:
                act.append(jnp.asarray(gate))
        return jnp.stack(act) if act else jnp.zeros((0,), bool)

    # ----- the phases -------------------------------------------------------------------------
    def updates(
        self, context: Context, k: Array, gate: Array, witness_flags: Array | None = None
    ) -> tuple[Context, Array, Array, Array, EventStatus]:
        """Start-of-step updates at the context's time (if ``gate``): unrestricted, then discrete;
        including the update events of witnesses that triggered at the end of the previous step.

        Returns (new context, new counters, number of unrestricted, number of discrete updates, their
        combined status). As Drake's: an update that did nothing or failed is neither applied nor
        counted, and a failed unrestricted update skips the discrete updates."""
        if witness_flags is None:
            witness_flags = self.no_witness_flags()
        t = context.get_time()
        due = self.due(k, t)
        n_u = n_d = jnp.zeros((), jnp.int32)
        status = EventStatus.did_nothing()
        u_events = (
            self.by[(TriggerType.PER_STEP, UNRESTRICTED_UPDATE)]
            + self.by[(TriggerType.PERIODIC, UNRESTRICTED_UPDATE)]
            + self._witness_events(UNRESTRICTED_UPDATE)
            + [e for e in self.timed if e.kind == UNRESTRICTED_UPDATE]
        )
        if u_events:
            act = self._mask(u_events, due, gate, witness_flags)
            state, status = dispatch_unrestricted_with_status(
                self.system, context, EventCollection(u_events, act, dense=self.dense)
            )
            context = context.with_state(state)
            n_u = _applied(status)
        d_events = (
            self.by[(TriggerType.PER_STEP, DISCRETE_UPDATE)]
            + self.by[(TriggerType.PERIODIC, DISCRETE_UPDATE)]
            + self._witness_events(DISCRETE_UPDATE)
            + [e for e in self.timed if e.kind == DISCRETE_UPDATE]
        )
        if d_events:
            d_gate = gate if status.bound < FAILED else gate & (status.severity != FAILED)
            act = self._mask(d_events, due, d_gate, witness_flags)
            values, d_status = dispatch_discrete_with_status(
                self.system, context, EventCollection(d_events, act, dense=self.dense)
            )
            context = context.with_discrete_state(values)
            n_d = _applied(d_status)
            status = status.keep_more_severe(d_status)
        k = self.advance(k, due, gate, kinds=(UNRESTRICTED_UPDATE, DISCRETE_UPDATE))
        return context, k, n_u, n_d, status

    def advance(self, k: Array, due: Array, gate: Array, kinds: tuple[str, ...]) -> Array:
        if not self.periodic:
            return k
        inc = jnp.stack([due[i] & gate & (e.kind in kinds) for i, e in enumerate(self.periodic)])
        return k + inc.astype(k.dtype)

    def publishes(
        self, context: Context, k: Array, gate: Array, logs: tuple[Any, ...], witness_flags: Array | None = None
    ) -> tuple[Array, tuple[Any, ...], Array, EventStatus]:
        """End-of-step publishes at the context's time (if ``gate``), recorded into ``logs``;
        including the publish events of witnesses that triggered in this step; then the monitor (if
        ``gate``). Returns the counters, logs, whether anything published, and the combined status
        (all publishes run even if one fails, as Drake's)."""
        status = EventStatus.did_nothing()
        n_p = jnp.zeros((), jnp.int32)
        if self.loop_publish:
            if witness_flags is None:
                witness_flags = self.no_witness_flags()
            t = context.get_time()
            due = self.due(k, t)
            act = self._mask(self.loop_publish, due, gate, witness_flags)
            values, status = dispatch_publish_with_status(
                self.system, context, EventCollection(self.loop_publish, act, dense=self.dense)
            )
            logs = tuple(_log_write(log, act[i], t, v) for i, (log, v) in enumerate(zip(logs, values)))
            k = self.advance(k, due, gate, kinds=(PUBLISH,))
            n_p = _applied(status)
        monitor = self.run_monitor(context)
        if monitor is not None:
            status = status.keep_more_severe(monitor.gated(gate))
        return k, logs, n_p, status

    def initialize(self, context: Context) -> tuple[Context, Any, EventStatus, Array, EventStatus, EventStatus]:
        """Initialization events: unrestricted, then discrete updates, then initialization publishes
        (the per-step and periodic publishes due at the start, and the monitor, are the caller's).
        Returns the new context, the initialization publish values, the combined status,
        ``[publishes, discrete updates, unrestricted updates]`` performed, the updates' status
        alone (what gates the caller's publishes: Drake dispatches the initialization, per-step and
        timed publishes together, so a terminating or failing initialization publish does not stop
        the others), and the initialization publishes' status alone (the caller counts the one
        combined publish dispatch by it and its own publishes' status)."""
        status = EventStatus.did_nothing()
        n_u = n_d = n_p = jnp.zeros((), jnp.int32)
        u = self.by[(TriggerType.INITIALIZATION, UNRESTRICTED_UPDATE)]
        if u:
            state, status = dispatch_unrestricted_with_status(self.system, context, EventCollection(u))
            context = context.with_state(state)
            n_u = _applied(status)
        d = self.by[(TriggerType.INITIALIZATION, DISCRETE_UPDATE)]
        if d:
            active = None if status.bound < FAILED else jnp.full((len(d),), status.severity != FAILED)
            values, d_status = dispatch_discrete_with_status(self.system, context, EventCollection(d, active))
            context = context.with_discrete_state(values)
            n_d = _applied(d_status)
            status = status.keep_more_severe(d_status)
        p = self.by[(TriggerType.INITIALIZATION, PUBLISH)]
        init_values: Any = ()
        if p:
            # (after a termination or failure of the updates Drake publishes nothing)
            active = (
                None
                if status.bound < REACHED_TERMINATION
                else jnp.full((len(p),), status.severity < REACHED_TERMINATION)
            )
            init_values, p_status = dispatch_publish_with_status(self.system, context, EventCollection(p, active))
            n_p = _applied(p_status)
            counts = jnp.stack([n_p, n_d, n_u])
            return context, init_values, status.keep_more_severe(p_status), counts, status, p_status
        return context, init_values, status, jnp.stack([n_p, n_d, n_u]), status, EventStatus.did_nothing()

    # ----- logs -----------------------------------------------------------------------------
    def allocate_logs(self, context: Context, capacities: list[int]) -> tuple[Any, ...]:
        if not self.loop_publish:
            return ()
        shapes = jax.eval_shape(lambda c: dispatch_publish(self.system, c, EventCollection(self.loop_publish)), context)
        dtype = context.time.dtype
        logs = []
        for e, shape, cap in zip(self.loop_publish, shapes, capacities):
            values = jax.tree_util.tree_map(lambda s, cap=cap: jnp.zeros((cap,) + s.shape, s.dtype), shape)
            logs.append(PublishLog(jnp.full((cap,), jnp.nan, dtype), values, jnp.zeros((), jnp.int32), e.name, e.uid))
        return tuple(logs)

    def capacities(self, t0: Any, t_final: Any, default: int) -> list[int]:
        out = []
        for e in self.loop_publish:
            if e.trigger is TriggerType.PERIODIC and t0 is not None and t_final is not None:
                period, offset = _timing(e)
                first = max(0, int(np.ceil((float(t0) - offset) / period - 1e-9)))
                last = int(np.floor((float(t_final) - offset) / period + 1e-9))
                out.append(max(last - first + 1, 1))
            else:
                out.append(default)
        return out


def _timing(event: Event) -> tuple[float, float]:
    """(period, offset) of a periodic event, s."""
    assert event.period is not None and event.offset is not None, event
    return float(event.period), float(event.offset)


def _index_of(events: list[Event], event: Event) -> int:
    for i, e in enumerate(events):
        if e is event:
            return i
    raise ValueError(event)


class _MaskedWitnesses:
    """An EventProgram whose inactive witnesses read as a constant 1 (see `EventProgram.masked`)."""

    def __init__(self, program: EventProgram, active: Array) -> None:
        self._program = program
        self._active = active

    def witness_values(self, context: Context) -> Array:
        values = self._program.witness_values(context)
        return jnp.where(self._active, values, jnp.ones_like(values))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._program, name)


def _applied(status: EventStatus) -> Array:
    """1 if a dispatch with this status counts (succeeded or reached termination), else 0 (Drake
    counts neither an update that did nothing nor one that failed)."""
    if status.bound == SUCCEEDED:
        return (status.severity == SUCCEEDED).astype(jnp.int32)
    return ((status.severity == SUCCEEDED) | (status.severity == REACHED_TERMINATION)).astype(jnp.int32)


def _log_write(log: PublishLog, active: Array, t: Array, value: Any) -> PublishLog:
    cap = log.times.shape[0]
    i = jnp.clip(log.count, 0, cap - 1)
    write = active & (log.count < cap)
    times = log.times.at[i].set(jnp.where(write, t, log.times[i]))
    values = jax.tree_util.tree_map(lambda buf, v: buf.at[i].set(jnp.where(write, v, buf[i])), log.values, value)
    return dataclasses.replace(log, times=times, values=values, count=log.count + active.astype(log.count.dtype))


def _pending_updates(system: System, context: Context, given: Any) -> tuple[Context, Array, Array, EventStatus]:
    """The updates of `advance_pending_events`: ``(new context, unrestricted and discrete updates
    performed, status)``; ``given``: the pending witness flags, or None. Full-precision products, as a
    run's (`full_precision`)."""
    with full_precision():
        return _pending_updates_impl(system, context, given)


def _pending_updates_impl(system: System, context: Context, given: Any) -> tuple[Context, Array, Array, EventStatus]:
    program = EventProgram(system, context)
    flags = program.no_witness_flags()
    if given is not None:
        if given.shape != flags.shape or given.dtype != bool:
            raise JaxsysError(
                f"advance_pending_events: pending_witness_events must be a bool array of shape {flags.shape} (one "
                f"per witness function of System {system.get_system_id_string()}, then one per timed event); got "
                f"{given.dtype}{given.shape}."
            )
        flags = given
    k = program.init_counters(context.get_time(), True, True)
    new, _, n_u, n_d, status = program.updates(context, k, jnp.array(True), flags)
    return new, n_u, n_d, status


def _build_pending_updates(ref: Any) -> Any:
    """`_pending_updates` compiled for one system, reached through its weak reference."""
    return eqx.filter_jit(lambda context, given: _pending_updates(deref(ref), context, given))


_ADVANCE_PENDING: SystemCache[Any] = SystemCache("advance_pending_events", maxsize=64)


def advance_pending_events(
    system: System, context: Context, pending_witness_events: Any = None, count_into: dict[str, Any] | None = None
) -> Context:
    """Perform the updates due at the context's time: per-step and periodic unrestricted, then
    discrete updates, and those of the witnesses in ``pending_witness_events`` (a result's field of
    that name) (Drake's ``Simulator::AdvancePendingEvents``). No publishes, no integration.

    A simulation continued from the result must then pass ``updates_at_start=False`` (and no pending
    witness events) to [`simulate`][jaxsys.simulate] (the [`Simulator`][jaxsys.Simulator] does this for you).
    ``count_into``: a dict whose ``num_unrestricted_updates`` / ``num_discrete_updates`` are
    incremented by the updates performed (concrete values only; the Simulator passes its statistics).
    """
    system.validate_context(context)
    given = None if pending_witness_events is None else jnp.asarray(pending_witness_events)
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(system)):
        new, n_u, n_d, status = _pending_updates(system, context, given)
    else:
        # (one compiled program per system, its dropped system freed with it, as simulate's: run op by op,
        # a repeated call took 38 ms for a clock with three witnesses, 16 ms under an eager vmap)
        run = _ADVANCE_PENDING.get(system, "run", _build_pending_updates)  # (filter_jit keys on the arguments)
        new, n_u, n_d, status = run(context, given)
    if status.bound >= FAILED and bool(status.failed()):
        raise JaxsysError(
            f"advance_pending_events: an update event of System {status.system()} failed at t = "
            f"{float(context.get_time())}: {status.message()}"
        )
    if count_into is not None:  # (the Simulator's statistics: Drake counts these updates)
        count_into["num_unrestricted_updates"] = count_into.get("num_unrestricted_updates", 0) + int(n_u)
        count_into["num_discrete_updates"] = count_into.get("num_discrete_updates", 0) + int(n_d)
    return new
