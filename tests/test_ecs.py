"""The entity-component world: phases, UpdateInfo (the seed's semantics), entity lifetimes,
required components, read-only PostUpdate, vmap/grad, and the Diagram bridge."""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from models import FIXED_STEP_INTEGRATORS

import jaxsys as js
from jaxsys import ecs
from jaxsys.examples import Pendulum


_CALLS: list = []


def _note(name):
    def cb(t):
        _CALLS.append((name, int(t)))

    return cb


class Tracer(ecs.EcsSystem):
    """Records (phase:name, iteration) with ordered host callbacks."""

    name: str = eqx.field(static=True)
    prio: int = eqx.field(static=True)

    def __init__(self, name, prio):
        self.name, self.prio = name, prio

    @property
    def priority(self):  # type: ignore[override]
        return self.prio

    def pre_update(self, info, world):
        jax.debug.callback(_note(f"pre:{self.name}"), info.iterations, ordered=True)
        return world

    def update(self, info, world):
        jax.debug.callback(_note(f"update:{self.name}"), info.iterations, ordered=True)
        return world

    def post_update(self, info, view):
        jax.debug.callback(_note(f"post:{self.name}"), info.iterations, ordered=True)
        return jnp.stack(
            [info.sim_sec * 1_000_000_000 + info.sim_nsec, info.dt_ns, info.iterations, info.paused.astype(jnp.int32)]
        )


def empty_world(capacity=8):
    return ecs.World.empty(capacity, {"pos": jnp.zeros(2), "vel": jnp.zeros(2), "tag": jnp.zeros(())})


def test_phase_order_follows_priorities_then_insertion():
    _CALLS.clear()
    systems = [
        Tracer("default", ecs.DEFAULT_PRIORITY),
        Tracer("physics", ecs.PHYSICS_PRIORITY),
        Tracer("commands", ecs.USER_COMMANDS_PRIORITY),
        Tracer("default2", ecs.DEFAULT_PRIORITY),
    ]
    ecs.run(empty_world(), systems, 1, step_size=0.01)
    jax.effects_barrier()
    names = [c[0] for c in _CALLS]
    assert names[:8] == [
        "pre:commands",
        "pre:physics",
        "pre:default",
        "pre:default2",
        "update:commands",
        "update:physics",
        "update:default",
        "update:default2",
    ]
    assert sorted(names[8:]) == sorted(f"post:{s.name}" for s in systems)


@pytest.mark.parametrize("start_paused", [False, True])
def test_update_info_on_paused_and_unpaused_starts(start_paused):
    dt_ns = 10_000_000
    _, info, (out,) = ecs.run(empty_world(), [Tracer("t", 0)], 3, step_size=0.01, paused=start_paused)
    sim, dt, it, paused = np.asarray(out).T
    if start_paused:  # the seed: sim_time is initially 0 when started paused; systems still run
        assert list(sim) == [0, 0, 0] and list(dt) == [0, 0, 0] and list(it) == [0, 0, 0] and all(paused)
    else:  # ... and initially dt when started un-paused
        assert list(sim) == [dt_ns, 2 * dt_ns, 3 * dt_ns] and list(dt) == [dt_ns] * 3 and list(it) == [1, 2, 3]
    assert float(info.sim_time) == pytest.approx(0.0 if start_paused else 0.03, abs=0)


def test_pausing_mid_run_and_exact_integer_time():
    paused = jnp.array([False, False, True, True, False])
    _, _, (out,) = ecs.run(empty_world(), [Tracer("t", 0)], 5, step_size=0.001, paused=paused)
    sim, dt, it, _ = np.asarray(out).T
    assert list(sim) == [1_000_000, 2_000_000, 2_000_000, 2_000_000, 3_000_000]
    assert list(dt) == [1_000_000, 1_000_000, 0, 0, 1_000_000]
    assert list(it) == [1, 2, 2, 2, 3]
    # a million steps of 1 ms is exactly 1000 s in integer time (no float drift)
    _, info, _ = ecs.run(empty_world(), [], 1_000_000, step_size=0.001)
    assert (int(info.sim_sec), int(info.sim_nsec)) == (1000, 0)


class Spawner(ecs.EcsSystem):
    priority: ClassVar[int] = ecs.PRE_PHYSICS_PRIORITY

    def pre_update(self, info, world):
        world, e = world.create_entity()
        return world.create_component(e, "pos", jnp.array([1.0, 2.0]))


class SeesNew(ecs.EcsSystem):
    def update(self, info, world):
        # remove every entity created this step, right after seeing it as new
        return world.request_remove_where(world.each_new(["pos"]))

    def post_update(self, info, view):
        return jnp.stack([view.count(["pos"]), jnp.sum(view.each_new(["pos"])), jnp.sum(view.each_removed(["pos"]))])


def test_entity_creation_and_removal_timing():
    world, _, (counts,) = ecs.run(empty_world(), [Spawner(), SeesNew()], 3)
    # each step: created in PreUpdate, visible and new in Update and PostUpdate, removed at the end
    np.testing.assert_array_equal(counts, [[1, 1, 1]] * 3)
    assert int(world.count(["pos"])) == 0 and not bool(jnp.any(world.new))


class Move(ecs.EcsSystem):
    """pos += 0.5 vel each step (writes a column, creates and removes nothing)."""

    def update(self, info, world):
        return world.apply(["pos", "vel"], lambda p, v: p + 0.5 * v, outputs=["pos"])

    def post_update(self, info, view):
        return jnp.stack(
            [
                view.count(["pos"]),
                jnp.sum(view.each_new(["pos"])),
                jnp.sum(view.each_removed(["pos"])),
                jnp.sum(view.each_changed("pos")),
            ]
        )


@pytest.mark.parametrize("mode", ["eager", "jit", "vmap"])
def test_requests_made_before_a_run_whose_systems_change_no_structure(mode):
    """Issue #38 item 9: a run whose systems create, remove, re-parent and pin nothing writes only the
    change flags at the end of its steps after the first; what was asked on the world before the run
    (an entity removed, one created) is still settled at the end of the first step, as gz-sim's
    runner does (EntityComponentManager_TEST: new entities are new for one step, a removal takes
    effect at the end of the step, the removed slot's generation moves on)."""
    w = empty_world(4)
    ents = []
    for k in range(3):
        w, e = w.create_entity()
        w = w.create_component(e, "pos", jnp.array([float(k), 0.0]))
        w = w.create_component(e, "vel", jnp.array([1.0, 2.0]))
        ents.append(e)
    w = w.end_of_step()
    w = w.request_remove_entity(ents[1])
    w, late = w.create_entity()
    w = w.create_component(late, "pos", jnp.array([9.0, 9.0]))
    w = w.create_component(late, "vel", jnp.array([-1.0, 0.0]))
    if mode == "vmap":
        # two worlds in a batch, the second moving twice as fast: the first member is checked below
        w2 = w.set_column("vel", 2.0 * w.column("vel"))
        batch = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), w, w2)
        out, _, (rows2,) = jax.vmap(lambda w: ecs.run(w, [Move()], 4))(batch)
        np.testing.assert_allclose(out.components["pos"].data[1, int(ents[0]) % 4], [0.0 + 4.0, 0.0 + 8.0])
        out_world, rows = jax.tree_util.tree_map(lambda a: a[0], out), rows2[0]
    else:
        run = (lambda w: ecs.run(w, [Move()], 4)) if mode == "eager" else jax.jit(lambda w: ecs.run(w, [Move()], 4))
        out_world, _, (rows,) = run(w)
    # step 1: 4 with pos (3 + the new one), 1 new, 1 being removed (reported in its step), 4 moved
    # steps 2-4: 3 left, none new or removed, 3 moved
    np.testing.assert_array_equal(np.asarray(rows), [[4, 1, 1, 4], [3, 0, 0, 3], [3, 0, 0, 3], [3, 0, 0, 3]])
    assert not bool(out_world.exists(ents[1])) and bool(out_world.exists(late))
    np.testing.assert_allclose(out_world.component(ents[0], "pos"), [0.0 + 2.0, 0.0 + 4.0])
    np.testing.assert_allclose(out_world.component(ents[2], "pos"), [2.0 + 2.0, 4.0])
    np.testing.assert_allclose(out_world.component(late, "pos"), [9.0 - 2.0, 9.0])
    slot = int(ents[1]) % out_world.capacity
    assert int(out_world.generation[slot]) == 1 and not bool(out_world.new.any())
    assert not bool(out_world.removing.any()) and not bool(out_world.components["pos"].present[slot])
    # the change flags were seen during each step (rows above) and cleared at its end
    assert int(jnp.sum(out_world.each_changed("pos"))) == 0


def test_a_traced_world_decides_its_pending_requests_at_run_time():
    """Issue #38 item 9: under ``jit`` whether a world was asked to reset, stop or re-create before the
    run, or holds an unsettled removal, is known only at run time; the run decides it once, around the
    whole run (the plain scan of passes when nothing is pending). Each case gives what the eager run
    gives (gz-sim: a WorldControl reset or stop between steps; Recreate; a removal settled at the end of
    the next step)."""
    w = empty_world(6)
    w, ground = w.create_entity()
    ents = []
    for k in range(3):
        w, e = w.create_entity(parent=ground if k == 0 else ecs.NULL_ENTITY)
        w = w.create_component(e, "pos", jnp.array([float(k), 0.0]))
        w = w.create_component(e, "vel", jnp.array([1.0, 2.0]))
        ents.append(e)
    w = w.end_of_step()
    moved, _, _ = ecs.run(w, [Move()], 2)
    cases = {
        "nothing": (moved, [[3, 0, 0, 3]] * 3),
        "reset": (moved.request_reset(), [[0, 0, 0, 0], [3, 0, 0, 3], [3, 0, 0, 3]]),
        "stop": (moved.request_stop(), [[0, 0, 0, 0]] * 3),
        "removal": (moved.request_remove_entity(ents[1]), [[3, 0, 1, 3], [2, 0, 0, 2], [2, 0, 0, 2]]),
        "recreate": (moved.request_recreate(ents[0]), [[4, 1, 1, 4], [3, 0, 0, 3], [3, 0, 0, 3]]),
    }
    jitted = jax.jit(lambda ww: ecs.run(ww, [Move()], 3, initial_world=w))
    for name, (start, rows) in cases.items():
        eager_world, eager_info, (eager_rows,) = ecs.run(start, [Move()], 3, initial_world=w)
        world, info, (out,) = jitted(start)
        np.testing.assert_array_equal(np.asarray(eager_rows), rows, err_msg=name)
        np.testing.assert_array_equal(np.asarray(out), rows, err_msg=name)
        assert int(info.iterations) == int(eager_info.iterations), name
        for a, b in zip(jax.tree_util.tree_leaves(world), jax.tree_util.tree_leaves(eager_world), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)
    # under vmap over worlds, one member asked to reset and one not: each run as on its own
    batch = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), cases["nothing"][0], cases["reset"][0])
    _, _, (out,) = jax.jit(jax.vmap(lambda ww: ecs.run(ww, [Move()], 3, initial_world=w)))(batch)
    np.testing.assert_array_equal(np.asarray(out), [cases["nothing"][1], cases["reset"][1]])
    # the moves themselves: 2 + 3 steps of 0.5 vel from the start, or 3 after the reset pass (2 moves)
    np.testing.assert_allclose(jitted(moved)[0].component(ents[2], "pos"), [2.0 + 2.5, 5.0])
    np.testing.assert_allclose(jitted(moved.request_reset())[0].component(ents[2], "pos"), [2.0 + 1.0, 2.0])


def test_recursive_removal_and_capacity_error():
    w = empty_world(4)
    w, a = w.create_entity()
    w, b = w.create_entity(parent=a)
    w, c = w.create_entity(parent=b)
    w = w.request_remove_entity(a).end_of_step()
    assert not bool(jnp.any(w.alive))
    w2 = empty_world(2)
    w2, _ = w2.create_entity()
    w2, _ = w2.create_entity()
    with pytest.raises(Exception, match="World is full: all 2 entity slots are in use"):
        jax.block_until_ready(w2.create_entity()[1])
    # inside ecs.run the message names the system and phase that spawned (before: only "World is full")
    with pytest.raises(Exception, match=r"World is full: all 2 entity slots .* created by Spawner\.pre_update"):
        jax.block_until_ready(ecs.run(empty_world(2), [Spawner()], 5)[0].alive)


class Mover(ecs.EcsSystem):
    requires: ClassVar[tuple[str, ...]] = ("pos", "vel")

    def update(self, info, world):
        # deliberately writes every row: the runner must keep entities without "vel" unchanged
        pos = world.column("pos") + info.dt * world.column("vel") + 100.0 * (~world.each(["vel"]))[:, None]
        return world.set_column("pos", pos)


def test_required_component_filter():
    w = empty_world()
    w, moving = w.create_entity()
    w = w.create_component(moving, "pos", jnp.zeros(2)).create_component(moving, "vel", jnp.array([1.0, 0.0]))
    w, still = w.create_entity()
    w = w.create_component(still, "pos", jnp.array([5.0, 5.0]))
    w, _, _ = ecs.run(w.end_of_step(), [Mover()], 10, step_size=0.1)
    np.testing.assert_allclose(w.component(moving, "pos"), [1.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(w.component(still, "pos"), [5.0, 5.0])  # untouched


class ApplyMover(ecs.EcsSystem):
    """Moves through `World.apply`; ``first``: writes every "pos" row before (the guard must still undo
    that write for entities without "vel"); ``names``: the components its apply requires."""

    requires: ClassVar[tuple[str, ...]] = ("pos", "vel")
    first: bool = False
    names: tuple[str, ...] = ("pos", "vel")

    def update(self, info, world):
        if self.first:
            world = world.set_column("pos", world.column("pos") + 100.0)
        if self.names == ("pos",):
            return world.apply(["pos"], lambda p: p + 1.0)
        return world.apply(["pos", "vel"], lambda p, v: p + info.dt * v, outputs=["pos"])


@pytest.mark.parametrize("first, names", [(False, ("pos", "vel")), (True, ("pos", "vel")), (False, ("pos",))])
def test_required_component_filter_with_apply(first, names):
    """The guard of a system's writes is skipped for an apply whose mask lies inside it (the ECS's
    stepping speed, issue #38 item 9), and only then: a write before the apply, or an apply that
    does not require every required component, is still filtered."""
    w = empty_world()
    w, moving = w.create_entity()
    w = w.create_component(moving, "pos", jnp.zeros(2)).create_component(moving, "vel", jnp.array([1.0, 0.0]))
    w, still = w.create_entity()
    w = w.create_component(still, "pos", jnp.array([5.0, 5.0]))
    w, _, _ = ecs.run(w.end_of_step(), [ApplyMover(first=first, names=names)], 10, step_size=0.1)
    want = {
        (False, ("pos", "vel")): [1.0, 0.0],
        (True, ("pos", "vel")): [1001.0, 1000.0],
        (False, ("pos",)): [10.0, 10.0],
    }
    np.testing.assert_allclose(w.component(moving, "pos"), want[first, names], atol=1e-9)
    np.testing.assert_allclose(w.component(still, "pos"), [5.0, 5.0])  # untouched
    assert not bool(jnp.any(w.components["pos"].changed))  # (cleared at the step's end)


class Cheater(ecs.EcsSystem):
    def post_update(self, info, view):
        return view._world  # tries to hand back a world


def test_post_update_is_read_only():
    view = ecs.WorldView(empty_world())
    for method in ("create_entity", "create_component", "request_remove_entity", "apply"):
        assert not hasattr(view, method)
    with pytest.raises(js.JaxsysError, match="post_update returned a World: PostUpdate is read-only"):
        ecs.run(empty_world(), [Cheater()], 1)


class Ballistic(ecs.EcsSystem):
    priority: ClassVar[int] = ecs.PHYSICS_PRIORITY
    requires: ClassVar[tuple[str, ...]] = ("pos", "vel")

    def update(self, info, world):
        def f(p, v):
            v = v + info.dt * jnp.array([0.0, -9.81])
            return p + info.dt * v, v

        return world.apply(["pos", "vel"], f)

    def reset(self, info, world):
        return world


def ball_world(v0):
    w = empty_world()
    w, e = w.create_entity()
    return w.create_component(e, "pos", jnp.zeros(2)).create_component(e, "vel", v0).end_of_step(), e


def test_reset_vmap_and_grad():
    w0, e = ball_world(jnp.array([1.0, 10.0]))
    w, _, _ = ecs.run(w0, [Ballistic()], 100, step_size=0.01)
    back, info = ecs.reset(w0, [Ballistic()])
    assert eqx.tree_equal(back, w0) and int(info.iterations) == 0
    # vmap over worlds with different initial velocities
    v0s = jnp.array([[1.0, 5.0], [2.0, 10.0], [0.0, 15.0]])
    final = jax.vmap(lambda v: ecs.run(ball_world(v)[0], [Ballistic()], 100, step_size=0.01)[0].component(e, "pos"))(
        v0s
    )
    for i, v in enumerate(v0s):
        np.testing.assert_allclose(
            final[i], ecs.run(ball_world(v)[0], [Ballistic()], 100, step_size=0.01)[0].component(e, "pos")
        )
    # gradient of the height after 1 s w.r.t. the initial vertical speed: semi-implicit Euler -> exactly 1 s
    height = lambda vy: ecs.run(ball_world(jnp.stack([1.0, vy]))[0], [Ballistic()], 100, step_size=0.01)[0].component(
        e, "pos"
    )[1]  # noqa: E731
    g = jax.grad(height)(10.0)
    fd = (height(10.0 + 1e-6) - height(10.0 - 1e-6)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-7)
    np.testing.assert_allclose(g, 1.0, rtol=1e-9)


def test_bridged_diagram_matches_simulate():
    p = Pendulum()
    ctx = p.get_input_port(0).fix_value(p.create_default_context(), [0.0])
    physics = ecs.DiagramPhysics(
        p, "state", context=ctx, integrator=js.RungeKutta4Integrator(max_step_size=1.0), substeps=2
    )
    w = ecs.World.empty(4, {"state": jnp.zeros(2)})
    starts = [jnp.array([0.5, 0.0]), jnp.array([1.0, -1.0])]
    ids = []
    for x0 in starts:
        w, e = w.create_entity()
        w = w.create_component(e, "state", x0)
        ids.append(e)
    w, _, _ = ecs.run(w.end_of_step(), [physics], 200, step_size=0.01)
    for e, x0 in zip(ids, starts):
        ref = js.simulate(p, ctx.with_continuous_state(x0), 2.0, js.RungeKutta4Integrator(max_step_size=0.005))
        np.testing.assert_allclose(
            w.component(e, "state"), ref.context.get_continuous_state_vector(), rtol=1e-11, atol=1e-13
        )
    # paused steps leave the physics state unchanged
    w2, _, _ = ecs.run(w, [physics], 5, step_size=0.01, paused=True)
    np.testing.assert_array_equal(w2.column("state"), w.column("state"))


@pytest.mark.parametrize("cls", FIXED_STEP_INTEGRATORS + [js.Radau1Integrator], ids=lambda c: c.__name__)
def test_bridged_diagram_works_with_every_integrator(cls):
    # Before: SemiExplicitEulerIntegrator raised KeyError: 'num_q' (the bridge passed no q/v split),
    # and an implicit step whose Newton iteration failed was accepted
    p = Pendulum()
    ctx = p.get_input_port(0).fix_value(p.create_default_context(), [0.0])
    physics = ecs.DiagramPhysics(p, "state", context=ctx, integrator=cls(max_step_size=1.0), substeps=2)
    w = ecs.World.empty(2, {"state": jnp.zeros(2)})
    w, e = w.create_entity()
    w = w.create_component(e, "state", jnp.array([0.5, 0.0]))
    w, _, _ = ecs.run(w.end_of_step(), [physics], 50, step_size=0.01)
    ref = js.simulate(
        p, ctx.with_continuous_state(jnp.array([0.5, 0.0])), 0.5, cls(max_step_size=0.005, fixed_step_mode=True)
    )
    tol = (
        1e-8
        if cls in (js.ImplicitEulerIntegrator, js.Radau1Integrator, js.RadauIntegrator, js.Radau5Integrator)
        else 1e-12
    )
    np.testing.assert_allclose(w.component(e, "state"), ref.context.get_continuous_state_vector(), atol=tol, rtol=0)


def test_bridged_stiff_plant_never_accepts_unconverged_steps():
    class Robertson(js.LeafSystem):
        def __init__(self):
            super().__init__("robertson")
            self.declare_continuous_state(3, default=[1.0, 0.0, 0.0])

        def do_calc_time_derivatives(self, context):
            y1, y2, y3 = context.get_continuous_state_vector()
            return jnp.stack([-0.04 * y1 + 1e4 * y2 * y3, 0.04 * y1 - 1e4 * y2 * y3 - 3e7 * y2**2, 3e7 * y2**2])

    r = Robertson()
    physics = ecs.DiagramPhysics(r, "y", integrator=js.RadauIntegrator(max_step_size=1.0))
    w = ecs.World.empty(1, {"y": jnp.zeros(3)})
    w, e = w.create_entity()
    w = w.create_component(e, "y", jnp.array([1.0, 0.0, 0.0]))
    w, _, _ = ecs.run(w.end_of_step(), [physics], 10, step_size=1.0)
    y = np.asarray(w.component(e, "y"))
    # scipy Radau, rtol 1e-11: y(10) = [0.8413637, 1.6233e-5, 0.1586201]; Radau3 at h = 1 (steps that
    # fail are halved) is within 1e-5, and mass is conserved
    np.testing.assert_allclose(y[[0, 2]], [0.8413637, 0.1586201], atol=1e-5)
    assert abs(y.sum() - 1.0) < 1e-12


def test_bridge_refuses_plants_whose_events_it_would_skip():
    # Before: a plant with a zero-order hold (a periodic discrete update) was bridged with its held value
    # frozen at the default forever, silently. The bridge advances continuous state only: refused, named.
    p = Pendulum()
    hold = js.ZeroOrderHold(0.1, 2, name="hold")
    b = js.DiagramBuilder()
    b.add_system(p)
    b.add_system(hold)
    b.connect(p.get_output_port(0), hold.get_input_port(0))
    b.export_input(p.get_input_port(0))
    d = b.build()
    with pytest.raises(js.JaxsysError, match=r"periodic discrete update event.*1 discrete state group.*js.simulate"):
        ecs.DiagramPhysics(d, "state")
    with pytest.raises(js.JaxsysError, match="witness functions"):
        ecs.DiagramPhysics(js.examples.BouncingBall(), "state")


def test_row_select_is_where_bit_for_bit_and_differentiates_as_where():
    """The ECS's row select (bitwise, for XLA's CPU vectorization) equals ``jnp.where`` with the row mask
    broadcast, bit for bit (NaN, inf, -0.0 kept), for each dtype, and its derivatives are where's."""
    from jaxsys.ecs.world import _select_rows

    rng = np.random.default_rng(3)
    mask = jnp.asarray(rng.random(7) < 0.5)
    dtypes = [jnp.float32, jnp.float16, jnp.int32, jnp.int8, jnp.bool_]
    dtypes += [jnp.float64] if jax.config.jax_enable_x64 else []
    for dtype in dtypes:
        new = jnp.asarray(rng.normal(size=(7, 3)) * 5).astype(dtype)
        old = jnp.asarray(rng.normal(size=(7, 3)) * 5).astype(dtype)
        if jnp.issubdtype(dtype, jnp.floating):
            new = new.at[0, 0].set(jnp.nan).at[1, 1].set(-jnp.inf).at[2, 2].set(-0.0)
            old = old.at[0, 1].set(jnp.nan).at[3, 0].set(jnp.inf).at[4, 2].set(-0.0)
        want = jnp.where(mask[:, None], new, old)
        got = jax.jit(_select_rows)(mask, new, old)
        assert got.dtype == want.dtype
        if jnp.issubdtype(dtype, jnp.floating):
            bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[jnp.dtype(dtype).itemsize]
            assert np.array_equal(np.asarray(got).view(bits), np.asarray(want).view(bits))
        else:
            assert np.array_equal(np.asarray(got), np.asarray(want))
    new, old = jnp.asarray(rng.normal(size=(7, 2))), jnp.asarray(rng.normal(size=(7, 2)))
    w = jnp.asarray(rng.normal(size=(7, 2)))

    def loss(f):
        return lambda a, b: jnp.sum(w * f(mask, a, b) ** 2)

    where = lambda m, a, b: jnp.where(m[:, None], a, b)  # noqa: E731
    for argnums in (0, 1):
        np.testing.assert_allclose(
            jax.grad(loss(_select_rows), argnums)(new, old), jax.grad(loss(where), argnums)(new, old), rtol=1e-15
        )
    batched = jax.vmap(_select_rows, in_axes=(None, 0, 0))(mask, jnp.stack([new, old]), jnp.stack([old, new]))
    np.testing.assert_array_equal(batched[1], jnp.where(mask[:, None], old, new))
