#!/usr/bin/env bash
# Predicts a GPU lease's predicted-vs-measured matrix again, here, with this build: a model
# change is checked against the GPU's measured steps without a GPU. PVM_DIR is the folder
# bench/gpu/predicted_vs_measured.sh wrote there (its round-1/runs/NAME.{plan,measured}.json,
# the models, cluster.json and profile.json); PROFILE replaces its profile.json. SPLIT_K=1
# predicts with the profile's split_k set (compute_model.h), as `calibrate --backend cuda` now
# writes it, for a profile fitted before the field existed.
#   [SPLIT_K=1] bash bench/gpu/repredict.sh PVM_DIR [BUILD] [PROFILE]
set -euo pipefail
pvm=${1:?usage: bench/gpu/repredict.sh PVM_DIR [BUILD] [PROFILE]}
build=${2:-build}
profile=${3:-$pvm/profile.json}
for f in "$pvm/cluster.json" "$profile" "$build/tools/simulate"; do
  [ -e "$f" ] || { echo "repredict: $f does not exist" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "${SPLIT_K:-0}" = 1 ]; then
  python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); p["split_k"] = True; json.dump(p, open(sys.argv[2], "w"))' \
    "$profile" "$tmp/profile.json" || { echo "repredict: $profile is not a JSON profile" >&2; exit 2; }
  profile=$tmp/profile.json
fi
shopt -s nullglob
plans=("$pvm"/round-1/runs/*.plan.json)
[ ${#plans[@]} -gt 0 ] || { echo "repredict: no round-1/runs/*.plan.json under $pvm" >&2; exit 2; }
printf '%-16s %12s %12s %8s\n' plan "predicted ms" "measured ms" error
for plan in "${plans[@]}"; do
  name=$(basename "$plan" .plan.json)
  model=gpt2-124m
  [[ $name == tiny* ]] && model=tiny
  if ! "$build/tools/simulate" --model "$pvm/$model.json" --plan "$plan" --cluster "$pvm/cluster.json" \
       --hardware "$profile" --json --out "$tmp/$name.json" > "$tmp/$name.txt" 2>&1; then
    echo "$name: simulate failed: $(tail -1 "$tmp/$name.txt")"
    continue
  fi
  python3 - "$name" "$tmp/$name.json" "$pvm/round-1/runs/$name.measured.json" <<'PY'
import json, sys
name, predicted, measured = sys.argv[1:]
p = json.load(open(predicted))["step_time_s"]
m = json.load(open(measured))["step_time_s"]
print(f"{name:16s} {p * 1e3:12.2f} {m * 1e3:12.2f} {100 * (p - m) / m:+7.1f}%")
PY
done
