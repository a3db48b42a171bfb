#!/usr/bin/env bash
# Lowering time against the batch: `rdu lower MODEL --cut batched --batch B --ctx CTX` (author,
# kinds, lift, lower, certify at B sequences) for B = 512 … 8192: the median wall and CPU
# (user + system) seconds of RUNS runs each (3 by default) and each wall time's ratio to the
# one before — linear lowering doubles with B. CTX is 256 by default: at the preset's 4096 the
# numeric certification holds about 4 MB of caches a sequence (32 GB at B = 8192).
# Not part of CI. Usage: bash bench/batch-lowering/run.sh [MODEL] [B...]
#   RDU=path/to/rdu times a given binary (default: the release build, built first)
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
model="${1:-tiny-llama}"
shift || true
batches=("$@")
[ ${#batches[@]} -gt 0 ] || batches=(512 1024 2048 4096 8192)
runs="${RUNS:-3}"
ctx="${CTX:-256}"
if [ -z "${RDU:-}" ]; then
  cargo build --release -p rdu-cli --manifest-path "$repo/Cargo.toml" >/dev/null
  RDU="$repo/target/release/rdu"
fi
median() { sort -g | sed -n "$(( (runs + 1) / 2 ))p"; }
printf '%-8s %10s %10s %8s\n' batch wall_s cpu_s ratio
prev=""
for b in "${batches[@]}"; do
  walls=() cpus=()
  for _ in $(seq "$runs"); do
    out=$( { /usr/bin/time -f '%e %U %S' "$RDU" lower "$model" --cut batched --batch "$b" --ctx "$ctx" >/dev/null; } 2>&1 | tail -1)
    read -r wall user sys <<<"$out"
    walls+=("$wall")
    cpus+=("$(echo "$user + $sys" | bc -l)")
  done
  wall=$(printf '%s\n' "${walls[@]}" | median)
  cpu=$(printf '%s\n' "${cpus[@]}" | median)
  ratio="-"
  [ -n "$prev" ] && ratio=$(printf '%.2f' "$(echo "$wall / $prev" | bc -l)")
  printf '%-8s %10.2f %10.2f %8s\n' "$b" "$wall" "$cpu" "$ratio"
  prev="$wall"
done
