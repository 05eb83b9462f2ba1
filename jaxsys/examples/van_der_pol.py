"""The Van der Pol oscillator (Drake's ``examples::van_der_pol::VanDerPolOscillator``)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..framework.context import Context
from ..framework.leaf_system import ContinuousStateIndex, LeafSystem


class VanDerPol(LeafSystem):
    r"""q̈ = −q + μ (1 − q²) q̇.

    - State: x = [q, q̇] (num_q = 1, num_v = 1); default [2, 0].
    - Numeric parameter 0: [μ], default [1]. Large μ (e.g. 1000) makes it stiff.
    - Output port ``state`` (size 2).
    """

    def __init__(self, mu: float = 1.0, name: str = "van_der_pol") -> None:
        super().__init__(name)
        self.declare_continuous_state(num_q=1, num_v=1, num_z=0, default=[2.0, 0.0])
        self.declare_numeric_parameter([mu])
        self.declare_state_output_port("state", ContinuousStateIndex(0))

    def do_calc_time_derivatives(self, context: Context) -> Any:
        q, qd = context.get_continuous_state_vector()
        mu = context.get_numeric_parameter(0)[0]
        return jnp.stack([qd, -q + mu * (1.0 - q * q) * qd])
