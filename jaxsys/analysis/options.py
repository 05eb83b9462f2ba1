"""``simulate``'s options grouped by concern, as Diffrax's ``SaveAt`` and adjoint objects are.

* `SaveAt`: what a run records and when (``save_at`` times, the ``record`` function, dense output);
* `EventOptions`: how events are handled (witness isolation, the monitor, publish-log sizes) and how a
  run continues an earlier one (initialization, updates due at the start, pending witness events);
* `DiscreteAdjoint` / `RecursiveCheckpointAdjoint`: how reverse mode differentiates the loop.

Each is an immutable ``equinox.Module``; ``simulate(..., save_at=SaveAt(...), events=EventOptions(...),
adjoint=...)`` is the same run as the flat keywords they group (which keep working). Giving a grouped
object and one of the flat keywords it holds, with another value, is an error naming both.

Imports: the framework's errors only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx

from ..framework.errors import JaxsysError


class SaveAt(eqx.Module):
    """What a run records and when (Diffrax's ``SaveAt``).

    **Fields:**
    - `ts`: increasing times in [t0, t_final] at which to record, s (``simulate``'s ``save_at``);
      None: none (the result's final context is always there).
    - `record`: ``f(context) -> pytree`` recorded at those times (default: the continuous state).
    - `dense`: record from the integrator's continuous extension of each step instead of truncating
      steps to land on the times (``dense_output``; explicit Runge-Kutta methods, systems without
      events).
    - `trajectory`: keep the continuous trajectory, up to this many steps (0: none): the result's
      ``trajectory``, a [`DenseTrajectory`][jaxsys.DenseTrajectory] with ``evaluate(t)`` and
      ``derivative(t)`` (Drake's dense output; Diffrax's ``SaveAt(dense=True)``). Explicit Runge-Kutta
      methods, systems without events; a run that takes more steps than this stops with an error
      naming the capacity (``throw=False``: ``trajectory.complete()`` is False).
    """

    ts: Any = None
    record: Callable[..., Any] | None = eqx.field(static=True, default=None)
    dense: bool = eqx.field(static=True, default=False)
    trajectory: int = eqx.field(static=True, default=0)


class EventOptions(eqx.Module):
    """How a run handles events, and how it continues an earlier run (``simulate``'s keywords of the
    same names; see [`simulate`][jaxsys.simulate] for each).

    **Fields:** `witness_isolation` (True: isolate each crossing; False: Drake without a context
    accuracy), `witness_iterations` (precision of the isolation, default 40), `monitor` (``f(context)
    -> EventStatus or None`` after every step: Drake's ``set_monitor``), `log_capacity` (records kept per
    per-step publish event), `initialize` (run Drake's ``Initialize`` first), `updates_at_start`
    (perform the updates due at the start time), `pending_witness_events` (the witness updates due
    at the end of the run this one continues).
    """

    witness_isolation: bool = eqx.field(static=True, default=True)
    witness_iterations: int = eqx.field(static=True, default=40)
    monitor: Callable[..., Any] | None = eqx.field(static=True, default=None)
    log_capacity: int = eqx.field(static=True, default=10_000)
    initialize: bool = eqx.field(static=True, default=True)
    updates_at_start: bool = eqx.field(static=True, default=True)
    pending_witness_events: Any = None


class DiscreteAdjoint(eqx.Module):
    """Reverse mode by the loop's discrete adjoint (the default, ``loop="bounded"``): evaluated, the run
    is a plain ``lax.while_loop``; ``jax.grad`` sweeps it backward from checkpoints placed while it runs,
    ``jax.jacfwd`` runs its forward sensitivity, and second derivatives work. Exact derivatives of the
    computed map (not of the ODE), in the spirit of Diffrax's ``RecursiveCheckpointAdjoint``."""


class RecursiveCheckpointAdjoint(eqx.Module):
    """Reverse mode through equinox's checkpointed while loop (``loop="checkpointed"``), keeping only
    ``checkpoints`` saved states and recomputing the rest: for horizons whose ``grad`` would not fit in
    memory otherwise (Diffrax's ``RecursiveCheckpointAdjoint(checkpoints)``). Forward mode (``jvp``,
    ``jacfwd``) is not available with it.

    **Fields:** `checkpoints`: saved states (None: equinox's default, about log(max_steps))."""

    checkpoints: int | None = eqx.field(static=True, default=None)


_EVENT_DEFAULTS = {
    "witness_isolation": True,
    "witness_iterations": 40,
    "monitor": None,
    "log_capacity": 10_000,
    "initialize": True,
    "updates_at_start": True,
    "pending_witness_events": None,
}


def _same(a: Any, b: Any) -> bool:
    return a is b or (not hasattr(a, "shape") and not hasattr(b, "shape") and a == b)


def unpack_options(save_at: Any, adjoint: Any, events: Any, flat: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``(save_at times, flat keywords)`` from the grouped objects and ``simulate``'s flat keywords
    (``flat``: record, dense_output, loop, checkpoints and the fields of `EventOptions`)."""
    out = dict(flat)

    def take(name: str, value: Any, default: Any, group: str) -> None:
        if not _same(out[name], default) and not _same(out[name], value):
            raise JaxsysError(
                f"simulate: {name}={out[name]!r} conflicts with {group} (which sets {name}={value!r}); give it in "
                f"one place."
            )
        out[name] = value

    if isinstance(save_at, SaveAt):
        take("record", save_at.record, None, "save_at=SaveAt(...)")
        take("dense_output", save_at.dense, False, "save_at=SaveAt(...)")
        out["trajectory"] = int(save_at.trajectory)
        if out["trajectory"] < 0:
            raise JaxsysError(f"simulate: SaveAt(trajectory=...) must be >= 0 (steps kept); got {save_at.trajectory}.")
        save_at = save_at.ts
    if events is not None:
        if not isinstance(events, EventOptions):
            raise JaxsysError(f"simulate: events must be a jaxsys.EventOptions; got {type(events).__name__}.")
        for name, default in _EVENT_DEFAULTS.items():
            take(name, getattr(events, name), default, "events=EventOptions(...)")
    if adjoint is not None:
        if isinstance(adjoint, DiscreteAdjoint):
            take("loop", "bounded", "bounded", "adjoint=DiscreteAdjoint()")
        elif isinstance(adjoint, RecursiveCheckpointAdjoint):
            take("loop", "checkpointed", "bounded", "adjoint=RecursiveCheckpointAdjoint(...)")
            take("checkpoints", adjoint.checkpoints, None, "adjoint=RecursiveCheckpointAdjoint(...)")
        else:
            raise JaxsysError(
                f"simulate: adjoint must be jaxsys.DiscreteAdjoint() or jaxsys.RecursiveCheckpointAdjoint(...); got "
                f"{type(adjoint).__name__}."
            )
    return save_at, out


__all__ = ["DiscreteAdjoint", "EventOptions", "RecursiveCheckpointAdjoint", "SaveAt", "unpack_options"]
