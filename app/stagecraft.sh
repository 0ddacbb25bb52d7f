#!/usr/bin/env bash
# The main job: install what is missing, build, and start Stagecraft.
#  - With a display ($DISPLAY or $WAYLAND_DISPLAY): the desktop application on the default example
#    (configs/bert-large-3d.yaml), or on the config given: `bash app/stagecraft.sh my-run.yaml`.
#  - Headless: the CLI trains the tiny GPT example (configs/tiny-gpt.yaml) with Stagecraft's engine
#    on this machine, 4 worker processes, data x pipeline parallel, with a live progress line and a
#    record in the run history; extra arguments go to `stagecraft-cli run`, e.g.
#    `bash app/stagecraft.sh parallel.dp=4 parallel.pp=1`.
# STAGECRAFT_HEADLESS=1 chooses the CLI even where there is a display.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
stagecraft_install_packages
stagecraft_build -DSTAGECRAFT_BUILD_TESTS=OFF
cd "$STAGECRAFT_ROOT"
if [ -z "${STAGECRAFT_HEADLESS:-}" ] && { [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; }; then
  exec "$STAGECRAFT_BUILD/bin/stagecraft" "$@"
fi
echo "stagecraft: no display; training configs/tiny-gpt.yaml with stagecraft-cli (the desktop application needs \$DISPLAY)"
exec "$STAGECRAFT_BUILD/bin/stagecraft-cli" run configs/tiny-gpt.yaml "$@"
