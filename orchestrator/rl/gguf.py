"""Turn a packaged GGUF chat model into a trainable transformers directory (dequantised, no hub).

transformers loads GGUF weights (with ``gguf`` + ``accelerate``) but the result carries a GGUF
quantizer and refuses ``save_pretrained``; we rebuild a clean model from the config, copy the
dequantised weights in, and save it with the GGUF's tokenizer and chat template. SmolLM2-135M takes
about 20 s once; the directory then reloads in under a second.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from swarm.errors import ConfigError

__all__ = ["dequantize_gguf"]


def dequantize_gguf(gguf: str | Path, out: str | Path, *, dtype: str = "bfloat16") -> Path:
    """Write ``out`` (config, safetensors, tokenizer) from the GGUF file ``gguf``; reuse it if present."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src, dst = Path(gguf), Path(out)
    if (dst / "config.json").is_file() and any(dst.glob("*.safetensors")):
        return dst
    if not src.is_file():
        raise ConfigError(f"GGUF file {src} does not exist")
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ConfigError(f"unknown torch dtype {dtype!r}; use float32, bfloat16 or float16")
    kw: dict[str, Any] = {"gguf_file": src.name, "local_files_only": True}
    tok = AutoTokenizer.from_pretrained(src.parent, **kw)
    quantised = AutoModelForCausalLM.from_pretrained(src.parent, dtype=torch.float32, **kw)
    config = AutoConfig.from_pretrained(src.parent, **kw)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    clean: Any = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # type: ignore[no-untyped-call]
    missing, unexpected = clean.load_state_dict(quantised.state_dict(), strict=False)
    if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:
        raise ConfigError(
            f"GGUF weights of {src.name} do not fit {type(clean).__name__}: {missing[:5]} {unexpected[:5]}"
        )
    if getattr(config, "tie_word_embeddings", False):
        clean.tie_weights()
    clean = clean.to(torch_dtype)
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    clean.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if dst.exists():
        shutil.rmtree(dst)  # a partial directory from an interrupted conversion
    tmp.replace(dst)
    return dst
