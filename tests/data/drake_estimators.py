"""Reference numbers for jaxsys's controllers and estimators (tests/test_estimators.py), from pydrake.

Run with pydrake installed (Drake 1.58.0 from PyPI was used): python tests/data/drake_estimators.py
writes tests/data/X7_estimators.json. Floats are round-trip exact (repr)."""

import json
import pathlib

import numpy as np
from pydrake.math import DiscreteAlgebraicRiccatiEquation
from pydrake.systems.analysis import Simulator
from pydrake.systems.controllers import DiscreteTimeLinearQuadraticRegulator
from pydrake.systems.estimators import DiscreteTimeSteadyStateKalmanFilter, LuenbergerObserver, SteadyStateKalmanFilter
from pydrake.systems.framework import DiagramBuilder
from pydrake.systems.primitives import ConstantVectorSource, LinearSystem


out = {"header": "Drake 1.58.0 (pydrake, PyPI), double precision; see drake_estimators.py"}

# a discretized double integrator with drag, h = 0.1
h = 0.1
A = np.array([[1.0, h], [0.0, 1.0 - 0.1 * h]])
B = np.array([[0.5 * h * h], [h]])
Q = np.diag([1.0, 0.5])
R = np.array([[0.2]])
N = np.array([[0.05], [0.0]])
S = DiscreteAlgebraicRiccatiEquation(A, B, Q, R)
K, S2 = DiscreteTimeLinearQuadraticRegulator(A, B, Q, R)
out["dlqr"] = {"A": A.tolist(), "B": B.tolist(), "Q": Q.tolist(), "R": R.tolist(), "S": S.tolist(), "K": K.tolist()}
KN, SN = DiscreteTimeLinearQuadraticRegulator(A, B, Q, R, N)
out["dlqr"]["N"] = N.tolist()
out["dlqr"]["K_N"] = KN.tolist()
out["dlqr"]["S_N"] = SN.tolist()

# steady-state Kalman filters: a continuous oscillator with damping, position measured
Ac = np.array([[0.0, 1.0], [-4.0, -0.4]])
Cc = np.array([[1.0, 0.0]])
W = np.diag([0.01, 0.1])
V = np.array([[0.05]])
out["kalman"] = {
    "A": Ac.tolist(),
    "C": Cc.tolist(),
    "W": W.tolist(),
    "V": V.tolist(),
    "L_continuous": SteadyStateKalmanFilter(Ac, Cc, W, V).tolist(),
    "A_discrete": A.tolist(),
    "C_discrete": [[1.0, 0.0]],
    "L_discrete": DiscreteTimeSteadyStateKalmanFilter(A, np.array([[1.0, 0.0]]), W, V).tolist(),
}

# a Luenberger observer on the oscillator (with an input): plant from x0 = [1, 0], observer from 0
Bc = np.array([[0.0], [1.0]])
L = np.array([[2.0], [3.0]])
builder = DiagramBuilder()
plant = builder.AddSystem(LinearSystem(Ac, Bc, Cc, np.zeros((1, 1))))
u = builder.AddSystem(ConstantVectorSource([0.5]))
plant_ctx = plant.CreateDefaultContext()
plant.get_input_port().FixValue(plant_ctx, [0.0])
obs = builder.AddSystem(LuenbergerObserver(plant, plant_ctx, L))
builder.Connect(u.get_output_port(), plant.get_input_port())
builder.Connect(u.get_output_port(), obs.get_observed_system_input_input_port())
builder.Connect(plant.get_output_port(), obs.get_observed_system_output_input_port())
diagram = builder.Build()
sim = Simulator(diagram)
ctx = sim.get_mutable_context()
plant.GetMyMutableContextFromRoot(ctx).SetContinuousState([1.0, 0.0])
sim.get_mutable_integrator().set_target_accuracy(1e-10)
samples = []
for t in [0.5, 1.0, 2.0, 3.0]:
    sim.AdvanceTo(t)
    x = plant.GetMyContextFromRoot(ctx).get_continuous_state_vector().CopyToVector()
    xh = obs.get_estimated_state_output_port().Eval(obs.GetMyContextFromRoot(ctx))
    samples.append({"t": t, "x": x.tolist(), "xhat": np.asarray(xh).tolist()})
out["luenberger"] = {"B": Bc.tolist(), "L": L.tolist(), "u": 0.5, "x0": [1.0, 0.0], "samples": samples}

# finite-horizon LQR on a damped double integrator about the origin: S and K at several times
from pydrake.systems.controllers import (
    FiniteHorizonLinearQuadraticRegulator,
    FiniteHorizonLinearQuadraticRegulatorOptions,
)


Adi = np.array([[0.0, 1.0], [0.0, -0.2]])
Bdi = np.array([[0.0], [1.0]])
di = LinearSystem(Adi, Bdi, np.eye(2), np.zeros((2, 1)))
dctx = di.CreateDefaultContext()
di.get_input_port().FixValue(dctx, [0.0])
opts = FiniteHorizonLinearQuadraticRegulatorOptions()
opts.Qf = np.diag([10.0, 1.0])
fh = FiniteHorizonLinearQuadraticRegulator(di, dctx, 0.0, 2.0, np.eye(2), np.array([[0.5]]), opts)
fh_times = [0.0, 0.5, 1.0, 1.5, 1.9]
out["fhlqr"] = {
    "A": Adi.tolist(),
    "B": Bdi.tolist(),
    "Q": np.eye(2).tolist(),
    "R": [[0.5]],
    "Qf": opts.Qf.tolist(),
    "t0": 0.0,
    "tf": 2.0,
    "times": fh_times,
    "S": [fh.S.value(t).tolist() for t in fh_times],
    "K": [fh.K.value(t).tolist() for t in fh_times],
}

path = pathlib.Path(__file__).with_name("X7_estimators.json")
path.write_text(json.dumps(out, indent=1))
print("wrote", path)
