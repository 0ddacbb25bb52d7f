#!/usr/bin/env bash
# Builds the Debian packages `stagecraft` (the window, the CLI, man pages, completion, desktop
# integration, examples, the guide) and `stagecraft-worker` (the worker alone) with CPack:
#
#   bash app/package.sh                      # -> build-package/stagecraft_VERSION_ARCH.deb, stagecraft-worker_...
#   bash app/package.sh --existing DIR [OUT] # packs the build already in DIR into OUT (default DIR)
#
# A CPU build (-DSTAGECRAFT_WITH_CUDA=OFF): the packages depend only on Debian's libraries,
# computed from the binaries by dpkg-shlibdeps. STAGECRAFT_PACKAGE_BUILD picks the build folder of
# the first form. --existing packs a configured and built tree as it is (a CPU build with the
# window, as tests/run.sh's build-cpu/); it builds nothing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
stagecraft_install_packages dpkg-dev file
if [ "${1:-}" = "--existing" ]; then
  build="${2:?usage: bash app/package.sh --existing BUILD_DIR [OUT_DIR]}"
  out="${3:-$build}"
  cache="$build/CMakeCache.txt"
  [ -f "$cache" ] || { echo "package.sh: $build is not a configured build (no CMakeCache.txt); build it first or run without --existing" >&2; exit 2; }
  grep -q '^STAGECRAFT_WITH_CUDA:BOOL=OFF$' "$cache" ||
    { echo "package.sh: $build is built with CUDA; the packages are CPU builds: configure it with -DSTAGECRAFT_WITH_CUDA=OFF or run without --existing" >&2; exit 2; }
  grep -q '^STAGECRAFT_WITH_GUI:BOOL=ON$' "$cache" ||
    { echo "package.sh: $build has no window (STAGECRAFT_WITH_GUI=OFF); the stagecraft package holds it: configure with -DSTAGECRAFT_WITH_GUI=ON" >&2; exit 2; }
  for f in bin/stagecraft bin/stagecraft-cli bin/stagecraft-worker app/docs/stagecraft-cli.1.gz; do
    [ -e "$build/$f" ] || { echo "package.sh: $build/$f is missing; build the tree first (cmake --build $build)" >&2; exit 2; }
  done
else
  build="${STAGECRAFT_PACKAGE_BUILD:-$STAGECRAFT_ROOT/build-package}"
  out="$build"
  cmake -S "$STAGECRAFT_ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTAGECRAFT_BUILD_TESTS=OFF \
    -DSTAGECRAFT_WITH_CUDA=OFF -DCMAKE_INSTALL_PREFIX=/usr "$@" >/dev/null
  cmake --build "$build" -j "$(nproc)"
fi
mkdir -p "$out"
rm -f "$out"/*.deb
(cd "$build" && cpack -G DEB -B "$(cd "$out" && pwd)" >/dev/null)
ls "$out"/*.deb
