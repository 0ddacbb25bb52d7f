#!/usr/bin/env bash
# Installs what Stagecraft needs on Debian 12 (when missing) and builds it into build/.
# Sourced by app/stagecraft.sh (the main job) and tests/run.sh (every test); safe to rerun.
set -euo pipefail

STAGECRAFT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STAGECRAFT_BUILD="${STAGECRAFT_BUILD:-$STAGECRAFT_ROOT/build}"

# Debian packages: compiler and build tools, libyaml (config parser), OpenBLAS and Gloo (the CPU
# engine), libssh (remote nodes), SQLite (run history), Qt 6 Widgets, Charts and Svg (the desktop
# application; Test for the suites), Xvfb (the GUI on a machine without a display server).
STAGECRAFT_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libyaml-dev
  libopenblas-dev libgloo-dev
  libssh-dev libsqlite3-dev
  qt6-base-dev qt6-charts-dev qt6-svg-dev libqt6opengl6-dev libgl-dev
)

# For the tests only: Python 3 (the layering check, tests/arch); Debian's PyTorch, the independent
# reference some suites compare against (they skip with a message where it is missing); a real
# sshd, ssh-keygen and ip netns for the remote-launch suites; Xvfb for screenshots of the window;
# dpkg-dev, file, lintian and desktop-file-utils for the package suite (tests/package); Slurm
# (controller, node daemon, accounting daemon, client commands), munge and MariaDB for the Slurm
# suite, which makes a test cluster of its own (tests/integration/slurm_lab.h; Debian 12's
# slurmd has no multiple-slurmd mode, so its two nodes live in network namespaces); ccache, with
# which tests/run.sh's second build (without CUDA) reuses the first one's objects.
STAGECRAFT_TEST_PACKAGES=(python3 python3-torch openssh-server openssh-client iproute2 procps xvfb xauth ccache
  dpkg-dev file lintian desktop-file-utils
  slurmctld slurmd slurmdbd slurm-client munge mariadb-server)

# stagecraft_install_packages [EXTRA_PACKAGE ...]: installs what is missing.
stagecraft_install_packages() {
  local missing=()
  for p in "${STAGECRAFT_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    return 0
  fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
  fi
  echo "stagecraft: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

stagecraft_build() {
  cmake -S "$STAGECRAFT_ROOT" -B "$STAGECRAFT_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
  cmake --build "$STAGECRAFT_BUILD" -j "$(nproc)"
}
