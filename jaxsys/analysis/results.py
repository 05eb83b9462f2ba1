"""What a simulation returns: its status, Drake's statistics and the [`SimulationResult`][jaxsys.SimulationResult].

* [`Status`][jaxsys.Status]: the outcome of a run, an enumeration whose values are the messages a user reads
  (as Diffrax's ``RESULTS``); inside the loop a status travels as its integer `Status.code`.
* [`IntegratorStatistics`][jaxsys.IntegratorStatistics] and [`SimulatorStatistics`][jaxsys.SimulatorStatistics]:
Drake's statistics, as arrays.
* [`SimulationResult`][jaxsys.SimulationResult]: the final context, the recorded values, statistics, status and logs.
* `LoopOutput`: what a stepping loop hands back to [`simulate`][jaxsys.simulate] (internal).

Imports: the framework (Context, errors), `event_loop` (``PublishLog``),
`integrators.newton` (the names of the Newton statistics) and `loop_state` (the packed layouts) only.
"""

from __future__ import annotations

import enum
import re
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context
from ..framework.errors import JaxsysError
from .event_loop import PublishLog
from .integrators.newton import STAT_FIELDS as NEWTON_STAT_FIELDS
from .loop_state import CLOCK_FIELDS, COUNTER_FIELDS


Array = jax.Array


class Status(enum.Enum):
    """The outcome of a simulation; each value is the message a user reads.

    ``result.status`` holds the integer `code` (an array, so it works under ``jit`` and
    ``vmap``); `SimulationResult.message` turns it back into text.
    """

    OK = "ok"
    MAX_STEPS = (
        "The maximum number of integrator step attempts (integrator max_steps) was reached before t_final, with a "
        "finite state and steps above the minimum: the run needs more steps than allowed. Increase max_steps or "
        "loosen target_accuracy; if the steps were tiny because the system is stiff, use an implicit integrator "
        "(RadauIntegrator)."
    )
    MIN_STEP = (
        "Error control wants to select a step smaller than the minimum allowed "
        "(requested_minimum_step_size, or the working minimum ~1e-14 t). This is typically an indication that "
        "some part of your system with continuous state is going unstable and/or is producing excessively "
        "large derivatives."
    )
    NONFINITE = (
        "The continuous state became NaN or infinite: it was at the start (a NaN initial state), or the dynamics "
        "gave NaN/inf that no smaller step avoids (a blow-up, a division by zero, sqrt or log of a negative "
        "number). Check the initial state and the dynamics."
    )
    WITNESS_NONFINITE = (
        "A witness function returned NaN or an infinite value, so whether it crossed zero cannot be decided. "
        "Check the witness functions (and the state they read) for a division by zero or a NaN input."
    )
    NEWTON_FAILED = (
        "The implicit integrator's Newton iteration did not converge even with the step halved down to the "
        "minimum step size (requested_minimum_step_size, or the working minimum ~1e-14 t). The iteration matrix "
        "may be singular, or the derivatives discontinuous or NaN near this state; check the model, or lower "
        "requested_minimum_step_size."
    )
    BAD_TIMES = (
        "The run's times are invalid (they were only known at run time): t_final or the context's time is NaN or "
        "infinite, t_final is before the context's time, or save_at holds a NaN, a time outside [start, t_final], "
        "or times that do not increase. Nothing was simulated."
    )
    EVENT_FAILED = (
        "An event handler or the monitor returned a failed EventStatus; the run stopped at that time "
        "(result.simulator_status() names the system and its message)."
    )

    @property
    def code(self) -> int:
        """The integer stored in ``SimulationResult.status`` (0 = ok)."""
        return _CODES[self]

    @classmethod
    def from_code(cls, code: Any) -> Status:
        """The status of an integer code (a concrete, unbatched value)."""
        return list(cls)[int(code)]


_CODES = {s: i for i, s in enumerate(Status)}

STATUS_OK = Status.OK.code
STATUS_MAX_STEPS = Status.MAX_STEPS.code
STATUS_MIN_STEP = Status.MIN_STEP.code
STATUS_NONFINITE = Status.NONFINITE.code
STATUS_WITNESS_NONFINITE = Status.WITNESS_NONFINITE.code
STATUS_NEWTON_FAILED = Status.NEWTON_FAILED.code
STATUS_BAD_TIMES = Status.BAD_TIMES.code
STATUS_EVENT_FAILED = Status.EVENT_FAILED.code
STATUS_MESSAGES: dict[int, str] = {s.code: s.value for s in Status}
"""Status code -> the message a user reads (the values of [`Status`][jaxsys.Status])."""


def working_minimum_resolution(dtype: Any) -> float:
    """The working minimum step relative to max(1, |t|): Drake's 1e-14, but never below what ``dtype``
    resolves (4 units in the last place: 4.8e-7 in float32)."""
    return max(1e-14, 4.0 * float(jnp.finfo(dtype).eps))


def status_message(code: int, dtype: Any = None, implicit: bool = False) -> str:
    """The message of status ``code`` for a run in ``dtype`` with an implicit integrator or not: the
    working minimum step in the dtype's own figures, and, in a dtype less precise than float64, what
    float32 cannot do and how to turn on float64."""
    text = STATUS_MESSAGES[int(code)]
    if dtype is None:
        return text
    res = working_minimum_resolution(dtype)
    text = text.replace(
        "the working minimum ~1e-14 t", f"the working minimum ~{res:.2g} max(1, |t|) in {jnp.dtype(dtype).name}"
    )
    if implicit and int(code) == STATUS_MAX_STEPS:
        text = text.replace(
            "use an implicit integrator (RadauIntegrator)", "loosen the accuracy (an implicit integrator is in use)"
        )
    low = jnp.finfo(dtype).eps > 1e-10
    if low and int(code) in (STATUS_MIN_STEP, STATUS_NEWTON_FAILED, STATUS_MAX_STEPS):
        name = jnp.dtype(dtype).name
        text += (
            f" This run is in {name} (JAX's default dtype unless x64 is enabled): its steps cannot go below "
            f"~{res:.2g} max(1, |t|) and its states resolve ~{float(jnp.finfo(dtype).eps):.1g} relative; stiff "
            f"problems and tight accuracies often need more than {name} gives. Enable float64 with "
            f"jax.config.update('jax_enable_x64', True) before creating the context."
        )
    return text


def _entry(packed: Array, index: int) -> Array:
    """Entry ``index`` of a packed statistics vector (its last axis; batched runs keep their leading
    axes). Known values are read on the host (no program to compile for an eager read); traced ones
    are sliced in the program."""
    if isinstance(packed, jax.core.Tracer):
        return packed[..., index]
    return jnp.asarray(np.asarray(packed)[..., index])


_CLOCK = {k: i for i, k in enumerate(CLOCK_FIELDS)}
_COUNTERS = {k: i for i, k in enumerate(COUNTER_FIELDS)}
_NEWTON = {k: i for i, k in enumerate(NEWTON_STAT_FIELDS)}
# Drake's names, in the order as_dict lists them: (which vector, its entry)
_INTEGRATOR_NAMES: dict[str, tuple[str, int]] = {
    "num_steps_taken": ("counters", _COUNTERS["steps"]),
    "num_derivative_evaluations": ("counters", _COUNTERS["evaluations"]),
    "num_step_shrinkages_from_error_control": ("counters", _COUNTERS["shrinkages"]),
    "num_substep_failures": ("counters", _COUNTERS["substep_failures"]),
    # (a sub-step failure shrinks the step once: Drake's rule)
    "num_step_shrinkages_from_substep_failures": ("counters", _COUNTERS["substep_failures"]),
    "smallest_adapted_step_size_taken": ("clock", _CLOCK["smallest"]),
    "largest_step_size_taken": ("clock", _CLOCK["largest"]),
    "actual_initial_step_size_taken": ("clock", _CLOCK["initial"]),
    "previous_integration_step_size": ("clock", _CLOCK["previous"]),
    "num_step_attempts": ("counters", _COUNTERS["attempts"]),
    **{k: ("newton", i) for i, k in enumerate(NEWTON_STAT_FIELDS)},
    "ideal_next_step_size": ("clock", _CLOCK["h_ideal"]),
}


class IntegratorStatistics(eqx.Module):
    """Drake's integrator statistics, as arrays (available after a jitted run), read by Drake's names.

    ``smallest_adapted_step_size_taken`` is NaN in fixed-step mode (Drake: not applicable). A step
    whose Newton iteration fails is retried with half the step: each retry counts one
    ``num_substep_failures`` and one ``num_step_shrinkages_from_substep_failures`` (Drake's rule, in
    fixed-step mode too). The implicit integrators' Newton statistics (zero for the explicit ones) are
    Drake's ``ImplicitIntegrator`` getters: `num_newton_raphson_iterations`,
    `num_jacobian_evaluations`, `num_iteration_matrix_factorizations`,
    `num_derivative_evaluations_for_jacobian` (one per Jacobian: it is one forward-mode evaluation),
    and the part of each spent by the error estimator (``num_error_estimator_*``: the implicit
    trapezoid solve, or implicit Euler's two half steps); `num_derivative_evaluations` includes them all.
    `ideal_next_step_size`: the step error control would attempt next (Drake's
    ``get_ideal_next_step_size``; NaN in fixed-step mode): the ``Simulator`` starts its next
    ``advance_to`` with it, as Drake's integrator keeps it between calls.

    Stored as the stepping loop keeps them, packed: ``clock`` (float, the loop's `Clock` layout),
    ``counters`` (int32, its `Counters` layout) and ``newton`` (int32, the Newton counts; None for an
    explicit method: zeros), each with the run's batch axes in front; the properties read one entry
    each. (A run's program then hands
    its statistics back as they are, without a kernel per number for XLA to compile.) `as_dict`
    gives them all as Python numbers.
    """

    clock: Array
    counters: Array
    newton: Array | None = None
    fixed: bool = eqx.field(static=True, default=False)

    def _get(self, name: str) -> Array:
        which, index = _INTEGRATOR_NAMES[name]
        if which == "newton" and self.newton is None:
            return jnp.zeros(jnp.shape(self.counters)[:-1], jnp.int32)
        value = _entry(getattr(self, which), index)
        if name == "ideal_next_step_size" and self.fixed:
            return jnp.full_like(value, jnp.nan)
        return value

    @property
    def num_steps_taken(self) -> Array:
        """Accepted steps (Drake's ``get_num_steps_taken``)."""
        return self._get("num_steps_taken")

    @property
    def num_derivative_evaluations(self) -> Array:
        """Derivative evaluations, all of them (``get_num_derivative_evaluations``)."""
        return self._get("num_derivative_evaluations")

    @property
    def num_step_shrinkages_from_error_control(self) -> Array:
        """Steps shrunk by error control (``get_num_step_shrinkages_from_error_control``)."""
        return self._get("num_step_shrinkages_from_error_control")

    @property
    def num_substep_failures(self) -> Array:
        """Sub-step failures, e.g. a Newton iteration that did not converge (``get_num_substep_failures``)."""
        return self._get("num_substep_failures")

    @property
    def num_step_shrinkages_from_substep_failures(self) -> Array:
        """Steps shrunk after a sub-step failure (``get_num_step_shrinkages_from_substep_failures``)."""
        return self._get("num_step_shrinkages_from_substep_failures")

    @property
    def smallest_adapted_step_size_taken(self) -> Array:
        """Smallest step error control chose, s (NaN: none; ``get_smallest_adapted_step_size_taken``)."""
        return self._get("smallest_adapted_step_size_taken")

    @property
    def largest_step_size_taken(self) -> Array:
        """Largest step taken, s (``get_largest_step_size_taken``)."""
        return self._get("largest_step_size_taken")

    @property
    def actual_initial_step_size_taken(self) -> Array:
        """First step taken, s (NaN: none; ``get_actual_initial_step_size_taken``)."""
        return self._get("actual_initial_step_size_taken")

    @property
    def previous_integration_step_size(self) -> Array:
        """Last step taken, s (``get_previous_integration_step_size``)."""
        return self._get("previous_integration_step_size")

    @property
    def num_step_attempts(self) -> Array:
        """Step attempts, accepted or not (jaxsys's; Drake counts them inside its integrator)."""
        return self._get("num_step_attempts")

    @property
    def num_newton_raphson_iterations(self) -> Array:
        """Newton-Raphson iterations (``ImplicitIntegrator::get_num_newton_raphson_iterations``)."""
        return self._get("num_newton_raphson_iterations")

    @property
    def num_jacobian_evaluations(self) -> Array:
        """Jacobian evaluations (``get_num_jacobian_evaluations``)."""
        return self._get("num_jacobian_evaluations")

    @property
    def num_iteration_matrix_factorizations(self) -> Array:
        """Iteration-matrix factorizations (``get_num_iteration_matrix_factorizations``)."""
        return self._get("num_iteration_matrix_factorizations")

    @property
    def num_derivative_evaluations_for_jacobian(self) -> Array:
        """Derivative evaluations spent on Jacobians (``get_num_derivative_evaluations_for_jacobian``)."""
        return self._get("num_derivative_evaluations_for_jacobian")

    @property
    def num_error_estimator_newton_raphson_iterations(self) -> Array:
        """Newton iterations of the error estimator (``get_num_error_estimator_newton_raphson_iterations``)."""
        return self._get("num_error_estimator_newton_raphson_iterations")

    @property
    def num_error_estimator_derivative_evaluations(self) -> Array:
        """Derivative evaluations of the error estimator (``get_num_error_estimator_derivative_evaluations``)."""
        return self._get("num_error_estimator_derivative_evaluations")

    @property
    def num_error_estimator_jacobian_evaluations(self) -> Array:
        """Jacobian evaluations of the error estimator (``get_num_error_estimator_jacobian_evaluations``)."""
        return self._get("num_error_estimator_jacobian_evaluations")

    @property
    def num_error_estimator_iteration_matrix_factorizations(self) -> Array:
        """Factorizations of the error estimator (``get_num_error_estimator_iteration_matrix_factorizations``)."""
        return self._get("num_error_estimator_iteration_matrix_factorizations")

    @property
    def ideal_next_step_size(self) -> Array:
        """The step error control would attempt next, s (NaN in fixed-step mode; ``get_ideal_next_step_size``)."""
        return self._get("ideal_next_step_size")

    def as_dict(self) -> dict[str, float]:
        """Plain Python numbers, keyed by Drake's names (an unbatched run's)."""
        newton = np.zeros(len(NEWTON_STAT_FIELDS), np.int32) if self.newton is None else self.newton
        host = {"clock": np.asarray(self.clock), "counters": np.asarray(self.counters), "newton": np.asarray(newton)}
        out = {name: host[which][..., index].item() for name, (which, index) in _INTEGRATOR_NAMES.items()}
        if self.fixed:
            out["ideal_next_step_size"] = float("nan")
        return out

    def __repr__(self) -> str:
        """Drake's names and values (an unbatched run's; otherwise the packed vectors' shapes)."""
        if isinstance(self.counters, jax.core.Tracer) or np.ndim(self.counters) != 1:
            batch = tuple(np.shape(self.counters)[:-1])
            return f"IntegratorStatistics(packed, batch shape {batch}: read by Drake's names)"
        return "IntegratorStatistics(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"

    def replace(self, **changes: Array) -> IntegratorStatistics:
        """A copy with entries changed, by the loop's short names (`pack_statistics`'s keywords)."""
        clock = self.clock
        counters = self.counters
        for k, v in changes.items():
            if k in _CLOCK:
                clock = clock.at[..., _CLOCK[k]].set(v)
            else:
                counters = counters.at[..., _COUNTERS[k]].set(v)
        return IntegratorStatistics(clock, counters, self.newton, self.fixed)


def pack_statistics(
    *,
    steps: Array,
    attempts: Array,
    evaluations: Array,
    shrinkages: Array,
    substep_failures: Array,
    smallest: Array,
    largest: Array,
    initial: Array,
    previous: Array,
    newton: Array | None = None,
    fixed: bool = False,
) -> IntegratorStatistics:
    """IntegratorStatistics from the loop's short names, for a loop that does not keep a `Clock` and
    `Counters` (the fixed-step scan; the stepping while loop hands its own over as they are).
    ``newton``: the implicit method's counts (``integrators.newton.STAT_FIELDS`` order), or None."""
    dtype = jnp.result_type(previous)
    nan = jnp.full((), jnp.nan, dtype)
    clock = dict(t=nan, h_try=nan, h_ideal=nan, smallest=smallest, largest=largest, initial=initial, previous=previous)
    zero = jnp.zeros((), jnp.int32)
    counts = dict(
        steps=steps,
        attempts=attempts,
        shrinkages=shrinkages,
        substep_failures=substep_failures,
        status=zero,
        at_minimum=zero,
        evaluations=evaluations,
    )
    return IntegratorStatistics(
        jnp.stack([jnp.asarray(clock[k], dtype) for k in CLOCK_FIELDS]),
        jnp.stack([jnp.asarray(counts[k], jnp.int32) for k in COUNTER_FIELDS]),
        newton,
        fixed,
    )


class SimulatorStatistics(eqx.Module):
    """Drake's simulator statistics: steps, and how many times each kind of event was dispatched
    (simultaneous events of one kind count once, as in Drake).

    Stored packed (``counters``: the integrator statistics' vector, whose steps are the simulator's;
    ``events``: int32 publishes, discrete updates, unrestricted updates; None for a system without
    events: zeros), read by the properties."""

    counters: Array
    events: Array | None = None

    def _event(self, index: int) -> Array:
        if self.events is None:
            return jnp.zeros(jnp.shape(self.counters)[:-1], jnp.int32)
        return _entry(self.events, index)

    @property
    def num_steps_taken(self) -> Array:
        """Steps taken (Drake's ``Simulator::get_num_steps_taken``)."""
        return _entry(self.counters, _COUNTERS["steps"])

    @property
    def num_publishes(self) -> Array:
        """Publish dispatches (``get_num_publishes``)."""
        return self._event(0)

    @property
    def num_discrete_updates(self) -> Array:
        """Discrete-update dispatches (``get_num_discrete_updates``)."""
        return self._event(1)

    @property
    def num_unrestricted_updates(self) -> Array:
        """Unrestricted-update dispatches (``get_num_unrestricted_updates``)."""
        return self._event(2)

    def __repr__(self) -> str:
        """Drake's names and values (an unbatched run's; otherwise the packed vectors' shapes)."""
        if isinstance(self.counters, jax.core.Tracer) or np.ndim(self.counters) != 1:
            batch = tuple(np.shape(self.counters)[:-1])
            return f"SimulatorStatistics(packed, batch shape {batch}: read by Drake's names)"
        return "SimulatorStatistics(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"

    def as_dict(self) -> dict[str, int]:
        """Plain Python numbers."""
        counters = np.asarray(self.counters)
        events = np.zeros(3, np.int32) if self.events is None else np.asarray(self.events)
        return {
            "num_steps_taken": int(counters[..., _COUNTERS["steps"]]),
            "num_publishes": int(events[..., 0]),
            "num_discrete_updates": int(events[..., 1]),
            "num_unrestricted_updates": int(events[..., 2]),
        }


class SimulatorStatusReason(enum.Enum):
    """Why a simulation returned (Drake's ``SimulatorStatus::ReturnReason``)."""

    REACHED_BOUNDARY_TIME = "reached_boundary_time"
    REACHED_TERMINATION_CONDITION = "reached_termination_condition"
    EVENT_HANDLER_FAILED = "event_handler_failed"


class SimulatorStatus:
    """How a simulation returned (Drake's ``SimulatorStatus``), from a concrete, unbatched result.

    ``reason()`` (a [`SimulatorStatusReason`][jaxsys.SimulatorStatusReason]), ``boundary_time()`` (the time asked for),
    ``return_time()`` (the time reached), ``system()`` (path of the system that stopped the run, '' if
    none), ``message()``, ``succeeded()`` (True only when the boundary time was reached, as Drake's),
    ``reached_termination()``, ``format_message()``.
    """

    def __init__(
        self,
        reason: SimulatorStatusReason,
        boundary_time: float,
        return_time: float,
        system: str = "",
        message: str = "",
    ) -> None:
        self._reason = reason
        self._boundary_time = boundary_time
        self._return_time = return_time
        self._system = system
        self._message = message

    def reason(self) -> SimulatorStatusReason:
        """Drake: ``reason``."""
        return self._reason

    def boundary_time(self) -> float:
        """The time the run was asked to reach, s (Drake: ``boundary_time``)."""
        return self._boundary_time

    def return_time(self) -> float:
        """The time the run reached, s (Drake: ``return_time``)."""
        return self._return_time

    def system(self) -> str:
        """Path of the system whose handler stopped the run ('' if none) (Drake: ``system``)."""
        return self._system

    def message(self) -> str:
        """The handler's message (Drake: ``message``)."""
        return self._message

    def succeeded(self) -> bool:
        """True only when the boundary time was reached "with no surprises": not after a termination,
        not after a failure (Drake: ``succeeded``)."""
        return self._reason is SimulatorStatusReason.REACHED_BOUNDARY_TIME

    def reached_termination(self) -> bool:
        """True if a handler or the monitor reached termination (Drake: ``reached_termination``)."""
        return self._reason is SimulatorStatusReason.REACHED_TERMINATION_CONDITION

    def system_id(self) -> str:
        """The system as Drake's message names it: ``"<Type> System '<path>'"``, or ``"System"`` when
        the status names none."""
        m = re.fullmatch(r"(.*) \((\w+)\)", self._system)
        if m:
            return f"{m.group(2)} System '{m.group(1)}'"
        return f"System '{self._system}'" if self._system else "System"

    def format_message(self) -> str:
        """A sentence saying how the run returned, in Drake's words (Drake: ``FormatMessage``):
        ``Simulator successfully reached the boundary time (T).``, ``Simulator returned early at time T
        because <Type> System '<path>' requested termination with message: "..."`` or ``Simulator
        stopped at time T because <Type> System '<path>' failed with message: "..."``."""
        if self._reason is SimulatorStatusReason.REACHED_BOUNDARY_TIME:
            return f"Simulator successfully reached the boundary time ({self._boundary_time})."
        if self._reason is SimulatorStatusReason.REACHED_TERMINATION_CONDITION:
            return (
                f"Simulator returned early at time {self._return_time} because {self.system_id()} requested "
                f'termination with message: "{self._message}"'
            )
        return (
            f"Simulator stopped at time {self._return_time} because {self.system_id()} failed with message: "
            f'"{self._message}"'
        )

    def __repr__(self) -> str:
        return f"SimulatorStatus({self.format_message()!r})"


class SimulationResult(eqx.Module):
    """The result of [`simulate`][jaxsys.simulate].

    **Fields:**
    - `context`: the final context (time ``t_final``).
    - `ts`: the ``save_at`` times, shape ``(n,)``.
    - `ys`: the recorded values at ``ts`` (the ``record`` function's pytree with a leading axis n).
    - `stats`: [`IntegratorStatistics`][jaxsys.IntegratorStatistics].
    - `status`: 0 ok; else the code of a [`Status`][jaxsys.Status] (messages in
      [`STATUS_MESSAGES`][jaxsys.STATUS_MESSAGES]).
    - `publish_logs`: one [`PublishLog`][jaxsys.PublishLog] per per-step or periodic publish event, in the order
      of ``system``'s events (use `get_publish_log`).
    - `simulator_stats`: Drake's simulator statistics (steps, publishes, updates).
    - `initialization_publishes`: the values recorded by initialization publish events.
    - `pending_witness_events`: per witness function, whether it triggered in the run's last step so
      that its update events are still pending (bool, shape ``(number of witnesses,)``): as Drake's
      ``AdvanceTo``, updates due at ``t_final`` are left for the next run. Pass it to the next
      [`simulate`][jaxsys.simulate] (``pending_witness_events=``) or to
      [`advance_pending_events`][jaxsys.advance_pending_events]; the [`Simulator`][jaxsys.Simulator] does this for you.
      Systems with timed events (``do_calc_next_update_time``) have one more flag per timed event.
    - `event_status`: int32 ``[severity, reason index]`` of the statuses the event handlers and
      the monitor returned (first worst; severity 2 reached termination, 3 failed; None for a system
      without events); read it with `reached_termination` and `simulator_status`.
    - `boundary_time`: the ``t_final`` asked for.
    - `trajectory`: the run's continuous trajectory (a [`DenseTrajectory`][jaxsys.DenseTrajectory]) when
      asked for with ``save_at=js.SaveAt(..., trajectory=capacity)``, else None.
    - `status_reasons`: static ``(system path, message)`` pairs the reason index refers to.
    """

    def get_publish_log(self, event: Any) -> PublishLog:
        """The log of one publish event (an Event, or its name)."""
        for log in self.publish_logs:
            if (log.name == event) if isinstance(event, str) else (log.event_uid == event.uid):
                return log
        raise JaxsysError(
            f"No publish log for {event!r}; logs are kept for per-step and periodic publish events: "
            f"{[log.name for log in self.publish_logs]}."
        )

    context: Context
    ts: Array
    ys: Any
    stats: IntegratorStatistics
    status: Array
    publish_logs: tuple[PublishLog, ...] = ()
    simulator_stats: SimulatorStatistics | None = None
    initialization_publishes: Any = ()
    pending_witness_events: Any = None
    event_status: Any = None
    boundary_time: Any = None
    trajectory: Any = None
    status_reasons: tuple[tuple[str, str], ...] = eqx.field(static=True, default=())

    def message(self) -> str:
        """The status as text (for a concrete, unbatched result), in the figures of its dtype."""
        text = status_message(int(self.status), self.context.get_time().dtype)
        if int(self.status) == STATUS_EVENT_FAILED:
            text = self.simulator_status().format_message() + " " + text
        return text

    def reached_termination(self) -> Array:
        """Whether an event handler or the monitor stopped the run with a termination status (a bool
        array; batched results give one per member). The final context is then the state after the
        terminating event, at ``context.get_time()``."""
        if self.event_status is None:
            return jnp.zeros(jnp.shape(self.status), bool)
        return self.event_status[..., 0] == 2

    def simulator_status(self) -> SimulatorStatus:
        """How the run returned (Drake's ``SimulatorStatus``; a concrete, unbatched result)."""
        t_ret = float(self.context.get_time())
        t_bound = float(self.boundary_time) if self.boundary_time is not None else t_ret
        severity, which = (
            (0, -1) if self.event_status is None else (int(self.event_status[0]), int(self.event_status[1]))
        )
        system, message = self.status_reasons[which] if 0 <= which < len(self.status_reasons) else ("", "")
        if severity >= 3:
            reason = SimulatorStatusReason.EVENT_HANDLER_FAILED
        elif severity == 2:
            reason = SimulatorStatusReason.REACHED_TERMINATION_CONDITION
        else:
            reason = SimulatorStatusReason.REACHED_BOUNDARY_TIME
        return SimulatorStatus(reason, t_bound, t_ret, system, message)


class LoopOutput(NamedTuple):
    """What a stepping loop (`fixed_step` or `stepping`) returns; [`simulate`][jaxsys.simulate]
    checks it and builds the [`SimulationResult`][jaxsys.SimulationResult]."""

    t: Array
    x: Array
    ys: Any
    stats: IntegratorStatistics
    status: Array
    rest: Any = None  # discrete and abstract state, for systems with events
    logs: Any = ()
    counts: Any = None  # [publishes, discrete updates, unrestricted updates]
    pending: Any = None  # witnesses whose update events are pending at the end
    event_status: Any = None  # [severity, reason index] of the handlers' statuses
    segments: Any = None  # the accepted steps (trajectory.SegmentBuffer), when kept
