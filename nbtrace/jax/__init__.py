"""nbtrace for JAX: trace a Flax model into the files nbtrace writes for a PyTorch model, without torch.

    import nbtrace.jax
    recorded = nbtrace.jax.trace(model, variables, input_ids, debug_path="original")
    recorded.trace                       # an nbtrace.Trace, as nbtrace.load_trace("original") gives it

The folder compares with a PyTorch port's (``nbtrace.compare("original", port_folder)``) or with the live port
(``nbtrace.compare("original", port)``), judged with the float64 twins both sides recorded. See docs/jax.md.
"""

from .trace import JaxTrace, trace

__all__ = ["JaxTrace", "trace"]
