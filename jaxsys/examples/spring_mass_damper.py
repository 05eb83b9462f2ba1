"""A mass on a linear spring and damper, with a force input (Drake's ``SpringMassSystem`` family)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..framework.context import Context
from ..framework.leaf_system import ContinuousStateIndex, LeafSystem


class SpringMassDamper(LeafSystem):
    r"""m q̈ = −k q − c q̇ + f.

    - State: x = [q, q̇] (num_q = 1, num_v = 1), m and m/s; default [0, 0].
    - Numeric parameter 0: [m (kg), k (N/m), c (N·s/m)], default [1, 10, 0.1].
    - Input port ``force`` (size 1, N). It may be left unconnected and unfixed when
      ``has_input=False`` is passed (then f = 0).
    - Output port ``state`` (size 2).
    - Energies: PE = ½ k q², KE = ½ m q̇², conservative power −k q q̇,
      non-conservative power (f − c q̇) q̇.
    """

    has_input: bool

    def __init__(
        self,
        mass: float = 1.0,
        stiffness: float = 10.0,
        damping: float = 0.1,
        has_input: bool = True,
        name: str = "spring_mass_damper",
    ) -> None:
        super().__init__(name)
        self.has_input = has_input
        self.declare_continuous_state(num_q=1, num_v=1, num_z=0)
        self.declare_numeric_parameter([mass, stiffness, damping])
        if has_input:
            self.declare_vector_input_port("force", 1)
        self.declare_state_output_port("state", ContinuousStateIndex(0))

    def _force(self, context: Context) -> Any:
        if not self.has_input:
            return jnp.zeros((), context.time.dtype)
        return self.get_input_port(0).eval(context)[0]

    def do_calc_time_derivatives(self, context: Context) -> Any:
        q, v = context.get_continuous_state_vector()
        m, k, c = context.get_numeric_parameter(0)
        return jnp.stack([v, (self._force(context) - k * q - c * v) / m])

    def do_calc_potential_energy(self, context: Context) -> Any:
        q = context.get_continuous_state_vector()[0]
        k = context.get_numeric_parameter(0)[1]
        return 0.5 * k * q * q

    def do_calc_kinetic_energy(self, context: Context) -> Any:
        v = context.get_continuous_state_vector()[1]
        m = context.get_numeric_parameter(0)[0]
        return 0.5 * m * v * v

    def do_calc_conservative_power(self, context: Context) -> Any:
        q, v = context.get_continuous_state_vector()
        k = context.get_numeric_parameter(0)[1]
        return -k * q * v

    def do_calc_nonconservative_power(self, context: Context) -> Any:
        v = context.get_continuous_state_vector()[1]
        c = context.get_numeric_parameter(0)[2]
        return (self._force(context) - c * v) * v
