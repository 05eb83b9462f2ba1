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
from .estimators import (
    ExtendedKalmanFilter as ExtendedKalmanFilter,
    LuenbergerObserver as LuenbergerObserver,
    discrete_time_steady_state_kalman_filter as discrete_time_steady_state_kalman_filter,
    steady_state_kalman_filter as steady_state_kalman_filter,
)
from .function_system import FunctionSystem as FunctionSystem, VectorSystem as VectorSystem
from .linear import AffineSystem as AffineSystem, Integrator as Integrator, LinearSystem as LinearSystem
from .log_sink import VectorLog as VectorLog, VectorLogSink as VectorLogSink, log_vector_output as log_vector_output
from .sources import (
    PiecewisePolynomial as PiecewisePolynomial,
    RandomSource as RandomSource,
    TrajectorySource as TrajectorySource,
)
