"""What an event handler reports (Drake's ``EventStatus``), as a value that works inside ``jit``.

A handler (a declared event's callback, an overridden ``do_*`` handler, or the simulation's monitor)
may return an [`EventStatus`][jaxsys.EventStatus] alongside its result:

* publish: ``value``, ``None``, ``status`` or ``(value, status)``;
* discrete update: ``values``, ``status`` (values unchanged) or ``(values, status)``;
* unrestricted update: ``state``, ``status`` (state unchanged) or ``(state, status)``.

A handler that returns no status *succeeded*. The severities, in Drake's order:

====================  =========================================================================
``did_nothing``       nothing happened: an update's result is discarded (and not counted)
``succeeded``         the default
``reached_termination``  the simulation stops after this event (its result is kept), normally
``failed``            the simulation stops with an error naming the system and the message
====================  =========================================================================

Which severity a handler reports may depend on traced values (``EventStatus.reached_termination_if(
x[0] < 0, "fell over")`` or `EventStatus.select`); the *messages* are static strings (fixed
when the simulation is traced; Drake formats them at run time). Statuses combine "first worst"
(`EventStatus.keep_more_severe`): the most severe wins, the earliest among equals.

Each status knows every message it may carry (``reasons``, static) and which one it carries
(``which``, traced), so a combined status is still one small array pair inside a loop.

Imports: nothing from jaxsys.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .errors import JaxsysError


DID_NOTHING = 0
SUCCEEDED = 1
REACHED_TERMINATION = 2
FAILED = 3
SEVERITY_NAMES = ("did_nothing", "succeeded", "reached_termination", "failed")


class _ClassOrInstance:
    """Drake names both a constructor (``EventStatus::Succeeded()``) and a predicate
    (``status.succeeded()``) after each severity; in snake_case they are one name. On the class
    this gives the constructor, on an instance the predicate."""

    def __init__(self, severity: int) -> None:
        self.severity = severity

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: Any) -> Any:
        severity = self.severity
        if instance is None:

            def make(system: Any = None, message: str = "") -> EventStatus:
                return owner._make(severity, system, message)

            make.__doc__ = (
                f"A {SEVERITY_NAMES[severity]} status (Drake: ``EventStatus::"
                f"{''.join(w.title() for w in SEVERITY_NAMES[severity].split('_'))}``). ``system`` (a System "
                f"or its path; default: the system whose handler returns it) and ``message`` (a static string)."
            )
            return make

        def predicate() -> jax.Array:
            return jnp.asarray(instance.severity) == severity

        predicate.__doc__ = f"Whether the severity is {SEVERITY_NAMES[severity]} (a bool array)."
        return predicate


def _system_path(system: Any) -> str:
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    get = getattr(system, "get_system_id_string", None)
    return get() if get is not None else str(system)


class EventStatus(eqx.Module):
    """The status an event handler or monitor reports (Drake's ``EventStatus``).

    **Fields:**
    - `severity`: int32 array: 0 did nothing, 1 succeeded, 2 reached termination, 3 failed
      (``EventStatus.DID_NOTHING`` ... ``FAILED``, Drake's ``kDidNothing`` ...).
    - `which`: int32 array: the index in `reasons` of the (system, message) this status carries
      (-1: none).
    - `reasons`: static tuple of ``(system path, message)`` pairs this status may carry.
    - `bound`, `lower`: static upper and lower bounds of `severity` (let the loop skip the logic of
      statuses that cannot occur, e.g. stopping when no handler can stop the run).

    Build with ``EventStatus.succeeded()``, ``EventStatus.did_nothing()``,
    ``EventStatus.reached_termination(system, message)``, ``EventStatus.failed(system, message)``
    (``system`` may be omitted: the system whose handler returns the status is filled in), or their
    traced forms `reached_termination_if` / `failed_if`. On a status, ``status.succeeded()``
    etc. are predicates (bool arrays), as Drake's.
    """

    severity: jax.Array
    which: jax.Array
    reasons: tuple[tuple[str, str], ...] = eqx.field(static=True, default=())
    bound: int = eqx.field(static=True, default=SUCCEEDED)
    lower: int = eqx.field(static=True, default=DID_NOTHING)

    DID_NOTHING = DID_NOTHING
    SUCCEEDED = SUCCEEDED
    REACHED_TERMINATION = REACHED_TERMINATION
    FAILED = FAILED

    did_nothing = _ClassOrInstance(DID_NOTHING)
    succeeded = _ClassOrInstance(SUCCEEDED)
    reached_termination = _ClassOrInstance(REACHED_TERMINATION)
    failed = _ClassOrInstance(FAILED)

    @classmethod
    def _make(cls, severity: int, system: Any = None, message: str = "") -> EventStatus:
        if isinstance(system, str) and not message and severity >= REACHED_TERMINATION:
            system, message = None, system  # EventStatus.failed("message")
        if not isinstance(message, str):
            raise TypeError(
                f"EventStatus message must be a str (static: fixed when the simulation is traced); got "
                f"{type(message).__name__}."
            )
        if severity <= SUCCEEDED and not message and system is None:
            return cls(jnp.asarray(severity, jnp.int32), jnp.asarray(-1, jnp.int32), (), severity, severity)
        reasons = ((_system_path(system), message),)
        return cls(jnp.asarray(severity, jnp.int32), jnp.asarray(0, jnp.int32), reasons, severity, severity)

    @classmethod
    def reached_termination_if(cls, condition: Any, message: str = "", system: Any = None) -> EventStatus:
        """Reached termination where ``condition`` (a traced bool) holds, else succeeded."""
        return cls.select(condition, cls._make(REACHED_TERMINATION, system, message), cls._make(SUCCEEDED))

    @classmethod
    def failed_if(cls, condition: Any, message: str = "", system: Any = None) -> EventStatus:
        """Failed where ``condition`` (a traced bool) holds, else succeeded."""
        return cls.select(condition, cls._make(FAILED, system, message), cls._make(SUCCEEDED))

    @classmethod
    def select(cls, condition: Any, if_true: EventStatus, if_false: EventStatus) -> EventStatus:
        """``if_true`` where ``condition`` (a traced bool) holds, else ``if_false``."""
        n = len(if_true.reasons)
        which_f = jnp.where(if_false.which >= 0, if_false.which + n, -1)
        cond = jnp.asarray(condition)
        return cls(
            jnp.where(cond, if_true.severity, if_false.severity).astype(jnp.int32),
            jnp.where(cond, if_true.which, which_f).astype(jnp.int32),
            if_true.reasons + if_false.reasons,
            max(if_true.bound, if_false.bound),
            min(if_true.lower, if_false.lower),
        )

    def keep_more_severe(self, other: EventStatus) -> EventStatus:
        """The more severe of the two; ``self`` among equals ("first worst", Drake's ``KeepMoreSevere``)."""
        if other.bound == DID_NOTHING:  # (other can only be did_nothing: self is at least as severe)
            return self
        return EventStatus.select(other.severity > self.severity, other, self)

    def with_default_system(self, system: Any) -> EventStatus:
        """A copy whose reasons with no system name ``system`` (the dispatcher fills in the handler's)."""
        path = _system_path(system)
        reasons = tuple((s or path, m) for s, m in self.reasons)
        return EventStatus(self.severity, self.which, reasons, self.bound, self.lower)

    def gated(self, active: Any) -> EventStatus:
        """This status where ``active``, else did_nothing (an event that did not run reports nothing)."""
        if isinstance(active, (bool, np.bool_)):
            return self if active else EventStatus._make(DID_NOTHING)
        return EventStatus.select(active, self, EventStatus._make(DID_NOTHING))

    def system(self) -> str:
        """The path of the system that set the status ('' for none; concrete values only) (Drake: ``system``)."""
        i = int(self.which)
        return self.reasons[i][0] if 0 <= i < len(self.reasons) else ""

    def message(self) -> str:
        """The message ('' for none; concrete values only) (Drake: ``message``)."""
        i = int(self.which)
        return self.reasons[i][1] if 0 <= i < len(self.reasons) else ""

    def always_applied(self) -> bool:
        """Statically known to be succeeded or reached termination (an update with it is applied)."""
        return self.lower >= SUCCEEDED and self.bound <= REACHED_TERMINATION

    def severity_name(self) -> str:
        """'did_nothing', 'succeeded', 'reached_termination' or 'failed' (concrete values only)."""
        return SEVERITY_NAMES[int(self.severity)]

    def failure_message(self, function_name: str) -> str:
        """Drake's ``ThrowOnFailure`` text for this status: ``"<function_name>(): An event handler in
        <Type> system '<path>' failed with message: "<message>"."`` (concrete values only)."""
        i = int(self.which)
        path, message = self.reasons[i] if 0 <= i < len(self.reasons) else ("", "")
        return f'{function_name}(): An event handler in {_system_id(path)} failed with message: "{message}".'

    def throw_on_failure(self, function_name: str, value: Any = None) -> Any:
        """Raise if this status failed, with Drake's message (Drake: ``ThrowOnFailure``); returns
        ``value``. Under ``jit`` / ``vmap`` (a traced severity) the check is an ``equinox.error_if`` on
        ``value``'s arrays, raised when the compiled function runs."""
        if self.bound < FAILED:
            return value  # (no handler here can fail)
        if not isinstance(self.severity, jax.core.Tracer):
            if int(self.severity) >= FAILED:
                raise JaxsysError(self.failure_message(function_name))
            return value
        texts = [
            f'{function_name}(): An event handler in {_system_id(p)} failed with message: "{m}".'
            for p, m in self.reasons
        ] or [f"{function_name}(): an event handler failed."]
        which = jnp.clip(self.which, 0, len(texts) - 1)
        leaves, tree = jax.tree_util.tree_flatten(value)
        arrays = [i for i, v in enumerate(leaves) if eqx.is_array(v)]
        if not arrays:
            return value
        checked = eqx.branched_error_if(
            tuple(leaves[i] for i in arrays), jnp.asarray(self.severity) >= FAILED, which, texts
        )
        for i, v in zip(arrays, checked):
            leaves[i] = v
        return jax.tree_util.tree_unflatten(tree, leaves)


def _system_id(path: str) -> str:
    """Drake's naming of a system in messages: ``"<Type> system '<path>'"`` ('System' for none)."""
    if not path:
        return "System"
    if path.endswith(")") and " (" in path:
        where, kind = path[:-1].rsplit(" (", 1)
        return f"{kind} system '{where}'"
    return f"system '{path}'"


def split_status(value: Any) -> tuple[Any, EventStatus | None]:
    """A handler's return value as (result, status or None); a bare status means no result (None:
    'unchanged' for updates)."""
    if isinstance(value, EventStatus):
        return None, value
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], EventStatus):
        return value[0], value[1]
    return value, None


def combine(statuses: list[EventStatus]) -> EventStatus:
    """First worst over ``statuses`` in order (did_nothing for none)."""
    out = EventStatus._make(DID_NOTHING)
    for s in statuses:
        out = out.keep_more_severe(s)
    return out


__all__ = ["EventStatus"]
