"""Which top-level input of a run is its padding mask: one rule, torch-free, for the PyTorch capture
(``forward.find_valid``, tested on the device), the JAX capture (``find_in_arrays``, numpy) and a comparison reading a
trace's recorded inputs (``diff/measure/noise.padding_rows``).

A padding mask is a ``(batch, seq)`` integer or bool tensor whose nonzero entries mark the real tokens. A run's
mask is, in this order:

1. **declared**: ``nbtrace.trace(model, padding_mask="keep")`` names the argument (its keyword, or its place
   ``args.1`` / ``kwargs.keep``); ``padding_mask=False`` says the run has none;
2. **named**: a keyword whose name holds ``mask`` (``attention_mask``), two-dimensional, integer or bool;
3. **found by what it holds**: a two-dimensional integer or bool input shaped like another input's first two
   dimensions (the token ids, or embeddings ``(batch, seq, hidden)``) that holds only 0 and 1 with a 1 in every row
   (every sequence has a real token): the first such in argument order. Token ids and position ids hold other
   values; segment ids of one segment hold a row of zeros. A port called ``port(tokens=ids, keep=mask)`` has its
   mask found whatever its argument is called; a 0/1 argument ahead of the mask (segment ids of two segments) is
   taken for it unless the mask is declared (a live port is traced with the reference's mask declared:
   ``diff/replay/live.py``).

A mask that leaves nothing out (all ones) is no padding, the same as no mask: the sidecar records neither
(``print_numbers.padding_text``), so a run given an all-ones mask and a run given none compare.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: one top-level input: its place (``args.1``, ``kwargs.keep``), its shape, and whether it is integer or bool
Input = tuple[str, tuple[int, ...], bool]


def declared_place(inputs: Sequence[Input], declared: str) -> str | None:
    """The place of the input ``declared`` names: its place as recorded, or its keyword (the last part of it)."""
    return next((place for place, _, _ in inputs
                 if place == declared or place.rsplit(".", 1)[-1] == declared), None)


def padding_candidates(inputs: Sequence[Input], declared: str | bool | None = None) -> tuple[list[str], bool]:
    """The places that may hold the run's padding mask, in the order they are tried, and whether they are taken as
    they are (``True``: declared or named, no value read) or each must show by its values that it is a mask
    (``holds_mask``). See the module docstring for the rule."""
    if declared is False:
        return [], True
    if isinstance(declared, str):
        place = declared_place(inputs, declared)
        return ([place] if place is not None else []), True
    two_d = [(place, shape) for place, shape, integer in inputs if integer and len(shape) == 2]
    named = [place for place, _ in two_d if place.startswith("kwargs.") and "mask" in place.rsplit(".", 1)[-1].lower()]
    if named:
        return named[:1], True
    found = [place for place, shape in two_d
             if any(other != place and len(theirs) >= 2 and tuple(theirs[:2]) == shape
                    for other, theirs, _ in inputs)]
    return found, False


def holds_mask(binary: bool, every_row: bool) -> bool:
    """A candidate found by its values is the padding mask when it holds only 0 and 1 (``binary``) and every row holds
    a real token (``every_row``)."""
    return bool(binary) and bool(every_row)


def check_declared(declared: object) -> str | bool | None:
    """``padding_mask=`` as given to a capture: None (found), False (none) or an argument's name; else TypeError."""
    if declared is None or declared is False or (isinstance(declared, str) and declared):
        return declared  # type: ignore[return-value]
    raise TypeError(f"padding_mask must be the name of the argument that holds the padding mask (a keyword such as "
                    f"'attention_mask', or a place such as 'args.1'), False for none, or None to find it; "
                    f"got {declared!r}")


def find_in_arrays(arrays: dict[str, Any], declared: str | bool | None = None) -> tuple[Any, str | None]:
    """The padding mask among host arrays by place (a JAX run's top-level inputs, already on the host) and its place,
    or ``(None, None)``: the same rule, its values read with numpy. ``True`` where a token is real."""
    import numpy as np

    def integer(a: Any) -> bool:
        return np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_

    inputs = [(place, tuple(a.shape), integer(a)) for place, a in arrays.items()]
    places, named = padding_candidates(inputs, declared)
    for place in places:
        mask = arrays[place]
        if mask.ndim != 2 or not integer(mask):
            continue
        if named or holds_mask(np.isin(mask, (0, 1)).all(), (mask != 0).any(axis=1).all()):
            return mask != 0, place
    return None, None
