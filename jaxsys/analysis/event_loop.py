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
Drake's ``AdvanceTo`` does; :func:`advance_pending_events` performs them. Periodic event times are
``offset + k * period`` from integer counters (no accumulated rounding); times within a relative
1e-12 are simultaneous.

Imports (within jaxsys): the framework's ``context``, ``dispatch``, ``events``, ``system``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context, DiscreteValues
from ..framework.dispatch import all_events, dispatch_discrete, dispatch_publish, dispatch_unrestricted
from ..framework.errors import JaxsysError
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


class EventProgram:
    """The static event structure of a system, and the pure functions the loop calls."""

    def __init__(self, system: System) -> None:
        self.system = system
        evs = [e for _, e in all_events(system)]
        self.periodic = [e for e in evs if e.trigger is TriggerType.PERIODIC]
        self.by = {
            (trig, kind): [e for e in evs if e.trigger is trig and e.kind == kind]
            for trig in (TriggerType.PERIODIC, TriggerType.PER_STEP, TriggerType.INITIALIZATION)
            for kind in (PUBLISH, DISCRETE_UPDATE, UNRESTRICTED_UPDATE)
        }
        self.witnesses: list[Any] = []
        self.witness_of: dict[int, int] = {}
        # the publish events that are logged during the loop
        self.loop_publish = self.by[(TriggerType.PER_STEP, PUBLISH)] + self.by[(TriggerType.PERIODIC, PUBLISH)]
        self.has_events = bool(evs)

    def bind_witnesses(self, context: Context) -> None:
        """Fix the witness functions (static for a simulation) from the start context."""
        self.witnesses = self.system.get_witness_functions(context)
        self.witness_of = {id(w.event): j for j, w in enumerate(self.witnesses) if w.event is not None}
        self.loop_publish = self.loop_publish + [
            w.event for w in self.witnesses if w.event is not None and w.event.kind == PUBLISH
        ]
        self.has_events = self.has_events or bool(self.witnesses)

    def aligned(self, t0: float, h: float) -> bool:
        """True if every periodic event time lies on the fixed-step grid t0 + n h (so a fixed-step
        run never has to shorten a step to land on one)."""
        for e in self.periodic:
            for value in ((e.offset - t0) / h, e.period / h):
                if abs(value - round(value)) > 1e-9 * max(1.0, abs(value)):
                    return False
            if e.offset < t0 and abs((t0 - e.offset) / e.period - round((t0 - e.offset) / e.period)) > 1e-9:
                return False
        return True

    def _witness_events(self, kind: str) -> list[Event]:
        return [w.event for w in self.witnesses if w.event is not None and w.event.kind == kind]

    def witness_values(self, context: Context) -> Array:
        """All witness values at ``context``, shape (number of witnesses,)."""
        return jnp.stack([self.system._evaluate_witness_raw(context, w) for w in self.witnesses])

    def triggered(self, w0: Array, w1: Array) -> Array:
        """Per witness: does going from w0 to w1 trigger it (its direction)?"""
        return jnp.stack([w.direction.triggered(w0[j], w1[j]) for j, w in enumerate(self.witnesses)])

    def no_witness_flags(self) -> Array:
        return jnp.zeros((len(self.witnesses),), bool)

    def __bool__(self) -> bool:
        return self.has_events

    # ----- counters of periodic events ------------------------------------------------------
    def init_counters(self, t0: Array, updates_at_start: bool, publishes_at_start: bool) -> Array:
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
        :func:`~jaxsys.framework.events.time_tolerance`)? An occurrence found before t (which the
        loop's truncation of steps at event times prevents) is due too: late, never lost."""
        if not self.periodic:
            return jnp.zeros((0,), bool)
        return self.next_times(k, t.dtype) <= t + _time_tolerance(t)

    def _mask(self, events: list[Event], due: Array, gate: Array, witness_flags: Array | None) -> Array:
        """Activity of ``events``: periodic ones when due, witness ones when their witness
        triggered, per-step ones always; all gated."""
        act = []
        for e in events:
            if e.trigger is TriggerType.PERIODIC:
                act.append(due[self.periodic.index(e)] & gate)
            elif e.trigger is TriggerType.WITNESS:
                act.append(witness_flags[self.witness_of[id(e)]] & gate)
            else:
                act.append(jnp.asarray(gate))
        return jnp.stack(act) if act else jnp.zeros((0,), bool)

    # ----- the phases -------------------------------------------------------------------------
    def updates(
        self, context: Context, k: Array, gate: Array, witness_flags: Array | None = None
    ) -> tuple[Context, Array, Array, Array]:
        """Start-of-step updates at the context's time (if ``gate``): unrestricted, then discrete;
        including the update events of witnesses that triggered at the end of the previous step.

        Returns (new context, new counters, number of unrestricted, number of discrete updates)."""
        if witness_flags is None:
            witness_flags = self.no_witness_flags()
        t = context.get_time()
        due = self.due(k, t)
        n_u = n_d = jnp.zeros((), jnp.int32)
        u_events = (
            self.by[(TriggerType.PER_STEP, UNRESTRICTED_UPDATE)]
            + self.by[(TriggerType.PERIODIC, UNRESTRICTED_UPDATE)]
            + self._witness_events(UNRESTRICTED_UPDATE)
        )
        if u_events:
            act = self._mask(u_events, due, gate, witness_flags)
            state = dispatch_unrestricted(self.system, context, EventCollection(u_events, act))
            context = context.with_state(state)
            n_u = jnp.any(act).astype(jnp.int32)
        d_events = (
            self.by[(TriggerType.PER_STEP, DISCRETE_UPDATE)]
            + self.by[(TriggerType.PERIODIC, DISCRETE_UPDATE)]
            + self._witness_events(DISCRETE_UPDATE)
        )
        if d_events:
            act = self._mask(d_events, due, gate, witness_flags)
            values = dispatch_discrete(self.system, context, EventCollection(d_events, act))
            context = context.with_discrete_state(values)
            n_d = jnp.any(act).astype(jnp.int32)
        k = self.advance(k, due, gate, kinds=(UNRESTRICTED_UPDATE, DISCRETE_UPDATE))
        return context, k, n_u, n_d

    def advance(self, k: Array, due: Array, gate: Array, kinds: tuple[str, ...]) -> Array:
        if not self.periodic:
            return k
        inc = jnp.stack([due[i] & gate & (e.kind in kinds) for i, e in enumerate(self.periodic)])
        return k + inc.astype(k.dtype)

    def publishes(
        self, context: Context, k: Array, gate: Array, logs: tuple[Any, ...], witness_flags: Array | None = None
    ) -> tuple[Array, tuple[Any, ...], Array]:
        """End-of-step publishes at the context's time (if ``gate``), recorded into ``logs``;
        including the publish events of witnesses that triggered in this step."""
        if not self.loop_publish:
            return k, logs, jnp.zeros((), jnp.int32)
        if witness_flags is None:
            witness_flags = self.no_witness_flags()
        t = context.get_time()
        due = self.due(k, t)
        act = self._mask(self.loop_publish, due, gate, witness_flags)
        values = dispatch_publish(self.system, context, EventCollection(self.loop_publish, act))
        logs = tuple(_log_write(log, act[i], t, v) for i, (log, v) in enumerate(zip(logs, values)))
        k = self.advance(k, due, gate, kinds=(PUBLISH,))
        return k, logs, jnp.any(act).astype(jnp.int32)

    def initialize(self, context: Context) -> tuple[Context, Any]:
        """Initialization events: unrestricted, then discrete updates, then initialization publishes
        (the per-step and periodic publishes due at the start are the caller's). Returns the new
        context and the initialization publish values."""
        u = self.by[(TriggerType.INITIALIZATION, UNRESTRICTED_UPDATE)]
        if u:
            context = context.with_state(dispatch_unrestricted(self.system, context, EventCollection(u)))
        d = self.by[(TriggerType.INITIALIZATION, DISCRETE_UPDATE)]
        if d:
            context = context.with_discrete_state(dispatch_discrete(self.system, context, EventCollection(d)))
        p = self.by[(TriggerType.INITIALIZATION, PUBLISH)]
        init_values = dispatch_publish(self.system, context, EventCollection(p)) if p else ()
        return context, init_values

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
                first = max(0, int(np.ceil((float(t0) - e.offset) / e.period - 1e-9)))
                last = int(np.floor((float(t_final) - e.offset) / e.period + 1e-9))
                out.append(max(last - first + 1, 1))
            else:
                out.append(default)
        return out


def _log_write(log: PublishLog, active: Array, t: Array, value: Any) -> PublishLog:
    cap = log.times.shape[0]
    i = jnp.clip(log.count, 0, cap - 1)
    write = active & (log.count < cap)
    times = log.times.at[i].set(jnp.where(write, t, log.times[i]))
    values = jax.tree_util.tree_map(lambda buf, v: buf.at[i].set(jnp.where(write, v, buf[i])), log.values, value)
    return dataclasses.replace(log, times=times, values=values, count=log.count + active.astype(log.count.dtype))


def advance_pending_events(
    system: System, context: Context, pending_witness_events: Any = None, count_into: dict[str, Any] | None = None
) -> Context:
    """Perform the updates due at the context's time: per-step and periodic unrestricted, then
    discrete updates, and those of the witnesses in ``pending_witness_events`` (a result's field of
    that name) (Drake's ``Simulator::AdvancePendingEvents``). No publishes, no integration.

    A simulation continued from the result must then pass ``updates_at_start=False`` (and no pending
    witness events) to :func:`~jaxsys.simulate` (the :class:`~jaxsys.Simulator` does this for you).
    ``count_into``: a dict whose ``num_unrestricted_updates`` / ``num_discrete_updates`` are
    incremented by the updates performed (concrete values only; the Simulator passes its statistics).
    """
    system.validate_context(context)
    program = EventProgram(system)
    program.bind_witnesses(context)
    flags = program.no_witness_flags()
    if pending_witness_events is not None:
        given = jnp.asarray(pending_witness_events)
        if given.shape != flags.shape or given.dtype != bool:
            raise JaxsysError(
                f"advance_pending_events: pending_witness_events must be a bool array of shape {flags.shape} (one "
                f"per witness function of System {system.get_system_id_string()}); got {given.dtype}{given.shape}."
            )
        flags = given
    k = program.init_counters(context.get_time(), True, True)
    new, _, n_u, n_d = program.updates(context, k, jnp.array(True), flags)
    if count_into is not None:  # (the Simulator's statistics: Drake counts these updates)
        count_into["num_unrestricted_updates"] = count_into.get("num_unrestricted_updates", 0) + int(n_u)
        count_into["num_discrete_updates"] = count_into.get("num_discrete_updates", 0) + int(n_d)
    return new
