"""Runs the code blocks of README.md and docs/*.md (see docs/architecture.md, "Tests")."""
