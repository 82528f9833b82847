"""Runs of several forwards: step-by-step comparison and the KV cache check."""
