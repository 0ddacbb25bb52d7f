#!/usr/bin/env bash
# Builds the Debian packages `stagecraft` (the window, the CLI, man pages, completion, desktop
# integration, examples) and `stagecraft-worker` (the worker alone, for GPU nodes) with CPack:
#
#   bash app/package.sh            # -> build-package/stagecraft_VERSION_ARCH.deb, stagecraft-worker_...
#
# A CPU build (-DSTAGECRAFT_WITH_CUDA=OFF): the packages depend only on Debian's libraries,
# computed from the binaries by dpkg-shlibdeps. STAGECRAFT_PACKAGE_BUILD picks the build folder.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
stagecraft_install_packages dpkg-dev file
build="${STAGECRAFT_PACKAGE_BUILD:-$STAGECRAFT_ROOT/build-package}"
cmake -S "$STAGECRAFT_ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTAGECRAFT_BUILD_TESTS=OFF \
  -DSTAGECRAFT_WITH_CUDA=OFF -DCMAKE_INSTALL_PREFIX=/usr "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
rm -f "$build"/*.deb
(cd "$build" && cpack -G DEB >/dev/null)
ls "$build"/*.deb
