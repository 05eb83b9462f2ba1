"""A Gazebo-style entity-component world whose systems run in PreUpdate / Update / PostUpdate phases
(gz-sim's System, UpdateInfo and EntityComponentManager, as pure functions over pytrees)."""

from .bridge import DiagramPhysics as DiagramPhysics
from .systems import (
    DEFAULT_PRIORITY as DEFAULT_PRIORITY,
    PHYSICS_PRIORITY as PHYSICS_PRIORITY,
    POST_PHYSICS_SENSOR_PRIORITY as POST_PHYSICS_SENSOR_PRIORITY,
    PRE_PHYSICS_PRIORITY as PRE_PHYSICS_PRIORITY,
    USER_COMMANDS_PRIORITY as USER_COMMANDS_PRIORITY,
    EcsSystem as EcsSystem,
    RunnerState as RunnerState,
    SystemManager as SystemManager,
    TestFixture as TestFixture,
    UpdateInfo as UpdateInfo,
    configure as configure,
    reset as reset,
    run as run,
    step as step,
    system_order as system_order,
)
from .world import (
    NULL_ENTITY as NULL_ENTITY,
    Column as Column,
    Control as Control,
    World as World,
    WorldView as WorldView,
)


__all__ = [
    "Column",
    "Control",
    "DEFAULT_PRIORITY",
    "DiagramPhysics",
    "EcsSystem",
    "NULL_ENTITY",
    "PHYSICS_PRIORITY",
    "POST_PHYSICS_SENSOR_PRIORITY",
    "PRE_PHYSICS_PRIORITY",
    "RunnerState",
    "SystemManager",
    "TestFixture",
    "USER_COMMANDS_PRIORITY",
    "UpdateInfo",
    "World",
    "WorldView",
    "configure",
    "reset",
    "run",
    "step",
    "system_order",
]
