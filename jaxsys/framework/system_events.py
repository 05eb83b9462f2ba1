"""The event and witness-function methods every System has (Drake's ``System<T>`` event API):
event collections, ``publish`` / ``calc_discrete_variable_updates`` / ``calc_unrestricted_update``,
``calc_next_update_time``, ``get_witness_functions`` / ``evaluate_witness``.

`SystemEvents` is a field-less base class of [`System`][jaxsys.System]; its methods use the
System's ``_spec`` and validation methods.

Imports (within jaxsys): ``context``, ``dispatch``, ``errors``, ``events``, ``leaf_system``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp

from .context import Context, DiscreteValues, State
from .dispatch import (
    all_events,
    dispatch_discrete,
    dispatch_discrete_with_status,
    dispatch_publish,
    dispatch_publish_with_status,
    dispatch_unrestricted,
    dispatch_unrestricted_with_status,
    event_leaves,
    leaf_contexts_with_inputs,
    leaf_next_time,
    timed_leaves,
)
from .errors import StateError
from .events import KINDS, CompositeEventCollection, EventCollection, TriggerType, _call, _time_tolerance
from .witness import unwrap_witness


if TYPE_CHECKING:
    from .system import System


def _system(obj: Any) -> System:
    """``obj`` as the System it is (these bases are mixed into System only)."""
    return cast("System", obj)


class SystemEvents(eqx.Module):
    """Event and witness methods of [`System`][jaxsys.System] (a base class without fields)."""

    if TYPE_CHECKING:  # (provided by System, which this base is mixed into)
        _spec: Any

        def validate_context(self, context: Any) -> None: ...

        def get_system_id_string(self) -> str: ...

        def _calc_time_derivatives_raw(self, context: Context) -> jax.Array: ...

    # ===== events ==============================================================================
    def _events_where(self, predicate: Callable[[Any], bool]) -> list[Any]:
        return [e for _, e in all_events(_system(self)) if predicate(e)]

    def _collection(self, trigger: Any) -> CompositeEventCollection:
        def of(kind: str) -> EventCollection:
            return EventCollection(self._events_where(lambda e: e.trigger is trigger and e.kind == kind))

        per = {k: of(k) for k in KINDS}
        return CompositeEventCollection(**per)

    def allocate_composite_event_collection(self) -> CompositeEventCollection:
        """An empty CompositeEventCollection (Drake: ``AllocateCompositeEventCollection``)."""
        return CompositeEventCollection()

    def get_per_step_events(self) -> CompositeEventCollection:
        """Events to handle at every step (Drake: ``GetPerStepEvents``)."""
        return self._collection(TriggerType.PER_STEP)

    def get_initialization_events(self) -> CompositeEventCollection:
        """Events to handle once at initialization (Drake: ``GetInitializationEvents``)."""
        return self._collection(TriggerType.INITIALIZATION)

    def get_periodic_events(self) -> CompositeEventCollection:
        """All periodic events (Drake: ``MapPeriodicEventsByTiming``, as one collection)."""
        return self._collection(TriggerType.PERIODIC)

    def get_forced_publish_events(self) -> Any:
        """Drake: ``get_forced_publish_events``."""
        return self._collection(TriggerType.FORCED).get_publish_events()

    def get_forced_discrete_update_events(self) -> Any:
        """Drake: ``get_forced_discrete_update_events``."""
        return self._collection(TriggerType.FORCED).get_discrete_update_events()

    def get_forced_unrestricted_update_events(self) -> Any:
        """Drake: ``get_forced_unrestricted_update_events``."""
        return self._collection(TriggerType.FORCED).get_unrestricted_update_events()

    def publish(self, context: Context, events: Any = None) -> tuple[Any, ...]:
        """Dispatch publish events (Drake: ``Publish``); with no ``events``, the forced ones.

        Returns one recorded value (or None) per event. Publishing never changes the context.
        """
        self.validate_context(context)
        return dispatch_publish(_system(self), context, self.get_forced_publish_events() if events is None else events)

    def force_publish(self, context: Context) -> tuple[Any, ...]:
        """Run the forced publish events (Drake: ``ForcedPublish``); raises if a handler fails, with
        Drake's message (under ``jit``: an ``equinox.error_if`` raised when the function runs)."""
        self.validate_context(context)
        values, status = dispatch_publish_with_status(_system(self), context, self.get_forced_publish_events())
        return status.throw_on_failure("ForcedPublish", values)

    def calc_discrete_variable_updates(self, context: Context, events: Any = None) -> DiscreteValues:
        """New discrete state after the discrete-update ``events`` (Drake: ``CalcDiscreteVariableUpdates``);
        with no ``events``, the forced ones. Returns the values (the context is unchanged)."""
        self.validate_context(context)
        return dispatch_discrete(
            _system(self), context, self.get_forced_discrete_update_events() if events is None else events
        )

    def calc_forced_discrete_variable_update(self, context: Context) -> DiscreteValues:
        """The discrete state after the forced discrete-update events (Drake:
        ``CalcForcedDiscreteVariableUpdate``); raises if a handler fails, with Drake's message."""
        self.validate_context(context)
        values, status = dispatch_discrete_with_status(_system(self), context, self.get_forced_discrete_update_events())
        return status.throw_on_failure("CalcForcedDiscreteVariableUpdate", values)

    def calc_unrestricted_update(self, context: Context, events: Any = None) -> State:
        """New whole state after the unrestricted-update ``events`` (Drake: ``CalcUnrestrictedUpdate``);
        with no ``events``, the forced ones."""
        self.validate_context(context)
        return dispatch_unrestricted(
            _system(self), context, self.get_forced_unrestricted_update_events() if events is None else events
        )

    def calc_forced_unrestricted_update(self, context: Context) -> State:
        """The state after the forced unrestricted-update events (Drake:
        ``CalcForcedUnrestrictedUpdate``); raises if a handler fails, with Drake's message."""
        self.validate_context(context)
        values, status = dispatch_unrestricted_with_status(
            _system(self), context, self.get_forced_unrestricted_update_events()
        )
        return status.throw_on_failure("CalcForcedUnrestrictedUpdate", values)

    def calc_next_update_time(self, context: Context) -> tuple[jax.Array, CompositeEventCollection]:
        """The next event time strictly after the context's time (periodic events) or at or after it
        (events a leaf schedules with ``do_calc_next_update_time``), and the events due then (Drake:
        ``CalcNextUpdateTime``). Events due within a relative 1e-12 are simultaneous. Returns (inf,
        empty collection) when nothing is scheduled."""
        self.validate_context(context)
        periodic = self._events_where(lambda e: e.is_periodic())
        timed = self._events_where(lambda e: e.trigger is TriggerType.TIMED)
        t = context.get_time()
        times = [e.occurrence(e.next_time_index(t, inclusive=False), t.dtype) for e in periodic]
        candidates = list(periodic)
        custom = timed_leaves(_system(self))
        if custom:
            leaves, ctxs = event_leaves(_system(self)), leaf_contexts_with_inputs(_system(self), context)
            flags = jnp.zeros((len(timed),), bool)
            times_t = jnp.full((len(timed),), jnp.inf, t.dtype)
            for li in custom:
                t_i, f_i = leaf_next_time(leaves[li], ctxs[li], timed, t)
                times_t = jnp.where(f_i, jnp.minimum(times_t, t_i), times_t)
                flags = flags | f_i
            times += list(jnp.where(flags, times_t, jnp.inf))
            candidates += timed
        if not candidates:
            return jnp.asarray(jnp.inf, t.dtype), CompositeEventCollection()
        times_ = jnp.stack(times)
        t_next = jnp.min(times_)
        due = jnp.isfinite(times_) & (jnp.abs(times_ - t_next) <= _time_tolerance(t_next))
        per = {}
        for k in KINDS:
            idx = [i for i, e in enumerate(candidates) if e.kind == k]
            per[k] = EventCollection([candidates[i] for i in idx], due[jnp.asarray(idx, jnp.int32)] if idx else None)
        return t_next, CompositeEventCollection(**per)

    # ===== witness functions =====================================================================
    def get_witness_functions(self, context: Context) -> list[Any]:
        """The witness functions of this system and its subsystems active in ``context`` (Drake:
        ``GetWitnessFunctions``). A mode-dependent witness (returned with ``active_if(condition)`` by
        an overridden ``do_get_witness_functions``) is listed when its condition holds (concrete
        contexts) or always (traced ones: use `witness_activity` for the mask)."""
        witnesses, active = self.witness_activity(context)
        out: list[Any] = []
        for w, a in zip(witnesses, active):
            if isinstance(a, jax.core.Tracer) or bool(a):
                out.append(w)
        return out

    def witness_activity(self, context: Context) -> tuple[list[Any], Any]:
        """Every witness function ``do_get_witness_functions`` may return (in leaf order), and per
        witness whether it is active in ``context`` (a bool array, possibly traced)."""
        self.validate_context(context)
        items = self._witness_items(context)
        witnesses = [w for w, _ in items]
        active = [jnp.asarray(True) if cond is None else jnp.asarray(cond, bool).reshape(()) for _, cond in items]
        return witnesses, (jnp.stack(active) if active else jnp.zeros((0,), bool))

    def _witness_items(self, context: Context) -> list[tuple[Any, Any]]:
        """(witness, activity condition or None) for every item of the leaves' ``do_get_witness_functions``."""
        out: list[Any] = []
        for leaf, ctx in zip(event_leaves(_system(self)), leaf_contexts_with_inputs(_system(self), context)):
            out.extend(unwrap_witness(item) for item in leaf.do_get_witness_functions(ctx))
        return out

    def evaluate_witness(self, context: Context, witness: Any) -> jax.Array:
        """The value of ``witness`` at ``context`` (Drake: ``EvaluateWitness``); a scalar."""
        self.validate_context(context)
        return self._evaluate_witness_raw(context, witness)

    def _evaluate_witness_raw(self, context: Context, witness: Any) -> jax.Array:
        leaves = event_leaves(_system(self))
        for li, leaf in enumerate(leaves):
            if leaf._spec is witness.system._spec:
                ctx = leaf_contexts_with_inputs(_system(self), context)[li]
                raw = _call(leaf, witness.calc, ctx)
                who = f"Witness function {witness.description!r} of System {leaf.get_system_id_string()}"
                if isinstance(raw, (tuple, list, dict)) or raw is None:
                    raise StateError(
                        f"{who} must return a real floating-point scalar (an array of shape ()); it returned "
                        f"a {type(raw).__name__}."
                    )
                value = jnp.asarray(raw)
                if not jnp.issubdtype(value.dtype, jnp.floating):
                    raise StateError(
                        f"{who} must return a real floating-point scalar; it returned dtype {value.dtype} (an "
                        f"integer or boolean witness cannot be root-found, a complex one has no sign). Return "
                        f"a float, e.g. jnp.asarray(value, context.get_time().dtype)."
                    )
                if value.size != 1:
                    raise StateError(f"{who} must return a scalar; it returned shape {value.shape}.")
                return jnp.reshape(value, ()).astype(context.time.dtype)
        raise StateError(f"{witness!r} does not belong to System {self.get_system_id_string()} or its subsystems.")
