"""What a traced run must leave as it found it: torch's print options, grad mode, the model's forwards,
hooks and attributes (a snapshot before and after, and the problems between them)."""

from __future__ import annotations


def _print_opts() -> dict:
    import torch

    po = torch._tensor_str.PRINT_OPTS
    return {k: getattr(po, k) for k in ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")}


def snapshot_state(model) -> dict:
    import torch
    import torch.nn.modules.module as mm

    return {
        "print_opts": _print_opts(),
        "grad_enabled": torch.is_grad_enabled(),
        "default_dtype": str(torch.get_default_dtype()),
        "global_hooks": {
            name: len(getattr(mm, name, {}) or {})
            for name in ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                         "_global_module_registration_hooks")
        },
        "forward_in_dict": {n or "<root>": id(m.__dict__["forward"]) for n, m in model.named_modules()
                            if "forward" in m.__dict__},
        "module_hooks": {
            n or "<root>": [len(m._forward_hooks), len(m._forward_pre_hooks)]
            for n, m in model.named_modules() if m._forward_hooks or m._forward_pre_hooks
        },
        "model_attrs": sorted(model.__dict__),
    }


def state_problems(before: dict, after: dict, baseline: dict) -> tuple[list[str], list[str]]:
    """(problems, notes): problems are broken promises, notes are informational. ``baseline`` is the state
    of another fresh copy of the model after a plain forward (models may install hooks of their own, e.g.
    transformers' output recorders)."""
    problems, notes = [], []
    if before["print_opts"] != after["print_opts"]:
        problems.append(f"torch print options changed: {before['print_opts']} -> {after['print_opts']}")
    if before["grad_enabled"] != after["grad_enabled"]:
        problems.append(f"grad mode changed: {before['grad_enabled']} -> {after['grad_enabled']}")
    if before["default_dtype"] != after["default_dtype"]:
        problems.append(f"default dtype changed: {before['default_dtype']} -> {after['default_dtype']}")
    if before["global_hooks"] != after["global_hooks"]:
        problems.append(f"global module hooks left behind: {before['global_hooks']} -> {after['global_hooks']}")
    fb, fa = before["forward_in_dict"], after["forward_in_dict"]
    new_fwd = sorted(set(fa) - set(fb))
    if new_fwd:
        problems.append(f"'forward' left in __dict__ of {len(new_fwd)} module(s): {new_fwd[:8]}")
    lost = sorted(set(fb) - set(fa))
    if lost:
        problems.append(f"the model's own instance 'forward' removed from {lost[:8]}")
    swapped = sorted(n for n in set(fa) & set(fb) if fa[n] != fb[n])
    if swapped:
        problems.append(f"the model's own instance 'forward' replaced on {swapped[:8]}")
    new_hooks = sorted(n for n, c in after["module_hooks"].items() if c != baseline["module_hooks"].get(n))
    if new_hooks:
        problems.append(f"forward hooks left on {len(new_hooks)} module(s) (beyond those a plain forward "
                        f"leaves): {[(n, after['module_hooks'][n]) for n in new_hooks[:8]]}")
    new_attrs = sorted(set(after["model_attrs"]) - set(baseline["model_attrs"]))
    if new_attrs:
        notes.append(f"attributes added to the model object: {new_attrs}")
    return problems, notes
