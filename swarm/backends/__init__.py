"""Real model backends behind the :class:`swarm.backend.ModelBackend` protocol.

Heavy engines are imported lazily: importing this package pulls in neither xllamacpp nor vLLM nor
torch. Import the concrete backend from its module (``swarm.backends.openai_http``,
``swarm.backends.local``, ``swarm.backends.vllm_engine``).
"""

from __future__ import annotations

from swarm.backends.openai_http import OpenAIBackend, RetryPolicy
from swarm.backends.toolparse import ParsedOutput, action_schema, parse_tool_calls

__all__ = ["OpenAIBackend", "ParsedOutput", "RetryPolicy", "action_schema", "parse_tool_calls"]
