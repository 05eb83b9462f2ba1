"""Plots of simulation results and pictures of diagrams (matplotlib; Graphviz for diagrams).

* [`record_outputs`][jaxsys.record_outputs] makes a ``record`` function for [`simulate`][jaxsys.simulate] that records
  output ports by name, so [`plot_result`][jaxsys.plot_result] can label one axis per port.
* [`plot_result`][jaxsys.plot_result] plots a SimulationResult's recorded values against ``save_at``.
* [`plot_log`][jaxsys.plot_log] plots a publish log / VectorLog.
* [`plot_system`][jaxsys.plot_system] renders ``get_graphviz_string()`` to SVG or PNG.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

import numpy as np

from .framework.errors import JaxsysError


def record_outputs(system: Any, ports: Sequence[Any] | None = None) -> Any:
    """A ``record`` function returning ``{port name: value}`` for output ports of ``system``.

    ``ports``: OutputPorts, names or indices (default: every vector output port).
    """
    if ports is None:
        ports = [p for p in system._spec.output_ports if not p.is_abstract()]
    resolved = [p if hasattr(p, "eval") else system.get_output_port(p) for p in ports]
    return lambda context: {p.get_name(): p.eval(context) for p in resolved}


def _pyplot() -> Any:
    try:
        import matplotlib

        if matplotlib.get_backend().lower().startswith("module://matplotlib_inline") is False:
            matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise JaxsysError("jaxsys.plotting needs matplotlib: pip install 'jaxsys[plot]'.") from e
    return plt


def plot_result(
    result: Any,
    labels: dict[str, Sequence[str]] | Sequence[str] | None = None,
    title: str | None = None,
    path: str | pathlib.Path | None = None,
) -> Any:
    """Plot recorded values against time: one axis per signal group (a dict entry of the recorded
    pytree, e.g. one output port from [`record_outputs`][jaxsys.record_outputs]), one line per element.

    **Arguments:**
    - `result`: a (concrete, unbatched) SimulationResult with ``save_at`` times.
    - `labels`: line labels, per group (dict) or for a single array.
    - `title`: figure title; `path`: save the figure there (PNG by extension).

    Returns the matplotlib Figure.
    """
    plt = _pyplot()
    ts = np.asarray(result.ts)
    groups = result.ys if isinstance(result.ys, dict) else {"": result.ys}
    fig, axes = plt.subplots(len(groups), 1, sharex=True, figsize=(7, 2.4 * len(groups)), squeeze=False)
    for ax, (name, values) in zip(axes[:, 0], groups.items()):
        values = np.asarray(values).reshape(len(ts), -1)
        names = labels.get(name) if isinstance(labels, dict) else labels
        for j in range(values.shape[1]):
            label = names[j] if names is not None and j < len(names) else (f"{name}[{j}]" if name else f"x[{j}]")
            ax.plot(ts, values[:, j], label=label)
        if name:
            ax.set_ylabel(name)
        ax.legend(loc="best", fontsize="small")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("time [s]")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


def plot_log(log: Any, labels: Sequence[str] | None = None, title: str | None = None, path: Any = None) -> Any:
    """Plot a PublishLog or VectorLog (values against sample times). Returns the Figure."""
    plt = _pyplot()
    times = np.asarray(log.sample_times())
    data = np.asarray(log.data())
    if hasattr(log, "num_samples"):  # VectorLog: Drake's (size, N) orientation
        data = data.T
    data = data.reshape(len(times), -1)
    fig, ax = plt.subplots(figsize=(7, 3))
    for j in range(data.shape[1]):
        ax.plot(times, data[:, j], ".-", label=labels[j] if labels and j < len(labels) else f"[{j}]")
    ax.set_xlabel("time [s]")
    ax.legend(loc="best", fontsize="small")
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


def plot_system(
    system: Any, path: str | pathlib.Path | None = None, fmt: str = "svg", max_depth: int = 1_000_000
) -> bytes:
    """Render ``system.get_graphviz_string()`` to SVG or PNG bytes (and write them to ``path``).

    Uses the ``graphviz`` Python package when installed, else the ``dot`` program; raises a clear
    error when neither is available. (Drake: ``plot_system_graphviz``.)
    """
    if fmt not in ("svg", "png"):
        raise JaxsysError(f"plot_system: fmt must be 'svg' or 'png'; got {fmt!r}.")
    dot = system.get_graphviz_string(max_depth)
    data: bytes | None = None
    try:
        import graphviz

        try:
            data = graphviz.Source(dot).pipe(format=fmt)
        except Exception:  # noqa: BLE001 - e.g. the package without the dot executable
            data = None
    except ImportError:
        pass
    if data is None:
        exe = shutil.which("dot")
        if exe is None:
            raise JaxsysError(
                "plot_system needs Graphviz: install the 'dot' program (e.g. apt-get install graphviz) and "
                "optionally the Python package (pip install graphviz). The dot text itself is available "
                "from system.get_graphviz_string()."
            )
        data = subprocess.run([exe, f"-T{fmt}"], input=dot.encode(), capture_output=True, check=True).stdout
    if path is not None:
        pathlib.Path(path).write_bytes(data)
    return data
