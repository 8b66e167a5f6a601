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


def _insert_line(s, lo, hi, indent, after_key, key, value, run_id):
    """`s` with the line `indent`"key": value inserted after the line of `after_key` at that
    indent between offsets lo and hi; `after_key` must be there (not last) and `key` not."""
    assert '\n%s"%s":' % (indent, key) not in s[lo:hi], (run_id, key)
    a = s.index('\n%s"%s":' % (indent, after_key), lo)
    b = s.index('\n', a + 1)
    assert b < hi and s[b - 1] == ',', run_id
    return s[:b] + '\n%s"%s": %s,' % (indent, key, json.dumps(value)) + s[b:]


def set_entry_field(s, run_id, after_key, key, value, note):
    """Returns corpus text `s` with the top-level field `key` = `value` on the line after the
    entry's top-level field `after_key`, and `note` appended to its notes. The entry must exist
    once, hold `after_key` (not as its last field) and not set `key` already."""
    i, end = _entry_span(s, run_id)
    s = _insert_line(s, i, end, "  ", after_key, key, value, run_id)
    return _append_note(s, run_id, note)


def set_block_field(s, run_id, block, after_key, key, value, note):
    """Returns corpus text `s` with `block`.`key` = `value` (block: a top-level object such as
    "model") on the line after the block's field `after_key`, and `note` appended to the notes of
    the entry `run_id`. The entry must exist once, its block hold `after_key` (not as its last
    field) and not set `key` already."""
    i, end = _entry_span(s, run_id)
    j = s.index('"%s": {' % block, i)
    k = s.index('\n  }', j)
    assert k < end, run_id
    s = _insert_line(s, j, k, "   ", after_key, key, value, run_id)
    return _append_note(s, run_id, note)


def edit_corpus(argv, edit, what):
    """The apply scripts' main: reads the corpus at argv[1], calls edit(text, run) for every
    entry (it returns the new text, or None to leave the entry), writes argv[2] (default: in
    place) and prints how many entries `what`."""
    path = argv[1]
    out = argv[2] if len(argv) > 2 else path
    with open(path, encoding="utf-8") as f:
        text = f.read()
    changed = 0
    for run in json.loads(text):
        edited = edit(text, run)
        if edited is not None:
            text = edited
            changed += 1
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"{changed} entries {what}")
