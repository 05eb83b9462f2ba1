"""What a LeafSystem declares about events: periodic, per-step, initialization and forced events, witness
functions, constraints, and the overridable event handlers (Drake's ``LeafSystem`` ``Declare*Event``,
``MakeWitnessFunction``, ``DoPublish``, ``DoCalcDiscreteVariableUpdates``,
``DoCalcUnrestrictedUpdate``).

`LeafEvents` is a field-less base class of [`LeafSystem`][jaxsys.LeafSystem]; its methods use the
LeafSystem's ``_spec``.

Imports (within jaxsys): ``constraints``, ``context``, ``dispatch``, ``errors``, ``events``,
``system``, ``witness``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .constraints import SystemConstraint, SystemConstraintIndex
from .context import Context, DiscreteValues, State
from .dispatch import check_state, normalize_discrete
from .errors import DeclarationError
from .event_status import DID_NOTHING, FAILED, REACHED_TERMINATION, SUCCEEDED, EventStatus, combine, split_status
from .events import DISCRETE_UPDATE, PUBLISH, UNRESTRICTED_UPDATE, Event, EventCollection, TriggerType, _call
from .system import System
from .witness import WitnessFunction, WitnessFunctionDirection


def _handler(event: Event) -> Callable[..., Any]:
    """The callback of an event the default handlers run (declared with one)."""
    assert event.callback is not None, event
    return event.callback


def _returned_none(system: System, event: Event, expected: str) -> DeclarationError:
    return DeclarationError(
        f"The update handler of {event!r} on System {system.get_system_id_string()} returned None; it must "
        f"return {expected}, or an EventStatus (e.g. EventStatus.did_nothing()) to leave the state unchanged. "
        f"(A forgotten `return` would otherwise silently keep the old state.)"
    )


def _zeros_like_shape(shape: Any) -> Any:
    return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shape)


def _applied(status: EventStatus | None, new: Any, old: Any) -> Any:
    """``new`` unless ``status`` says the update did nothing or failed (then ``old``)."""
    if status is None or status.always_applied():
        return new
    keep = (status.severity == SUCCEEDED) | (status.severity == REACHED_TERMINATION)
    return jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), new, old)


def _gated_call(
    active: Any, run: Callable[..., Any], operand: Any, dense: bool = False
) -> tuple[Any, EventStatus | None]:
    """``run(operand) -> (result, status or None)`` where ``active``; else the operand unchanged (an
    update) or zeros (a publish, ``operand`` None) with a did-nothing status. A traced ``active`` is a
    ``lax.cond``, or with ``dense`` (see `EventCollection`) ``run`` unconditionally and a
    ``jnp.where``; the status's static parts are taken from the traced call."""
    args = () if operand is None else (operand,)
    if isinstance(active, (bool, np.bool_)):
        if active:
            return run(*args)
        if operand is None:
            shape = jax.eval_shape(lambda: run()[0])
            return _zeros_like_shape(shape), None
        return operand, None
    if dense:
        result, status = run(*args)
        other = _zeros_like_shape(jax.eval_shape(lambda: result)) if operand is None else operand
        result = jax.tree_util.tree_map(lambda a, b: jnp.where(active, a, b), result, other)
        if status is None:
            return result, None
        severity = jnp.where(active, jnp.asarray(status.severity, jnp.int32), jnp.zeros((), jnp.int32))
        which = jnp.where(active, jnp.asarray(status.which, jnp.int32), jnp.full((), -1, jnp.int32))
        return result, EventStatus(severity, which, status.reasons, status.bound, DID_NOTHING)
    box: dict[str, Any] = {}

    def yes(*a: Any) -> Any:
        result, status = run(*a)
        box["status"] = status
        if status is None:
            return result, (jnp.ones((), jnp.int32), jnp.full((), -1, jnp.int32))
        return result, (status.severity, status.which)

    no: Callable[..., Any]
    if operand is None:
        shape = jax.eval_shape(yes)

        def no_value() -> Any:
            return _zeros_like_shape(shape[0]), (jnp.zeros((), jnp.int32), jnp.full((), -1, jnp.int32))

        no = no_value
    else:

        def keep(a: Any) -> Any:
            return a, (jnp.zeros((), jnp.int32), jnp.full((), -1, jnp.int32))

        no = keep

    result, packed = jax.lax.cond(active, yes, no, *args)
    status = box.get("status")
    if status is None:
        return result, None
    return result, EventStatus(packed[0], packed[1], status.reasons, status.bound, DID_NOTHING)


def _unless_failed(active: Any, statuses: list[EventStatus | None]) -> Any:
    """``active``, and no earlier update of this dispatch failed: Drake's update dispatchers
    (``DispatchDiscreteVariableUpdateHandler``, ``DispatchUnrestrictedUpdateHandler``) stop at the
    first failure, so the events after it do not run (their results are discarded here)."""
    so_far = [st for st in statuses if st is not None]
    if not so_far:
        return active
    prior = combine(so_far)
    if prior.bound < FAILED:
        return active
    return jnp.logical_and(active, prior.severity < FAILED)


def _with_status(result: Any, statuses: list[EventStatus | None], actives: list[Any]) -> Any:
    """``result``, or ``(result, combined status)`` when any handler returned a status (the loop runs
    statuses; handlers that returned none count as succeeded where active, ``actives`` their gates:
    an inactive one did nothing)."""
    if all(s is None for s in statuses):
        return result
    return result, combine([EventStatus.succeeded().gated(a) if s is None else s for s, a in zip(statuses, actives)])


class LeafEvents(System):
    """Event, witness and constraint declarations of [`LeafSystem`][jaxsys.LeafSystem] (no fields)."""

    # ===== declarations: events ===================================================================
    def _declare_event(
        self,
        kind: str,
        trigger: TriggerType,
        callback: Any,
        period: float | None = None,
        offset: float | None = None,
        name: str = "",
        require_callback: bool = True,
    ) -> Event:
        if callback is None and require_callback:
            raise DeclarationError(
                f"System {self.get_system_id_string()}: a {trigger.value} {kind} event needs a callback."
            )
        if callback is not None and not callable(callback):
            raise DeclarationError(
                f"System {self.get_system_id_string()}: the {trigger.value} {kind} event's callback must be "
                f"callable; got {type(callback).__name__}."
            )
        if trigger is TriggerType.PERIODIC:
            if period is None or not float(period) > 0:
                raise DeclarationError(
                    f"System {self.get_system_id_string()}: a periodic {kind} event needs period > 0; got {period}."
                )
            if offset is None or float(offset) < 0:
                raise DeclarationError(
                    f"System {self.get_system_id_string()}: a periodic {kind} event needs offset >= 0; got {offset}."
                )
            period, offset = float(period), float(offset)
        events = self._spec.events
        label = name or (
            f"{trigger.value}_{kind}" + (f"({period:g},{offset:g})" if trigger is TriggerType.PERIODIC else "")
        )
        ev = Event(kind, trigger, callback, period, offset, label, self, len(events))
        events.append(ev)
        return ev

    def declare_periodic_publish_event(
        self, period_sec: float, offset_sec: float, publish: Callable[[Context], Any], name: str = ""
    ) -> Event:
        """Publish every ``period_sec`` s from ``offset_sec``: ``publish(context) -> value or None``
        (Drake: ``DeclarePeriodicPublishEvent``). The value is recorded in the simulation's log."""
        return self._declare_event(PUBLISH, TriggerType.PERIODIC, publish, period_sec, offset_sec, name)

    def declare_periodic_discrete_update_event(
        self, period_sec: float, offset_sec: float, update: Callable[..., Any], name: str = ""
    ) -> Event:
        """``update(context, discrete_state) -> new discrete values`` every ``period_sec`` s from
        ``offset_sec`` (Drake: ``DeclarePeriodicDiscreteUpdateEvent``)."""
        return self._declare_event(DISCRETE_UPDATE, TriggerType.PERIODIC, update, period_sec, offset_sec, name)

    def declare_periodic_unrestricted_update_event(
        self, period_sec: float, offset_sec: float, update: Callable[..., Any], name: str = ""
    ) -> Event:
        """``update(context, state) -> State`` every ``period_sec`` s from ``offset_sec``.

        Drake: ``DeclarePeriodicUnrestrictedUpdateEvent``.
        """
        return self._declare_event(UNRESTRICTED_UPDATE, TriggerType.PERIODIC, update, period_sec, offset_sec, name)

    def declare_periodic_discrete_update(self, period_sec: float, offset_sec: float = 0.0) -> Event:
        """A periodic discrete update handled by an overridden ``do_calc_discrete_variable_updates``
        (Drake's ``DeclarePeriodicDiscreteUpdate``)."""
        return self._declare_event(
            DISCRETE_UPDATE, TriggerType.PERIODIC, None, period_sec, offset_sec, require_callback=False
        )

    def declare_periodic_publish(self, period_sec: float, offset_sec: float = 0.0) -> Event:
        """A periodic publish handled by an overridden ``do_publish`` (Drake's ``DeclarePeriodicPublish``)."""
        return self._declare_event(PUBLISH, TriggerType.PERIODIC, None, period_sec, offset_sec, require_callback=False)

    def declare_periodic_unrestricted_update(self, period_sec: float, offset_sec: float = 0.0) -> Event:
        """A periodic unrestricted update handled by an overridden ``do_calc_unrestricted_update``."""
        return self._declare_event(
            UNRESTRICTED_UPDATE, TriggerType.PERIODIC, None, period_sec, offset_sec, require_callback=False
        )

    def declare_per_step_publish_event(self, publish: Callable[[Context], Any], name: str = "") -> Event:
        """Publish at the end of every simulator step (Drake: ``DeclarePerStepPublishEvent``)."""
        return self._declare_event(PUBLISH, TriggerType.PER_STEP, publish, name=name)

    def declare_per_step_discrete_update_event(self, update: Callable[..., Any], name: str = "") -> Event:
        """Discrete update at the start of every step (Drake: ``DeclarePerStepDiscreteUpdateEvent``)."""
        return self._declare_event(DISCRETE_UPDATE, TriggerType.PER_STEP, update, name=name)

    def declare_per_step_unrestricted_update_event(self, update: Callable[..., Any], name: str = "") -> Event:
        """Unrestricted update at the start of every step (Drake: ``DeclarePerStepUnrestrictedUpdateEvent``)."""
        return self._declare_event(UNRESTRICTED_UPDATE, TriggerType.PER_STEP, update, name=name)

    def declare_initialization_publish_event(self, publish: Callable[[Context], Any], name: str = "") -> Event:
        """Publish once when the simulation is initialized (Drake: ``DeclareInitializationPublishEvent``)."""
        return self._declare_event(PUBLISH, TriggerType.INITIALIZATION, publish, name=name)

    def declare_initialization_discrete_update_event(self, update: Callable[..., Any], name: str = "") -> Event:
        """Discrete update at initialization (Drake: ``DeclareInitializationDiscreteUpdateEvent``)."""
        return self._declare_event(DISCRETE_UPDATE, TriggerType.INITIALIZATION, update, name=name)

    def declare_initialization_unrestricted_update_event(self, update: Callable[..., Any], name: str = "") -> Event:
        """Unrestricted update at initialization (Drake: ``DeclareInitializationUnrestrictedUpdateEvent``)."""
        return self._declare_event(UNRESTRICTED_UPDATE, TriggerType.INITIALIZATION, update, name=name)

    def declare_forced_publish_event(self, publish: Callable[[Context], Any], name: str = "") -> Event:
        """Publish run by ``publish(context)`` with no events (Drake: ``DeclareForcedPublishEvent``)."""
        return self._declare_event(PUBLISH, TriggerType.FORCED, publish, name=name)

    def declare_forced_discrete_update_event(self, update: Callable[..., Any], name: str = "") -> Event:
        """Run by ``calc_discrete_variable_updates(context)`` (Drake: ``DeclareForcedDiscreteUpdateEvent``)."""
        return self._declare_event(DISCRETE_UPDATE, TriggerType.FORCED, update, name=name)

    def declare_forced_unrestricted_update_event(self, update: Callable[..., Any], name: str = "") -> Event:
        """Run by ``calc_unrestricted_update(context)`` (Drake: ``DeclareForcedUnrestrictedUpdateEvent``)."""
        return self._declare_event(UNRESTRICTED_UPDATE, TriggerType.FORCED, update, name=name)

    # ===== timed events (scheduled by do_calc_next_update_time) ======================================
    def declare_timed_publish_event(self, publish: Callable[[Context], Any], name: str = "") -> Event:
        """A publish event that happens when this system's `do_calc_next_update_time` schedules
        it (Drake: an event with ``TriggerType::kTimed``); ``publish(context) -> value or None``."""
        return self._declare_event(PUBLISH, TriggerType.TIMED, publish, name=name)

    def declare_timed_discrete_update_event(self, update: Callable[..., Any], name: str = "") -> Event:
        """A discrete update scheduled by `do_calc_next_update_time`:
        ``update(context, discrete_state) -> new values``."""
        return self._declare_event(DISCRETE_UPDATE, TriggerType.TIMED, update, name=name)

    def declare_timed_unrestricted_update_event(self, update: Callable[..., Any], name: str = "") -> Event:
        """An unrestricted update scheduled by `do_calc_next_update_time`:
        ``update(context, state) -> State``."""
        return self._declare_event(UNRESTRICTED_UPDATE, TriggerType.TIMED, update, name=name)

    def do_calc_next_update_time(self, context: Context) -> tuple[Any, Any]:
        """The next time this system wants events, and which (Drake: ``DoCalcNextUpdateTime``).

        Override it to schedule one-off or state-dependent events: return ``(time, events)``, where
        ``time`` is a scalar (s, may be traced; ``inf`` for none; the context's own time for "right
        now") and ``events`` a sequence of this system's timed events (``declare_timed_*_event``) or
        ``(event, active)`` pairs with a traced bool. As in Drake's ``Simulator``, it is called at the
        start of every step, after that step's updates; the step stops at the returned time (a time
        equal to now is a step of zero length); the scheduled publish events happen at the end of
        that step and the update events at the start of the next. Periodic events are not handled
        here: they are scheduled by the simulator on its own (unlike Drake's default
        ``DoCalcNextUpdateTime``, an override does not replace them). Default: ``(inf, ())``.
        """
        return jnp.asarray(jnp.inf, context.get_time().dtype), ()

    # ===== witness functions =======================================================================
    def make_witness_function(
        self,
        description: str,
        direction: WitnessFunctionDirection | str,
        calc: Callable[[Context], Any],
        event: Event | None = None,
    ) -> WitnessFunction:
        """A witness function of this system (Drake: ``MakeWitnessFunction``).

        **Arguments:**
        - `description`: a name for messages and logs.
        - `direction`: a [`WitnessFunctionDirection`][jaxsys.WitnessFunctionDirection] (or its name, e.g.
          ``"positive_then_non_positive"``).
        - `calc`: ``calc(context) -> scalar``.
        - `event`: fired at a triggering crossing: ``jaxsys.PublishEvent(cb)``,
          ``jaxsys.DiscreteUpdateEvent(cb)`` or ``jaxsys.UnrestrictedUpdateEvent(cb)``; None for none.
        """
        if isinstance(direction, str):
            try:
                direction = WitnessFunctionDirection(direction)
            except ValueError as e:
                raise DeclarationError(
                    f"make_witness_function({description!r}) on System {self.get_system_id_string()}: unknown "
                    f"direction {direction!r}; use one of {[d.value for d in WitnessFunctionDirection]}."
                ) from e
        if not callable(calc):
            raise DeclarationError(
                f"make_witness_function({description!r}) on System {self.get_system_id_string()}: "
                f"calc must be callable."
            )
        if event is not None:
            if not isinstance(event, Event) or event.trigger is not TriggerType.WITNESS:
                raise DeclarationError(
                    f"make_witness_function({description!r}) on System {self.get_system_id_string()}: event must be "
                    f"made with jaxsys.PublishEvent / DiscreteUpdateEvent / UnrestrictedUpdateEvent."
                )
            event = dataclasses.replace(
                event,
                system=self,
                index=len(self._spec.events),
                name=event.name or f"witness:{description}",
                uid=event.uid,
            )
            self._spec.events.append(event)
        return WitnessFunction(description, direction, calc, event, self)

    def declare_witness_function(
        self,
        description: str,
        direction: WitnessFunctionDirection | str,
        calc: Callable[[Context], Any],
        event: Event | None = None,
    ) -> WitnessFunction:
        """Make a witness function and return it from the default ``do_get_witness_functions``."""
        w = self.make_witness_function(description, direction, calc, event)
        self._spec.witnesses.append(w)
        return w

    def do_get_witness_functions(self, context: Context) -> list[WitnessFunction]:
        """The witness functions active in ``context`` (Drake: ``DoGetWitnessFunctions``); default: the
        declared ones. The list itself is fixed when the simulation is traced, so it cannot depend on
        values in the context with a Python ``if``: return a mode-dependent witness as
        ``w.active_if(condition)`` (``condition`` a traced bool of the context): it is monitored only
        in steps that start with ``condition`` true, as Drake's subset is."""
        return list(self._spec.witnesses)

    # ===== event handlers (override to handle simultaneous events together) ========================
    def do_publish(self, context: Context, events: EventCollection) -> Any:
        """Handle the simultaneous publish events of this system (Drake: ``DoPublish``).

        Default: each active event's callback, in order. Returns one recorded value (or None) per
        event; when a callback returns an [`EventStatus`][jaxsys.EventStatus] (``status`` or ``(value,
        status)``), returns ``(values, combined status)``. An override must not (and cannot) change
        the state; it may return ``(values, status)`` too.
        """
        out: list[Any] = []
        statuses: list[Any] = []
        actives: list[Any] = []
        for e, active in events:
            if e.callback is None:
                out.append(None)
                continue

            def run(e: Event = e) -> Any:
                value, status = split_status(_call(self, _handler(e), context))
                if isinstance(value, (Context, State)):
                    raise DeclarationError(
                        f"The publish callback of {e!r} returned a {type(value).__name__}: publish events cannot "
                        f"change the state. Declare an unrestricted (or discrete) update event instead."
                    )
                return value, status

            if isinstance(active, bool) and active:
                value, status = run()
            else:
                value, status = _gated_call(active, run, None, events.dense)
            out.append(value)
            statuses.append(status)
            actives.append(active)
        return _with_status(tuple(out), statuses, actives)

    def do_calc_discrete_variable_updates(
        self, context: Context, events: EventCollection, discrete_state: DiscreteValues
    ) -> Any:
        """Handle the simultaneous discrete-update events (Drake: ``DoCalcDiscreteVariableUpdates``).

        Default: each active event's ``callback(context, values_so_far)`` in order; all read the
        same ``context`` (the state before this update). A callback may return an
        [`EventStatus`][jaxsys.EventStatus] (alone: values unchanged; or ``(values, status)``); a did-nothing
        or failed status discards that callback's values, and after a failure the later events do not
        run (Drake's dispatcher stops at the first failure). With statuses, returns ``(values, combined
        status)``.
        """
        ds = discrete_state
        statuses: list[Any] = []
        actives: list[Any] = []
        for e, active in events:
            if e.callback is None:
                continue

            def run(ds: DiscreteValues, e: Event = e) -> Any:
                new, status = split_status(_call(self, _handler(e), context, ds))
                if new is None and status is None:
                    raise _returned_none(self, e, "the new discrete values (a vector per group, or DiscreteValues)")
                new = ds if new is None else normalize_discrete(self, new, ds, f"the update of {e!r}")
                return _applied(status, new, ds), status

            gate = _unless_failed(active, statuses)
            ds, status = _gated_call(gate, run, ds, events.dense)
            statuses.append(status)
            actives.append(gate)
        return _with_status(ds, statuses, actives)

    def do_calc_unrestricted_update(self, context: Context, events: EventCollection, state: State) -> Any:
        """Handle the simultaneous unrestricted-update events (Drake: ``DoCalcUnrestrictedUpdate``).

        Default: each active event's ``callback(context, state_so_far) -> State`` in order; statuses as
        in `do_calc_discrete_variable_updates`.
        """
        st = state
        statuses: list[Any] = []
        actives: list[Any] = []
        for e, active in events:
            if e.callback is None:
                continue

            def run(st: State, e: Event = e) -> Any:
                new, status = split_status(_call(self, _handler(e), context, st))
                if new is None and status is None:
                    raise _returned_none(self, e, "the new State (e.g. state.with_continuous_state(x))")
                new = st if new is None else check_state(self, new, st, f"the update of {e!r}")
                return _applied(status, new, st), status

            gate = _unless_failed(active, statuses)
            st, status = _gated_call(gate, run, st, events.dense)
            statuses.append(status)
            actives.append(gate)
        return _with_status(st, statuses, actives)

    # ===== declarations: constraints =============================================================
    def declare_equality_constraint(
        self, calc: Callable[[Context], Any], count: int, description: str
    ) -> SystemConstraintIndex:
        """Declare ``calc(context) == 0`` (``count`` values) (Drake: ``DeclareEqualityConstraint``)."""
        return self.add_constraint(SystemConstraint(calc, np.zeros(count), np.zeros(count), description))

    def declare_inequality_constraint(
        self, calc: Callable[[Context], Any], lower: Any, upper: Any, description: str
    ) -> SystemConstraintIndex:
        """Declare ``lower <= calc(context) <= upper`` (Drake: ``DeclareInequalityConstraint``)."""
        return self.add_constraint(SystemConstraint(calc, lower, upper, description))


# the defaults a leaf may override, marked so that the dispatcher can tell an override without
# importing the leaf classes (framework.dispatch: witness_leaves, timed_leaves)
for _name in ("do_get_witness_functions", "do_calc_next_update_time"):
    getattr(LeafEvents, _name)._jaxsys_default = True
