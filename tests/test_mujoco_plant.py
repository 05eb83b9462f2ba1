"""``MujocoPlant``: MuJoCo models as plants, checked against known equations, conservation laws, raw
MJX, finite differences and single runs.

- Continuous mode against hand-written equations: the MJCF acrobot with Drake's AcrobotPlant parameters
  gives the derivatives of ``jaxsys.examples.Acrobot`` to 1e-9 (float64); the MJCF cart-pole those of
  ``jaxsys.examples.CartPole`` to 2e-6 (its pole has 1e-9 kg m² of inertia where the example has none).
- A torque-free tumbling body (free joint, near its unstable intermediate axis): |quaternion| = 1 and
  the world-frame angular momentum to 1e-6 over 5 s (RK5, accuracy 1e-10).
- Discrete mode equals a raw ``lax.scan`` of ``mjx.step`` on MJX's humanoid (100 steps, float64, 1e-9).
- ``jax.grad`` with respect to a body mass equals central finite differences (float64 continuous,
  float32 discrete); with ``pytest -m slow`` also forward mode, a loss on a saved trajectory and
  ``vmap`` over masses (equal to single runs).
- Bad input: named errors.
"""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest


mujoco = pytest.importorskip("mujoco")
pytest.importorskip("mujoco.mjx")

import jaxsys as js  # noqa: E402
from jaxsys.examples import Acrobot, CartPole  # noqa: E402
from jaxsys.multibody import MujocoModelError, MujocoPlant, model_path  # noqa: E402


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def test_import_jaxsys_does_not_import_mujoco():
    code = "import sys, jaxsys; assert 'mujoco' not in sys.modules; jaxsys.MujocoPlant; assert 'mujoco' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def _derivatives(plant, states, inputs):
    ctx = plant.create_default_context()

    def one(x, u):
        c = plant.get_input_port(0).fix_value(ctx.with_continuous_state(x), u)
        xdot = plant.calc_time_derivatives(c)
        return getattr(xdot, "x", xdot)

    return jax.jit(jax.vmap(one))(states, inputs)


@pytest.mark.parametrize("which", ["acrobot", "cart_pole"])
def test_continuous_mode_matches_known_equations(which):
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.normal(size=(16, 4)) * [2.0, 2.0, 3.0, 3.0])
    u = jnp.asarray(rng.normal(size=(16, 1)) * 2.0)
    plant = MujocoPlant(model_path(which), time_step=0.0)
    ref = Acrobot() if which == "acrobot" else CartPole()
    assert plant.num_positions() == 2 and plant.num_velocities() == 2 and plant.num_actuators() == 1
    got = _derivatives(plant, x, u)
    want = _derivatives(ref, x, u)
    tol = 1e-9 if which == "acrobot" else 2e-6
    err = np.abs(np.asarray(got) - np.asarray(want)) / (1 + np.abs(np.asarray(want)))
    assert float(err.max()) < tol, float(err.max())


def test_continuous_mode_in_float32():
    """float32 contexts (JAX's default) compute in float32 with MJX's float32 model: derivatives to
    float32 precision of the float64 equations."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(8, 4)) * [2.0, 2.0, 3.0, 3.0]
    u = rng.normal(size=(8, 1)) * 2.0
    want = _derivatives(Acrobot(), jnp.asarray(x), jnp.asarray(u))
    with jax.enable_x64(False):
        plant = MujocoPlant(model_path("acrobot"), time_step=0.0)
        assert plant.create_default_context().get_time().dtype == jnp.float32
        got = _derivatives(plant, jnp.asarray(x, jnp.float32), jnp.asarray(u, jnp.float32))
        assert got.dtype == jnp.float32
    err = np.abs(np.asarray(got, np.float64) - np.asarray(want)) / (1 + np.abs(np.asarray(want)))
    assert float(err.max()) < 2e-5, float(err.max())


def test_queries_and_names():
    plant = MujocoPlant(model_path("planar_arm"), time_step=0.0)
    assert plant.joint_names() == ("shoulder", "elbow", "wrist")
    assert plant.actuator_names() == ("shoulder", "elbow", "wrist")
    assert plant.body_names() == ("world", "upper", "fore", "hand")
    assert plant.sensor_slice("tip_position") == slice(3, 6)
    assert plant.get_output_port("state").size() == 6
    ctx = plant.create_default_context()
    np.testing.assert_allclose(plant.get_model_parameter(ctx, "body_mass"), [0.0, 1.2, 0.8, 0.5])
    assert plant.get_model_parameter(ctx, "body_inertia").shape == (4, 3)
    np.testing.assert_allclose(plant.get_model_parameter(ctx, "dof_damping"), [0.5, 0.3, 0.2])
    # sensors at a configuration: joint angles and the tip position from forward kinematics
    q = jnp.array([0.3, -0.5, 0.4])
    s = plant.get_output_port("sensors").eval(plant.with_positions(ctx, q))
    np.testing.assert_allclose(s[:3], q, atol=1e-12)
    a1, a2, a3 = 0.3, -0.2, 0.2  # absolute link angles about +y, from straight down
    tip_x = -(0.5 * np.sin(a1) + 0.4 * np.sin(a2) + 0.3 * np.sin(a3))
    tip_z = -(0.5 * np.cos(a1) + 0.4 * np.cos(a2) + 0.3 * np.cos(a3))
    np.testing.assert_allclose(s[3:], [tip_x, 0.0, tip_z], atol=1e-12)
    poses = plant.get_output_port("body_poses").eval(plant.with_positions(ctx, q))
    np.testing.assert_allclose(poses.position[2], [-0.5 * np.sin(a1), 0.0, -0.5 * np.cos(a1)], atol=1e-12)


def test_tumbling_rigid_body_conserves_angular_momentum_and_unit_quaternion():
    plant = MujocoPlant(model_path("tumbling_body"), time_step=0.0)
    assert (plant.num_positions(), plant.num_velocities()) == (7, 6)
    ctx = plant.create_default_context()
    ctx = plant.with_velocities(ctx, jnp.array([0.3, 0.0, 0.0, 0.1, 2.0, 0.1]))  # ω near the middle axis
    ts = jnp.linspace(0.0, 5.0, 26)
    r = js.simulate(plant, ctx, 5.0, js.RungeKutta5Integrator(target_accuracy=1e-10), save_at=ts)
    x = np.asarray(r.ys)
    quat, omega_body = x[:, 3:7], x[:, 10:13]
    assert np.max(np.abs(np.linalg.norm(quat, axis=1) - 1.0)) < 1e-6

    def rotation(qq):
        w, a, b, c = qq / np.linalg.norm(qq)
        return np.array(
            [
                [1 - 2 * (b * b + c * c), 2 * (a * b - w * c), 2 * (a * c + w * b)],
                [2 * (a * b + w * c), 1 - 2 * (a * a + c * c), 2 * (b * c - w * a)],
                [2 * (a * c - w * b), 2 * (b * c + w * a), 1 - 2 * (a * a + b * b)],
            ]
        )

    inertia = np.diag([1.0, 2.0, 3.0])
    momentum = np.stack([rotation(q) @ inertia @ w for q, w in zip(quat, omega_body)])
    assert np.max(np.abs(momentum - momentum[0])) < 1e-6
    assert np.max(np.abs(omega_body[-1] - omega_body[0])) > 1.0  # it did tumble
    np.testing.assert_allclose(x[-1, :3], [1.5, 0.0, 0.0], atol=1e-9)  # the centre of mass drifts freely


def test_velocity_maps_are_inverse_for_quaternion_joints():
    plant = MujocoPlant(model_path("tumbling_body"), time_step=0.0)
    rng = np.random.default_rng(0)
    q = rng.normal(size=7)
    q[3:] /= np.linalg.norm(q[3:])
    ctx = plant.with_positions(plant.create_default_context(), jnp.asarray(q))
    v = jnp.asarray(rng.normal(size=6))
    qdot = plant.map_velocity_to_qdot(ctx, v)
    np.testing.assert_allclose(plant.map_qdot_to_velocity(ctx, qdot), v, atol=1e-12)
    assert abs(float(jnp.dot(qdot[3:], q[3:]))) < 1e-12  # the rate keeps |q| = 1


def test_discrete_humanoid_equals_raw_mjx_step_loop():
    from mujoco import mjx

    plant = MujocoPlant(model_path("humanoid"))
    assert plant.is_discrete() and plant.time_step == pytest.approx(plant.mj_model.opt.timestep)
    u = 0.4 * np.random.default_rng(1).normal(size=plant.num_actuators())
    ctx = plant.get_input_port("actuation").fix_value(plant.create_default_context(), u)
    n = 100
    r = js.simulate(plant, ctx, n * plant.time_step)
    mx = mjx.put_model(plant.mj_model)
    d = mjx.make_data(mx).replace(ctrl=jnp.asarray(u))
    d, _ = jax.jit(lambda d: jax.lax.scan(lambda d, _: (mjx.step(mx, d), None), d, None, length=n))(d)
    np.testing.assert_allclose(plant.get_positions(r.context), d.qpos, rtol=0, atol=1e-9)
    np.testing.assert_allclose(plant.get_velocities(r.context), d.qvel, rtol=0, atol=1e-9)
    warm = r.context.get_discrete_state(3)
    np.testing.assert_allclose(
        warm, d.qacc_warmstart, rtol=0, atol=1e-8 * (1 + float(np.max(np.abs(d.qacc_warmstart))))
    )
    assert float(r.context.get_time()) == pytest.approx(float(d.time), abs=1e-12)
    assert float(np.max(np.abs(d.qvel))) > 0.1  # it moved


def _final_elbow(plant, ctx, integrator, t_final):
    def f(mass):
        m = plant.get_model_parameter(ctx, "body_mass").at[2].set(mass)
        c = plant.with_model_parameter(ctx, "body_mass", m)
        return plant.get_positions(js.simulate(plant, c, t_final, integrator).context)[1]

    return f


def _acrobot_mass_problem(continuous):
    dtype = jnp.float64 if continuous else jnp.float32
    plant = MujocoPlant(model_path("acrobot"), time_step=0.0 if continuous else 0.005)
    ctx = plant.create_default_context(dtype) if continuous else plant.create_default_context()
    assert ctx.get_time().dtype == dtype
    ctx = plant.with_positions(ctx, jnp.array([0.5, -0.3], dtype))
    ctx = plant.get_input_port("actuation").fix_value(ctx, jnp.array([0.4], dtype))
    integ = js.RungeKutta4Integrator(max_step_size=0.01, fixed_step_mode=True) if continuous else None
    return plant, ctx, integ, dtype


@pytest.mark.parametrize("mode", ["continuous_float64", "discrete_float32"])
def test_gradient_wrt_body_mass_matches_finite_differences(mode):
    continuous = mode.startswith("continuous")
    with jax.enable_x64(continuous):
        plant, ctx, integ, dtype = _acrobot_mass_problem(continuous)
        f = _final_elbow(plant, ctx, integ, 0.5)
        grad = jax.jit(jax.grad(f)).trace(jnp.asarray(1.0, dtype))  # (one trace: its program and its value)
        g = float(grad.lower().compile()(jnp.asarray(1.0, dtype)))
        if continuous:  # (reverse mode by the step's Jacobians batched over the run: jaxsys.analysis.linearized)
            assert "jaxsys_loop_adjoint" in str(grad.jaxpr)
        else:  # (the event loop, differentiated in three masses: by its Jacobian, jaxsys.analysis.adjoint)
            assert "jaxsys_loop_adjoint" not in str(grad.jaxpr)
        h = 1e-4 if continuous else 2e-2
        fd = float((f(jnp.asarray(1.0 + h, dtype)) - f(jnp.asarray(1.0 - h, dtype))) / (2 * h))
        tol = 1e-7 if continuous else 2e-3
        assert abs(g - fd) <= tol * max(1.0, abs(fd)), (g, fd)
        assert abs(g) > 1e-2


@pytest.mark.slow  # (three more derivative programs of MJX in float64, ~16 s; CI runs it: pytest -m slow)
def test_gradient_wrt_body_mass_forward_mode_saved_rows_and_vmap():
    """The continuous acrobot of the test above: forward mode (a scan of JVPs at the stored states)
    equals reverse mode; a loss on a saved trajectory (rows every 5 steps) goes by the same sweep and
    matches finite differences; ``vmap`` over masses equals single runs."""
    with jax.enable_x64(True):
        plant, ctx, integ, dtype = _acrobot_mass_problem(True)
        f = _final_elbow(plant, ctx, integ, 0.5)
        one, h = jnp.asarray(1.0, dtype), 1e-4
        g = float(jax.grad(f)(one))
        np.testing.assert_allclose(float(jax.jacfwd(f)(one)), g, rtol=1e-10)
        ts = jnp.linspace(0.05, 0.5, 10)

        def loss(mass):
            m = plant.get_model_parameter(ctx, "body_mass").at[2].set(mass)
            c = plant.with_model_parameter(ctx, "body_mass", m)
            return jnp.sum(js.simulate(plant, c, 0.5, integ, save_at=ts, record=plant.get_positions).ys ** 2)

        grad_loss = jax.jit(jax.grad(loss)).trace(one)
        assert "jaxsys_loop_adjoint" in str(grad_loss.jaxpr)
        g_loss = float(grad_loss.lower().compile()(one))
        fd_loss = float((loss(one + h) - loss(one - h)) / (2 * h))
        assert abs(g_loss - fd_loss) <= 1e-7 * max(1.0, abs(fd_loss)), (g_loss, fd_loss)
        masses = jnp.array([0.7, 1.0, 1.4])
        batched = jax.vmap(f)(masses)
        singles = jnp.stack([f(m) for m in masses])
        np.testing.assert_allclose(batched, singles, rtol=0, atol=1e-12)


def test_pd_controller_diagram_discrete_and_optional_inputs():
    """A Diagram: a PD controller holds the planar arm at a target against gravity (discrete plant);
    the applied generalized force port adds to the actuation (a torque on the input equals the same
    torque as an applied force)."""
    plant = MujocoPlant(model_path("planar_arm"), time_step=0.002)
    target = jnp.array([0.6, -0.4, 0.3])
    # per-joint gains: the wrist is light, and the damping term is explicit in MuJoCo's Euler step
    # (stable while kd h / I_eff < 2)
    kp, kd = jnp.array([60.0, 30.0, 5.0]), jnp.array([8.0, 3.0, 0.5])

    class PD(js.LeafSystem):
        def __init__(self):
            super().__init__("pd")
            self.declare_vector_input_port("x", 6)
            self.declare_vector_output_port("u", 3, self.calc)

        def calc(self, c):
            x = self.get_input_port(0).eval(c)
            return kp * (target - x[:3]) - kd * x[3:]

    b = js.DiagramBuilder()
    b.add_system(plant)
    pd = b.add_system(PD())
    b.connect(plant.get_output_port("state"), pd.get_input_port("x"))
    b.connect(pd.get_output_port("u"), plant.get_input_port("actuation"))
    diagram = b.build()
    r = js.simulate(diagram, diagram.create_default_context(), 6.0)
    q_final = plant.get_positions(r.context)
    # at rest, PD's steady state: kp (target - q) = gravity torque at q
    assert float(jnp.max(jnp.abs(plant.get_velocities(r.context)))) < 1e-3
    ctx = plant.with_positions(plant.create_default_context(), q_final)
    zero_acc_torque = plant.get_output_port("generalized_acceleration").eval(
        plant.get_input_port("actuation").fix_value(ctx, kp * (target - q_final))
    )
    np.testing.assert_allclose(zero_acc_torque, 0.0, atol=1e-4)
    # actuation and applied generalized force add up (gear 1, one motor per joint)
    tau = jnp.array([1.0, -2.0, 0.5])
    a1 = plant.get_output_port("generalized_acceleration").eval(plant.get_input_port(0).fix_value(ctx, tau))
    a2 = plant.get_output_port("generalized_acceleration").eval(plant.get_input_port(1).fix_value(ctx, tau))
    np.testing.assert_allclose(a1, a2, atol=1e-10)


def test_contact_results_box_resting_on_plane():
    plant = MujocoPlant(model_path("box_on_plane"))
    ctx = plant.with_positions(plant.create_default_context(), jnp.array([0.0, 0.0, 0.1, 1.0, 0.0, 0.0, 0.0]))
    r = js.simulate(plant, ctx, 1.0)
    res = plant.get_output_port("contact_results").eval(r.context)
    active = np.asarray(res.active)
    assert active.sum() >= 3  # a face of the box on the plane
    # at rest the contact forces carry the weight: sum of normal forces = m g (force on the box: geom 2)
    weight = 1.0 * 9.81
    total = np.asarray(res.force)[active].sum(axis=0)
    np.testing.assert_allclose(abs(total[2]), weight, rtol=2e-2)
    assert float(np.max(np.abs(plant.get_velocities(r.context)))) < 1e-2


def test_bad_inputs_are_named_errors(tmp_path):
    with pytest.raises(MujocoModelError, match="could not parse"):
        MujocoPlant("<mujoco><worldbody><body><joint type='hinge'/></body></mujoco>", name="broken")
    with pytest.raises(MujocoModelError, match="no MJCF file"):
        MujocoPlant(str(tmp_path / "missing.xml"))
    unsupported = (
        "<mujoco><option integrator='implicit'/><worldbody><body><joint/><geom size='.1'/></body></worldbody></mujoco>"
    )
    with pytest.raises(MujocoModelError, match="MJX does not support"):
        MujocoPlant(unsupported, name="implicit_model")
    plant = MujocoPlant(model_path("acrobot"), time_step=0.0, name="arm")
    ctx = plant.create_default_context()
    with pytest.raises(js.PortError, match="actuation"):
        plant.get_input_port("actuation").fix_value(ctx, jnp.zeros(3))
    with pytest.raises(js.StateError, match="not one of its model parameters"):
        plant.get_model_parameter(ctx, "body_masss")
    with pytest.raises(js.StateError, match=r"expected shape \(3,\)"):
        plant.with_model_parameter(ctx, "body_mass", jnp.ones(2))
    with pytest.raises(js.DeclarationError, match="not a float field"):
        MujocoPlant(model_path("acrobot"), parameters=["body_mass", "nonsense"])
    with pytest.raises(js.DeclarationError, match="time_step"):
        MujocoPlant(model_path("acrobot"), time_step=-1.0)
    with pytest.raises(js.StateError, match=r"q must have shape \(2,\)"):
        plant.with_positions(ctx, jnp.zeros(3))


def test_rendering_frames_and_gif(tmp_path):
    """Frames of two poses differ where the arm moved; a GIF of them is written. Skipped only where no
    OpenGL works (the error says what to install)."""
    from jaxsys.multibody.rendering import RenderingUnavailable, render_frames, save_animation

    plant = MujocoPlant(model_path("planar_arm"), time_step=0.0)
    try:
        frames = render_frames(plant, np.array([[0.0, 0.0, 0.0], [1.2, 0.0, 0.0]]), width=96, height=72)
    except RenderingUnavailable as e:
        assert "libosmesa6" in str(e) and "MUJOCO_GL" in str(e)
        pytest.skip(f"no OpenGL on this machine: {e}")
    assert frames.shape == (2, 72, 96, 3) and frames.dtype == np.uint8
    assert frames[0].std() > 1.0  # not a blank image
    assert np.mean(np.any(frames[0] != frames[1], axis=-1)) > 0.005  # the arm moved in the picture
    gif = save_animation(frames, tmp_path / "arm.gif", fps=10)
    assert gif.read_bytes()[:6] in (b"GIF89a", b"GIF87a")
    with pytest.raises(js.JaxsysError, match=r"positions must have shape"):
        render_frames(plant, np.zeros((2, 2)))


def test_an_unconnected_input_is_zero_but_an_upstream_error_is_raised():
    """Drake's optional inputs: an input port neither connected nor fixed reads as zero; a connected one
    whose source cannot be evaluated raises (it was read as zero actuation before)."""
    plant = MujocoPlant(model_path("acrobot"), time_step=0.0)
    b = js.DiagramBuilder()
    b.add_system(plant)
    relay = b.add_system(js.PassThrough(1))  # its own input left unconnected
    b.connect(relay.get_output_port(0), plant.get_input_port("actuation"))
    diagram = b.build()
    with pytest.raises(js.InputPortNotConnectedError, match=r"\(u\) of System .*PassThrough"):
        js.simulate(diagram, diagram.create_default_context(), 0.1)
    alone = plant.with_positions(plant.create_default_context(), jnp.array([0.3, 0.0]))
    a0 = plant.get_output_port("generalized_acceleration").eval(alone)
    a1 = plant.get_output_port("generalized_acceleration").eval(plant.get_input_port(0).fix_value(alone, [0.0]))
    np.testing.assert_allclose(a0, a1, rtol=0, atol=1e-12)
    assert float(jnp.abs(a0).max()) > 0.1  # gravity acts


def test_large_cpu_batches_of_mujoco_plants_warn_about_xlas_scheduler(monkeypatch):
    """XLA's CPU runtime hangs on MJX batches from ~4,096 members with its concurrency-optimized
    scheduler on (benchmarks/RESULTS.md, S10-batch-10000): batch_simulate says so before running, and
    only then (small batches, the flag set, systems without a MuJoCo plant: no warning)."""
    import warnings

    from jaxsys.analysis.batch import _CPU_SCHEDULER_FLAG, _warn_cpu_scheduler
    from jaxsys.examples import Pendulum

    plant = MujocoPlant(model_path("box_on_plane"))
    monkeypatch.setenv("XLA_FLAGS", "")
    with pytest.warns(RuntimeWarning, match="xla_cpu_enable_concurrency_optimized_scheduler=false"):
        _warn_cpu_scheduler(plant, 4096)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_cpu_scheduler(plant, 2048)
        _warn_cpu_scheduler(Pendulum(), 100_000)
        monkeypatch.setenv("XLA_FLAGS", _CPU_SCHEDULER_FLAG)
        _warn_cpu_scheduler(plant, 10_000)
