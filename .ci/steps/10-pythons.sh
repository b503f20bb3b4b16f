#!/usr/bin/env bash
# The suite (less tests/system) on the other Pythons the project supports: 3.12.1 (setup and
# export only; the
# first release whose exit hooks cannot start threads), the newest 3.12 found here, and
# 3.13; 3.11 is the main run. Each venv is cached under $OTEL_ROLLOUT_CI_CACHE, keyed on the
# interpreter's version and .ci/requirements/pythons.txt. An interpreter missing here or a
# failed install warns and is skipped; once installed, a failing test fails the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
cache=${OTEL_ROLLOUT_CI_CACHE:-/work/venvs}
req=.ci/requirements/pythons.txt
extras=otlp,cli,skyrl,vllm  # .[dev] less Ray (tests/system only) and the tools in $req
uv=(.venv/bin/python -m uv)
"${uv[@]}" --version >/dev/null 2>&1 || .venv/bin/pip install -q uv || uv=()
status=0
seen=""
for py in /root/.pyenv/versions/3.12.*/bin/python /root/.pyenv/versions/3.13.*/bin/python \
          $(command -v python3.12 python3.13 2>/dev/null); do
  [ -x "$py" ] || continue
  # (a pyenv shim for a version not selected is executable but fails: skipped)
  version=$("$py" -c 'import platform; print(platform.python_version())' 2>/dev/null) || continue
  case " $seen " in *" $version "*) continue ;; esac
  seen="$seen $version"
  key=$(cat "$req" | sha256sum | cut -c1-12)
  venv="$cache/py$version-$key"
  if [ ! -x "$venv/bin/pytest" ]; then
    rm -rf "$venv"
    if [ ${#uv[@]} -gt 0 ]; then
      ok() { "${uv[@]}" venv -q -p "$py" "$venv" && "${uv[@]}" pip install -q -p "$venv/bin/python" -r "$req"; }
    else
      ok() { "$py" -m venv "$venv" && "$venv/bin/pip" install -q -r "$req"; }
    fi
    if ! ok; then
      echo "warning: could not install the test requirements for Python $version; its run skipped" >&2
      rm -rf "$venv"
      continue
    fi
  fi
  # the checkout with what pyproject.toml asks now (the cached venv has most of it: seconds)
  if [ ${#uv[@]} -gt 0 ]; then
    checkout() { "${uv[@]}" pip install -q -p "$venv/bin/python" -r "$req" -e ".[$extras]"; }
  else
    checkout() { "$venv/bin/pip" install -q -r "$req" -e ".[$extras]"; }
  fi
  if ! checkout; then
    echo "warning: could not install otel-rollout's dependencies for Python $version; its run skipped" >&2
    continue
  fi
  echo "== Python $version" >&2
  start=$SECONDS
  # 3.12 (3.12.1 here: exit hooks that cannot start threads) runs the layers that act at
  # exit and shutdown; the trainer steps run their suites on it too. 3.13 runs everything.
  case $version in
    3.12.*) what=(tests/setup tests/export) ;;
    *) what=() ;;
  esac
  "$venv/bin/python" -m pytest -q -rfEs -p no:cacheprovider -m 'not system' "${what[@]}" || status=1
  echo "== Python $version: $((SECONDS - start)) s" >&2
done
[ -n "$seen" ] || echo "warning: no Python 3.12 or 3.13 here; the suite ran on 3.11 only" >&2
exit $status
