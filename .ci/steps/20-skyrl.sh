#!/usr/bin/env bash
# The SkyRL integration against the published skyrl 0.4.0 (SkyRLGymGenerator itself, its
# own timers for parity), in a venv of its own on Python 3.12: skyrl does not import on
# 3.11. The venv is cached under $OTEL_ROLLOUT_CI_CACHE, keyed on a hash of
# .ci/requirements/skyrl.txt. Installing is best effort (several GB of CUDA torch from
# PyPI, which runs on CPU): without it these tests do not run and this says why; once
# installed, a failing test fails the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
req=.ci/requirements/skyrl.txt
cache=${OTEL_ROLLOUT_CI_CACHE:-/work/venvs}
venv="$cache/skyrl-$(sha256sum "$req" | cut -c1-16)"
py312=""
for candidate in /root/.pyenv/versions/3.12.*/bin/python /usr/local/bin/python3.12 \
  /usr/bin/python3.12; do
  if [ -x "$candidate" ]; then py312=$candidate; break; fi
done
if [ -z "$py312" ]; then
  echo "note: no Python 3.12 here; the real-SkyRL tests did not run" >&2
  exit 0
fi
.venv/bin/python -m uv --version >/dev/null 2>&1 || .venv/bin/pip install -q uv || true
install() {
  if .venv/bin/python -m uv --version >/dev/null 2>&1; then
    .venv/bin/python -m uv pip install -q --python "$venv/bin/python" "$@"
  else
    "$venv/bin/pip" install -q "$@"
  fi
}
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  mkdir -p "$cache"
  if "$py312" -m venv "$venv" && install -r "$req" -e '.[skyrl,dev]'; then
    touch "$venv/.complete"
  else
    echo "warning: could not install skyrl 0.4.0 into $venv; the real-SkyRL tests did not run" >&2
    rm -rf "$venv"
    exit 0
  fi
fi
# A cached venv may come from another checkout: point its editable install at this one.
install -r "$req" -e '.[skyrl,dev]'
HF_HUB_OFFLINE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider -rfEs \
  tests/integrations/test_skyrl.py tests/integrations/test_skyrl_parity.py \
  tests/integrations/test_skyrl_loopstall.py tests/processing/test_loopstall.py
