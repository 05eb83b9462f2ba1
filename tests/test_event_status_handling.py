"""Drake's EventStatusReturnHandlingForInitialize / ForAdvanceTo, restated (issue #37 item 2).

Drake's systems/analysis/test/simulator_test.cc (EventStatusTestSystem): a leaf with two of each event
(initialization unrestricted, discrete and publish; per-step publish; periodic unrestricted, discrete
and publish every 0.5 s from 0), each returning a chosen severity. Drake logs the order handlers ran
in; jaxsys traces them, so what is restated is what a Simulator user observes: which dispatches are
counted (get_num_unrestricted_updates / discrete / publishes), the status and its message, what is
raised, the time and the steps taken -- with Drake's numbers for each scenario.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import pytest

import jaxsys as js


S, N, T, F = "succeeded", "did_nothing", "terminated", "failed"


class EventStatusTestSystem(js.LeafSystem):
    """Two events of each kind (0 and 1), each returning the severity ``severities`` gives it (default
    succeeded); a status's message names the event, as Drake's test system's does."""

    severities: tuple = eqx.field(static=True)

    def __init__(self, severities: dict | None = None) -> None:
        super().__init__("my_event_system")
        self.severities = tuple(sorted((severities or {}).items()))
        self.declare_continuous_state(1)
        self.declare_discrete_state(1)
        for which in (0, 1):
            self.declare_initialization_unrestricted_update_event(self._update("initialization", "unrestricted", which))
            self.declare_initialization_discrete_update_event(self._update("initialization", "discrete", which))
            self.declare_initialization_publish_event(self._publish("initialization", which))
            self.declare_per_step_publish_event(self._publish("per-step", which))
            self.declare_periodic_unrestricted_update_event(0.5, 0.0, self._update("periodic", "unrestricted", which))
            self.declare_periodic_discrete_update_event(0.5, 0.0, self._update("periodic", "discrete", which))
            self.declare_periodic_publish_event(0.5, 0.0, self._publish("periodic", which))

    def _status(self, key: tuple[str, str, int]) -> js.EventStatus:
        severity = dict(self.severities).get(key, S)
        name = f"{key[0]} {key[1]} event {key[2]}"
        if severity == N:
            return js.EventStatus.did_nothing()
        if severity == T:
            return js.EventStatus.reached_termination(message=f"{name} terminated")
        if severity == F:
            return js.EventStatus.failed(message=f"{name} failed")
        return js.EventStatus.succeeded()

    def _update(self, trigger: str, kind: str, which: int):
        def handler(context, state):
            return self._status((trigger, f"{kind} update", which))

        return handler

    def _publish(self, trigger: str, which: int):
        def handler(context):
            return self._status((trigger, "publish", which))

        return handler

    def do_calc_time_derivatives(self, context):
        return jnp.zeros((1,), context.get_time().dtype)


def _counts(sim: js.Simulator) -> tuple[int, int, int]:
    return sim.get_num_unrestricted_updates(), sim.get_num_discrete_updates(), sim.get_num_publishes()


INIT = {  # Drake's EventStatusReturnHandlingForInitialize, start time 0.125
    "baseline": ({}, (1, 1, 1), "boundary", None),
    "all did nothing": (
        {
            k: N
            for k in [
                ("initialization", "unrestricted update", 0),
                ("initialization", "unrestricted update", 1),
                ("initialization", "discrete update", 0),
                ("initialization", "discrete update", 1),
                ("initialization", "publish", 0),
                ("initialization", "publish", 1),
                ("per-step", "publish", 0),
                ("per-step", "publish", 1),
            ]
        },
        (0, 0, 0),
        "boundary",
        None,
    ),
    "2nd unrestricted fails": (
        {("initialization", "unrestricted update", 1): F},
        (0, 0, 0),
        "raises",
        "unrestricted update event 1 failed",
    ),
    "2nd unrestricted terminates": (
        {("initialization", "unrestricted update", 1): T},
        (1, 1, 0),
        "terminated",
        "unrestricted update event 1 terminated",
    ),
    "termination then a failed discrete update": (
        {("initialization", "unrestricted update", 1): T, ("initialization", "discrete update", 0): F},
        (1, 0, 0),
        "raises",
        "discrete update event 0 failed",
    ),
    "1st publish terminates": (
        {("initialization", "publish", 0): T},
        (1, 1, 1),
        "terminated",
        "publish event 0 terminated",
    ),
    "1st publish fails": ({("initialization", "publish", 0): F}, (1, 1, 0), "raises", "publish event 0 failed"),
    "both publishes fail: the first is reported": (
        {("initialization", "publish", 0): F, ("initialization", "publish", 1): F},
        (1, 1, 0),
        "raises",
        "initialization publish event 0 failed",
    ),
}


@pytest.mark.parametrize("scenario", list(INIT))
def test_event_status_return_handling_for_initialize(scenario):
    severities, counts, outcome, message = INIT[scenario]
    system = EventStatusTestSystem(severities)
    sim = js.Simulator(system, system.create_default_context().with_time(0.125))
    if outcome == "raises":
        with pytest.raises(js.JaxsysError, match=f"Simulator stopped.*{message}"):
            sim.initialize()
    else:
        status = sim.initialize()
        assert status.succeeded() == (outcome == "boundary")
        if outcome == "terminated":
            assert status.reached_termination() and status.message() == f"initialization {message}"
            assert status.format_message().startswith("Simulator returned early")
    assert _counts(sim) == counts
    assert float(sim.get_context().get_time()) == 0.125


ADVANCE = {  # Drake's EventStatusReturnHandlingForAdvanceTo: RK2, h = 0.5, from 0.125 to 0.75
    "baseline": ({}, (1, 1, 2), "boundary", 0.75, 2),
    "2nd periodic unrestricted fails": ({("periodic", "unrestricted update", 1): F}, (0, 0, 1), "raises", None, None),
    "periodic publish terminates": ({("periodic", "publish", 0): T}, (0, 0, 1), "terminated", 0.5, 1),
    "2nd periodic unrestricted terminates": (
        {("periodic", "unrestricted update", 1): T},
        (1, 1, 1),
        "terminated",
        0.5,
        1,
    ),
}


@pytest.mark.parametrize("scenario", list(ADVANCE))
def test_event_status_return_handling_for_advance_to(scenario):
    severities, counts, outcome, t_end, steps = ADVANCE[scenario]
    system = EventStatusTestSystem(severities)
    sim = js.Simulator(
        system, system.create_default_context().with_time(0.125), js.RungeKutta2Integrator(max_step_size=0.5)
    )
    sim.initialize()
    sim.reset_statistics()
    if outcome == "raises":
        with pytest.raises(js.JaxsysError, match="Simulator stopped.*periodic unrestricted update event 1 failed"):
            sim.advance_to(0.75)
    else:
        status = sim.advance_to(0.75)
        assert status.succeeded() == (outcome == "boundary")
        assert float(sim.get_context().get_time()) == pytest.approx(t_end, abs=1e-12)
        assert sim.get_num_steps_taken() == steps
        if outcome == "terminated":
            assert status.return_time() == pytest.approx(0.5, abs=1e-12)
    assert _counts(sim) == counts
    if scenario == "periodic publish terminates":
        # the periodic updates left pending are handled by AdvancePendingEvents: a zero-length step
        sim.advance_pending_events()
        assert _counts(sim) == (1, 1, 2) and sim.get_num_steps_taken() == 2
