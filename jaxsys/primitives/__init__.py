"""Ready-made blocks (Drake's systems/primitives and simple controllers)."""

from .basic import (
    Adder as Adder,
    ConstantValueSource as ConstantValueSource,
    ConstantVectorSource as ConstantVectorSource,
    Demultiplexer as Demultiplexer,
    FirstOrderLowPassFilter as FirstOrderLowPassFilter,
    Gain as Gain,
    MatrixGain as MatrixGain,
    Multiplexer as Multiplexer,
    PassThrough as PassThrough,
    PortSwitch as PortSwitch,
    Saturation as Saturation,
    Sine as Sine,
    WrapToSystem as WrapToSystem,
)
from .discrete import (
    DiscreteDerivative as DiscreteDerivative,
    DiscretePidController as DiscretePidController,
    DiscreteTimeDelay as DiscreteTimeDelay,
    PidController as PidController,
    StateInterpolatorWithDiscreteDerivative as StateInterpolatorWithDiscreteDerivative,
    ZeroOrderHold as ZeroOrderHold,
)
from .function_system import FunctionSystem as FunctionSystem, VectorSystem as VectorSystem
from .linear import AffineSystem as AffineSystem, Integrator as Integrator, LinearSystem as LinearSystem
from .log_sink import VectorLog as VectorLog, VectorLogSink as VectorLogSink, log_vector_output as log_vector_output
from .sources import (
    PiecewisePolynomial as PiecewisePolynomial,
    RandomSource as RandomSource,
    TrajectorySource as TrajectorySource,
)


_MOVED = {
    "ExtendedKalmanFilter": "estimators",
    "LuenbergerObserver": "estimators",
    "discrete_time_steady_state_kalman_filter": "estimators",
    "steady_state_kalman_filter": "estimators",
}


def __getattr__(name: str):  # noqa: ANN202 - names that moved out of the block library
    if name in _MOVED:
        import importlib
        import warnings

        warnings.warn(
            f"jaxsys.primitives.{name} moved to jaxsys.{_MOVED[name]}.{name} (also jaxsys.{name}); this path "
            f"will be removed.",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(f"jaxsys.{_MOVED[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
