"""One engine start of the 1.5B with the automatic plan's layout (8 slots x 32,768 tokens), timed; a JSON
line with the seconds and the huge pages the process holds (run.sh runs it with and without the tunable)."""

import json
import os
import time

from agent_swarm.swarm.backends.local import LocalEngine

engine = LocalEngine("qwen2.5-coder-1.5b", slots=8, ctx_per_slot=32768, threads=2, prefix_cache=False)
t = time.perf_counter()
engine.start()
started = time.perf_counter() - t
with open("/proc/self/smaps_rollup") as f:
    huge = next((line.split()[1] for line in f if line.startswith("AnonHugePages")), None)
row = {
    "tunables": os.environ.get("GLIBC_TUNABLES"),
    "start_s": round(started, 3),
    "model_load_s": round(engine.startup.model_load_s, 3) if engine.startup else None,
    "anon_huge_kb": huge,
}
print(json.dumps(row), flush=True)
engine.close()
