#!/usr/bin/env python3
"""Shape of the inter-token-latency distribution of serve_bench runs (JSON written with --per-request).

At high concurrency the ITL of a continuous-batching server is a mixture: gaps over decode-only steps and
gaps over steps that also carry prefill chunks (a few ms longer). When the two modes hold similar shares of
the gaps, the median sits on the jump between them and moves by the whole mode spacing with a small change
in the mix (issue 19: c=256 ITL p50 10.28 ms in one run, 13.93 ms in another, at the same throughput). This
prints, per file, what the median alone hides: deciles, the mean (= what throughput sees), and a histogram.

  python3 bench/itl_distribution.py run_a.json run_b.json [--bin-ms 1] [--max-ms 40]

Standard library only; .json.gz files are read too.
"""
import argparse
import gzip
import json
import sys


def percentile(v, p):
    """p-th percentile (0..100) of sorted v, linear interpolation (numpy's default), as serve_bench."""
    pos = (len(v) - 1) * p / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def describe(path, bin_ms, max_ms, out=sys.stdout):
    j = load(path)
    recs = [r for r in j.get("requests", []) if r.get("ok")]
    if not recs:
        print(f"{path}: no per-request records (run serve_bench with --json and --per-request)", file=out)
        return None
    itl = sorted(g * 1000.0 for r in recs for g in r["itl_s"])
    s = j["summary"]
    qs = [10, 25, 40, 50, 60, 75, 90, 99]
    row = {f"p{q}": percentile(itl, q) for q in qs}
    row["mean"] = sum(itl) / len(itl)
    label = j.get("config", {}).get("label") or path
    print(f"{label}: {s['completed']} requests, {s['output_throughput']:.0f} output tok/s, TTFT p50/p99 "
          f"{s['ttft']['p50_ms']:.1f}/{s['ttft']['p99_ms']:.1f} ms, {len(itl)} ITL gaps", file=out)
    print("  ITL " + "  ".join(f"p{q} {row[f'p{q}']:.2f}" for q in qs) + f"  mean {row['mean']:.2f} ms", file=out)
    nb = int(max_ms / bin_ms)
    counts = [0] * (nb + 1)
    for g in itl:
        counts[min(int(g / bin_ms), nb)] += 1
    cells = [f"{i * bin_ms:g}-{(i + 1) * bin_ms:g}:{100.0 * c / len(itl):.1f}%" for i, c in enumerate(counts[:nb]) if c]
    if counts[nb]:
        cells.append(f">={nb * bin_ms:g}:{100.0 * counts[nb] / len(itl):.1f}%")
    print("  histogram (ms: share of gaps) " + " ".join(cells), file=out)
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+")
    p.add_argument("--bin-ms", type=float, default=1.0)
    p.add_argument("--max-ms", type=float, default=40.0)
    a = p.parse_args(argv)
    for f in a.files:
        describe(f, a.bin_ms, a.max_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
