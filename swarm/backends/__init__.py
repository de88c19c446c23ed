"""Real model backends behind the :class:`agent_swarm.swarm.backend.ModelBackend` protocol.

Heavy engines are imported lazily: importing this package pulls in neither xllamacpp nor vLLM nor
torch. Import the concrete backend from its module (``agent_swarm.swarm.backends.openai_http``,
``agent_swarm.swarm.backends.local``, ``agent_swarm.swarm.backends.vllm_engine``).
"""

from __future__ import annotations

from agent_swarm.swarm.backends.openai_http import OpenAIBackend, RetryPolicy
from agent_swarm.swarm.backends.toolparse import ParsedOutput, action_schema, parse_tool_calls

__all__ = ["OpenAIBackend", "ParsedOutput", "RetryPolicy", "action_schema", "parse_tool_calls"]
