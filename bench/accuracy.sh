#!/usr/bin/env bash
# The accuracy study: the simulator against every published run of the corpus, at the presets'
# constants and cross-validated by family, summarised with a chart.
#   bench/accuracy.sh OUT_DIR [BUILD_DIR]
# Writes OUT_DIR/report.md, report.json, held_out_by_family.svg (and the two raw JSON reports
# under OUT_DIR/raw/, which are not committed). About 3 CPU-minutes.
# RESIDUALS=FILE also writes the held-out errors per family there (simulate --write-residuals;
# validation/corpus/error_residuals.json after a corpus or model change) from the same run.
# CORPUS=FILE studies another corpus file (a survey applied to a copy) instead of the repo's.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: bench/accuracy.sh OUT_DIR [BUILD_DIR]}"
build="${2:-$root/build}"
corpus="${CORPUS:-$root/validation/corpus/published_runs.json}"
mkdir -p "$out/raw"
# Runs that cannot be mapped make simulate exit non-zero after the rest ran; they are listed.
"$build/tools/simulate" --published "$corpus" --json > "$out/raw/presets.json" || true
residuals=()
[[ -n "${RESIDUALS:-}" ]] && residuals=(--write-residuals "$RESIDUALS")
"$build/tools/simulate" --published "$corpus" --cross-validate "${residuals[@]}" --json > "$out/raw/cv.json"
python3 "$root/bench/scripts/accuracy_report.py" "$out/raw/presets.json" "$out/raw/cv.json" "$out"
