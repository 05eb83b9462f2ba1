"""Integrators and simulation (Drake's systems/analysis)."""
