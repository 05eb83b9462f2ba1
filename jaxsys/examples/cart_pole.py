"""The cart-pole: a pendulum on a cart driven by a horizontal force."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..framework.context import Context
from ..framework.leaf_system import ContinuousStateIndex, LeafSystem


class CartPole(LeafSystem):
    r"""A point mass m_p on a massless pole of length l, pivoting on a cart of mass m_c.

    θ = 0 hangs down (θ = π is upright); f pushes the cart (Underactuated Robotics, ch. 3):

    ```text
    ẍ = (f + m_p sin θ (l θ̇² + g cos θ)) / (m_c + m_p sin² θ)
    θ̈ = (−f cos θ − m_p l θ̇² cos θ sin θ − (m_c + m_p) g sin θ) / (l (m_c + m_p sin² θ))
    ```

    - State: [x, θ, ẋ, θ̇] (num_q = 2, num_v = 2).
    - Numeric parameter 0: [m_c (kg), m_p (kg), l (m), g (m/s²)], default [1, 0.1, 0.5, 9.81].
    - Input port ``force`` (size 1, N); output port ``state`` (size 4).
    - Energies: KE = ½ (m_c + m_p) ẋ² + m_p l ẋ θ̇ cos θ + ½ m_p l² θ̇², PE = −m_p g l cos θ;
      non-conservative power f ẋ.
    """

    def __init__(
        self,
        cart_mass: float = 1.0,
        pole_mass: float = 0.1,
        length: float = 0.5,
        gravity: float = 9.81,
        name: str = "cart_pole",
    ) -> None:
        super().__init__(name)
        self.declare_continuous_state(num_q=2, num_v=2, num_z=0)
        self.declare_numeric_parameter([cart_mass, pole_mass, length, gravity])
        self.declare_vector_input_port("force", 1)
        self.declare_state_output_port("state", ContinuousStateIndex(0))

    def do_calc_time_derivatives(self, context: Context) -> Any:
        _, th, xd, thd = context.get_continuous_state_vector()
        mc, mp, l, g = context.get_numeric_parameter(0)
        f = self.get_input_port(0).eval(context)[0]
        s, c = jnp.sin(th), jnp.cos(th)
        den = mc + mp * s * s
        xdd = (f + mp * s * (l * thd * thd + g * c)) / den
        thdd = (-f * c - mp * l * thd * thd * c * s - (mc + mp) * g * s) / (l * den)
        return jnp.stack([xd, thd, xdd, thdd])

    def do_calc_kinetic_energy(self, context: Context) -> Any:
        _, th, xd, thd = context.get_continuous_state_vector()
        mc, mp, l, _ = context.get_numeric_parameter(0)
        return 0.5 * (mc + mp) * xd * xd + mp * l * xd * thd * jnp.cos(th) + 0.5 * mp * l * l * thd * thd

    def do_calc_potential_energy(self, context: Context) -> Any:
        th = context.get_continuous_state_vector()[1]
        _, mp, l, g = context.get_numeric_parameter(0)
        return -mp * g * l * jnp.cos(th)

    def do_calc_conservative_power(self, context: Context) -> Any:
        _, th, _, thd = context.get_continuous_state_vector()
        _, mp, l, g = context.get_numeric_parameter(0)
        return -mp * g * l * jnp.sin(th) * thd

    def do_calc_nonconservative_power(self, context: Context) -> Any:
        return self.get_input_port(0).eval(context)[0] * context.get_continuous_state_vector()[2]
