"""Pictures of a `MujocoPlant`'s motion: frames from MuJoCo's offscreen renderer, an
animated GIF or MP4, and a plot of joint trajectories.

Headless machines need an OpenGL that works without a screen: EGL (Debian: ``libegl1``, the default
jaxsys chooses when no ``DISPLAY`` is set and ``MUJOCO_GL`` is unset) or OSMesa (``apt-get install
libosmesa6`` and ``MUJOCO_GL=osmesa``), chosen by the ``MUJOCO_GL`` environment variable before
``mujoco`` is imported. Where none works, `render_frames` raises `RenderingUnavailable`
saying what to install.

Imports (within jaxsys): ``multibody.mujoco_plant``.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..framework.errors import JaxsysError
from .mujoco_plant import MujocoPlant, mujoco


class RenderingUnavailable(JaxsysError, RuntimeError):
    """MuJoCo's renderer could not create an OpenGL context (no usable OpenGL on this machine)."""


def _renderer(model: Any, width: int, height: int) -> Any:
    try:
        return mujoco.Renderer(model, height=height, width=width)
    except Exception as e:  # noqa: BLE001 - MuJoCo raises FatalError / ImportError / AttributeError
        gl = os.environ.get("MUJOCO_GL", "")
        hint = (
            " (MUJOCO_GL was unset when mujoco was imported: import jaxsys first, or set MUJOCO_GL=egl in the "
            "environment)"
            if not gl
            else ""
        )
        raise RenderingUnavailable(
            f"MuJoCo's renderer could not start (MUJOCO_GL={gl!r}): {type(e).__name__}: {e}. Rendering needs "
            f"an OpenGL without a screen: EGL (apt-get install libegl1; MUJOCO_GL=egl) or OSMesa (apt-get install "
            f"libosmesa6; MUJOCO_GL=osmesa), set before mujoco is first imported; with a screen, MUJOCO_GL=glfw{hint}."
        ) from e


def render_frames(
    plant: MujocoPlant,
    positions: Any,
    *,
    width: int = 320,
    height: int = 240,
    camera: int | str | None = None,
    distance: float | None = None,
    azimuth: float = 90.0,
    elevation: float = -15.0,
    lookat: Sequence[float] | None = None,
) -> np.ndarray:
    """Render the plant at each row of ``positions`` (shape (T, nq): q over time, e.g. the ``state``
    output recorded by ``simulate``, first nq columns, or (T, nq + nv)).

    ``camera``: a camera of the model (name or id); None: a free camera at ``distance`` (default: 2.5x
    the model's extent), ``azimuth`` and ``elevation`` (degrees) looking at ``lookat`` (default: the
    model's centre). Returns uint8 frames, shape (T, height, width, 3).
    """
    mj = plant.mj_model
    q = np.asarray(positions, dtype=float)
    if q.ndim == 1:
        q = q[None]
    nq = mj.nq
    if q.ndim != 2 or q.shape[1] < nq:
        raise JaxsysError(
            f"render_frames: positions must have shape (T, nq={nq}) or (T, nq + nv); got {np.shape(positions)}."
        )
    renderer = _renderer(mj, width, height)
    data = mujoco.MjData(mj)
    if camera is None:
        cam = mujoco.MjvCamera()
        mujoco.mjv_defaultFreeCamera(mj, cam)
        cam.distance = float(distance) if distance is not None else 2.5 * float(mj.stat.extent)
        cam.azimuth, cam.elevation = float(azimuth), float(elevation)
        if lookat is not None:
            cam.lookat[:] = np.asarray(lookat, dtype=float)
    else:
        cam = camera
    frames = np.empty((q.shape[0], height, width, 3), np.uint8)
    try:
        for i, row in enumerate(q):
            data.qpos[:] = row[:nq]
            mujoco.mj_forward(mj, data)
            renderer.update_scene(data, camera=cam)
            frames[i] = renderer.render()
    finally:
        renderer.close()
    return frames


def save_animation(frames: np.ndarray, path: str | os.PathLike[str], fps: float = 30.0) -> pathlib.Path:
    """Write frames (T, H, W, 3) uint8 as an animated GIF (Pillow) or, for ``.mp4``, a video
    (``imageio`` with ``imageio-ffmpeg``). Returns the path."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = np.asarray(frames)
    if path.suffix.lower() == ".mp4":
        try:
            import imageio.v2 as imageio
        except ImportError as e:
            raise JaxsysError(
                "save_animation: MP4 needs imageio and imageio-ffmpeg (pip install imageio[ffmpeg])."
            ) from e
        imageio.mimwrite(path, list(frames), fps=fps)
        return path
    from PIL import Image

    images = [Image.fromarray(f) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(round(1000 / fps)), loop=0)
    return path


def plot_joint_trajectories(plant: MujocoPlant, ts: Any, states: Any, ax: Any = None, velocities: bool = False) -> Any:
    """Plot each hinge/slide joint's position (or velocity) against time, labelled with MuJoCo's joint
    names. ``states``: (T, nq + nv) (the ``state`` output) or (T, nq). Returns the matplotlib axes."""
    import matplotlib.pyplot as plt

    mj = plant.mj_model
    x = np.asarray(states)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    names = plant.joint_names()
    scalar = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
    for j in range(mj.njnt):
        if int(mj.jnt_type[j]) not in scalar:
            continue
        col = int(mj.jnt_dofadr[j]) + mj.nq if velocities else int(mj.jnt_qposadr[j])
        ax.plot(np.asarray(ts), x[:, col], label=names[j] or f"joint {j}")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("joint velocity" if velocities else "joint position")
    ax.legend(loc="best", fontsize="small")
    ax.grid(alpha=0.3)
    return ax


__all__ = ["RenderingUnavailable", "plot_joint_trajectories", "render_frames", "save_animation"]
