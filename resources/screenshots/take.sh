#!/usr/bin/env bash
# Takes the window's pictures in this folder from the real application, offscreen, with a fresh
# settings folder (so each starts at the first-start layout):
#
#   bash resources/screenshots/take.sh [BUILD_DIR]     (default build/)
#
# The Runs pictures (runs-*.png) need a run history and are taken by hand with --show runs or
# --show timeline after a run of configs/tiny-gpt.yaml.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="${1:-$root/build}/bin/stagecraft"
[ -x "$bin" ] || { echo "take.sh: no $bin; build first (bash app/stagecraft.sh or cmake --build build)" >&2; exit 2; }
out="$root/resources/screenshots"
settings=$(mktemp -d)
trap 'rm -rf "$settings"' EXIT
shot() {  # shot FILE ARGS...
  local file="$1"
  shift
  rm -rf "${settings:?}"/*
  XDG_CONFIG_HOME="$settings" QT_QPA_PLATFORM=offscreen timeout 300 "$bin" --screenshot "$out/$file" "$@" 2>/dev/null
  echo "$file"
}
shot main-window-bert-large-3d.png --select 5 "$root/configs/bert-large-3d.yaml"
shot main-window-bert-large-3d-1920x1080.png --size 1920x1080 --select 5 "$root/configs/bert-large-3d.yaml"
shot main-window-gpt3-1024x8.png "$root/configs/gpt3-175b-1024x8.yaml"
shot main-window-gpt3-1024x8-1920x1080.png --size 1920x1080 "$root/configs/gpt3-175b-1024x8.yaml"
shot layouts-gpt3-1024x8.png --size 1920x1080 --show layouts "$root/configs/gpt3-175b-1024x8.yaml"
shot scaling-gpt3-1024x8.png --size 1920x1080 --show scaling "$root/configs/gpt3-175b-1024x8.yaml"
shot schedule-colossalai-pp2-2d.png --select 3 --show schedule "$root/configs/colossalai-pp2-2d.yaml"
