import json, os, sys, time
t0 = time.perf_counter()
from agent_swarm.swarm.backends.local import LocalEngine
e = LocalEngine("qwen2.5-coder-1.5b", slots=8, ctx_per_slot=32768, threads=2, prefix_cache=False)
t = time.perf_counter()
e.start()
t1 = time.perf_counter()
huge = next((l.split()[1] for l in open("/proc/self/smaps_rollup") if l.startswith("AnonHugePages")), None)
print(json.dumps({"tunables": os.environ.get("GLIBC_TUNABLES"), "import_s": round(t - t0, 3), "start_s": round(t1 - t, 3),
                  "model_load_s": round(e.startup.model_load_s, 3) if e.startup else None, "anon_huge_kb": huge}), flush=True)
e.close()
