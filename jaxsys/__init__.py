"""jaxsys: Drake's systems framework rebuilt on JAX.

Systems are immutable pytrees (``equinox.Module``); a :class:`Context` holds time, state,
parameters and inputs and is passed in and returned; simulation is a jit-compiled loop that
``jax.grad``, ``jax.jvp`` and ``jax.vmap`` go through.
"""

from . import ecs as ecs, examples as examples, plotting as plotting, primitives as primitives
from .analysis.batch import (
    BatchResult as BatchResult,
    Normal as Normal,
    Uniform as Uniform,
    batch_simulate as batch_simulate,
    randomize_contexts as randomize_contexts,
    shard_batch as shard_batch,
    stack_contexts as stack_contexts,
)
from .analysis.event_loop import (
    PublishLog as PublishLog,
    advance_pending_events as advance_pending_events,
)
from .analysis.fitting import (
    FitParameter as FitParameter,
    FitResult as FitResult,
    fit_parameters as fit_parameters,
    set_parameters as set_parameters,
    trajectory_loss as trajectory_loss,
)
from .analysis.ilqr import ILQRResult as ILQRResult, ilqr as ilqr, ilqr_solve as ilqr_solve
from .analysis.integrators import (
    ALL_INTEGRATORS as ALL_INTEGRATORS,
    BogackiShampine3Integrator as BogackiShampine3Integrator,
    ExplicitEulerIntegrator as ExplicitEulerIntegrator,
    ImplicitEulerIntegrator as ImplicitEulerIntegrator,
    IntegratorBase as IntegratorBase,
    Radau1Integrator as Radau1Integrator,
    RadauIntegrator as RadauIntegrator,
    RungeKutta2Integrator as RungeKutta2Integrator,
    RungeKutta3Integrator as RungeKutta3Integrator,
    RungeKutta4Integrator as RungeKutta4Integrator,
    RungeKutta5Integrator as RungeKutta5Integrator,
    SemiExplicitEulerIntegrator as SemiExplicitEulerIntegrator,
)
from .analysis.linearize import (
    NotEquilibriumError as NotEquilibriumError,
    continuous_algebraic_riccati as continuous_algebraic_riccati,
    controllability_matrix as controllability_matrix,
    discrete_algebraic_riccati_equation as discrete_algebraic_riccati_equation,
    discrete_time_linear_quadratic_regulator as discrete_time_linear_quadratic_regulator,
    first_order_taylor_approximation as first_order_taylor_approximation,
    is_controllable as is_controllable,
    is_detectable as is_detectable,
    is_observable as is_observable,
    is_stabilizable as is_stabilizable,
    linear_quadratic_regulator as linear_quadratic_regulator,
    linear_quadratic_regulator_system as linear_quadratic_regulator_system,
    linearize as linearize,
    observability_matrix as observability_matrix,
)
from .analysis.monte_carlo import (
    MonteCarloResult as MonteCarloResult,
    monte_carlo_simulation as monte_carlo_simulation,
    random_simulation as random_simulation,
)
from .analysis.nlp import (
    augmented_lagrangian as augmented_lagrangian,
    slsqp as slsqp,
    solve_nlp as solve_nlp,
)
from .analysis.progress import (
    AbstractProgressMeter as AbstractProgressMeter,
    NoProgressMeter as NoProgressMeter,
    TqdmProgressMeter as TqdmProgressMeter,
)
from .analysis.simulator import (
    STATUS_MESSAGES as STATUS_MESSAGES,
    IntegratorStatistics as IntegratorStatistics,
    SimulationResult as SimulationResult,
    Simulator as Simulator,
    SimulatorStatistics as SimulatorStatistics,
    SimulatorStatus as SimulatorStatus,
    SimulatorStatusReason as SimulatorStatusReason,
    Status as Status,
    simulate as simulate,
)
from .analysis.trajopt import (
    TrajOptResult as TrajOptResult,
    direct_collocation as direct_collocation,
    direct_shooting as direct_shooting,
    simulate_open_loop as simulate_open_loop,
)
from .framework.constraints import (
    SystemConstraint as SystemConstraint,
    SystemConstraintIndex as SystemConstraintIndex,
)
from .framework.context import (
    AbstractValues as AbstractValues,
    Context as Context,
    ContinuousState as ContinuousState,
    DiagramContext as DiagramContext,
    DiscreteValues as DiscreteValues,
    LeafContext as LeafContext,
    Parameters as Parameters,
    State as State,
    SystemOutput as SystemOutput,
    default_float_dtype as default_float_dtype,
    ravel_context as ravel_context,
)
from .framework.diagram import Diagram as Diagram
from .framework.diagram_builder import DiagramBuilder as DiagramBuilder
from .framework.errors import (
    AlgebraicLoopError as AlgebraicLoopError,
    ConstraintError as ConstraintError,
    DeclarationError as DeclarationError,
    DiagramBuildError as DiagramBuildError,
    InputPortNotConnectedError as InputPortNotConnectedError,
    JaxsysError as JaxsysError,
    MissingOverrideError as MissingOverrideError,
    PortError as PortError,
    StateError as StateError,
    SystemMismatchError as SystemMismatchError,
)
from .framework.event_status import EventStatus as EventStatus
from .framework.events import (
    CompositeEventCollection as CompositeEventCollection,
    Event as Event,
    EventCollection as EventCollection,
    TriggerType as TriggerType,
)
from .framework.leaf_system import (
    AbstractParameterIndex as AbstractParameterIndex,
    AbstractStateIndex as AbstractStateIndex,
    ContinuousStateIndex as ContinuousStateIndex,
    DiscreteStateIndex as DiscreteStateIndex,
    LeafSystem as LeafSystem,
    NumericParameterIndex as NumericParameterIndex,
)
from .framework.ports import InputPort as InputPort, OutputPort as OutputPort
from .framework.system import ConstraintReport as ConstraintReport, System as System
from .framework.witness import (
    DiscreteUpdateEvent as DiscreteUpdateEvent,
    PublishEvent as PublishEvent,
    UnrestrictedUpdateEvent as UnrestrictedUpdateEvent,
    WitnessFunction as WitnessFunction,
    WitnessFunctionDirection as WitnessFunctionDirection,
)
from .plotting import (
    plot_log as plot_log,
    plot_result as plot_result,
    plot_system as plot_system,
    record_outputs as record_outputs,
)
from .primitives import (
    Adder as Adder,
    AffineSystem as AffineSystem,
    ConstantValueSource as ConstantValueSource,
    ConstantVectorSource as ConstantVectorSource,
    Demultiplexer as Demultiplexer,
    DiscreteDerivative as DiscreteDerivative,
    DiscretePidController as DiscretePidController,
    DiscreteTimeDelay as DiscreteTimeDelay,
    ExtendedKalmanFilter as ExtendedKalmanFilter,
    FirstOrderLowPassFilter as FirstOrderLowPassFilter,
    FunctionSystem as FunctionSystem,
    Gain as Gain,
    Integrator as Integrator,
    LinearSystem as LinearSystem,
    LuenbergerObserver as LuenbergerObserver,
    MatrixGain as MatrixGain,
    Multiplexer as Multiplexer,
    PassThrough as PassThrough,
    PidController as PidController,
    PiecewisePolynomial as PiecewisePolynomial,
    PortSwitch as PortSwitch,
    RandomSource as RandomSource,
    Saturation as Saturation,
    Sine as Sine,
    StateInterpolatorWithDiscreteDerivative as StateInterpolatorWithDiscreteDerivative,
    TrajectorySource as TrajectorySource,
    VectorLog as VectorLog,
    VectorLogSink as VectorLogSink,
    VectorSystem as VectorSystem,
    WrapToSystem as WrapToSystem,
    ZeroOrderHold as ZeroOrderHold,
    discrete_time_steady_state_kalman_filter as discrete_time_steady_state_kalman_filter,
    log_vector_output as log_vector_output,
    steady_state_kalman_filter as steady_state_kalman_filter,
)
from .primitives.controllers import (
    FiniteHorizonLQRResult as FiniteHorizonLQRResult,
    finite_horizon_linear_quadratic_regulator as finite_horizon_linear_quadratic_regulator,
    make_finite_horizon_linear_quadratic_regulator as make_finite_horizon_linear_quadratic_regulator,
)
from .primitives.perceptron import MultilayerPerceptron as MultilayerPerceptron
from .primitives.routing import (
    BarycentricMeshSystem as BarycentricMeshSystem,
    Selector as Selector,
    SparseMatrixGain as SparseMatrixGain,
)
from .primitives.time_varying import (
    TimeVaryingAffineSystem as TimeVaryingAffineSystem,
    TimeVaryingLinearSystem as TimeVaryingLinearSystem,
    TrajectoryAffineSystem as TrajectoryAffineSystem,
    TrajectoryLinearSystem as TrajectoryLinearSystem,
)
from .primitives.transfer_function import (
    TransferFunction as TransferFunction,
    state_space_to_transfer_function as state_space_to_transfer_function,
)


__version__ = "0.1.0"
