"""The verdict: where a difference is born, its evidence, notes and weights."""
