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


# ----- an integrator with a state: the integrator protocol's init / step / next_state / refresh -----


class AdamsBashforth2(js.IntegratorBase):
    """The two-step Adams-Bashforth method with variable steps (2nd order, fixed step): its state is
    the derivative at the previous point and the step from there. It starts with a Heun step, and
    restarts with one wherever its history is stale: after an update changed the state or the
    dynamics (``refresh``), or a step cut short at a witness crossing (``next_state``)."""

    name: ClassVar[str] = "adams_bashforth2"
    order: ClassVar[int] = 2
    num_stages: ClassVar[int] = 1

    def attempt_step(self, f, t, x, h, aux):  # (the stateless form: a Heun step)
        k1 = f(t, x)
        return x + 0.5 * h * (k1 + f(t + h, x + h * k1)), jnp.zeros_like(x), jnp.array(True)

    def init(self, f, t, x, aux, events=False):
        return (jnp.zeros_like(x), jnp.ones((), x.dtype), jnp.array(False)), 0

    def step(self, f, t, x, h, aux, state, t_end, dense=False):
        f_prev, h_prev, valid = state
        f0 = f(t, x)

        def adams():
            r = h / h_prev
            return x + h * ((1.0 + 0.5 * r) * f0 - 0.5 * r * f_prev)

        def heun():
            return x + 0.5 * h * (f0 + f(t + h, x + h * f0))

        x_new = jax.lax.cond(valid, adams, heun)
        evals = 1 + (~valid).astype(jnp.int32)
        return js.StepResult(x_new, jnp.zeros_like(x), jnp.array(True), (f0, jnp.asarray(h, x.dtype)), evals)

    def next_state(self, proposal, accepted, cut):
        f0, h = proposal
        return (f0, h, accepted & ~cut)

    def refresh(self, state, changed):
        f_prev, h_prev, valid = state
        return (f_prev, h_prev, valid & ~changed)


def _ab2_reference(x0, h, n, kicks=(), restarts=()):
    """Adams-Bashforth 2 by hand on the oscillator (k = 10), restarting with Heun after each kick
    (step index at whose start v += 1) and at each of ``restarts``."""
    f = lambda x: np.array([x[1], -10.0 * x[0]])  # noqa: E731
    x, f_prev, valid, evals = np.array(x0, float), None, False, 0
    for i in range(n):
        if i in kicks:
            x, valid = x + np.array([0.0, 1.0]), False
        if i in restarts:
            valid = False
        f0 = f(x)
        if valid:
            x = x + h * (1.5 * f0 - 0.5 * f_prev)
            evals += 1
        else:
            x = x + 0.5 * h * (f0 + f(x + h * f0))
            evals += 2
        f_prev, valid = f0, True
    return x, evals


class KickedOscillator(js.LeafSystem):
    """q'' = -10 q, and v += 1 at t = 0.25, 0.5, 0.75, ... (a periodic unrestricted update)."""

    def __init__(self):
        super().__init__()
        self.declare_continuous_state(2)
        self.declare_periodic_unrestricted_update_event(0.25, 0.25, self.kick)

    def do_calc_time_derivatives(self, context):
        q, v = context.get_continuous_state_vector()
        return jnp.stack([v, -10.0 * q])

    def kick(self, context, state):
        x = context.get_continuous_state_vector()
        return state.with_continuous_state(x + jnp.array([0.0, 1.0]))


def test_stateful_integrator_carries_its_history_through_every_loop():
    # the same steps as the hand-written method on every path that steps: the fixed-step scan (with and
    # without saves) and the while loop (the Simulator's advance)
    s = js.examples.SpringMassDamper(damping=0.0, has_input=False)
    ctx = s.create_default_context().with_continuous_state(jnp.array([1.0, 0.0]))
    ab2 = AdamsBashforth2(max_step_size=0.01)
    ref, evals = _ab2_reference([1.0, 0.0], 0.01, 100)
    r = js.simulate(s, ctx, 1.0, ab2)
    np.testing.assert_allclose(r.context.get_continuous_state_vector(), ref, rtol=0, atol=1e-12)
    assert int(r.stats.num_derivative_evaluations) == evals == 101
    # (the history is used: AB2 and Heun differ by far more than the tolerance here)
    assert np.max(np.abs(ref - _ab2_reference([1.0, 0.0], 0.01, 100, kicks=range(100))[0])) > 1e-4
    r2 = js.simulate(s, ctx, 1.0, ab2, save_at=np.array([0.5, 1.0]))
    np.testing.assert_allclose(r2.ys[-1], ref, rtol=0, atol=1e-12)
    sim = js.Simulator(s, ctx, ab2)
    sim.advance_to(1.0)
    np.testing.assert_allclose(sim.get_context().get_continuous_state_vector(), ref, rtol=0, atol=1e-12)
    # second order: halving the step divides the error by ~4
    e1 = np.abs(_ab2_reference([1.0, 0.0], 0.01, 100)[0] - _exact(1.0)).max()
    half = js.simulate(s, ctx, 1.0, AdamsBashforth2(max_step_size=0.005)).context.get_continuous_state_vector()
    e2 = np.abs(np.asarray(half) - _exact(1.0)).max()
    assert 3.0 < e1 / e2 < 5.0


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_stateful_integrator_restarts_after_updates(dtype):
    # updates that change the state refresh the integrator's state: a restart (Heun) after each kick,
    # on the fixed-step scan and the while loop alike; float32 to its resolution
    s = KickedOscillator()
    ctx = s.create_default_context(dtype).with_continuous_state(jnp.array([1.0, 0.0], dtype))
    ab2 = AdamsBashforth2(max_step_size=0.01)
    ref, evals = _ab2_reference([1.0, 0.0], 0.01, 100, kicks=(25, 50, 75))
    tol = 1e-12 if dtype == jnp.float64 else 2e-4  # (float32: 100 steps of rounding on values up to ~3)
    r = js.simulate(s, ctx, 1.0, ab2)  # (the fixed-step scan)
    np.testing.assert_allclose(r.context.get_continuous_state_vector(), ref, rtol=0, atol=tol)
    assert int(r.stats.num_derivative_evaluations) == evals == 104
    sim = js.Simulator(s, ctx, ab2)  # (the while loop)
    sim.advance_to(1.0)
    np.testing.assert_allclose(sim.get_context().get_continuous_state_vector(), ref, rtol=0, atol=tol)
    # without the restarts (a stale history), the answer would be off by far more
    stale = np.array(ref)
    assert np.max(np.abs(_ab2_reference([1.0, 0.0], 0.01, 100)[0] - stale)) > 0.1


def test_stateful_integrator_under_jit_vmap_grad_and_witnesses():
    s = js.examples.SpringMassDamper(damping=0.0, has_input=False)
    ctx = s.create_default_context()
    ab2 = AdamsBashforth2(max_step_size=0.01)

    def final_q(x0):
        return js.simulate(s, ctx.with_continuous_state(x0), 1.0, ab2).context.get_continuous_state_vector()[0]

    # a linear method on a linear system: the gradient is the first row of the step matrix product,
    # which finite differences of the (linear) map give exactly up to rounding
    g = jax.jit(jax.grad(final_q))(jnp.array([1.0, 0.0]))
    e = np.eye(2)
    fd = [(final_q(jnp.asarray(e[i])) - final_q(-jnp.asarray(e[i]))) / 2 for i in range(2)]
    np.testing.assert_allclose(g, fd, rtol=1e-10)
    np.testing.assert_allclose(g, [np.cos(W), np.sin(W) / W], atol=5e-3)
    xs = jax.vmap(final_q)(jnp.array([[1.0, 0.0], [2.0, 0.0]]))
    np.testing.assert_allclose(xs[1], 2.0 * xs[0], rtol=1e-12)
    # a witness cuts a step: the history is stale there, the method restarts, the bounce is found
    ball = js.examples.BouncingBall()
    bctx = ball.create_default_context().with_continuous_state(jnp.array([1.0, 0.0]))
    t_hit = np.sqrt(2.0 / 9.81)
    r = js.simulate(ball, bctx, t_hit + 0.01, ab2, save_at=np.array([t_hit - 0.01, t_hit + 0.01]))
    v_before, v_after = float(r.ys[0][1]), float(r.ys[1][1])
    assert v_before < 0 < v_after
    np.testing.assert_allclose(v_before, -9.81 * (t_hit - 0.01), rtol=1e-9)  # (free fall: AB2 is exact)


def test_stateful_integrator_in_the_ecs_bridge():
    # the bridge carries the method's state from sub-step to sub-step and starts afresh each world step:
    # 10 world steps of 0.1 s, 10 sub-steps each = the hand-written method restarted every 10 steps
    s = js.examples.SpringMassDamper(damping=0.0, has_input=False)
    physics = ecs.DiagramPhysics(s, "state", integrator=AdamsBashforth2(max_step_size=0.01), substeps=10)
    w = ecs.World.empty(2, {"state": jnp.zeros(2)})
    w, e = w.create_entity()
    w = w.create_component(e, "state", jnp.array([1.0, 0.0]))
    w, _, _ = ecs.run(w.end_of_step(), [physics], 10, step_size=0.1)
    ref, _ = _ab2_reference([1.0, 0.0], 0.01, 100, restarts=range(0, 100, 10))
    np.testing.assert_allclose(w.component(e, "state"), ref, rtol=0, atol=1e-12)
