#!/usr/bin/env bash
# Predicts a GPU lease's measured matrix again, here, with this build: a model change is checked
# against the GPU's measured steps without a GPU. RECORD is what bench/gpu/matrix_record.py
# packed from the lease (validation/gpu/*.json): the cluster, the fitted profile, the models and
# each plan with its measured step. SPLIT_K=1 predicts with the profile's split_k set
# (core/cost/compute_model.h), as `calibrate --backend cuda` now writes it, for a profile fitted
# before the field existed.
#   [SPLIT_K=1] bash bench/gpu/repredict.sh RECORD [BUILD]
set -euo pipefail
record=${1:?usage: [SPLIT_K=1] bench/gpu/repredict.sh RECORD [BUILD]}
build=${2:-build}
for f in "$record" "$build/tools/simulate"; do
  [ -e "$f" ] || { echo "repredict: $f does not exist" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Unpacks the record into the files simulate reads; one line per run: NAME MODEL MEASURED_S.
python3 - "$record" "$tmp" "${SPLIT_K:-0}" > "$tmp/runs.txt" <<'PY' || exit 2
import json, os, sys
record, tmp, split_k = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
try:
    r = json.load(open(record))
    if r.get("schema") != "trainplan.gpu_matrix/1":
        raise ValueError(f"schema {r.get('schema')!r}, expected 'trainplan.gpu_matrix/1'")
    if not r.get("runs"):
        raise ValueError("'runs' is empty")
    profile = dict(r["profile"])
    if split_k:
        profile["split_k"] = True
    files = {"cluster.json": r["cluster"], "profile.json": profile}
    files.update({f"{name}.model.json": m for name, m in r["models"].items()})
    for run in r["runs"]:
        files[run["name"] + ".plan.json"] = run["plan"]
        print(run["name"], run["model"], run["measured_step_s"])
except (OSError, ValueError, KeyError, TypeError) as e:
    sys.exit(f"repredict: {record}: {e}")
for name, j in files.items():
    with open(os.path.join(tmp, name), "w") as f:
        json.dump(j, f)
PY
printf '%-16s %12s %12s %8s\n' plan "predicted ms" "measured ms" error
while read -r name model measured; do
  if ! "$build/tools/simulate" --model "$tmp/$model.model.json" --plan "$tmp/$name.plan.json" \
       --cluster "$tmp/cluster.json" --hardware "$tmp/profile.json" --json \
       --out "$tmp/$name.json" > "$tmp/$name.txt" 2>&1; then
    echo "$name: simulate failed: $(tail -1 "$tmp/$name.txt")"
    continue
  fi
  python3 - "$name" "$tmp/$name.json" "$measured" <<'PY'
import json, sys
name, predicted, m = sys.argv[1], sys.argv[2], float(sys.argv[3])
p = json.load(open(predicted))["step_time_s"]
print(f"{name:16s} {p * 1e3:12.2f} {m * 1e3:12.2f} {100 * (p - m) / m:+7.1f}%")
PY
done < "$tmp/runs.txt"
