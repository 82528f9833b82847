"""Sibling calls of one shape pair by what they compute, not by their order: an original that adds its position
embedding before its token types (or first of all) against transformers' BERT, which adds token types first. Call
order pairs at most one of the two right; the ids each embedding is handed pair them all."""

from __future__ import annotations

import pytest
import torch

import nbtrace
from tests.models import bert_embeddings

ORDERS = {"position second": ("word", "position", "segment"), "position first": ("position", "word", "segment")}
BUGS = {"clean": (None, None),
        "position table x1.1": ("position_embeddings", "Original.embeddings.position"),
        "segment table x1.1": ("token_type_embeddings", "Original.embeddings.segment")}


def _port_with(port, table):
    if table is not None:
        with torch.no_grad():
            getattr(port.embeddings, table).weight.mul_(1.1)
    return port


@pytest.mark.parametrize("order", sorted(ORDERS))
@pytest.mark.parametrize("case", sorted(BUGS))
def test_embeddings_added_in_another_order_pair_by_their_ids(tmp_path, order, case):
    seed = 3 if order == "position first" else 0
    original, port = bert_embeddings.build(seed, ORDERS[order])
    table, where = BUGS[case]
    port = _port_with(port, table)
    ids, segments = bert_embeddings.inputs(seed)
    with torch.no_grad(), nbtrace.trace(original, debug_path=tmp_path / "original"):
        original(ids, segments)
    with torch.no_grad(), nbtrace.trace(port, debug_path=tmp_path / "port"):
        port(input_ids=ids, token_type_ids=segments)
    for c in (nbtrace.compare(tmp_path / "original", tmp_path / "port"),
              nbtrace.compare(tmp_path / "original", port, inputs_map=bert_embeddings.PORT_ARGUMENTS)):
        pairs = {x.module_path: y.module_path for x, y in c.alignment.pairs}
        assert pairs["Original.embeddings.position"] == "BertModel.embeddings.position_embeddings"
        assert pairs["Original.embeddings.segment"] == "BertModel.embeddings.token_type_embeddings"
        named = c.first_divergence.module_path if c.first_divergence is not None else None
        assert named == where, c.summary()
        assert not [w for w in c.weights if w.serious and (where is None or w.module_path != where)]
