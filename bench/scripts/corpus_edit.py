"""Targeted text edits of the published-run corpus (validation/corpus/published_runs.json): one
entry gains a field (in its `parallel` block or at its top level) and its `notes` a line, every
other byte of the file left as it was (the corpus is reviewed as a diff). Used by the
survey-apply scripts."""
import json


def _entry_span(s, run_id):
    """The start of entry `run_id`'s id line and the end of the entry in corpus text `s`."""
    marker = '"id": "%s"' % run_id
    assert s.count(marker) == 1, run_id
    i = s.index(marker)
    end = s.find('\n {\n  "id"', i)
    return i, (len(s) if end < 0 else end)


def _append_note(s, run_id, note):
    """`s` with `note` appended to the notes of entry `run_id`."""
    i, end = _entry_span(s, run_id)
    nk = s.index('\n  ]', s.index('"notes": [', i))
    assert nk < end, run_id
    return s[:nk] + ',\n   ' + json.dumps(note) + s[nk:]


def set_parallel_field(s, run_id, key, value, note):
    """Returns corpus text `s` with parallel.`key` = `value` (any JSON value) and `note` appended
    to the notes of the entry `run_id`. The entry must exist once and not set `key` already."""
    i, end = _entry_span(s, run_id)
    j = s.index('"parallel": {', i)
    k = s.index('\n  }', j)
    assert k < end, run_id
    assert '"%s"' % key not in s[j:k], (run_id, key)
    s = s[:k] + ',\n   "%s": %s' % (key, json.dumps(value)) + s[k:]
    return _append_note(s, run_id, note)


def set_entry_field(s, run_id, after_key, key, value, note):
    """Returns corpus text `s` with the top-level field `key` = `value` on the line after the
    entry's top-level field `after_key`, and `note` appended to its notes. The entry must exist
    once, hold `after_key` (not as its last field) and not set `key` already."""
    i, end = _entry_span(s, run_id)
    assert '\n  "%s":' % key not in s[i:end], (run_id, key)
    j = s.index('\n  "%s":' % after_key, i)
    k = s.index('\n', j + 1)
    assert k < end and s[k - 1] == ',', run_id
    s = s[:k] + '\n  "%s": %s,' % (key, json.dumps(value)) + s[k:]
    return _append_note(s, run_id, note)
