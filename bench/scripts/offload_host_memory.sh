#!/usr/bin/env bash
# Issue 26: the offload tiers' host and NVMe memory, the cost model's (`simulate --json`'s
# host_optimizer_bytes + host_param_bytes, nvme_bytes) beside the CPU executor's account
# (`execute --memory-report`: offload_host, offload_nvme), for this build and for another
# build's simulate and execute (BEFORE_DIR/simulate, BEFORE_DIR/execute). The tiny model
# (models/tiny.json), dp 2, each tier: optimizer on cpu and nvme (ZeRO 1), optimizer+params on
# cpu and nvme (ZeRO 3).
#
#   bench/scripts/offload_host_memory.sh BUILD_DIR OUT_DIR BEFORE_DIR
#
# Writes OUT_DIR/report.md and prints it.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: offload_host_memory.sh BUILD_DIR OUT_DIR BEFORE_DIR" >&2; exit 2; }
build="$(cd "$1" && pwd)" out="$2" before="$(cd "$3" && pwd)"
root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$out"
export OMP_NUM_THREADS=1
mpirun=(mpirun --oversubscribe --mca btl_vader_single_copy_mechanism none)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
dir="$(mktemp -d /tmp/offload-host-memory.XXXXXX)"
names=()
for tier in "optimizer cpu 1" "optimizer nvme 1" "optimizer+params cpu 3" "optimizer+params nvme 3"; do
  read -r offload device zero <<< "$tier"
  name="${offload/+/_}_$device"
  names+=("$name")
  echo "{\"tp\":1,\"pp\":1,\"dp\":2,\"zero_stage\":$zero,\"micro_batch_size\":2,\"global_batch_size\":8,\"precision\":\"fp32\",\"offload\":\"$offload\",\"offload_device\":\"$device\"}" \
    > "$out/$name.plan.json"
  nvme=()
  [ "$device" = nvme ] && nvme=(--offload-dir "$dir")
  for side in after before; do
    bin="$build/tools"
    [ "$side" = before ] && bin="$before"
    "$bin/simulate" --model "$root/models/tiny.json" --plan "$out/$name.plan.json" --gpus 2 \
      --json --out "$out/$name.$side.predicted.json" > /dev/null
    "${mpirun[@]}" -np 2 "$bin/execute" --model "$root/models/tiny.json" \
      --plan "$out/$name.plan.json" --steps 2 --random-tokens "${nvme[@]}" \
      --out "$out/$name.$side.json" --memory-report "$out/$name.$side.memory.json" > /dev/null
  done
done
rmdir "$dir"
python3 - "$out" "${names[@]}" <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
lines = ["# Offload tiers: host and NVMe memory, cost model against the executor (rank 0, bytes)",
         "", "| tier | side | cost model host | executor host | difference | cost model NVMe | "
         "executor NVMe | difference | executor's host items |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
for name in names:
    for side in ("before", "after"):
        pred = json.load(open(f"{out}/{name}.{side}.predicted.json"))["ranks"][0]["memory"]
        mem = json.load(open(f"{out}/{name}.{side}.memory.json"))["ranks"][0]["at_end"]
        host_m = pred.get("host_optimizer_bytes", 0) + pred.get("host_param_bytes", 0)
        nvme_m = pred.get("nvme_bytes", 0)
        host_e, nvme_e = mem["off_device_bytes"]["host"], mem["off_device_bytes"]["nvme"]
        items = ", ".join(f"{i['name']} {i['bytes']:.0f}" for i in mem["items"]
                          if i["use"] == "offload_host")
        lines.append(f"| {name} | {side} | {host_m:.0f} | {host_e:.0f} | {host_e - host_m:+.0f} | "
                     f"{nvme_m:.0f} | {nvme_e:.0f} | {nvme_e - nvme_m:+.0f} | {items} |")
report = "\n".join(lines) + "\n"
open(f"{out}/report.md", "w").write(report)
print(report)
PY
