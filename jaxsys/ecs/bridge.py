"""A jaxsys System (a Diagram or a LeafSystem) as the physics of an ECS world."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp

from ..analysis.integrators import IntegratorBase, RungeKutta4Integrator
from ..analysis.integrators.base import rolled_stages, step_aux
from ..analysis.precision import full_precision
from ..framework.context import Context
from ..framework.dispatch import all_events, timed_leaves
from ..framework.errors import JaxsysError
from ..framework.system import System
from .systems import PHYSICS_PRIORITY, EcsSystem, UpdateInfo
from .world import World


class DiagramPhysics(EcsSystem):
    """An Update-phase system that advances ``plant`` for every entity with component
    ``state_component`` (the plant's continuous state vector), reading its input port from
    ``input_component`` (if given), with ``substeps`` fixed steps of ``integrator`` per world step
    (every integrator works; an implicit method's step whose Newton iteration fails is retried with
    half the step, as in fixed-step ``simulate``, never accepted unconverged).

    The plant's context (parameters, other fixed inputs) is ``context``, a field of this system, so it
    can be batched or differentiated with the world. While paused (dt = 0) the state does not change.
    """

    priority = PHYSICS_PRIORITY

    plant: System
    context: Context
    integrator: IntegratorBase
    state_component: str = eqx.field(static=True)
    input_component: str | None = eqx.field(static=True)
    substeps: int = eqx.field(static=True)

    def __init__(
        self,
        plant: System,
        state_component: str = "state",
        input_component: str | None = None,
        context: Context | None = None,
        integrator: IntegratorBase | None = None,
        substeps: int = 1,
    ) -> None:
        self.plant = plant
        self.context = context if context is not None else plant.create_default_context()
        plant.validate_context(self.context)
        self.integrator = integrator or RungeKutta4Integrator(max_step_size=1.0)
        self.state_component = state_component
        self.input_component = input_component
        self.substeps = int(substeps)
        _check_continuous_only(plant, self.context)
        if input_component is not None and plant.num_input_ports() != 1:
            raise JaxsysError(
                f"DiagramPhysics: input_component needs a plant with exactly one input port; System "
                f"{plant.get_system_id_string()} has {plant.num_input_ports()}."
            )

    def required_components(self) -> tuple[str, ...]:
        return (self.state_component,) + ((self.input_component,) if self.input_component else ())

    def update(self, info: UpdateInfo, world: World) -> World:
        names = self.required_components()
        h = info.dt / self.substeps
        t_start = info.sim_time - info.dt  # sim_time is the time reached after this step

        plant, integrator = self.plant, self.integrator
        if integrator.supports_error_estimation() and not integrator.get_fixed_step_mode():
            # the bridge takes fixed sub-steps: no error estimate (implicit Euler keeps its own step)
            integrator = integrator.with_options(fixed_step_mode=True)

        def advance(x: Any, *u: Any) -> Any:
            ctx = self.context
            if u:
                ctx = plant.get_input_port(0).fix_value(ctx, u[0])
            f = plant.vector_field(ctx)
            x = jnp.asarray(x)
            # what every integrator may need besides f (semi-explicit Euler: the q/v split and N(q));
            # large dynamics (a MuJoCo plant) evaluate Runge-Kutta stages in a loop, as in `simulate`
            rolled = rolled_stages(plant, f, jnp.asarray(t_start, x.dtype), x)
            aux = step_aux(plant, ctx, rolled=rolled)
            if integrator.can_fail():

                def sub_retry(k: int, x: Any) -> Any:
                    return _step_with_retries(plant, integrator, f, t_start + k * h, x, h, aux)

                return jax.lax.fori_loop(0, self.substeps, sub_retry, x)

            # the integrator protocol, as the simulation loops call it: what the method carries (a
            # first-same-as-last stage, a multistep history) goes from sub-step to sub-step and starts
            # afresh each world step (other ECS systems may change the state in between)
            def sub(k: int, carry: Any) -> Any:
                x, istate = carry
                t = t_start + k * h
                res = integrator.step(f, t, x, h, aux, istate, t + h)
                return res.x_new, integrator.next_state(res.proposal, jnp.array(True), jnp.array(False))

            istate, _ = integrator.init(f, jnp.asarray(t_start, x.dtype), x, aux, False)
            return jax.lax.fori_loop(0, self.substeps, sub, (x, istate))[0]

        # (full-precision matrix products, as `simulate`'s runs: a GPU's float32 default is TensorFloat-32)
        with full_precision():
            return world.apply(names, advance, outputs=[self.state_component])


_MAX_HALVINGS = 30


def _check_continuous_only(plant: System, context: Context) -> None:
    """The bridge advances a plant's continuous state only: a plant whose events, witnesses or
    discrete / abstract state would be skipped is refused, naming what it has (never silently frozen
    held values or missed impacts)."""
    kinds = sorted({f"{e.trigger.value} {e.kind.replace('_', ' ')} event" for _, e in all_events(plant)})
    if timed_leaves(plant):
        kinds.append("timed events (do_calc_next_update_time)")
    if plant.get_witness_functions(context):
        kinds.append("witness functions")
    if context.num_discrete_state_groups():
        kinds.append(f"{context.num_discrete_state_groups()} discrete state group(s)")
    if context.num_abstract_states():
        kinds.append(f"{context.num_abstract_states()} abstract state(s)")
    if kinds:
        raise JaxsysError(
            f"DiagramPhysics: System {plant.get_system_id_string()} has {', '.join(kinds)}; the ECS bridge "
            "advances continuous state only (fixed integrator sub-steps of each world step), so these would be "
            "skipped. Simulate the plant with js.simulate / js.Simulator, or model its discrete behaviour as an "
            "ECS system in the PreUpdate or PostUpdate phase."
        )


def _step_with_retries(plant: System, integrator: IntegratorBase, f: Any, t: Any, x: Any, h: Any, aux: Any) -> Any:
    """One world sub-step of an implicit method, covered by integrator steps as Drake's fixed-step
    rule does: a step whose Newton iteration fails is retried with half the step, the next step is
    again the whole remainder; never an unconverged step. More than 30 halvings is an error naming the
    plant (a bounded loop, so worlds stay differentiable)."""
    dtype = jnp.result_type(x)

    def cond(c: Any) -> Any:
        done, _, _, _, halvings = c
        return ~done & (halvings <= _MAX_HALVINGS)

    def body(c: Any) -> Any:
        _, tt, xx, h_try, halvings = c
        remaining = t_end - tt
        hs = jnp.minimum(h_try, remaining)  # the whole remainder, unless a failure halved it
        x_new, _, ok = integrator.attempt_step(f, tt, xx, hs, aux)[:3]
        ok = ok & jnp.all(jnp.isfinite(x_new))
        reaches = hs >= remaining
        return (
            ok & reaches,
            jnp.where(ok, jnp.where(reaches, t_end, tt + hs), tt),
            jnp.where(ok, x_new, xx),
            jnp.where(ok, jnp.inf, 0.5 * hs),
            halvings + (~ok).astype(jnp.int32),
        )

    t0 = jnp.asarray(t, dtype)
    t_end = t0 + jnp.asarray(h, dtype)
    init = (~(t_end > t0), t0, jnp.asarray(x), jnp.full((), jnp.inf, dtype), jnp.zeros((), jnp.int32))
    done, _, x_end, _, _ = eqxi.while_loop(cond, body, init, max_steps=4 * _MAX_HALVINGS, kind="bounded")
    return eqx.error_if(
        x_end,
        ~done & (h > 0),
        f"DiagramPhysics: the implicit integrator's Newton iteration did not converge for System "
        f"{plant.get_system_id_string()} even with the world step halved {_MAX_HALVINGS} times.",
    )
