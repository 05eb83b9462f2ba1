"""State estimators (Drake's systems/estimators): the Luenberger observer, steady-state Kalman filters
and an extended Kalman filter (`kalman`).

Imports (within jaxsys): the framework, ``primitives``, ``controllers`` (Riccati equations).
"""

from .kalman import (
    ExtendedKalmanFilter as ExtendedKalmanFilter,
    LuenbergerObserver as LuenbergerObserver,
    discrete_time_steady_state_kalman_filter as discrete_time_steady_state_kalman_filter,
    steady_state_kalman_filter as steady_state_kalman_filter,
)
