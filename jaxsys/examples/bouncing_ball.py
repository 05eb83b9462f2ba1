"""A ball bouncing on the ground: continuous flight, an impact witness, an unrestricted update."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from ..framework.context import Context, State
from ..framework.leaf_system import ContinuousStateIndex, LeafSystem
from ..framework.witness import UnrestrictedUpdateEvent, WitnessFunction


class BouncingBall(LeafSystem):
    r"""z̈ = −g in flight; when z crosses 0 downward, v ← −e v (Drake's ``BouncingBall`` example).

    - State: x = [z, v] (num_q = 1, num_v = 1), m and m/s; default [10, 0].
    - Numeric parameter 0: [g (m/s²), e (restitution, 0..1)], default [9.81, 0.8].
    - Output port ``state`` (size 2).
    - Witness ``impact``: z, positive-then-non-positive, firing an unrestricted update
      (the impact law). Energies: PE = m g z, KE = ½ m v² with m = 1 kg.
    """

    impact: WitnessFunction

    def __init__(self, z0: float = 10.0, gravity: float = 9.81, restitution: float = 0.8, name: str = "ball") -> None:
        super().__init__(name)
        self.declare_continuous_state(num_q=1, num_v=1, num_z=0, default=[z0, 0.0])
        self.declare_numeric_parameter([gravity, restitution])
        self.declare_state_output_port("state", ContinuousStateIndex(0))
        self.impact = self.declare_witness_function(
            "impact", "positive_then_non_positive", self.height, UnrestrictedUpdateEvent(self.bounce)
        )

    def height(self, context: Context) -> Any:
        """The witness: height above the ground, m."""
        return context.get_continuous_state_vector()[0]

    def bounce(self, context: Context, state: State) -> State:
        """The impact law v ← −e v."""
        e = context.get_numeric_parameter(0)[1]
        x = state.continuous_state.get_vector()
        new = dataclasses.replace(state.continuous_state, x=jnp.stack([x[0], -e * x[1]]))
        return dataclasses.replace(state, continuous_state=new)

    def do_calc_time_derivatives(self, context: Context) -> Any:
        z, v = context.get_continuous_state_vector()
        g = context.get_numeric_parameter(0)[0]
        return jnp.stack([v, -g + 0.0 * z])

    def do_calc_potential_energy(self, context: Context) -> Any:
        return context.get_numeric_parameter(0)[0] * context.get_continuous_state_vector()[0]

    def do_calc_kinetic_energy(self, context: Context) -> Any:
        return 0.5 * context.get_continuous_state_vector()[1] ** 2
