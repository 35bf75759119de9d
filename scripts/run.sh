#!/usr/bin/env bash
# The main job on its default: set-up and build (scripts/setup.sh), then `breakwater train`, which
# trains the small GPT on 4 local worker processes (2 pipelines of 2 devices, Hanayo with 2 waves)
# on the fortunes corpus, writing runs/default/. Extra arguments go to `breakwater train`, e.g.
#   bash scripts/run.sh --train.steps=20 --pipeline.schedule=1f1b
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup.sh"
build=${BW_BUILD_DIR:-$root/build}
cd "$root"
exec "$build/breakwater" train "$@"
