#!/usr/bin/env bash
# The AReaL integration against the published AReaL 1.0.4 (tests/integrations/test_areal.py:
# its own engine, executor and workflows on a stand-in vLLM server), in a venv of its own
# on Python 3.12 (AReaL wants < 3.13). The wheel goes in with --no-deps and then what its
# rollout path imports (.ci/requirements/areal.txt; torch shared with the SkyRL and verl
# venvs). The venv is cached under $OTEL_ROLLOUT_CI_CACHE, keyed on a hash of that file.
# Installing is best effort: without it the tests do not run and this says why; once
# installed, a failing test fails the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib.sh
. .ci/lib.sh
start=$SECONDS
cached_py312_venv areal .ci/requirements/areal.txt dev "the AReaL tests" || exit 0
echo "areal venv ready in $((SECONDS - start)) s: $venv" >&2
HF_HUB_OFFLINE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider -rfEs \
  tests/integrations/test_areal.py
# AReaL's client against the real vLLM server (tests/system/test_areal_vllm.py): where the
# vLLM step built its venv and tiny model and a model step ran on this CPU.
ready=${OTEL_ROLLOUT_CI_CACHE:-/work/venvs}/vllm-ready
if [ -f "$ready" ]; then
  { read -r vllm_venv; read -r vllm_model; } < "$ready"
  OTEL_ROLLOUT_VLLM_PYTHON=$vllm_venv/bin/python OTEL_ROLLOUT_VLLM_MODEL=$vllm_model \
    VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider -rfEs tests/system/test_areal_vllm.py
else
  echo "note: no vLLM venv that runs on this CPU (.ci/steps/30-vllm.sh);" \
    "tests/system/test_areal_vllm.py did not run" >&2
fi
