"""Ready-made blocks (Drake's systems/primitives)."""

from .basic import (
    Adder as Adder,
    ConstantVectorSource as ConstantVectorSource,
    FirstOrderLowPassFilter as FirstOrderLowPassFilter,
    Gain as Gain,
    PassThrough as PassThrough,
)
