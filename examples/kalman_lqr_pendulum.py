"""Balance a pendulum at the top with an LQR that sees only a noisy angle: an extended Kalman filter
estimates [angle, angular velocity] from the measurements, and the LQR acts on the estimate.

The diagram: pendulum -> angle + Gaussian noise (RandomSource, std 0.05 rad, every 10 ms) -> EKF
(sampled every 10 ms) -> LQR about the upright -> pendulum torque (and the EKF's input).

Run: python examples/kalman_lqr_pendulum.py   (writes examples/output/kalman_lqr_pendulum.png)
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np


jax.config.update("jax_enable_x64", True)

import jaxsys as js  # noqa: E402
from jaxsys.examples import Pendulum  # noqa: E402


class AngleSensorPendulum(Pendulum):
    """The pendulum with a second output port ``angle`` (the measured quantity): the filter's model."""

    def __init__(self) -> None:
        super().__init__()
        self.declare_vector_output_port("angle", 1, lambda c: c.get_continuous_state_vector()[:1])


def build(noise_std: float = 0.05, period: float = 0.01):
    model = AngleSensorPendulum()
    upright = model.get_input_port(0).fix_value(model.create_default_context(), [0.0])
    upright = upright.with_continuous_state(jnp.array([np.pi, 0.0]))

    b = js.DiagramBuilder()
    plant = b.add_named_system("pendulum", Pendulum())
    noise = b.add_named_system("noise", js.RandomSource("gaussian", 1, period))
    scale = b.add_named_system("noise_std", js.Gain(noise_std, 1))
    angle = b.add_named_system("angle", js.Demultiplexer(2))
    sensor = b.add_named_system("sensor", js.Adder(2, 1))
    ekf = b.add_named_system(
        "ekf",
        js.ExtendedKalmanFilter(
            model,
            upright,
            W=np.diag([1e-6, 1e-4]),
            V=[[noise_std**2]],
            period=period,
            initial_state=[np.pi, 0.0],
            initial_covariance=np.diag([0.1, 0.1]),
            output_port="angle",
        ),
    )
    lqr = b.add_named_system(
        "lqr", js.linear_quadratic_regulator_system(model, upright, np.diag([10.0, 1.0]), np.eye(1))
    )
    b.connect(plant.get_output_port("state"), angle.get_input_port(0))
    b.connect(noise.get_output_port(0), scale.get_input_port(0))
    b.connect(angle.get_output_port(0), sensor.get_input_port(0))
    b.connect(scale.get_output_port(0), sensor.get_input_port(1))
    b.connect(sensor.get_output_port(0), ekf.get_input_port("observed_system_output"))
    b.connect(ekf.get_output_port("estimated_state"), lqr.get_input_port(0))
    b.connect(lqr.get_output_port(0), plant.get_input_port(0))
    b.connect(lqr.get_output_port(0), ekf.get_input_port("observed_system_input"))
    b.export_output(plant.get_output_port("state"), "truth")
    b.export_output(ekf.get_output_port("estimated_state"), "estimate")
    b.export_output(sensor.get_output_port(0), "measured_angle")
    b.export_output(lqr.get_output_port(0), "torque")
    return b.build("kalman_lqr"), plant


def run(seed: int = 0, t_final: float = 4.0):
    diagram, plant = build()
    ctx = diagram.create_default_context()
    ctx = plant.set_my_context_in_root(
        ctx, plant.get_my_context_from_root(ctx).with_continuous_state(jnp.array([np.pi - 0.2, 0.0]))
    )
    noise = diagram.get_subsystem_by_name("noise")
    ctx = noise.set_my_context_in_root(ctx, noise.with_seed(noise.get_my_context_from_root(ctx), seed))
    ts = np.linspace(0.0, t_final, 401)
    return js.simulate(
        diagram,
        ctx,
        t_final,
        js.RungeKutta4Integrator(max_step_size=0.005),
        save_at=ts,
        record=js.record_outputs(diagram),
    )


def main() -> None:
    r = run()
    ts = np.asarray(r.ts)
    truth, est = np.asarray(r.ys["truth"]), np.asarray(r.ys["estimate"])
    late = ts >= 1.0
    rms = np.sqrt(np.mean((est[late] - truth[late]) ** 2, axis=0))
    meas_rms = np.sqrt(np.mean((np.asarray(r.ys["measured_angle"])[late, 0] - truth[late, 0]) ** 2))
    print(
        f"after 1 s: estimate rms error angle {rms[0]:.4f} rad (measurement noise rms {meas_rms:.4f}), "
        f"rate {rms[1]:.4f} rad/s"
    )
    print(f"final angle - pi: {truth[-1, 0] - np.pi:+.4f} rad, final rate {truth[-1, 1]:+.4f} rad/s")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(9, 7), sharex=True)
    ax1.plot(ts, np.asarray(r.ys["measured_angle"])[:, 0], ".", ms=2, color="0.6", label="measured angle")
    ax1.plot(ts, truth[:, 0], label="true angle")
    ax1.plot(ts, est[:, 0], "--", label="EKF estimate")
    ax1.axhline(np.pi, color="gray", lw=0.8)
    ax1.set_ylabel("angle [rad]")
    ax1.legend(fontsize="small")
    ax2.plot(ts, truth[:, 1], label="true rate")
    ax2.plot(ts, est[:, 1], "--", label="EKF estimate (never measured)")
    ax2.set_ylabel("rate [rad/s]")
    ax2.legend(fontsize="small")
    ax3.plot(ts, np.asarray(r.ys["torque"])[:, 0], color="C2")
    ax3.set_ylabel("LQR torque [N m]")
    ax3.set_xlabel("time [s]")
    fig.suptitle("Pendulum balanced by LQR on an extended Kalman filter's estimate")
    fig.tight_layout()
    out = pathlib.Path(__file__).parent / "output"
    out.mkdir(exist_ok=True)
    fig.savefig(out / "kalman_lqr_pendulum.png", dpi=100)
    print(f"plot written to {out / 'kalman_lqr_pendulum.png'}")


if __name__ == "__main__":
    main()
