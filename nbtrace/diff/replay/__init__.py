"""Replaying live modules on recorded inputs (one side or both sides live)."""
