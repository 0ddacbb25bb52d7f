#!/usr/bin/env bash
# The Debian packages, as a person installs them: packs BUILD_DIR (a CPU build with the window,
# already built) with app/package.sh --existing into WORK, installs both with dpkg -i, and runs the installed programs from /usr: the worker's version
# check and its dependencies (no Qt, libssh or SQLite), stagecraft-cli plan and a short run on an
# installed example (its ranks are the installed worker), the man pages and the bash completion,
# the window under Xvfb, and lintian on both packages. Removes the packages again at the end.
#
#   test_packages.sh SOURCE_DIR BUILD_DIR WORK_DIR        (ctest: tests/package/CMakeLists.txt)
#
# Needs root (dpkg -i); exits 77 (skipped) without it, or when Stagecraft is already installed
# on this machine (it would not replace a person's installation).
set -euo pipefail
src="$1"
build="$2"
work="$3"
if [ "$(id -u)" -ne 0 ]; then echo "SKIPPED: installing packages needs root"; exit 77; fi
if dpkg-query -W -f='${Status}' stagecraft 2>/dev/null | grep -q "install ok installed"; then
  echo "SKIPPED: stagecraft is already installed on this machine; remove it to run this test"
  exit 77
fi
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work"
mkdir -p "$work"
bash "$src/app/package.sh" --existing "$build" "$work/debs" | tee "$work/package.txt"
app_deb=$(ls "$work"/debs/stagecraft_*.deb)
worker_deb=$(ls "$work"/debs/stagecraft-worker_*.deb)
version=$(dpkg-deb -f "$app_deb" Version)

echo "== package metadata"
dpkg-deb -f "$worker_deb" Depends | tee "$work/worker-depends.txt"
if grep -Eiq "qt6|libssh|sqlite" "$work/worker-depends.txt"; then fail "stagecraft-worker depends on Qt, libssh or SQLite"; fi
dpkg-deb -f "$app_deb" Depends | grep -q "stagecraft-worker (= $version)" || fail "stagecraft does not depend on its worker"
dpkg-deb -f "$app_deb" Depends | grep -q "libqt6widgets6" || fail "stagecraft's Depends misses Qt (dpkg-shlibdeps)"

echo "== install"
trap 'dpkg -r stagecraft stagecraft-worker >/dev/null 2>&1 || true' EXIT
dpkg -i "$worker_deb" "$app_deb"

echo "== worker"
[ "$(/usr/bin/stagecraft-worker --version)" = "stagecraft-worker $version" ] || fail "worker --version: $(/usr/bin/stagecraft-worker --version)"
if ldd /usr/bin/stagecraft-worker | grep -Eq "libQt|libssh|libsqlite"; then fail "the installed worker links Qt, libssh or SQLite"; fi

echo "== cli"
tmp=$(mktemp -d)
cd "$tmp"
/usr/bin/stagecraft-cli --version | grep -q "stagecraft-cli $version" || fail "cli --version"
/usr/bin/stagecraft-cli plan /usr/share/stagecraft/configs/bert-large-3d.yaml | tee plan.txt | head -3
grep -q "dp=2" plan.txt || fail "plan of the installed example"
XDG_DATA_HOME="$tmp/data" /usr/bin/stagecraft-cli run /usr/share/stagecraft/configs/tiny-gpt.yaml train.steps=3 train.warmup_steps=1 \
  train.data=/usr/share/stagecraft/configs/data/stagecraft.txt train.checkpoint_dir="$tmp/ck" | tee run.txt
grep -q "done: 3 steps" run.txt || fail "a run with the installed worker"
XDG_DATA_HOME="$tmp/data" /usr/bin/stagecraft-cli runs list | grep -q "tiny-gpt" || fail "the run is not in the history"

echo "== man pages and completion"
for page in stagecraft stagecraft-worker stagecraft-cli stagecraft-cli-run stagecraft-cli-plan stagecraft-cli-runs; do
  f=/usr/share/man/man1/$page.1.gz
  [ -f "$f" ] || fail "no man page $f"
  zcat "$f" | grep -q '^\.TH' || fail "$f is not a man page"
done
names=$(/usr/bin/stagecraft-cli help --bash-completion | sed -n 's/.*compgen -W "\(.*\) help --help --version".*/\1/p')
[ -n "$names" ] || fail "no command names in the completion"
for c in $names; do
  [ -f "/usr/share/man/man1/stagecraft-cli-$c.1.gz" ] || fail "no man page for stagecraft-cli $c (app/CMakeLists.txt lists the commands)"
  zcat /usr/share/man/man1/stagecraft-cli.1.gz | grep -q "^\.B $c\$" || fail "stagecraft-cli(1) misses $c"
done
words=$(bash -c 'source /usr/share/bash-completion/completions/stagecraft-cli; COMP_WORDS=(stagecraft-cli ru); COMP_CWORD=1; _stagecraft_cli; echo "${COMPREPLY[*]}"')
[ "$words" = "run runs" ] || fail "completion of 'ru': '$words'"
words=$(bash -c 'source /usr/share/bash-completion/completions/stagecraft-cli; COMP_WORDS=(stagecraft-cli run --ho); COMP_CWORD=2; _stagecraft_cli; echo "${COMPREPLY[*]}"')
[ "$words" = "--hosts" ] || fail "completion of 'run --ho': '$words'"

echo "== desktop integration"
for f in /usr/share/applications/io.stagecraft.Stagecraft.desktop /usr/share/metainfo/io.stagecraft.Stagecraft.metainfo.xml \
         /usr/share/icons/hicolor/scalable/apps/io.stagecraft.Stagecraft.svg; do
  [ -s "$f" ] || fail "missing $f"
done
grep -q "^Exec=stagecraft" /usr/share/applications/io.stagecraft.Stagecraft.desktop || fail "desktop file Exec"
if command -v desktop-file-validate >/dev/null; then desktop-file-validate /usr/share/applications/io.stagecraft.Stagecraft.desktop; fi

echo "== the window under Xvfb"
if command -v xvfb-run >/dev/null; then
  timeout 60 xvfb-run -a /usr/bin/stagecraft --screenshot "$tmp/window.png" 2> gui.txt || { cat gui.txt; fail "the window did not start"; }
else
  QT_QPA_PLATFORM=offscreen timeout 60 /usr/bin/stagecraft --screenshot "$tmp/window.png" 2> gui.txt || { cat gui.txt; fail "the window did not start"; }
fi
[ "$(head -c 4 "$tmp/window.png" | od -An -c | tr -d ' ')" = '211PNG' ] || fail "no screenshot of the window"
[ "$(stat -c %s "$tmp/window.png")" -gt 20000 ] || fail "the screenshot is nearly empty"

echo "== lintian"
if command -v lintian >/dev/null; then
  # Any finding at warning level or above fails (both packages are clean).
  lintian --fail-on error,warning "$worker_deb" "$app_deb" | tee "$work/lintian.txt" || fail "lintian: $(cat "$work/lintian.txt")"
else
  echo "lintian not installed: skipped that part (apt-get install lintian)"
fi
cd /
rm -rf "$tmp"
echo "PASS: packages built, installed, run and removed"
