"""The carry of the stepping loop, as named pytrees: one NamedTuple per concern.

* `Clock`: time and step sizes (the step to try, the ideal one, Drake's step statistics);
* `Counters`: integer statistics and the run's status;
* `FixedGrid`: fixed-step mode's grid origin (the last boundary) and steps since it;
* `EventCarry`: discrete/abstract state, periodic-event counters, publish logs, event counts;
* `DenseStep`: the last attempted step and its interpolation data (``dense_output``);
* `LoopState`: all of them with the continuous state and the integrator's own state (the integrator
  protocol's: a first-same-as-last stage, a Newton cache; opaque to the loop).

`Clock` and `Counters` keep their scalars packed in one vector each, behind named
properties (``clock.t``, ``counters.attempts``) and a named ``replace(...)``: XLA's CPU runtime
builds a vector of at most 8 scalars in one fused kernel, which measured one kernel a step attempt
fewer than carrying separate scalars (about 0.01 us of a 0.3 us step). No call site indexes them by
number.

Imports: nothing from jaxsys.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


Array = jax.Array

CLOCK_FIELDS = ("t", "h_try", "h_ideal", "smallest", "largest", "initial", "previous")
COUNTER_FIELDS = ("steps", "attempts", "shrinkages", "substep_failures", "status", "at_minimum", "evaluations")


def _slot(fields: tuple[str, ...], name: str, doc: str) -> property:
    i = fields.index(name)
    return property(lambda self: self.packed[i], doc=doc)


def _pack(fields: tuple[str, ...], dtype: Any, values: dict[str, Any]) -> Array:
    return jnp.stack([jnp.asarray(values[k], dtype) for k in fields])


def _repacked(record: Any, fields: tuple[str, ...], changes: dict[str, Any]) -> Array:
    """``record``'s packed vector with the named entries changed (the others as they are)."""
    values = {k: changes[k] if k in changes else getattr(record, k) for k in fields}
    return _pack(fields, record.packed.dtype, values)


class Clock(NamedTuple):
    """Time and step sizes, packed in one float vector (see the module docstring).

    Properties (scalars, seconds): `t` (current time), `h_try` (the step to attempt next), `h_ideal`
    (the last step error control asked for that was not limited by a boundary), and Drake's
    statistics `smallest` (smallest adapted step; NaN until one), `largest`, `initial` (NaN until
    the first accepted step), `previous`.
    """

    packed: Array

    t = _slot(CLOCK_FIELDS, "t", "Current time, s.")
    h_try = _slot(CLOCK_FIELDS, "h_try", "The step to attempt next, s.")
    h_ideal = _slot(CLOCK_FIELDS, "h_ideal", "The last step error control chose freely, s.")
    smallest = _slot(CLOCK_FIELDS, "smallest", "Smallest adapted step taken, s (NaN: none).")
    largest = _slot(CLOCK_FIELDS, "largest", "Largest step taken, s.")
    initial = _slot(CLOCK_FIELDS, "initial", "First step taken, s (NaN: none).")
    previous = _slot(CLOCK_FIELDS, "previous", "Last step taken, s.")

    @staticmethod
    def start(t0: Array, h0: float) -> Clock:
        """The clock at ``t0`` with first step ``h0`` and no step taken."""
        nan = jnp.nan
        values = dict(t=t0, h_try=h0, h_ideal=h0, smallest=nan, largest=0.0, initial=nan, previous=nan)
        return Clock(_pack(CLOCK_FIELDS, t0.dtype, values))

    def replace(self, **changes: Array) -> Clock:
        """A copy with the named entries changed."""
        return Clock(_repacked(self, CLOCK_FIELDS, changes))


class Counters(NamedTuple):
    """Integer statistics and status, packed in one int32 vector (see the module docstring).

    Properties: `steps` (accepted), `attempts`, `shrinkages` (by error control), `substep_failures`
    (e.g. Newton failures), `status` (a `Status` code), `at_minimum`
    (1 while error control is pinned at the minimum step), `evaluations` (derivative evaluations: the
    integrator's start and its attempts).
    """

    packed: Array

    steps = _slot(COUNTER_FIELDS, "steps", "Accepted steps.")
    attempts = _slot(COUNTER_FIELDS, "attempts", "Step attempts.")
    shrinkages = _slot(COUNTER_FIELDS, "shrinkages", "Steps shrunk by error control.")
    substep_failures = _slot(COUNTER_FIELDS, "substep_failures", "Sub-step failures.")
    status = _slot(COUNTER_FIELDS, "status", "Status code (0 = ok).")
    at_minimum = _slot(COUNTER_FIELDS, "at_minimum", "1 while pinned at the minimum step.")
    evaluations = _slot(COUNTER_FIELDS, "evaluations", "Derivative evaluations.")

    @staticmethod
    def start(evaluations: Any = 0) -> Counters:
        """All zero (status ok), with ``evaluations`` already spent."""
        values = {k: 0 for k in COUNTER_FIELDS}
        values["evaluations"] = evaluations
        return Counters(_pack(COUNTER_FIELDS, jnp.int32, values))

    def replace(self, **changes: Array) -> Counters:
        """A copy with the named entries changed."""
        return Counters(_repacked(self, COUNTER_FIELDS, changes))


class FixedGrid(NamedTuple):
    """Fixed-step mode: steps land on ``origin + n * max_step_size``; the origin moves to each
    boundary reached (and each witness time), so a shortened step does not shift later ones."""

    origin: Array
    steps_since: Array


class EventCarry(NamedTuple):
    """Event bookkeeping of a system with events.

    **Fields:** `rest` (discrete groups and abstract values), `periodic` (per periodic event, the index
    k of its next occurrence ``offset + k * period``), `logs` (the publish logs), `step_open` (the last
    attempt was rejected, so the next attempt continues the same Drake step and must not repeat its
    start-of-step updates), `counts` ([publishes, discrete updates, unrestricted updates]),
    `witness_pending` (witnesses that triggered at the end of the last step: their update events run
    at the start of the next), `status` (the handlers' and monitor's status so far, int32
    ``[severity, reason index]``: see `pack`).
    """

    rest: Any
    periodic: Array
    logs: Any
    step_open: Array
    counts: Array
    witness_pending: Array
    status: Array


class DenseStep(NamedTuple):
    """The last attempted step (from ``t`` by ``h``, ``x`` to ``x_new``) and its interpolation data. The
    saving loop reads it only after the stepping loop stopped on an accepted step, so it is that step.

    Packed in two vectors, ``th = [t, h]`` and ``xs = [x, x_new, data...]`` (the data's rows of the
    state's size, flattened), so that the loop carries two elements for it, not five: each element of
    a while loop's carry costs on a CPU at every step and at every entry of the loop (one per save).
    Build it with `make`; read it with `t`, `h` and `states`."""

    th: Array
    xs: Array

    @staticmethod
    def make(t: Array, h: Array, x: Array, x_new: Array, data: Array) -> DenseStep:
        """The packed step."""
        t = jnp.asarray(t)
        return DenseStep(
            jnp.stack([t, jnp.asarray(h, t.dtype)]),
            jnp.concatenate([x, x_new.astype(x.dtype), jnp.ravel(data).astype(x.dtype)]),
        )

    @property
    def t(self) -> Array:
        return self.th[0]

    @property
    def h(self) -> Array:
        return self.th[1]

    def states(self, n: int) -> tuple[Array, Array, Array | None]:
        """``(x, x_new, data)`` for a state of ``n`` entries (data: rows of ``n``; None when n = 0)."""
        x, x_new = self.xs[:n], self.xs[n : 2 * n]
        return x, x_new, (self.xs[2 * n :].reshape(-1, n) if n else None)


class LoopState(NamedTuple):
    """The stepping loop's carry. Concerns a run does not have are ``()``."""

    x: Array
    clock: Clock
    counters: Counters
    grid: FixedGrid | tuple[()]
    events: EventCarry | tuple[()]
    integrator: Any
    dense: DenseStep | tuple[()]
