"""Semi-explicit (symplectic) Euler for second-order systems (Drake's ``SemiExplicitEulerIntegrator``).

Imports: `base` only.
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax.numpy as jnp

from .base import Array, IntegratorBase, VectorField


class SemiExplicitEulerIntegrator(IntegratorBase):
    """Symplectic (semi-explicit) Euler for second-order systems (Drake's ``SemiExplicitEulerIntegrator``).

    v₁ = v₀ + h v̇(q₀, v₀); q₁ = q₀ + h N(q₀) v₁ (via ``map_velocity_to_qdot``); z₁ = z₀ + h ż(q₀, v₀).
    First order, fixed step, one derivative evaluation a step. Needs the continuous-state layout;
    the simulator supplies it.
    """

    name: ClassVar[str] = "semi_explicit_euler"
    order: ClassVar[int] = 1
    num_stages: ClassVar[int] = 1

    def attempt_step(self, f: VectorField, t: Array, x: Array, h: Array, aux: Any) -> tuple[Array, Array, Array]:
        nq, nv, v_to_qdot = aux["num_q"], aux["num_v"], aux["v_to_qdot"]
        xdot = f(t, x)
        v1 = x[nq : nq + nv] + h * xdot[nq : nq + nv]
        qdot = v_to_qdot(t, x, v1)
        q1 = x[:nq] + h * qdot
        z1 = x[nq + nv :] + h * xdot[nq + nv :]
        return jnp.concatenate([q1, v1, z1]), jnp.zeros_like(x), jnp.array(True)
