#!/bin/bash
# bench_grad_overlap: what DP buckets started during the backward (parallel.overlap_grad_reduce,
# runtime/grad_reducer.h) save on this machine's CPU engine. Trains one model over real worker
# processes and Gloo with the DP reduction after the backward, and in buckets of several sizes,
# `rounds` times each in turn (so a slow minute hits every variant alike), and prints each
# variant's median step, exposed DP time and backward time over the runs' steady steps (the
# medians `stagecraft-cli runs compare --json` reports for the bottleneck rank), with the cost
# model's prediction of the step and DP beside them. Asserts nothing about time. Run it on a
# quiet machine from the repository root after a build:
#   bash tests/bench/bench_grad_overlap.sh [build/bin] [rounds] [rate]
# With a rate (as tc writes it, e.g. 1gbit; needs root), every run goes inside a network
# namespace of its own whose loopback is shaped to that rate (tc's token bucket), as if the ranks
# were machines on a slow network: the case where the reduction waits on the wire, not the cores.
set -euo pipefail
BIN=${1:-build/bin}
ROUNDS=${2:-3}
RATE=${3:-}
WORK=$(mktemp -d)
NS=""
cleanup() {
  rm -rf "$WORK"
  [ -n "$NS" ] && ip netns del "$NS" 2> /dev/null || true
}
trap cleanup EXIT
IN_NS=()
if [ -n "$RATE" ]; then
  NS=stagecraft-bench-$$
  ip netns add "$NS"
  ip netns exec "$NS" ip link set lo up
  ip netns exec "$NS" tc qdisc add dev lo root tbf rate "$RATE" burst 256kb latency 200ms
  IN_NS=(ip netns exec "$NS")
fi
DB=$WORK/runs.sqlite
# GPT with 4 layers of width 256: 3.2 M parameters, 12.6 MiB of fp32 gradients per rank.
BASE=(configs/tiny-gpt.yaml model.hidden=256 model.heads=8 parallel.pp=1 parallel.dp=2 cluster.gpus_per_node=2
      train.micro_batch=4 train.global_batch=16 train.steps=40 train.warmup_steps=10 "train.checkpoint_dir=$WORK/ck")
# label | overrides
VARIANTS=(
  "after the backward|parallel.overlap_grad_reduce=false"
  "one bucket (25 MiB)|parallel.grad_bucket_mb=25"
  "buckets of 2 MiB|parallel.grad_bucket_mb=2"
  "buckets of 0.5 MiB|parallel.grad_bucket_mb=0.5"
)
id=0
declare -A IDS
for ((round = 0; round < ROUNDS; ++round)); do
  for v in "${!VARIANTS[@]}"; do
    IFS='|' read -r label overrides <<< "${VARIANTS[$v]}"
    # shellcheck disable=SC2086
    "${IN_NS[@]}" "$BIN/stagecraft-cli" run "${BASE[@]}" $overrides --db "$DB" > /dev/null
    id=$((id + 1))
    IDS[$v]="${IDS[$v]:-} $id"
  done
done
echo "dp 2 on $(nproc) cores${RATE:+, loopback shaped to $RATE}, ${ROUNDS} runs of 40 steps per variant (medians of the runs' medians)"
printf '%-22s %10s %10s %10s %12s %12s\n' variant step DP backward "model step" "model DP"
for v in "${!VARIANTS[@]}"; do
  IFS='|' read -r label overrides <<< "${VARIANTS[$v]}"
  files=()
  for i in ${IDS[$v]}; do
    "$BIN/stagecraft-cli" runs compare "$i" --json --db "$DB" > "$WORK/run$i.json"
    files+=("$WORK/run$i.json")
  done
  python3 - "$label" "${files[@]}" <<'EOF'
import json, statistics, sys
label = sys.argv[1]
runs = [json.load(open(path)) for path in sys.argv[2:]]
def part(r, name, key):
    return next(p[key] for p in r["parts"] if p["part"] == name)
def med(xs):
    return statistics.median(xs) * 1e3
step = med([part(r, "step", "measured") for r in runs])
dp = med([part(r, "DP", "measured") for r in runs])
bwd = med([next(x for x in r["ranks"] if x["rank"] == r["bottleneck_rank"])["backward_s"] for r in runs])
print(f"{label:<22} {step:8.1f}ms {dp:8.1f}ms {bwd:8.1f}ms {med([part(r, 'step', 'predicted') for r in runs]):10.1f}ms "
      f"{med([part(r, 'DP', 'predicted') for r in runs]):10.1f}ms")
EOF
done
