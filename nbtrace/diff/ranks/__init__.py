"""Tensor-parallel ranks: reassembling shards and comparing with a ranked side."""
