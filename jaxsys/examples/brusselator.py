"""The one-dimensional Brusselator: a stiff reaction-diffusion system with a banded Jacobian."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context
from ..framework.leaf_system import LeafSystem


class Brusselator(LeafSystem):
    r"""Hairer & Wanner's BRUSS (*Solving ODEs II*, IV.10), the method of lines on N interior grid points
    x_i = i / (N + 1) of [0, 1]:

    u_i' = 1 + u_i² v_i − 4 u_i + α (N + 1)² (u_{i−1} − 2 u_i + u_{i+1}),
    v_i' = 3 u_i − u_i² v_i + α (N + 1)² (v_{i−1} − 2 v_i + v_{i+1}),

    with u = 1, v = 3 at both ends and u_i(0) = 1 + sin(2π x_i), v_i(0) = 3.

    - State: 2N values, *interleaved* [u_1, v_1, u_2, v_2, ...], so that the Jacobian is banded with
      two sub- and two super-diagonals: simulate it with ``jacobian_bandwidth=(2, 2)`` on an implicit
      integrator (`bandwidth()` returns it). Diffusion makes it stiff: the Jacobian's eigenvalues reach
      about −4 α (N + 1)² (−5,000 for N = 500, α = 1/50).
    - Numeric parameter 0: [α], default 1/50.
    """

    n: int = eqx.field(static=True)

    def __init__(self, n: int = 500, alpha: float = 1.0 / 50.0, name: str = "brusselator") -> None:
        super().__init__(name)
        if int(n) < 1:
            raise ValueError(f"Brusselator: need n >= 1 grid points; got {n}.")
        self.n = int(n)
        x = np.arange(1, self.n + 1) / (self.n + 1)
        default = np.stack([1.0 + np.sin(2 * np.pi * x), np.full(self.n, 3.0)], axis=1).reshape(-1)
        self.declare_continuous_state(2 * self.n, default=default)
        self.declare_numeric_parameter([alpha])

    def bandwidth(self) -> tuple[int, int]:
        """(sub-, super-diagonals) of the Jacobian in this state ordering: (2, 2)."""
        return (2, 2)

    def do_calc_time_derivatives(self, context: Context) -> Any:
        y = context.get_continuous_state_vector().reshape(self.n, 2)
        u, v = y[:, 0], y[:, 1]
        c = context.get_numeric_parameter(0)[0] * (self.n + 1) ** 2
        one, three = jnp.ones((1,), u.dtype), jnp.full((1,), 3.0, v.dtype)
        up, vp = jnp.concatenate([one, u, one]), jnp.concatenate([three, v, three])
        lap_u = up[:-2] - 2.0 * u + up[2:]
        lap_v = vp[:-2] - 2.0 * v + vp[2:]
        du = 1.0 + u * u * v - 4.0 * u + c * lap_u
        dv = 3.0 * u - u * u * v + c * lap_v
        return jnp.stack([du, dv], axis=1).reshape(-1)
