#!/usr/bin/env bash
# The readers of the SDK's private state (otel_rollout/_base/sdk_access.py) and the span
# processors that use them, on the oldest SDK the project supports (pyproject.toml:
# opentelemetry-sdk>=1.30); the main venv has the newest. The venv is cached under
# $OTEL_ROLLOUT_CI_CACHE, keyed on .ci/requirements/oldest-sdk.txt. An install that fails
# warns and is skipped; once installed, a failing test fails the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
cache=${OTEL_ROLLOUT_CI_CACHE:-/work/venvs}
req=.ci/requirements/oldest-sdk.txt
venv="$cache/oldest-sdk-$(sha256sum "$req" | cut -c1-12)"
uv=(.venv/bin/python -m uv)
"${uv[@]}" --version >/dev/null 2>&1 || .venv/bin/pip install -q uv || uv=()
install() {
  if [ ${#uv[@]} -gt 0 ]; then
    "${uv[@]}" pip install -q -p "$venv/bin/python" "$@"
  else
    "$venv/bin/pip" install -q "$@"
  fi
}
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  mkdir -p "$cache"
  if [ ${#uv[@]} -gt 0 ]; then
    made() { "${uv[@]}" venv -q -p .venv/bin/python "$venv"; }
  else
    made() { .venv/bin/python -m venv "$venv"; }
  fi
  if made && install -r "$req" -e .; then
    touch "$venv/.complete"
  fi
  if [ ! -f "$venv/.complete" ]; then
    echo "warning: could not install $req; the oldest-SDK tests did not run" >&2
    exit 0
  fi
fi
install -r "$req" -e .  # the checkout as it is now (seconds)
"$venv/bin/python" -c 'import opentelemetry.sdk.version as v; print("== SDK", v.__version__)' >&2
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/base tests/processing/test_processor.py
