#!/usr/bin/env python3
"""Prints the medians of a criterion run side by side with their ratios (reads target/criterion/**/new/estimates.json).

usage: bench-summary.py allocator
"""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2] / "target" / "criterion"


def median_ns(group: str, bench: str) -> float:
    path = ROOT / group / bench / "new" / "estimates.json"
    return json.loads(path.read_text())["median"]["point_estimate"]


def fmt(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.2f} {unit}"
    return f"{ns:.1f} ns"


def allocator() -> None:
    rows = []
    for used in ("1e3", "1e5", "1e6"):
        ours = median_ns("allocation", f"ours/{used}")
        frag = median_ns("allocation", f"ours-fragmented/{used}")
        scan = median_ns("allocation", f"linear-scan/{used}")
        rows.append((f"allocation, {used} in use", ours, scan, scan / ours))
        rows.append((f"allocation, {used} in use, fragmented free set (ours only)", frag, None, None))
        subnets = median_ns("allocation", f"ours-32-subnets/{used}")
        rows.append((f"allocation, {used} in use, 32 subnets (31 full), vs one subnet", subnets, ours, ours / subnets))
        for strategy, bench in (("Random", "ours-random"), ("LeastRecentlyReleased", "ours-lrr")):
            other = median_ns("allocation", f"{bench}/{used}")
            rows.append((f"allocation, {used} in use, {strategy}, vs Sequential", other, ours, ours / other))
    nearly_full = median_ns("allocation", "ours-random/1-in-1024-free")
    rows.append(("allocation, Random, a /16 with 1 in 1,024 free (ours only)", nearly_full, None, None))
    for name in ("ipv4-1e6-used", "ipv6-48-1e6-used"):
        ours = median_ns("status", f"ours/{name}")
        base = median_ns("status", f"rebuild-from-addresses/{name}")
        rows.append((f"status, {name}, vs rebuilding from the address list", ours, base, base / ours))
    rows.append(("spec edit, ipv6 /48 with 1e6 in use (ours only)", median_ns("status", "spec-edit/ipv6-48-1e6-used"), None, None))
    ours = median_ns("prefix-allocation", "ours/1e5-of-64-in-32")
    base = median_ns("prefix-allocation", "rebuild/1e5-of-64-in-32")
    rows.append(("prefix allocation, 1e5 /64s in a /32, vs rebuilding", ours, base, base / ours))
    print("| benchmark | ours (median) | baseline (median) | ratio |")
    print("|---|---|---|---|")
    for name, ours, base, ratio in rows:
        shown = f"{ratio:,.0f}x" if ratio and ratio >= 10 else f"{ratio:.2f}x" if ratio else "-"
        print(f"| {name} | {fmt(ours)} | {fmt(base) if base else '-'} | {shown} |")
    speedup = median_ns("allocation", "linear-scan/1e6") / median_ns("allocation", "ours/1e6")
    print(f"allocation speedup vs linear scan at 1e6 used: {speedup:.0f}x")


if __name__ == "__main__":
    {"allocator": allocator}[sys.argv[1]]()
