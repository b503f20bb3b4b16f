# Shared by the .ci/steps scripts: a Python 3.12 venv cached under $OTEL_ROLLOUT_CI_CACHE,
# keyed on a hash of its requirements file, built with uv where it installs (a PyPI
# package, in the main venv), marked complete only once the install succeeded.
#
#   cached_py312_venv NAME REQUIREMENTS EXTRAS WHAT
#
# sets $venv and returns 0 with this checkout installed (-e ".[EXTRAS]") on top; returns
# 1 after saying why (no Python 3.12, a failed install) so the step can skip its tests.
# WHAT names the tests in those messages. A requirement line marked "# no-deps" (a
# package whose declared requirements are not wanted, e.g. AReaL's ~80) is installed
# with --no-deps first; the other lines are its stand-ins.

_ci_install() {  # _ci_install VENV ARGS...: uv pip where it runs, else the venv's pip
  local target=$1
  shift
  if .venv/bin/python -m uv --version >/dev/null 2>&1; then
    .venv/bin/python -m uv pip install -q --python "$target/bin/python" "$@"
  else
    "$target/bin/pip" install -q "$@"
  fi
}

_ci_nodeps() {  # _ci_nodeps VENV REQUIREMENTS: install the "# no-deps" lines with --no-deps
  local nodeps
  nodeps=$(grep -E '^[^#].*# no-deps' "$2" | sed 's/#.*//' || true)
  # shellcheck disable=SC2086
  [ -z "$nodeps" ] || _ci_install "$1" --no-deps $nodeps
}

cached_py312_venv() {
  local name=$1 req=$2 extras=$3 what=$4 py312="" candidate
  local cache=${OTEL_ROLLOUT_CI_CACHE:-/work/venvs}
  venv="$cache/$name-$(sha256sum "$req" | cut -c1-16)"
  for candidate in /root/.pyenv/versions/3.12.*/bin/python /usr/local/bin/python3.12 \
    /usr/bin/python3.12; do
    if [ -x "$candidate" ]; then py312=$candidate; break; fi
  done
  if [ -z "$py312" ]; then
    echo "note: no Python 3.12 here; $what did not run" >&2
    return 1
  fi
  .venv/bin/python -m uv --version >/dev/null 2>&1 || .venv/bin/pip install -q uv || true
  if [ ! -f "$venv/.complete" ]; then
    rm -rf "$venv"
    mkdir -p "$cache"
    if "$py312" -m venv "$venv" && _ci_nodeps "$venv" "$req" \
      && grep -vE '# no-deps' "$req" > "$venv/requirements.txt" \
      && _ci_install "$venv" -r "$venv/requirements.txt" -e ".[$extras]"; then
      touch "$venv/.complete"
    else
      echo "warning: could not install $req into $venv; $what did not run" >&2
      rm -rf "$venv"
      return 1
    fi
  fi
  # A cached venv may come from another checkout: point its editable install at this one
  # (and add anything pyproject.toml gained since).
  grep -vE '# no-deps' "$req" > "$venv/requirements.txt"
  if ! _ci_install "$venv" -r "$venv/requirements.txt" -e ".[$extras]"; then
    echo "warning: could not install this checkout into $venv; $what did not run" >&2
    return 1
  fi
}
