"""Simulate 4096 pendulums with different initial conditions and lengths in one compiled call
(jax.vmap over contexts) and draw their phase portrait.

Run: python examples/batched_simulation.py   (writes examples/output/batched_simulation.png)
"""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp


jax.config.update("jax_enable_x64", True)

import jaxsys as js  # noqa: E402
from jaxsys.examples import Pendulum  # noqa: E402


def main(n: int = 4096) -> None:
    plant = Pendulum(damping=0.3)
    base = plant.get_input_port("tau").fix_value(plant.create_default_context(), [0.0])
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    theta0 = jax.random.uniform(k1, (n,), minval=-3.0, maxval=3.0)
    omega0 = jax.random.uniform(k2, (n,), minval=-4.0, maxval=4.0)
    length = jax.random.uniform(k3, (n,), minval=0.5, maxval=2.0)

    def make(th, om, l):
        ctx = base.with_continuous_state(jnp.stack([th, om]))
        return ctx.with_numeric_parameter(0, jnp.stack([1.0, l, 0.3, 9.81]))

    contexts = jax.vmap(make)(theta0, omega0, length)
    ts = jnp.linspace(0.0, 10.0, 201)
    run = jax.jit(
        jax.vmap(lambda c: js.simulate(plant, c, 10.0, js.RungeKutta4Integrator(max_step_size=1e-2), save_at=ts).ys)
    )
    t = time.perf_counter()
    trajectories = run(contexts).block_until_ready()
    first = time.perf_counter() - t
    t = time.perf_counter()
    run(contexts).block_until_ready()
    again = time.perf_counter() - t
    steps = n * 1000
    print(
        f"{n} pendulums x 1000 RK4 steps: first call {first:.2f} s (with compilation), then {again:.3f} s "
        f"({steps / again / 1e6:.1f} M pendulum-steps/s on {jax.devices()[0].platform})"
    )

    # damping only dissipates: every member's mechanical energy E = 1/2 l^2 w^2 - g l cos(theta) decreases
    def energy(x, l):
        return 0.5 * l**2 * x[..., 1] ** 2 - 9.81 * l * jnp.cos(x[..., 0])

    decreased = energy(trajectories[:, -1], length) < energy(trajectories[:, 0], length)
    print(f"members whose energy decreased: {int(decreased.sum())} of {n}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 5))
    for traj in trajectories[:: max(1, n // 200)]:
        ax.plot(traj[:, 0], traj[:, 1], lw=0.4, alpha=0.7)
    ax.set_xlabel("theta [rad]")
    ax.set_ylabel("theta_dot [rad/s]")
    ax.set_title(f"phase portrait: {n} damped pendulums (200 shown)")
    out = pathlib.Path(__file__).parent / "output"
    out.mkdir(exist_ok=True)
    fig.tight_layout()
    fig.savefig(out / "batched_simulation.png", dpi=100)
    print(f"plot written to {out / 'batched_simulation.png'}")


if __name__ == "__main__":
    main()
