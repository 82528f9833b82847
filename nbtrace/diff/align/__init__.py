"""Aligning two traces' calls: value-free features, data flow, anchors, pairing tensors."""
