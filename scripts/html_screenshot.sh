#!/usr/bin/env bash
# Renders trainplan's HTML pictures in a real browser and checks the screenshots: headless
# Chromium (Debian's `chromium`) opens `simulate --html` and `plan --html` reports from disk with
# the network off, and the PNG it writes must show the picture: mostly drawn (not blank), with
# the forward and backward colours of the timeline and the capacity line's red present.
#   scripts/html_screenshot.sh TOOLS_DIR OUT_DIR
# Exit 77 (CTest's skip) when no Chromium is installed. The README's screenshot is
# OUT_DIR/simulate-report.png of this script (copied to docs/images/).
set -uo pipefail
if [ $# -ne 2 ]; then echo "usage: $0 TOOLS_DIR OUT_DIR" >&2; exit 2; fi
tools="$(cd "$1" && pwd)"; out="$(mkdir -p "$2" && cd "$2" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
browser="$(command -v chromium || command -v chromium-browser || true)"
if [ -z "$browser" ]; then echo "html_screenshot: no chromium installed: skipped"; exit 77; fi
cd "$root"
set -e
"$tools/plan" --model models/llama3-70b.json --gpus 64 --emit-plan "$out/plan.json" \
  --html "$out/plan-report.html" --quiet >/dev/null
"$tools/simulate" --model models/llama3-70b.json --gpus 64 --plan "$out/plan.json" \
  --html "$out/simulate-report.html" >/dev/null
set +e
failures=0
for name in simulate-report plan-report; do
  # --no-proxy-server and a blackholed resolver: a page that reached for the network would
  # render without it (the checks below would then fail on missing pieces).
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --no-proxy-server \
    --host-resolver-rules="MAP * ~NOTFOUND" --hide-scrollbars --window-size=1240,1400 \
    --screenshot="$out/$name.png" "file://$out/$name.html" >"$out/$name.log" 2>&1
  python3 - "$out/$name.png" <<'PY' || failures=$((failures + 1))
# Decodes the PNG (8-bit RGB or RGBA, not interlaced: what Chromium writes) with zlib alone
# and checks what it shows.
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, width = 8, b"", 0
while pos < len(data):
    length, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + length]
    if kind == b"IHDR":
        width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
        assert depth == 8 and colour in (2, 6) and interlace == 0, "unexpected PNG format"
        bpp = 3 if colour == 2 else 4
    elif kind == b"IDAT":
        idat += body
    pos += 12 + length
raw, stride = zlib.decompress(idat), width * bpp
rows, prev, at = [], bytearray(stride), 0
for _ in range(height):
    f, line = raw[at], bytearray(raw[at + 1:at + 1 + stride]); at += 1 + stride
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(line); prev = line
count, drawn = {}, 0
for line in rows:
    for i in range(0, stride, bpp):
        px = tuple(line[i:i + 3])
        count[px] = count.get(px, 0) + 1
        drawn += px != (255, 255, 255)
share = drawn / (width * height)
want = {"forward": (0x00, 0x72, 0xB2), "backward": (0x00, 0x9E, 0x73), "capacity": (0xCC, 0x00, 0x00)}
missing = [k for k, rgb in want.items() if count.get(rgb, 0) < 20]
print(f"{sys.argv[1]}: {width}x{height}, {share:.1%} drawn, missing: {missing or 'none'}")
assert share > 0.05, "the page looks blank"
assert not missing, f"colours not rendered: {missing}"
PY
done
echo "html_screenshot: $((2 - failures)) of 2 screenshots pass"
[ "$failures" -eq 0 ]
