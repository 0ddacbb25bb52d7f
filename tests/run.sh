#!/usr/bin/env bash
# Every test: installs what is missing, builds build/ with the tests (with CUDA where the toolkit
# is found) and runs every suite there. When build/ has CUDA, it also builds build-cpu/ without
# CUDA, as users without the toolkit get it, and runs there the suites labelled cpu-build (the
# engine's unit suites, the CLI's, those whose answers depend on CUDA, and the package test, which
# packs build-cpu/ itself). Timings of each part go to the end of the output.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../app/bootstrap.sh"
t0=$SECONDS
stagecraft_install_packages "${STAGECRAFT_TEST_PACKAGES[@]}"
t_install=$((SECONDS - t0))
# ccache: the build without CUDA compiles what the first build compiled (only the runtime differs,
# engine/src/runtime/CMakeLists.txt), from the same sources at the same places under each build
# folder; paths are taken relative to the tree, precompiled headers allowed.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$STAGECRAFT_ROOT" CCACHE_NOHASHDIR=true CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
stagecraft_build -DSTAGECRAFT_BUILD_TESTS=ON "${launcher[@]}"
t_build=$((SECONDS - t0 - t_install))
cpu_build=""
if grep -q '^STAGECRAFT_WITH_CUDA:BOOL=ON$' "$STAGECRAFT_BUILD/CMakeCache.txt"; then
  cpu_build="$STAGECRAFT_ROOT/build-cpu"
  cmake -S "$STAGECRAFT_ROOT" -B "$cpu_build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTAGECRAFT_BUILD_TESTS=ON \
    -DSTAGECRAFT_WITH_CUDA=OFF "${launcher[@]}" >/dev/null
  cmake --build "$cpu_build" -j "$(nproc)" --target cpu_build_suites
fi
t_cpu_build=$((SECONDS - t0 - t_install - t_build))
status=0
(cd "$STAGECRAFT_BUILD" && ctest --output-on-failure -j "$(nproc)") || status=1
t_tests=$((SECONDS - t0 - t_install - t_build - t_cpu_build))
if [ -n "$cpu_build" ]; then
  echo "== the build without CUDA ($cpu_build): suites labelled cpu-build"
  (cd "$cpu_build" && ctest --output-on-failure -j "$(nproc)" -L cpu-build) || status=1
fi
t_cpu_tests=$((SECONDS - t0 - t_install - t_build - t_cpu_build - t_tests))
echo "tests/run.sh: packages ${t_install} s, build ${t_build} s, build without CUDA ${t_cpu_build} s, suites ${t_tests} s, suites without CUDA ${t_cpu_tests} s; $((SECONDS - t0)) s in all"
exit $status
