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

    @property
    def t(self) -> Array:
        """Current time, s."""
        return self.packed[CLOCK_FIELDS.index("t")]

    @property
    def h_try(self) -> Array:
        """The step to attempt next, s."""
        return self.packed[CLOCK_FIELDS.index("h_try")]

    @property
    def h_ideal(self) -> Array:
        """The last step error control chose freely, s."""
        return self.packed[CLOCK_FIELDS.index("h_ideal")]

    @property
    def smallest(self) -> Array:
        """Smallest adapted step taken, s (NaN: none)."""
        return self.packed[CLOCK_FIELDS.index("smallest")]

    @property
    def largest(self) -> Array:
        """Largest step taken, s."""
        return self.packed[CLOCK_FIELDS.index("largest")]

    @property
    def initial(self) -> Array:
        """First step taken, s (NaN: none)."""
        return self.packed[CLOCK_FIELDS.index("initial")]

    @property
    def previous(self) -> Array:
        """Last step taken, s."""
        return self.packed[CLOCK_FIELDS.index("previous")]

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

    @property
    def steps(self) -> Array:
        """Accepted steps."""
        return self.packed[COUNTER_FIELDS.index("steps")]

    @property
    def attempts(self) -> Array:
        """Step attempts."""
        return self.packed[COUNTER_FIELDS.index("attempts")]

    @property
    def shrinkages(self) -> Array:
        """Steps shrunk by error control."""
        return self.packed[COUNTER_FIELDS.index("shrinkages")]

    @property
    def substep_failures(self) -> Array:
        """Sub-step failures."""
        return self.packed[COUNTER_FIELDS.index("substep_failures")]

    @property
    def status(self) -> Array:
        """Status code (0 = ok)."""
        return self.packed[COUNTER_FIELDS.index("status")]

    @property
    def at_minimum(self) -> Array:
        """1 while pinned at the minimum step."""
        return self.packed[COUNTER_FIELDS.index("at_minimum")]

    @property
    def evaluations(self) -> Array:
        """Derivative evaluations."""
        return self.packed[COUNTER_FIELDS.index("evaluations")]

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
    ``[severity, reason index]``: see `pack`), `guard` (per guarded witness, whether it is watched and
    the highest value it had since its update: see `EventProgram.guard_status`; () when none).
    """

    rest: Any
    periodic: Array
    logs: Any
    step_open: Array
    counts: Array
    witness_pending: Array
    status: Array
    guard: Any = ()


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
    grid: Any  # FixedGrid in fixed-step mode, else ()
    events: Any  # EventCarry for a system with events, else ()
    integrator: Any  # the integrator protocol's state (opaque)
    dense: Any  # DenseStep with dense output, else ()
    segments: Any = ()  # trajectory.SegmentBuffer when the run keeps its trajectory, else ()
