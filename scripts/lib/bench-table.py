#!/usr/bin/env python3
"""scripts/bench's table: one row per figure (ours, the anchor measured in the same run, ratio
ours/anchor) from what the benchmarks left in the output directory (argv[1]). A figure whose
anchor is a goal and not a measurement says so in the anchor column. A benchmark that left no
figure shows as missing: the table never invents one."""

import re
import statistics
import sys
from pathlib import Path

out = Path(sys.argv[1])
rows = []


def row(figure, ours, anchor, ratio):
    rows.append(f"| {figure} | {ours} | {anchor} | {ratio} |")


def results(path):
    try:
        text = path.read_text()
    except OSError:
        return {}
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def fields(line):
    return dict(f.split("=", 1) for f in line.split() if "=" in f)


def ratio(a, b):
    return f"{a / b:.2f}" if b else "n/a"


# In-process: the render benchmark prints its own rows.
render = (out / "render.txt").read_text() if (out / "render.txt").exists() else ""
render_rows = [line[4:] for line in render.splitlines() if line.startswith("ROW | ")]
rows += render_rows or ["| render | missing | missing | n/a |"]
pings = (out / "ping-cost.txt").read_text() if (out / "ping-cost.txt").exists() else ""
ping_rows = [line[4:] for line in pings.splitlines() if line.startswith("ROW | ")]
rows += ping_rows or ["| ping CPU | missing | missing | n/a |"]

simulate = (out / "simulate.txt").read_text() if (out / "simulate.txt").exists() else ""
m = re.search(r"simulated in ([0-9.]+) s", simulate)
if m:
    s = float(m.group(1))
    row("simulate 1,000 nodes x 6 h, wall time", f"{s:.1f} s", "goal 120 s (not measured)", ratio(s, 120))
else:
    row("simulate 1,000 nodes x 6 h", "missing", "goal 120 s", "n/a")

lab = results(out / "lab-bench/nodes/node1/results")
# 1. bandwidth: medians of the rounds, each round ours and ib_write_bw back to back.
bw = [fields(v) for k, v in sorted(lab.items()) if k.startswith("bw_round_")]
if bw:
    ours = statistics.median(float(f["ours"]) for f in bw)
    theirs = statistics.median(float(f["perftest"]) for f in bw)
    row(f"bandwidth, 500 x 64 KiB unpaced, median of {len(bw)} rounds (Gb/s)",
        f"{ours:.4f}", f"ib_write_bw {theirs:.4f}", ratio(ours, theirs))
# 2. pacing: achieved against the limit.
for pct in ("10", "25", "50"):
    f = fields(lab.get(f"pacing_{pct}", ""))
    if f:
        achieved = float(f["achieved_gbps"]) * 1000
        limit = float(f["limit_mbps"])
        row(f"pacing at {pct}% of the link (Mb/s)", f"{achieved:.2f}", f"limit {limit:.2f}", ratio(achieved, limit))
# 3. warm session: request to first WRITE against the lab's ping round trip.
if lab.get("warm") and lab.get("rtt_ms"):
    warm = statistics.median(float(x.rstrip("ms")) for x in lab["warm"].split())
    rtt = float(lab["rtt_ms"])
    row("warm session, request to first WRITE, median of 5 (ms)", f"{warm:.3f}", f"ping RTT {rtt:.3f}", ratio(warm, rtt))
# 4. CPU at the same software rate limit, without the NIC emulation's doorbell CPU.
cpu_re = re.compile(
    r"ib_write_bw [0-9.]+ Gb/s \(err [^)]*\) cpu (?P<pc>[0-9.]+) s, (?P<pn>[0-9.]+) s of it"
    r".*\| ours [0-9.]+ Gb/s \(err [^)]*\) cpu (?P<oc>[0-9.]+) s, (?P<on>[0-9.]+) s of it"
    r".*running exporter: cpu (?P<burst>[0-9.]+) s"
)
for pct in ("25", "50"):
    m = cpu_re.search(lab.get(f"cpu_{pct}", ""))
    if m:
        v = {k: float(x) for k, x in m.groupdict().items()}
        theirs = v["pc"] - v["pn"]
        row(f"CPU of one probe process at {pct}% of the link, NIC emulation out (s)",
            f"{v['oc'] - v['on']:.2f}", f"ib_write_bw {theirs:.2f}", ratio(v["oc"] - v["on"], theirs))
        row(f"CPU per burst of a running exporter at {pct}%, NIC emulation out (s)",
            f"{v['burst'] - v['on']:.2f}", f"ib_write_bw {theirs:.2f}", ratio(v["burst"] - v["on"], theirs))
# 5. the exporter's own cost.
idle, bursts = fields(lab.get("scrape_idle", "")), fields(lab.get("scrape_bursts", ""))
if idle and bursts:
    share = lab.get("scrape_bursts_busy_share", "?")
    for q in ("p50", "p99"):
        a, b = float(bursts[f"{q}_ms"]), float(idle[f"{q}_ms"])
        row(f"scrape {q}, {bursts['n']} scrapes during bursts (device busy {share}) vs {idle['n']} idle (ms)",
            f"{a:.1f}", f"idle {b:.1f}", ratio(a, b))
quiet = fields(lab.get("quiet_threads", ""))
if quiet and lab.get("quiet_wall_seconds"):
    wall = float(lab["quiet_wall_seconds"])
    pct = 100 * float(quiet["total"]) / wall
    row(f"CPU with no burst due (10 paths, interval 1 h), {wall:.0f} s (% of a core)",
        f"{pct:.3f}", "goal 0.5 (not measured)", ratio(pct, 0.5))
threads = fields(lab.get("idle_threads", ""))
if threads and lab.get("idle_wall_seconds"):
    wall = float(lab["idle_wall_seconds"])
    total, burst = float(threads["total"]), float(threads["burst"])
    outside = 100 * (total - burst) / wall
    row(f"CPU outside bursts, 10 paths every 30 s, {wall:.0f} s (% of a core)",
        f"{outside:.3f}", "goal 0.5 (not measured)", ratio(outside, 0.5))
    doorbell_cpu, _ = (float(x) for x in lab.get("idle_doorbells", "0 0").split())
    life, window = float(lab.get("idle_life_bursts", 0)), float(lab.get("idle_bursts", 0))
    nic = doorbell_cpu * window / life if life else 0.0
    inside = 100 * (burst - nic) / wall
    row(f"CPU of the burst thread, NIC emulation out ({window:.0f} bursts; % of a core)",
        f"{inside:.3f}", "n/a", "n/a")
    rss = float(lab.get("idle_rss_kib", 0)) / 1024
    row("RSS after the idle window (MiB)", f"{rss:.1f}", "goal 30 (not measured)", ratio(rss, 30))
if not lab:
    row("lab benchmark", "missing", "missing", "n/a")
# The perftest calibration: our --perftest burst (busy-poll) against the stock client.
cal = results(out / "lab-perftest/nodes/node1/results")
rounds = [fields(v) for k, v in sorted(cal.items()) if k.startswith("round_")]
if rounds:
    ours = statistics.median(float(f["ours"]) for f in rounds)
    stock = statistics.median(float(f["stock"]) for f in rounds)
    row(f"probe --perftest --busy-poll into a stock server, median of {len(rounds)} rounds (Gb/s)",
        f"{ours:.4f}", f"stock client {stock:.4f}", f"{cal.get('median_ratio', 'n/a')} (median of ratios)")
row("ping cost", "not built", "n/a", "the exporter sends no pings yet")

machine = (out / "machine.txt").read_text().strip() if (out / "machine.txt").exists() else ""
print("\n".join(machine.splitlines()))
print()
print("| figure | ours | anchor | ratio |")
print("|---|---|---|---|")
print("\n".join(rows))
if quiet:
    print()
    print("exporter CPU per thread with no burst due (s): " + ", ".join(f"{k} {v}" for k, v in quiet.items()))
if threads:
    print()
    print("exporter CPU per thread over the window of the normal schedule (s): "
          + ", ".join(f"{k} {v}" for k, v in threads.items())
          + f"; doorbell CPU over the exporter's life {lab.get('idle_doorbells', '?')} (s, writes),"
          f" {lab.get('idle_life_bursts', '?')} bursts; peak RSS {float(lab.get('idle_hwm_kib', 0)) / 1024:.1f} MiB")
