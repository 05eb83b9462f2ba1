"""The double integrator: a mass under a force (the simplest second-order plant)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..framework.context import Context
from ..framework.leaf_system import ContinuousStateIndex, LeafSystem


class DoubleIntegrator(LeafSystem):
    r"""m q̈ = f.

    - State: x = [q, q̇] (num_q = 1, num_v = 1), m and m/s.
    - Numeric parameter 0: [m (kg)], default [1].
    - Input port ``force`` (size 1, N); output port ``state`` (size 2).
    - Energies: KE = ½ m q̇², PE = 0; non-conservative power f q̇.
    """

    def __init__(self, mass: float = 1.0, name: str = "double_integrator") -> None:
        super().__init__(name)
        self.declare_continuous_state(num_q=1, num_v=1, num_z=0)
        self.declare_numeric_parameter([mass])
        self.declare_vector_input_port("force", 1)
        self.declare_state_output_port("state", ContinuousStateIndex(0))

    def do_calc_time_derivatives(self, context: Context) -> Any:
        v = context.get_continuous_state_vector()[1]
        f = self.get_input_port(0).eval(context)[0]
        return jnp.stack([v, f / context.get_numeric_parameter(0)[0]])

    def do_calc_kinetic_energy(self, context: Context) -> Any:
        return 0.5 * context.get_numeric_parameter(0)[0] * context.get_continuous_state_vector()[1] ** 2

    def do_calc_nonconservative_power(self, context: Context) -> Any:
        return self.get_input_port(0).eval(context)[0] * context.get_continuous_state_vector()[1]
