"""Linearize the cart-pole at the upright equilibrium, design an LQR controller, and simulate the
nonlinear closed loop from a perturbed start.

Run: python examples/lqr_stabilization.py   (writes examples/output/lqr_stabilization.png)
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np


jax.config.update("jax_enable_x64", True)

import jaxsys as js  # noqa: E402
from jaxsys.examples import CartPole  # noqa: E402


def main() -> None:
    plant = CartPole()
    upright = plant.get_input_port("force").fix_value(plant.create_default_context(), [0.0])
    upright = upright.with_continuous_state(jnp.array([0.0, np.pi, 0.0, 0.0]))

    lin = js.linearize(plant, upright)
    lc = lin.create_default_context()
    A, B = np.asarray(lin.A(lc)), np.asarray(lin.B(lc))
    print("A =\n", np.round(A, 4), "\nB =", np.round(B.ravel(), 4))
    Q, R = np.diag([10.0, 10.0, 1.0, 1.0]), np.eye(1)
    K, S = js.linear_quadratic_regulator(A, B, Q, R)
    print("K =", np.round(np.asarray(K), 4))
    print("closed-loop eigenvalues:", np.round(np.linalg.eigvals(A - B @ np.asarray(K)), 3))

    b = js.DiagramBuilder()
    cart = b.add_system(CartPole())
    ctrl = b.add_named_system("lqr", js.linear_quadratic_regulator_system(plant, upright, Q, R))
    b.connect(cart.get_output_port("state"), ctrl.get_input_port())
    b.connect(ctrl.get_output_port(), cart.get_input_port("force"))
    b.export_output(cart.get_output_port("state"), "state")
    b.export_output(ctrl.get_output_port(), "force")
    d = b.build("lqr_loop")
    start = d.create_default_context().with_continuous_state(jnp.array([0.5, np.pi - 0.3, 0.0, 0.0]))
    ts = jnp.linspace(0.0, 6.0, 301)
    r = js.simulate(
        d, start, 6.0, js.RungeKutta3Integrator(target_accuracy=1e-8), save_at=ts, record=js.record_outputs(d)
    )
    final = np.asarray(r.ys["state"][-1])
    print("final state [x, theta - pi, xdot, thetadot]:", np.round(final - np.array([0, np.pi, 0, 0]), 6))
    out = pathlib.Path(__file__).parent / "output"
    out.mkdir(exist_ok=True)
    js.plot_result(
        r,
        labels={"state": ["x [m]", "theta [rad]", "x_dot", "theta_dot"], "force": ["f [N]"]},
        title="Cart-pole balanced at the top by LQR",
        path=out / "lqr_stabilization.png",
    )
    print(f"plot written to {out / 'lqr_stabilization.png'}")


if __name__ == "__main__":
    main()
