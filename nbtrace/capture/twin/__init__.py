"""The float64 twin: a module run again in float64, with exact numerics, that stays float64 through its own casts.

One home for "run it again in float64", shared by the capture (``measure_rounding``), replay and ``narrow``:
``copies`` (a module copied into a dtype), ``values`` (a call's inputs copied, cast or moved), ``widen`` (the
mode that keeps a float64 run in float64 through ``.float()``, ``.to(torch.float32)``, ``softmax(dtype=...)``),
``numerics`` (TF32 off, math attention, autocast off, random state restored; ``float64_twin()`` adds the
widening), ``fingerprint`` (a compact float64 fingerprint of a tensor), ``forward`` (the twin of a whole
forward, fingerprinted at every call).
"""
