"""Reference outputs of Drake primitives for tests/test_block_library.py, from pydrake.

Run with pydrake installed (Drake 1.58.0 from PyPI was used): python tests/data/drake_primitives.py
writes tests/data/X8_primitives.json. Each scenario: a Sine source (amplitude 1, frequency 2 rad/s,
phase 0.3) into the block, simulated from t = 0 and the block's output read at the listed times."""

import json
import pathlib

import numpy as np
from pydrake.systems.analysis import Simulator
from pydrake.systems.framework import DiagramBuilder
from pydrake.systems.primitives import (
    DiscreteDerivative,
    DiscreteTimeDelay,
    Saturation,
    Sine,
    StateInterpolatorWithDiscreteDerivative,
    WrapToSystem,
    ZeroOrderHold,
)


TIMES = [0.0, 0.05, 0.1, 0.15, 0.25, 0.37, 0.5, 0.99]


def run(block, input_name=None, setup=None):
    builder = DiagramBuilder()
    src = builder.AddSystem(Sine(np.array([1.0]), np.array([2.0]), np.array([0.3])))
    sys = builder.AddSystem(block)
    builder.Connect(src.get_output_port(0), sys.get_input_port(0))
    diagram = builder.Build()
    sim = Simulator(diagram)
    ctx = sim.get_mutable_context()
    if setup is not None:
        setup(sys, sys.GetMyMutableContextFromRoot(ctx))
    sim.Initialize()
    out = []
    for t in TIMES:
        sim.AdvanceTo(t)
        out.append(np.asarray(sys.get_output_port(0).Eval(sys.GetMyContextFromRoot(ctx))).tolist())
    return out


res = {"header": "Drake 1.58.0 (pydrake, PyPI); see drake_primitives.py", "times": TIMES}
res["derivative_suppress"] = run(DiscreteDerivative(1, 0.1, True))
res["derivative_no_suppress"] = run(DiscreteDerivative(1, 0.1, False))
res["delay_3"] = run(DiscreteTimeDelay(0.1, 3, 1))
res["zoh"] = run(ZeroOrderHold(0.1, 1, 0.05))
res["interpolator_initial_position"] = run(
    StateInterpolatorWithDiscreteDerivative(1, 0.1, True),
    setup=lambda s, c: s.set_initial_position(c, [0.5]),  # (pydrake binds only this setter)
)
wrap = WrapToSystem(1)
wrap.set_interval(0, -0.5, 0.5)
res["wrap"] = run(wrap)
res["saturation"] = run(Saturation([-0.4], [0.6]))
# BarycentricMeshSystem: a 3 x 4 mesh, values (index)^1.5, queried inside, on edges and outside
from pydrake.math import BarycentricMesh  # noqa: E402
from pydrake.systems.primitives import BarycentricMeshSystem  # noqa: E402


grid = [[0.0, 1.0, 3.0], [-1.0, 0.0, 2.0, 4.0]]
mesh = BarycentricMesh([set(g) for g in grid])
values = np.arange(12.0).reshape(1, 12) ** 1.5
bsys = BarycentricMeshSystem(mesh, values)
bctx = bsys.CreateDefaultContext()
queries = [[0.5, 0.5], [2.0, -0.5], [0.25, 3.0], [3.0, 4.0], [-1.0, 5.0], [1.7, 1.1], [0.9, 0.1]]
bout = []
for q in queries:
    bsys.get_input_port().FixValue(bctx, q)
    bout.append(bsys.get_output_port().Eval(bctx).tolist())
res["barycentric"] = {"grid": grid, "values": values.tolist(), "queries": queries, "outputs": bout}

path = pathlib.Path(__file__).with_name("X8_primitives.json")
path.write_text(json.dumps(res))
print("wrote", path)
