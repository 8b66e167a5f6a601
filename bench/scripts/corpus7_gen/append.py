"""Append entries (JSON lists in the given files) to a copy of the corpus; check the old text is a prefix-unchanged list."""
import json, sys
src, dst = sys.argv[1], sys.argv[2]
t = open(src).read()
d = json.loads(t)
assert json.dumps(d, indent=1) + '\n' == t
ids = {e['id'] for e in d}
n0 = len(d)
for f in sys.argv[3:]:
    for e in json.load(open(f)):
        assert e['id'] not in ids, e['id']
        ids.add(e['id'])
        d.append(e)
new = json.dumps(d, indent=1) + '\n'
old_body = json.dumps(json.loads(t)[:n0], indent=1)
assert new.startswith(old_body[:-2]), 'old entries changed'
open(dst, 'w').write(new)
print(n0, '->', len(d))
