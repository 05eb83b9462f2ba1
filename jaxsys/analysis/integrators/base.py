"""The integrator base class: Drake's ``IntegratorBase`` options, queries and the step interface.

Each integrator is an immutable ``equinox.Module`` holding its options (Drake's setters become
constructor arguments; ``with_options(...)`` returns a modified copy). Its stepping functions are pure,
with ``f(t, x) -> xdot``:

- ``attempt_step(f, t, x, h, aux) -> (x_new, error_estimate, ok)``: one step from nothing but (t, x)
  (what a user writes; witness isolation's trial steps, iLQR's discretization and the ECS bridge call it);
- the protocol every stepping loop calls (the while loop, the fixed-step scan, hence the Simulator and
  ``advance_pending_events``): ``init(f, t, x, aux, events) -> (state, evaluations)`` once, then
  ``step(f, t, x, h, aux, state, t_end, dense) -> StepResult`` per attempt, ``next_state(proposal,
  accepted, cut)`` after the loop's verdict and ``refresh(state, changed)`` after updates that changed
  the state or the dynamics. What a method carries between steps (a first-same-as-last stage, an
  implicit method's Jacobian and factorizations, its Newton statistics) lives in that ``state``, a
  pytree the loop carries without looking inside. The defaults make ``attempt_step`` alone a complete
  integrator (no state); a method with a state overrides them.

What a method can do is declared as class attributes: ``error_estimate_order`` (0: none, fixed step
only), ``may_fail`` (an attempt can fail: the loop retries it with half the step), ``implicit``,
``dense_output_kind`` (None, ``"hermite"`` or ``"own"``). What an integrator does *not* do is choose
its steps: error control (Drake's ``CalcAdjustedStepSize``) is in `jaxsys.analysis.step_size`, and
the loop that calls ``step`` in `jaxsys.analysis.stepping`.

Imports: the framework's errors only (no other analysis module).
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import warnings
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from ...framework.errors import JaxsysError
from ..adjoint import count_eqns


Array = jax.Array
VectorField = Callable[[Array, Array], Array]


class StepResult(NamedTuple):
    """One attempted step of the integrator protocol (`IntegratorBase.step`).

    **Fields:**
    - `x_new`: the state at the step's end (shape of x).
    - `error`: the error estimate vector (zeros without estimation).
    - `ok`: bool scalar, False when the attempt failed (an implicit method's Newton iteration did not
      converge); the loop then retries with half the step.
    - `proposal`: what `IntegratorBase.next_state` turns into the carried state once the loop knows
      whether the step was accepted (``()`` for a method without state).
    - `evaluations`: int (or int32 scalar) derivative evaluations this attempt made.
    - `dense`: interpolation data of the step for `IntegratorBase.interpolate` (when asked for), else None.
    - `f_start`: f(t, x) when the attempt computed it (its first stage), else None: the loop's witness
      detection reuses it instead of evaluating it again.
    """

    x_new: Array
    error: Array
    ok: Array
    proposal: Any = ()
    evaluations: Any = 0
    dense: Array | None = None
    f_start: Array | None = None


class SingleStepResult(NamedTuple):
    """What `IntegratorBase.integrate_with_single_fixed_step_to_time` returns.

    **Fields:** `context` (at ``t_target`` with the stepped continuous state; unchanged where the step
    failed), `success` (bool scalar: False when the step failed, an implicit method's Newton
    iteration, as Drake's ``false``), `error_estimate` (the step's error estimate vector, Drake's
    ``get_error_estimate()``; zeros for a method without one)."""

    context: Any
    success: Array
    error_estimate: Array


# diagrams of more distinct evaluation units (see _evaluation_units) evaluate Runge-Kutta stages in a
# loop, so that their dynamics are traced and compiled once per step
ROLLED_STAGES_MIN_UNITS = 16
# and dynamics of more equations than this (one evaluation's jaxpr) do too
ROLLED_STAGES_MIN_EQNS = 2000


def _evaluation_units(system: Any) -> int:
    """How many pieces of leaf code one derivative evaluation traces: the leaves evaluated one by one
    plus one per group of identical leaves (evaluated together with one ``vmap``)."""
    groups_of = getattr(system, "_groups", None)
    if groups_of is None:
        return 1
    groups, _ = groups_of()
    return len(system._flat().leaf_paths) - sum(len(g) for g in groups) + len(groups)


def rolled_stages(system: Any, f: Callable[[Array, Array], Array], t: Array, x: Array) -> bool:
    """Whether Runge-Kutta stages are evaluated in a loop (``step_aux``'s ``rolled``), so that the
    dynamics are traced and compiled once per step instead of once per stage: for diagrams of more
    than ``ROLLED_STAGES_MIN_UNITS`` distinct evaluation units, and for dynamics of more than
    ``ROLLED_STAGES_MIN_EQNS`` equations (one evaluation of ``f``'s jaxpr, sub-jaxprs included: a MuJoCo
    plant). Compiling such dynamics dominates: the MJX arm of examples/robot_arm_fitting.py, RK4,
    Gauss-Newton fit, 57 s unrolled, 23 s rolled. Identical leaves are one ``vmap``: their stages stay
    unrolled, which runs faster for small dynamics. Decided once per trace, in every loop that steps
    (the simulation loops, iLQR's discretization, the ECS bridge)."""
    if _evaluation_units(system) > ROLLED_STAGES_MIN_UNITS:
        return True
    if x.shape[0] == 0:
        return False
    return count_eqns(jax.make_jaxpr(f)(t, x).jaxpr) > ROLLED_STAGES_MIN_EQNS


def step_aux(
    system: Any, context: Any, context_at: Callable[[Array, Array], Any] | None = None, rolled: bool = False
) -> dict[str, Any]:
    """What an integrator's ``attempt_step`` may read besides ``f`` (its ``aux`` argument), built in
    this one place for every loop (the while loop, the fixed-step scan, iLQR's discretization, the
    ECS bridge):

    - ``num_q``, ``num_v``: the q / v split of the continuous state x = [q, v, z] of ``context``;
    - ``v_to_qdot(t, x, v)``: qdot = N(q) v at time t and state x (Drake's ``MapVelocityToQDot``,
      `velocity_to_qdot`);
    - ``rolled``: evaluate Runge-Kutta stages in a loop (diagrams of many distinct leaves: the
      dynamics are traced and compiled once).

    ``context_at(t, x)``: the context at time t and continuous state x (default: ``context`` with
    them replaced)."""
    cs = context.get_continuous_state()
    at = context_at or (lambda t, x: context.with_time(t).with_continuous_state(x))
    return {
        "num_q": cs.num_q,
        "num_v": cs.num_v,
        "v_to_qdot": lambda t, x, v: system.velocity_to_qdot(at(t, x), v),
        "rolled": rolled,
    }


class IntegratorBase(eqx.Module):
    """Options shared by all integrators (Drake's ``IntegratorBase``).

    **Arguments** (all keyword; Drake's setter in brackets):
    - `max_step_size`: largest step, s (``set_maximum_step_size``). In fixed-step mode, the step.
    - `target_accuracy`: error-control accuracy (``set_target_accuracy``); None = the method's Drake
      default (``default_accuracy``: 1e-3 for RK3, Bogacki-Shampine and Radau3, 1e-5 for RK5, 1e-1 for
      implicit Euler and Radau1). A target looser than the method allows (``loosest_accuracy``) is
      clamped to it, as Drake does, with a warning; ``get_accuracy_in_use()`` says what is used.
    - `fixed_step_mode`: take steps of exactly ``max_step_size`` (``set_fixed_step_mode``);
      forced True for integrators without error estimation.
    - `requested_minimum_step_size`: h_min, s (``set_requested_minimum_step_size``).
    - `throw_on_minimum_step_size_violation`: error if error control wants a step below h_min.
    - `initial_step_size_target`: first step to attempt (``request_initial_step_size_target``);
      None = Drake's default: 1/10 of ``max_step_size`` for the explicit methods, ``max_step_size``
      for the implicit ones.
    - `stretch_factor`: a step may be stretched by this factor to land on a boundary instead of
      leaving a sliver (``get_stretch_factor``; Drake's 1.01).
    - `qbar_weight`, `z_weight`: weights of the generalized (v) and misc (z) state in the
      weighted infinity-norm error measure (``get_generalized_state_weight_vector``, ...);
      None = all ones.
    - `max_steps`: bound on step attempts in one ``simulate`` call (jaxsys-specific; exceeding it is
      an error, never a silent stop).
    - `fsal`: for methods whose last stage is the derivative at the step's end point (Dormand-Prince,
      Bogacki-Shampine: "first same as last"), reuse it as the next step's first stage, saving one
      derivative evaluation per step attempt. Steps and results are those of Drake (which
      re-evaluates it); only ``num_derivative_evaluations`` differs. ``fsal=False`` evaluates as Drake
      does (jaxsys-specific; ignored by other methods).

    **Precision.** The dtype is the context's: float32 unless ``jax_enable_x64`` is on. float32 resolves
    about 1.2e-7 relative, so error control delivers target accuracies down to ~1e-6 there; a finer
    target warns at the call (``js.PrecisionWarning``, naming float32 and ``jax_enable_x64``), the
    working minimum step is float32's (~1e-7 of the time, not float64's ~1e-14), and stiff problems
    that need very small steps can fail with a message that says float32 may be the cause. Fixed steps,
    events, witnesses (isolated to ~2e-6 s in float32) and gradients work in both dtypes.
    """

    max_step_size: float = eqx.field(static=True, default=0.1)
    target_accuracy: float | None = eqx.field(static=True, default=None)
    fixed_step_mode: bool = eqx.field(static=True, default=False)
    requested_minimum_step_size: float = eqx.field(static=True, default=0.0)
    throw_on_minimum_step_size_violation: bool = eqx.field(static=True, default=True)
    initial_step_size_target: float | None = eqx.field(static=True, default=None)
    stretch_factor: float = eqx.field(static=True, default=1.01)
    qbar_weight: tuple[float, ...] | None = eqx.field(static=True, default=None)
    z_weight: tuple[float, ...] | None = eqx.field(static=True, default=None)
    max_steps: int = eqx.field(static=True, default=1_000_000)
    fsal: bool = eqx.field(static=True, default=True)

    name: ClassVar[str] = "integrator"
    order: ClassVar[int] = 1
    error_estimate_order: ClassVar[int] = 0
    may_fail: ClassVar[bool] = False  # an attempt can fail (ok False): see `can_fail`
    implicit: ClassVar[bool] = False  # solves stage equations (Newton)
    dense_output_kind: ClassVar[str | None] = None  # None, "hermite" (cubic) or "own" (the method's)
    num_stages: ClassVar[int] = 1  # derivative evaluations per attempted step
    default_accuracy: ClassVar[float] = 1e-3  # Drake's kDefaultAccuracy for the method
    loosest_accuracy: ClassVar[float] = 1e-1  # Drake's kLoosestAccuracy for the method
    initial_step_fraction: ClassVar[float] = 0.1  # Drake's first step, as a fraction of the maximum

    def __check_init__(self) -> None:
        name = type(self).__name__
        if not self.max_step_size > 0:
            raise JaxsysError(f"{name}: max_step_size must be > 0; got {self.max_step_size}.")
        if self.target_accuracy is not None and not self.target_accuracy > 0:
            raise JaxsysError(f"{name}: target_accuracy must be > 0; got {self.target_accuracy}.")
        if self.stretch_factor < 1:
            raise JaxsysError(f"{name}: stretch_factor must be >= 1.")
        if not self.requested_minimum_step_size >= 0:
            raise JaxsysError(
                f"{name}: requested_minimum_step_size must be >= 0; got {self.requested_minimum_step_size}."
            )
        # Drake's IntegratorBase::Initialize checks
        if self.max_step_size < self.requested_minimum_step_size:
            raise JaxsysError(
                f"{name}: max_step_size ({self.max_step_size}) is less than requested_minimum_step_size "
                f"({self.requested_minimum_step_size}) (Drake: 'Integrator maximum step size is less than the "
                f"minimum step size')."
            )
        if self.initial_step_size_target is not None:
            h0 = self.initial_step_size_target
            if not h0 > 0:
                raise JaxsysError(f"{name}: initial_step_size_target must be > 0; got {h0}.")
            if h0 > self.max_step_size:
                raise JaxsysError(
                    f"{name}: initial_step_size_target ({h0}) is larger than max_step_size ({self.max_step_size})."
                )
            if h0 < self.requested_minimum_step_size:
                raise JaxsysError(
                    f"{name}: initial_step_size_target ({h0}) is smaller than requested_minimum_step_size "
                    f"({self.requested_minimum_step_size})."
                )
        if not self.supports_error_estimation():
            # (Drake's set_target_accuracy / request_initial_step_size_target throw for these methods)
            if self.target_accuracy is not None:
                raise JaxsysError(
                    f"{name}: this method makes no error estimate (fixed step only), so it cannot use a "
                    f"target_accuracy (got {self.target_accuracy}); Drake: 'Integrator does not support accuracy "
                    f"estimation and user has requested error control'. Choose the step with max_step_size, or use "
                    f"an error-controlled method (RungeKutta3Integrator, RungeKutta5Integrator, ...)."
                )
            if self.initial_step_size_target is not None:
                raise JaxsysError(
                    f"{name}: this method makes no error estimate (fixed step only), so it takes no "
                    f"initial_step_size_target (got {self.initial_step_size_target}); its step is max_step_size "
                    f"(Drake: 'Integrator does not support error estimation and user has initial step size target')."
                )
        if self.max_steps < 1:
            raise JaxsysError(f"{name}: max_steps must be >= 1; got {self.max_steps}.")
        if (
            self.target_accuracy is not None
            and self.supports_error_estimation()
            and self.target_accuracy > self.loosest_accuracy
        ):
            warnings.warn(
                f"{name}: target_accuracy {self.target_accuracy} is looser than this method allows; "
                f"{self.loosest_accuracy} is used instead (Drake clamps it the same way).",
                stacklevel=3,
            )

    # ----- Drake-style queries -------------------------------------------------------------
    def supports_error_estimation(self) -> bool:
        """Whether this integrator estimates its error (Drake: ``supports_error_estimation``)."""
        return self.error_estimate_order > 0

    def get_error_estimate_order(self) -> int:
        """Order of the asymptotic term of the error estimate; 0 if none (Drake: same name)."""
        return self.error_estimate_order

    def get_fixed_step_mode(self) -> bool:
        """True if steps are of fixed size (always, without error estimation)."""
        return self.fixed_step_mode or not self.supports_error_estimation()

    def get_maximum_step_size(self) -> float:
        """Drake: ``get_maximum_step_size``."""
        return self.max_step_size

    def get_target_accuracy(self) -> float | None:
        """Drake: ``get_target_accuracy``."""
        return self.target_accuracy

    def get_accuracy_in_use(self) -> float:
        """The accuracy error control uses (Drake: ``get_accuracy_in_use``): the target, clamped to the
        method's loosest, else the method's default."""
        if self.target_accuracy is None:
            return float(self.default_accuracy)
        if isinstance(self.target_accuracy, jax.core.Tracer):  # a traced accuracy (plain calls: no recompile)
            return jnp.minimum(self.target_accuracy, float(self.loosest_accuracy))
        return min(float(self.target_accuracy), float(self.loosest_accuracy))

    def _with_traced_accuracy(self, accuracy: Any) -> IntegratorBase:
        """A copy whose target accuracy is the traced ``accuracy`` (checked already: the options are
        not re-validated; only error control's arithmetic reads it)."""
        out = copy.copy(self)
        object.__setattr__(out, "target_accuracy", accuracy)
        return out

    def get_initial_step_size_target(self) -> float:
        """First step to attempt (Drake: ``get_initial_step_size_target``)."""
        if self.initial_step_size_target is not None:
            return float(self.initial_step_size_target)
        return self.initial_step_fraction * self.max_step_size

    def get_stretch_factor(self) -> float:
        """Drake: ``get_stretch_factor``."""
        return self.stretch_factor

    def get_requested_minimum_step_size(self) -> float:
        """Drake: ``get_requested_minimum_step_size``."""
        return self.requested_minimum_step_size

    def get_throw_on_minimum_step_size_violation(self) -> bool:
        """Drake: ``get_throw_on_minimum_step_size_violation``."""
        return self.throw_on_minimum_step_size_violation

    def with_options(self, **changes: Any) -> IntegratorBase:
        """A copy with some options changed (the functional form of Drake's setters)."""
        return dataclasses.replace(self, **changes)

    # ----- stepping outside a simulation (Drake's integrator stepping functions) ----------------
    def integrate_with_single_fixed_step_to_time(self, system: Any, context: Any, t_target: Any) -> SingleStepResult:
        """One step of this integrator from ``context`` (its time t) to exactly ``t_target`` (Drake:
        ``IntegrateWithSingleFixedStepToTime``, for integrators used outside a Simulator): the step
        h = t_target - t, the continuous state only (no events are handled), the time set to
        ``t_target``. Returns a `SingleStepResult` (context, success, error estimate); a failed step
        (an implicit method's Newton iteration; also a non-finite result, which Drake would accept)
        leaves the context as it was, success False.

        As Drake's, it needs fixed-step mode (``fixed_step_mode=True``, or a method without error
        estimation) and a step that is not negative (both errors naming the integrator). Works under
        ``jit``, ``vmap`` and ``grad`` (with a traced ``t_target`` the sign check is the caller's)."""
        name = type(self).__name__
        if not self.get_fixed_step_mode():
            raise JaxsysError(
                f"{name}.integrate_with_single_fixed_step_to_time requires fixed stepping (Drake: "
                f"'IntegrateWithSingleFixedStepToTime() requires fixed stepping'); build the integrator with "
                f"fixed_step_mode=True."
            )
        t0 = context.get_time()
        h = jnp.asarray(t_target, t0.dtype) - t0
        if not isinstance(h, jax.core.Tracer) and float(h) < 0:
            raise JaxsysError(
                f"{name}.integrate_with_single_fixed_step_to_time: t_target {float(t_target)} is before the "
                f"context's time {float(t0)} (Drake: 'called with a negative step size')."
            )
        x0 = context.get_continuous_state_vector()
        f = system.vector_field(context)
        aux = step_aux(system, context)
        state, _ = self.init(f, t0, x0, aux)
        t_end = jnp.asarray(t_target, t0.dtype)
        result = self.step(f, t0, x0, h, aux, state, t_end)
        ok = jnp.asarray(result.ok) & jnp.all(jnp.isfinite(result.x_new))
        x = jnp.where(ok, result.x_new, x0)
        new = context.with_time(jnp.where(ok, t_end, t0)).with_continuous_state(x)
        return SingleStepResult(new, ok, result.error)

    # ----- the method ----------------------------------------------------------------------
    @abc.abstractmethod
    def attempt_step(self, f: VectorField, t: Array, x: Array, h: Array, aux: Any) -> tuple[Array, Array, Array]:
        """One step of size ``h`` from (t, x), needing nothing carried from earlier steps: returns
        (x_new, error estimate vector, ok). ``aux``: see `step_aux`."""

    def init(self, f: VectorField, t: Array, x: Array, aux: Any, events: bool = False) -> tuple[Any, int]:
        """The state this method carries between steps, at the run's start (t, x): ``(state,
        derivative evaluations made)``. ``events``: the loop may change the state or the dynamics between
        steps (it then calls `refresh`). Default: no state, ``((), 0)``."""
        return (), 0

    def step(
        self,
        f: VectorField,
        t: Array,
        x: Array,
        h: Array,
        aux: Any,
        state: Any,
        t_end: Array,
        dense: bool = False,
    ) -> StepResult:
        """One attempted step of size ``h`` from (t, x) with the carried ``state`` (from `init` or
        `next_state`). ``t_end``: the time the step ends (t + h up to rounding: a step landing on a
        boundary ends exactly there); ``dense`` (static): also return the step's interpolation data.

        Default: `attempt_step`, no state; ``dense`` gives cubic Hermite data (f at both ends, two
        more evaluations) where ``dense_output_kind`` is ``"hermite"``."""
        x_new, err, ok = self.attempt_step(f, t, x, h, aux)
        evals: Any = self.num_evaluations()
        data = f_start = None
        if dense:
            if self.dense_output_kind != "hermite":
                raise JaxsysError(f"{type(self).__name__} has no dense output (dense_output_kind is None).")
            f_start = f(t, x)
            data = jnp.stack([f_start, f(t_end, x_new)])
            evals = evals + 2
        return StepResult(x_new, err, ok, (), evals, data, f_start)

    def next_state(self, proposal: Any, accepted: Array, cut: Array) -> Any:
        """The state carried into the next attempt, from this attempt's ``proposal`` (`StepResult`),
        once the loop decided: ``accepted`` (bool scalar) and ``cut`` (the accepted step was cut short
        at a witness crossing, so its end is not the attempt's). Default: the proposal."""
        return proposal

    def refresh(self, state: Any, changed: Array) -> Any:
        """The state after updates at a step's start; ``changed`` (bool scalar): they changed the state or
        the dynamics, so what was carried about the old ones (a first-same-as-last stage) is stale.
        Default: unchanged."""
        return state

    def newton_counts(self, state: Any) -> Array | None:
        """An implicit method's Newton statistics in the carried ``state`` (int32, in the order of
        ``integrators.newton.STAT_FIELDS``), or None."""
        return None

    def interpolate(self, x: Array, x_new: Array, h: Array, data: Array, theta: Array) -> Array:
        """The state at ``t + theta h`` (0 <= theta <= 1) inside a step from x to x_new, from the step's
        interpolation data (`StepResult.dense`). Default: cubic Hermite on ``data = [f(t, x),
        f(t + h, x_new)]``."""
        f0, f1 = data[0], data[1]
        t2, t3 = theta * theta, theta * theta * theta
        return (
            (2 * t3 - 3 * t2 + 1) * x + (t3 - 2 * t2 + theta) * h * f0 + (-2 * t3 + 3 * t2) * x_new + (t3 - t2) * h * f1
        )

    def can_fail(self) -> bool:
        """Whether a step attempt can fail (``ok`` False: an implicit method's Newton iteration did not
        converge). The loop then retries with half the step, in fixed-step mode too (Drake). Declared by
        the class attribute ``may_fail``."""
        return self.may_fail

    def uses_newton_cache(self) -> bool:
        """Whether the method is implicit and carries a Newton cache in its state (class attribute
        ``implicit``)."""
        return self.implicit

    def num_evaluations(self) -> int:
        """Derivative evaluations in one attempted step (without first-same-as-last reuse)."""
        return self.num_stages

    def uses_fsal(self) -> bool:
        """Whether steps reuse the end-point derivative of the previous step ("first same as last"):
        the method has the property and the ``fsal`` option is on (explicit Runge-Kutta methods)."""
        return False

    def supports_dense_output(self) -> bool:
        """Whether the method has a continuous extension of its steps (``dense_output_kind``)."""
        return self.dense_output_kind is not None
