#!/usr/bin/env bash
# Runs the GPU suites and the GPU benchmark on a GPU host that has the CUDA toolkit and a driver
# but none of the build's other packages (Qt, OpenBLAS, libyaml, Gloo, libssh, SQLite): the
# build is made on a build machine, packed with the shared libraries it needs, and unpacked and
# run on the GPU host from the same source tree.
#
#   tests/gpu/gpu_host.sh pack [BUILD_DIR] [BUNDLE]    on the build machine (defaults: build,
#                                                       gpu-bundle.tar.xz)
#   tests/gpu/gpu_host.sh check [BUNDLE] [LOG_DIR] [all|suites|bench] [TST_CUDA_FUNCTION ...]
#                                                       on the GPU host, in the source tree's root
#                                                       (with functions: those of tst_cuda instead
#                                                       of the five ctest entries)
#
# pack takes tst_cuda, bench_gpu_train, stagecraft-cli and stagecraft-worker, every shared library
# they load but glibc's and the CUDA toolkit's (libcudart, libcublas, libcublasLt, libnccl: the
# GPU host's own, which match its driver), and the GPU suites' ctest file. libstdc++ and libgcc_s
# go in a compat folder that check uses only where the host's own are too old for the binaries.
#
# check unpacks the bundle into BUILD_DIR's place in this tree, finds the host's CUDA libraries
# (the toolkit's lib64, or the nvidia-* Python packages' lib folders), then runs, each with its
# log in LOG_DIR (default: the current directory), the suites, the benchmarks or both (all, the
# default):
#   ctest -L gpu (tst_cuda, tst_cuda_without_cublaslt, tst_cuda_flash_without_tensor_cores,
#   tst_cuda_flash_wgmma, tst_cuda_layernorm_eight_warps), the five at once, each cut off after
#   GPU_TEST_TIMEOUT seconds (default 600); tst_cuda_flash_wgmma skips on GPUs other than compute
#   capability 9.0
#   bench_gpu_train flash bf16 --accumulate 8, every shape (GPT-2's three and llama-1b); the same
#   with Hopper's warpgroup attention (--set train.kernels.flash=wgmma) on compute capability 9.0; then
#   one shape (774M, or GPU_BENCH_MODEL: 124M, 350M, 774M or llama-1b): 32 sequences a step in
#   micro-batches of 16
#   (--micro-batch 16 --accumulate 2; the SM clock and power sampled meanwhile into
#   clocks_micro16.log), --accumulate 8 with --breakdown (again with layernorm's backward in
#   8-warp blocks, train.kernels.layernorm_backward_warps=8, where the shape is GPT-2's, and with
#   the warpgroup attention on 9.0), and
#   bench_gpu_train_torch.py compile bf16 at both, and for llama-1b, where the host's python3 has
#   PyTorch with CUDA
#   GPU_BENCH_EXTRA=1: also PyTorch without torch.compile, bench_gpu_train standard bf16
#   --breakdown, and flash bf16 with train.kernels.flash=cuda_cores
#   GPU_NCU=1: also Nsight Compute on the tensor-core attention kernels (ncu.log)
#   each benchmark cut off after GPU_BENCH_TIMEOUT seconds (default 300)
#   bench_gpu_train predicts for the catalog's device of this GPU (GPU_BENCH_DEVICE, else the one
#   nvidia-smi's name maps to: H200, H100-SXM, ...), and its first two runs (every shape at its
#   own micro-batch x 8, and micro-batches of 16 x 2) record each shape's steps into
#   LOG_DIR/bench_runs.sqlite (--record); stagecraft-cli calibrate then fits the device's profile
#   for the engine to those runs, LOG_DIR/DEVICE-engine.yaml (calibrate.log), and runs compare
#   sets each run beside its prediction (runs_compare.log); both are printed at the end. A GPU
#   the catalog does not know is benchmarked against H100-SXM's prediction, and nothing is recorded.
# It exits non-zero when a suite failed or a library was not found, naming which.
set -uo pipefail

die() { echo "gpu_host.sh: $*" >&2; exit 2; }

pack() {
  local build=${1:-build} bundle=${2:-gpu-bundle.tar.xz}
  local bins=(tst_cuda bench_gpu_train stagecraft-cli stagecraft-worker)
  [ -f "$build/CMakeCache.txt" ] || die "$build is not a build directory (no CMakeCache.txt); pass the one to pack"
  grep -q '^STAGECRAFT_WITH_CUDA:BOOL=ON' "$build/CMakeCache.txt" ||
    die "$build was configured without CUDA; configure it with -DSTAGECRAFT_WITH_CUDA=ON"
  local b
  for b in "${bins[@]}"; do
    [ -x "$build/bin/$b" ] || die "$build/bin/$b is missing; build it first (ninja -C $build $b)"
  done
  local stage
  stage=$(mktemp -d) || die "mktemp failed"
  trap 'rm -rf "$stage"' RETURN
  mkdir -p "$stage/bin" "$stage/lib/compat" "$stage/tests/gpu"
  for b in "${bins[@]}"; do cp "$build/bin/$b" "$stage/bin/"; done
  cp "$build/tests/gpu/CTestTestfile.cmake" "$stage/tests/gpu/"
  local lib name deps missing
  deps=$(for b in "${bins[@]}"; do ldd "$build/bin/$b"; done)
  missing=$(awk '/not found/ {print $1}' <<<"$deps" | sort -u)
  [ -z "$missing" ] || die "the binaries need libraries this machine lacks: $(echo $missing)"
  for lib in $(awk '$2 == "=>" && $3 ~ /^\// {print $3}' <<<"$deps" | sort -u); do
    name=$(basename "$lib")
    case "$name" in
      libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|ld-linux*) ;;  # glibc: the host's
      libcudart.so.*|libcublas.so.*|libcublasLt.so.*|libnccl.so.*) ;;                           # CUDA: the host's
      libstdc++.so.*|libgcc_s.so.*) cp -L "$lib" "$stage/lib/compat/$name" ;;
      *) cp -L "$lib" "$stage/lib/$name" ;;
    esac
  done
  # Where the build was: the binaries carry these absolute paths (the tests' STAGECRAFT_BIN_DIR
  # and STAGECRAFT_SOURCE_DIR, the ctest file's commands).
  local source_dir
  source_dir=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
  echo "$source_dir" >"$stage/SOURCE_DIR"
  (cd "$build" && pwd -P) >"$stage/BUILD_DIR"
  tar -C "$stage" -cJf "$bundle" . || die "could not write $bundle"
  echo "packed ${#bins[@]} programs and $(ls "$stage/lib" "$stage/lib/compat" | grep -c '\.so') libraries into $bundle ($(du -h "$bundle" | cut -f1))"
}

# The first folder under the given roots holding a file of the given name.
find_lib() {
  local name=$1; shift
  local root hit
  for root in "$@"; do
    [ -d "$root" ] || continue
    hit=$(find -L "$root" -maxdepth 6 -name "$name" -print -quit 2>/dev/null)
    if [ -n "$hit" ]; then dirname "$hit"; return 0; fi
  done
  return 1
}

check() {
  local bundle=${1:-gpu-bundle.tar.xz} logs=${2:-.} what=${3:-all}
  local functions=("${@:4}")
  case "$what" in all|suites|bench) ;; *) die "check runs all, suites or bench, not '$what'" ;; esac
  [ -f "$bundle" ] || die "no bundle at $bundle; make one with 'tests/gpu/gpu_host.sh pack' on the build machine"
  [ -f tests/gpu/CMakeLists.txt ] || die "run check in the source tree's root (tests/gpu/CMakeLists.txt not found here)"
  command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this host has no NVIDIA driver"
  command -v ctest >/dev/null || die "ctest not found: install CMake"
  mkdir -p "$logs" || die "cannot create $logs"
  logs=$(cd "$logs" && pwd -P)
  local unpacked
  unpacked=$(mktemp -d) || die "mktemp failed"
  tar -C "$unpacked" -xJf "$bundle" || die "$bundle is not a bundle made by pack"
  local source_dir build_dir here
  source_dir=$(cat "$unpacked/SOURCE_DIR") build_dir=$(cat "$unpacked/BUILD_DIR") here=$(pwd -P)
  # The build's source path must reach this tree: link it there where it is elsewhere.
  if [ "$source_dir" != "$here" ]; then
    if [ -e "$source_dir" ] && [ "$(cd "$source_dir" && pwd -P)" != "$here" ]; then
      die "$source_dir (where the bundle was built) exists and is not this tree; unpack elsewhere or move it"
    fi
    mkdir -p "$(dirname "$source_dir")" && ln -sfn "$here" "$source_dir" || die "cannot link $source_dir to $here"
  fi
  case "$build_dir" in
    "$source_dir"/*) ;;
    *) die "the bundle's build folder $build_dir is outside its source tree $source_dir; build inside the tree" ;;
  esac
  local build_here=$here/${build_dir#"$source_dir"/}
  mkdir -p "$build_here/bin" "$build_here/tests/gpu" "$build_here/lib/bundle"
  cp -a "$unpacked/bin/." "$build_here/bin/"
  cp -a "$unpacked/tests/gpu/CTestTestfile.cmake" "$build_here/tests/gpu/"
  cp -a "$unpacked/lib/." "$build_here/lib/bundle/"
  rm -rf "$unpacked"

  # The host's CUDA libraries: the toolkit's, else PyTorch's nvidia-* packages.
  local roots=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets /usr/lib/x86_64-linux-gnu)
  local py site
  for py in python3 /usr/bin/python3; do
    command -v "$py" >/dev/null || continue
    for site in $("$py" -c 'import site, sys; print(" ".join(site.getsitepackages()))' 2>/dev/null); do roots+=("$site/nvidia"); done
  done
  local path=$build_here/lib/bundle lib dir
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    dir=$(find_lib "$lib" "${roots[@]}") || die "$lib not found on this host (looked under ${roots[*]}); install the CUDA 13 toolkit and NCCL"
    case ":$path:" in *":$dir:"*) ;; *) path=$path:$dir ;; esac
  done
  # The build machine's libstdc++ and libgcc_s only where this host's are too old for the binaries.
  if LD_LIBRARY_PATH=$path ldd "$build_here/bin/tst_cuda" 2>&1 | grep -q 'not found'; then
    path=$path:$build_here/lib/bundle/compat
  fi
  if LD_LIBRARY_PATH=$path ldd "$build_here/bin/tst_cuda" 2>&1 | grep 'not found'; then
    die "tst_cuda still misses the libraries above"
  fi
  export LD_LIBRARY_PATH=$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "libraries: $LD_LIBRARY_PATH"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

  local failed=()
  [ "$what" = bench ] || run_suites
  [ "$what" = suites ] || run_benchmarks
  if [ ${#failed[@]} -gt 0 ]; then
    local joined
    joined=$(printf '%s; ' "${failed[@]}")
    echo "gpu_host.sh: failed: ${joined%; } (logs in $logs)" >&2
    return 1
  fi
  echo "gpu_host.sh: $what ran (logs in $logs)"
}

# check's parts: they share its variables (build_here, logs, failed).
run_suites() {
  if [ ${#functions[@]} -gt 0 ]; then  # some of tst_cuda's checks alone
    timeout "${GPU_TEST_TIMEOUT:-600}" "$build_here/bin/tst_cuda" "${functions[@]}" >"$logs/ctest_gpu.log" 2>&1 ||
      failed+=("tst_cuda ${functions[*]}")
    grep -E '^(PASS|FAIL!|SKIP|Totals)|flash on tensor cores|QWARN' "$logs/ctest_gpu.log" | tail -n 40
    return
  fi
  # The five suites share the GPU at once; a hung one is cut off at GPU_TEST_TIMEOUT seconds.
  ctest --test-dir "$build_here/tests/gpu" -L gpu -j5 --timeout "${GPU_TEST_TIMEOUT:-600}" --output-on-failure -V \
    >"$logs/ctest_gpu.log" 2>&1 || failed+=("ctest -L gpu")
  grep -E '^ *[0-9]+/[0-9]+ Test|tests passed|FAIL!  :|SKIP   :|SKIPPED|QWARN|QDEBUG|flash on tensor cores \(wgmma|wgmma (K|MN)-major' "$logs/ctest_gpu.log" | tail -n 80
  # ctest counts a skipped suite as passed; on a GPU host a skip means the GPU was not usable,
  # but for the warpgroup attention's entry on a GPU other than compute capability 9.0.
  grep '\*\*\*Skipped' "$logs/ctest_gpu.log" | grep -qv tst_cuda_flash_wgmma && failed+=("a GPU suite skipped (its SKIPPED line above says why)")
  if hopper && grep '\*\*\*Skipped' "$logs/ctest_gpu.log" | grep -q tst_cuda_flash_wgmma; then
    failed+=("tst_cuda_flash_wgmma skipped on a GPU of compute capability 9.0")
  fi
}

# Whether the GPU is of compute capability 9.0 (H100, H200), where the warpgroup attention runs.
hopper() {
  [ "$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' ')" = 9.0 ]
}

# The catalog's name (stagecraft-cli devices) of this host's first GPU; fails for a GPU it does not list.
catalog_device() {
  local name
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
  case "$name" in
    *H200*) echo H200 ;;
    *H100*PCIe*) echo H100-PCIe ;;
    *H100*SXM*|*"H100 80GB HBM3"*) echo H100-SXM ;;
    *A100*80GB*) echo A100-80GB ;;
    *A100*40GB*) echo A100-40GB ;;
    *L40S*) echo L40S ;;
    *"RTX 4090"*) echo RTX-4090 ;;
    *V100*) echo V100 ;;
    *) return 1 ;;
  esac
}

run_benchmarks() {
  local bench=$build_here/bin/bench_gpu_train limit=${GPU_BENCH_TIMEOUT:-300} model=${GPU_BENCH_MODEL:-}
  # Predictions for this GPU's catalog device, and the runs that calibrate it recorded on it.
  local device=${GPU_BENCH_DEVICE:-} on=() record=() db=$logs/bench_runs.sqlite
  [ -n "$device" ] || device=$(catalog_device) || device=
  if [ -n "$device" ]; then
    on=("$device")
    record=(--record "$db")
  else
    echo "no catalog device for $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1): predictions for H100-SXM, no runs recorded" \
      "(set GPU_BENCH_DEVICE to a name from stagecraft-cli devices)"
  fi
  # Each run is cut off at GPU_BENCH_TIMEOUT seconds. Eight micro-batches a step throughout, as
  # real runs take many. The MFU figure of every shape comes first, then one shape's (774M, or
  # GPU_BENCH_MODEL's) runs: in micro-batches of 16, the kernel-time breakdown, PyTorch's steps.
  # On an H200 the default set took about 4 minutes, torch.compile most of it.
  run_bench() {  # LOG PROGRAM ARGS...: the run's output in LOG.log, its seconds printed
    local log=$1 t0=$SECONDS; shift
    timeout "$limit" "$@" >"$logs/$log.log" 2>&1 || failed+=("$(basename "$1") ${*:2} (${log}.log)")
    echo "$log: $((SECONDS - t0)) s"
  }
  local one=(--model "${model:-774M}")
  run_bench bench_flash_bf16_accumulate8 "$bench" flash bf16 "${on[@]}" --accumulate 8 "${record[@]}"
  # 32 sequences a step, as 774M's default four micro-batches of 4 x 8 make, in micro-batches of
  # 16 (GEMMs of 16,384 rows), with the GPU's SM clock and power sampled every 200 ms meanwhile:
  # such a step took some 80 ms longer than its kernels timed alone, and a clock held down under
  # long GEMMs would show here.
  # The third column, where the driver has it, is the bit mask of what holds the clock down
  # (nvidia-smi -q -d PERFORMANCE names the bits; 0x4: the software power cap).
  local sampler= fields=clocks.sm,power.draw,clocks_event_reasons.active
  nvidia-smi --query-gpu="$fields" --format=csv,noheader >/dev/null 2>&1 || fields=clocks.sm,power.draw
  nvidia-smi --query-gpu="$fields" --format=csv,noheader,nounits -lms 200 >"$logs/clocks_micro16.log" 2>&1 &
  sampler=$!
  run_bench bench_flash_bf16_micro16 "$bench" flash bf16 "${on[@]}" --micro-batch 16 --accumulate 2 "${one[@]}" "${record[@]}"
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  # Under load: the samples drawing at least half the most power seen (the rest are the
  # process's start, the model's set-up and its end).
  awk -F', *' '$1 ~ /^[0-9]+$/ {n++; c[n]=$1; p[n]=$2; r[n]=$3; if ($2 > top) top=$2}
    END {for (i = 1; i <= n; i++) if (p[i] >= top / 2) {k++; cs+=c[i]; ps+=p[i]; if (!lo || c[i] < lo) lo=c[i]; if (c[i] > hi) hi=c[i];
           if (r[i] != "") {reasons++; if (r[i] !~ /^0x0+$/) held++}}
         if (k) printf "micro-batches of 16, under load (%d of %d samples): SM clock %d to %d MHz (mean %.0f), mean power %.0f W (most %.0f)%s\n",
           k, n, lo, hi, cs/k, ps/k, top, reasons ? sprintf("; clock held down in %d", held) : ""}' "$logs/clocks_micro16.log"
  run_bench bench_flash_bf16 "$bench" flash bf16 "${on[@]}" --accumulate 8 --breakdown "${one[@]}"
  local logs_list=(bench_flash_bf16_accumulate8 bench_flash_bf16_micro16 bench_flash_bf16)
  # Layernorm's backward in blocks of 8 warps (cuda_kernels.cu), against the run above's 4; GPT-2's
  # shapes only (Llama's RMSNorm has one backward kernel).
  if [ "${model:-774M}" != llama-1b ]; then
    run_bench bench_flash_bf16_layernorm8 "$bench" flash bf16 "${on[@]}" --accumulate 8 --breakdown "${one[@]}" \
      --set train.kernels.layernorm_backward_warps=8
    logs_list+=(bench_flash_bf16_layernorm8)
  fi
  # Hopper's warpgroup attention (runtime/flash_wgmma.h) in place of mma.sync, where it runs.
  if hopper; then
    local wgmma=(--set train.kernels.flash=wgmma)
    run_bench bench_flash_bf16_wgmma_accumulate8 "$bench" flash bf16 "${on[@]}" --accumulate 8 "${wgmma[@]}"
    run_bench bench_flash_bf16_wgmma "$bench" flash bf16 "${on[@]}" --accumulate 8 --breakdown "${one[@]}" "${wgmma[@]}"
    logs_list+=(bench_flash_bf16_wgmma_accumulate8 bench_flash_bf16_wgmma)
  fi
  # PyTorch's steps on the same GPU, for the ratio, where this host's python3 has torch.
  if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    local torch_bench=(python3 tests/bench/bench_gpu_train_torch.py bf16 accumulate=8 model="${model:-774M}")
    PYTHONUNBUFFERED=1 run_bench torch_compile "${torch_bench[@]}" compile
    if [ "${model:-774M}" != llama-1b ]; then  # the Llama shape's ratio beside the first run's row
      PYTHONUNBUFFERED=1 run_bench torch_compile_llama python3 tests/bench/bench_gpu_train_torch.py bf16 accumulate=8 model=llama-1b compile
      logs_list+=(torch_compile_llama)
    fi
    PYTHONUNBUFFERED=1 run_bench torch_compile_micro16 python3 tests/bench/bench_gpu_train_torch.py bf16 compile micro_batch=16 \
      accumulate=2 model="${model:-774M}"
    logs_list+=(torch_compile torch_compile_micro16)
    if [ "${GPU_BENCH_EXTRA:-0}" = 1 ]; then
      PYTHONUNBUFFERED=1 run_bench torch_eager "${torch_bench[@]}"
      logs_list+=(torch_eager)
    fi
  else
    echo "no PyTorch with CUDA on this host's python3: the PyTorch reference is not run"
  fi
  # GPU_BENCH_EXTRA=1: standard attention and the fp32-core fused attention too.
  if [ "${GPU_BENCH_EXTRA:-0}" = 1 ]; then
    run_bench bench_standard_bf16 "$bench" standard bf16 "${on[@]}" --accumulate 8 --breakdown "${one[@]}"
    run_bench bench_flash_bf16_no_tensor_cores "$bench" flash bf16 "${on[@]}" --accumulate 8 "${one[@]}" --set train.kernels.flash=cuda_cores
    logs_list+=(bench_standard_bf16 bench_flash_bf16_no_tensor_cores)
  fi
  # GPU_NCU=1: Nsight Compute's view of the tensor-core attention (one forward and one gradient
  # launch of a 124M step: throughput, pipes, warp states, occupancy), where ncu is installed.
  if [ "${GPU_NCU:-0}" = 1 ]; then
    local ncu
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
    if [ -n "$ncu" ]; then
      run_bench ncu "$ncu" --clock-control none -k regex:tensor_ --launch-skip 35 --launch-count 2 --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
        "$bench" flash bf16 --model 124M
      grep -E 'tensor_|Duration|Issue Slots|pipeline|Registers Per|Warp Cycles Per Issued|Achieved Active Warps' "$logs/ncu.log" | cut -c1-150
    else
      echo "GPU_NCU=1: no ncu on this host"
    fi
  fi
  local f
  for f in "${logs_list[@]}"; do
    echo "== $f"
    grep -v '^  ' "$logs/$f.log" | tail -n 20
  done
  [ ${#record[@]} -eq 0 ] || calibrate_device
}

# The device's profile for the engine from the runs the first two benchmarks recorded (their
# "recorded as run N in DB" lines), and each run against its prediction; shares run_benchmarks'
# variables (device, db) and check's (build_here, logs, failed).
calibrate_device() {
  local cli=$build_here/bin/stagecraft-cli profile=$logs/$device-engine.yaml ids id
  ids=$(sed -n 's/^ *recorded as run \([0-9][0-9]*\) in .*/\1/p' "$logs/bench_flash_bf16_accumulate8.log" "$logs/bench_flash_bf16_micro16.log")
  ids=${ids//$'\n'/ }
  if [ -z "$ids" ]; then
    failed+=("no bench_gpu_train run was recorded in $db (bench_flash_bf16_accumulate8.log, bench_flash_bf16_micro16.log)")
    return
  fi
  # shellcheck disable=SC2086  # the ids, one a word
  "$cli" calibrate $ids --db "$db" -o "$profile" --name "$device-engine" >"$logs/calibrate.log" 2>&1 ||
    failed+=("stagecraft-cli calibrate $ids (calibrate.log)")
  for id in $ids; do
    echo "== runs compare $id"
    "$cli" runs compare "$id" --db "$db" 2>&1 || failed+=("stagecraft-cli runs compare $id (runs_compare.log)")
  done >"$logs/runs_compare.log"
  echo "== calibrate $ids --db $db"
  cat "$logs/calibrate.log"
  if [ -f "$profile" ]; then
    echo "== $profile"
    cat "$profile"
  fi
  cat "$logs/runs_compare.log"
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  check) shift; check "$@" ;;
  *) die "usage: tests/gpu/gpu_host.sh pack [BUILD_DIR] [BUNDLE] | check [BUNDLE] [LOG_DIR] [all|suites|bench] [TST_CUDA_FUNCTION ...]" ;;
esac
