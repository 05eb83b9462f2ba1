"""Witness functions (Drake's ``WitnessFunction``): scalar functions of the context whose zero
crossings, in a given direction, trigger an event during a simulation.

A LeafSystem declares them with `LeafSystem.declare_witness_function` (or makes one with
``make_witness_function`` and returns it from an overridden ``do_get_witness_functions``). The set
of witness functions is static structure: it is fixed when the simulation is traced.

Imports (within jaxsys): ``events``.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp

from .events import DISCRETE_UPDATE, PUBLISH, UNRESTRICTED_UPDATE, Event, TriggerType


class WitnessFunctionDirection(enum.Enum):
    """Which sign changes trigger (Drake's ``WitnessFunctionDirection``)."""

    NONE = "none"
    POSITIVE_THEN_NON_POSITIVE = "positive_then_non_positive"
    NEGATIVE_THEN_NON_NEGATIVE = "negative_then_non_negative"
    CROSSES_ZERO = "crosses_zero"

    def triggered(self, w0: Any, w1: Any) -> Any:
        """Whether going from value ``w0`` to ``w1`` triggers (elementwise; Drake's ``should_trigger``)."""
        if self is WitnessFunctionDirection.NONE:
            return jnp.zeros(jnp.shape(w0), bool)
        down = (w0 > 0) & (w1 <= 0)
        up = (w0 < 0) & (w1 >= 0)
        if self is WitnessFunctionDirection.POSITIVE_THEN_NON_POSITIVE:
            return down
        if self is WitnessFunctionDirection.NEGATIVE_THEN_NON_NEGATIVE:
            return up
        return down | up


@dataclasses.dataclass(frozen=True, eq=False)
class WitnessFunction:
    """A witness: ``calc(context) -> scalar``, a direction, and the event fired at a crossing."""

    description: str
    direction: WitnessFunctionDirection
    calc: Callable[[Any], Any]
    event: Event | None
    system: Any = None

    def get_description(self) -> str:
        """Drake: ``description``."""
        return self.description

    def direction_type(self) -> WitnessFunctionDirection:
        """Drake: ``direction_type``."""
        return self.direction

    def get_event(self) -> Event | None:
        """The event fired at a triggering crossing (Drake: ``get_event``)."""
        return self.event

    def active_if(self, condition: Any) -> ConditionalWitness:
        """This witness, active only where ``condition`` (a bool, possibly traced) holds: what an
        overridden ``do_get_witness_functions`` returns for a mode-dependent witness (Drake's
        ``DoGetWitnessFunctions`` returns a context-dependent subset; in a traced loop the subset is
        a mask). An inactive witness is not monitored for that step."""
        return ConditionalWitness(self, condition)

    def __repr__(self) -> str:
        where = self.system.get_path() if self.system is not None else "?"
        return f"WitnessFunction({self.description!r}, {self.direction.value}, system={where})"


@dataclasses.dataclass(frozen=True, eq=False)
class ConditionalWitness:
    """A witness function with an activity condition (see `WitnessFunction.active_if`)."""

    witness: WitnessFunction
    condition: Any


def unwrap_witness(item: Any) -> tuple[WitnessFunction, Any]:
    """(witness, activity condition or None) of an item of ``do_get_witness_functions``."""
    if isinstance(item, ConditionalWitness):
        return item.witness, item.condition
    return item, None


def _witness_event(kind: str, callback: Callable[..., Any] | None, name: str) -> Event:
    return Event(kind, TriggerType.WITNESS, callback, name=name)


def PublishEvent(callback: Callable[..., Any], name: str = "") -> Event:  # noqa: N802 - Drake's name
    """A publish event for a witness function: ``callback(context) -> value or None``."""
    return _witness_event(PUBLISH, callback, name)


def DiscreteUpdateEvent(callback: Callable[..., Any], name: str = "") -> Event:  # noqa: N802
    """A discrete-update event for a witness function: ``callback(context, discrete_state)``."""
    return _witness_event(DISCRETE_UPDATE, callback, name)


def UnrestrictedUpdateEvent(callback: Callable[..., Any], name: str = "") -> Event:  # noqa: N802
    """An unrestricted-update event for a witness function: ``callback(context, state) -> State``."""
    return _witness_event(UNRESTRICTED_UPDATE, callback, name)
