"""Value types of the multibody plants' abstract output ports (no MuJoCo import here).

Imports (within jaxsys): nothing.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx


class BodyPoses(eqx.Module):
    """World poses of every body of a plant (the value of ``body_poses``; Drake's ``body_poses`` port
    gives a ``RigidTransform`` per body).

    - `position`: (nbody, 3), m, the bodies' frame origins in the world frame (MuJoCo's ``xpos``).
    - `quaternion`: (nbody, 4), unit quaternions [w, x, y, z] of the bodies' frames (``xquat``).

    Body 0 is MuJoCo's world body; names in ``plant.body_names()``.
    """

    position: Any
    quaternion: Any


class ContactResults(eqx.Module):
    """The contacts MuJoCo's collision detection produced (the value of ``contact_results``; Drake's
    ``ContactResults``). MJX keeps a fixed number ``ncon`` of contact slots; ``active`` says which hold
    a contact within its margin.

    - `position`: (ncon, 3), m, contact points in the world frame (midpoint between the geoms).
    - `normal`: (ncon, 3), the contact normal in the world frame (from ``geom1`` towards ``geom2``).
    - `distance`: (ncon,), m, signed distance between the geoms (negative: penetration).
    - `force`: (ncon, 3), N, in the world frame, the force ``geom1`` exerts on ``geom2`` (MuJoCo's
      ``mj_contactForce`` rotated out of the contact frame: its normal part is along ``normal`` and
      positive when the geoms are pushed apart; the rest is friction). Zero in inactive slots.
    - `torque`: (ncon, 3), N m, torsional and rolling friction torques in the world frame.
    - `geom1`, `geom2`: (ncon,) int, the geom ids in contact (names in ``plant.geom_names()``).
    - `active`: (ncon,) bool, slot holds a contact (distance below the contact's margin).
    """

    position: Any
    normal: Any
    distance: Any
    force: Any
    torque: Any
    geom1: Any
    geom2: Any
    active: Any


__all__ = ["BodyPoses", "ContactResults"]
