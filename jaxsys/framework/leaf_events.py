"""What a LeafSystem declares about events: periodic, per-step, initialization and forced events, witness
functions, constraints, and the overridable event handlers (Drake's ``LeafSystem`` ``Declare*Event``,
``MakeWitnessFunction``, ``DoPublish``, ``DoCalcDiscreteVariableUpdates``,
``DoCalcUnrestrictedUpdate``).

:class:`LeafEvents` is a field-less base class of :class:`~jaxsys.LeafSystem`; its methods use the
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
from .errors import DeclarationError
from .events import DISCRETE_UPDATE, PUBLISH, UNRESTRICTED_UPDATE, Event, EventCollection, TriggerType
from .system import System
from .witness import WitnessFunction, WitnessFunctionDirection


def _call(system: System, fn: Callable[..., Any], *args: Any) -> Any:
    """Call a declared callback; a method of ``system`` is called on the live ``system``."""
    owner = getattr(fn, "__self__", None)
    func = getattr(fn, "__func__", None)
    if owner is not None and func is not None and getattr(owner, "_spec", None) is system._spec:
        return func(system, *args)
    return fn(*args)


def _zeros_like_shape(shape: Any) -> Any:
    return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shape)


class LeafEvents(System):
    """Event, witness and constraint declarations of :class:`~jaxsys.LeafSystem` (no fields)."""

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
        - `direction`: a :class:`WitnessFunctionDirection` (or its name, e.g.
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
        declared ones. The list must not depend on values in the context (it is fixed when traced)."""
        return list(self._spec.witnesses)

    # ===== event handlers (override to handle simultaneous events together) ========================
    def do_publish(self, context: Context, events: EventCollection) -> tuple[Any, ...]:
        """Handle the simultaneous publish events of this system (Drake: ``DoPublish``).

        Default: each active event's callback, in order. Returns one recorded value (or None) per
        event. An override must not (and cannot) change the state.
        """
        out = []
        for e, active in events:
            if e.callback is None:
                out.append(None)
                continue

            def run(e: Event = e) -> Any:
                value = _call(self, e.callback, context)
                if isinstance(value, (Context, State)):
                    raise DeclarationError(
                        f"The publish callback of {e!r} returned a {type(value).__name__}: publish events cannot "
                        f"change the state. Declare an unrestricted (or discrete) update event instead."
                    )
                return value

            if isinstance(active, bool) and active:
                out.append(run())
            else:
                shape = jax.eval_shape(run)
                out.append(jax.lax.cond(active, run, lambda shape=shape: _zeros_like_shape(shape)))
        return tuple(out)

    def do_calc_discrete_variable_updates(
        self, context: Context, events: EventCollection, discrete_state: DiscreteValues
    ) -> DiscreteValues:
        """Handle the simultaneous discrete-update events (Drake: ``DoCalcDiscreteVariableUpdates``).

        Default: each active event's ``callback(context, values_so_far)`` in order; all read the
        same ``context`` (the state before this update).
        """
        from .dispatch import cond_or_call, normalize_discrete

        ds = discrete_state
        for e, active in events:
            if e.callback is None:
                continue

            def run(ds: DiscreteValues, e: Event = e) -> DiscreteValues:
                return normalize_discrete(self, _call(self, e.callback, context, ds), ds, f"the update of {e!r}")

            ds = cond_or_call(active, run, lambda ds: ds, ds)
        return ds

    def do_calc_unrestricted_update(self, context: Context, events: EventCollection, state: State) -> State:
        """Handle the simultaneous unrestricted-update events (Drake: ``DoCalcUnrestrictedUpdate``).

        Default: each active event's ``callback(context, state_so_far) -> State`` in order.
        """
        from .dispatch import check_state, cond_or_call

        st = state
        for e, active in events:
            if e.callback is None:
                continue

            def run(st: State, e: Event = e) -> State:
                return check_state(self, _call(self, e.callback, context, st), st, f"the update of {e!r}")

            st = cond_or_call(active, run, lambda st: st, st)
        return st

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
