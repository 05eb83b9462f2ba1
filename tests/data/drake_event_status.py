"""Drake reference values for issue #14 (event status, termination, monitors, statistics).

Run with pydrake (pip install drake; these numbers: drake 1.58.0, Python 3.11, Linux x86_64):

    python tests/data/drake_event_status.py > tests/data/X6_event_status.json

Each scenario is restated in tests/test_event_status.py with jaxsys; the JSON holds Drake's output.
"""

import json
import math

from pydrake.systems.analysis import Simulator
from pydrake.systems.framework import (
    EventStatus,
    LeafSystem,
    UnrestrictedUpdateEvent,
    WitnessFunctionDirection,
)


G = 9.81


class Ball(LeafSystem):
    """Falling ball (height, velocity); a witness on the height whose unrestricted update reaches
    termination."""

    def __init__(self):
        super().__init__()
        self.DeclareContinuousState(1, 1, 0)
        self.w = self.MakeWitnessFunction(
            "ground",
            WitnessFunctionDirection.kPositiveThenNonPositive,
            lambda c: c.get_continuous_state_vector().GetAtIndex(0),
            UnrestrictedUpdateEvent(self._hit),
        )

    def _hit(self, context, event, state):
        return EventStatus.ReachedTermination(self, "hit ground")

    def DoGetWitnessFunctions(self, context):
        return [self.w]

    def DoCalcTimeDerivatives(self, context, derivatives):
        v = context.get_continuous_state_vector().GetAtIndex(1)
        derivatives.get_mutable_vector().SetFromVector([v, -G])


def ball():
    sys = Ball()
    sim = Simulator(sys)
    ctx = sim.get_mutable_context()
    ctx.SetContinuousState([1.0, 0.0])
    ctx.SetAccuracy(1e-8)
    integ = sim.get_mutable_integrator()
    integ.set_target_accuracy(1e-8)
    integ.set_maximum_step_size(0.1)
    status = sim.AdvanceTo(2.0)
    return dict(
        reason=str(status.reason()),
        return_time=status.return_time(),
        boundary_time=status.boundary_time(),
        message=status.message(),
        context_time=ctx.get_time(),
        state=list(ctx.get_continuous_state_vector().CopyToVector()),
        analytic_time=math.sqrt(2.0 / G),
    )


class Counter(LeafSystem):
    """x' = 1; a periodic discrete update (period 0.25) counting; it fails once x > 0.6
    (``fail``) or reaches termination at the third update (``terminate``) or does nothing on odd
    counts (``did_nothing``)."""

    def __init__(self, mode):
        super().__init__()
        self.mode = mode
        self.DeclareContinuousState(1)
        self.DeclareDiscreteState(1)
        self.DeclarePeriodicDiscreteUpdateEvent(0.25, 0.0, self._update)

    def _update(self, context, discrete_state):
        n = context.get_discrete_state_vector().GetAtIndex(0)
        x = context.get_continuous_state_vector().GetAtIndex(0)
        if self.mode == "fail" and x > 0.6:
            return EventStatus.Failed(None, "x too large")
        if self.mode == "did_nothing" and int(n) % 2 == 1 and context.get_time() > 0.3:
            return EventStatus.DidNothing()
        discrete_state.get_mutable_vector().SetAtIndex(0, n + 1)
        if self.mode == "terminate" and n + 1 >= 3:
            return EventStatus.ReachedTermination(self, "three updates")
        return EventStatus.Succeeded()

    def DoCalcTimeDerivatives(self, context, derivatives):
        derivatives.get_mutable_vector().SetFromVector([1.0])


def counter(mode):
    sys = Counter(mode)
    sim = Simulator(sys)
    sim.get_mutable_integrator().set_maximum_step_size(0.1)
    out = {}
    try:
        status = sim.AdvanceTo(2.0)
        out.update(reason=str(status.reason()), return_time=status.return_time(), message=status.message())
    except RuntimeError as e:
        out.update(error=str(e))
    ctx = sim.get_context()
    out.update(
        context_time=ctx.get_time(),
        x=ctx.get_continuous_state_vector().GetAtIndex(0),
        count=ctx.get_discrete_state_vector().GetAtIndex(0),
        num_discrete_updates=sim.get_num_discrete_updates(),
        num_steps_taken=sim.get_num_steps_taken(),
    )
    return out


class Clock(LeafSystem):
    """x' = 1 with an initialization publish, a per-step publish and a periodic publish (0.25)."""

    def __init__(self):
        super().__init__()
        self.DeclareContinuousState(1)
        self.DeclareInitializationPublishEvent(lambda c: EventStatus.Succeeded())
        self.DeclarePerStepPublishEvent(lambda c: EventStatus.Succeeded())
        self.DeclarePeriodicPublishEvent(0.25, 0.0, lambda c: EventStatus.Succeeded())

    def DoCalcTimeDerivatives(self, context, derivatives):
        derivatives.get_mutable_vector().SetFromVector([1.0])


def monitor_and_counts():
    sys = Clock()
    sim = Simulator(sys)
    integ = sim.get_mutable_integrator()
    integ.set_fixed_step_mode(True)
    integ.set_maximum_step_size(0.1)
    sim.Initialize()
    after_init = dict(num_publishes=sim.get_num_publishes(), num_steps_taken=sim.get_num_steps_taken())
    seen = []

    def monitor(context):
        seen.append(context.get_time())
        if context.get_continuous_state_vector().GetAtIndex(0) > 0.25:
            return EventStatus.ReachedTermination(sys, "x above 0.25")
        return EventStatus.Succeeded()

    sim.set_monitor(monitor)
    status = sim.AdvanceTo(1.0)
    return dict(
        after_init=after_init,
        reason=str(status.reason()),
        return_time=status.return_time(),
        message=status.message(),
        monitor_times=seen,
        num_publishes=sim.get_num_publishes(),
        num_steps_taken=sim.get_num_steps_taken(),
        x=sim.get_context().get_continuous_state_vector().GetAtIndex(0),
    )


class Modes(LeafSystem):
    """x' = +1 in mode 0 and -1 in mode 1; witness 'top' (1 - x, active in mode 0) switches to mode 1,
    witness 'bottom' (x, active in mode 1) switches to mode 0; witness 'middle' (x - 0.5, crossing
    either way, active in mode 0 only) counts its crossings in discrete state 1."""

    def __init__(self):
        super().__init__()
        self.DeclareContinuousState(1)
        self.DeclareDiscreteState(2)  # [mode, middle crossings]
        kinds = WitnessFunctionDirection
        self.top = self.MakeWitnessFunction(
            "top", kinds.kPositiveThenNonPositive, lambda c: 1.0 - self._x(c), UnrestrictedUpdateEvent(self._set(1))
        )
        self.bottom = self.MakeWitnessFunction(
            "bottom", kinds.kPositiveThenNonPositive, lambda c: self._x(c), UnrestrictedUpdateEvent(self._set(0))
        )
        self.middle = self.MakeWitnessFunction(
            "middle", kinds.kCrossesZero, lambda c: self._x(c) - 0.5, UnrestrictedUpdateEvent(self._count)
        )

    @staticmethod
    def _x(c):
        return c.get_continuous_state_vector().GetAtIndex(0)

    def _set(self, mode):
        def handler(context, event, state):
            v = state.get_mutable_discrete_state().get_mutable_vector(0)
            v.SetAtIndex(0, mode)
            return EventStatus.Succeeded()

        return handler

    def _count(self, context, event, state):
        v = state.get_mutable_discrete_state().get_mutable_vector(0)
        v.SetAtIndex(1, v.GetAtIndex(1) + 1)
        return EventStatus.Succeeded()

    def DoGetWitnessFunctions(self, context):
        mode = context.get_discrete_state_vector().GetAtIndex(0)
        return [self.top, self.middle] if mode == 0 else [self.bottom]

    def DoCalcTimeDerivatives(self, context, derivatives):
        mode = context.get_discrete_state_vector().GetAtIndex(0)
        derivatives.get_mutable_vector().SetFromVector([1.0 if mode == 0 else -1.0])


def modes():
    sys = Modes()
    sim = Simulator(sys)
    ctx = sim.get_mutable_context()
    ctx.SetAccuracy(1e-8)
    sim.get_mutable_integrator().set_maximum_step_size(0.1)
    sim.AdvanceTo(3.3)
    return dict(
        time=ctx.get_time(),
        x=ctx.get_continuous_state_vector().GetAtIndex(0),
        mode=ctx.get_discrete_state_vector().GetAtIndex(0),
        middle_crossings=ctx.get_discrete_state_vector().GetAtIndex(1),
        num_unrestricted_updates=sim.get_num_unrestricted_updates(),
    )


if __name__ == "__main__":
    out = dict(
        source="tests/data/drake_event_status.py with pydrake (drake 1.58.0 from PyPI)",
        ball=ball(),
        counter_fail=counter("fail"),
        counter_terminate=counter("terminate"),
        counter_did_nothing=counter("did_nothing"),
        monitor_and_counts=monitor_and_counts(),
        modes=modes(),
    )
    print(json.dumps(out, indent=1, default=float))
