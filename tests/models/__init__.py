"""Models and traces built from code for the tests (nothing is downloaded)."""
