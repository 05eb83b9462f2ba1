"""Ready-made blocks (Drake's systems/primitives)."""

from .basic import (
    Adder as Adder,
    ConstantVectorSource as ConstantVectorSource,
    FirstOrderLowPassFilter as FirstOrderLowPassFilter,
    Gain as Gain,
    PassThrough as PassThrough,
)
from .log_sink import (
    VectorLog as VectorLog,
    VectorLogSink as VectorLogSink,
    log_vector_output as log_vector_output,
)
