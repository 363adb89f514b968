#!/usr/bin/env python3
"""Writes promtool unit tests of the alert rules on emulated fleets, with faults injected.

Usage: deploy/prometheus/tests/fleet.py --rules RULES.yaml -o DIR [--list]

A fleet here is N ToRs x nodes per ToR x rails (one device per rail, mlx5_<rail>), probing each
other as the exporter does: a full mesh at the base interval, or sampled (every same-ToR peer
every 7 intervals, a few peers of other ToRs every 10 intervals), with jitter, busy deferrals
(no attempt) and rare single failed probes as noise. What the exporter would put on /metrics is
emitted as promtool input series, one sample per evaluation interval (60 s, the production
rules' interval): per path success, consecutive failures, last attempt and success times, planned
interval and the paced burst's gauges, and its pings (every path a burst reached is pinged every
5 s: sent and lost counters, 12 pings a sample with a rare lost one as noise, and the window's
RTT percentiles around 15 us within a ToR and 25 us across); per node up, node_info,
device_info, peer_info and the port facts. A fault model replaces the RDMA bursts and pings
(docs/runbook.md, "How the alerts are tested"): each scenario injects faults from a list below,
and the same fault list says which alerts must fire, naming which component, and when. A fault
that fails the probes (a dead port, node or uplink, a failing path) also loses every ping.

Each scenario becomes one test with checks every few intervals:
  - at each check time outside a fault's detection or resolution window, the firing alerts
    (ALERTS{alertstate="firing"} by alertname, component, severity and location labels) are
    exactly the expected ones;
  - over the intervals since the previous check, every alert that fired at all is one some
    fault active then explains (a wrong alert that fires for one evaluation fails the test);
  - over the same intervals, every alert its fault requires then was firing at every evaluation
    (an alert that resolves and fires again between two checks fails the test).
The rules are the system under test; this file is the fault model and the oracle. Standard
library only; deterministic (fixed seeds).
"""

import argparse
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

STEP = 60  # seconds per sample and per rule evaluation (the production rules' interval)
JOB = "rdma-probe-exporter"
K = 3  # probes_bad in deploy/prometheus/generate
PINGS = 12  # pings a path sends per sample (step): deploy/prometheus/generate --ping-interval 5s
PING_NOISE = 0.005  # the chance that a path loses one ping in a step without any fault
PROJECTION = ("alertname", "component", "severity", "instance", "node", "device",
              "peer_node", "peer_device", "tor", "rail")
MARK = "count by (" + ", ".join(PROJECTION) + ")"


# ----------------------------------------------------------------------------- the fleet

@dataclass
class Fleet:
    tors: int
    per_tor: int
    rails: int
    mode: str = "sampled"  # or "mesh"
    cross_peers: int = 3  # sampled: peers in other ToRs per node
    same_every: int = 7  # sampled: same-ToR interval, in steps
    cross_every: int = 10  # sampled: cross-ToR interval (a round), in steps
    seed: int = 1

    def nodes(self):
        return [f"t{t}n{i}" for t in range(self.tors) for i in range(self.per_tor)]

    @staticmethod
    def tor(node):
        return node.split("n")[0]

    def paths(self):
        """(prober, rail, peer, interval in seconds) of every path."""
        rng = random.Random(self.seed)
        nodes = self.nodes()
        out = []
        for n in nodes:
            if self.mode == "mesh":
                peers = [(m, STEP) for m in nodes if m != n]
            else:
                same = [m for m in nodes if m != n and self.tor(m) == self.tor(n)]
                other = [m for m in nodes if self.tor(m) != self.tor(n)]
                cross = rng.sample(other, min(self.cross_peers, len(other)))
                peers = [(m, self.same_every * STEP) for m in same]
                peers += [(m, self.cross_every * STEP) for m in cross]
            for m, interval in peers:
                for r in range(self.rails):
                    out.append((n, r, m, interval))
        return out


# ----------------------------------------------------------------------------- faults

@dataclass
class Fault:
    kind: str
    start: int  # step
    end: int  # step (exclusive); a fault without end lasts the whole test
    node: str = ""
    rail: int = -1
    peer: str = ""
    tor: str = ""
    fraction: float = 0.0  # bandwidth fraction of a slow fault; 0 = probes fail; *_loss: the
    # share of pings lost; path_latency: the factor on the path's RTT
    rails: tuple = ()  # isolated: the node's dead rails
    # Steps after its start by which the fault's alert must fire, where tighter than its kind's
    # allowance (fault_alerts).
    detect: int = None
    # The fault's own alert must not fire: another fault's alert names the same component (a
    # rate-capped port that also drops pings: RdmaProbePortDegraded).
    held: bool = False

    def touches_port(self, node, rail):
        return self.node == node and self.rail in (-1, rail)


def active(faults, step, kind=None):
    return [f for f in faults if f.start <= step < f.end and (kind is None or f.kind == kind)]


def probe_outcome(fleet, faults, step, n, r, m):
    """(failed, bandwidth fraction of the pace) of a probe n/mlx5_r -> m at `step`."""
    fraction = 1.0
    for f in active(faults, step):
        if f.kind in ("node_down", "reboot") and f.node == m:
            return True, 0.0
        if f.kind in ("port_fail", "port_down") and (f.touches_port(n, r) or f.touches_port(m, r)):
            return True, 0.0
        if f.kind == "isolated" and f.node in (n, m) and r in f.rails:
            return True, 0.0
        if f.kind == "path" and (f.node, f.rail, f.peer) == (n, r, m):
            if f.fraction == 0:
                return True, 0.0
            fraction = min(fraction, f.fraction)
        if f.kind == "port_slow" and f.touches_port(n, r):
            fraction = min(fraction, f.fraction)
        if f.kind == "tor_uplink" and f.rail == r and fleet.tor(n) != fleet.tor(m) and f.tor in (
                fleet.tor(n), fleet.tor(m)):
            if f.fraction == 0:
                return True, 0.0
            fraction = min(fraction, f.fraction)
    return False, fraction


def ping_outcome(fleet, faults, step, n, r, m):
    """(share of pings lost, factor on the RTT) of the pings n/mlx5_r -> m at `step`: every ping
    of a path whose probes a fault fails (a dead port, node or uplink, a failing path, a peer
    whose exporter is gone: it answers no ping), a share of them on a lossy port, path or uplink."""
    loss, factor = 0.0, 1.0
    cross = fleet.tor(n) != fleet.tor(m)
    for f in active(faults, step):
        if f.kind in ("node_down", "reboot") and f.node == m:
            return 1.0, factor
        if f.kind in ("port_fail", "port_down") and (f.touches_port(n, r) or f.touches_port(m, r)):
            return 1.0, factor
        if f.kind == "isolated" and f.node in (n, m) and r in f.rails:
            return 1.0, factor
        if f.kind == "path" and f.fraction == 0 and (f.node, f.rail, f.peer) == (n, r, m):
            return 1.0, factor
        if f.kind == "tor_uplink" and f.fraction == 0 and f.rail == r and cross and f.tor in (
                fleet.tor(n), fleet.tor(m)):
            return 1.0, factor
        if f.kind == "port_loss" and (f.touches_port(n, r) or f.touches_port(m, r)):
            loss = max(loss, f.fraction)
        if f.kind == "path_loss" and (f.node, f.rail, f.peer) == (n, r, m):
            loss = max(loss, f.fraction)
        if f.kind == "tor_uplink_loss" and f.rail == r and cross and f.tor in (fleet.tor(n), fleet.tor(m)):
            loss = max(loss, f.fraction)
        if f.kind == "path_latency" and (f.node, f.rail, f.peer) == (n, r, m):
            factor = max(factor, f.fraction)
    return loss, factor


# A probe into a node that is off or rebooting fails only at the exporter's `timeout` (10 s, its
# control connection's), and its result (with `rdma_probe_last_attempt_timestamp_seconds`, when
# the probe ended) shows from the first sample after that: the probes that were timing out as the
# node came back are scraped when it is up again.
PROBE_TIMEOUT = 10


def unanswered(faults, step, node):
    return any(f.kind in ("node_down", "reboot") and f.node == node for f in active(faults, step))


# A restart: the exporter of `node` stops and starts again within one step (a rolling update),
# unseen by the scrapes: its process start time moves, its ping counters start from zero, and
# the pings into it for 20 s are lost. (Its probes' series are kept, as if probed at once.)
RESTART_LOST = 4


def restarted(sc, step, node):
    return any(f.kind == "restart" and f.node == node and f.start == step for f in sc.faults)


def exporter_absent(faults, step, node):
    return any(f.node == node for f in active(faults, step)
               if f.kind in ("node_down", "reboot", "exporter_down", "scrape_gap"))


# ----------------------------------------------------------------------------- series

def rle(values):
    """promtool's expanding notation for a list of samples (None = no sample): `vxN` is N + 1
    samples of v, `_xN` N missing ones. A series that stops gets a staleness marker, as
    Prometheus writes one when a series leaves a scrape or its target goes down."""
    values = [("stale" if v is None and i and isinstance(values[i - 1], (int, float)) else v)
              for i, v in enumerate(values)]
    out, i = [], 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[i]:
            j += 1
        n = j - i + 1
        if values[i] is None:
            out.append("_" if n == 1 else f"_x{n}")
        else:
            v = fmt(values[i])
            out.append(v if n == 1 else f"{v}x{n - 1}")
        i = j + 1
    return " ".join(out)


def fmt(v):
    if isinstance(v, float):
        return repr(round(v, 6))
    return str(v)


def selector(name, labels):
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{inner}}}"


@dataclass
class PathState:
    attempts: int = 0
    last_attempt: float = None
    last_success: float = None
    last_success_step: int = None
    failures: int = 0
    success: int = None
    ratio: float = None
    min_window: float = None
    gap: float = None
    # The last capacity burst's bandwidth, bytes/s: held, like the exporter's gauge, while the
    # path's probes fail.
    capacity: float = None
    pings_sent: int = 0
    pings_lost: int = 0

    def attempt(self, ended, failed):
        """A probe that ran and ended at `ended` (the success figures are the caller's)."""
        self.attempts += 1
        self.last_attempt = ended
        self.failures = self.failures + 1 if failed else 0
        self.success = 0 if failed else 1


@dataclass
class Scenario:
    name: str
    fleet: Fleet
    steps: int
    faults: list = field(default_factory=list)
    # Per-node or per-path extras for the exporter-health alerts: (kind, node, start, end, value).
    events: list = field(default_factory=list)
    check_every: int = 5
    failure_rate: float = 0.003
    busy_rate: float = 0.02
    # A failed probe into a faulty port or node takes the probe timeout on the prober's device,
    # one probe at a time: with this set, a device with such a path probes nothing else while
    # the fault lasts (the worst case: timeouts as long as the interval).
    timeouts_hold: bool = False
    # Checks of recorded series beside the alerts: (PromQL, minute, expected samples as
    # (labels, value) pairs).
    records: list = field(default_factory=list)


def removed(sc, step, node):
    """Whether the paths into `node` are out of every prober's config (an "unprobed" event)."""
    return any(e[0] == "unprobed" and e[1] == node and e[2] <= step < e[3] for e in sc.events)


def held_by_timeouts(sc, peers_of, step, n, r, m):
    """Whether n/mlx5_r cannot probe m at `step` because its probes into a faulty peer are
    timing out (Scenario.timeouts_hold)."""
    if not sc.timeouts_hold or probe_outcome(sc.fleet, sc.faults, step, n, r, m)[0]:
        return False
    return any(probe_outcome(sc.fleet, sc.faults, step, n, r, other)[0]
               for other in peers_of[(n, r)] if other != m)


def emulate(sc):
    """The input series of a scenario: {series selector: [sample or None per step]}."""
    fleet, steps = sc.fleet, sc.steps
    rng = random.Random(sc.fleet.seed * 7919 + len(sc.name))
    # The pings draw from their own generator: the probes' draws stay what they were without them.
    ping_rng = random.Random(sc.fleet.seed * 104729 + len(sc.name))
    series = {}

    samples = {}  # (name, labels as items) -> the series' samples, its selector made once

    def put(name, labels, step, value):
        at = (name, tuple(labels.items()))
        values = samples.get(at)
        if values is None:
            values = series.setdefault(selector(name, {"job": JOB, **labels}), [None] * steps)
            samples[at] = values
        values[step] = value

    paths = fleet.paths()
    peers_of = {}
    for n, r, m, _ in paths:
        peers_of.setdefault((n, r), []).append(m)
    states = {}
    phases = {p: rng.uniform(0, p[3]) for p in paths}
    next_probe = {p: phases[p] for p in paths}
    timing_out = {}  # path -> when its probe into a node that is off fails (PROBE_TIMEOUT)
    # When each node's exporter started: an hour before the scenario, then when it came back from
    # an absence, or at a `startup_deferrals` event.
    started_at = {n: -60 for n in fleet.nodes()}
    away = set()
    for step in range(steps):
        now = step * STEP
        for p in paths:
            n, r, m, interval = p
            if exporter_absent(sc.faults, step, n):
                # The exporter is gone: its state starts afresh when it returns (a restart).
                if any(f.kind == "reboot" and f.node == n for f in active(sc.faults, step)):
                    states.pop(p, None)
                    timing_out.pop(p, None)
                continue
            st = states.setdefault(p, PathState())
            # Probes that ran since the previous sample, in order; one timing out into a node
            # that is off holds the path's next probe until it has ended.
            while True:
                if p in timing_out:
                    if timing_out[p] > now:
                        break
                    st.attempt(timing_out.pop(p), failed=True)
                if next_probe[p] > now:
                    break
                t = next_probe[p]
                next_probe[p] = t + interval * rng.uniform(0.9, 1.1)
                if rng.random() < sc.busy_rate:
                    # busy: a deferral, not an attempt; the exporter retries within seconds
                    next_probe[p] = t + 5
                    continue
                if any(e[0] == "stale" and e[1] == n and e[2] <= step < e[3] and e[5] == r
                       for e in sc.events):
                    continue  # the device's probes do not run
                if any(e[0] == "starved" and e[1] == n and e[4] == m and e[5] == r and e[2] <= step < e[3]
                       for e in sc.events):
                    next_probe[p] = t + 5  # the peer's responder answers `busy`: no attempt
                    continue
                if held_by_timeouts(sc, peers_of, int(t // STEP), n, r, m):
                    next_probe[p] = t + 5  # runs as soon as the device is free
                    continue
                if removed(sc, step, m):
                    next_probe[p] = t + interval
                    continue
                failed, fraction = probe_outcome(fleet, sc.faults, int(t // STEP), n, r, m)
                if failed and unanswered(sc.faults, int(t // STEP), m):
                    timing_out[p] = round(t + PROBE_TIMEOUT, 3)
                    continue
                if not failed and rng.random() < sc.failure_rate:
                    failed = True
                st.attempt(round(t, 3), failed)
                if not failed:
                    st.last_success = round(t, 3)
                    st.last_success_step = step
                    st.ratio = min(1.0, fraction * rng.uniform(0.95, 1.0))
                    st.min_window = rng.uniform(0.8, 0.95)
                    st.gap = rng.uniform(0.0015, 0.0025)
                    for e in sc.events:
                        if e[1] == n and e[2] <= step < e[3] and e[5] in (-1, r) and (
                                e[4] in ("", m)):
                            if e[0] == "stall":
                                st.min_window = 0.1
                            elif e[0] == "gaps":
                                st.gap = 0.5
                            elif e[0] == "below_baseline":
                                st.ratio = 0.78
                            elif e[0] == "slow":
                                st.ratio = 0.5
            if st.attempts == 0 or removed(sc, step, m):
                continue
            labels = {"instance": n, "device": f"mlx5_{r}", "peer": m, "peer_device": f"mlx5_{r}"}
            # The pings since the previous sample: a burst reached the path, so it is pinged.
            loss, factor = ping_outcome(fleet, sc.faults, step, n, r, m)
            if 0 < loss < 1:
                lost = sum(ping_rng.random() < loss for _ in range(PINGS))
            else:
                lost = round(loss * PINGS)
            if not lost and ping_rng.random() < PING_NOISE:
                lost = 1
            if restarted(sc, step, m):
                lost = max(lost, RESTART_LOST)
            if restarted(sc, step, n):
                st.pings_sent = st.pings_lost = 0  # a new process counts from zero
            st.pings_sent += PINGS
            st.pings_lost += lost
            put("rdma_probe_ping_sent_total", labels, step, st.pings_sent)
            put("rdma_probe_ping_lost_total", labels, step, st.pings_lost)
            if lost < PINGS:
                # The window's percentiles (over the answered pings of the last minute).
                p50 = (25e-6 if fleet.tor(n) != fleet.tor(m) else 15e-6) * factor * ping_rng.uniform(0.9, 1.1)
                for percentile, times in (("50", 1), ("90", 1.3), ("99", 2)):
                    put("rdma_probe_ping_rtt_seconds", {**labels, "percentile": percentile}, step,
                        round(p50 * times, 9))
            put("rdma_probe_success", labels, step, st.success)
            put("rdma_probe_consecutive_failures", labels, step, st.failures)
            put("rdma_probe_last_attempt_timestamp_seconds", labels, step, st.last_attempt)
            put("rdma_probe_path_interval_seconds", labels, step, interval)
            if st.last_success is not None:
                put("rdma_probe_last_success_timestamp_seconds", labels, step, st.last_success)
                pace = 2.5e6
                for kind in ("paced",):
                    kl = {**labels, "kind": kind}
                    put("rdma_probe_bandwidth_bytes_per_second", kl, step, round(pace * st.ratio, 1))
                    put("rdma_probe_target_bandwidth_bytes_per_second", kl, step, pace)
                    put("rdma_probe_bandwidth_min_window_bytes_per_second", kl, step,
                        round(pace * st.ratio * st.min_window, 1))
                    put("rdma_probe_completion_gap_max_seconds", kl, step, st.gap)
            for e in sc.events:
                if e[0] == "validation" and e[1] == n and e[4] == m and e[5] == r and step >= e[2]:
                    put("rdma_probe_last_validation_failure_timestamp_seconds", labels, step,
                        e[2] * STEP)
            # Capacity bursts (in scenarios about them): low from a device with a `capacity`
            # event, or in a narrower PCIe slot (which caps the port below its link rate). A
            # path whose probes fail keeps its last figure, as the exporter's gauge does.
            if any(e[0] == "capacity" for e in sc.events) or any(f.kind == "pcie" for f in sc.faults):
                cl = {**labels, "kind": "capacity"}
                low = any(e[0] == "capacity" and e[1] == n and e[2] <= step < e[3] and e[5] == r
                          for e in sc.events) or any(f.touches_port(n, r) for f in active(sc.faults, step, "pcie"))
                if st.last_success_step == step:  # a burst that succeeded this step
                    st.capacity = 2.0e10 if low else 9.0e10
                if st.capacity is not None:
                    put("rdma_probe_bandwidth_bytes_per_second", cl, step, st.capacity)
                    put("rdma_probe_target_bandwidth_bytes_per_second", cl, step, 1.0e11)

        for n in fleet.nodes():
            absent = exporter_absent(sc.faults, step, n)
            gone = any(e[0] == "targets_gone" and e[2] <= step < e[3] for e in sc.events)
            if not gone:
                put("up", {"instance": n}, step, 0 if absent else 1)
            if absent:
                away.add(n)
            elif n in away:
                away.discard(n)
                started_at[n] = step
            if any(e[0] == "startup_deferrals" and e[1] == n and e[2] == step for e in sc.events):
                started_at[n] = step
            if restarted(sc, step, n):
                started_at[n] = step
            if absent or gone:
                continue
            put("rdma_probe_node_info", {"instance": n, "node": n, "tor": fleet.tor(n)}, step, 1)
            put("process_start_time_seconds", {"instance": n}, step, started_at[n] * STEP)
            put("rdma_probe_config_reload_success", {"instance": n}, step,
                0 if any(e[0] == "reload_failed" and e[1] == n and e[2] <= step < e[3]
                         for e in sc.events) else 1)
            for r in range(fleet.rails):
                dev = {"instance": n, "device": f"mlx5_{r}"}
                port = {**dev, "port": "1"}
                put("rdma_probe_device_info", {**dev, "pci_address": f"0000:{r:02x}:00.0",
                                               "firmware": "28.39.1002", "rail": str(r)}, step, 1)
                down = any(f.touches_port(n, r) for f in active(sc.faults, step, "port_down"))
                put("rdma_probe_port_up", port, step, 0 if down else 1)
                narrow = any(f.touches_port(n, r) for f in active(sc.faults, step, "port_width"))
                put("rdma_probe_port_rate_bytes_per_second", port, step, 2.5e10 if narrow else 5.0e10)
                put("rdma_probe_port_width_lanes", port, step, 2 if narrow else 4)
                pcie = any(f.touches_port(n, r) for f in active(sc.faults, step, "pcie"))
                put("rdma_probe_pcie_link_width_lanes", dev, step, 8 if pcie else 16)
                put("rdma_probe_pcie_link_max_width_lanes", dev, step, 16)
                put("rdma_probe_pcie_link_speed_transfers_per_second", dev, step, 3.2e10)
                put("rdma_probe_pcie_link_max_speed_transfers_per_second", dev, step, 3.2e10)
                stretch = any(e[0] == "stretch" and e[1] == n and e[2] <= step < e[3] and e[5] == r
                              for e in sc.events)
                put("rdma_probe_schedule_interval_stretch_ratio", dev, step, 2.5 if stretch else 1)
            peers = sorted({m for (p, _, m, _) in paths if p == n})
            for m in peers:
                put("rdma_probe_peer_info", {"instance": n, "peer": m, "peer_node": m,
                                             "tor": fleet.tor(m)}, step, 1)
        counters(sc, step, put)
    return series


def counters(sc, step, put):
    """Counters of the exporter-health events: they rise by one per step while the event lasts."""
    for e in sc.events:
        kind, n, start, end = e[0], e[1], e[2], e[3]
        if step < start and kind not in ("retransmits", "link_errors", "discovery", "budget_drops",
                                         "budget_deferrals"):
            continue
        rising = start <= step < end
        done = min(max(step - start + 1, 0), end - start)
        if kind in ("retransmits", "link_errors"):
            counter, counter_kind = (("local_ack_timeout_err", "ack_timeout") if kind == "retransmits"
                                     else ("symbol_error", "symbol_error"))
            labels = {"instance": n, "device": f"mlx5_{e[5]}", "peer": e[4], "peer_device": f"mlx5_{e[5]}",
                      "side": "local", "counter": counter, "counter_kind": counter_kind}
            put("rdma_probe_port_increase_total", labels, step, 20 * done)
        elif kind == "discovery":
            put("rdma_probe_discovery_errors_total", {"instance": n, "source": "dns"}, step, done)
        elif kind == "budget_drops":
            put("rdma_probe_series_budget_dropped_paths_total", {"instance": n}, step, 5 * done)
        elif kind in ("budget_deferrals", "startup_deferrals"):
            dev = {"instance": n, "device": f"mlx5_{e[5]}", "peer": e[4], "peer_device": f"mlx5_{e[5]}"}
            if kind == "budget_deferrals":
                deferred, runs = 2 * done, step + 1
            else:
                # A fresh exporter: every path is due at once, so the budget holds back 5 probes
                # in each of its first 3 steps while the device runs 10 a step.
                deferred, runs = 5 * min(step - start + 1, 3), 10 * (step - start + 1)
            put("rdma_probe_deferred_total", {**dev, "reason": "budget"}, step, deferred)
            put("rdma_probe_runs_total", {**dev, "result": "success"}, step, runs)
        elif kind in RULE_HEALTH:
            rule_health(kind, e[4], start, end, step, put)
        elif kind == "responder_validation" and step >= start:
            put("rdma_probe_responder_last_validation_failure_timestamp_seconds",
                {"instance": n, "device": f"mlx5_{e[5]}", "peer": e[4]}, step, start * STEP)


# Prometheus's metrics about its own rule groups (its self-scrape, job "prometheus"): a group
# whose evaluations take 54 s of their 60 s (rules_slow), or miss one (rules_missed) or fail two
# (rules_failed) each step while the event lasts; the group's other series stay healthy.
RULE_HEALTH = ("rules_slow", "rules_missed", "rules_failed")
PROMETHEUS = {"job": "prometheus", "instance": "localhost:9090"}


def rule_health(kind, group, start, end, step, put):
    labels = {**PROMETHEUS, "rule_group": f"/etc/prometheus/rules.yaml;{group}"}
    done = min(max(step - start + 1, 0), end - start)
    if kind == "rules_slow":
        put("prometheus_rule_group_interval_seconds", labels, step, STEP)
        put("prometheus_rule_group_last_duration_seconds", labels, step,
            0.9 * STEP if start <= step < end else 0.05 * STEP)
    elif kind == "rules_missed":
        put("prometheus_rule_group_iterations_missed_total", labels, step, done)
    else:
        put("prometheus_rule_evaluation_failures_total", labels, step, 2 * done)


# ----------------------------------------------------------------------------- the oracle

@dataclass(frozen=True)
class Expect:
    alertname: str
    component: str
    severity: str
    labels: tuple  # sorted (name, value) of the projected location labels

    def sample(self):
        labels = {"alertname": self.alertname, "component": self.component,
                  "severity": self.severity, **dict(self.labels)}
        return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def expect(alertname, component, severity, **labels):
    return Expect(alertname, component, severity, tuple(sorted((k, str(v)) for k, v in labels.items())))


def port_alert(name, node, rail, severity="warning"):
    d = f"mlx5_{rail}"
    return expect(name, "port", severity, node=node, device=d, peer_node=node, peer_device=d)


def fault_alerts(fleet, fault):
    """The alerts a fault must raise, and how many steps after its start and after its end
    they may take to fire and to resolve."""
    intervals = [p[3] for p in fleet.paths()]
    longest = max(intervals) // STEP
    detect = K * longest + 4  # K probes of the slowest path through it, jitter, scrape, rules
    resolve = longest + 4
    f = fault
    if f.kind == "path":
        name = "RdmaProbePathFailing" if f.fraction == 0 else "RdmaProbePathDegraded"
        d = f"mlx5_{f.rail}"
        return [expect(name, "path", "warning", instance=f.node, node=f.node, device=d,
                       peer_node=f.peer, peer_device=d, tor=fleet.tor(f.node), rail=f.rail)], detect, resolve
    if f.kind == "port_fail":
        return [port_alert("RdmaProbePortFailing", f.node, f.rail)], detect, resolve
    if f.kind == "port_down":
        return [port_alert("RdmaProbePortDown", f.node, f.rail)], 3, resolve
    if f.kind == "port_slow":
        return [port_alert("RdmaProbePortDegraded", f.node, f.rail)], detect, resolve
    if f.kind == "node_down":
        return [expect("RdmaProbeNodeDown", "node", "warning", node=f.node, peer_node=f.node)], detect, 4
    if f.kind == "reboot":
        # Shorter than detection: nothing must fire; a warning that the node or its exporter is
        # down may (never a page).
        return [OPTIONAL, expect("RdmaProbeNodeDown", "node", "warning", node=f.node, peer_node=f.node),
                expect("RdmaProbeExporterDown", "exporter", "warning", instance=f.node)], detect, 4
    if f.kind == "isolated":
        return [expect("RdmaProbeNodeIsolated", "node", "critical", node=f.node, peer_node=f.node)], detect, resolve
    if f.kind == "tor_uplink":
        return [expect("RdmaProbeTorUplinkDegraded", "tor_uplink", "warning", tor=f.tor, rail=f.rail)], detect, resolve
    if f.kind == "port_width":
        return [expect("RdmaProbePortLinkBelowFleet", "port", "warning", instance=f.node, node=f.node,
                       device=f"mlx5_{f.rail}")], 4, 4
    if f.kind == "pcie":
        return [expect("RdmaProbePcieLinkDegraded", "port", "warning", instance=f.node, node=f.node,
                       device=f"mlx5_{f.rail}")], 12, 4
    if f.kind == "exporter_down":
        return [expect("RdmaProbeExporterDown", "exporter", "warning", instance=f.node)], 7, 3
    if f.kind in ("scrape_gap", "restart"):
        return [], 0, 0
    # Pings: a lossy port, path or uplink, a slow path. The loss window (5 steps) holds 3 lost
    # pings of a path within a few steps (at a tenth lost: 1.2 a step, at random), then the
    # alert's for: (3 steps; the latency alert's 5, from the first slow sample); it clears once
    # the losses leave the window and its keep_firing_for (2 steps) has passed.
    ping_detect, ping_resolve = 5 + 3 + 4, 5 + 2 + 2
    if f.held:
        return [], 0, 0
    if f.kind == "port_loss":
        return [port_alert("RdmaProbePortPacketLoss", f.node, f.rail)], ping_detect, ping_resolve
    if f.kind in ("path_loss", "path_latency"):
        name, severity, detect = (("RdmaProbePathPacketLoss", "warning", ping_detect) if f.kind == "path_loss"
                                  else ("RdmaProbePathLatencyHigh", "info", 5 + 3))
        d = f"mlx5_{f.rail}"
        return [expect(name, "path", severity, instance=f.node, node=f.node, device=d, peer_node=f.peer,
                               peer_device=d, tor=fleet.tor(f.node), rail=f.rail)], detect, ping_resolve
    if f.kind == "tor_uplink_loss":
        return [expect("RdmaProbeTorUplinkPacketLoss", "tor_uplink", "warning", tor=f.tor, rail=f.rail)], \
            ping_detect, ping_resolve
    raise ValueError(f"unknown fault kind {f.kind}")


def event_alerts(e):
    kind, n, start, end = e[0], e[1], e[2], e[3]
    d = f"mlx5_{e[5]}" if len(e) > 5 and e[5] != -1 else ""
    node_dev = dict(instance=n, node=n, device=d)
    table = {
        "reload_failed": (expect("RdmaProbeConfigReloadFailed", "exporter", "warning", instance=n), 5, 3),
        "stretch": (expect("RdmaProbeDutyCycleExhausted", "exporter", "info", instance=n, device=d), 32, 3),
        "stale": (expect("RdmaProbeStale", "exporter", "warning", **node_dev), 3 * 10 + 4, 4),
        "retransmits": (expect("RdmaProbePortRetransmits", "port", "warning", **node_dev), 3, 12),
        "link_errors": (expect("RdmaProbePortLinkErrors", "port", "warning", **node_dev), 3, 12),
        "discovery": (expect("RdmaProbeDiscoveryErrors", "exporter", "warning", instance=n), 22, 12),
        "budget_drops": (expect("RdmaProbeSeriesBudgetDrops", "exporter", "info", instance=n), 3, 62),
        "budget_deferrals": (expect("RdmaProbeBudgetDeferrals", "exporter", "info", instance=n, device=d), 8, 32),
        "validation": (expect("RdmaProbeValidationFailures", "path", "critical", instance=n, node=n,
                              device=d, peer_node=e[4], peer_device=d), 2, 3),
        "responder_validation": (expect("RdmaProbeResponderValidationFailures", "path", "warning",
                                        instance=n, device=d), 2, 3),
        "capacity": (expect("RdmaProbeCapacityLow", "port", "warning", instance=n, node=n, device=d), 14, 14),
        "stall": (expect("RdmaProbeBurstStalls", "path", "warning", instance=n, node=n, device=d,
                         peer_node=e[4], peer_device=d, tor=Fleet.tor(n), rail=e[5]), 4 * 3 + 4, 6),
        "gaps": (expect("RdmaProbeCompletionGaps", "path", "info", instance=n, node=n, device=d,
                        peer_node=e[4], peer_device=d, tor=Fleet.tor(n), rail=e[5]), 4 * 3 + 4, 6),
        "below_baseline": (expect("RdmaProbeBelowBaseline", "path", "info", instance=n, node=n, device=d,
                                  peer_node=e[4], peer_device=d, tor=Fleet.tor(n), rail=e[5]), 4 * 3 + 4, 6),
        "targets_gone": (expect("RdmaProbeExporterAbsent", "exporter", "warning"), 7, 3),
        "unprobed": (expect("RdmaProbeNodeUnprobed", "node", "warning", node=n), 3 + 30 + 3, 4),
        # rule_health_for (10) past the first slow evaluation; a missed or failed evaluation
        # fires at once and for rule_health_window (10) after the last.
        "rules_slow": (expect("RdmaProbeRuleGroupSlow", "prometheus", "warning",
                              instance=PROMETHEUS["instance"]), 10 + 2, 2),
        "rules_missed": (expect("RdmaProbeRuleEvaluationsMissed", "prometheus", "warning",
                                instance=PROMETHEUS["instance"]), 2, 10 + 2),
        "rules_failed": (expect("RdmaProbeRuleEvaluationFailures", "prometheus", "warning",
                                instance=PROMETHEUS["instance"]), 2, 10 + 2),
    }
    if kind not in table:
        raise ValueError(f"unknown event kind {kind}")
    alert, detect, resolve = table[kind]
    if kind in ("validation", "responder_validation"):
        end = start + 10  # validation_window: 10 intervals after the failure
    return alert, start, end, detect, resolve


OPTIONAL = "optional"  # in a fault's alert list: the alerts after it may fire, need not


def windows(sc):
    """(alert, start, end, detect, resolve) of every fault and event; an optional alert has a
    detection time past its end (it is never required)."""
    out = []
    for f in sc.faults:
        alerts, detect, resolve = fault_alerts(sc.fleet, f)
        if f.detect is not None:
            detect = f.detect
        if alerts and alerts[0] == OPTIONAL:
            alerts, detect = alerts[1:], f.end - f.start + 1
        out += [(a, f.start, f.end, detect, resolve) for a in alerts]
    for e in sc.events:
        # Fewer than K slow probes, budget deferrals in an exporter's first window, a path
        # answered busy by a dead port's responder: nothing of their own may fire.
        # A rule group slow for fewer evaluations than rule_health_for (10): a spike, not a trend.
        spike = e[0] == "rules_slow" and e[3] - e[2] < 10
        if e[0] not in ("slow", "startup_deferrals", "starved") and not spike:
            out.append(event_alerts(e))
    return out


def checks(sc):
    """promql_expr_test items: at each check time, the exact set of firing alerts (leaving out the
    alert names some fault is still raising or clearing then), and the alerts allowed over the
    span since the previous check."""
    ws = windows(sc)
    items = []
    prev = 0
    for t in range(sc.check_every, sc.steps, sc.check_every):
        must, may = set(), set()
        for alert, start, end, detect, resolve in ws:
            if start + detect <= t < end:
                must.add(alert)
            if start <= t < end + resolve:
                may.add(alert)
        unsettled = sorted({a.alertname for a in may - must})
        # Everything that fired since the previous check is explained by some fault then.
        allowed = set()
        for alert, start, end, detect, resolve in ws:
            if start <= t and prev < end + resolve:
                allowed.add(alert)
        items.append(("span", t, prev, sorted(allowed, key=lambda a: a.sample()), []))
        exact = sorted((a for a in must if a.alertname not in unsettled), key=lambda a: a.sample())
        items.append(("exact", t, None, exact, unsettled))
        held = due_throughout(ws, prev, t)
        if held:
            items.append(("held", t, prev, held, []))
        prev = t
    return items


def due_throughout(ws, prev, t):
    """The alerts due to fire at every evaluation of some part of [prev, t] (past their detection,
    before their fault's end), as [(first, last, alerts)]: the exact sets at prev and t cannot see
    an alert that resolves and fires again between them."""
    spans = {}
    for alert, start, end, detect, resolve in ws:
        first, last = max(prev, start + detect), min(t, end - 1)
        if last > first:
            spans.setdefault((first, last), set()).add(alert)
    return [(first, last, sorted(alerts, key=lambda a: a.sample()))
            for (first, last), alerts in sorted(spans.items())]


def render_test(sc, rules):
    series = emulate(sc)
    lines = [f"# GENERATED by deploy/prometheus/tests/fleet.py: scenario {sc.name}",
             f"rule_files: [{rules}]", f"evaluation_interval: {STEP}s", "tests:",
             "  - name: '" + sc.name.replace("'", "''") + "'", f"    interval: {STEP}s", "    input_series:"]
    for key in sorted(series):
        lines.append(f"      - series: '{key}'")
        lines.append(f"        values: '{rle(series[key])}'")
    lines.append("    promql_expr_test:")
    for kind, t, prev, alerts, unsettled in checks(sc):
        if kind == "exact":
            lines.append(f"      # exact set at {t}m")
            skip = f',alertname!~\"{"|".join(unsettled)}\"' if unsettled else ""
            lines.append(f"      - expr: '{MARK} (ALERTS{{alertstate=\"firing\"{skip}}})'")
            lines.append(f"        eval_time: {t}m")
            lines.append("        exp_samples:" + ("" if alerts else " []"))
            for a in alerts:
                lines.append(f"          - labels: '{a.sample()}'")
                lines.append("            value: 1")
        elif kind == "held":
            lines.append(f"      # the alerts due in [{prev}m, {t}m] fired at every evaluation")
            lines.append("      - expr: '" + held_query(alerts, t) + "'")
            lines.append(f"        eval_time: {t}m")
            lines.append("        exp_samples: []")
        else:
            lines.append(f"      # nothing unexplained fired in ({prev}m, {t}m]")
            lines.append("      - expr: '" + span_query(alerts, max(t - prev, 1)) + "'")
            lines.append(f"        eval_time: {t}m")
            lines.append("        exp_samples: []")
    for expr, t, samples in sc.records:
        lines.append(f"      - expr: '{expr}'")
        lines.append(f"        eval_time: {t}m")
        lines.append("        exp_samples:" + ("" if samples else " []"))
        for labels, value in samples:
            lines.append(f"          - labels: '{labels}'")
            lines.append(f"            value: {value}")
    # The records that only carry labels are 1 (other records multiply by them), and exist.
    t = sc.check_every
    lines.append(f"      # label-only records are 1 at {t}m")
    lines.append(f"      - expr: '{LABEL_RECORDS} != 1'")
    lines.append(f"        eval_time: {t}m")
    lines.append("        exp_samples: []")
    lines.append(f"      - expr: 'count({LABEL_RECORDS}) > bool 0'")
    lines.append(f"        eval_time: {t}m")
    lines.append("        exp_samples:")
    lines.append("          - labels: '{}'")
    lines.append("            value: 1")
    return "\n".join(lines) + "\n"


LABEL_RECORDS = ("(path:rdma_probe_labels:info or path:rdma_probe_bad:info"
                 " or tor_pair:rdma_probe_crossing:info)")


def constant(alert):
    """A vector holding one sample with exactly the projected labels of `alert`."""
    q = "vector(1)"
    for k, v in [("alertname", alert.alertname), ("component", alert.component),
                 ("severity", alert.severity), *alert.labels]:
        q = f'label_replace({q}, "{k}", "{v}", "", "")'
    return q


def span_query(alerts, span):
    """The alerts firing at any evaluation of the last `span` steps that are not allowed."""
    q = f'{MARK} (max_over_time(ALERTS{{alertstate="firing"}}[{span}m]))'
    if not alerts:
        return q
    return f"{q} unless ({' or '.join(constant(a) for a in alerts)})"


def held_query(spans, t):
    """At minute `t`, the alerts of `spans` ((first, last, alerts): due to fire at every evaluation
    from minute `first` to `last`) that were not firing at one of those evaluations, as 0 (the
    alert's constant fills in where ALERTS has no sample; an alert firing counts 1 or more, so
    the others never show). Each evaluation is a point of a 1m subquery; Prometheus 3, whose
    ranges leave their start out, would skip only the one at `first`."""
    terms = []
    for first, last, alerts in spans:
        due = " or ".join(constant(a) for a in alerts)
        firing = f'{MARK} (ALERTS{{alertstate="firing"}}) or ({due}) * 0'
        offset = f" offset {t - last}m" if t > last else ""
        terms.append(f"min_over_time(({firing})[{last - first}m:1m]{offset})")
    return f"({' or '.join(terms)}) == 0"


# ----------------------------------------------------------------------------- scenarios

SAMPLED = Fleet(tors=3, per_tor=5, rails=2)
MESH = Fleet(tors=1, per_tor=5, rails=2, mode="mesh")


def scenarios():
    s = []
    s.append(Scenario("a clean sampled fleet (same ToR every 7 intervals, others every 10) fires nothing",
                      SAMPLED, 150, check_every=5))
    # The dashboards' whole-fleet records: 5 nodes x 4 peers x 2 rails.
    s.append(Scenario("a clean full mesh fires nothing", MESH, 90, records=[
        ("job:rdma_probe_paths:count", 60, [(f'job:rdma_probe_paths:count{{job="{JOB}"}}', 40)]),
        ("job:rdma_probe_node_pairs:count", 60,
         [(f'job:rdma_probe_node_pairs:count{{job="{JOB}"}}', 20)]),
        ("count(path:rdma_probe_bandwidth_ratio:worst)", 60, [("{}", 25)]),
        # Every path is pinged; the dashboards' ping records.
        ("count(path:rdma_probe_ping_loss:ratio)", 60, [("{}", 40)]),
        ("count(path:rdma_probe_ping_loss_ratio:worst)", 60, [("{}", 25)]),
        ("count(tor_pair_rail:rdma_probe_ping_rtt_p50:median)", 60, [("{}", 2)])]))
    # Pings: partial loss on a port, across a ToR uplink and on one path, and one slow path, each
    # named once (a total fault's loss is the bursts': the scenarios above lose every ping).
    s.append(Scenario("a lossy port, a lossy ToR uplink, a lossy path and a slow path fire one "
                      "RdmaProbePortPacketLoss, RdmaProbeTorUplinkPacketLoss, RdmaProbePathPacketLoss "
                      "and RdmaProbePathLatencyHigh each",
                      Fleet(tors=3, per_tor=4, rails=2), 70,
                      [Fault("tor_uplink_loss", 15, 40, tor="t1", rail=0, fraction=0.1),
                       Fault("port_loss", 17, 42, node="t2n2", rail=1, fraction=0.1),
                       Fault("path_loss", 19, 44, node="t0n0", rail=1, peer="t0n3", fraction=0.15),
                       # Late enough for the path's own median over an hour to stay its usual.
                       Fault("path_latency", 35, 55, node="t2n1", rail=0, peer="t2n3", fraction=20)]))
    s.append(Scenario("a dead port fires one RdmaProbePortFailing naming it", SAMPLED, 120,
                      [Fault("port_fail", 20, 80, node="t1n2", rail=1)]))
    s.append(Scenario("a dead port whose failing bursts hold its responder, so that another "
                      "prober's path into it is answered busy and never attempted, fires only "
                      "RdmaProbePortFailing (no RdmaProbeStale for that prober)", MESH, 90,
                      [Fault("port_fail", 20, 60, node="t0n2", rail=1)],
                      events=[("starved", "t0n0", 20, 60, "t0n2", 1)]))
    s.append(Scenario("a dead port whose probes' timeouts hold its probers' devices fires only "
                      "RdmaProbePortFailing: no RdmaProbeStale for the paths they starve, and no "
                      "RdmaProbePathDegraded for the two slow results one of those paths keeps "
                      "meanwhile (fewer than K probes)", MESH, 90,
                      [Fault("port_fail", 20, 60, node="t0n2", rail=1)],
                      events=[("slow", "t0n0", 18, 20, "t0n1", 1)], timeouts_hold=True))
    s.append(Scenario("a port down fires one RdmaProbePortDown", SAMPLED, 100,
                      [Fault("port_down", 20, 60, node="t0n1", rail=0)]))
    # What the held checks see and the exact sets cannot: the port is up at 41m and 42m, so its
    # alert resolves and fires again between the checks at 40m and 45m, firing at both; the held
    # check's query for [40m, 45m] names it.
    down = port_alert("RdmaProbePortDown", "t0n2", 0)
    firing = f'{MARK} (ALERTS{{alertstate="firing",alertname="RdmaProbePortDown"}})'
    s.append(Scenario("a port up for two intervals between two checks: its RdmaProbePortDown, "
                      "firing at both checks, is seen resolving between them", MESH, 60,
                      [Fault("port_down", 20, 41, node="t0n2", rail=0),
                       Fault("port_down", 43, 50, node="t0n2", rail=0)],
                      records=[(firing, 40, [(down.sample(), 1)]), (firing, 45, [(down.sample(), 1)]),
                               (held_query([(40, 45, [down])], 45), 45, [(down.sample(), 0)])]))
    # As in the lab: the rate cap also drops some of the port's pings, and its bursts name it first.
    s.append(Scenario("a slow port (a rate cap that also drops a tenth of its pings) fires one "
                      "RdmaProbePortDegraded, no RdmaProbePortPacketLoss", MESH, 80,
                      [Fault("port_slow", 20, 50, node="t0n3", rail=1, fraction=0.4),
                       Fault("port_loss", 20, 50, node="t0n3", rail=1, fraction=0.1, held=True)]))
    s.append(Scenario("a dead node seen by 12 probers over minutes fires one RdmaProbeNodeDown",
                      Fleet(tors=2, per_tor=8, rails=1, cross_peers=5), 120,
                      [Fault("node_down", 30, 90, node="t0n4")],
                      # The worst paths are not filled with the dead node's zeros.
                      records=[('count(path:rdma_probe_bandwidth_ratio:worst{peer="t0n4"})', 60, []),
                               ("count(path:rdma_probe_bandwidth_ratio:worst)", 60, [("{}", 25)])]))
    # Its probers' bursts come every 7 to 10 steps: the pings into it (every 5 s) name it first,
    # once its exporter is not scraped: within the ping window (3 steps here) and the for:.
    s.append(Scenario("a node powered off in a sampled fleet fires RdmaProbeNodeDown from its "
                      "pings, within 3 intervals, before its probes have failed", SAMPLED, 60,
                      [Fault("node_down", 20, 45, node="t1n2", detect=3)], check_every=1))
    s.append(Scenario("a reboot of a node fires nothing that pages", SAMPLED, 100,
                      [Fault("reboot", 30, 36, node="t2n0")]))
    # Long enough for its probers' paths to fail K times: the probes that were timing out into it
    # as it came back are scraped once it is up and no longer explains them (the record check:
    # this seed has one such path; without the rules' explained_grace it pages). No single
    # failures as noise here.
    s.append(Scenario("a node rebooting for 25 intervals pages nothing once it is back, the probes "
                      "that timed out into it as it came back included",
                      Fleet(tors=3, per_tor=5, rails=2, seed=11), 70,
                      [Fault("reboot", 20, 45, node="t1n2")], check_every=1, failure_rate=0,
                      records=[('count(rdma_probe_consecutive_failures{peer="t1n2"} >= 3 and on(instance, '
                                'device, peer, peer_device) rdma_probe_last_attempt_timestamp_seconds'
                                '{peer="t1n2"} > 2700)', 46, [("{}", 1)])]))
    s.append(Scenario("a dead rail leaf uplink fires one RdmaProbeTorUplinkDegraded",
                      Fleet(tors=3, per_tor=5, rails=2, cross_peers=4), 130,
                      [Fault("tor_uplink", 20, 90, tor="t1", rail=0)]))
    s.append(Scenario("a slow ToR uplink fires one RdmaProbeTorUplinkDegraded",
                      Fleet(tors=3, per_tor=5, rails=2, cross_peers=4), 130,
                      [Fault("tor_uplink", 20, 90, tor="t2", rail=1, fraction=0.3)]))
    s.append(Scenario("one failing and one slow path elsewhere fire one path alert each", MESH, 80,
                      [Fault("path", 15, 50, node="t0n0", rail=0, peer="t0n2"),
                       Fault("path", 20, 60, node="t0n3", rail=1, peer="t0n1", fraction=0.5)],
                      # A failing path into a live peer is among the worst, as 0.
                      records=[('count(path:rdma_probe_bandwidth_ratio:worst{instance="t0n0",'
                                'peer="t0n2"} == 0)', 30, [("{}", 1)])]))
    s.append(Scenario("a node with 3 of its 4 rails dead is isolated (one page)",
                      Fleet(tors=1, per_tor=5, rails=4, mode="mesh"), 70,
                      [Fault("isolated", 20, 50, node="t0n2", rails=(0, 1, 3))]))
    # The narrower slot also holds its capacity bursts far below the fleet's: the PCIe alert
    # explains them (RdmaProbeCapacityLow stays quiet).
    s.append(Scenario("a port trained narrower and a NIC in a narrower slot fire one alert each",
                      SAMPLED, 60,
                      [Fault("port_width", 10, 40, node="t0n0", rail=1),
                       Fault("pcie", 15, 45, node="t2n3", rail=0)]))
    s.append(Scenario("a rolling restart of every exporter, each losing the pings into it for 20 s "
                      "unseen by the scrapes, fires nothing", MESH, 45,
                      [Fault("restart", 15 + 2 * i, 16 + 2 * i, node=f"t0n{i}") for i in range(5)]))
    s.append(Scenario("an exporter down while its node answers fires RdmaProbeExporterDown",
                      MESH, 60, [Fault("exporter_down", 20, 40, node="t0n1")]))
    s.append(Scenario("scrape gaps fire nothing, and a validation failure pages once",
                      MESH, 90,
                      [Fault("scrape_gap", 30, 33, node="t0n0"), Fault("scrape_gap", 31, 33, node="t0n2"),
                       Fault("scrape_gap", 70, 73, node="t0n0"), Fault("scrape_gap", 71, 74, node="t0n1")],
                      events=[("validation", "t0n0", 45, 0, "t0n1", 1),
                              ("responder_validation", "t0n1", 46, 0, "t0n0", 1)]))
    s.append(Scenario("exporter-health alerts fire on their own and resolve",
                      MESH, 130,
                      events=[("reload_failed", "t0n0", 10, 30, "", -1),
                              ("stretch", "t0n1", 10, 60, "", 0),
                              ("stale", "t0n2", 20, 70, "", 1),
                              ("retransmits", "t0n3", 10, 30, "t0n1", 0),
                              ("link_errors", "t0n4", 40, 60, "t0n0", 1),
                              ("discovery", "t0n0", 40, 80, "", -1),
                              ("budget_drops", "t0n1", 10, 22, "", -1),
                              ("budget_deferrals", "t0n3", 50, 80, "t0n2", 1),
                              ("startup_deferrals", "t0n4", 90, 110, "t0n2", 0)]))
    # The rules' own health: the busiest group slow for a while (a spike of two slow evaluations
    # does not fire), then missed and failed evaluations of others.
    s.append(Scenario("a rule group slow for a while, missed and failed evaluations fire the "
                      "rule-health alerts, and a one-evaluation spike does not",
                      MESH, 90,
                      events=[("rules_slow", "", 10, 40, "rdma-probe-paths", -1),
                              ("rules_slow", "", 50, 52, "rdma-probe-baselines", -1),
                              ("rules_missed", "", 42, 52, "rdma-probe-components", -1),
                              ("rules_failed", "", 58, 68, "rdma-probe-pings", -1)]))
    s.append(Scenario("slow results broken by good ones never make K in a row: two slow, one "
                      "good, two slow (and a lone slow one elsewhere) fire nothing",
                      MESH, 40,
                      events=[("slow", "t0n1", 10, 12, "t0n3", 0),
                              ("slow", "t0n1", 13, 15, "t0n3", 0),
                              ("slow", "t0n4", 20, 21, "t0n0", 1)]))
    s.append(Scenario("path shape alerts: stalls, completion gaps, below baseline",
                      MESH, 150,
                      events=[("stall", "t0n0", 70, 100, "t0n1", 0),
                              ("gaps", "t0n2", 75, 105, "t0n3", 1),
                              ("below_baseline", "t0n4", 80, 110, "t0n3", 0)]))
    s.append(Scenario("capacity bursts far below the fleet's fire RdmaProbeCapacityLow",
                      MESH, 60, events=[("capacity", "t0n2", 10, 40, "", 1)]))
    # A failing path keeps the low figure of its last capacity burst (the exporter's gauge holds
    # it): only paths whose last probe succeeded count, or t0n1's median stays low.
    s.append(Scenario("capacity bursts that recover beside a failing path fire "
                      "RdmaProbeCapacityLow only while they are low",
                      Fleet(tors=1, per_tor=3, rails=1, mode="mesh"), 130,
                      [Fault("path", 35, 130, node="t0n1", rail=0, peer="t0n2")],
                      events=[("capacity", "t0n1", 10, 40, "", 0)]))
    s.append(Scenario("no exporter at all fires RdmaProbeExporterAbsent", MESH, 40,
                      events=[("targets_gone", "", 10, 25, "", -1)]))
    s.append(Scenario("a node nobody probes fires RdmaProbeNodeUnprobed", MESH, 90,
                      events=[("unprobed", "t0n4", 10, 70, "", -1)]))
    return s


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rules", required=True, help="the rules file under test")
    p.add_argument("-o", "--output", required=True, help="directory for the test files")
    args = p.parse_args()
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    rules = Path(args.rules).resolve()
    for i, sc in enumerate(scenarios()):
        (out / f"fleet-{i:02d}.yaml").write_text(render_test(sc, rules))
    print(f"fleet.py: {len(scenarios())} scenarios written to {out}")


if __name__ == "__main__":
    sys.exit(main())
