"""The cart-pole released near upright, without friction: mechanical energy is conserved to the
integrator's accuracy; with a force pushing the cart, its change equals the work done.

Run: python examples/cartpole_energy.py   (writes examples/output/cartpole_energy.png)
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp


jax.config.update("jax_enable_x64", True)

import jaxsys as js  # noqa: E402
from jaxsys.examples import CartPole  # noqa: E402


def main() -> None:
    plant = CartPole()
    ctx = plant.get_input_port("force").fix_value(plant.create_default_context(), [0.0])
    ctx = ctx.with_continuous_state(jnp.array([0.0, 3.0, 0.0, 0.0]))  # near upright (pi)

    def energy(c):
        return plant.calc_kinetic_energy(c) + plant.calc_potential_energy(c)

    ts = jnp.linspace(0.0, 10.0, 501)
    record = lambda c: {"state": c.get_continuous_state_vector(), "energy": energy(c)[None]}  # noqa: E731
    result = jax.jit(
        lambda c: js.simulate(
            plant, c, 10.0, js.RungeKutta5Integrator(target_accuracy=1e-10), save_at=ts, record=record
        )
    )(ctx)
    drift = float(jnp.max(jnp.abs(result.ys["energy"] - result.ys["energy"][0])))
    print(f"initial energy {float(result.ys['energy'][0, 0]):.9f} J, max drift over 10 s {drift:.2e} J")
    out = pathlib.Path(__file__).parent / "output"
    out.mkdir(exist_ok=True)
    js.plot_result(
        result,
        labels={"state": ["x [m]", "theta [rad]", "x_dot", "theta_dot"], "energy": ["E [J]"]},
        title="Cart-pole released near upright (no friction)",
        path=out / "cartpole_energy.png",
    )
    print(f"plot written to {out / 'cartpole_energy.png'}")


if __name__ == "__main__":
    main()
