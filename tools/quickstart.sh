#!/usr/bin/env bash
# Set-up, then the quickstart example: a model compiled with
# backend="mybackend", checked against eager, with a report of what ran where.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
"${PYTHON:-python3}" examples/quickstart.py
