"""A pendulum held at 1 rad by a discrete PID controller (sampled every 10 ms, zero-order hold).

Run: python examples/pendulum_pid.py   (writes examples/output/pendulum_pid.png)
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp


jax.config.update("jax_enable_x64", True)

import jaxsys as js  # noqa: E402
from jaxsys.examples import Pendulum  # noqa: E402


def main() -> None:
    b = js.DiagramBuilder()
    plant = b.add_system(Pendulum())
    target = b.add_named_system("target", js.ConstantVectorSource([1.0, 0.0]))
    pid = b.add_named_system("pid", js.DiscretePidController(kp=40.0, ki=60.0, kd=8.0, period=0.01))
    b.connect(plant.get_output_port("state"), pid.get_input_port("estimated_state"))
    b.connect(target.get_output_port(), pid.get_input_port("desired_state"))
    b.connect(pid.get_output_port("control"), plant.get_input_port("tau"))
    b.export_output(plant.get_output_port("state"), "state")
    b.export_output(pid.get_output_port("control"), "torque")
    diagram = b.build("pendulum_pid")

    ts = jnp.linspace(0.0, 8.0, 801)
    result = jax.jit(
        lambda c: js.simulate(
            diagram, c, 8.0, js.RungeKutta4Integrator(max_step_size=0.01), save_at=ts, record=js.record_outputs(diagram)
        )
    )(diagram.create_default_context())
    theta = result.ys["state"][:, 0]
    torque = result.ys["torque"][:, 0]
    # At rest at 1 rad the integral term holds gravity: torque = m g l sin(1) = 9.81 sin(1)
    print(f"final angle  {float(theta[-1]):.6f} rad (target 1.0)")
    print(f"final torque {float(torque[-1]):.6f} N m (gravity: {9.81 * float(jnp.sin(1.0)):.6f})")
    print(f"discrete PID updates: {int(result.simulator_stats.num_discrete_updates)} (every 10 ms)")
    out = pathlib.Path(__file__).parent / "output"
    out.mkdir(exist_ok=True)
    js.plot_result(
        result,
        labels={"state": ["theta [rad]", "theta_dot [rad/s]"], "torque": ["tau [N m]"]},
        title="Pendulum under a sampled PID (10 ms, zero-order hold)",
        path=out / "pendulum_pid.png",
    )
    print(f"plot written to {out / 'pendulum_pid.png'}")


if __name__ == "__main__":
    main()
