#!/usr/bin/env bash
# The docs site (mkdocs-material + mkdocstrings, from the dev extra): built with --strict,
# so a broken link, a missing page or a reference that does not resolve fails CI. Runs in
# the main venv; the site goes to a scratch folder, not the repository.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$out"
echo "docs: built $(find "$out" -name '*.html' | wc -l) pages with --strict" >&2
