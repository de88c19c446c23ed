"""Copy a trained orchestrator adapter into the package (``orchestrator/shipped/<model>/``) with its
manifest (base model and hash, adapter hash, version, default or opt-in).

    python experiments/ship_adapter.py experiments/runs/orchestrator-05b/checkpoints/step-000004/adapter.gguf \\
        --version 05b-sft8-parl4 --default

ADAPTER is a LoRA ``.gguf`` (a ``swarm train`` checkpoint's ``adapter.gguf``) or a PEFT adapter
directory (``RUN/sft/policy``, ``RUN/sft/checkpoint``), exported here to llama.cpp's LoRA GGUF.

The model card (``MODEL_CARD.md`` beside it) is written by hand from the evaluation.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_swarm.orchestrator.adapters import SHIPPED_DIR, AdapterManifest, resolve_orchestrator_adapter
from agent_swarm.swarm.backends.local import LOCAL_MODELS


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("adapter", type=Path, help="a LoRA .gguf exported by swarm train (checkpoint or sft/policy)")
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--version", required=True)
    ap.add_argument("--default", action="store_true", help="swarm run applies it unless --orchestrator-adapter none")
    args = ap.parse_args()
    base = LOCAL_MODELS[args.model]
    assert base.sha256 is not None
    dest = SHIPPED_DIR / args.model
    dest.mkdir(parents=True, exist_ok=True)
    if args.adapter.is_dir():  # a PEFT adapter directory: export without loading the base model
        from safetensors.torch import load_file

        from agent_swarm.swarm.backends.local import resolve_model
        from agent_swarm.swarm.backends.lora_gguf import export_lora_gguf

        cfg = json.loads((args.adapter / "adapter_config.json").read_text(encoding="utf-8"))
        tensors = {k: v.float().numpy() for k, v in load_file(args.adapter / "adapter_model.safetensors").items()}
        _, gguf = resolve_model(args.model)
        meta = {"swarm.adapter.version": args.version}
        export_lora_gguf(tensors, alpha=float(cfg["lora_alpha"]), base=gguf, out=dest / "adapter.gguf", metadata=meta)
    else:
        shutil.copyfile(args.adapter, dest / "adapter.gguf")
    manifest = AdapterManifest(
        base_model=args.model,
        base_sha256=base.sha256,
        sha256=hashlib.sha256((dest / "adapter.gguf").read_bytes()).hexdigest(),
        version=args.version,
        default=args.default,
    )
    (dest / "manifest.json").write_text(json.dumps(manifest.model_dump(), indent=1) + "\n", encoding="utf-8")
    got = resolve_orchestrator_adapter("shipped", args.model)
    assert got is not None
    print(f"shipped {got.path} ({got.path.stat().st_size} bytes, {manifest.sha256}), default={args.default}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
