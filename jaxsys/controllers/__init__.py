"""Controllers (Drake's systems/controllers): linear-quadratic regulators and the Riccati equations
(`lqr`), iterative LQR and model-predictive control (`ilqr`). The PID controllers are blocks in
`jaxsys.primitives`.

Imports (within jaxsys): the framework, ``trajectories``, ``primitives``, ``analysis``.
"""

from .ilqr import (
    ILQRResult as ILQRResult,
    discrete_dynamics as discrete_dynamics,
    ilqr as ilqr,
    ilqr_solve as ilqr_solve,
)
from .lqr import (
    FiniteHorizonLQRResult as FiniteHorizonLQRResult,
    continuous_algebraic_riccati as continuous_algebraic_riccati,
    discrete_algebraic_riccati_equation as discrete_algebraic_riccati_equation,
    discrete_time_linear_quadratic_regulator as discrete_time_linear_quadratic_regulator,
    finite_horizon_linear_quadratic_regulator as finite_horizon_linear_quadratic_regulator,
    linear_quadratic_regulator as linear_quadratic_regulator,
    linear_quadratic_regulator_system as linear_quadratic_regulator_system,
    make_finite_horizon_linear_quadratic_regulator as make_finite_horizon_linear_quadratic_regulator,
)
