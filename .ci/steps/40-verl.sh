#!/usr/bin/env bash
# The verl integration against the published verl 0.9.1 (tests/integrations/test_verl.py),
# in a venv of its own on Python 3.12 (verl wants < 3.13; it pulls CUDA torch from PyPI,
# several GB, which runs on CPU). The venv is cached under $OTEL_ROLLOUT_CI_CACHE, keyed
# on a hash of .ci/requirements/verl.txt. Installing is best effort: without it the
# tests do not run and this says why; once installed, a failing test fails the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
req=.ci/requirements/verl.txt
cache=${OTEL_ROLLOUT_CI_CACHE:-/work/venvs}
venv="$cache/verl-$(sha256sum "$req" | cut -c1-16)"
py312=""
for candidate in /root/.pyenv/versions/3.12.*/bin/python /usr/local/bin/python3.12 \
  /usr/bin/python3.12; do
  if [ -x "$candidate" ]; then py312=$candidate; break; fi
done
if [ -z "$py312" ]; then
  echo "note: no Python 3.12 here; the verl tests did not run" >&2
  exit 0
fi
# uv for speed (a PyPI package), in the main venv.
if ! .venv/bin/python -m uv --version >/dev/null 2>&1; then
  .venv/bin/pip install -q uv || true
fi
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
  if "$py312" -m venv "$venv" && install -r "$req" -e '.[verl,dev]'; then
    touch "$venv/.complete"
  else
    echo "warning: could not install verl 0.9.1 into $venv; the verl tests did not run" >&2
    rm -rf "$venv"
    exit 0
  fi
fi
# The cached venv may have been made from another checkout: point its editable install
# at this one (and add anything pyproject.toml gained since).
if ! install -r "$req" -e '.[verl,dev]'; then
  echo "warning: could not install this checkout into $venv; the verl tests did not run" >&2
  exit 0
fi
HF_HUB_OFFLINE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  tests/integrations/test_verl.py
