"""The acrobot: a two-link planar arm actuated at the elbow only (Drake's ``AcrobotPlant``)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..framework.context import Context
from ..framework.leaf_system import ContinuousStateIndex, LeafSystem


class Acrobot(LeafSystem):
    r"""Spong's acrobot, as Drake's ``AcrobotPlant``: M(q) v̇ + C(q, v) v = τ_g(q) + B u − b ⊙ v.

    θ1 from straight down, θ2 relative to link 1; u is the elbow torque (B = [0, 1]ᵀ).

    With I1 = I_c1 + m1 l_c1², I2 = I_c2 + m2 l_c2², k = m2 l1 l_c2:
    M = [[I1 + I2 + m2 l1² + 2k cos θ2, I2 + k cos θ2], [I2 + k cos θ2, I2]],
    C v = [−2k sin θ2 θ̇1 θ̇2 − k sin θ2 θ̇2², k sin θ2 θ̇1²],
    τ_g = [−m1 g l_c1 sin θ1 − m2 g (l1 sin θ1 + l_c2 sin(θ1+θ2)), −m2 g l_c2 sin(θ1+θ2)].

    - State: [θ1, θ2, θ̇1, θ̇2] (num_q = 2, num_v = 2).
    - Numeric parameter 0: [m1, m2, l1, lc1, lc2, Ic1, Ic2, b1, b2, g], Drake's defaults
      [1, 1, 1, 0.5, 1, 0.083, 0.33, 0.1, 0.1, 9.81].
    - Input port ``elbow_torque`` (size 1); output port ``state`` (size 4).
    - Energies: KE = ½ vᵀ M v, PE = −m1 g l_c1 cos θ1 − m2 g (l1 cos θ1 + l_c2 cos(θ1+θ2));
      non-conservative power (B u − b ⊙ v)ᵀ v.
    """

    def __init__(self, name: str = "acrobot", **params: float) -> None:
        super().__init__(name)
        defaults = dict(m1=1.0, m2=1.0, l1=1.0, lc1=0.5, lc2=1.0, Ic1=0.083, Ic2=0.33, b1=0.1, b2=0.1, g=9.81)
        defaults.update(params)
        self.declare_continuous_state(num_q=2, num_v=2, num_z=0)
        self.declare_numeric_parameter(
            [defaults[k] for k in ("m1", "m2", "l1", "lc1", "lc2", "Ic1", "Ic2", "b1", "b2", "g")]
        )
        self.declare_vector_input_port("elbow_torque", 1)
        self.declare_state_output_port("state", ContinuousStateIndex(0))

    @staticmethod
    def mass_matrix(q: Any, p: Any) -> Any:
        """M(q), 2×2."""
        m1, m2, l1, lc1, lc2, Ic1, Ic2 = p[:7]
        I1, I2 = Ic1 + m1 * lc1**2, Ic2 + m2 * lc2**2
        k = m2 * l1 * lc2
        c2 = jnp.cos(q[1])
        return jnp.array([[I1 + I2 + m2 * l1**2 + 2 * k * c2, I2 + k * c2], [I2 + k * c2, I2]])

    def do_calc_time_derivatives(self, context: Context) -> Any:
        x = context.get_continuous_state_vector()
        q, v = x[:2], x[2:]
        p = context.get_numeric_parameter(0)
        m1, m2, l1, lc1, lc2, _, _, b1, b2, g = p
        k = m2 * l1 * lc2
        s1, s2, s12 = jnp.sin(q[0]), jnp.sin(q[1]), jnp.sin(q[0] + q[1])
        bias = jnp.stack([-2 * k * s2 * v[1] * v[0] - k * s2 * v[1] ** 2, k * s2 * v[0] ** 2])
        tau_g = jnp.stack([-m1 * g * lc1 * s1 - m2 * g * (l1 * s1 + lc2 * s12), -m2 * g * lc2 * s12])
        u = self.get_input_port(0).eval(context)[0]
        tau = tau_g + jnp.stack([0.0 * u, u]) - jnp.stack([b1, b2]) * v - bias
        return jnp.concatenate([v, jnp.linalg.solve(self.mass_matrix(q, p), tau)])

    def do_calc_kinetic_energy(self, context: Context) -> Any:
        x = context.get_continuous_state_vector()
        return 0.5 * x[2:] @ self.mass_matrix(x[:2], context.get_numeric_parameter(0)) @ x[2:]

    def do_calc_potential_energy(self, context: Context) -> Any:
        q = context.get_continuous_state_vector()[:2]
        m1, m2, l1, lc1, lc2, _, _, _, _, g = context.get_numeric_parameter(0)
        return -m1 * g * lc1 * jnp.cos(q[0]) - m2 * g * (l1 * jnp.cos(q[0]) + lc2 * jnp.cos(q[0] + q[1]))

    def do_calc_nonconservative_power(self, context: Context) -> Any:
        v = context.get_continuous_state_vector()[2:]
        p = context.get_numeric_parameter(0)
        u = self.get_input_port(0).eval(context)[0]
        return (jnp.stack([0.0 * u, u]) - p[7:9] * v) @ v
