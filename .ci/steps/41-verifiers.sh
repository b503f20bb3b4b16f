#!/usr/bin/env bash
# tests/integrations/test_verifiers.py against the published verifiers, in a venv of its own
# (its dependencies would move the main venv's openai/pydantic/numpy). The venv is cached
# under $OTEL_ROLLOUT_CI_CACHE, keyed on .ci/requirements/verifiers.txt. Installing is best
# effort (a clear warning, the tests do not run); once installed, a failing test fails CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
req=.ci/requirements/verifiers.txt
cache=${OTEL_ROLLOUT_CI_CACHE:-/work/venvs}
venv="$cache/verifiers-$(sha256sum "$req" | cut -c1-12)"
py=""
for candidate in python3.11 python3.12 python3.13 python3; do
  if command -v "$candidate" >/dev/null 2>&1 \
    && "$candidate" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] < (3, 15))'; then
    py=$(command -v "$candidate"); break
  fi
done
if [ -z "$py" ]; then
  echo "note: no Python 3.11-3.14 here; the verifiers tests did not run" >&2
  exit 0
fi
# Built in place (a venv's scripts name their own path), marked complete only at the end.
install() {
  rm -rf "$venv" && mkdir -p "$cache" && "$py" -m venv "$venv" \
    && "$venv/bin/pip" install -q "$(grep -E '^uv==' "$req")" \
    && VIRTUAL_ENV="$venv" "$venv/bin/uv" pip install -q -r "$req" -e '.[verifiers,dev]' \
    && touch "$venv/.complete"
}
if [ ! -e "$venv/.complete" ]; then
  start=$SECONDS
  if ! install; then
    echo "warning: could not install verifiers ($req); its tests did not run" >&2
    exit 0
  fi
  echo "verifiers venv built in $((SECONDS - start)) s: $venv" >&2
fi
# This checkout, editable, on top (quick: its dependencies are already there).
if ! VIRTUAL_ENV="$venv" "$venv/bin/uv" pip install -q -e '.[verifiers,dev]'; then
  echo "warning: could not install otel-rollout into $venv; the verifiers tests did not run" >&2
  exit 0
fi
# verifiers' subprocess runtime runs its harness as a `uv` script: the venv's uv first on PATH.
PATH="$venv/bin:$PATH" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  tests/integrations/test_verifiers.py
