"""A bouncing ball: impacts found by a witness function inside the compiled loop, and the gradient of
the height at t = 3 s with respect to the restitution coefficient, through the impacts.

Run: python examples/bouncing_ball.py   (writes examples/output/bouncing_ball.png)
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np


jax.config.update("jax_enable_x64", True)

import jaxsys as js  # noqa: E402
from jaxsys.examples import BouncingBall  # noqa: E402


def main() -> None:
    ball = BouncingBall(z0=10.0, restitution=0.8)
    ctx = ball.create_default_context()
    integrator = js.RungeKutta5Integrator(target_accuracy=1e-10)
    ts = jnp.linspace(0.0, 8.0, 801)
    result = jax.jit(lambda c: js.simulate(ball, c, 8.0, integrator, save_at=ts))(ctx)
    t1 = np.sqrt(2 * 10.0 / 9.81)
    analytic_impacts = [t1 + sum(2 * 0.8**k * t1 for k in range(1, n + 1)) for n in range(4)]
    print(
        "impacts:",
        int(result.simulator_stats.num_unrestricted_updates),
        "| analytic impact times:",
        np.round(analytic_impacts, 4),
    )

    def height_at_3(e):
        c = ctx.with_numeric_parameter(0, jnp.stack([9.81, e]))
        return js.simulate(ball, c, 3.0, integrator).context.get_continuous_state_vector()[0]

    grad = float(jax.grad(height_at_3)(0.8))
    fd = float((height_at_3(0.8 + 1e-6) - height_at_3(0.8 - 1e-6)) / 2e-6)
    print(f"d z(3)/d restitution = {grad:.8f} (finite differences {fd:.8f})")

    out = pathlib.Path(__file__).parent / "output"
    out.mkdir(exist_ok=True)
    js.plot_result(
        result,
        labels=["height z [m]", "velocity v [m/s]"],
        title="Bouncing ball (e = 0.8)",
        path=out / "bouncing_ball.png",
    )
    print(f"plot written to {out / 'bouncing_ball.png'}")


if __name__ == "__main__":
    main()
