"""The entity-component world at gz-sim parity (issue #17): safe generational handles, checked
component writes, parent validation and re-parenting, change tracking, world control (pause, play,
multi-step, run-to-time, stop, reset) applied by the runner in gz-sim's order, the test fixture, the
system-manager view, per-instance priorities, and batched, differentiated worlds. Each test names the
gz-sim source of the semantics it checks (gz-sim 9: src/EntityComponentManager.cc,
src/SimulationRunner.cc, src/SystemManager.cc, include/gz/sim/TestFixture.hh)."""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsys as js
from jaxsys import ecs


def world4():
    return ecs.World.empty(4, {"pos": jnp.zeros(2), "mass": jnp.zeros(())})


def test_component_states_restate_gz_set_changed():
    """Issue #38 item 4, gz-sim src/EntityComponentManager_TEST.cc SetChanged: created components are
    OneTimeChange; after SetAllComponentsUnchanged NoChange; SetChanged(e1, Periodic) and (e2,
    OneTime) read back; RemoveComponent leaves the state NoChange (jaxsys marked it a one-time change
    before) while the removal is listed (ChangedStateComponents: the removed component is in the
    changed state). An unknown component's state is NoChange."""
    w = ecs.World.empty(4, {"int": jnp.zeros((), jnp.int32)})
    w, e1 = w.create_entity()
    w, e2 = w.create_entity()
    w = w.create_component(e1, "int", 123).create_component(e2, "int", 456)
    assert [int(w.component_state(e, "int")) for e in (e1, e2)] == [2, 2]  # OneTimeChange
    w = w.end_of_step()  # (RunSetAllComponentsUnchanged)
    assert [int(w.component_state(e, "int")) for e in (e1, e2)] == [0, 0]
    w = w.set_changed(e1, "int", 1).set_changed(e2, "int", 2)
    assert [int(w.component_state(e, "int")) for e in (e1, e2)] == [1, 2]
    np.testing.assert_array_equal(w.each_changed("int", "periodic")[:2], [True, False])
    w = w.remove_component(e1, "int")
    assert int(w.component_state(e1, "int")) == 0  # NoChange
    assert not bool(w.each_changed("int")[0])
    np.testing.assert_array_equal(w.each_component_removed("int")[:2], [True, False])
    w = w.remove_component(e2, "int")
    assert int(w.component_state(e2, "int")) == 0
    assert not bool(jnp.any(w.each_changed("int")))  # (gz: HasOneTimeComponentChanges false)
    # cleared at the end of the step (RunClearRemovedComponents); given back the same step, it is a
    # one-time change and not removed
    assert not bool(jnp.any(w.end_of_step().each_component_removed("int")))
    w = w.create_component(e2, "int", 7)
    assert int(w.component_state(e2, "int")) == 2 and not bool(w.each_component_removed("int")[1])
    with pytest.raises(js.JaxsysError, match="NoChange"):
        w.set_changed(e1, "int", 3)


@pytest.mark.parametrize("x64", [True, False])
def test_set_component_data_says_whether_it_changed(x64):
    """Issue #38 item 4, gz-sim EntityComponentManager::SetComponentData: returns whether the data
    changed (true when it creates the component), so a system can skip work; the change state of an
    existing component is left to the caller (SetChanged), as in gz-sim. Under jit and vmap too."""
    with jax.enable_x64(x64):
        w = world4()
        w, e = w.create_entity()
        w, created = w.set_component_data(e, "pos", jnp.array([1.0, 2.0]))
        assert bool(created) and int(w.component_state(e, "pos")) == 2  # a new component: OneTimeChange
        w = w.end_of_step()
        w, same = w.set_component_data(e, "pos", jnp.array([1.0, 2.0]))
        assert not bool(same) and int(w.component_state(e, "pos")) == 0
        w, moved = w.set_component_data(e, "pos", jnp.array([1.0, 2.5]))
        assert bool(moved) and int(w.component_state(e, "pos")) == 0  # not marked: the caller does
        np.testing.assert_allclose(w.component(e, "pos"), [1.0, 2.5])

        def write(world, value):
            world, changed = world.set_component_data(e, "pos", value)
            return world.set_changed(e, "pos", jnp.where(changed, 2, 0)), changed

        values = jnp.array([[1.0, 2.5], [0.0, 2.5]])
        worlds, changed = jax.jit(jax.vmap(write, in_axes=(None, 0)))(w, values)
        np.testing.assert_array_equal(changed, [False, True])
        np.testing.assert_array_equal(worlds.components["pos"].changed[:, 0], [0, 2])


@pytest.mark.parametrize("x64", [True, False])
def test_create_entities_is_create_entity_n_times(x64):
    """Issue #38 item 8: batch creation, one operation (also inside jit and under vmap), gives what
    n calls of create_entity (gz-sim CreateEntity) and create_component give, slot for slot: the first
    free slots (a removed entity's slot reused with its next generation), new, one-time changes."""
    with jax.enable_x64(x64):
        w = ecs.World.empty(8, {"pos": jnp.zeros(2), "mass": jnp.zeros(())})
        w, a = w.create_entity()
        w, b = w.create_entity()
        w, c = w.create_entity()
        w = w.request_remove_entity(b).end_of_step()  # a hole at slot 1
        pos = jnp.arange(8.0).reshape(4, 2)
        one = w
        handles = []
        for k in range(4):
            one, h = one.create_entity(parent=a)
            one = one.create_component(h, "pos", pos[k])
            handles.append(int(h))
        many, hs = w.create_entities(4, parent=a, components={"pos": pos})
        assert [int(h) for h in hs] == handles
        for x, y in zip(jax.tree_util.tree_leaves(one), jax.tree_util.tree_leaves(many)):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        assert int(hs[0]) == 8 + 1  # slot 1, generation 1
        jitted, hs_j = jax.jit(lambda ww, p: ww.create_entities(4, parent=a, components={"pos": p}))(w, pos)
        np.testing.assert_array_equal(hs_j, hs)
        np.testing.assert_array_equal(jitted.column("pos"), many.column("pos"))
        ws = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), w)
        _, hs_v = jax.vmap(lambda ww: ww.create_entities(4))(ws)
        np.testing.assert_array_equal(hs_v, jnp.stack([hs, hs]))
        # per-entity parents, and the errors
        _, hs2 = w.create_entities(2, parent=jnp.array([a, c]))
        assert len(hs2) == 2
        with pytest.raises(js.JaxsysError, match="parent 1 does not exist"):
            w.create_entities(2, parent=b)
        with pytest.raises(js.JaxsysError, match=r"values have shape \(3, 2\); expected \(4, 2\)"):
            w.create_entities(4, components={"pos": jnp.zeros((3, 2))})
        with pytest.raises(Exception, match="World is full: creating 7 entities needs 7 free slots of the 8"):
            jax.block_until_ready(w.create_entities(7)[1])


def test_reset_to_restates_gz_reset_to_with_deleted_and_added_entities():
    """Issue #38 item 5, gz-sim src/EntityComponentManager_TEST.cc ResetToWithDeletedEntity and
    ResetToWithAddedEntity: a snapshot taken while its two entities are new; after a step (entity1
    removed, or entity3 added), ResetTo(snapshot) has new entities again, EachNew<Name> = 2 (the
    snapshot's new flags; jaxsys gave 1, only the re-created entity) and EachRemoved<Name> = entity3."""
    w = ecs.World.empty(4, {"name": jnp.zeros((), jnp.int32), "pose": jnp.zeros(6)})
    w, e1 = w.create_entity()
    w = w.create_component(e1, "pose", jnp.arange(6.0)).create_component(e1, "name", 1)
    w, e2 = w.create_entity()
    w = w.create_component(e2, "name", 2)
    assert int(jnp.sum(w.each_new(["name"]))) == 2
    snapshot = w
    deleted = w.request_remove_entity(e1).end_of_step()
    assert not bool(jnp.any(deleted.new))
    back = deleted.reset_to(snapshot)
    assert bool(jnp.any(back.new)) and int(jnp.sum(back.each_new(["name"]))) == 2
    np.testing.assert_array_equal(back.component(e1, "pose"), jnp.arange(6.0))
    added, e3 = w.create_entity()
    added = added.create_component(e3, "name", 3).end_of_step()
    back = added.reset_to(snapshot)
    assert bool(jnp.any(back.new))
    removed = back.each_removed(["name"])
    assert int(jnp.sum(removed)) == 1 and bool(removed[int(e3) % 4])


def test_pinned_entities_restate_gz_pinned_entity():
    """Issue #38 item 6, gz-sim src/EntityComponentManager_TEST.cc PinnedEntity: e2 child of e1, e3
    alone; PinEntity(e1) pins e2 too; removing e1 or e2 marks nothing (3 entities stay); removing all
    leaves e1 and e2; UnpinEntity(e2) lets it go (1 left); UnpinAllEntities, remove all: 0. Inside jit
    too."""

    def scenario(w):
        w, e1 = w.create_entity()
        w, e2 = w.create_entity(parent=e1)
        w, e3 = w.create_entity()
        counts = [jnp.sum(w.alive)]
        w = w.pin_entity(e1)
        w = w.request_remove_entity(e1)
        marked = [jnp.any(w.removing)]
        w = w.end_of_step()
        w = w.request_remove_entity(e2, recursive=False)
        marked.append(jnp.any(w.removing))
        w = w.end_of_step()
        counts.append(jnp.sum(w.alive))
        w = w.request_remove_entities()
        marked.append(jnp.any(w.removing))
        w = w.end_of_step()
        counts.append(jnp.sum(w.alive))
        w = w.unpin_entity(e2).request_remove_entity(e2)
        marked.append(jnp.any(w.removing))
        w = w.end_of_step()
        counts.append(jnp.sum(w.alive))
        w = w.unpin_all_entities().request_remove_entities().end_of_step()
        counts.append(jnp.sum(w.alive))
        return jnp.stack(counts), jnp.stack(marked)

    for run in (scenario, jax.jit(scenario)):
        counts, marked = run(world4())
        np.testing.assert_array_equal(counts, [3, 3, 2, 1, 0])
        np.testing.assert_array_equal(marked, [False, False, True, True])


@pytest.mark.parametrize("x64", [True, False])
def test_clone_restates_gz_clone(x64):
    """Issue #38 item 6, gz-sim src/EntityComponentManager_TEST.cc Clone: cloning an entity copies it
    and its descendants with their components (new entities, new handles), the copies of children
    under the copy of their parent, the copy under the given parent; cloning kNullEntity returns
    kNullEntity and creates nothing. Under jit and vmap too."""
    with jax.enable_x64(x64):
        w = ecs.World.empty(10, {"pos": jnp.zeros(2), "mass": jnp.zeros(())})
        w, model = w.create_entity()
        w = w.create_component(model, "pos", jnp.array([1.0, 2.0]))
        w, link = w.create_entity(parent=model)
        w = w.create_component(link, "mass", jnp.asarray(3.0))
        w, visual = w.create_entity(parent=link)
        w = w.create_component(visual, "pos", jnp.array([5.0, 6.0]))
        w, world_root = w.create_entity()
        w = w.end_of_step()

        def check(w2, copy):
            assert int(jnp.sum(w2.alive)) == 7 and int(jnp.sum(w2.new)) == 3
            assert int(copy) not in (int(model), int(link), int(visual), int(world_root))
            assert int(w2.parent_of(copy)) == int(world_root)
            np.testing.assert_array_equal(w2.component(copy, "pos"), [1.0, 2.0])
            kids = np.flatnonzero(np.asarray(w2.parent) == int(copy))
            assert len(kids) == 1
            copy_link = int(w2.handles()[kids[0]])
            assert float(w2.component(copy_link, "mass")) == 3.0 and not bool(w2.has_component(copy_link, "pos"))
            grand = np.flatnonzero(np.asarray(w2.parent) == copy_link)
            np.testing.assert_array_equal(w2.component(int(w2.handles()[grand[0]]), "pos"), [5.0, 6.0])
            assert int(w2.component_state(copy, "pos")) == 2  # created: a one-time change

        check(*w.clone(model, parent=world_root))
        check(*jax.jit(lambda ww: ww.clone(model, parent=world_root))(w))
        ws = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), w)
        _, copies = jax.vmap(lambda ww: ww.clone(model, parent=world_root))(ws)
        assert int(copies[0]) == int(copies[1])
        same, none = w.clone(ecs.NULL_ENTITY)
        assert int(none) == ecs.NULL_ENTITY and int(jnp.sum(same.alive)) == 4
        with pytest.raises(Exception, match="World is full: cloning"):
            small = ecs.World.empty(4, {"pos": jnp.zeros(2), "mass": jnp.zeros(())})
            small, a = small.create_entity()
            small, _ = small.create_entity(parent=a)
            small, _ = small.create_entity()
            jax.block_until_ready(small.clone(a)[1])


def test_stale_handles_never_reach_the_new_entity_in_a_reused_slot():
    """gz-sim never reuses an entity id (EntityComponentManager::CreateEntity takes the next id): a
    removed entity's id names nothing. jaxsys reuses slots, so handles carry the slot's generation."""
    w = world4()
    w, e = w.create_entity()
    w = w.create_component(e, "pos", jnp.array([1.0, 2.0]))
    w = w.request_remove_entity(e).end_of_step()
    w, f = w.create_entity()
    w = w.create_component(f, "pos", jnp.array([7.0, 8.0]))
    assert int(f) != int(e) and int(f) % 4 == int(e) % 4  # same slot, new generation
    assert not bool(w.exists(e)) and bool(w.exists(f))
    assert not bool(w.has_component(e, "pos"))
    value, found = w.try_component(e, "pos")
    assert not bool(found) and np.all(np.asarray(value) == 0)
    with pytest.raises(js.JaxsysError, match="does not exist"):
        w.component(e, "pos")
    with pytest.raises(js.JaxsysError, match="does not exist"):
        w.create_component(e, "pos", jnp.zeros(2))
    with pytest.raises(js.JaxsysError, match="does not exist"):
        w.request_remove_entity(e)
    # inside jit: writes and removals through the stale handle are counted no-ops
    w2 = jax.jit(lambda w, h: w.create_component(h, "pos", jnp.array([-1.0, -1.0])).request_remove_entity(h))(w, e)
    np.testing.assert_array_equal(w2.component(f, "pos"), [7.0, 8.0])
    assert bool(w2.exists(f)) and not bool(w2.removing[int(f) % 4]) and int(w2.invalid_operations) == 2
    # reads inside jit: an error, never another entity's data
    with pytest.raises(Exception, match="does not exist or has no 'pos'"):
        jax.block_until_ready(jax.jit(lambda w, h: w.component(h, "pos"))(w, e))


def test_out_of_range_null_and_shape_errors():
    """gz-sim's Component / CreateComponent on a missing entity return nullptr / false; a value must
    be the component's type (no broadcasting in C++)."""
    w = world4()
    w, e = w.create_entity()
    w = w.create_component(e, "pos", jnp.zeros(2))
    assert not bool(w.has_component(99, "pos")) and not bool(w.exists(ecs.NULL_ENTITY))
    with pytest.raises(js.JaxsysError, match="entity 99 does not exist"):
        w.component(99, "pos")
    with pytest.raises(js.JaxsysError, match="entity -1 does not exist"):
        w.create_component(ecs.NULL_ENTITY, "pos", jnp.zeros(2))
    w_null = jax.jit(lambda w: w.create_component(ecs.NULL_ENTITY, "pos", jnp.ones(2)))(w)
    np.testing.assert_array_equal(w_null.column("pos"), w.column("pos"))  # the last slot untouched
    assert int(w_null.invalid_operations) == 1
    with pytest.raises(js.JaxsysError, match=r"shape \(2,\); the value has shape \(\)"):
        w.create_component(e, "pos", 1.0)
    with pytest.raises(js.JaxsysError, match=r"shape \(2,\); the value has shape \(3,\)"):
        w.create_component(e, "pos", jnp.zeros(3))
    with pytest.raises(js.JaxsysError, match="no component 'mass'"):
        w.component(e, "mass")
    with pytest.raises(js.JaxsysError, match="num_steps must be an int >= 0"):
        ecs.run(w, [], -1)
    w0, info0, outs = ecs.run(w, [], 0)
    assert w0 is w and int(info0.iterations) == 0 and outs == ()


def test_parents_are_validated_and_removal_never_follows_a_stale_parent():
    """gz-sim: RequestRemoveEntity(recursive) removes the entity's descendants (by ParentEntity);
    SetParentEntity re-parents. A removed parent's id names nothing afterwards."""
    w = world4()
    with pytest.raises(js.JaxsysError, match="parent 3 does not exist"):
        w.create_entity(parent=3)
    with pytest.raises(Exception, match="parent entity does not exist"):
        jax.block_until_ready(jax.jit(lambda w: w.create_entity(parent=2)[1])(w))
    w, a = w.create_entity()
    w, b = w.create_entity(parent=a)
    w = w.request_remove_entity(a, recursive=False).end_of_step()  # b keeps a stale parent handle
    assert int(w.parent_of(b)) == ecs.NULL_ENTITY
    w, c = w.create_entity()  # reuses a's slot
    assert int(c) % 4 == int(a) % 4
    w = w.request_remove_entity(c).end_of_step()
    assert bool(w.exists(b))  # not removed as "a child of whatever lives in a's old slot"
    # re-parenting, and cycles refused
    w, p = w.create_entity()
    w, q = w.create_entity(parent=p)
    w = w.set_parent(b, q)
    assert int(w.parent_of(b)) == int(q)
    with pytest.raises(js.JaxsysError, match="cycle"):
        w.set_parent(p, b)
    w = w.request_remove_entity(p).end_of_step()
    assert not any(bool(w.exists(h)) for h in (p, q, b))


def test_change_tracking_is_cleared_at_the_end_of_the_step():
    """gz-sim: setting component data marks it OneTimeChange (or PeriodicChange when the writer says
    so, EntityComponentManager::SetChanged); SimulationRunner::Step ends with SetAllComponentsUnchanged."""
    w = world4()
    w, e = w.create_entity()
    w, f = w.create_entity()
    w = w.create_component(e, "pos", jnp.zeros(2)).create_component(f, "pos", jnp.zeros(2)).end_of_step()
    assert not bool(jnp.any(w.each_changed("pos")))
    w2 = w.create_component(e, "pos", jnp.ones(2))
    np.testing.assert_array_equal(w2.each_changed("pos")[:2], [True, False])
    w3 = w.apply(["pos"], lambda p: p + 1.0)
    np.testing.assert_array_equal(w3.each_changed("pos")[:2], [True, True])
    assert not bool(jnp.any(w3.end_of_step().each_changed("pos")))
    # PeriodicChange (e.g. poses written every step) vs OneTimeChange; a one-time write wins
    w4 = w.apply(["pos"], lambda p: p + 1.0, periodic=True).create_component(f, "pos", jnp.ones(2))
    np.testing.assert_array_equal(w4.each_changed("pos", "periodic")[:2], [True, False])
    np.testing.assert_array_equal(w4.each_changed("pos", "one_time")[:2], [False, True])
    with pytest.raises(js.JaxsysError, match="kind must be"):
        w4.each_changed("pos", "sometimes")


class Clock(ecs.EcsSystem):
    """Records (sim time ns, iterations, paused) and makes the requests it was built with."""

    requests: tuple = eqx.field(static=True)

    def __init__(self, requests=()):
        self.requests = tuple(requests)

    def update(self, info, world):
        for at, what, arg in self.requests:
            hit = info.iterations == at
            if what == "pause":
                world = jax.lax.cond(hit & ~info.paused, lambda w, a=arg: w.request_pause(a), lambda w: w, world)
            elif what == "multi_step":
                world = jax.lax.cond(hit & info.paused, lambda w, a=arg: w.request_multi_step(a), lambda w: w, world)
            elif what == "stop":
                world = world.request_stop(hit & ~info.paused)
            elif what == "reset":
                world = world.request_reset(hit & ~info.paused)
        return world

    def post_update(self, info, view):
        return jnp.stack([info.sim_sec * 1_000_000_000 + info.sim_nsec, info.iterations, info.paused])


def test_pause_play_and_multi_step_requests():
    """gz-sim SimulationRunner::ProcessWorldControl: pause/play, then (when paused) multi_step N
    unpauses for N iterations and pauses again (Step: --pendingSimIterations, re-pause at 0)."""
    clock = Clock([(3, "pause", True)])
    _, _, (out,) = ecs.run(world4(), [clock], 6, step_size=0.001)
    np.testing.assert_array_equal(out[:, 1], [1, 2, 3, 3, 3, 3])  # paused from the step after the request
    np.testing.assert_array_equal(out[:, 2], [0, 0, 0, 1, 1, 1])
    _, info, (out,) = ecs.run(world4(), [Clock()], 6, step_size=0.001, paused=True, multi_step=2)
    np.testing.assert_array_equal(out[:, 1], [1, 2, 2, 2, 2, 2])
    assert bool(info.paused)
    # a system asks for a multi-step while paused
    _, _, (out,) = ecs.run(world4(), [Clock([(2, "pause", True), (2, "multi_step", 3)])], 8, step_size=0.001)
    np.testing.assert_array_equal(out[:, 1], [1, 2, 2, 3, 4, 5, 5, 5])


def test_run_to_sim_time_pauses_there():
    """gz-sim SimulationRunner::Step: when not paused and simTime >= requested run-to time, pause."""
    _, info, (out,) = ecs.run(world4(), [Clock()], 8, step_size=0.002, run_to_sim_time=0.006)
    np.testing.assert_array_equal(out[:, 0], [2e6, 4e6, 6e6, 6e6, 6e6, 6e6, 6e6, 6e6])
    assert bool(info.paused) and int(info.iterations) == 3


def test_the_runner_state_carries_over_to_the_next_run():
    """Issue #38 item 1, gz-sim SimulationRunner: its paused state (set by a run-to time or a pause
    request) is the runner's, kept between steps. Before, the next ``ecs.run`` started unpaused
    (4.502 s, iteration 2301 after a run-to-time pause at 4.5 s, 2300)."""
    world, info, (out,) = ecs.run(world4(), [Clock()], 8, step_size=0.002, run_to_sim_time=0.006)
    assert bool(info.paused) and int(info.iterations) == 3
    world, info, (out,) = ecs.run(world, [Clock()], 3, step_size=0.002, info=info)
    np.testing.assert_array_equal(out[:, 0], [6e6, 6e6, 6e6])  # still paused (was 8e6, 10e6, 12e6)
    np.testing.assert_array_equal(out[:, 2], [1, 1, 1])
    # play requested on the world between runs
    world, info, (out,) = ecs.run(world.request_play(), [Clock()], 2, step_size=0.002, info=info)
    np.testing.assert_array_equal(out[:, 1], [4, 5])
    # a system's pause request in a run's last pass holds for the next run (jitted: the same)
    world, info, (out,) = ecs.run(world4(), [Clock([(3, "pause", True)])], 3, step_size=0.001)
    np.testing.assert_array_equal(out[:, 1], [1, 2, 3])
    world, info, (out,) = jax.jit(lambda w, i: ecs.run(w, [Clock()], 2, step_size=0.001, info=i))(world, info)
    np.testing.assert_array_equal(out[:, 1], [3, 3])
    assert bool(info.paused)
    # an explicit paused= argument still decides
    _, _, (out,) = ecs.run(world, [Clock()], 2, step_size=0.001, info=info, paused=False)
    np.testing.assert_array_equal(out[:, 1], [4, 5])


def test_requests_made_on_the_world_between_runs():
    """Issue #38 item 2, gz-sim: a WorldControl message between steps (reset, stop, pause,
    multi_step) is applied before the next step. Before, a reset made this way was dropped and a
    stop reported stopped=True while every pass ran."""
    w = world4()
    w, keep = w.create_entity()
    w = w.create_component(keep, "pos", jnp.array([9.0, 9.0])).end_of_step()
    systems = [Spawn(), Resetter()]
    world, info, (out,) = ecs.run(w, systems, 2, step_size=0.001)
    np.testing.assert_array_equal(out[:, 0], [2, 3])
    # reset: the next run's first pass is the reset pass (outputs zeros), then iterations restart
    world, info, (out,) = ecs.run(world.request_reset(), systems, 3, step_size=0.001, info=info, initial_world=w)
    np.testing.assert_array_equal(out[:, 0], [0, 2, 3])
    np.testing.assert_array_equal(out[:, 1], [0, 1, 2])
    # the same under jit (the requests are then unknown when the run is traced)
    jitted = jax.jit(lambda ww, ii: ecs.run(ww, systems, 3, step_size=0.001, info=ii, initial_world=w))
    _, _, (out_j,) = jitted(world.request_reset(), info)
    np.testing.assert_array_equal(out_j[:, 0], [0, 2, 3])
    _, info_j, (out_j,) = jitted(world.request_stop(), info)
    np.testing.assert_array_equal(out_j, np.zeros_like(out_j))
    assert int(info_j.iterations) == int(info.iterations)
    # stop: no pass runs
    stopped, info2, (out,) = ecs.run(world.request_stop(), systems, 3, step_size=0.001, info=info)
    assert bool(stopped.control.stopped) and int(info2.iterations) == int(info.iterations)
    np.testing.assert_array_equal(out, np.zeros_like(out))
    assert int(stopped.count(["pos"])) == int(world.count(["pos"]))
    # pause, then a multi-step of 2 while paused
    paused, info3, (out,) = ecs.run(world.request_pause(), [Clock()], 2, step_size=0.001, info=info)
    np.testing.assert_array_equal(out[:, 1], [2, 2])
    _, _, (out,) = ecs.run(paused.request_multi_step(2), [Clock()], 4, step_size=0.001, info=info3)
    np.testing.assert_array_equal(out[:, 1], [3, 4, 4, 4])


def test_a_reset_requested_in_a_runs_last_pass_is_the_next_runs_first():
    """gz-sim applies a reset at the next UpdateCurrentInfo: requested in the last pass of one run,
    it is the first pass of the next (was lost with the runner state)."""
    w = world4()
    w, keep = w.create_entity()
    w = w.create_component(keep, "pos", jnp.array([9.0, 9.0])).end_of_step()
    world, info, _ = ecs.run(w, [Spawn(), Resetter([(2, "reset", None)])], 2, step_size=0.001)
    _, info, (out,) = ecs.run(world, [Spawn(), Resetter()], 2, step_size=0.001, info=info, initial_world=w)
    np.testing.assert_array_equal(out[:, 0], [0, 2])  # the reset pass, then one spawn on the initial world


def test_stop_request_ends_the_run():
    """gz-sim events::Stop: SimulationRunner::OnStop sets running = false; no further iterations."""
    world, info, (out,) = ecs.run(world4(), [Clock([(2, "stop", None)])], 5, step_size=0.001)
    assert bool(world.control.stopped) and int(info.iterations) == 2
    np.testing.assert_array_equal(out[:, 1], [1, 2, 0, 0, 0])  # passes after the stop: zeros


class Spawn(ecs.EcsSystem):
    priority: ClassVar[int] = ecs.PRE_PHYSICS_PRIORITY

    def pre_update(self, info, world):
        world, e = world.create_entity()
        return world.create_component(e, "pos", jnp.stack([info.sim_time, 0.0]))


class Resetter(Clock):
    def reset(self, info, world):
        return world.set_column("mass", jnp.full((world.capacity,), 5.0), where=world.each_removed([]))

    def post_update(self, info, view):
        return jnp.stack([view.count(["pos"]), info.iterations, jnp.sum(view.each_new([]))])


def test_reset_rewinds_to_the_initial_world_in_its_own_pass():
    """gz-sim: a reset request rewinds at the next UpdateCurrentInfo (sim time and iterations 0,
    EntityComponentManager::ResetTo the initial state); that pass runs only SystemManager::Reset
    (UpdateSystems returns after it); entities created since are removed (reported as removed)."""
    w = world4()
    w, keep = w.create_entity()
    w = w.create_component(keep, "pos", jnp.array([9.0, 9.0])).end_of_step()
    world, info, (out,) = ecs.run(w, [Spawn(), Resetter([(2, "reset", None)])], 5, step_size=0.001)
    # counts of entities with pos: 1 initial + one spawned per step; the reset pass (3rd) outputs zeros
    np.testing.assert_array_equal(out[:, 0], [2, 3, 0, 2, 3])
    np.testing.assert_array_equal(out[:, 1], [1, 2, 0, 1, 2])  # iterations restart after the reset
    assert int(info.iterations) == 2 and bool(world.exists(keep))
    np.testing.assert_array_equal(world.component(keep, "pos"), [9.0, 9.0])
    # the reset phase saw the two spawned entities as removed (it marked their slots' mass)
    assert float(jnp.sum(world.column("mass") == 5.0)) == 2


class Prioritized(ecs.EcsSystem):
    name: str = eqx.field(static=True)
    priority: int = eqx.field(static=True)

    def update(self, info, world):
        return world


def test_per_instance_priority_and_system_order():
    """gz-sim SystemManager: systems run in priority order (smaller first; ties in insertion order);
    the priority is per system instance (the <priority> element of a plugin)."""
    systems = [
        Prioritized(name="late", priority=10),
        Prioritized(name="early", priority=-10),
        Prioritized(name="mid", priority=0),
        Clock(),
    ]
    order = ecs.system_order(systems)
    assert order["update"] == ["early", "mid", "Clock", "late"]  # Clock: default priority 0, added after mid
    assert order["post_update"] == ["Clock"] and order["pre_update"] == []


def test_fixture_hooks_run_in_their_phases():
    """gz-sim TestFixture: OnPreUpdate / OnUpdate / OnPostUpdate hooks, Server()->Run(N)."""
    w = world4()
    w, e = w.create_entity()
    w = w.create_component(e, "pos", jnp.zeros(2)).end_of_step()
    fx = ecs.TestFixture(w)
    fx.on_update(lambda info, world: world.apply(["pos"], lambda p: p + info.dt))
    fx.on_post_update(lambda info, view: view.component(e, "pos")[0])
    fx.finalize().run(5, step_size=0.01)
    np.testing.assert_allclose(fx.outputs[-1], 0.01 * np.arange(1, 6), atol=1e-9)
    fx.run(2, step_size=0.01)  # continues
    assert int(fx.info.iterations) == 7
    np.testing.assert_allclose(fx.world.component(e, "pos"), [0.07, 0.07], atol=1e-9)


def test_fixture_finalize_restates_gz_test_fixture():
    """Issue #38 item 6, gz-sim test/integration... src/TestFixture_TEST.cc: Callbacks (configure once
    at Finalize, each hook every iteration with iterations 1..N), NoFinalize (no hook called),
    MultiFinalize (three Finalize calls: configure once), ChangeCallback (a new PreUpdate hook replaces
    the old from the next run)."""
    w = world4()
    w, e = w.create_entity()
    w = w.create_component(e, "mass", jnp.asarray(0.0)).end_of_step()

    def counting(fx):
        fx.on_configure(lambda world: world.create_component(e, "pos", jnp.array([0.0, 0.0])))
        fx.on_pre_update(lambda info, world: world.create_component(e, "mass", world.component(e, "mass") + 1.0))
        fx.on_post_update(lambda info, view: info.iterations)
        return fx

    no = counting(ecs.TestFixture(w)).run(10)
    assert float(no.world.component(e, "mass")) == 0.0 and not bool(no.world.has_component(e, "pos"))
    multi = counting(ecs.TestFixture(w)).finalize().finalize().finalize().run(10)
    assert float(multi.world.component(e, "mass")) == 10.0 and bool(multi.world.has_component(e, "pos"))
    np.testing.assert_array_equal(multi.outputs[-1], np.arange(1, 11))
    # ChangeCallback: the new hook from the next run on, the old one no more
    multi.on_pre_update(lambda info, world: world.create_component(e, "mass", world.component(e, "mass") + 100.0))
    multi.finalize().run(10)
    assert float(multi.world.component(e, "mass")) == 10.0 + 1000.0


def test_thousand_batched_worlds_and_a_gradient_through_diagram_physics():
    """The batched, differentiable world: 1,000 pendulum worlds with randomized lengths under vmap,
    and d(final angle)/d(length) through DiagramPhysics against central finite differences."""
    from jaxsys.examples import Pendulum

    plant = Pendulum()
    base_ctx = plant.get_input_port(0).fix_value(plant.create_default_context(), [0.0])

    def final_angle(length):
        ctx = base_ctx.with_numeric_parameter(0, base_ctx.get_numeric_parameter(0).at[1].set(length))
        phys = ecs.DiagramPhysics(plant, "state", context=ctx, substeps=2)
        w = ecs.World.empty(2, {"state": jnp.zeros(2)})
        w, e = w.create_entity()
        w = w.create_component(e, "state", jnp.array([0.5, 0.0])).end_of_step()
        w, _, _ = ecs.run(w, [phys], 50, step_size=0.02)
        return w.column("state")[0, 0]

    lengths = jnp.linspace(0.5, 2.0, 1000)
    angles = jax.jit(jax.vmap(final_angle))(lengths)
    for i in (0, 500, 999):
        assert float(angles[i]) == pytest.approx(float(final_angle(lengths[i])), abs=1e-12)
    g = jax.grad(final_angle)(1.0)
    fd = (final_angle(1.0 + 1e-6) - final_angle(1.0 - 1e-6)) / 2e-6
    assert float(g) == pytest.approx(float(fd), rel=1e-5)


class Owned(ecs.EcsSystem):
    owner: int

    def configure(self, world):
        return world.create_component(self.owner, "mass", jnp.asarray(3.0))


def test_system_owner_entity_is_checked_and_given_to_configure():
    """gz-sim: a system is attached to an entity (ISystemConfigure::Configure receives it)."""
    w = world4()
    w, e = w.create_entity()
    w = ecs.configure(w, [Owned(owner=e)])
    assert float(w.component(e, "mass")) == 3.0
    with pytest.raises(js.JaxsysError, match="owner entity 3 does not exist"):
        ecs.configure(w, [Owned(owner=3)])


class _Counter(ecs.EcsSystem):
    """Counts its updates into its owner's "mass" (or, owned by the world, into entity 0's)."""

    owner: int
    counts_into: int

    def update(self, info, world):
        return world.create_component(self.counts_into, "mass", world.component(self.counts_into, "mass") + 1.0)

    def post_update(self, info, view):
        return jnp.asarray(1.0)


class _Remover(ecs.EcsSystem):
    target: int

    def update(self, info, world):
        return jax.lax.cond(
            info.iterations == 3, lambda w: w.request_remove_entity(self.target, recursive=False), lambda w: w, world
        )


@pytest.mark.parametrize("x64", [True, False])
def test_systems_of_a_removed_entity_stop(x64):
    """Issue #38 item 3, gz-sim src/SystemManager.cc (ProcessRemovedEntities: the systems whose parent
    entity is removed are removed) and test/integration/entity_system.cc: two systems owned by a box,
    the box removed in step 3: they ran 3 times (was: 6 of 6), a world system all 6; their post_update
    outputs are zeros once gone. Under jit and vmap over worlds too."""
    with jax.enable_x64(x64):
        w = world4()
        w, ground = w.create_entity()
        w, box = w.create_entity()
        w = w.create_component(ground, "mass", jnp.asarray(0.0))
        systems = [
            _Counter(owner=box, counts_into=ground),
            _Counter(owner=box, counts_into=ground),
            _Counter(owner=ecs.NULL_ENTITY, counts_into=ground),
            _Remover(target=box),
        ]
        final, _, outs = ecs.run(w, systems, 6)
        # steps 1-3: three counters; steps 4-6 (box removed at the end of step 3): the world's only
        assert float(final.component(ground, "mass")) == 3 * 3 + 3
        np.testing.assert_array_equal(np.asarray(outs[0]), [1, 1, 1, 0, 0, 0])
        np.testing.assert_array_equal(np.asarray(outs[2]), [1, 1, 1, 1, 1, 1])
        worlds = jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), w)
        finals, _, _ = jax.jit(jax.vmap(lambda ww: ecs.run(ww, systems, 6)))(worlds)
        np.testing.assert_array_equal(finals.components["mass"].data[:, 0], [12.0, 12.0])


class _WithConfigure(ecs.EcsSystem):
    owner: int

    def configure(self, world):
        return world.create_component(self.owner, "mass", jnp.asarray(7.0))


def test_system_manager_restates_gz_pending_and_active_systems():
    """Issue #38 item 6, gz-sim src/SystemManager_TEST.cc: AddSystem makes a system pending (counts
    active 0, pending 1, total 1; no phase view lists it; TotalByEntity finds it; no configure without
    an ECM); ActivatePendingSystems makes it active (1, 0, 1; SystemsConfigure lists it); a second
    system with updates added: 1 active, 1 pending, 2 total. ecs.run activates pending systems at its
    start, so a system added between runs joins at the next run's first step."""
    w = world4()
    w, e = w.create_entity()
    w, f = w.create_entity()
    w = w.create_component(e, "mass", jnp.asarray(0.0)).end_of_step()
    mgr = ecs.SystemManager()
    assert (mgr.active_count(), mgr.pending_count(), mgr.total_count()) == (0, 0, 0)
    config = _WithConfigure(owner=f)
    assert mgr.add_system(config) is None  # (no world: no configuration)
    assert (mgr.active_count(), mgr.pending_count(), mgr.total_count()) == (0, 1, 1)
    assert mgr.systems_configure() == [] and mgr.systems_update() == [] and mgr.systems_post_update() == []
    assert mgr.total_by_entity(f) == [config]
    assert mgr.activate_pending_systems() == 1
    assert (mgr.active_count(), mgr.pending_count(), mgr.total_count()) == (1, 0, 1)
    assert mgr.systems_configure() == [config] and mgr.systems_update() == []
    counter = _Counter(owner=ecs.NULL_ENTITY, counts_into=e)
    w = mgr.add_system(counter, w)
    assert (mgr.active_count(), mgr.pending_count(), mgr.total_count()) == (1, 1, 2)
    # the counter joins at the run's first step
    w, info, outs = ecs.run(w, mgr, 3)
    assert float(w.component(e, "mass")) == 3.0 and mgr.systems_update() == [counter]
    # added between runs: counts from the next run on
    w = mgr.add_system(_Counter(owner=ecs.NULL_ENTITY, counts_into=e), w)
    w, info, _ = ecs.run(w, mgr, 2, info=info)
    assert float(w.component(e, "mass")) == 3.0 + 2 * 2
    # configured against a world: its configure ran (the owner's mass)
    w2 = mgr.add_system(_WithConfigure(owner=f), w)
    assert float(w2.component(f, "mass")) == 7.0
    # the systems of a removed owner are dropped (gz-sim ProcessRemovedEntities)
    w3 = w2.request_remove_entity(f).end_of_step()
    mgr.activate_pending_systems()
    assert mgr.process_removed_entities(w3) == 2 and mgr.total_by_entity(f) == []


class _Recreator(ecs.EcsSystem):
    target: int

    def update(self, info, world):
        return jax.lax.cond(info.iterations == 2, lambda w: w.request_recreate(self.target), lambda w: w, world)

    def post_update(self, info, view):
        return jnp.stack([view.count(["pos"]), jnp.sum(view.each_removed(["pos"])), jnp.sum(view.each_new(["pos"]))])


def test_recreate_restates_gz_recreate_component():
    """Issue #38 item 6, gz-sim components::Recreate handled by SimulationRunner
    (ProcessRecreateEntitiesRemove / Create, test/integration/recreate_entities.cc): the model and its
    children are removed and re-created with new entity ids, the same parent and components."""
    w = ecs.World.empty(8, {"pos": jnp.zeros(2), "mass": jnp.zeros(())})
    w, ground = w.create_entity()
    w, model = w.create_entity(parent=ground)
    w = w.create_component(model, "pos", jnp.array([1.0, 2.0]))
    w, link = w.create_entity(parent=model)
    w = w.create_component(link, "mass", jnp.asarray(4.0)).end_of_step()
    systems = [_Recreator(target=model)]
    for run in (lambda ww: ecs.run(ww, systems, 4), jax.jit(lambda ww: ecs.run(ww, systems, 4))):
        final, _, (out,) = run(w)
        # the step after the request sees the copy new and the original being removed, then the copy
        np.testing.assert_array_equal(out[:, 0], [1, 1, 2, 1])
        np.testing.assert_array_equal(out[:, 1], [0, 0, 1, 0])
        np.testing.assert_array_equal(out[:, 2], [0, 0, 1, 0])
        assert not bool(final.exists(model)) and not bool(final.exists(link))
        kids = np.flatnonzero((np.asarray(final.parent) == int(ground)) & np.asarray(final.alive))
        assert len(kids) == 1
        copy = int(final.handles()[kids[0]])
        assert copy != int(model)
        np.testing.assert_array_equal(final.component(copy, "pos"), [1.0, 2.0])
        grand = np.flatnonzero((np.asarray(final.parent) == copy) & np.asarray(final.alive))
        assert float(final.component(int(final.handles()[grand[0]]), "mass")) == 4.0
        assert int(jnp.sum(final.alive)) == 3


class _CountPos(ecs.EcsSystem):
    def post_update(self, info, view):
        return jnp.stack([view.count(["pos"]), jnp.sum(view.each_new(["pos"]))])


def test_recreate_requested_before_the_run_eager_and_traced():
    """A recreation asked for on the world between runs is carried out before the run's first pass,
    whether the world is known (eager) or traced (inside jit: decided at run time, and not paid for
    when none was asked); without a request the world runs unchanged."""
    w = ecs.World.empty(6, {"pos": jnp.zeros(2)})
    w, ground = w.create_entity()
    w, model = w.create_entity(parent=ground)
    w = w.create_component(model, "pos", jnp.array([1.0, 2.0])).end_of_step()
    asked = w.request_recreate(model)
    for run in (lambda ww: ecs.run(ww, [_CountPos()], 2), jax.jit(lambda ww: ecs.run(ww, [_CountPos()], 2))):
        final, _, (out,) = run(asked)
        np.testing.assert_array_equal(out[:, 0], [2, 1])  # the copy, new, beside the original being removed
        np.testing.assert_array_equal(out[:, 1], [1, 0])
        assert not bool(final.exists(model)) and int(jnp.sum(final.alive)) == 2
        copy = int(
            final.handles()[np.flatnonzero((np.asarray(final.parent) == int(ground)) & np.asarray(final.alive))[0]]
        )
        np.testing.assert_array_equal(final.component(copy, "pos"), [1.0, 2.0])
        final, _, (out,) = run(w)
        np.testing.assert_array_equal(out[:, 0], [1, 1])
        assert bool(final.exists(model))


def test_a_false_pause_request_is_no_request():
    """Issue #36 item 9: a watchdog calling `world.request_pause(condition)` every step un-paused the world
    on the step after its condition held (a traced False meant "play"). False is no request now; play is
    `request_play()`."""

    class Watchdog(ecs.EcsSystem):
        def update(self, info, world):
            world = world.request_pause(info.iterations == 2)  # every step: True once, False otherwise
            return world.request_play(info.iterations == 100)  # never: no request

        def post_update(self, info, view):
            return info.paused

    _, _, (paused,) = ecs.run(world4(), [Watchdog()], 6, step_size=0.001)
    np.testing.assert_array_equal(paused, [False, False, True, True, True, True])

    class Resume(ecs.EcsSystem):
        def update(self, info, world):
            return world.request_play(info.paused)

        def post_update(self, info, view):
            return info.paused

    _, _, (paused,) = ecs.run(world4(), [Resume()], 3, step_size=0.001, paused=True)
    np.testing.assert_array_equal(paused, [True, False, False])
