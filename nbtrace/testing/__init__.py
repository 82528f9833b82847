"""nbtrace in a port's own test suite: an assertion that fails with where the port first differs.

    from nbtrace.testing import assert_port_matches

    def test_port_matches_original():
        assert_port_matches(original, port, inputs={"input_ids": ids})   # both live
        assert_port_matches("tests/golden/original", port)               # a golden folder, the live port

A failure is an ``AssertionError`` (pytest and unittest show its message): ``PortDiverges``,
``PortUnresolved`` or ``PortLosesPrecision``, each with the whole ``comparison``; with ``backward=True`` (two
folders recorded with ``nbtrace.trace(..., backward=True)``) also ``PortBackwardDiverges`` and
``PortBackwardUnresolved``.
"""

from .assertion import (
    PortBackwardDiverges, PortBackwardUnresolved, PortDiverges, PortLosesPrecision, PortMismatch, PortUnresolved,
    assert_port_matches,
)

__all__ = ["PortBackwardDiverges", "PortBackwardUnresolved", "PortDiverges", "PortLosesPrecision", "PortMismatch",
           "PortUnresolved", "assert_port_matches"]
