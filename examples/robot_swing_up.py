"""Swing up an MJCF cart-pole (a MuJoCo model simulated by MJX) with iLQR, then check the plan on the
hand-written cart-pole equations.

``js.ilqr`` optimizes the input of a system with one vector input port: the plant's ``actuation`` is
exported from a Diagram (the plant's other input, ``applied_generalized_force``, stays unconnected:
zero). The force plan is then replayed open loop on ``jaxsys.examples.CartPole``, the same system
written as equations, with iLQR's discretization: both end upright.

Run: python examples/robot_swing_up.py   (needs pip install "jaxsys[mujoco]"; writes
examples/output/robot_swing_up.png)
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np


jax.config.update("jax_enable_x64", True)

import jaxsys as js  # noqa: E402
from jaxsys.examples import CartPole  # noqa: E402
from jaxsys.multibody import MujocoPlant, model_path  # noqa: E402


def main() -> None:
    plant = MujocoPlant(model_path("cart_pole"), time_step=0.0)
    builder = js.DiagramBuilder()
    builder.add_system(plant)
    builder.export_input(plant.get_input_port("actuation"), "force")
    builder.export_output(plant.get_output_port("state"), "state")
    diagram = builder.build("cart_pole")

    T, N = 3.0, 60
    goal = jnp.array([0.0, jnp.pi, 0.0, 0.0])
    weights = jnp.array([1.0, 1.0, 0.1, 0.1])

    def running(x, u):
        return 0.01 * u[0] ** 2 + 0.1 * jnp.sum(weights * (x - goal) ** 2)

    def final(x):
        return 100.0 * jnp.sum((x - goal) ** 2)

    sol = js.ilqr(diagram, diagram.create_default_context(), T, N, running, final, u_lower=-20.0, u_upper=20.0)
    x_final = np.asarray(sol.x[-1])
    print(f"iLQR converged {bool(sol.converged)} after {int(sol.iterations)} iterations, cost {float(sol.cost):.4f}")
    print(f"final state (MJX plan)       x {x_final[0]:+.4f}  theta {x_final[1]:.4f}  (goal pi = {np.pi:.4f})")
    print(f"largest |force| {float(jnp.max(jnp.abs(sol.u))):.2f} N (limit 20)")

    # the same force plan, zero-order held, on the hand-written equations, discretized as iLQR did (one
    # RK4 step per interval): the two models agree (the upright end is unstable: an open-loop replay
    # with another discretization would drift away)
    ref = CartPole()
    ctx = ref.create_default_context()
    h = T / N
    rk4 = js.RungeKutta4Integrator(max_step_size=h, fixed_step_mode=True)
    for k in range(N):
        ctx = ref.get_input_port(0).fix_value(ctx, sol.u[k])
        ctx = js.simulate(ref, ctx, (k + 1) * h, rk4, initialize=False).context
    x_ref = np.asarray(ctx.get_continuous_state_vector())
    print(f"final state (equations)      x {x_ref[0]:+.4f}  theta {x_ref[1]:.4f}")
    print(f"plan replayed on the equations misses the MJX plan by {float(np.max(np.abs(x_ref - x_final))):.2e}")

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.2))
    ax1.plot(sol.times, sol.x[:, 1], label="pole angle θ (rad)")
    ax1.plot(sol.times, sol.x[:, 0], label="cart position (m)")
    ax1.axhline(np.pi, color="gray", lw=0.5, ls="--")
    ax1.set_xlabel("time (s)")
    ax1.legend(fontsize="small")
    ax2.step(sol.times[:-1], sol.u[:, 0], where="post")
    ax2.set_xlabel("time (s)")
    ax2.set_ylabel("force (N)")
    fig.suptitle("iLQR swing-up of the MJCF cart-pole (MJX dynamics)")
    out = pathlib.Path(__file__).parent / "output"
    out.mkdir(exist_ok=True)
    fig.tight_layout()
    fig.savefig(out / "robot_swing_up.png", dpi=100)
    print("wrote examples/output/robot_swing_up.png")


if __name__ == "__main__":
    main()
