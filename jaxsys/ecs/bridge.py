"""A jaxsys System (a Diagram or a LeafSystem) as the physics of an ECS world."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from ..analysis.integrators import IntegratorBase, RungeKutta4Integrator
from ..framework.context import Context
from ..framework.errors import JaxsysError
from ..framework.system import System
from .systems import PHYSICS_PRIORITY, EcsSystem, UpdateInfo
from .world import World


class DiagramPhysics(EcsSystem):
    """An Update-phase system that advances ``plant`` for every entity with component
    ``state_component`` (the plant's continuous state vector), reading its input port from
    ``input_component`` (if given), with ``substeps`` fixed steps of ``integrator`` per world step.

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

        def advance(x: Any, *u: Any) -> Any:
            ctx = self.context
            if u:
                ctx = self.plant.get_input_port(0).fix_value(ctx, u[0])
            f = self.plant._derivative_function(ctx)

            def sub(k: int, x: Any) -> Any:
                return self.integrator.attempt_step(f, t_start + k * h, x, h, {"rolled": False})[0]

            return jax.lax.fori_loop(0, self.substeps, sub, jnp.asarray(x))

        return world.apply(names, advance, outputs=[self.state_component])
