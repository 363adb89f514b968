"""The judging half of scripts/fleet-bench: which notifications each injected fault must cause,
which it did, and the report (docs/scale.md, "Fleet bench"). Standard library only; no
Prometheus needed (scripts/lib/test_fleet_report.py feeds it recorded notifications).

A notification is what Alertmanager's webhook sends (lab/tools/alert_receiver.py logs one per
line). Notifications of one group (the same `groupKey`: the route's group_by labels) are one
thing an operator is told about: resends and updates of a firing group are not counted again,
but a group that fires again after its resolved notification is counted twice (it paged twice).
Each such firing episode is matched to a fault by its labels (EXPECTED below) and, when several
faults match, to the latest one that had started when it fired.
"""

import json
from dataclasses import dataclass, field

# What each fault kind of the fleet emulator (examples/fleet/) must be notified as, from
# deploy/prometheus/rules.template.yaml and fault_alerts() of deploy/prometheus/tests/fleet.py.
# Each entry: (alertname, component, severity, location labels taken from the fault, required).
# A required alert must be notified exactly once; an optional one at most once; anything else
# is unexplained. `fraction` 0 means probes fail, above 0 that they reach that share of their pace.
EXPECTED = {
    "path": lambda f: [("RdmaProbePathFailing" if f.fraction == 0 else "RdmaProbePathDegraded",
                        "path", "warning",
                        dict(node=f.node, device=f.device, peer_node=f.peer,
                             peer_device=f.device, tor=f.node_tor, rail=f.device_rail), True)],
    "port": lambda f: [("RdmaProbePortFailing" if f.fraction == 0 else "RdmaProbePortDegraded",
                        "port", "warning", f.port_labels(), True)],
    "port_down": lambda f: [("RdmaProbePortDown", "port", "warning", f.port_labels(), True)],
    # Powered off: the node alert, a warning (node monitoring owns it), nothing of its ports,
    # paths or exporter (the rules and inhibitions hold them back).
    "node": lambda f: [("RdmaProbeNodeDown", "node", "warning",
                        dict(node=f.node, peer_node=f.node), True)],
    # A reboot shorter than detection: nothing pages; a warning that the node or its exporter is
    # down may come, once.
    "reboot": lambda f: [
        ("RdmaProbeNodeDown", "node", "warning", dict(node=f.node, peer_node=f.node), False),
        ("RdmaProbeExporterDown", "exporter", "warning", dict(instance=f.instance), False)],
    "tor_uplink": lambda f: [("RdmaProbeTorUplinkDegraded", "tor_uplink", "warning",
                              dict(tor=f.tor, rail=f.rail), True)],
    # Port facts: the link trained narrower or slower than the fleet's median for the device.
    "port_width": lambda f: [("RdmaProbePortLinkBelowFleet", "port", "warning",
                              dict(node=f.node, device=f.device), True)],
    "port_speed": lambda f: [("RdmaProbePortLinkBelowFleet", "port", "warning",
                              dict(node=f.node, device=f.device), True)],
    "pcie": lambda f: [("RdmaProbePcieLinkDegraded", "port", "warning",
                        dict(node=f.node, device=f.device), True)],
}

# What an operator reads in a notification must not carry a template error.
TEMPLATE_ERRORS = ("error expanding", "<error")


@dataclass
class Fault:
    """One fault of the emulator's manifest (fleet.json `faults`)."""
    kind: str
    start: float
    end: float
    node: str = ""
    device: str = ""
    peer: str = ""
    tor: str = ""
    rail: str = ""
    fraction: float = 0.0
    node_tor: str = ""  # the ToR of `node` (from the manifest's node list)
    instance: str = ""  # the `instance` label of `node`'s scrape target

    @classmethod
    def from_manifest(cls, entry, tor_of, instance_of=None):
        f = cls(kind=entry["kind"], start=float(entry["start_unix"]), end=float(entry["end_unix"]),
                node=entry.get("node", ""), device=entry.get("device", ""),
                peer=entry.get("peer", ""), tor=entry.get("tor", ""),
                rail="" if entry.get("rail") is None else str(entry["rail"]),
                fraction=float(entry.get("fraction", 0.0)))
        f.node_tor = tor_of.get(f.node, "")
        f.instance = (instance_of or {}).get(f.node, f.node)
        if f.kind not in EXPECTED:
            raise ValueError(f"fault kind {f.kind!r} has no expectation in EXPECTED")
        return f

    @property
    def device_rail(self):
        """Device mlx5_R is on rail R (the emulator's layout)."""
        return self.device.rpartition("_")[2]

    def port_labels(self):
        # Port alerts carry peer_node/peer_device equal to their node/device (for the
        # Alertmanager inhibitions).
        return dict(node=self.node, device=self.device, peer_node=self.node, peer_device=self.device)

    def expected(self):
        return [Expect(*e) for e in EXPECTED[self.kind](self)]

    def describe(self):
        where = {
            "path": f"{self.node}/{self.device}->{self.peer}",
            "tor_uplink": f"{self.tor} rail {self.rail}",
        }.get(self.kind, f"{self.node}/{self.device}" if self.device else self.node)
        slow = f" x{self.fraction:g}" if self.kind in ("path", "port", "tor_uplink") else ""
        return f"{self.kind} {where}{slow}"


@dataclass(frozen=True)
class Expect:
    alertname: str
    component: str
    severity: str
    labels: dict
    required: bool

    def matches(self, labels):
        want = {"alertname": self.alertname, "component": self.component,
                "severity": self.severity, **self.labels}
        return all(labels.get(k) == v for k, v in want.items())

    def describe(self):
        where = ",".join(f"{k}={v}" for k, v in self.labels.items()
                         if k not in ("peer_device",) and not (k == "peer_node" and v == self.labels.get("node")))
        return f"{self.alertname}{{{where}}}" + ("" if self.required else "?")


@dataclass
class Episode:
    """A group firing until its resolved notification (or the end of the run)."""
    group: str
    labels: dict  # the notification's common labels
    receiver: str
    fired: float
    resolved: float = None
    notifications: int = 1
    fault: object = None
    expect: object = None


@dataclass
class Notifications:
    episodes: list = field(default_factory=list)
    template_errors: list = field(default_factory=list)
    ignored: int = 0  # received outside the run's window


def read_notifications(lines, start, end):
    """Episodes of the receiver's log lines (alert_receiver.py) received within [start, end]."""
    out = Notifications()
    open_by_group = {}
    entries = sorted((json.loads(line) for line in lines if line.strip()),
                     key=lambda e: e["received"])
    for entry in entries:
        if not start <= entry["received"] <= end:
            out.ignored += 1
            continue
        body = entry["body"]
        labels = body.get("commonLabels", {})
        for alert in body.get("alerts", []):
            for key, text in (alert.get("annotations") or {}).items():
                if any(e in str(text) for e in TEMPLATE_ERRORS) or (
                        key.endswith("_url") and not str(text).startswith("http")):
                    out.template_errors.append(f"{labels.get('alertname')}: {key}: {text}")
        group = body.get("groupKey") or json.dumps(
            [entry.get("receiver"), body.get("groupLabels", {})], sort_keys=True)
        episode = open_by_group.get(group)
        if body.get("status") == "firing":
            if episode is None:
                episode = Episode(group, labels, entry.get("receiver", ""), entry["received"])
                open_by_group[group] = episode
                out.episodes.append(episode)
            else:
                episode.notifications += 1
        elif episode is not None:
            episode.resolved = entry["received"]
            episode.notifications += 1
            del open_by_group[group]
    return out


def attribute(episodes, faults):
    """Sets each episode's fault and expectation: the latest-started fault, started by the time
    the group fired, one of whose expected alerts matches the group's labels."""
    for ep in episodes:
        best = None
        for f in faults:
            if f.start > ep.fired:
                continue
            for e in f.expected():
                if e.matches(ep.labels) and (best is None or f.start > best[0].start):
                    best = (f, e)
        if best:
            ep.fault, ep.expect = best


def judge(faults, notifications):
    """The report's verdicts: per fault, its episodes by expected alert; the unexplained ones."""
    attribute(notifications.episodes, faults)
    results = []
    for f in faults:
        mine = [ep for ep in notifications.episodes if ep.fault is f]
        problems = []
        for e in f.expected():
            n = sum(1 for ep in mine if ep.expect == e)
            if e.required and n != 1:
                problems.append(f"{e.alertname}: {n} notifications, want 1")
            elif not e.required and n > 1:
                problems.append(f"{e.alertname}: {n} notifications, want at most 1")
        first = min(mine, key=lambda ep: ep.fired) if mine else None
        results.append({
            "fault": f.describe(),
            "kind": f.kind,
            "start_unix": f.start,
            "end_unix": f.end,
            "expected": [e.describe() for e in f.expected()],
            "notifications": len(mine),
            "first_seconds": None if first is None else round(first.fired - f.start, 1),
            "resolved_notification_seconds": (
                None if first is None or first.resolved is None else round(first.resolved - f.end, 1)),
            "sent": [describe_episode(ep, f.start) for ep in mine],
            "problems": problems,
            "ok": not problems,
        })
    unexplained = [ep for ep in notifications.episodes if ep.fault is None]
    return results, unexplained


def describe_episode(ep, since):
    keys = ("node", "device", "peer_node", "tor", "rail", "instance")
    where = ",".join(f"{k}={ep.labels[k]}" for k in keys if ep.labels.get(k))
    resolved = "" if ep.resolved is None else f", resolved at +{ep.resolved - since:.0f} s"
    return (f"{ep.labels.get('alertname', '?')}{{component={ep.labels.get('component', '')},"
            f"severity={ep.labels.get('severity', '')},{where}}} at +{ep.fired - since:.0f} s"
            f"{resolved} ({ep.notifications} notification{'s' if ep.notifications > 1 else ''}, {ep.receiver})")


def verdict(results, unexplained, notifications, extra_problems=(), run_start=0.0):
    """Every target: the failures, empty when all were met."""
    fails = [f"{r['fault']}: {p}" for r in results for p in r["problems"]]
    fails += [f"unexplained: {describe_episode(ep, run_start)}" for ep in unexplained]
    fails += [f"template error: {t}" for t in notifications.template_errors]
    fails += list(extra_problems)
    return fails


def fmt(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.1f}{unit}" if abs(v) < 100 else f"{v:.0f}{unit}"
    return f"{v}{unit}"


def table(header, rows):
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def render(results, unexplained, notifications, run_start):
    """The text report of the notifications (the bench appends Prometheus's figures)."""
    out = []
    if results:
        rows = []
        for r in results:
            interval = r.get("path_interval_seconds")
            probes = (None if r["first_seconds"] is None or not interval
                      else r["first_seconds"] / interval)
            rows.append([
                r["fault"],
                f"{r['start_unix'] - run_start:.0f}-{r['end_unix'] - run_start:.0f}",
                " ".join(r["expected"]),
                r["notifications"],
                fmt(r["first_seconds"]),
                fmt(probes),
                fmt(interval),
                fmt(r.get("resolved_in_prometheus_seconds")),
                fmt(r["resolved_notification_seconds"]),
                "ok" if r["ok"] else "FAIL",
            ])
        out.append(table(["fault", "at s", "expected", "sent", "first s", "probes", "interval s",
                          "resolved s", "resolved notif s", ""], rows))
        for r in results:
            for s in r["sent"]:
                out.append(f"  {r['fault']}: {s}")
            for p in r["problems"]:
                out.append(f"  {r['fault']}: FAIL {p}")
    else:
        out.append("no fault injected")
    out.append(f"unexplained notifications: {len(unexplained)} (target 0)")
    for ep in unexplained:
        out.append(f"  {describe_episode(ep, run_start)}")
    out.append(f"notifications with template errors: {len(notifications.template_errors)} (target 0)")
    for t in notifications.template_errors[:10]:
        out.append(f"  {t}")
    return "\n".join(out)
