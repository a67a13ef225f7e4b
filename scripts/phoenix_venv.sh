#!/usr/bin/env bash
# Build Phoenix (arize-phoenix, from PyPI) in its own virtual environment: it pins anthropic<2, which the
# project's .venv cannot share. Idempotent: a finished environment is left as it is. Prints the phoenix path.
set -euo pipefail
cd "$(dirname "$0")/.."

PHOENIX_VERSION="${PHOENIX_VERSION:-20.26.1}"
DIR="${PHOENIX_VENV:-.phoenix-venv}"
STAMP="$DIR/.installed-$PHOENIX_VERSION"

if [ ! -e "$STAMP" ]; then
    [ -x "$DIR/bin/python" ] || python3 -m venv "$DIR"
    UV=".venv/bin/uv"
    [ -x "$UV" ] || { "$DIR/bin/python" -m pip install -q uv && UV="$DIR/bin/uv"; }
    "$UV" pip install -q --python "$DIR/bin/python" "arize-phoenix==$PHOENIX_VERSION"
    touch "$STAMP"
fi
echo "$DIR/bin/phoenix"
