"""Optimization through simulations (Drake's planning/ and solvers/): trajectory optimization by
direct collocation and shooting (`trajopt`), the nonlinear-program solvers behind it (`nlp`: SLSQP,
IPOPT, an augmented Lagrangian), and parameter fitting (`fitting`).

Imports (within jaxsys): the framework, ``trajectories``, ``analysis``.
"""

from .fitting import (
    FitParameter as FitParameter,
    FitResult as FitResult,
    fit_parameters as fit_parameters,
    set_parameters as set_parameters,
    trajectory_loss as trajectory_loss,
)
from .nlp import (
    SparseJacobian as SparseJacobian,
    augmented_lagrangian as augmented_lagrangian,
    ipopt as ipopt,
    slsqp as slsqp,
    solve_nlp as solve_nlp,
)
from .trajopt import (
    TrajOptResult as TrajOptResult,
    direct_collocation as direct_collocation,
    direct_shooting as direct_shooting,
    simulate_open_loop as simulate_open_loop,
)
