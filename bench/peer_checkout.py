"""``bench/peer_adapter.py`` of another agent-swarm checkout, beside this one's in one run of the peer suite.

The suite runs every implementation in a fresh worker process, all with one ``PYTHONPATH``, so two
checkouts of ``agent_swarm`` cannot both be on it. This adapter puts ``$SWARM_CHECKOUT`` first on the
worker's path before anything imports ``agent_swarm``, and runs that checkout's own adapter: a before/after
pair (or any two commits) in one run, interleaved like every other implementation. From the suite's folder:

    SWARM_CHECKOUT=<before checkout> PYTHONPATH=<checkout>:<checkout>/bench python run_suite.py \\
        --impls anyio-taskgroup --impl before=peer_checkout:make --impl head=peer_adapter:make --ns 1024
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any


def make() -> Any:
    tree = Path(os.environ.get("SWARM_CHECKOUT", "")).resolve()
    adapter = tree / "bench" / "peer_adapter.py"
    if not os.environ.get("SWARM_CHECKOUT") or not adapter.is_file():
        raise RuntimeError(f"SWARM_CHECKOUT must name a checkout with bench/peer_adapter.py (got {str(tree)!r})")
    if "agent_swarm" in sys.modules:
        raise RuntimeError("agent_swarm is imported already: this worker would run another checkout's code")
    sys.path.insert(0, str(tree))
    spec = importlib.util.spec_from_file_location("peer_adapter_of_checkout", adapter)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    imported = Path(sys.modules["agent_swarm"].__file__ or "").resolve()
    if not imported.is_relative_to(tree):
        raise RuntimeError(f"agent_swarm came from {imported}, not from {tree}")
    return module.make()
