"""The example scripts run and print checkable numbers."""

import pathlib
import re
import subprocess
import sys


ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_quickstart_runs_and_its_numbers_check_out():
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    # At steady state the controller torque balances gravity: tau = m g l sin(theta).
    tau, gravity = map(float, re.search(r"final torque\s+(\S+) N m\s+\(= m g l sin\(theta\) = (\S+)\)", text).groups())
    assert abs(tau - gravity) < 1e-2
    g, fd = map(float, re.search(r"d\(theta_final\)/dkp\s+(\S+)\s+\(finite differences\s+(\S+)\)", text).groups())
    assert abs(g - fd) <= 1e-4 * abs(fd)
    png = ROOT / "examples" / "output" / "quickstart.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
