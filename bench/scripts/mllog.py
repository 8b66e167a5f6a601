"""MLPerf result logs (the mlperf-logging ":::MLLOG {json}" lines): the records, and the facts
of a run that every entry script reads from them. Used by the results folders' make_entries.py
(bench/results/nvfp4-2026-12-07/, mlperf-gb-drafts-2026-12-07/)."""
import json
import re

MLLOG = re.compile(r":::MLLOG (\{.*\})\s*$")


def records(text):
    """Each MLLOG record of a log as (key, time_ms, metadata, value), in order; lines that are
    not MLLOG records or do not parse are skipped."""
    for line in text.splitlines():
        m = MLLOG.search(line)
        if not m:
            continue
        try:
            d = json.loads(m.group(1))
        except json.JSONDecodeError:
            continue
        yield d.get("key"), d.get("time_ms"), d.get("metadata", {}), d.get("value")


class RunFacts:
    """The run-level keys of a log (first global_batch_size, gradient_accumulation_steps and
    max_sequence_length; the run_stop status) and its tracked_stats step times, each per-rank
    repeat of a step's figure dropped. `take` returns whether it consumed the record."""

    def __init__(self):
        self.tst, self.gbs, self.ga, self.seq, self.status = [], None, None, None, None
        self._seen = set()

    def take(self, key, metadata, value):
        if key == "tracked_stats" and isinstance(value, dict):
            t = value.get("train_step_time", value.get("train_step_timing"))
            if t is not None and (metadata.get("step"), t) not in self._seen:
                self._seen.add((metadata.get("step"), t))
                self.tst.append(t)
        elif key == "global_batch_size":
            self.gbs = value if self.gbs is None else self.gbs
        elif key == "gradient_accumulation_steps":
            self.ga = value if self.ga is None else self.ga
        elif key == "max_sequence_length":
            self.seq = value if self.seq is None else self.seq
        elif key == "run_stop":
            self.status = metadata.get("status")
        else:
            return False
        return True

    def as_dict(self):
        return dict(tst=self.tst, gbs=self.gbs, ga=self.ga, seq=self.seq, status=self.status)


def printed_config(text, keys):
    """{key: (line number, value)} for the first "0: key: value" line of each of `keys` that a
    log prints (NeMo's resolved configuration, rank 0)."""
    out = {}
    for i, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^\s*0:\s+([a-z0-9_]+): (.*)$", line)
        if m and m.group(1) in keys and m.group(1) not in out:
            out[m.group(1)] = (i, m.group(2).strip())
    return out
