# Reads DeepBench's V100 training workbook (baidu-research/DeepBench @ da81ba78,
# results/train/DeepBench_NV_V100.xlsx, sheet "Results - FP16 ip, Mixed math") and prints the
# GEMM rows with the highest TFLOP/s, recomputed from M, N, K and the measured time.
import sys, zipfile
import xml.etree.ElementTree as ET
z = zipfile.ZipFile(sys.argv[1])
ns = {'m': 'http://schemas.openxmlformats.org/spreadsheetml/2006/main'}
ss = ET.fromstring(z.read('xl/sharedStrings.xml'))
strs = [''.join(t.text or '' for t in si.iter('{%s}t' % ns['m'])) for si in ss.findall('m:si', ns)]
sh = ET.fromstring(z.read('xl/worksheets/sheet2.xml'))
rows = []
section = None
for r in sh.findall('.//m:row', ns):
    d = {}
    for c in r.findall('m:c', ns):
        v = c.find('m:v', ns)
        x = v.text if v is not None else ''
        if c.get('t') == 's' and x:
            x = strs[int(x)]
        d[''.join(ch for ch in c.get('r') if ch.isalpha())] = x
    if d.get('A'):
        section = d['A']
    if section and section.startswith('Dense Matrix') and d.get('C', '').isdigit():
        m, n, k = int(d['C']), int(d['D']), int(d['E'])
        t = float(d['I']) * 1e-3
        rows.append((2 * m * n * k / t / 1e12, float(d['J']), m, n, k, d.get('F'), d.get('G'), d['I'], d.get('B')))
print('GEMM rows:', len(rows))
rows.sort(reverse=True)
for r in rows[:12]:
    print('%.1f TFLOP/s (sheet %.1f)  M=%d N=%d K=%d  %s%s  %s ms  %s' % r)
