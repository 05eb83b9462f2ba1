"""Example plants (importable): each a LeafSystem with numeric parameters, named ports, energies
where physical, and its equations in the docstring."""

from .acrobot import Acrobot as Acrobot
from .bouncing_ball import BouncingBall as BouncingBall
from .brusselator import Brusselator as Brusselator
from .cart_pole import CartPole as CartPole
from .double_integrator import DoubleIntegrator as DoubleIntegrator
from .pendulum import Pendulum as Pendulum
from .spring_mass_damper import SpringMassDamper as SpringMassDamper
from .van_der_pol import VanDerPol as VanDerPol


__all__ = [
    "Acrobot",
    "BouncingBall",
    "Brusselator",
    "CartPole",
    "DoubleIntegrator",
    "Pendulum",
    "SpringMassDamper",
    "VanDerPol",
]
