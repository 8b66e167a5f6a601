#!/usr/bin/env python3
"""The 22 drafted MLPerf rows on GB200, GB300 and B300 as corpus entries, by the fifty-second
pass's rules (validation/corpus/NOTES.md): the drafts of ../mlperf-gb-drafts-2026-12-07/
make_entries.py with the GPU named by its preset and the node set to the NVLink domain the job
used (GB200 / GB300: num_gpus / racks, the racks from the systems JSON's system_name; inside one
rack, num_gpus; B300: 8). Nothing else of the drafts changes.

  python3 enter_rows.py OUT          # writes OUT/entries.json (and the drafts' OUT/draft/)
  python3 enter_rows.py OUT --append validation/corpus/published_runs.json
"""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DRAFTS = os.path.join(HERE, "..", "mlperf-gb-drafts-2026-12-07", "make_entries.py")
PRESET = {"GB200": "GB200-186GB", "GB300": "GB300-288GB", "B300-SXM-270GB": "B300-270GB"}


def nvlink_domain(entry):
    hw = entry["hardware"]
    n = hw["num_gpus"]
    if hw["gpu"].startswith("B300"):
        return 8, "an HGX B300 node (8 GPUs)"
    racks = re.search(r"\((\d+)x NVIDIA GB[23]00 NVL72\)", hw["interconnect"])
    if racks is None:
        if n > 72:
            sys.exit(f"{entry['id']}: {n} GPUs and no rack count in the system name")
        return n, f"{n} GPUs inside one NVL72 rack"
    r = int(racks.group(1))
    if n % r:
        sys.exit(f"{entry['id']}: {n} GPUs do not divide over {r} racks")
    return n // r, f"{n} GPUs over {r} NVL72 racks (systems JSON system_name): {n // r} per rack"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    draft = os.path.join(out, "draft")
    os.makedirs(draft, exist_ok=True)
    subprocess.run([sys.executable, DRAFTS, draft], check=True, stdout=subprocess.DEVNULL)
    entries = json.load(open(os.path.join(draft, "entries.json")))
    for e in entries:
        hw = e["hardware"]
        per_node, why = nvlink_domain(e)
        hw["gpus_per_node"] = per_node
        hw["gpu"] = PRESET[hw["gpu"]]
        e["notes"].append(
            f"Entered 2026-12-07 (validation/corpus/NOTES.md, fifty-second pass): gpu preset "
            f"{hw['gpu']}; gpus_per_node {per_node} = the NVLink domain the job used, {why}.")
    json.dump(entries, open(os.path.join(out, "entries.json"), "w"), indent=1, ensure_ascii=False)
    if len(sys.argv) == 4 and sys.argv[2] == "--append":
        corpus = json.load(open(sys.argv[3]))
        held = {e["id"] for e in corpus}
        clash = [e["id"] for e in entries if e["id"] in held]
        if clash:
            sys.exit(f"already in the corpus: {clash}")
        corpus.extend(entries)
        with open(sys.argv[3], "w") as f:
            f.write(json.dumps(corpus, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(entries)} entries")


if __name__ == "__main__":
    main()
