#!/usr/bin/env bash
# The main job: install, build, and plan the default example (BERT-large, 3D parallel on 8 GPUs).
# Extra arguments go to stagecraft-cli plan, e.g. `bash app/stagecraft.sh parallel.tp=4 --json`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
stagecraft_install_packages
stagecraft_build -DSTAGECRAFT_BUILD_TESTS=OFF
exec "$STAGECRAFT_BUILD/bin/stagecraft-cli" plan "$STAGECRAFT_ROOT/configs/bert-large-3d.yaml" "$@"
