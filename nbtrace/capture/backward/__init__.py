"""The backward pass of a traced block (``nbtrace.trace(model, ..., backward=True)``): ``capture.py`` records it,
``calls.py`` catches one call's gradients, ``files.py`` writes a pass, ``twin.py`` runs the float64 twin backward."""

from .capture import BackwardCapture, enter_top, in_backward

__all__ = ["BackwardCapture", "enter_top", "in_backward"]
