"""The integrator base class: Drake's ``IntegratorBase`` options, queries and the step interface.

Each integrator is an immutable ``equinox.Module`` holding its options (Drake's setters become
constructor arguments; ``with_options(...)`` returns a modified copy). Its stepping function is pure:
``attempt_step(f, t, x, h, aux) -> (x_new, error_estimate, ok)`` with ``f(t, x) -> xdot``. What an
integrator does *not* do is choose its steps: error control (Drake's ``CalcAdjustedStepSize``) is in
:mod:`jaxsys.analysis.step_size`, and the loop that calls ``attempt_step`` in
:mod:`jaxsys.analysis.stepping`.

Imports: the framework's errors only (no other analysis module).
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax

from ...framework.errors import JaxsysError


Array = jax.Array
VectorField = Callable[[Array, Array], Array]


class IntegratorBase(eqx.Module):
    """Options shared by all integrators (Drake's ``IntegratorBase``).

    **Arguments** (all keyword; Drake's setter in brackets):
    - `max_step_size`: largest step, s (``set_maximum_step_size``). In fixed-step mode, the step.
    - `target_accuracy`: error-control accuracy (``set_target_accuracy``); None = Drake's default
      (1e-3 if the integrator supports error estimation... overridden by ``fixed_step_mode``).
    - `fixed_step_mode`: take steps of exactly ``max_step_size`` (``set_fixed_step_mode``);
      forced True for integrators without error estimation.
    - `requested_minimum_step_size`: h_min, s (``set_requested_minimum_step_size``).
    - `throw_on_minimum_step_size_violation`: error if error control wants a step below h_min.
    - `initial_step_size_target`: first step to attempt (``request_initial_step_size_target``);
      None = Drake's default, 1/10 of ``max_step_size``.
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
    num_stages: ClassVar[int] = 1  # derivative evaluations per attempted step

    def __check_init__(self) -> None:
        if not self.max_step_size > 0:
            raise JaxsysError(f"{type(self).__name__}: max_step_size must be > 0; got {self.max_step_size}.")
        if self.target_accuracy is not None and not self.target_accuracy > 0:
            raise JaxsysError(f"{type(self).__name__}: target_accuracy must be > 0; got {self.target_accuracy}.")
        if self.stretch_factor < 1:
            raise JaxsysError(f"{type(self).__name__}: stretch_factor must be >= 1.")

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
        """The accuracy error control uses: the target, else Drake's default 1e-3 (``get_accuracy_in_use``)."""
        return 1e-3 if self.target_accuracy is None else float(self.target_accuracy)

    def get_initial_step_size_target(self) -> float:
        """First step to attempt (Drake: ``get_initial_step_size_target``)."""
        if self.initial_step_size_target is not None:
            return float(self.initial_step_size_target)
        return 0.1 * self.max_step_size

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

    # ----- the method ----------------------------------------------------------------------
    @abc.abstractmethod
    def attempt_step(self, f: VectorField, t: Array, x: Array, h: Array, aux: Any) -> tuple[Array, Array, Array]:
        """One step of size ``h`` from (t, x): returns (x_new, error estimate vector, ok)."""

    def num_evaluations(self) -> int:
        """Derivative evaluations in one attempted step (without first-same-as-last reuse)."""
        return self.num_stages

    def uses_fsal(self) -> bool:
        """Whether steps reuse the end-point derivative of the previous step ("first same as last"):
        the method has the property and the ``fsal`` option is on. A class that returns True provides
        ``attempt_step_fsal(f, t, x, h, aux, k_first, t_end) -> (x_new, err, ok, f(t_end, x_new))``
        (explicit Runge-Kutta methods do)."""
        return False

    def supports_dense_output(self) -> bool:
        """Whether the method has a continuous extension of its steps. A class that returns True
        provides ``attempt_step_dense`` (a step and its interpolation data) and ``interpolate``
        (explicit Runge-Kutta methods do)."""
        return False
