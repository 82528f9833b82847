"""Comparing two traces: aligning their calls, measuring differences, finding where they part ways."""
