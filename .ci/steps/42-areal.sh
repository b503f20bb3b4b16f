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
