"""The Trace model (Trace, Node, TensorValue), module paths and the layer rule, reading trace files.

Imports nothing above it: every other layer reads traces through this one.
"""
