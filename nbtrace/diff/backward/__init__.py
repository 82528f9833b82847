"""Comparing two backward passes: the first module, in backward order, whose gradient is born wrong
(``verdict.py``; ``twin_walk.py`` from the float64 twins, ``files_walk.py`` from the runs' gradients)."""

from .verdict import BackwardVerdict, GradientDivergence, compare_backward

__all__ = ["BackwardVerdict", "GradientDivergence", "compare_backward"]
