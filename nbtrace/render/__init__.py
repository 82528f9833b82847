"""Showing traces and comparisons: one vocabulary, text, static HTML, tables and plots."""
