#!/usr/bin/env bash
# Every test: install, build with the tests, run ctest on all cores.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../app/bootstrap.sh"
stagecraft_install_packages "${STAGECRAFT_TEST_PACKAGES[@]}"
stagecraft_build -DSTAGECRAFT_BUILD_TESTS=ON
cd "$STAGECRAFT_BUILD"
ctest --output-on-failure -j "$(nproc)"
