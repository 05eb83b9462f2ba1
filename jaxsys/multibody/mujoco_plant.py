"""``MujocoPlant``: a multibody plant from a MuJoCo model (MJCF), computed by MJX.

Drake's centre is ``MultibodyPlant``; here the multibody physics is MuJoCo's own JAX implementation
(MJX), wrapped as a [`LeafSystem`][jaxsys.LeafSystem] so that a robot is a block of a Diagram like any
other, and ``jax.grad`` / ``jax.vmap`` go through it.

Two modes, as Drake's ``MultibodyPlant(time_step)``:

- ``time_step=0.0``, **continuous**: the state is x = [q, v, act] (MuJoCo's ``qpos``, ``qvel`` and
  actuator activations), its time derivative [N(q) v, qacc, act_dot] from MJX's forward dynamics
  (``mjx.forward``), with q̇ = N(q) v mapping the angular velocities of free and ball joints to
  quaternion rates (Drake's ``MapVelocityToQDot``). Every jaxsys integrator, witness function and
  derivative works on it. Contacts and joint limits are MuJoCo's soft constraints, so continuous runs
  of models with contacts are stiff: prefer the discrete mode there.
- ``time_step=None`` (the model's ``opt.timestep``) or ``> 0``, **discrete**: a periodic discrete
  update every ``time_step`` seconds from t = 0 that is MuJoCo's step (``mjx.step``: the model's
  integrator and contact solver). The discrete state carries what MuJoCo carries between steps —
  group 0 ``qpos``, 1 ``qvel``, 2 ``act``, 3 ``qacc_warmstart`` — so a run to N steps equals
  ``mjx.step`` applied N times; the context's time is MuJoCo's ``time``.

Numeric parameters: chosen fields of ``mjx.Model`` (default `DEFAULT_MODEL_PARAMETERS`) live in
the context, one numeric parameter group each (flattened), so they can be fitted, randomized and
batched; read and write them by MuJoCo's field names with `MujocoPlant.get_model_parameter` and
`MujocoPlant.with_model_parameter`. MuJoCo's derived constants (``body_subtreemass``,
``dof_invweight0``, ...) keep the values of the model as loaded, as when ``MjModel`` fields are written
without calling ``mj_setConst``: they scale the contact softness, not the rigid-body dynamics.

Derivatives: forward mode (``jax.jvp``, ``jax.jacfwd``) goes everywhere. Reverse mode (``jax.grad``)
goes through everything except MuJoCo's iterative constraint solver, which MJX runs as a
``lax.while_loop`` when the model has contacts, joint limits or equality constraints and
``opt.iterations > 1``: for ``jax.grad`` through such a model pass ``solver_iterations=1`` (one Newton
step from the warm start, MJX's own recommendation for gradients), or use forward mode. Models without
constraint rows (no contacts, no limits) have no solver.

This module imports ``mujoco``: it is loaded by ``jaxsys.MujocoPlant`` on first use, never by
``import jaxsys`` (install with ``pip install "jaxsys[mujoco]"``).

Imports (within jaxsys): ``framework``, ``optimization.fitting`` (FitParameter), ``multibody.results``.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import os
import pathlib
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context, default_float_dtype
from ..framework.errors import DeclarationError, InputPortNotConnectedError, JaxsysError, PortError, StateError
from ..framework.leaf_system import DiscreteStateIndex, LeafSystem, NumericParameterIndex
from ..optimization.fitting import FitParameter
from .results import BodyPoses, ContactResults


def _import_mujoco() -> tuple[Any, Any]:
    """(mujoco, mujoco.mjx), with MJX's notice about the optional Warp backend silenced."""
    import sys

    if "mujoco" not in sys.modules and sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
        # No screen: MuJoCo's renderer needs a headless OpenGL. EGL (libegl1) is tried by default; set
        # MUJOCO_GL=osmesa (apt-get install libosmesa6) or =glfw before importing jaxsys to choose.
        os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        import mujoco
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise ImportError(
            'jaxsys.MujocoPlant needs MuJoCo and MJX: pip install "jaxsys[mujoco]" (or: pip install mujoco mujoco-mjx).'
        ) from e
    quiet = logging.getLogger()
    level = quiet.level
    try:
        quiet.setLevel(logging.ERROR)
        with contextlib.redirect_stdout(io.StringIO()):
            from mujoco import mjx
    except ImportError as e:  # pragma: no cover
        raise ImportError(
            'jaxsys.MujocoPlant needs MJX: pip install "jaxsys[mujoco]" (or: pip install mujoco-mjx).'
        ) from e
    finally:
        quiet.setLevel(level)
    return mujoco, mjx


mujoco, mjx = _import_mujoco()

#: The ``mjx.Model`` fields that are numeric parameters of a plant unless ``parameters=`` says otherwise.
DEFAULT_MODEL_PARAMETERS: tuple[str, ...] = (
    "body_mass",
    "body_inertia",
    "body_ipos",
    "dof_damping",
    "dof_frictionloss",
    "dof_armature",
    "geom_friction",
    "actuator_gear",
)

_MODELS_DIR = pathlib.Path(__file__).resolve().parent / "models"


class MujocoModelError(DeclarationError):
    """A MuJoCo model could not be loaded, or uses a feature MJX does not support (MuJoCo's or MJX's
    own message is kept, and the plant is named)."""


def model_path(name: str) -> str:
    """The path of an MJCF model shipped with jaxsys: ``"acrobot"`` (Drake's AcrobotPlant parameters),
    ``"cart_pole"`` (as `jaxsys.examples.CartPole`), ``"planar_arm"`` (three links, motors,
    sensors), ``"box_on_plane"`` (a free cube on the ground, with friction), ``"tumbling_body"`` (a
    torque-free rigid body); ``"humanoid"`` and ``"barkour"`` (Google's Barkour v0 quadruped, position
    servos, a height-field floor) are MJX's test models, read from the installed ``mujoco`` package."""
    mjx_models = {
        "humanoid": ("humanoid", "humanoid.xml"),
        "barkour": ("barkour_v0", "assets", "barkour_v0_mjx.xml"),
    }
    if name in mjx_models:
        path = pathlib.Path(mujoco.__file__).resolve().parent / "mjx" / "test_data" / pathlib.Path(*mjx_models[name])
        if not path.exists():
            raise FileNotFoundError(
                f"model_path({name!r}): MJX's test model is not in this mujoco installation ({path})."
            )
        return str(path)
    path = _MODELS_DIR / f"{name}.xml"
    if not path.exists():
        known = sorted(p.stem for p in _MODELS_DIR.glob("*.xml")) + ["barkour", "humanoid"]
        raise FileNotFoundError(f"model_path({name!r}): no such model shipped with jaxsys; known: {known}.")
    return str(path)


def _load(model: Any, where: str) -> Any:
    if isinstance(model, mujoco.MjModel):
        return copy.copy(model)
    if isinstance(model, os.PathLike) or (isinstance(model, str) and not model.lstrip().startswith("<")):
        path = pathlib.Path(model)
        if not path.exists():
            raise MujocoModelError(
                f"{where}: no MJCF file at {str(path)!r} (give a path, an XML string or an MjModel)."
            )
        try:
            return mujoco.MjModel.from_xml_path(str(path))
        except Exception as e:  # noqa: BLE001 - MuJoCo raises ValueError with its parser's message
            raise MujocoModelError(f"{where}: MuJoCo could not load {str(path)!r}: {e}") from e
    if isinstance(model, str):
        try:
            return mujoco.MjModel.from_xml_string(model)
        except Exception as e:  # noqa: BLE001
            raise MujocoModelError(f"{where}: MuJoCo could not parse the MJCF string: {e}") from e
    raise MujocoModelError(
        f"{where}: model must be an MJCF file path, an MJCF XML string or a mujoco.MjModel; got {type(model).__name__}."
    )


def _names(m: Any, obj: Any, count: int) -> tuple[str, ...]:
    return tuple(mujoco.mj_id2name(m, obj, i) or "" for i in range(count))


class _MujocoModel:
    """The loaded model and its MJX copies per float dtype; identity-hashed (a static field)."""

    def __init__(self, mj_model: Any, where: str) -> None:
        self.mj = mj_model
        self.where = where
        self._mjx: dict[str, tuple[Any, Any]] = {}

    def mjx(self, dtype: Any) -> tuple[Any, Any]:
        """(mjx.Model, mjx.Data made from it), floats in ``dtype``."""
        key = jnp.dtype(dtype).name
        hit = self._mjx.get(key)
        if hit is None:
            with jax.ensure_compile_time_eval():
                try:
                    mx = mjx.put_model(self.mj)
                    d0 = mjx.make_data(mx)
                except NotImplementedError as e:
                    raise MujocoModelError(
                        f"{self.where}: the model uses a feature MJX does not support: {e}. (MJX implements a "
                        f"subset of MuJoCo: see MuJoCo's MJX 'Feature parity' documentation.)"
                    ) from e

                def cast(a: Any) -> Any:
                    if isinstance(a, jax.Array) and jnp.issubdtype(a.dtype, jnp.floating):
                        return a.astype(dtype)
                    return a

                hit = (jax.tree_util.tree_map(cast, mx), jax.tree_util.tree_map(cast, d0))
            self._mjx[key] = hit
        return hit


class MujocoPlant(LeafSystem):
    """A multibody plant computed by MuJoCo's MJX (Drake's ``MultibodyPlant``, for MJCF models).

    **Arguments:**
    - `model`: an MJCF file path, an MJCF XML string, or a ``mujoco.MjModel`` (copied).
    - `time_step`: ``0.0``: continuous (Drake's ``MultibodyPlant(0.0)``); ``None`` (default): discrete
      with the model's ``opt.timestep``; ``> 0``: discrete with this step, s.
    - `parameters`: the ``mjx.Model`` fields held as numeric parameters in the context (default
      `DEFAULT_MODEL_PARAMETERS`); any float field of ``mjx.Model`` may be named.
    - `solver_iterations`: overrides the model's ``opt.iterations`` (constraint solver iterations);
      ``1`` makes ``jax.grad`` work through contacts (see the module docstring).
    - `name`: the system's name (default: the model's name, else ``"mujoco_plant"``).

    **Ports** (Drake's names):
    - input ``actuation`` (size nu): MuJoCo's ``ctrl``; zero when neither connected nor fixed.
    - input ``applied_generalized_force`` (size nv): added to MuJoCo's ``qfrc_applied``; zero when
      neither connected nor fixed.
    - output ``state`` (size nq + nv): [q, v]; no direct feedthrough.
    - output ``generalized_acceleration`` (size nv): v̇ (``qacc``) at the context; direct feedthrough.
    - output ``sensors`` (size nsensordata): MuJoCo's ``sensordata`` at the context (acceleration-stage
      sensors make it depend on the inputs).
    - output ``body_poses``: a [`BodyPoses`][jaxsys.BodyPoses] (no direct feedthrough).
    - output ``contact_results``: a [`ContactResults`][jaxsys.ContactResults] (direct feedthrough: forces depend on the
      inputs).

    State and parameter layout: see the module docstring. Names of joints, bodies, actuators, geoms and
    sensors are MuJoCo's (``joint_names()`` ...).
    """

    time_step: float = eqx.field(static=True)
    _model: _MujocoModel = eqx.field(static=True)
    _param_names: tuple[str, ...] = eqx.field(static=True)
    _param_shapes: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    _maps: tuple[Any, ...] = eqx.field(static=True)

    def __init__(
        self,
        model: Any,
        time_step: float | None = None,
        *,
        parameters: Sequence[str] | None = None,
        solver_iterations: int | None = None,
        name: str | None = None,
    ) -> None:
        where = f"MujocoPlant({name!r})" if name else "MujocoPlant"
        mj = _load(model, where)
        if name is None:
            name = bytes(mj.names).split(b"\0", 1)[0].decode() or "mujoco_plant"
        super().__init__(name)
        where = f"MujocoPlant {self.get_system_id_string()}"
        if time_step is None:
            time_step = float(mj.opt.timestep)
        time_step = float(time_step)
        if not (time_step >= 0.0 and np.isfinite(time_step)):
            raise DeclarationError(f"{where}: time_step must be 0 (continuous) or positive; got {time_step}.")
        if time_step > 0:
            mj.opt.timestep = time_step
        if solver_iterations is not None:
            if int(solver_iterations) < 1:
                raise DeclarationError(f"{where}: solver_iterations must be >= 1; got {solver_iterations}.")
            mj.opt.iterations = int(solver_iterations)
        self.time_step = time_step
        self._model = _MujocoModel(mj, where)
        mx, _ = self._model.mjx(default_float_dtype())  # MJX's support check, at build time

        # --- parameters ------------------------------------------------------------------------
        names = tuple(DEFAULT_MODEL_PARAMETERS if parameters is None else parameters)
        shapes = []
        for pname in names:
            value = getattr(mx, pname, None) if isinstance(pname, str) else None
            if not (isinstance(value, jax.Array) and jnp.issubdtype(value.dtype, jnp.floating)):
                floats = sorted(
                    f
                    for f in getattr(type(mx), "__dataclass_fields__", {})
                    if isinstance(getattr(mx, f, None), jax.Array)
                    and jnp.issubdtype(getattr(mx, f).dtype, jnp.floating)
                )
                raise DeclarationError(
                    f"{where}: parameters names {pname!r}, which is not a float field of mjx.Model; float fields "
                    f"are: {floats}."
                )
            shapes.append(tuple(value.shape))
            self.declare_numeric_parameter(np.asarray(getattr(mj, pname), dtype=float).reshape(-1))
        self._param_names = names
        self._param_shapes = tuple(shapes)

        # --- q <-> v maps (free and ball joints hold quaternions) --------------------------------
        lin_q, lin_v, quat_q, quat_v = [], [], [], []
        free, ball = int(mujoco.mjtJoint.mjJNT_FREE), int(mujoco.mjtJoint.mjJNT_BALL)
        for j in range(mj.njnt):
            qa, va, jt = int(mj.jnt_qposadr[j]), int(mj.jnt_dofadr[j]), int(mj.jnt_type[j])
            if jt == free:
                lin_q += [qa, qa + 1, qa + 2]
                lin_v += [va, va + 1, va + 2]
                quat_q.append([qa + 3, qa + 4, qa + 5, qa + 6])
                quat_v.append([va + 3, va + 4, va + 5])
            elif jt == ball:
                quat_q.append([qa, qa + 1, qa + 2, qa + 3])
                quat_v.append([va, va + 1, va + 2])
            else:
                lin_q.append(qa)
                lin_v.append(va)
        self._maps = (tuple(lin_q), tuple(lin_v), tuple(map(tuple, quat_q)), tuple(map(tuple, quat_v)))

        # --- state -------------------------------------------------------------------------------
        nq, nv, na = mj.nq, mj.nv, mj.na
        if time_step == 0.0:
            self.declare_continuous_state(
                num_q=nq, num_v=nv, num_z=na, default=np.concatenate([mj.qpos0, np.zeros(nv + na)])
            )
        else:
            self.declare_discrete_state(np.asarray(mj.qpos0, dtype=float))
            self.declare_discrete_state(nv)
            self.declare_discrete_state(na)
            self.declare_discrete_state(nv)
            self.declare_periodic_discrete_update_event(time_step, 0.0, self._discrete_step, name="mujoco_step")

        # --- ports -------------------------------------------------------------------------------
        self.declare_vector_input_port("actuation", mj.nu)
        self.declare_vector_input_port("applied_generalized_force", nv)
        self.declare_vector_output_port("state", nq + nv, self._calc_state, direct_feedthrough=False)
        self.declare_vector_output_port(
            "generalized_acceleration", nv, self._calc_acceleration, direct_feedthrough=True
        )
        acc_stage = int(mujoco.mjtStage.mjSTAGE_ACC)
        sensors_feedthrough = bool(mj.nsensor) and bool(np.any(np.asarray(mj.sensor_needstage) == acc_stage))
        self.declare_vector_output_port(
            "sensors", mj.nsensordata, self._calc_sensors, direct_feedthrough=sensors_feedthrough
        )
        nbody = mj.nbody
        self.declare_abstract_output_port(
            "body_poses",
            BodyPoses(np.zeros((nbody, 3)), np.zeros((nbody, 4))),
            self._calc_body_poses,
            direct_feedthrough=False,
        )
        _, d0 = self._model.mjx(default_float_dtype())
        ncon = int(d0._impl.contact.dist.shape[0]) if hasattr(d0, "_impl") else int(d0.contact.dist.shape[0])
        self.declare_abstract_output_port(
            "contact_results",
            ContactResults(
                np.zeros((ncon, 3)),
                np.zeros((ncon, 3)),
                np.zeros((ncon,)),
                np.zeros((ncon, 3)),
                np.zeros((ncon, 3)),
                np.zeros((ncon,), np.int32),
                np.zeros((ncon,), np.int32),
                np.zeros((ncon,), bool),
            ),
            self._calc_contact_results,
            direct_feedthrough=True,
        )

    # ===== queries (Drake's MultibodyPlant names) ===================================================
    @property
    def mj_model(self) -> Any:
        """The ``mujoco.MjModel`` this plant computes (with ``time_step`` and ``solver_iterations``
        applied). Treat it as read-only: the plant's parameters live in the context."""
        return self._model.mj

    def mjx_model(self, context: Context | None = None, dtype: Any = None) -> Any:
        """The ``mjx.Model`` the plant computes with: the nominal one (floats in ``dtype``, default
        JAX's default float) or, given a context of this plant, with the context's parameters."""
        if context is None:
            return self._model.mjx(dtype if dtype is not None else default_float_dtype())[0]
        return self._model_at(self._own(context))

    def is_discrete(self) -> bool:
        """True if the plant steps by ``mjx.step`` (Drake: ``is_discrete``)."""
        return self.time_step > 0

    def num_positions(self) -> int:
        """nq, the number of generalized positions (MuJoCo's ``qpos``; Drake: ``num_positions``)."""
        return int(self._model.mj.nq)

    def num_velocities(self) -> int:
        """nv, the number of generalized velocities (MuJoCo's ``qvel``; Drake: ``num_velocities``)."""
        return int(self._model.mj.nv)

    def num_actuators(self) -> int:
        """nu, the number of actuators (size of ``actuation``; Drake: ``num_actuators``)."""
        return int(self._model.mj.nu)

    def num_actuated_dofs(self) -> int:
        """Same as `num_actuators` (Drake: ``num_actuated_dofs``)."""
        return self.num_actuators()

    def num_activations(self) -> int:
        """na, the number of actuator activation states (MuJoCo's ``act``)."""
        return int(self._model.mj.na)

    def num_bodies(self) -> int:
        """nbody, MuJoCo's bodies including the world body 0 (Drake: ``num_bodies``)."""
        return int(self._model.mj.nbody)

    def num_joints(self) -> int:
        """njnt (Drake: ``num_joints``)."""
        return int(self._model.mj.njnt)

    def num_multibody_states(self) -> int:
        """nq + nv (Drake: ``num_multibody_states``)."""
        return self.num_positions() + self.num_velocities()

    def joint_names(self) -> tuple[str, ...]:
        """MuJoCo's joint names, in joint order ('' for unnamed joints)."""
        return _names(self._model.mj, mujoco.mjtObj.mjOBJ_JOINT, self._model.mj.njnt)

    def body_names(self) -> tuple[str, ...]:
        """MuJoCo's body names, in body order (body 0 is ``world``)."""
        return _names(self._model.mj, mujoco.mjtObj.mjOBJ_BODY, self._model.mj.nbody)

    def actuator_names(self) -> tuple[str, ...]:
        """MuJoCo's actuator names, in the order of the ``actuation`` port."""
        return _names(self._model.mj, mujoco.mjtObj.mjOBJ_ACTUATOR, self._model.mj.nu)

    def geom_names(self) -> tuple[str, ...]:
        """MuJoCo's geom names, in geom order."""
        return _names(self._model.mj, mujoco.mjtObj.mjOBJ_GEOM, self._model.mj.ngeom)

    def sensor_names(self) -> tuple[str, ...]:
        """MuJoCo's sensor names; sensor i fills ``sensors[sensor_adr(i) : sensor_adr(i) + sensor_dim(i)]``."""
        return _names(self._model.mj, mujoco.mjtObj.mjOBJ_SENSOR, self._model.mj.nsensor)

    def sensor_slice(self, name: str) -> slice:
        """The entries of the ``sensors`` output that sensor ``name`` fills."""
        names = self.sensor_names()
        if name not in names:
            raise PortError(f"MujocoPlant {self.get_system_id_string()}: no sensor named {name!r}; sensors: {names}.")
        i = names.index(name)
        adr, dim = int(self._model.mj.sensor_adr[i]), int(self._model.mj.sensor_dim[i])
        return slice(adr, adr + dim)

    def _index_of(self, kind: str, names: tuple[str, ...], name: str) -> int:
        if name not in names:
            raise JaxsysError(f"MujocoPlant {self.get_system_id_string()}: no {kind} named {name!r}; {kind}s: {names}.")
        return names.index(name)

    def joint_position_index(self, name: str) -> int:
        """Index in q of joint ``name``'s first position (MuJoCo's ``jnt_qposadr``)."""
        return int(self._model.mj.jnt_qposadr[self._index_of("joint", self.joint_names(), name)])

    def joint_velocity_index(self, name: str) -> int:
        """Index in v of joint ``name``'s first velocity (MuJoCo's ``jnt_dofadr``)."""
        return int(self._model.mj.jnt_dofadr[self._index_of("joint", self.joint_names(), name)])

    def body_index(self, name: str) -> int:
        """MuJoCo's id of body ``name`` (its row in ``body_poses`` and in ``body_*`` parameters)."""
        return self._index_of("body", self.body_names(), name)

    # ===== parameters ===========================================================================
    def model_parameter_names(self) -> tuple[str, ...]:
        """The ``mjx.Model`` fields held as numeric parameters, in group order."""
        return self._param_names

    def model_parameter_index(self, name: str) -> NumericParameterIndex:
        """The numeric parameter group (of this plant's own context) that holds field ``name``."""
        if name not in self._param_names:
            raise StateError(
                f"MujocoPlant {self.get_system_id_string()}: {name!r} is not one of its model parameters "
                f"{self._param_names} (choose them with MujocoPlant(..., parameters=[...]))."
            )
        return NumericParameterIndex(self._param_names.index(name))

    def _own(self, context: Context) -> Context:
        """This plant's context: ``context`` itself, or its part of a root context."""
        if context.system_id == self.get_system_id():
            return context
        return self.get_my_context_from_root(context)

    def _set_own(self, context: Context, fn: Any) -> Context:
        if context.system_id == self.get_system_id():
            return fn(context)
        return self.update_my_context_in_root(context, fn)

    def get_model_parameter(self, context: Context, name: str) -> jax.Array:
        """Field ``name`` of the model in ``context`` (this plant's context or a root context that
        contains it), shaped as in ``mjx.Model`` (e.g. ``body_mass`` (nbody,), ``body_inertia``
        (nbody, 3))."""
        k = self.model_parameter_index(name)
        return jnp.reshape(self._own(context).get_numeric_parameter(int(k)), self._param_shapes[k])

    def with_model_parameter(self, context: Context, name: str, value: Any) -> Context:
        """A copy of ``context`` with field ``name`` of the model set to ``value`` (shaped as in
        ``mjx.Model``, or flat)."""
        k = int(self.model_parameter_index(name))
        shape = self._param_shapes[k]
        value = jnp.asarray(value)
        if value.size != int(np.prod(shape, dtype=int)) or (value.ndim > 1 and tuple(value.shape) != shape):
            raise StateError(
                f"MujocoPlant {self.get_system_id_string()}.with_model_parameter({name!r}): expected shape "
                f"{shape}; got {tuple(value.shape)}."
            )
        return self._set_own(context, lambda c: c.with_numeric_parameter(k, jnp.reshape(value, (-1,))))

    def fit_parameter(self, root_context: Context, name: str, element: int | tuple[int, ...] = 0, **bounds: Any) -> Any:
        """A [`FitParameter`][jaxsys.FitParameter] for entry ``element`` of model field ``name`` (an index into
        the field's MuJoCo shape, e.g. ``body_mass`` ``3`` or ``body_inertia`` ``(2, 1)``), numbered in
        ``root_context`` (the context [`fit_parameters`][jaxsys.fit_parameters] is given). ``bounds``: ``lower``,
        ``upper``, ``positive``."""
        k = int(self.model_parameter_index(name))
        shape = self._param_shapes[k]
        flat = int(np.ravel_multi_index(np.atleast_1d(element), shape)) if shape else 0
        leaves = root_context._leaf_contexts()
        group = 0
        for leaf in leaves:
            if leaf.system_id == self.get_system_id():
                return FitParameter(group=group + k, element=flat, **bounds)
            group += len(leaf.parameters.numeric)
        raise StateError(
            f"MujocoPlant {self.get_system_id_string()}.fit_parameter: the context given does not contain this plant."
        )

    # ===== state helpers (Drake's GetPositions / SetPositions ...) ==============================
    def get_positions(self, context: Context) -> jax.Array:
        """q (Drake: ``GetPositions``); ``context`` is this plant's or a root context containing it."""
        return self._calc_state(self._own(context))[: self.num_positions()]

    def get_velocities(self, context: Context) -> jax.Array:
        """v (Drake: ``GetVelocities``)."""
        return self._calc_state(self._own(context))[self.num_positions() :]

    def get_positions_and_velocities(self, context: Context) -> jax.Array:
        """[q, v] (Drake: ``GetPositionsAndVelocities``)."""
        return self._calc_state(self._own(context))

    def with_positions(self, context: Context, q: Any) -> Context:
        """A copy of ``context`` with q set (Drake: ``SetPositions``)."""
        return self._set_own(context, lambda c: self._with_qva(c, q=q))

    def with_velocities(self, context: Context, v: Any) -> Context:
        """A copy of ``context`` with v set (Drake: ``SetVelocities``)."""
        return self._set_own(context, lambda c: self._with_qva(c, v=v))

    def with_positions_and_velocities(self, context: Context, qv: Any) -> Context:
        """A copy of ``context`` with [q, v] set (Drake: ``SetPositionsAndVelocities``)."""
        qv = jnp.asarray(qv)
        self._check_size("[q, v]", qv, self.num_multibody_states())
        nq = self.num_positions()
        return self._set_own(context, lambda c: self._with_qva(c, q=qv[:nq], v=qv[nq:]))

    def with_activations(self, context: Context, act: Any) -> Context:
        """A copy of ``context`` with the actuator activations set."""
        return self._set_own(context, lambda c: self._with_qva(c, act=act))

    def with_keyframe(self, context: Context, key: str | int) -> Context:
        """A copy of ``context`` with q, v and act of the model's keyframe ``key`` (name or index)."""
        mj = self._model.mj
        if isinstance(key, str):
            names = _names(mj, mujoco.mjtObj.mjOBJ_KEY, mj.nkey)
            key = self._index_of("keyframe", names, key)
        if not 0 <= int(key) < mj.nkey:
            raise StateError(f"MujocoPlant {self.get_system_id_string()}: keyframe {key} of {mj.nkey}.")
        k = int(key)
        return self._set_own(
            context, lambda c: self._with_qva(c, q=mj.key_qpos[k], v=mj.key_qvel[k], act=mj.key_act[k])
        )

    def _check_size(self, what: str, value: Any, n: int) -> None:
        if tuple(jnp.shape(value)) != (n,):
            raise StateError(
                f"MujocoPlant {self.get_system_id_string()}: {what} must have shape ({n},); "
                f"got {tuple(jnp.shape(value))}."
            )

    def _with_qva(self, c: Context, q: Any = None, v: Any = None, act: Any = None) -> Context:
        nq, nv, na = self.num_positions(), self.num_velocities(), self.num_activations()
        for what, val, n in (("q", q, nq), ("v", v, nv), ("act", act, na)):
            if val is not None:
                self._check_size(what, val, n)
        if self.is_discrete():
            for g, val in ((0, q), (1, v), (2, act)):
                if val is not None:
                    c = c.with_discrete_state(g, jnp.asarray(val, c.get_time().dtype))
            return c
        x = c.get_continuous_state_vector()
        if q is not None:
            x = x.at[:nq].set(jnp.asarray(q, x.dtype))
        if v is not None:
            x = x.at[nq : nq + nv].set(jnp.asarray(v, x.dtype))
        if act is not None:
            x = x.at[nq + nv :].set(jnp.asarray(act, x.dtype))
        return c.with_continuous_state(x)

    # ===== the computation ======================================================================
    def _model_at(self, context: Context) -> Any:
        dtype = context.get_time().dtype
        mx, _ = self._model.mjx(dtype)
        fields = {}
        for k, (pname, shape) in enumerate(zip(self._param_names, self._param_shapes)):
            fields[pname] = jnp.reshape(context.get_numeric_parameter(k), shape).astype(dtype)
        return mx.replace(**fields)

    def _qva(self, context: Context) -> tuple[Any, Any, Any, Any]:
        """(q, v, act, qacc_warmstart) of the context (the warm start is zero in continuous mode)."""
        nq, nv = self.num_positions(), self.num_velocities()
        if self.is_discrete():
            ds = context.get_discrete_state()
            return ds.get_vector(0), ds.get_vector(1), ds.get_vector(2), ds.get_vector(3)
        x = context.get_continuous_state_vector()
        return x[:nq], x[nq : nq + nv], x[nq + nv :], jnp.zeros((nv,), x.dtype)

    def _input(self, context: Context, index: int, n: int) -> Any:
        """The input's value, or zeros when this port is neither connected nor fixed (Drake). A
        connected port is evaluated as is: an error upstream (an unconnected controller input, say)
        is raised, never read as zero input."""
        port = self.get_input_port(index)
        dtype = context.get_time().dtype
        zeros = jnp.zeros((n,), dtype)
        if context.inputs[index] is None:  # no value in this context: neither fixed nor fed by a diagram
            return zeros
        parent = self.get_parent()
        if parent is not None and parent.is_input_port_connected(port):
            return jnp.asarray(port.eval(context), dtype)
        try:
            return jnp.asarray(port.eval(context), dtype)
        except InputPortNotConnectedError:  # this port, unconnected in its diagram
            return zeros

    def _data_at(self, context: Context, m: Any) -> Any:
        _, d0 = self._model.mjx(context.get_time().dtype)
        q, v, act, warm = self._qva(context)
        return d0.replace(
            qpos=q,
            qvel=v,
            act=act,
            qacc_warmstart=warm,
            time=context.get_time(),
            ctrl=self._input(context, 0, self.num_actuators()),
            qfrc_applied=self._input(context, 1, self.num_velocities()),
        )

    def _forward(self, context: Context) -> tuple[Any, Any]:
        m = self._model_at(context)
        return m, _FORWARD(m, self._data_at(context, m))

    def _discrete_step(self, context: Context, discrete_state: Any) -> tuple[Any, ...]:
        m = self._model_at(context)
        return _STEP(m, self._data_at(context, m))

    def do_calc_time_derivatives(self, context: Context) -> Any:
        """[N(q) v, qacc, act_dot] from ``mjx.forward`` (continuous mode)."""
        m = self._model_at(context)
        qacc, act_dot = _ACCELERATION(m, self._data_at(context, m))
        q, v, _, _ = self._qva(context)
        return jnp.concatenate([self._v_to_qdot(q, v), qacc, act_dot])

    def do_map_velocity_to_qdot(self, context: Context, generalized_velocity: jax.Array) -> Any:
        """q̇ = N(q) v: free and ball joints' angular velocities (MuJoCo: in the body frame) become
        quaternion rates ½ q ⊗ (0, ω) (Drake: ``MapVelocityToQDot``)."""
        q = self._qva(context)[0]
        return self._v_to_qdot(q, jnp.asarray(generalized_velocity))

    def do_map_qdot_to_velocity(self, context: Context, qdot: jax.Array) -> Any:
        """v = N⁺(q) q̇: ω = 2 (q* ⊗ q̇)_xyz / |q|² for quaternion joints (Drake: ``MapQDotToVelocity``)."""
        q = self._qva(context)[0]
        lin_q, lin_v, quat_q, quat_v = self._index_maps()
        qdot = jnp.asarray(qdot)
        v = jnp.zeros((self.num_velocities(),), qdot.dtype)
        v = v.at[lin_v].set(qdot[lin_q])
        if quat_q.shape[0]:
            quat, rate = q[quat_q], qdot[quat_q]
            conj = quat * jnp.asarray([1.0, -1.0, -1.0, -1.0], quat.dtype)
            omega = 2.0 * _quat_mul(conj, rate)[:, 1:] / jnp.sum(quat * quat, axis=1, keepdims=True)
            v = v.at[quat_v].set(omega)
        return v

    def _index_maps(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        lin_q, lin_v, quat_q, quat_v = self._maps
        return (
            np.asarray(lin_q, dtype=np.int32),
            np.asarray(lin_v, dtype=np.int32),
            np.asarray(quat_q, dtype=np.int32).reshape(-1, 4),
            np.asarray(quat_v, dtype=np.int32).reshape(-1, 3),
        )

    def _v_to_qdot(self, q: Any, v: Any) -> Any:
        lin_q, lin_v, quat_q, quat_v = self._index_maps()
        qdot = jnp.zeros((self.num_positions(),), v.dtype)
        qdot = qdot.at[lin_q].set(v[lin_v])
        if quat_q.shape[0]:
            omega = v[quat_v]
            pure = jnp.concatenate([jnp.zeros(omega.shape[:-1] + (1,), v.dtype), omega], axis=-1)
            qdot = qdot.at[quat_q].set(0.5 * _quat_mul(q[quat_q], pure))
        return qdot

    # ===== outputs ==============================================================================
    def _calc_state(self, context: Context) -> Any:
        q, v, _, _ = self._qva(context)
        return jnp.concatenate([q, v])

    def _calc_acceleration(self, context: Context) -> Any:
        return self._forward(context)[1].qacc

    def _calc_sensors(self, context: Context) -> Any:
        return self._forward(context)[1].sensordata

    def _calc_body_poses(self, context: Context) -> BodyPoses:
        m = self._model_at(context)
        return BodyPoses(*_POSES(m, self._data_at(context, m)))

    def _calc_contact_results(self, context: Context) -> ContactResults:
        m = self._model_at(context)
        return _CONTACTS(m, self._data_at(context, m))


def _acceleration(m: Any, d: Any) -> tuple[Any, Any]:
    d = mjx.forward(m, d)
    return d.qacc, d.act_dot


def _step(m: Any, d: Any) -> tuple[Any, Any, Any, Any]:
    d = mjx.step(m, d)
    return d.qpos, d.qvel, d.act, d.qacc_warmstart


def _poses(m: Any, d: Any) -> tuple[Any, Any]:
    d = mjx.kinematics(m, d)
    return d.xpos, d.xquat


def _contacts(m: Any, d: Any) -> ContactResults:
    d = mjx.forward(m, d)
    con = d._impl.contact if hasattr(d, "_impl") and hasattr(d._impl, "contact") else d.contact
    n = int(con.dist.shape[0])
    dtype = d.qpos.dtype
    if n == 0:
        z3 = jnp.zeros((0, 3), dtype)
        zi = jnp.zeros((0,), jnp.int32)
        return ContactResults(z3, z3, jnp.zeros((0,), dtype), z3, z3, zi, zi, jnp.zeros((0,), bool))
    from mujoco.mjx._src.support import contact_force

    ft = jnp.stack([contact_force(m, d, i, to_world_frame=True) for i in range(n)])
    frame = jnp.reshape(con.frame, (n, 3, 3))
    return ContactResults(
        con.pos,
        frame[:, 0, :],
        con.dist,
        ft[:, :3],
        ft[:, 3:],
        jnp.asarray(con.geom1, jnp.int32),
        jnp.asarray(con.geom2, jnp.int32),
        con.dist < con.includemargin,
    )


# Each MJX call is jitted (evaluated eagerly, op by op, MJX's forward dynamics takes seconds; inside a
# trace a jitted call is inlined as one call).
# Rematerialized in reverse mode: MJX's forward dynamics has hundreds of small intermediates, and keeping
# them all per step (as a plain VJP does) costs more on a CPU than recomputing the forward pass inside the
# backward one (acrobot, 1,000 RK4 steps: grad 1.6x faster). Forward mode and evaluation are unchanged.
_ACCELERATION = jax.jit(jax.checkpoint(_acceleration))
_STEP = jax.jit(jax.checkpoint(_step))
_FORWARD = jax.jit(lambda m, d: mjx.forward(m, d))
_POSES = jax.jit(_poses)
_CONTACTS = jax.jit(_contacts)


def _quat_mul(a: Any, b: Any) -> Any:
    """Hamilton product of quaternions [w, x, y, z] (batched over leading axes)."""
    aw, ax, ay, az = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    bw, bx, by, bz = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return jnp.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        axis=-1,
    )


def state_indices(plant: MujocoPlant) -> dict[str, DiscreteStateIndex]:
    """The discrete state groups of a discrete plant by name (``qpos``, ``qvel``, ``act``,
    ``qacc_warmstart``)."""
    if not plant.is_discrete():
        raise StateError(f"MujocoPlant {plant.get_system_id_string()} is continuous: it has no discrete state.")
    return {n: DiscreteStateIndex(i) for i, n in enumerate(("qpos", "qvel", "act", "qacc_warmstart"))}


__all__ = [
    "DEFAULT_MODEL_PARAMETERS",
    "MujocoModelError",
    "MujocoPlant",
    "model_path",
    "state_indices",
]
