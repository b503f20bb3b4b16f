#!/usr/bin/env bash
set -euo pipefail
cd "$(dirname "$0")/../.."
# The published skyrl needs Python >= 3.12: where one is on the machine, run the SkyRL tests
# against the real SkyRLGymGenerator too. Installing is best effort (several GB of CUDA
# torch from PyPI); once installed, a failing test fails the run.
py312=""
for candidate in /root/.pyenv/versions/3.12.*/bin/python /usr/local/bin/python3.12 /usr/bin/python3.12; do
  if [ -x "$candidate" ]; then py312=$candidate; break; fi
done
if [ -n "$py312" ]; then
  if "$py312" -m venv .venv-skyrl \
    && .venv-skyrl/bin/pip install -q "skyrl==0.4.0" "skyrl-gym==0.4.0" torch loguru tqdm \
      aiohttp orjson pybase64 -e '.[skyrl,dev]'; then
    HF_HUB_OFFLINE=1 .venv-skyrl/bin/python -m pytest -q -p no:cacheprovider tests/integrations/test_skyrl.py \
      tests/integrations/test_skyrl_parity.py tests/integrations/test_skyrl_loopstall.py \
      tests/processing/test_loopstall.py
  else
    echo "warning: could not install skyrl for $py312; the real-SkyRL tests did not run" >&2
  fi
else
  echo "note: no Python 3.12 here; the real-SkyRL tests did not run" >&2
fi
