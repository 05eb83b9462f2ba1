"""A quadruped (MJX's Barkour v0 model) standing up tall under a joint-space PD controller written as a
jaxsys LeafSystem, in a Diagram with the discrete (MuJoCo-stepped) plant.

The model's actuators are position servos; here they are turned into torque motors (gain 1, no bias,
the model's ±18 N m force range), so that the PD law lives in the Diagram: a ``posture`` source
blends the joint targets from the model's ``standing`` keyframe to a taller stance over a second, and
``PD`` computes τ = kp (q* − q) − kd q̇ from the plant's ``state`` output. The floor of the test model is
a random height field, replaced here by a plane.

Run: python examples/robot_quadruped_pd.py   (needs pip install "jaxsys[mujoco]"; writes
examples/output/robot_quadruped_pd.png)
"""

from __future__ import annotations

import pathlib

import jax.numpy as jnp
import mujoco
import numpy as np

import jaxsys as js
from jaxsys.multibody import MujocoPlant, model_path


def barkour_with_torque_motors() -> mujoco.MjModel:
    spec = mujoco.MjSpec.from_file(model_path("barkour"))
    spec.delete(spec.geom("hfield_floor"))
    spec.worldbody.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 0.05], contype=1, conaffinity=1)
    for actuator in spec.actuators:
        actuator.gaintype = mujoco.mjtGain.mjGAIN_FIXED
        actuator.gainprm[:3] = [1.0, 0.0, 0.0]
        actuator.biastype = mujoco.mjtBias.mjBIAS_NONE
        actuator.biasprm[:3] = [0.0, 0.0, 0.0]
        actuator.ctrlrange = [-18.0, 18.0]
    return spec.compile()


def main() -> None:
    plant = MujocoPlant(barkour_with_torque_motors())  # discrete, MuJoCo's step every 2 ms
    mj = plant.mj_model
    joints = np.asarray(mj.actuator_trnid[:, 0])
    q_index = jnp.asarray(mj.jnt_qposadr[joints])
    v_index = jnp.asarray(mj.nq + mj.jnt_dofadr[joints])
    stand = jnp.asarray(mj.key_qpos[0][mj.jnt_qposadr[joints]])
    tall = stand.at[1::3].set(0.9).at[2::3].set(1.8)  # hips and knees: a taller stance
    kp, kd = 35.0, 0.65

    class Posture(js.LeafSystem):
        """Joint targets: the keyframe's until t = 0.5 s, then a smooth blend to the tall stance by 1.5 s."""

        def __init__(self) -> None:
            super().__init__("posture")
            self.declare_vector_output_port("q_target", plant.num_actuators(), self.calc)

        def calc(self, context):
            s = jnp.clip(context.get_time() - 0.5, 0.0, 1.0)
            s = s * s * (3.0 - 2.0 * s)
            return stand + s * (tall - stand)

    class PD(js.LeafSystem):
        """τ = kp (q* − q) − kd q̇ for the actuated joints."""

        def __init__(self) -> None:
            super().__init__("pd")
            self.declare_vector_input_port("q_target", plant.num_actuators())
            self.declare_vector_input_port("state", plant.num_multibody_states())
            self.declare_vector_output_port("torque", plant.num_actuators(), self.calc)

        def calc(self, context):
            x = self.get_input_port(1).eval(context)
            return kp * (self.get_input_port(0).eval(context) - x[q_index]) - kd * x[v_index]

    builder = js.DiagramBuilder()
    builder.add_system(plant)
    posture = builder.add_system(Posture())
    pd = builder.add_system(PD())
    builder.connect(posture.get_output_port(0), pd.get_input_port("q_target"))
    builder.connect(plant.get_output_port("state"), pd.get_input_port("state"))
    builder.connect(pd.get_output_port(0), plant.get_input_port("actuation"))
    diagram = builder.build("quadruped_pd")

    context = plant.with_keyframe(diagram.create_default_context(), "standing")
    ts = jnp.linspace(0.0, 3.0, 61)
    run = js.simulate(diagram, context, 3.0, save_at=ts, record=plant.get_positions_and_velocities)
    x = np.asarray(run.ys)
    height, upright = x[:, 2], x[:, 3]  # trunk height (m) and the w of its orientation quaternion
    q_final = x[-1, np.asarray(q_index)]
    print(f"trunk height: {height[10]:.3f} m settled on the keyframe's stance, {height[-1]:.3f} m at the end")
    print(f"orientation quaternion w: min {upright.min():.4f} (1 = level)")
    print(f"largest joint error at the end {float(np.max(np.abs(q_final - np.asarray(tall)))):.3f} rad")
    print(f"largest speed at the end {float(np.max(np.abs(x[-1, mj.nq :]))):.4f}")

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.2))
    ax1.plot(ts, height)
    ax1.set_xlabel("time (s)")
    ax1.set_ylabel("trunk height (m)")
    for i, name in [(1, "hip"), (2, "knee")]:
        ax2.plot(ts, x[:, int(q_index[i])], label=f"front-right {name}")
    ax2.set_xlabel("time (s)")
    ax2.set_ylabel("joint angle (rad)")
    ax2.legend(fontsize="small")
    fig.suptitle("Barkour v0 (MJX) standing up tall under a jaxsys PD controller")
    out = pathlib.Path(__file__).parent / "output"
    out.mkdir(exist_ok=True)
    fig.tight_layout()
    fig.savefig(out / "robot_quadruped_pd.png", dpi=100)
    print("wrote examples/output/robot_quadruped_pd.png")


if __name__ == "__main__":
    main()
