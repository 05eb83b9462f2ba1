"""A user-written integrator works everywhere a built-in one does (issue #35, item 1).

The integrator protocol (docs/integrators.md, "Writing an integrator"): subclass
``js.IntegratorBase``, declare ``order``, ``error_estimate_order`` (0: no estimate, fixed step only)
and ``num_stages``, and write ``attempt_step(f, t, x, h, aux) -> (x_new, error_estimate, ok)``. Two
such integrators of a few lines each, an embedded Heun-Euler 2(1) pair and the symplectic leapfrog
(velocity Verlet), are run here through error-controlled and fixed-step ``simulate``, witnesses,
periodic events, the ``Simulator``, ``jit``/``vmap``/``grad`` and the ECS bridge, each against an
analytic answer or a built-in integrator's.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js
from jaxsys import ecs


class HeunEuler(js.IntegratorBase):
    """Heun's method (2nd order) with the difference from explicit Euler as its error estimate."""

    name: ClassVar[str] = "heun_euler"
    order: ClassVar[int] = 2
    error_estimate_order: ClassVar[int] = 2
    num_stages: ClassVar[int] = 2

    def attempt_step(self, f, t, x, h, aux):
        k1 = f(t, x)
        k2 = f(t + h, x + h * k1)
        return x + 0.5 * h * (k1 + k2), 0.5 * h * (k2 - k1), jnp.array(True)


class Leapfrog(js.IntegratorBase):
    """Velocity Verlet on x = [q, v] (symplectic, 2nd order, fixed step): q' from v through N(q)."""

    name: ClassVar[str] = "leapfrog"
    order: ClassVar[int] = 2
    num_stages: ClassVar[int] = 2

    def attempt_step(self, f, t, x, h, aux):
        nq = aux["num_q"]
        q, v = x[:nq], x[nq:]
        v_half = v + 0.5 * h * f(t, x)[nq:]
        q1 = q + h * aux["v_to_qdot"](t, x, v_half)
        a1 = f(t + h, jnp.concatenate([q1, v_half]))[nq:]
        return jnp.concatenate([q1, v_half + 0.5 * h * a1]), jnp.zeros_like(x), jnp.array(True)


W = np.sqrt(10.0)  # the oscillator's angular frequency (k = 10, m = 1)
INTEGRATORS = {
    "heun-euler error-controlled": HeunEuler(max_step_size=0.1, target_accuracy=1e-6),
    "heun-euler fixed": HeunEuler(max_step_size=0.01, fixed_step_mode=True),
    "leapfrog": Leapfrog(max_step_size=0.01),
}


@pytest.fixture(scope="module")
def oscillator():
    s = js.examples.SpringMassDamper(damping=0.0, has_input=False)
    return s, s.create_default_context().with_continuous_state(jnp.array([1.0, 0.0]))


def _exact(t: float, x0: float = 1.0) -> np.ndarray:
    return x0 * np.array([np.cos(W * t), -W * np.sin(W * t)])


def test_declared_capabilities():
    assert HeunEuler(target_accuracy=1e-6).supports_error_estimation()
    assert not HeunEuler(target_accuracy=1e-6).get_fixed_step_mode()
    assert not Leapfrog().supports_error_estimation() and Leapfrog().get_fixed_step_mode()


@pytest.mark.parametrize("name", list(INTEGRATORS))
def test_simulate_jit_vmap_grad_and_simulator(oscillator, name):
    s, ctx = oscillator
    integ = INTEGRATORS[name]
    tol = 5e-3 if name != "heun-euler error-controlled" else 2e-4  # (2nd-order methods, h = 0.01 / accuracy 1e-6)
    r = js.simulate(s, ctx, 1.0, integ)
    np.testing.assert_allclose(r.context.get_continuous_state_vector(), _exact(1.0), atol=tol)

    def final_q(x0):
        return js.simulate(s, ctx.with_continuous_state(x0), 1.0, integ).context.get_continuous_state_vector()[0]

    # grad against the exact sensitivity d q(1) / d q0 = cos(W), d q(1) / d v0 = sin(W) / W
    g = jax.jit(jax.grad(final_q))(jnp.array([1.0, 0.0]))
    np.testing.assert_allclose(g, [np.cos(W), np.sin(W) / W], atol=tol)
    # vmap: a linear system, so the member started at 2 x0 ends at twice the first's state
    xs = jax.vmap(final_q)(jnp.array([[1.0, 0.0], [2.0, 0.0]]))
    np.testing.assert_allclose(xs[1], 2.0 * xs[0], rtol=1e-4)
    # the Simulator in two advances equals one simulate for fixed steps (to the error tolerance otherwise)
    sim = js.Simulator(s, ctx, integ)
    sim.advance_to(0.5)
    sim.advance_to(1.0)
    np.testing.assert_allclose(sim.get_context().get_continuous_state_vector(), _exact(1.0), atol=tol)


def test_leapfrog_is_symplectic_energy_stays_bounded(oscillator):
    # (what a user writes a leapfrog for: energy error bounded over 100 periods, no drift)
    s, ctx = oscillator
    ts = np.linspace(0.0, 200.0, 401)
    r = js.simulate(s, ctx, 200.0, Leapfrog(max_step_size=0.05), save_at=ts)
    q, v = np.asarray(r.ys).T
    energy = 0.5 * v**2 + 5.0 * q**2
    assert np.max(np.abs(energy - 5.0)) < 0.05 * 5.0
    assert abs(np.mean(energy[-50:]) - np.mean(energy[:50])) < 1e-3 * 5.0


@pytest.mark.parametrize("name", list(INTEGRATORS))
def test_witness_isolates_the_crossing_time(name):
    # a ball dropped from 1 m (g = 9.81): first impact at sqrt(2 / g)
    ball = js.examples.BouncingBall()
    ctx = ball.create_default_context().with_continuous_state(jnp.array([1.0, 0.0]))
    t_hit = np.sqrt(2.0 / 9.81)
    ts = np.array([t_hit - 0.01, t_hit + 0.01])
    r = js.simulate(ball, ctx, t_hit + 0.01, INTEGRATORS[name], save_at=ts)
    v_before, v_after = float(r.ys[0][1]), float(r.ys[1][1])
    assert v_before < 0 < v_after  # the bounce happened between the two save times
    # before it, free fall: v = -g t
    np.testing.assert_allclose(v_before, -9.81 * (t_hit - 0.01), rtol=1e-3)


@pytest.mark.parametrize("name", list(INTEGRATORS))
def test_periodic_events(name):
    # a zero-order hold of the oscillator's position every 0.1 s: the held value at t = 0.55 is q(0.5)
    s = js.examples.SpringMassDamper(damping=0.0, has_input=False)
    hold = js.ZeroOrderHold(0.1, 2)
    b = js.DiagramBuilder()
    b.add_system(s)
    b.add_system(hold)
    b.connect(s.get_output_port(0), hold.get_input_port(0))
    d = b.build()
    ctx = d.create_default_context().with_continuous_state(jnp.array([1.0, 0.0]))  # (the plant's)
    r = js.simulate(
        d,
        ctx,
        0.55,
        INTEGRATORS[name],
        save_at=np.array([0.55]),
        record=lambda c: hold.get_output_port(0).eval(d.get_subsystem_context(c, hold)),
    )
    np.testing.assert_allclose(np.asarray(r.ys[0]), _exact(0.5), atol=5e-3)


@pytest.mark.parametrize("name", list(INTEGRATORS))
def test_ecs_bridge(name):
    s = js.examples.SpringMassDamper(damping=0.0, has_input=False)
    integ = INTEGRATORS[name]
    physics = ecs.DiagramPhysics(s, "state", integrator=integ, substeps=1)
    w = ecs.World.empty(2, {"state": jnp.zeros(2)})
    w, e = w.create_entity()
    w = w.create_component(e, "state", jnp.array([1.0, 0.0]))
    w, _, _ = ecs.run(w.end_of_step(), [physics], 100, step_size=0.01)
    # the bridge takes fixed sub-steps of the world step: the fixed-step run of the same steps
    fixed = integ.with_options(max_step_size=0.01, fixed_step_mode=True)
    ref = js.simulate(s, s.create_default_context().with_continuous_state(jnp.array([1.0, 0.0])), 1.0, fixed)
    np.testing.assert_allclose(w.component(e, "state"), ref.context.get_continuous_state_vector(), atol=1e-10)
    np.testing.assert_allclose(w.component(e, "state"), _exact(1.0), atol=5e-3)
