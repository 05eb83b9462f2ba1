"""A damped simple pendulum with a torque input (Drake's ``examples::pendulum::PendulumPlant``)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..framework.context import Context
from ..framework.leaf_system import ContinuousStateIndex, LeafSystem


class Pendulum(LeafSystem):
    r"""A point mass on a massless rod, pivot fixed, with viscous damping and an applied torque.

    Equations (θ from straight down, counter-clockwise positive):

    ```text
    m l² θ̈ = τ − b θ̇ − m g l sin θ
    ```

    - State: x = [θ, θ̇] (num_q = 1, num_v = 1), in rad and rad/s; default [0, 0].
    - Numeric parameter 0: [m (kg), l (m), b (N·m·s), g (m/s²)], default [1, 1, 0.1, 9.81].
    - Input port ``tau`` (size 1): applied torque, N·m.
    - Output port ``state`` (size 2): [θ, θ̇].
    - Energies (Drake's convention): PE = −m g l cos θ (zero at pivot height), KE = ½ m l² θ̇²;
      conservative power −dPE/dt = −m g l sin θ · θ̇; non-conservative power (τ − b θ̇) θ̇.
    """

    def __init__(
        self,
        mass: float = 1.0,
        length: float = 1.0,
        damping: float = 0.1,
        gravity: float = 9.81,
        name: str = "pendulum",
    ) -> None:
        super().__init__(name)
        self.declare_continuous_state(num_q=1, num_v=1, num_z=0)
        self.declare_numeric_parameter([mass, length, damping, gravity])
        self.declare_vector_input_port("tau", 1)
        self.declare_state_output_port("state", ContinuousStateIndex(0))

    @staticmethod
    def params(context: Context) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        """(m, l, b, g) from the context."""
        m, l, b, g = context.get_numeric_parameter(0)
        return m, l, b, g

    def do_calc_time_derivatives(self, context: Context) -> Any:
        theta, thetadot = context.get_continuous_state_vector()
        m, l, b, g = self.params(context)
        tau = self.get_input_port(0).eval(context)[0]
        thetaddot = (tau - b * thetadot - m * g * l * jnp.sin(theta)) / (m * l * l)
        return jnp.stack([thetadot, thetaddot])

    def do_calc_potential_energy(self, context: Context) -> Any:
        theta = context.get_continuous_state_vector()[0]
        m, l, _, g = self.params(context)
        return -m * g * l * jnp.cos(theta)

    def do_calc_kinetic_energy(self, context: Context) -> Any:
        thetadot = context.get_continuous_state_vector()[1]
        m, l, _, _ = self.params(context)
        return 0.5 * m * l * l * thetadot**2

    def do_calc_conservative_power(self, context: Context) -> Any:
        theta, thetadot = context.get_continuous_state_vector()
        m, l, _, g = self.params(context)
        return -m * g * l * jnp.sin(theta) * thetadot

    def do_calc_nonconservative_power(self, context: Context) -> Any:
        thetadot = context.get_continuous_state_vector()[1]
        _, _, b, _ = self.params(context)
        tau = self.get_input_port(0).eval(context)[0]
        return (tau - b * thetadot) * thetadot
