"""The port's own tests: it computes the original's function, against the live original and a golden folder."""

from pathlib import Path

import pytest
import torch

from nbtrace.testing import assert_port_matches
from toy_models import PORT_INPUTS, ToyPort, build_original, make_inputs, planted_bug

GOLDEN = Path(__file__).parent / "golden"   # recorded once from the original (record_golden.py), checked in


@pytest.fixture(scope="module")
def original():
    return build_original()


@pytest.fixture(scope="module")
def port(original):
    return ToyPort.from_original(original, bug=planted_bug())   # TOY_PORT_BUG=... plants one, for this page


def test_port_computes_the_originals_function(original, port):
    with torch.no_grad():
        assert_port_matches(original, port, make_inputs(), inputs_map=PORT_INPUTS)


def test_port_matches_the_golden_folder(port):
    with torch.no_grad():
        assert_port_matches(GOLDEN, port, inputs_map=PORT_INPUTS)
