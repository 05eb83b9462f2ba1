"""Events (Drake's ``Event``, ``EventCollection``, ``CompositeEventCollection``).

Three kinds, in increasing power over the state (the EventCollection seed page):

* **publish**: reads the context and may record a value (into the simulation's log) or call the
  host (``jax.debug.callback``); it cannot change the state.
* **discrete update**: computes new discrete state values.
* **unrestricted update**: computes a whole new State of the same shape.

Triggers: periodic (period, offset), per-step, initialization, forced (and witness, with witness
functions). Events are static structure declared in a LeafSystem's ``__init__``; which of them
are *active* at a given time is data (a boolean per event), so the same compiled loop serves every
run, and batched runs under ``vmap`` may have different events active.

Callbacks (all pure):

* publish: ``callback(context) -> value or None`` (the value is recorded in the publish log);
* discrete update: ``callback(context, discrete_state) -> DiscreteValues`` (or the new vector when
  the system has one group), starting from ``discrete_state``, which holds the values so far;
* unrestricted update: ``callback(context, state) -> State``.

Imports: nothing from jaxsys.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp


_EVENT_UIDS = itertools.count(1)

PUBLISH = "publish"
DISCRETE_UPDATE = "discrete_update"
UNRESTRICTED_UPDATE = "unrestricted_update"
KINDS = (PUBLISH, DISCRETE_UPDATE, UNRESTRICTED_UPDATE)


class TriggerType(enum.Enum):
    """What makes an event happen (Drake's ``TriggerType``)."""

    FORCED = "forced"
    INITIALIZATION = "initialization"
    PER_STEP = "per_step"
    PERIODIC = "periodic"
    TIMED = "timed"
    WITNESS = "witness"


@dataclasses.dataclass(frozen=True, eq=False)
class Event:
    """One declared event (Drake's ``PublishEvent`` / ``DiscreteUpdateEvent`` / ``UnrestrictedUpdateEvent``).

    **Fields:**
    - `kind`: ``"publish"``, ``"discrete_update"`` or ``"unrestricted_update"``.
    - `trigger`: a [`TriggerType`][jaxsys.TriggerType].
    - `callback`: the handler (see the module docstring), or None for an event handled by an
      overridden ``do_publish`` / ``do_calc_discrete_variable_updates`` / ``do_calc_unrestricted_update``.
    - `period`, `offset`: for periodic events, s (Drake's ``PeriodicEventData``).
    - `name`: a label (used in logs and errors).
    - `system`: the LeafSystem that declared it; `index`: its position among that system's events.
    """

    kind: str
    trigger: TriggerType
    callback: Callable[..., Any] | None
    period: float | None = None
    offset: float | None = None
    name: str = ""
    system: Any = None
    index: int = -1
    uid: int = dataclasses.field(default_factory=lambda: next(_EVENT_UIDS))

    def get_trigger_type(self) -> TriggerType:
        """Drake: ``get_trigger_type``."""
        return self.trigger

    def is_periodic(self) -> bool:
        """True for periodic events."""
        return self.trigger is TriggerType.PERIODIC

    def next_time_index(self, t: Any, inclusive: bool | jax.Array) -> jax.Array:
        """Index k of the first occurrence offset + k period at or after (``inclusive``) / after t."""
        t = jnp.asarray(t)
        tol = _time_tolerance(t)
        assert self.period is not None  # (periodic events only)
        k = (t - self.offset) / self.period
        k = jnp.where(inclusive, jnp.ceil(k - tol / self.period), jnp.floor(k + tol / self.period) + 1.0)
        return jnp.maximum(k, 0.0).astype(jnp.int32)

    def occurrence(self, k: Any, dtype: Any) -> jax.Array:
        """Time of occurrence k: offset + k period, s."""
        return jnp.asarray(self.offset, dtype) + jnp.asarray(k, dtype) * jnp.asarray(self.period, dtype)

    def __repr__(self) -> str:
        where = self.system.get_path() if self.system is not None else "?"
        extra = f", period={self.period}, offset={self.offset}" if self.is_periodic() else ""
        return f"Event({self.kind}, {self.trigger.value}{extra}, name={self.name!r}, system={where})"


# Event times within this tolerance of each other are simultaneous (Drake takes a 1.1e-16 s step
# between offset + k period computed two ways; jaxsys does not). The tolerance is relative to
# max(1, |t|) and tied to the dtype's resolution: 1e-12 in float64, 8 units in the last place in
# float32 (~1e-6), where offset + k period and a step's end computed as t0 + n h, or by a fused
# multiply-add, differ by a few units in the last place.
SIMULTANEITY_RTOL = 1e-12
SIMULTANEITY_ULPS = 8


def time_tolerance(t: Any) -> jax.Array:
    """Times within this of ``t`` are simultaneous with it (s; from ``t``'s dtype, see above)."""
    t = jnp.asarray(t)
    dtype = t.dtype if jnp.issubdtype(t.dtype, jnp.floating) else jnp.float64
    rtol = max(SIMULTANEITY_RTOL, SIMULTANEITY_ULPS * float(jnp.finfo(dtype).eps))
    return rtol * jnp.maximum(1.0, jnp.abs(t))


_time_tolerance = time_tolerance


class EventCollection:
    """Events of one kind with an activity flag each (Drake's ``EventCollection``).

    ``active`` is None when every event is active (a concrete collection built by hand), else a
    boolean array, one entry per event, which may be traced: an overridden ``do_*`` handler should
    use ``jnp.where`` / ``lax.cond`` on `is_active` rather than Python ``if``.

    ``dense`` (static) says the traced flags are true at (almost) every call, as for the simulator's
    updates of a discrete-only system whose periodic events share one grid: the default handlers then
    run each event's callback unconditionally and keep its result where active (``jnp.where``),
    instead of branching with ``lax.cond``. The results are the same; XLA optimizes a large update
    (a MuJoCo step) better outside a conditional's branch. A callback must then be safe to evaluate
    when not active (it is anyway under ``vmap``, where a conditional evaluates both branches).
    """

    def __init__(self, events: Sequence[Event] = (), active: Any = None, dense: bool = False) -> None:
        self._events = tuple(events)
        self._active = active
        self.dense = bool(dense)

    def get_events(self) -> tuple[Event, ...]:
        """All events in the collection (active or not) (Drake: ``get_events``)."""
        return self._events

    def has_events(self) -> bool:
        """True if the collection holds any event (Drake: ``HasEvents``)."""
        return bool(self._events)

    def size(self) -> int:
        """Number of events."""
        return len(self._events)

    def is_active(self, i: int) -> Any:
        """Whether event ``i`` is active (a bool, possibly traced)."""
        if self._active is None:
            return True
        return self._active[i]

    def any_active(self) -> Any:
        """Whether any event is active (possibly traced)."""
        if self._active is None:
            return bool(self._events)
        return jnp.any(self._active) if self._events else False

    def __iter__(self) -> Iterator[tuple[Event, Any]]:
        return iter((e, self.is_active(i)) for i, e in enumerate(self._events))

    def __len__(self) -> int:
        return len(self._events)

    def __repr__(self) -> str:
        return f"EventCollection({list(self._events)})"


class CompositeEventCollection:
    """Publish, discrete-update and unrestricted-update collections (Drake's ``CompositeEventCollection``)."""

    def __init__(
        self,
        publish: EventCollection | None = None,
        discrete_update: EventCollection | None = None,
        unrestricted_update: EventCollection | None = None,
    ) -> None:
        self._c = {
            PUBLISH: publish or EventCollection(),
            DISCRETE_UPDATE: discrete_update or EventCollection(),
            UNRESTRICTED_UPDATE: unrestricted_update or EventCollection(),
        }

    def get_publish_events(self) -> EventCollection:
        """Drake: ``get_publish_events``."""
        return self._c[PUBLISH]

    def get_discrete_update_events(self) -> EventCollection:
        """Drake: ``get_discrete_update_events``."""
        return self._c[DISCRETE_UPDATE]

    def get_unrestricted_update_events(self) -> EventCollection:
        """Drake: ``get_unrestricted_update_events``."""
        return self._c[UNRESTRICTED_UPDATE]

    def get(self, kind: str) -> EventCollection:
        """The collection of one kind."""
        return self._c[kind]

    def has_events(self) -> bool:
        """Drake: ``HasEvents``."""
        return any(c.has_events() for c in self._c.values())

    def __repr__(self) -> str:
        return f"CompositeEventCollection({self._c})"


def _call(system: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """Call a declared callback; a method of ``system`` is called on the live ``system``."""
    owner = getattr(fn, "__self__", None)
    func = getattr(fn, "__func__", None)
    if owner is not None and func is not None and getattr(owner, "_spec", None) is system._spec:
        return func(system, *args)
    return fn(*args)
