"""jaxsys quickstart: a pendulum driven by a PD controller, simulated, differentiated, plotted.

Run:  python examples/quickstart.py   (writes examples/output/quickstart.png)
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp


jax.config.update("jax_enable_x64", True)

import jaxsys as js  # noqa: E402
from jaxsys.examples import Pendulum  # noqa: E402


class PDController(js.LeafSystem):
    """tau = kp (theta_ref - theta) - kd thetadot; parameters [kp, kd, theta_ref]."""

    def __init__(self, kp: float = 20.0, kd: float = 4.0, theta_ref: float = 0.5):
        super().__init__("controller")
        self.declare_numeric_parameter([kp, kd, theta_ref])
        self.declare_vector_input_port("state", 2)
        self.declare_vector_output_port("tau", 1, self.calc_tau)

    def calc_tau(self, context):
        theta, thetadot = self.get_input_port(0).eval(context)
        kp, kd, ref = context.get_numeric_parameter(0)
        return jnp.stack([kp * (ref - theta) - kd * thetadot])


def build():
    builder = js.DiagramBuilder()
    plant = builder.add_system(Pendulum())
    controller = builder.add_system(PDController())
    builder.connect(plant.get_output_port("state"), controller.get_input_port("state"))
    builder.connect(controller.get_output_port("tau"), plant.get_input_port("tau"))
    builder.export_output(plant.get_output_port("state"), "state")
    builder.export_output(controller.get_output_port("tau"), "tau")
    return builder.build("diagram"), plant, controller


def main() -> None:
    diagram, plant, controller = build()
    context = diagram.create_default_context()
    integrator = js.RungeKutta3Integrator(max_step_size=0.1, target_accuracy=1e-6)
    ts = jnp.linspace(0.0, 5.0, 251)
    record = lambda c: jnp.concatenate(
        [
            diagram.get_output_port("state").eval(c),  # noqa: E731
            diagram.get_output_port("tau").eval(c),
        ]
    )

    result = jax.jit(lambda c: js.simulate(diagram, c, 5.0, integrator, save_at=ts, record=record))(context)
    theta, thetadot, tau = result.ys.T
    stats = result.stats.as_dict()
    # Steady state of m l^2 th'' = kp (ref - th) - kd th' - b th' - m g l sin th:  kp (ref - th) = m g l sin th
    print(f"final angle        {float(theta[-1]): .6f} rad  (reference 0.5 rad; gravity leaves an offset)")
    gravity = 9.81 * float(jnp.sin(theta[-1]))
    print(f"final torque       {float(tau[-1]): .6f} N m  (= m g l sin(theta) = {gravity:.6f})")
    print(
        f"integrator steps   {stats['num_steps_taken']}  derivative evaluations {stats['num_derivative_evaluations']}"
    )

    # Gradient of the final angle with respect to the controller gain kp (index 1 of the
    # diagram's numeric parameters: [pendulum params, controller params]).
    def final_angle(kp):
        c = context.with_numeric_parameter(1, jnp.stack([kp, 4.0, 0.5]))
        return js.simulate(diagram, c, 5.0, integrator).context.get_continuous_state_vector()[0]

    g = jax.grad(final_angle)(20.0)
    fd = (final_angle(20.0 + 1e-5) - final_angle(20.0 - 1e-5)) / 2e-5
    print(f"d(theta_final)/dkp {float(g): .6e}  (finite differences {float(fd): .6e})")

    out = pathlib.Path(__file__).parent / "output"
    out.mkdir(exist_ok=True)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install 'jaxsys[plot]')")
        return
    fig, axes = plt.subplots(2, 1, sharex=True, figsize=(7, 5))
    axes[0].plot(ts, theta, label="theta [rad]")
    axes[0].plot(ts, thetadot, label="thetadot [rad/s]")
    axes[0].axhline(0.5, color="gray", ls="--", lw=0.8, label="reference")
    axes[0].legend()
    axes[1].plot(ts, tau, color="C2", label="tau [N m]")
    axes[1].set_xlabel("time [s]")
    axes[1].legend()
    fig.suptitle("Pendulum under PD control (jaxsys, RK3, accuracy 1e-6)")
    fig.tight_layout()
    path = out / "quickstart.png"
    fig.savefig(path, dpi=100)
    print(f"plot written to {path}")


if __name__ == "__main__":
    main()
