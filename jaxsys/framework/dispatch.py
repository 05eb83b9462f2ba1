"""Event dispatch for LeafSystems and Diagrams (a Diagram dispatches to its leaves).

For each kind, the events that are due are collated per leaf into one :class:`EventCollection`
and that leaf's handler for the kind is called once (``do_publish``,
``do_calc_discrete_variable_updates``, ``do_calc_unrestricted_update``), as Drake's EventCollection
page specifies. All leaves see the same pre-update context; their results are then combined.
Which events are due is a boolean per event (possibly traced), so this runs inside ``jit``.

Imports (within jaxsys): ``context``, ``errors``, ``events``, ``leaf_system``, ``system``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from .context import Context, DiscreteValues, State
from .errors import StateError
from .events import DISCRETE_UPDATE, PUBLISH, UNRESTRICTED_UPDATE, Event, EventCollection


if TYPE_CHECKING:
    from .system import System


def event_leaves(system: System) -> list[Any]:
    """The leaves of ``system`` (itself for a LeafSystem), in context order."""
    if hasattr(system, "subsystems"):
        flat = system._flat()  # type: ignore[attr-defined]
        return [system._system_at(p) for p in flat.leaf_paths]  # type: ignore[attr-defined]
    return [system]


def all_events(system: System) -> list[tuple[int, Event]]:
    """(leaf index, event) for every event declared anywhere in ``system``."""
    out = []
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
        from .errors import InputPortNotConnectedError
        from .leaf_system import _Raise

        ev = system._evaluator(context)  # type: ignore[attr-defined]
        out = []
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
            out[li] = EventCollection(evs, jnp.stack([jnp.asarray(a) for a in act]))
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


def dispatch_publish(system: System, context: Context, events: EventCollection) -> tuple[Any, ...]:
    """Run the publish handlers; returns one recorded value per event in ``events`` (None if none)."""
    leaves, ctxs, by_leaf = _by_leaf(system, context, events)
    recorded: dict[int, Any] = {}
    for li, sub in by_leaf.items():
        values = leaves[li].do_publish(ctxs[li], sub)
        if not isinstance(values, tuple) or len(values) != sub.size():
            raise StateError(
                f"do_publish of System {leaves[li].get_system_id_string()} must return a tuple with one "
                f"recorded value (or None) per event; got {type(values).__name__}."
            )
        for e, v in zip(sub.get_events(), values):
            recorded[id(e)] = v
    return tuple(recorded.get(id(e)) for e in events.get_events())


def dispatch_discrete(system: System, context: Context, events: EventCollection) -> DiscreteValues:
    """New discrete state (all groups, in context order) after the discrete-update events."""
    leaves, ctxs, by_leaf = _by_leaf(system, context, events)
    leaf_ctxs = list(context._leaf_contexts())
    for li, sub in by_leaf.items():
        old = leaf_ctxs[li].state.discrete_state
        new = leaves[li].do_calc_discrete_variable_updates(ctxs[li], sub, old)
        new = normalize_discrete(leaves[li], new, old, "do_calc_discrete_variable_updates")
        leaf_ctxs[li] = leaf_ctxs[li]._replace_state(discrete_state=new)
    return DiscreteValues(context._with_leaf_contexts(leaf_ctxs).get_discrete_state().groups, system.get_system_id())


def dispatch_unrestricted(system: System, context: Context, events: EventCollection) -> State:
    """New whole state (context order) after the unrestricted-update events."""
    leaves, ctxs, by_leaf = _by_leaf(system, context, events)
    leaf_ctxs = list(context._leaf_contexts())
    for li, sub in by_leaf.items():
        old = leaf_ctxs[li].state
        new = leaves[li].do_calc_unrestricted_update(ctxs[li], sub, old)
        new = check_state(leaves[li], new, old, "do_calc_unrestricted_update")
        leaf_ctxs[li] = leaf_ctxs[li]._replace_state(
            continuous_state=new.continuous_state,
            discrete_state=new.discrete_state,
            abstract_state=new.abstract_state,
        )
    state = context._with_leaf_contexts(leaf_ctxs).get_state()
    return State(state.continuous_state, state.discrete_state, state.abstract_state, system.get_system_id())


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
    out = []
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
    "all_events",
]
