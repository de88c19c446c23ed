"""The trainer's seams on their own: serving chosen by name from a registry, and the pure policy update."""

from __future__ import annotations

import ast
import importlib
import inspect
import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agent_swarm.orchestrator.rl.checkpoint import state_checksum  # noqa: E402
from agent_swarm.orchestrator.rl.config import OptimConfig, PtxConfig, TrainConfig, load_train_config  # noqa: E402
from agent_swarm.orchestrator.rl.policy import frozen_copy  # noqa: E402
from agent_swarm.orchestrator.rl.sequences import TrainingSequence  # noqa: E402
from agent_swarm.orchestrator.rl.serving import SERVING, Serving, ServingInputs, TransformersWeightSync  # noqa: E402
from agent_swarm.orchestrator.rl.tiny import TinyModelSpec, build_tiny_model  # noqa: E402
from agent_swarm.orchestrator.rl.trainer import Trainer  # noqa: E402
from agent_swarm.orchestrator.rl.update import UpdateSpec, build_optimizers, update_policy  # noqa: E402
from agent_swarm.swarm.errors import ConfigError, UnknownNameError  # noqa: E402

TINY = "[tiny]\nhidden_size = 32\nintermediate_size = 64\n"
ROOT = Path(__file__).resolve().parents[2]
SEAMS = ("checkpoint", "config", "environment", "metrics", "policy", "sequences", "serving", "trainer", "update")


def test_each_seam_exports_what_it_defines_and_nothing_is_imported_through_the_trainer() -> None:
    for seam in SEAMS:
        mod = importlib.import_module(f"agent_swarm.orchestrator.rl.{seam}")
        names = list(mod.__all__)
        assert names == sorted(names) and len(names) == len(set(names)), seam
        for n in names:
            obj = getattr(mod, n)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                assert obj.__module__ == mod.__name__, f"{seam}.{n} comes from {obj.__module__}"
    assert importlib.import_module("agent_swarm.orchestrator.rl.trainer").__all__ == ["Trainer"]
    through = [
        f"{p.relative_to(ROOT)}: {alias.name}"
        for top in ("orchestrator", "experiments", "tests", "examples", "scripts")
        for p in (ROOT / top).rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module == "agent_swarm.orchestrator.rl.trainer"
        for alias in node.names
        if alias.name != "Trainer"
    ]
    assert not through, f"names imported from agent_swarm.orchestrator.rl.trainer instead of their seam: {through}"


def test_an_unknown_serving_engine_is_a_config_error_naming_the_known_ones(tmp_path: Path) -> None:
    p = tmp_path / "train.toml"
    p.write_text(f'run_dir = "out"\nengine = "sglang"\n{TINY}')
    with pytest.raises(ConfigError, match=r"engine: .*unknown serving engine 'sglang'; known: ") as bad:
        load_train_config(p)
    assert {"llamacpp", "transformers", "vllm"} <= set(str(bad.value).rsplit("known: ", 1)[1].split(", "))
    with pytest.raises(UnknownNameError, match="sglang"):
        SERVING.get("sglang")
    for name in ("transformers", "vllm", "llamacpp"):
        p.write_text(f'run_dir = "out"\nengine = "{name}"\n{TINY}')
        assert load_train_config(p).engine == name


def test_from_config_samples_from_the_serving_kind_the_config_names(tmp_path: Path) -> None:
    """A registered kind is all it takes: ``engine = "name"`` builds it and the trainer samples from it."""
    seen: list[ServingInputs] = []

    def recording(inputs: ServingInputs) -> Serving:
        seen.append(inputs)
        served = frozen_copy(inputs.policy, name="served")
        return Serving(engine=served, sync=TransformersWeightSync(served))

    SERVING.add("test-recording", recording, replace=True)
    (tmp_path / "tasks.jsonl").write_text('{"id": "a", "prompt": "hi"}\n')
    p = tmp_path / "train.toml"
    p.write_text(f'run_dir = "out"\ntasks_file = "tasks.jsonl"\nengine = "test-recording"\ndtype = "float32"\n{TINY}')
    trainer = Trainer.from_config(load_train_config(p))
    (inputs,) = seen
    assert inputs.policy is trainer.policy and inputs.policy_dir == tmp_path / "out" / "init-policy"
    assert inputs.gguf is None and inputs.run_dir == tmp_path / "out"
    assert trainer.engine is not trainer.policy and getattr(trainer.engine, "model", None) == "served"
    assert isinstance(trainer.sync, TransformersWeightSync) and trainer.sync.engine is trainer.engine
    # the colocated default builds nothing: the policy samples and nothing is pushed
    p.write_text(f'run_dir = "out2"\ntasks_file = "tasks.jsonl"\n{TINY}')
    colocated = Trainer.from_config(load_train_config(p))
    assert colocated.engine is colocated.policy and colocated.sync is None


def _batch(rng: random.Random) -> list[TrainingSequence]:
    seqs = []
    for _ in range(5):
        n, p = rng.randrange(6, 14), rng.randrange(2, 5)
        seqs.append(
            TrainingSequence(
                ids=tuple(rng.randrange(10, 200) for _ in range(n)),
                mask=(0,) * p + (1,) * (n - p),
                behaviour_logprobs=(0.0,) * p + tuple(-3 * rng.random() for _ in range(n - p)),
                advantage=rng.uniform(-1, 1),
                temperature=1.0,
            )
        )
    return seqs


def test_update_policy_is_a_function_of_its_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same model, batch, settings and random state give the same weights and figures; it writes no file."""
    from transformers import AutoModelForCausalLM

    model_dir = build_tiny_model(tmp_path / "m", TinyModelSpec(seed=3, hidden_size=32, intermediate_size=64))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    seqs = _batch(random.Random(0))
    sft = [([5, 6, 7, 8, 9], [0, 0, 1, 1, 1])]
    spec = UpdateSpec(optim=OptimConfig(lr=1e-2, micro_batch=2, minibatches=2, epochs=2), ptx=PtxConfig(coef=0.5))
    start = state_checksum(AutoModelForCausalLM.from_pretrained(model_dir))

    def once() -> tuple[str, dict[str, float], random.Random]:
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        rng = random.Random(7)
        upd = update_policy(model, build_optimizers(model, spec.optim), seqs, spec, rng=rng, sft=sft)
        assert not model.training
        return state_checksum(model), upd, rng

    first, again = once(), once()
    assert first[0] == again[0] != start
    assert first[1] == again[1] and first[2].getstate() == again[2].getstate() != random.Random(7).getstate()
    upd = first[1]
    assert set(upd) == {
        "loss",
        "policy_loss",
        "ptx_loss",
        "grad_norm",
        "masked_token_frac",
        "ratio_mismatch",
        "tokens",
        "sequence_tokens",
    }
    assert upd["tokens"] == sum(sum(s.mask[1:]) for s in seqs) and upd["grad_norm"] > 0
    assert upd["sequence_tokens"] == 2 * sum(len(s.ids) for s in seqs)
    assert upd["ratio_mismatch"] > 0  # the random behaviour logprobs are far from the model's
    assert list(cwd.iterdir()) == []
    # no sequences: zero figures, weights untouched
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    empty = update_policy(model, build_optimizers(model, spec.optim), [], spec, rng=random.Random(7))
    assert empty["loss"] == empty["grad_norm"] == empty["tokens"] == 0 and state_checksum(model) == start


def test_the_trainer_update_is_update_policy_with_the_configs_settings(tmp_path: Path) -> None:
    cfg = TrainConfig(run_dir=tmp_path, loss="ppo_clip", old_logprobs="recompute", ptx=PtxConfig(coef=0.2))
    spec = UpdateSpec.of(cfg)
    assert (spec.loss, spec.old_logprobs, spec.ptx, spec.optim, spec.loss_params) == (
        "ppo_clip",
        "recompute",
        cfg.ptx,
        cfg.optim,
        cfg.loss_params,
    )


def test_each_separate_engine_says_what_it_needs_before_starting_anything(tmp_path: Path) -> None:
    no_policy = ServingInputs(policy=None, run_dir=tmp_path)  # type: ignore[arg-type]  # never reached
    with pytest.raises(ConfigError, match="engine = 'vllm' serves a transformers model directory"):
        SERVING.get("vllm")(no_policy)
    with pytest.raises(ConfigError, match="engine = 'llamacpp' serves a GGUF base with the LoRA adapter"):
        SERVING.get("llamacpp")(no_policy)
    assert SERVING.get("transformers")(no_policy) == Serving()
    assert not list(tmp_path.iterdir())
