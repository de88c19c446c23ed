"""A tiny randomly initialised Qwen2 with a locally built byte-level tokenizer (no hub access).

Used by RL tests and the CPU learning experiment: 2 layers, hidden 64 by default (≈0.1 M parameters),
one token per UTF-8 byte plus ChatML specials. Byte-level ids without merges make tokenization
compositional — rendering ``prompt + response`` and tokenizing it gives exactly ``prompt ids +
response ids`` — so multi-turn prompts never drift from what the model sampled.

The chat template is ChatML; tools are listed by name only (a tiny model gains nothing from JSON
schemas and sequences stay short); an assistant's tool calls render as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, the format the tolerant parser reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CHAT_TEMPLATE", "SPECIAL_TOKENS", "TinyModelSpec", "build_tiny_model", "build_tiny_tokenizer"]

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>")

CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>tools\n"
    "{% for t in tools %}{{ t.function.name if t.function is defined else t.name }}"
    "{{ ', ' if not loop.last }}{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.content %}{{ m.content }}{% endif %}"
    "{% if m.tool_calls %}{% for tc in m.tool_calls %}"
    "{% set f = tc.function if tc.function is defined else tc %}"
    '<tool_call>{{ {"name": f.name, "arguments": f.arguments} | tojson }}</tool_call>'
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class TinyModelSpec(BaseModel):
    """Shape of the tiny Qwen2. Defaults give ≈0.1 M parameters (14 ms per 8×128 update on 2 cores)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hidden_size: int = Field(64, ge=8)
    intermediate_size: int = Field(128, ge=8)
    num_hidden_layers: int = Field(2, ge=1)
    num_attention_heads: int = Field(4, ge=1)
    num_key_value_heads: int = Field(2, ge=1)
    max_position_embeddings: int = Field(4096, ge=64)
    seed: int = 0


def build_tiny_tokenizer() -> Any:
    """A ``PreTrainedTokenizerFast``: 256 byte tokens + the ChatML specials, with :data:`CHAT_TEMPLATE`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(path: str | Path, spec: TinyModelSpec | None = None) -> Path:
    """Write a random tiny Qwen2 + tokenizer to ``path`` (a directory ``from_pretrained`` loads)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    spec = spec or TinyModelSpec()
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tiny_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(spec.seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out
