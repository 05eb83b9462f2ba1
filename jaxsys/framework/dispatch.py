"""Event dispatch for LeafSystems and Diagrams (a Diagram dispatches to its leaves).

For each kind, the events that are due are collated per leaf into one [`EventCollection`][jaxsys.EventCollection]
and that leaf's handler for the kind is called once (``do_publish``,
``do_calc_discrete_variable_updates``, ``do_calc_unrestricted_update``), as Drake's EventCollection
page specifies. All leaves see the same pre-update context; their results are then combined.
Which events are due is a boolean per event (possibly traced), so this runs inside ``jit``.

Imports (within jaxsys): ``context``, ``errors``, ``events``, ``leaf_system``, ``system``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .context import Context, DiscreteValues, State
from .errors import InputPortNotConnectedError, StateError, _Raise
from .event_status import FAILED, REACHED_TERMINATION, SUCCEEDED, EventStatus, combine, split_status
from .events import DISCRETE_UPDATE, PUBLISH, UNRESTRICTED_UPDATE, Event, EventCollection, TriggerType


if TYPE_CHECKING:
    from .system import System


def event_leaves(system: System) -> list[Any]:
    """The leaves of ``system`` (itself for a LeafSystem), in context order."""
    if hasattr(system, "subsystems"):
        flat = system._flat()
        return [system._system_at(p) for p in flat.leaf_paths]
    return [system]


def all_events(system: System) -> list[tuple[int, Event]]:
    """(leaf index, event) for every event declared anywhere in ``system``."""
    out: list[Any] = []
    for li, leaf in enumerate(event_leaves(system)):
        for e in getattr(leaf._spec, "events", ()):
            out.append((li, e))
    return out


def leaf_contexts_with_inputs(system: System, context: Context) -> list[Context]:
    """Each leaf's context with its inputs supplied by the diagram.

    Inputs are evaluated here, eagerly: handlers run inside ``lax.cond`` branches, and a value
    computed lazily inside one branch's trace must not be reused by another. An input that cannot
    be evaluated (unconnected) becomes a placeholder that raises only if a handler reads it.
    """
    if hasattr(system, "subsystems"):
        ev = system._evaluator(context)
        out: list[Any] = []
        for li, leaf in enumerate(ev.leaves):
            inputs = []
            for k in range(leaf.num_input_ports()):
                try:
                    inputs.append(ev.input(li, k))
                except InputPortNotConnectedError as e:
                    inputs.append(_Raise(e))
            out.append(ev.leaf_contexts[li]._with_inputs(tuple(inputs)))
        return out
    return [context]


def cond_or_call(active: Any, fn: Any, otherwise: Any, *operands: Any) -> Any:
    """``fn(*operands)`` if ``active`` else ``otherwise(*operands)``; a Python bool decides statically."""
    if isinstance(active, (bool, np.bool_)):
        return fn(*operands) if active else otherwise(*operands)
    return jax.lax.cond(active, fn, otherwise, *operands)


def _split(events: EventCollection, index: dict[int, int]) -> dict[int, EventCollection]:
    """Per-leaf sub-collections of ``events`` (events know their system)."""
    per: dict[int, tuple[list[Event], list[Any]]] = {}
    for i, e in enumerate(events.get_events()):
        li = index[id(e.system._spec)]
        evs, act = per.setdefault(li, ([], []))
        evs.append(e)
        act.append(events.is_active(i))
    out = {}
    for li, (evs, act) in per.items():
        if all(isinstance(a, (bool, np.bool_)) and a for a in act):
            out[li] = EventCollection(evs)
        else:
            out[li] = EventCollection(evs, jnp.stack([jnp.asarray(a) for a in act]), dense=events.dense)
    return out


def _by_leaf(
    system: System, context: Context, events: EventCollection
) -> tuple[list[Any], list[Context], dict[int, EventCollection]]:
    """The leaves of ``system``, their contexts (inputs evaluated) and ``events`` split per leaf;
    raises if an event belongs to no leaf of ``system``."""
    leaves = event_leaves(system)
    index = {id(leaf._spec): li for li, leaf in enumerate(leaves)}
    for e in events.get_events():
        if e.system is None or id(e.system._spec) not in index:
            raise StateError(f"{e!r} does not belong to System {system.get_system_id_string()} or its subsystems.")
    return leaves, leaf_contexts_with_inputs(system, context), _split(events, index)


def _leaf_status(leaf: Any, status: EventStatus | None, sub: EventCollection) -> EventStatus:
    """A leaf handler's status (succeeded when it returned none, did_nothing when nothing was active),
    with the leaf named as the system of reasons that name none."""
    if status is None:
        return EventStatus.succeeded().gated(sub.any_active())
    if not isinstance(status, EventStatus):
        raise StateError(
            f"System {leaf.get_system_id_string()}: an event handler returned (result, {type(status).__name__}); "
            f"the second item must be a jaxsys.EventStatus."
        )
    return status.with_default_system(leaf)


def dispatch_publish_with_status(
    system: System, context: Context, events: EventCollection
) -> tuple[tuple[Any, ...], EventStatus]:
    """Run the publish handlers; returns one recorded value per event in ``events`` (None if none)
    and the handlers' combined [`EventStatus`][jaxsys.EventStatus] (first worst, in leaf order)."""
    leaves, ctxs, by_leaf = _by_leaf(system, context, events)
    recorded: dict[int, Any] = {}
    statuses: list[Any] = []
    for li, sub in by_leaf.items():
        values, status = split_status(leaves[li].do_publish(ctxs[li], sub))
        if not isinstance(values, tuple) or len(values) != sub.size():
            raise StateError(
                f"do_publish of System {leaves[li].get_system_id_string()} must return a tuple with one "
                f"recorded value (or None) per event (or that tuple and an EventStatus); got {type(values).__name__}."
            )
        statuses.append(_leaf_status(leaves[li], status, sub))
        for e, v in zip(sub.get_events(), values):
            recorded[id(e)] = v
    return tuple(recorded.get(id(e)) for e in events.get_events()), combine(statuses)


def dispatch_publish(system: System, context: Context, events: EventCollection) -> tuple[Any, ...]:
    """Run the publish handlers; returns one recorded value per event in ``events`` (None if none)."""
    return dispatch_publish_with_status(system, context, events)[0]


def dispatch_discrete_with_status(
    system: System, context: Context, events: EventCollection
) -> tuple[DiscreteValues, EventStatus]:
    """New discrete state (all groups, in context order) after the discrete-update events, and the
    handlers' combined status. A failed status leaves the values as they were (Drake does not apply a
    failed update)."""
    leaves, ctxs, by_leaf = _by_leaf(system, context, events)
    leaf_ctxs = list(context._leaf_contexts())
    statuses: list[Any] = []
    for li, sub in by_leaf.items():
        old = leaf_ctxs[li].state.discrete_state
        new, status = split_status(leaves[li].do_calc_discrete_variable_updates(ctxs[li], sub, old))
        new = old if new is None else normalize_discrete(leaves[li], new, old, "do_calc_discrete_variable_updates")
        if status is not None and not status.always_applied():
            new = _keep_unless_applied(status, new, old)
        new, leaf_status = _after_failure(statuses, new, old, _leaf_status(leaves[li], status, sub))
        statuses.append(leaf_status)
        leaf_ctxs[li] = leaf_ctxs[li]._replace_state(discrete_state=new)
    values = DiscreteValues(context._with_leaf_contexts(leaf_ctxs).get_discrete_state().groups, system.get_system_id())
    return values, combine(statuses)


def dispatch_discrete(system: System, context: Context, events: EventCollection) -> DiscreteValues:
    """New discrete state (all groups, in context order) after the discrete-update events."""
    return dispatch_discrete_with_status(system, context, events)[0]


def dispatch_unrestricted_with_status(
    system: System, context: Context, events: EventCollection
) -> tuple[State, EventStatus]:
    """New whole state (context order) after the unrestricted-update events, and the handlers'
    combined status (a leaf whose status is did_nothing or failed keeps its state)."""
    leaves, ctxs, by_leaf = _by_leaf(system, context, events)
    leaf_ctxs = list(context._leaf_contexts())
    statuses: list[Any] = []
    for li, sub in by_leaf.items():
        old = leaf_ctxs[li].state
        new, status = split_status(leaves[li].do_calc_unrestricted_update(ctxs[li], sub, old))
        new = old if new is None else check_state(leaves[li], new, old, "do_calc_unrestricted_update")
        if status is not None and not status.always_applied():
            new = _keep_unless_applied(status, new, old)
        new, leaf_status = _after_failure(statuses, new, old, _leaf_status(leaves[li], status, sub))
        statuses.append(leaf_status)
        leaf_ctxs[li] = leaf_ctxs[li]._replace_state(
            continuous_state=new.continuous_state,
            discrete_state=new.discrete_state,
            abstract_state=new.abstract_state,
        )
    state = context._with_leaf_contexts(leaf_ctxs).get_state()
    return State(state.continuous_state, state.discrete_state, state.abstract_state, system.get_system_id()), combine(
        statuses
    )


def dispatch_unrestricted(system: System, context: Context, events: EventCollection) -> State:
    """New whole state (context order) after the unrestricted-update events."""
    return dispatch_unrestricted_with_status(system, context, events)[0]


def _after_failure(statuses: list[EventStatus], new: Any, old: Any, status: EventStatus) -> tuple[Any, EventStatus]:
    """A leaf's update as applied after the leaves before it in this dispatch: discarded (the state
    kept, the status did-nothing) when one of them failed, as Drake's Diagram update dispatchers stop
    at the first failed subsystem."""
    if not statuses:
        return new, status
    prior = combine(statuses)
    if prior.bound < FAILED:
        return new, status
    blocked = prior.severity >= FAILED
    new = jax.tree_util.tree_map(lambda a, b: jnp.where(blocked, b, a), new, old)
    return new, EventStatus.select(blocked, EventStatus.did_nothing(), status)


def _keep_unless_applied(status: EventStatus, new: Any, old: Any) -> Any:
    """``new`` where the status says the update is applied (succeeded or reached termination), else
    ``old`` (did nothing, failed: Drake applies neither)."""
    applied = (status.severity == SUCCEEDED) | (status.severity == REACHED_TERMINATION)
    return jax.tree_util.tree_map(lambda a, b: jnp.where(applied, a, b), new, old)


def _overrides(leaf: Any, name: str) -> bool:
    """Whether ``leaf``'s class overrides the framework's default ``name`` (a method the defaults mark
    with ``_jaxsys_default``)."""
    return not getattr(getattr(type(leaf), name, None), "_jaxsys_default", False)


def witness_leaves(system: System) -> list[int]:
    """Indices of the leaves that declare witness functions or override ``do_get_witness_functions``
    (known before tracing: whether a simulation must monitor witnesses at all)."""
    return [
        li
        for li, leaf in enumerate(event_leaves(system))
        if getattr(leaf._spec, "witnesses", None) or _overrides(leaf, "do_get_witness_functions")
    ]


def timed_leaves(system: System) -> list[int]:
    """Indices of the leaves whose class overrides ``do_calc_next_update_time``."""
    return [li for li, leaf in enumerate(event_leaves(system)) if _overrides(leaf, "do_calc_next_update_time")]


def leaf_next_time(leaf: Any, context: Context, timed: list[Event], t: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A leaf's ``do_calc_next_update_time``: (time, per timed event of the program whether the leaf
    schedules it then), checked."""
    out = leaf.do_calc_next_update_time(context)
    who = f"do_calc_next_update_time of System {leaf.get_system_id_string()}"
    if not isinstance(out, tuple) or len(out) != 2:
        raise StateError(
            f"{who} must return (time, events): the next time (s) and the timed events (declared with "
            f"declare_timed_*_event) due then; got {type(out).__name__}."
        )
    t_next, events = out
    t_next = jnp.asarray(t_next)
    if (
        t_next.shape != ()
        or not jnp.issubdtype(t_next.dtype, jnp.floating)
        and not jnp.issubdtype(t_next.dtype, jnp.integer)
    ):
        raise StateError(f"{who} returned a time of shape {t_next.shape} and dtype {t_next.dtype}; expected a scalar.")
    flags = jnp.zeros((len(timed),), bool)
    for item in events:
        event, active = item if isinstance(item, tuple) else (item, True)
        if (
            not isinstance(event, Event)
            or event.trigger is not TriggerType.TIMED
            or event.system is None
            or (event.system._spec is not leaf._spec)
        ):
            raise StateError(
                f"{who} returned {item!r}: the events must be this system's timed events (made with "
                f"declare_timed_publish_event / declare_timed_discrete_update_event / "
                f"declare_timed_unrestricted_update_event), or (event, active) pairs of them."
            )
        flags = flags.at[[i for i, e in enumerate(timed) if e is event][0]].set(jnp.asarray(active, bool))
    t_next = _checked_next_time(leaf, t_next.astype(t.dtype), flags, t)
    # (a time before now is now: Drake requires the returned time >= the context's time)
    return jnp.maximum(t_next, t), flags


def _checked_next_time(leaf: Any, t_next: jax.Array, flags: jax.Array, t: jax.Array) -> jax.Array:
    """Drake's checks of ``CalcNextUpdateTime``: a NaN time, or a finite time with no event due then,
    is an error naming the system (eager when the values are known, else an ``equinox.error_if``
    raised when the compiled simulation runs)."""
    kind, path = type(leaf).__name__, leaf.get_path()
    head = f"System::CalcNextUpdateTime(): {kind} system '{path}' overrode do_calc_next_update_time() but"
    nan_msg = (
        f"{head} it returned NaN as the next update time. Return infinity (jnp.inf) to indicate no next update time."
    )
    empty_msg = (
        f"{head} it returned a finite update time with no events. Return infinity (jnp.inf) to indicate no next "
        f"update time; otherwise return at least one of this system's timed events (or (event, True))."
    )
    nan = jnp.isnan(t_next)
    empty = jnp.isfinite(t_next) & ~jnp.any(flags) if flags.shape[0] else jnp.isfinite(t_next)
    if not any(isinstance(v, jax.core.Tracer) for v in (t_next, flags, t)):
        if bool(nan):
            raise StateError(nan_msg.replace("time.", f"time (at time={float(t)}).", 1))
        if bool(empty):
            raise StateError(empty_msg.replace("no events.", f"no events (at time={float(t)}: {float(t_next)}).", 1))
        return t_next
    return eqx.branched_error_if(t_next, nan | empty, jnp.where(nan, 0, 1), [nan_msg, empty_msg])


def _shapes(tree: Any) -> tuple[Any, list[tuple[tuple[int, ...], Any]]]:
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return treedef, [(tuple(np.shape(x)), jnp.result_type(x)) for x in leaves]


def normalize_discrete(leaf: Any, new: Any, old: DiscreteValues, where: str) -> DiscreteValues:
    """Accept DiscreteValues, a tuple of group vectors, or one vector (one group); check shapes."""
    if isinstance(new, DiscreteValues):
        groups = new.groups
    elif isinstance(new, (tuple, list)):
        groups = tuple(new)
    else:
        if old.num_groups() != 1:
            raise StateError(
                f"{where} of System {leaf.get_system_id_string()} returned one vector, but the system has "
                f"{old.num_groups()} discrete state groups: return DiscreteValues or a tuple of vectors."
            )
        groups = (new,)
    if len(groups) != old.num_groups():
        raise StateError(
            f"{where} of System {leaf.get_system_id_string()} returned {len(groups)} discrete group(s); "
            f"the system has {old.num_groups()}."
        )
    out: list[Any] = []
    for i, (g, o) in enumerate(zip(groups, old.groups)):
        g = jnp.asarray(g)
        if g.shape != o.shape:
            raise StateError(
                f"{where} of System {leaf.get_system_id_string()}: discrete group {i} has shape {o.shape}; "
                f"the update returned shape {g.shape}. An update may not change a state's shape."
            )
        out.append(g.astype(o.dtype))
    return DiscreteValues(tuple(out), old.system_id)


def check_state(leaf: Any, new: Any, old: State, where: str) -> State:
    """An unrestricted update must return a State of the same structure and shapes."""
    if not isinstance(new, State):
        raise StateError(
            f"{where} of System {leaf.get_system_id_string()} must return a State (e.g. "
            f"dataclasses.replace(state, ...) or state built from the given one); got {type(new).__name__}."
        )
    od, oshapes = _shapes((old.continuous_state.x, old.discrete_state.groups, old.abstract_state.values))
    nd, nshapes = _shapes((new.continuous_state.x, new.discrete_state.groups, new.abstract_state.values))
    if od != nd or [s for s, _ in oshapes] != [s for s, _ in nshapes]:
        raise StateError(
            f"{where} of System {leaf.get_system_id_string()} changed the shape of the state: before "
            f"{[s for s, _ in oshapes]}, after {[s for s, _ in nshapes]}. An unrestricted update returns a "
            f"new State of the same shape."
        )
    cs = old.continuous_state
    x = jnp.asarray(new.continuous_state.x).astype(cs.x.dtype)
    groups = tuple(jnp.asarray(g).astype(o.dtype) for g, o in zip(new.discrete_state.groups, old.discrete_state.groups))
    return State(
        type(cs)(x, cs.num_q, cs.num_v, cs.num_z, cs.system_id),
        DiscreteValues(groups, old.discrete_state.system_id),
        type(old.abstract_state)(tuple(new.abstract_state.values), old.abstract_state.system_id),
        old.system_id,
    )


__all__ = [
    "PUBLISH",
    "DISCRETE_UPDATE",
    "UNRESTRICTED_UPDATE",
    "dispatch_publish",
    "dispatch_discrete",
    "dispatch_unrestricted",
    "dispatch_publish_with_status",
    "dispatch_discrete_with_status",
    "dispatch_unrestricted_with_status",
    "all_events",
]
