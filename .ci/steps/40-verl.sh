#!/usr/bin/env bash
# The verl integration against the published verl 0.9.1 (tests/integrations/test_verl.py),
# in a venv of its own on Python 3.12 (verl wants < 3.13; it pulls CUDA torch from PyPI,
# several GB, which runs on CPU). The venv is cached under $OTEL_ROLLOUT_CI_CACHE, keyed
# on a hash of .ci/requirements/verl.txt. Installing is best effort: without it the
# tests do not run and this says why; once installed, a failing test fails the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib.sh
. .ci/lib.sh
cached_py312_venv verl .ci/requirements/verl.txt 'verl,dev' "the verl tests" || exit 0
HF_HUB_OFFLINE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider -rfEs \
  tests/integrations/test_verl.py tests/integrations/test_verl_steps.py
