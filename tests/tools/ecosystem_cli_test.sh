#!/usr/bin/env bash
# End-to-end checks of the tools at the edges (issue 25): --version in every tool and its help;
# the build recorded in JSON output; output files (a FIFO or device refused and left as it was,
# a symlink written through, "-" as standard output, a full standard output is exit 6 with
# strerror); repeated JSON keys; Hugging Face model types refused by name, or read on request
# with every assumption printed; the README's example cluster file.
# Usage: ecosystem_cli_test.sh TOOLS_DIR SOURCE_DIR   (registered with CTest by CMakeLists.txt)
set -u
tools="$(cd "$1" && pwd)"; src="$(cd "$2" && pwd)"
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
check() {  # description, then a command that must succeed
  local what="$1"; shift
  if "$@"; then passed=$((passed + 1)); else echo "FAIL: $what"; failures=$((failures + 1)); fi
}

plan="$tools/plan"; simulate="$tools/simulate"
tiny="$src/models/tiny.json"

# --version: every tool built, and in every tool's help.
for t in plan simulate execute calibrate compare; do
  [ -x "$tools/$t" ] || continue
  expect 0 "$t (trainplan) " -- "$tools/$t" --version
  expect 0 "--version" -- "$tools/$t" --help
done

# Help comes from CLI11: typed metavariables and required options marked; the parser's
# messages are the ones docs/errors.md lists.
expect 0 "--model FILE" -- "$plan" --help
expect 0 "--gpus N" -- "$plan" --help
expect 0 "--memory-headroom X" -- "$plan" --help
check "plan --help marks --model REQUIRED" bash -c "'$plan' --help | grep -- '--model FILE' | grep -q REQUIRED"
expect 2 "option '--gpus' given twice" -- "$plan" --model "$tiny" --gpus 8 --gpus 8
expect 2 "option '--json' takes no value" -- "$plan" --model "$tiny" --gpus 8 --json=1
expect 2 "option '--model' needs a value" -- "$plan" --model
expect 2 "unexpected argument 'x' (options start with --)" -- "$plan" x
expect 2 "unknown option '--frobnicate' (see --help)" -- "$plan" --frobnicate=3
# A value that looks like an option is still the option's value.
expect 6 "refusing to write '-x'" -- bash -c "cd '$tmp' && mkdir -p -- -x && '$plan' --model '$tiny' --gpus 8 --emit-plan -x"

# The build that wrote a JSON report is in it.
"$plan" --model "$tiny" --gpus 8 --json > "$tmp/plan.json" 2>/dev/null
check "plan --json records the build" python3 -c "
import json, sys; b = json.load(open('$tmp/plan.json'))['build']
sys.exit(0 if b['version'] and b['git_commit'] and b['compiler'] else 1)"

# A full standard output is an error, with strerror.
if [ -e /dev/full ]; then
  expect 6 "cannot write standard output: No space left on device" -- \
    bash -c "'$plan' --model '$tiny' --gpus 8 --json > /dev/full"
  expect 6 "a character device" -- "$plan" --model "$tiny" --gpus 8 --emit-plan /dev/full
  check "/dev/full is still a device" test -c /dev/full
fi
# A FIFO is refused and left in place (writing it would block or feed whoever reads it).
mkfifo "$tmp/fifo"
expect 6 "a FIFO" -- "$plan" --model "$tiny" --gpus 8 --emit-plan "$tmp/fifo"
check "the FIFO is still a FIFO" test -p "$tmp/fifo"
# A symlink is written through and stays a link; "-" is standard output.
mkdir "$tmp/results"; ln -s results/best.json "$tmp/latest.json"
expect 0 "" -- "$plan" --model "$tiny" --gpus 8 --emit-plan "$tmp/latest.json"
check "the symlink stays a link" test -L "$tmp/latest.json"
check "its target holds the plan" grep -q '"tp"' "$tmp/results/best.json"
expect 0 '"global_batch_size"' -- "$plan" --model "$tiny" --gpus 8 --emit-plan -
expect 0 "" -- "$simulate" --model "$tiny" --gpus 8 --plan "$tmp/latest.json"

# Repeated keys: refused with the key, its byte offset and path.
printf '{"name":"x","num_layers":4,"hidden_size":64,"num_attention_heads":4,"num_layers":8,"ffn_hidden_size":256,"vocab_size":256,"seq_len":64}' > "$tmp/dup.json"
expect 3 'dup.json: duplicate key "num_layers" at byte 68 (path /num_layers)' -- \
  "$plan" --model "$tmp/dup.json" --gpus 8

# Hugging Face model types: hybrid refused by name; unknown refused, or read with assumptions.
expect 3 "is a hybrid model" -- "$plan" --model "$src/tests/data/hf/jamba-1.5-mini-config.json" --gpus 8
sed 's/"model_type": "llama"/"model_type": "my_decoder"/' \
  "$src/tests/data/hf/llama-2-7b-config.json" > "$tmp/unknown.json"
expect 3 '"my_decoder" is not a model type' -- "$plan" --model "$tmp/unknown.json" --gpus 8
expect 0 "note: $tmp/unknown.json: assumed: model_type is not on the allow-list" -- \
  "$plan" --model "$tmp/unknown.json" --gpus 8 --seq-len 4096 --allow-unknown-model-type

# The README's example cluster file ships and loads.
expect 0 "A100-80GB" -- "$plan" --model "$src/models/gpt3.json" --cluster "$src/examples/cluster.json" --tokens 3e11 --top 1

echo "ecosystem_cli_test: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
