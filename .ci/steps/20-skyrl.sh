#!/usr/bin/env bash
# The SkyRL integration against the published skyrl 0.4.0 (SkyRLGymGenerator itself, its
# own timers for parity), in a venv of its own on Python 3.12: skyrl does not import on
# 3.11. The venv is cached under $OTEL_ROLLOUT_CI_CACHE, keyed on a hash of
# .ci/requirements/skyrl.txt. Installing is best effort (several GB of CUDA torch from
# PyPI, which runs on CPU): without it these tests do not run and this says why; once
# installed, a failing test fails the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib.sh
. .ci/lib.sh
cached_py312_venv skyrl .ci/requirements/skyrl.txt 'skyrl,dev' "the real-SkyRL tests" || exit 0
HF_HUB_OFFLINE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider -rfEs \
  tests/integrations/test_skyrl.py tests/integrations/test_skyrl_parity.py \
  tests/integrations/test_skyrl_loopstall.py tests/processing/test_loopstall.py \
  tests/integrations/test_skyrl_steps.py
