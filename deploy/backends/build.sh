#!/usr/bin/env bash
# Builds the real backends the tests drive, from their Go modules, once per machine:
#   otelcol  the OpenTelemetry Collector with exactly our configs' components (ocb manifest
#            otelcol-builder.yaml next to this script),
#   jaeger   Jaeger v2 (github.com/jaegertracing/jaeger/cmd/jaeger),
#   prometheus and promtool (Prometheus 3, github.com/prometheus/prometheus).
# Versions: versions.env. Binaries are cached outside the repository, one folder per
# component and version:
#   ${OTEL_ROLLOUT_BACKENDS_DIR:-${XDG_CACHE_HOME:-~/.cache}/otel-rollout-backends}/
#     otelcol-0.161.0/otelcol   jaeger-1.75.0/jaeger   prometheus-0.316.0/{prometheus,promtool}
# A folder appears only once its build succeeded; a present folder is not rebuilt (the
# Collector's is rebuilt when the manifest changes). Without Go this prints how to get it
# and exits 0: the tests that need the binaries then skip, saying so.
#
#   deploy/backends/build.sh            build what is missing
#   deploy/backends/build.sh --print    print the cache folder and exit
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"
cache="${OTEL_ROLLOUT_BACKENDS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-rollout-backends}"
if [ "${1:-}" = "--print" ]; then
  echo "$cache"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "note: no Go toolchain here, so the Collector, Jaeger and Prometheus 3 were not built" \
    "and tests/system/test_backends*.py will skip. Install Go >= 1.26 (https://go.dev/dl/) and run" \
    "deploy/backends/build.sh." >&2
  exit 0
fi
mkdir -p "$cache"
# One build at a time per machine (another test run or checkout may be building too).
exec 9>"$cache/.lock"
flock 9

manifest_sum="$(sha256sum "$here/otelcol-builder.yaml" | cut -c1-16)"
ldflags="-s -w"

# $1 component folder; the build writes into $work and must leave the binaries there.
# (set -e does not reach into a function run as an `if` condition: each step says
# `|| return 1`.)
# Timings go to stderr, so a CI log shows what a cold build costs.
build() {
  local dest="$cache/$1" name="$1" started
  shift
  work="$(mktemp -d "$cache/.tmp-$name.XXXXXX")"
  chmod 755 "$work"
  started=$(date +%s)
  echo "building $name (once per machine; cached in $dest)" >&2
  if ! "$@"; then
    rm -rf "$work"
    echo "error: building $name failed" >&2
    return 1
  fi
  rm -rf "$dest"
  mv "$work" "$dest"
  echo "built $name in $(($(date +%s) - started)) s" >&2
}

build_otelcol() {
  local gobin="$work/.builder" src="$work/.src"
  GOBIN="$gobin" go install -trimpath "go.opentelemetry.io/collector/cmd/builder@v$OTELCOL_VERSION" \
    || return 1
  if ! CGO_ENABLED=0 "$gobin/builder" --config="$here/otelcol-builder.yaml" \
    --output-path="$src" --ldflags="$ldflags" >"$work/builder.log" 2>&1; then
    grep -v '^go: downloading' "$work/builder.log" >&2
    return 1
  fi
  mv "$src/otelcol-rollout" "$work/otelcol" || return 1
  echo "$manifest_sum" >"$work/manifest.sha256"
  rm -rf "$gobin" "$src" "$work/builder.log"
}

build_jaeger() {
  # `go install ...@version` refuses Jaeger (its go.mod has a replace directive): build it
  # as a tool of a throwaway module that repeats that directive.
  local mod="$work/.mod"
  mkdir -p "$mod"
  cat >"$mod/go.mod" <<EOF
module otel-rollout-backends/jaeger

go 1.24.6

replace github.com/Shopify/sarama => github.com/Shopify/sarama v1.33.0
EOF
  if ! (cd "$mod" && go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@v$JAEGER_MODULE_VERSION" \
    >"$work/get.log" 2>&1); then
    grep -v '^go: \(downloading\|added\|upgraded\)' "$work/get.log" >&2
    return 1
  fi
  (cd "$mod" && CGO_ENABLED=0 go build -trimpath -o "$work/jaeger" \
    -ldflags="$ldflags -X github.com/jaegertracing/jaeger/internal/version.latestVersion=v$JAEGER_VERSION" \
    github.com/jaegertracing/jaeger/cmd/jaeger) || return 1
  rm -rf "$mod" "$work/get.log"
}

build_prometheus() {
  # remove_all_sd: only the static and file service discoveries (Prometheus's own build tag;
  # our config scrapes itself and receives OTLP). No builtinassets: the web UI is not
  # embedded, the HTTP API (all the tests use) is whole.
  GOBIN="$work" CGO_ENABLED=0 go install -trimpath -tags remove_all_sd \
    -ldflags="$ldflags -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION" \
    "github.com/prometheus/prometheus/cmd/prometheus@v$PROMETHEUS_MODULE_VERSION" \
    "github.com/prometheus/prometheus/cmd/promtool@v$PROMETHEUS_MODULE_VERSION"
}

status=0
if [ ! -x "$cache/otelcol-$OTELCOL_VERSION/otelcol" ] \
  || [ "$(cat "$cache/otelcol-$OTELCOL_VERSION/manifest.sha256" 2>/dev/null)" != "$manifest_sum" ]; then
  build "otelcol-$OTELCOL_VERSION" build_otelcol || status=1
fi
if [ ! -x "$cache/jaeger-$JAEGER_MODULE_VERSION/jaeger" ]; then
  build "jaeger-$JAEGER_MODULE_VERSION" build_jaeger || status=1
fi
if [ ! -x "$cache/prometheus-$PROMETHEUS_MODULE_VERSION/promtool" ]; then
  build "prometheus-$PROMETHEUS_MODULE_VERSION" build_prometheus || status=1
fi
rm -rf "$cache"/.tmp-* 2>/dev/null || true
exit $status
