"""Example plants (importable): each a LeafSystem with numeric parameters and named ports."""

from .bouncing_ball import BouncingBall as BouncingBall
from .pendulum import Pendulum as Pendulum
from .spring_mass_damper import SpringMassDamper as SpringMassDamper
from .van_der_pol import VanDerPol as VanDerPol
