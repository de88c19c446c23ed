"""Per-arm means of the BFCL scores in each run dir's raw rows: ``python compare.py RUN_DIR...``."""

from __future__ import annotations

import gzip
import json
import statistics as st
import sys
from pathlib import Path


def main(dirs: list[str]) -> None:
    for d in dirs:
        with gzip.open(Path(d) / "episodes.jsonl.gz", "rt") as f:
            rows = [json.loads(line) for line in f]
        for arm in ("swarm", "single-parallel", "single"):
            r = [x for x in rows if x["arm"] == arm]
            if not r:
                continue
            m = {k: st.mean(x["scores"][k] for x in r) for k in ("call_f1", "call_precision", "call_recall")}
            t = {k: sum(x["scores"][k] for x in r) for k in ("emitted_calls", "dropped_duplicate_calls", "gold_calls")}
            print(
                f"{Path(d).name} {arm}: n {len(r)}, call-F1 {m['call_f1']:.3f}, precision {m['call_precision']:.3f}, "
                f"recall {m['call_recall']:.3f}, calls emitted {t['emitted_calls']} (gold {t['gold_calls']}, "
                f"duplicate assignments {t['dropped_duplicate_calls']}), fan-out {sum(x['subagents'] > 0 for x in r)}, "
                f"critical steps median {st.median(x['critical_steps'] for x in r)}, "
                f"wall s median {st.median(x['wall_time_s'] for x in r):.1f}"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
