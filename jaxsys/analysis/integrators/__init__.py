"""Integrators with Drake's ``IntegratorBase`` options and semantics: a base module and one small
module per family.

* `base`: ``IntegratorBase`` (options, Drake's queries, the integrator protocol: ``attempt_step``,
  ``init`` / ``step`` / ``next_state`` / ``refresh``, `StepResult`);
* `explicit_rk`: explicit Runge-Kutta methods (tableaux, first-same-as-last, dense output);
* `semi_explicit_euler`: symplectic Euler for second-order systems;
* `implicit`: implicit Euler and Radau IIA; `newton`: their Newton iteration.

The simulation loop (`jaxsys.analysis.stepping`) applies Drake's error control
(``StepOnceErrorControlledAtMost`` / ``CalcAdjustedStepSize``, in `jaxsys.analysis.step_size`),
its step truncation at boundaries with the stretch factor, and records Drake's statistics.


| jaxsys | Drake | order | error estimate (order of its local term) |
|---|---|---|---|
| ExplicitEulerIntegrator | ExplicitEulerIntegrator | 1 | none (fixed step) |
| SemiExplicitEulerIntegrator | SemiExplicitEulerIntegrator | 1 | none (fixed step) |
| RungeKutta2Integrator | RungeKutta2Integrator | 2 | none (fixed step) |
| RungeKutta3Integrator | RungeKutta3Integrator | 3 | Kutta 3 vs midpoint (3) |
| BogackiShampine3Integrator | BogackiShampine3Integrator | 3 | embedded 2nd order (3) |
| RungeKutta4Integrator | (none in Drake) | 4 | none (fixed step) |
| RungeKutta5Integrator | RungeKutta5Integrator | 5 | Dormand-Prince 4th order (5) |
| ImplicitEulerIntegrator | ImplicitEulerIntegrator | 1 | step doubling (2) |
| Radau1Integrator | RadauIntegrator<T, 1> | 1 | vs implicit trapezoid (2) |
| RadauIntegrator | RadauIntegrator<T, 2> | 3 | vs trapezoid on the Radau end point (3) |
| Radau5Integrator | (none in Drake; Hairer's RADAU5) | 5 | RADAU5's embedded estimate (4) |

Drake's accuracy defaults per method (``default_accuracy`` / the loosest allowed): RK3 and
Bogacki-Shampine 1e-3 / 1e-1, RK5 1e-5 / 1e-3, implicit Euler and Radau1 1e-1 / 5e-1, Radau3
1e-3 / 1e-2.

Difference from Drake, by choice: Bogacki-Shampine and Dormand-Prince reuse the derivative at the end
of an accepted step as the first stage of the next ("first same as last"), which Drake re-evaluates.
The steps and results are identical; ``num_derivative_evaluations`` is one lower per attempt (plus
one at the start and one after each event that changes the state or the dynamics). Pass
``fsal=False`` to count as Drake does.
"""

from .base import (
    IntegratorBase as IntegratorBase,
    SingleStepResult as SingleStepResult,
    StepResult as StepResult,
    VectorField as VectorField,
)
from .explicit_rk import (
    BogackiShampine3Integrator as BogackiShampine3Integrator,
    ExplicitEulerIntegrator as ExplicitEulerIntegrator,
    RungeKutta2Integrator as RungeKutta2Integrator,
    RungeKutta3Integrator as RungeKutta3Integrator,
    RungeKutta4Integrator as RungeKutta4Integrator,
    RungeKutta5Integrator as RungeKutta5Integrator,
)
from .implicit import (
    ImplicitEulerIntegrator as ImplicitEulerIntegrator,
    Radau1Integrator as Radau1Integrator,
    Radau5Integrator as Radau5Integrator,
    RadauIntegrator as RadauIntegrator,
)
from .semi_explicit_euler import SemiExplicitEulerIntegrator as SemiExplicitEulerIntegrator


ALL_INTEGRATORS: tuple[type[IntegratorBase], ...] = (
    ExplicitEulerIntegrator,
    SemiExplicitEulerIntegrator,
    RungeKutta2Integrator,
    RungeKutta3Integrator,
    BogackiShampine3Integrator,
    RungeKutta4Integrator,
    RungeKutta5Integrator,
    ImplicitEulerIntegrator,
    Radau1Integrator,
    RadauIntegrator,
    Radau5Integrator,
)

__all__ = [c.__name__ for c in ALL_INTEGRATORS] + [
    "IntegratorBase",
    "SingleStepResult",
    "StepResult",
    "ALL_INTEGRATORS",
]
