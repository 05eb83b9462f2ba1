"""System ids: the mechanism behind Drake's "System Compatibility" checks.

Every System gets a unique positive integer id when it is constructed. Every object a System makes
(Context, State, ContinuousState, DiscreteValues, AbstractValues, Parameters, SystemOutput) carries
that id in a *static* field, so it is part of the pytree structure and invisible to ``jit``. Public
System methods validate it. An id of ``0`` means "no id" (Drake's invalid, default-constructed id):
such an object is refused by every System method, as the seed page specifies.

Imports (within jaxsys): ``errors``, ``system``.
"""

from __future__ import annotations

import itertools
import weakref
from typing import TYPE_CHECKING, Any

from .errors import SystemMismatchError


if TYPE_CHECKING:
    from .system import System

INVALID_SYSTEM_ID = 0
_counter = itertools.count(1)
_registry: weakref.WeakValueDictionary[int, System] = weakref.WeakValueDictionary()

_TROUBLESHOOT = (
    "A Context (or State, Parameters, output) may only be used with the System that created it; "
    "for a subsystem of a Diagram use diagram.get_subsystem_context(context, subsystem)."
)


def new_system_id(system: System) -> int:
    """Return a fresh, unique system id and remember which system owns it (weakly)."""
    sid = next(_counter)
    _registry[sid] = system
    return sid


def describe_system_id(system_id: int) -> str:
    """A human-readable name for the system with this id (its path and type), for error messages."""
    if system_id == INVALID_SYSTEM_ID:
        return "<no system: the object carries no system id>"
    system = _registry.get(system_id)
    if system is None:
        return f"<a System that no longer exists (id {system_id})>"
    return f"{system.get_path()} ({type(system).__name__})"


def validate_created_for(system: System, obj: Any, what: str | None = None) -> None:
    """Raise [`SystemMismatchError`][jaxsys.SystemMismatchError] unless ``obj`` carries ``system``'s id.

    Mirrors Drake's ``System::ValidateCreatedForThisSystem``; ``what`` names the object kind
    (defaults to its type name).
    """
    kind = what or type(obj).__name__
    obj_id = getattr(obj, "system_id", None)
    if obj_id is None:
        raise SystemMismatchError(
            f"A function call on System {system.get_path()} ({type(system).__name__}) expected a "
            f"{kind} created by that System, but was given an object of type {type(obj).__name__}."
        )
    if obj_id == system.get_system_id():
        return
    if obj_id == INVALID_SYSTEM_ID:
        raise SystemMismatchError(
            f"A function call on System {system.get_path()} ({type(system).__name__}) was passed a "
            f"{kind} that carries no system id (for example one converted to another dtype with "
            f"astype(), which clears ids as Drake's scalar-converting SetFrom does). Create one with "
            f"this System's methods and copy values into it with set_from(). {_TROUBLESHOOT}"
        )
    theirs = describe_system_id(obj_id)
    mine = f"{system.get_path()} ({type(system).__name__})"
    if theirs == mine:  # two instances with the same path: tell them apart by id
        theirs, mine = f"{theirs[:-1]}, id {obj_id})", f"{mine[:-1]}, id {system.get_system_id()})"
    raise SystemMismatchError(f"{kind} was created for System {theirs}, not for System {mine}. {_TROUBLESHOOT}")


def same_structure(a: Any, b: Any) -> bool:
    """Whether two pytree definitions (``jax.tree_util.tree_structure``) are equal."""
    return bool(a == b)
