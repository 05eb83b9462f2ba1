"""Example plants (simulated, jitted, differentiated; energy conservation) and plotting."""

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js
from jaxsys.examples import Acrobot, BouncingBall, CartPole, DoubleIntegrator, Pendulum, SpringMassDamper, VanDerPol


def zero_inputs(system, ctx):
    for i in range(system.num_input_ports()):
        ctx = system.get_input_port(i).fix_value(ctx, jnp.zeros(system.get_input_port(i).size()))
    return ctx


PLANTS = [
    (Pendulum, [1.0, 0.0]),
    (SpringMassDamper, [1.0, 0.0]),
    (DoubleIntegrator, [0.0, 1.0]),
    (CartPole, [0.0, 0.5, 0.0, 0.0]),
    (Acrobot, [0.3, -0.2, 0.0, 0.0]),
    (VanDerPol, [2.0, 0.0]),
    (BouncingBall, [10.0, 0.0]),
]


@pytest.mark.parametrize("cls,x0", PLANTS, ids=[c.__name__ for c, _ in PLANTS])
def test_every_plant_simulates_jits_and_differentiates(cls, x0):
    plant = cls()
    ctx = zero_inputs(plant, plant.create_default_context()).with_continuous_state(jnp.array(x0))
    integ = js.RungeKutta4Integrator(max_step_size=1e-2)

    @jax.jit
    def final(x):
        return js.simulate(plant, ctx.with_continuous_state(x), 1.0, integ).context.get_continuous_state_vector()

    xf = final(jnp.array(x0))
    assert np.all(np.isfinite(xf))
    J = jax.jacfwd(final)(jnp.array(x0))
    e = jnp.zeros(len(x0)).at[0].set(1e-6)
    fd = (final(jnp.array(x0) + e) - final(jnp.array(x0) - e)) / 2e-6
    np.testing.assert_allclose(J[:, 0], fd, rtol=1e-5, atol=1e-7)
    assert plant.get_output_port("state").size() == len(x0)
    assert cls.__doc__ and len(cls.__doc__) > 80  # equations documented


@pytest.mark.parametrize(
    "cls,x0", [(Pendulum, [2.5, 0.0]), (CartPole, [0.0, 2.0, 0.3, -1.0]), (Acrobot, [1.0, 0.5, 0.0, 0.0])]
)
def test_energy_conserved_without_damping(cls, x0):
    if cls is Pendulum:
        plant = Pendulum(damping=0.0)
    elif cls is Acrobot:
        plant = Acrobot(b1=0.0, b2=0.0)
    else:
        plant = cls()
    ctx = zero_inputs(plant, plant.create_default_context()).with_continuous_state(jnp.array(x0))

    def energy(c):
        return plant.calc_kinetic_energy(c) + plant.calc_potential_energy(c)

    r = js.simulate(plant, ctx, 5.0, js.RungeKutta5Integrator(target_accuracy=1e-11))
    e0, e1 = float(energy(ctx)), float(energy(r.context))
    assert abs(e1 - e0) < 1e-8 * max(1.0, abs(e0)), (e0, e1)
    # power consistency: d(PE)/dt = -P_conservative, d(KE + PE)/dt = P_nonconservative (= 0 here)
    xdot = plant.calc_time_derivatives(ctx).x
    _, de = jax.jvp(lambda x: energy(ctx.with_continuous_state(x)), (ctx.get_continuous_state_vector(),), (xdot,))
    np.testing.assert_allclose(de, plant.calc_nonconservative_power(ctx), atol=1e-10)


def test_cart_pole_and_acrobot_forces_do_work():
    for plant in (CartPole(), Acrobot()):
        ctx = plant.create_default_context().with_continuous_state(jnp.array([0.1, 0.4, 0.3, -0.2]))
        ctx = plant.get_input_port(0).fix_value(ctx, [1.7])
        xdot = plant.calc_time_derivatives(ctx).x

        def energy(x, plant=plant, ctx=ctx):
            c = ctx.with_continuous_state(x)
            return plant.calc_kinetic_energy(c) + plant.calc_potential_energy(c)

        _, de = jax.jvp(energy, (ctx.get_continuous_state_vector(),), (xdot,))
        np.testing.assert_allclose(de, plant.calc_nonconservative_power(ctx), rtol=1e-10)


def test_plot_result_and_log_write_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    b = js.DiagramBuilder()
    plant = b.add_system(Pendulum())
    src = b.add_system(js.ConstantVectorSource([0.5]))
    b.connect(src.get_output_port(), plant.get_input_port())
    logger = js.log_vector_output(plant.get_output_port(), b, publish_period=0.1)
    b.export_output(plant.get_output_port(), "state")
    d = b.build()
    r = js.simulate(d, d.create_default_context(), 2.0, save_at=jnp.linspace(0, 2, 21), record=js.record_outputs(d))
    assert set(r.ys) == {"state"}
    fig = js.plot_result(r, labels={"state": ["theta", "theta_dot"]}, title="pendulum", path=tmp_path / "r.png")
    assert [line.get_label() for line in fig.axes[0].lines] == ["theta", "theta_dot"]
    js.plot_log(logger.find_log(r), path=tmp_path / "log.png")
    for name in ("r.png", "log.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
        import matplotlib.image

        img = matplotlib.image.imread(tmp_path / name)
        assert img.ndim == 3 and img.shape[0] > 100 and img.std() > 0.01  # not a blank image


def test_plot_system(tmp_path):
    b = js.DiagramBuilder()
    p = b.add_system(Pendulum())
    g = b.add_system(js.Gain(-1.0, 2))
    b.connect(p.get_output_port(), g.get_input_port())
    d = b.build()
    if shutil.which("dot") is None:
        with pytest.raises(js.JaxsysError, match="plot_system needs Graphviz"):
            js.plot_system(d)
        return
    svg = js.plot_system(d, tmp_path / "d.svg")
    assert b"<svg" in svg and b"pendulum" in svg
    png = js.plot_system(d, fmt="png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
