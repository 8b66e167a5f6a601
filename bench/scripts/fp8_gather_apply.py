"""Names the distributed optimizer's FP8 parameter all-gather (fp8_all_gather true, ZeRO-1/2:
Megatron-Core's fp8_param_gather, NeMo's fp8_params) on the corpus entries a source survey found
setting it (bench/results/fp8-param-gather-2026-12-06/survey.json: one object per entry with
the deciding config line and where it is), with a note quoting it. Edits CORPUS in place (run it
on a copy to study).

    python3 bench/scripts/fp8_gather_apply.py CORPUS SURVEY
"""
import json
import sys

from corpus_edit import set_entry_field


def main():
    path, survey_path = sys.argv[1], sys.argv[2]
    s = open(path).read()
    named = 0
    for row in json.load(open(survey_path)):
        if row["fp8_param_gather"] is not True:
            continue
        note = ("fp8_all_gather (fortieth pass, the distributed optimizer's FP8 parameter "
                "all-gather): %s (%s)" % (row["quote"], row["where"]))
        s = set_entry_field(s, row["id"], "precision", "fp8_all_gather", True, note)
        named += 1
    open(path, "w").write(s)
    print("named fp8_all_gather on %d entries" % named)


if __name__ == "__main__":
    main()
