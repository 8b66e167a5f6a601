#!/usr/bin/env python3
"""The published memory-kernel rates in core/cost/memory_kernel_rates.cc are the ones
bench/results/memrates-2026-12-07/derive_rates.py derives from its listed figures (to the three
decimals the C++ holds), and the elementwise one is kPublishedElementwiseEfficiency."""
import importlib.util
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location(
    "derive_rates", ROOT / "bench/results/memrates-2026-12-07/derive_rates.py")
derive = importlib.util.module_from_spec(spec)
spec.loader.exec_module(derive)

cc = (ROOT / "core/cost/memory_kernel_rates.cc").read_text()
h = (ROOT / "core/cost/memory_kernel_rates.h").read_text()
elementwise = float(re.search(r"kPublishedElementwiseEfficiency = ([0-9.]+);", h).group(1))
failures = []
for const, name, fwd, bwd, figures in derive.table():
    m = re.search(r"constexpr Rate " + const + r"\{([^,}]+), ([^}]+)\};", cc)
    if m is None:
        failures.append(f"{const}: not found in memory_kernel_rates.cc")
        continue
    values = [elementwise if v.strip() == "kPublishedElementwiseEfficiency" else float(v)
              for v in m.groups()]
    for label, held, derived in (("forward", values[0], fwd), ("backward", values[1], bwd)):
        if abs(held - round(derived, 3)) > 5e-4:
            failures.append(f"{const} {label}: C++ {held}, derived {derived:.4f} ({name})")
    if not figures:
        failures.append(f"{const}: no figures")
if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"{len(derive.table())} rates match derive_rates.py")
