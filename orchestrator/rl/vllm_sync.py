"""Push trainer weights into vLLM's in-process engine
(:class:`~agent_swarm.swarm.backends.vllm_engine.VLLMEngineBackend`).

The transport works on CPU and GPU alike and needs no NCCL group: the trainer writes its state dict
to a safetensors file, then asks every vLLM worker (``AsyncLLM.collective_rpc``) to load it through
the model's own ``load_weights`` (which knows vLLM's fused layouts such as ``qkv_proj``), resets the
prefix cache (cached KV blocks were computed with the old weights) and tags the engine with the new
weight version, which vLLM reports per output.

The engine must be created with the worker extension::

    VLLMEngineBackend(model_dir, engine_args={"worker_extension_cls": WORKER_EXTENSION})

and the trainer given ``sync=VLLMWeightSync(backend, staging_dir)``. For large models on GPUs,
vLLM's NCCL/IPC weight-transfer engines (``init_weight_transfer_engine``) avoid the file round trip.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio.to_thread

from agent_swarm.swarm.errors import BackendError, ConfigError

__all__ = [
    "WORKER_EXTENSION",
    "VLLMWeightLoader",
    "VLLMWeightSync",
]

WORKER_EXTENSION = "agent_swarm.orchestrator.rl.vllm_sync.VLLMWeightLoader"
_RPC = "swarm_load_weights"


class VLLMWeightLoader:
    """vLLM worker extension (mixed into the worker class by ``worker_extension_cls``)."""

    model_runner: Any
    reload_weights: Any

    def swarm_load_weights(self, path: str) -> int:
        """Load a safetensors state dict (HF parameter names) into this worker's model.

        Uses the worker's in-place ``reload_weights`` (checkpoint format): kernels that repack weights
        after loading (vLLM's CPU backend does) are re-initialised layer by layer, which a bare
        ``model.load_weights`` into already-processed parameters cannot do.
        """
        from safetensors.torch import load_file

        weights = load_file(path)
        reload = getattr(self, "reload_weights", None)
        if reload is not None:
            reload(weights_iterator=iter(weights.items()), is_checkpoint_format=True)
        else:  # older vLLM: plain load into the (unprocessed) model
            runner = self.model_runner
            model = runner.get_model() if hasattr(runner, "get_model") else runner.model
            model.load_weights(weights=weights.items())
        return len(weights)


class VLLMWeightSync:
    """``Trainer(..., sync=VLLMWeightSync(backend, staging_dir))``: a started ``VLLMEngineBackend``."""

    def __init__(self, backend: Any, staging_dir: str | Path) -> None:
        self.backend = backend
        self.staging = Path(staging_dir)

    async def _engine(self) -> Any:
        start = getattr(self.backend, "start", None)
        if start is not None:
            await start()  # idempotent: the engine lives in the trainer's event loop
        engine = getattr(self.backend, "_engine", None)
        if engine is None:
            raise ConfigError("the vLLM backend has no engine; pass a started VLLMEngineBackend")
        return engine

    async def push(self, model: Any, version: int) -> None:
        from safetensors.torch import save_file

        engine = await self._engine()
        self.staging.mkdir(parents=True, exist_ok=True)
        path = self.staging / f"policy-v{version}.safetensors"
        # clone: tied parameters share storage, which safetensors refuses to write twice
        state = {k: v.detach().to("cpu").clone().contiguous() for k, v in model.state_dict().items()}
        await anyio.to_thread.run_sync(lambda: save_file(state, str(path)))
        try:
            results = await engine.collective_rpc(_RPC, args=(str(path),))
        except Exception as exc:
            raise BackendError(
                f"vLLM did not load the new weights ({type(exc).__name__}: {exc}); was the engine created "
                f"with engine_args={{'worker_extension_cls': {WORKER_EXTENSION!r}}}?"
            ) from exc
        finally:
            if path.exists():
                os.unlink(path)  # the engine has copied the weights (or failed): never leave GBs behind
        if not results or not all(isinstance(n, int) and n > 0 for n in results):
            raise BackendError(f"vLLM workers loaded no weights from the pushed state dict: {results}")
        await engine.reset_prefix_cache()
        if hasattr(engine, "update_weight_version"):
            await engine.update_weight_version(str(version))
        self.backend.weight_version = str(version)
