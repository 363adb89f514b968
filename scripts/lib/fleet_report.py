"""The judging half of scripts/fleet-bench: which notifications each injected fault must cause,
which it did, and the report (docs/scale.md, "Fleet bench"). Standard library only; no
Prometheus needed (scripts/lib/test_fleet_report.py feeds it recorded notifications).

A notification is what Alertmanager's webhook sends (lab/tools/alert_receiver.py logs one per
line). Notifications of one group (the same `groupKey`: the route's group_by labels) are one
thing an operator is told about: resends and updates of a firing group are not counted again,
but a group that fires again after its resolved notification is counted twice (it paged twice).
Each such firing episode is matched to a fault by its labels (EXPECTED below) and, when several
faults match, to the latest one that had started when it fired and had not ended longer than a
grace ago (the time its alert may take to clear, and Alertmanager to send it); one that fired
later is late, a missed target.

Besides the faults' judging: the bench's test alerts (PIPELINE_ALERT: one per severity, sent
straight to Alertmanager, each to come out of its route's receiver once), the servers' own
figures that make a verdict trustworthy (no rule evaluation missed, every target up, every
notification delivered), and the alerts a run is too short to judge (their `for:` is longer than
what is left of it).
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

# The bench's own test alert: sent to Alertmanager, never by the rules.
PIPELINE_ALERT = "FleetBenchPipelineCheck"


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
    late: bool = False  # fired longer after its fault's end than the grace

    @property
    def pipeline(self):
        return self.labels.get("alertname") == PIPELINE_ALERT


@dataclass
class Notifications:
    episodes: list = field(default_factory=list)
    template_errors: list = field(default_factory=list)
    # Lines or bodies that are no notification Alertmanager sends (no `status` of firing or
    # resolved, or not JSON): each one is something an operator would not have been told.
    malformed: list = field(default_factory=list)
    ignored: int = 0  # received outside the run's window


def log_entries(lines, out):
    """The receiver's log entries in the order received; the lines that are none go to
    out.malformed."""
    entries = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            entry["received"] = float(entry["received"])
            if not isinstance(entry["body"], dict):
                raise TypeError("body")
        except (ValueError, KeyError, TypeError) as e:
            out.malformed.append(f"log line {n} is no receiver's entry ({e!r}): {line[:100]}")
            continue
        entries.append(entry)
    return sorted(entries, key=lambda e: e["received"])


def read_notifications(lines, start, end):
    """Episodes of the receiver's log lines (alert_receiver.py) received within [start, end]."""
    out = Notifications()
    open_by_group = {}
    for entry in log_entries(lines, out):
        if not start <= entry["received"] <= end:
            out.ignored += 1
            continue
        body = entry["body"]
        labels = body.get("commonLabels", {})
        if body.get("status") not in ("firing", "resolved"):
            # Neither opens nor closes an episode: counted as an error, not guessed at.
            out.malformed.append(f"{entry.get('receiver', '?')} at +{entry['received'] - start:.0f} s: "
                                 f"status {body.get('status')!r}, neither firing nor resolved: "
                                 f"{json.dumps(body)[:100]}")
            continue
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


def attribute(episodes, faults, grace):
    """Sets each episode's fault and expectation: the latest-started fault, started by the time
    the group fired and ended at most `grace` seconds before, one of whose expected alerts
    matches the group's labels. A group that only matches faults that ended longer ago is late:
    set to the latest-started of them, and marked so."""
    for ep in episodes:
        timely = late = None
        for f in faults:
            if f.start > ep.fired:
                continue
            for e in f.expected():
                if not e.matches(ep.labels):
                    continue
                if ep.fired <= f.end + grace:
                    if timely is None or f.start > timely[0].start:
                        timely = (f, e)
                elif late is None or f.start > late[0].start:
                    late = (f, e)
        if timely or late:
            ep.fault, ep.expect = timely or late
            ep.late = timely is None


def judge(faults, notifications, grace):
    """The report's verdicts: per fault, its episodes by expected alert; the unexplained ones.
    `grace`: how long after a fault's end its notification may still come (its alert clearing
    and Alertmanager's group_wait); one that comes later is late, not the one it must cause."""
    episodes = [ep for ep in notifications.episodes if not ep.pipeline]
    attribute(episodes, faults, grace)
    results = []
    for f in faults:
        mine = [ep for ep in episodes if ep.fault is f and not ep.late]
        late = [ep for ep in episodes if ep.fault is f and ep.late]
        problems = []
        for e in f.expected():
            n = sum(1 for ep in mine if ep.expect == e)
            if e.required and n != 1:
                problems.append(f"{e.alertname}: {n} notifications, want 1")
            elif not e.required and n > 1:
                problems.append(f"{e.alertname}: {n} notifications, want at most 1")
        for ep in late:
            problems.append(f"{ep.expect.alertname}: notified {ep.fired - f.end:.0f} s after the fault "
                            f"ended, more than the {grace:.0f} s it may take: late")
        first = min(mine, key=lambda ep: ep.fired) if mine else None
        results.append({
            "fault": f.describe(),
            "kind": f.kind,
            "start_unix": f.start,
            "end_unix": f.end,
            "expected": [e.describe() for e in f.expected()],
            "notifications": len(mine),
            "late_notifications": len(late),
            "grace_seconds": grace,
            "first_seconds": None if first is None else round(first.fired - f.start, 1),
            "resolved_notification_seconds": (
                None if first is None or first.resolved is None else round(first.resolved - f.end, 1)),
            "sent": [describe_episode(ep, f.start) for ep in mine + late],
            "problems": problems,
            "ok": not problems,
        })
    unexplained = [ep for ep in episodes if ep.fault is None]
    return results, unexplained


def state_at_end(fault, live_alerts):
    """"firing" or "pending" when Prometheus holds one of the fault's expected alerts so in its
    list of active alerts (/api/v1/alerts: the rule manager's own state), else None. Not judged
    from the last ALERTS sample: a rule group that takes longer than its interval writes ALERTS
    late, and a last sample older than an interval or two reads as cleared while it fires."""
    states = {a.get("state") for a in live_alerts
              if any(e.matches(a.get("labels") or {}) for e in fault.expected())}
    return next((s for s in ("firing", "pending") if s in states), None)


def pipeline_problems(notifications, severities, receivers):
    """The bench's test alerts (PIPELINE_ALERT, one of each severity, sent straight to
    Alertmanager): each must come out once, and every receiver (its webhook path) must have had
    one. Without them a clean run, which notifies nothing, would pass with a dead receiver."""
    checks = [ep for ep in notifications.episodes if ep.pipeline]
    out = []
    for severity in severities:
        n = sum(1 for ep in checks if ep.labels.get("severity") == severity)
        if n != 1:
            out.append(f"pipeline check: {n} notifications of the {severity} test alert, want 1")
    for receiver in sorted(set(receivers) - {ep.receiver for ep in checks}):
        out.append(f"pipeline check: receiver {receiver} got no test alert")
    return out


def metric_sum(text, name):
    """The sum of a metric's samples in a Prometheus text exposition (an Alertmanager's /metrics),
    over all their labels; None when it has none."""
    total = None
    for line in text.splitlines():
        if not line.startswith(name) or line[len(name):len(name) + 1] not in ("{", " "):
            continue
        rest = line[line.rindex("}") + 1:] if line[len(name)] == "{" else line[len(name):]
        total = (total or 0.0) + float(rest.split()[0])
    return total


def delivery_problems(delivery):
    """What made a notification fail to reach the receiver: the receiver gone, or Alertmanager's
    or Prometheus's own count of failed sends. `delivery`: receiver_answering (bool),
    alertmanager_notifications_failed (alertmanager_notifications_failed_total), and
    Prometheus's prometheus_notifications_{errors,dropped}_total and
    prometheus_notifications_alertmanagers_discovered."""
    out = []
    if not delivery.get("receiver_answering"):
        out.append("the webhook receiver was not answering at the end of the run")
    for key, what in (("alertmanager_notifications_failed", "Alertmanager's failed notifications"),
                      ("prometheus_notifications_errors", "Prometheus's errors sending alerts"),
                      ("prometheus_notifications_dropped", "Prometheus's alerts dropped")):
        n = delivery.get(key)
        if n is None:
            out.append(f"{what}: no figure")
        elif n > 0:
            out.append(f"{what}: {n:.0f} (target 0)")
    discovered = delivery.get("prometheus_alertmanagers_discovered")
    if discovered != 1:
        out.append(f"Prometheus sends to {fmt(discovered)} Alertmanagers, want 1")
    return out


def prometheus_problems(p):
    """Prometheus's own targets, without which the notifications judge rules that did not run
    as written: every rule healthy, no rule group evaluation missed (a group that falls behind
    fires late or not at all), and every target up at the start (`targets_up_seconds`, None
    when they never were)."""
    out = [f"rule {u}" for u in p["rules_unhealthy"]]
    missed = p.get("rule_group_iterations_missed")
    if missed is None:
        out.append("Prometheus: no figure of rule group evaluations missed")
    elif missed > 0:
        out.append(f"Prometheus missed {missed:.0f} rule group evaluations (target 0)")
    if p.get("targets_up_seconds") is None:
        count = lambda v: "-" if v is None else f"{v:.0f}"
        out.append(f"not every target was up {count(p.get('targets_up_wait_seconds'))} s after "
                   f"Prometheus started ({count(p.get('targets_up'))} of {count(p.get('targets'))} at the end)")
    return out


def unjudged_alerts(alert_for, since, at):
    """The alerts a condition that began after `since` could not have fired by `at`: their
    `for:` (alert_for: alertname -> seconds) is longer than what was left. A run judges them
    only before `since` (the bench passes the last fault's end, or with no fault Prometheus's
    start: then they could not fire at all)."""
    return sorted(({"alert": name, "for_seconds": s} for name, s in alert_for.items() if s > at - since),
                  key=lambda a: (-a["for_seconds"], a["alert"]))


def render_unjudged(unjudged, since, at, run_start):
    if not unjudged:
        return (f"alerts this run cannot judge: none (every `for:` fits in the {at - since:.0f} s "
                f"after +{since - run_start:.0f} s)")
    names = ", ".join(f"{a['alert']} ({a['for_seconds']:g} s)" for a in unjudged)
    return (f"alerts this run cannot judge after +{since - run_start:.0f} s (their `for:` is longer "
            f"than the {at - since:.0f} s left; a condition begun later could not fire them): {names}")


def describe_episode(ep, since):
    keys = ("node", "device", "peer_node", "tor", "rail", "instance")
    where = ",".join(f"{k}={ep.labels[k]}" for k in keys if ep.labels.get(k))
    resolved = "" if ep.resolved is None else f", resolved at +{ep.resolved - since:.0f} s"
    resolved += ", LATE" if ep.late else ""
    return (f"{ep.labels.get('alertname', '?')}{{component={ep.labels.get('component', '')},"
            f"severity={ep.labels.get('severity', '')},{where}}} at +{ep.fired - since:.0f} s"
            f"{resolved} ({ep.notifications} notification{'s' if ep.notifications > 1 else ''}, {ep.receiver})")


def verdict(results, unexplained, notifications, extra_problems=(), run_start=0.0):
    """Every target: the failures, empty when all were met."""
    fails = [f"{r['fault']}: {p}" for r in results for p in r["problems"]]
    fails += [f"unexplained: {describe_episode(ep, run_start)}" for ep in unexplained]
    fails += [f"template error: {t}" for t in notifications.template_errors]
    fails += [f"malformed notification: {m}" for m in notifications.malformed]
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
    out.append(f"malformed notifications: {len(notifications.malformed)} (target 0)")
    for m in notifications.malformed[:10]:
        out.append(f"  {m}")
    return "\n".join(out)
