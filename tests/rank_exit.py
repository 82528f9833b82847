"""How a test's rank process ends: the process group torn down, then out without C++ static destructors.

Gloo keeps worker threads whose destructors can run during interpreter teardown after the peer (the store's
host) has gone; on a loaded machine one rank then dies with "terminate called without an active exception"
(SIGABRT) after its work and its result files are done. `os._exit` skips that teardown; the results were
already written and flushed, so the test still judges everything the rank did.
"""

from __future__ import annotations

import os
import sys

import torch.distributed as dist


def leave() -> None:
    """End a rank cleanly: meet the others, tear the group down, flush, and exit 0 without static teardown."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
