#!/usr/bin/env bash
# The main job: install, build, and train the tiny GPT example (configs/tiny-gpt.yaml) with
# Stagecraft's engine on this machine — 4 worker processes, data x pipeline parallel — with a live
# progress line; the desktop application takes this place when it lands.
# Extra arguments go to stagecraft-cli run, e.g. `bash app/stagecraft.sh parallel.dp=4 parallel.pp=1`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
stagecraft_install_packages
stagecraft_build -DSTAGECRAFT_BUILD_TESTS=OFF
cd "$STAGECRAFT_ROOT"
exec "$STAGECRAFT_BUILD/bin/stagecraft-cli" run configs/tiny-gpt.yaml "$@"
