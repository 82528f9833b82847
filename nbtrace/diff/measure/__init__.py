"""Measuring a difference: per-element metrics and rounding measured against a float64 truth."""
