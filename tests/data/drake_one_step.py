"""Drake reference values for tests/test_one_step.py (issue #35): AdvancePendingEvents and AdvanceTo.

Run with pydrake (pip install drake; these numbers: drake 1.58.0, Python 3.11, Linux x86_64):

    python tests/data/drake_one_step.py

Prints, for fixed-step RK2 (h = 0.2) and error-controlled RK3 (max step 0.2, accuracy 1e-3), the steps
taken and the per-step publish log after Initialize; AdvanceTo(0.1); AdvancePendingEvents();
AdvanceTo(0.1); AdvanceTo(0.2) for x' = 1 with a counter updated every 0.1 s. Output (drake 1.58.0):

    fixed after AdvanceTo(0.1) 1 [0.0, 1.0]
    fixed after AdvancePendingEvents 2 [0.0, 1.0, 2.0]
    fixed after AdvanceTo(0.1) again 3 [0.0, 1.0, 2.0, 2.0]
    fixed after AdvanceTo(0.2) 4 [0.0, 1.0, 2.0, 2.0, 2.0]
    error-controlled after AdvanceTo(0.1) 2 [0.0, 1.0, 1.0]
    error-controlled after AdvancePendingEvents 3 [0.0, 1.0, 1.0, 2.0]
    error-controlled after AdvanceTo(0.1) again 4 [0.0, 1.0, 1.0, 2.0, 2.0]
    error-controlled after AdvanceTo(0.2) 5 [0.0, 1.0, 1.0, 2.0, 2.0, 2.0]
"""

from pydrake.systems.analysis import ResetIntegratorFromFlags, Simulator
from pydrake.systems.framework import EventStatus, LeafSystem


class Counter(LeafSystem):
    def __init__(self):
        super().__init__()
        self.DeclareContinuousState(1)
        self.DeclareDiscreteState(1)
        self.DeclarePeriodicDiscreteUpdateEvent(0.1, 0.0, self.update)
        self.DeclarePerStepPublishEvent(self.publish)
        self.log = []

    def update(self, context, discrete_state):
        discrete_state.set_value([context.get_discrete_state_vector()[0] + 1.0])

    def publish(self, context):
        self.log.append(context.get_discrete_state_vector()[0])
        return EventStatus.Succeeded()

    def DoCalcTimeDerivatives(self, context, derivatives):
        derivatives.get_mutable_vector().SetFromVector([1.0])


for name in ["fixed", "error-controlled"]:
    s = Counter()
    sim = Simulator(s)
    if name == "fixed":
        ResetIntegratorFromFlags(sim, "runge_kutta2", 0.2)
    else:
        ResetIntegratorFromFlags(sim, "runge_kutta3", 0.2).set_target_accuracy(1e-3)
    sim.Initialize()
    for what, t in [
        ("AdvanceTo(0.1)", 0.1),
        ("AdvancePendingEvents", None),
        ("AdvanceTo(0.1) again", 0.1),
        ("AdvanceTo(0.2)", 0.2),
    ]:
        if t is None:
            sim.AdvancePendingEvents()
        else:
            sim.AdvanceTo(t)
        print(name, "after", what, sim.get_num_steps_taken(), s.log)
