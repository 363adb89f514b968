"""Tests of scripts/fleet-bench's judging (fleet_report.py, and the bench's own collect, finish
and self-test) on recorded notifications and Prometheus answers, without Prometheus:
`python3 -m unittest discover -s scripts/lib -p 'test_fleet_report.py'`, or
`scripts/fleet-bench --self-test`."""

import importlib.machinery
import importlib.util
import json
import sys
import tempfile
import types
import unittest
from pathlib import Path

import fleet_report as fr

TOR_OF = {"t0n1": "t0", "t0n7": "t0", "t1n3": "t1", "t2n5": "t2"}
START, END = 1000.0, 5000.0
GRACE = 180.0  # the bench's at a 10 s interval: 15 intervals and a 30 s group_wait


def load_bench():
    """scripts/fleet-bench as a module (its name has no .py)."""
    path = Path(__file__).resolve().parent.parent / "fleet-bench"
    loader = importlib.machinery.SourceFileLoader("fleet_bench", str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("fleet_bench", loader))
    loader.exec_module(module)
    return module


bench = load_bench()


def fault(**entry):
    entry.setdefault("start_unix", 1300)
    entry.setdefault("end_unix", 1900)
    return fr.Fault.from_manifest(entry, TOR_OF)


PORT = dict(kind="port", node="t1n3", device="mlx5_2", fraction=0)
PORT_LABELS = {"alertname": "RdmaProbePortFailing", "component": "port", "severity": "warning",
               "node": "t1n3", "device": "mlx5_2", "peer_node": "t1n3", "peer_device": "mlx5_2",
               "job": "rdma-probe-exporter"}


def line(t, status, labels, group=None, annotation="fine", receiver="/warning"):
    """One line of lab/tools/alert_receiver.py's log."""
    group = group or json.dumps(sorted(labels.items()))
    return json.dumps({"received": t, "receiver": receiver, "body": {
        "status": status, "groupKey": group, "groupLabels": labels, "commonLabels": labels,
        "alerts": [{"status": status, "labels": labels,
                    "annotations": {"summary": annotation, "runbook_url": "https://x/r#a"}}]}})


def judge(faults, lines):
    notifications = fr.read_notifications(lines, START, END)
    results, unexplained = fr.judge(faults, notifications, GRACE)
    return results, unexplained, fr.verdict(results, unexplained, notifications)


class FleetReport(unittest.TestCase):
    def test_one_notification_naming_the_fault_passes(self):
        results, unexplained, fails = judge([fault(**PORT)], [
            line(1400, "firing", PORT_LABELS), line(2100, "resolved", PORT_LABELS)])
        self.assertEqual(fails, [])
        self.assertEqual(results[0]["notifications"], 1)
        self.assertEqual(results[0]["first_seconds"], 100)
        self.assertEqual(results[0]["resolved_notification_seconds"], 200)
        self.assertEqual(unexplained, [])

    def test_resends_of_a_firing_group_are_one_notification(self):
        _, _, fails = judge([fault(**PORT)], [
            line(1400, "firing", PORT_LABELS), line(1700, "firing", PORT_LABELS),
            line(2100, "resolved", PORT_LABELS)])
        self.assertEqual(fails, [])

    def test_a_group_that_fires_again_after_resolving_is_two(self):
        results, _, fails = judge([fault(**PORT)], [
            line(1400, "firing", PORT_LABELS), line(1600, "resolved", PORT_LABELS),
            line(1800, "firing", PORT_LABELS)])
        self.assertEqual(results[0]["notifications"], 2)
        self.assertEqual(len(fails), 1, fails)
        self.assertIn("2 notifications, want 1", fails[0])

    def test_two_groups_for_one_fault_fail(self):
        # The same alert twice under different group keys (e.g. another receiver).
        _, _, fails = judge([fault(**PORT)], [
            line(1400, "firing", PORT_LABELS, group="a"),
            line(1450, "firing", PORT_LABELS, group="b")])
        self.assertTrue(any("2 notifications" in f for f in fails), fails)

    def test_no_notification_fails(self):
        results, _, fails = judge([fault(**PORT)], [])
        self.assertEqual(results[0]["notifications"], 0)
        self.assertTrue(any("0 notifications, want 1" in f for f in fails), fails)

    def test_an_unexplained_notification_fails(self):
        path = {"alertname": "RdmaProbePathFailing", "component": "path", "severity": "warning",
                "node": "t0n1", "device": "mlx5_1", "peer_node": "t0n7", "peer_device": "mlx5_1",
                "tor": "t0", "rail": "1"}
        _, unexplained, fails = judge([fault(**PORT)], [
            line(1400, "firing", PORT_LABELS), line(1500, "firing", path)])
        self.assertEqual(len(unexplained), 1)
        self.assertEqual(len(fails), 1, fails)
        self.assertIn("unexplained", fails[0])
        # ... and in a clean run, any notification is unexplained.
        _, unexplained, fails = judge([], [line(1500, "firing", path)])
        self.assertEqual((len(unexplained), len(fails)), (1, 1))

    def test_a_wrong_component_or_location_fails(self):
        for key, value in [("component", "path"), ("device", "mlx5_3"), ("node", "t0n1"),
                           ("alertname", "RdmaProbePortDegraded"), ("severity", "critical")]:
            wrong = {**PORT_LABELS, key: value}
            _, unexplained, fails = judge([fault(**PORT)], [line(1400, "firing", wrong)])
            self.assertEqual(len(unexplained), 1, key)
            self.assertEqual(len(fails), 2, (key, fails))  # the fault's 0 and the unexplained one

    def test_a_notification_before_the_fault_is_not_its(self):
        _, unexplained, fails = judge([fault(**PORT)], [line(1200, "firing", PORT_LABELS)])
        self.assertEqual(len(unexplained), 1)
        self.assertEqual(len(fails), 2, fails)

    def test_notifications_outside_the_run_are_ignored(self):
        notifications = fr.read_notifications([line(START - 10, "firing", PORT_LABELS),
                                               line(END + 10, "firing", PORT_LABELS)], START, END)
        self.assertEqual((notifications.episodes, notifications.ignored), ([], 2))

    def test_each_kind_expects_its_alert(self):
        slow_port = fault(**{**PORT, "fraction": 0.4}).expected()
        self.assertEqual([e.alertname for e in slow_port], ["RdmaProbePortDegraded"])
        path = fault(kind="path", node="t0n1", device="mlx5_1", peer="t0n7", fraction=0).expected()
        self.assertEqual(path[0].alertname, "RdmaProbePathFailing")
        self.assertEqual(path[0].labels, {"node": "t0n1", "device": "mlx5_1", "peer_node": "t0n7",
                                          "peer_device": "mlx5_1", "tor": "t0", "rail": "1"})
        node = fault(kind="node", node="t2n5").expected()
        self.assertEqual((node[0].alertname, node[0].component, node[0].severity),
                         ("RdmaProbeNodeDown", "node", "warning"))
        tor = fault(kind="tor_uplink", tor="t1", rail=3, fraction=0).expected()
        self.assertEqual((tor[0].alertname, tor[0].labels), ("RdmaProbeTorUplinkDegraded",
                                                             {"tor": "t1", "rail": "3"}))
        with self.assertRaises(ValueError):
            fault(kind="no_such_kind", node="t0n1")

    def test_a_reboot_may_warn_once_but_never_pages(self):
        reboot = fault(kind="reboot", node="t2n5", start_unix=1300, end_unix=1340)
        node_down = {"alertname": "RdmaProbeNodeDown", "component": "node", "severity": "warning",
                     "node": "t2n5", "peer_node": "t2n5"}
        self.assertEqual(judge([reboot], [])[2], [])
        self.assertEqual(judge([reboot], [line(1350, "firing", node_down)])[2], [])
        page = {**node_down, "severity": "critical"}
        self.assertEqual(len(judge([reboot], [line(1350, "firing", page)])[2]), 1)

    def test_two_faults_at_once_in_different_places_each_get_theirs(self):
        node = fault(kind="node", node="t2n5")
        node_down = {"alertname": "RdmaProbeNodeDown", "component": "node", "severity": "warning",
                     "node": "t2n5", "peer_node": "t2n5"}
        results, _, fails = judge([fault(**PORT), node], [
            line(1400, "firing", PORT_LABELS), line(1420, "firing", node_down)])
        self.assertEqual(fails, [])
        self.assertEqual([r["notifications"] for r in results], [1, 1])

    def test_a_template_error_fails(self):
        notifications = fr.read_notifications(
            [line(1400, "firing", PORT_LABELS, annotation="<error expanding template: x>")],
            START, END)
        results, unexplained = fr.judge([fault(**PORT)], notifications, GRACE)
        self.assertEqual(len(fr.verdict(results, unexplained, notifications)), 1)

    def test_the_report_renders(self):
        notifications = fr.read_notifications([line(1400, "firing", PORT_LABELS)], START, END)
        results, unexplained = fr.judge([fault(**PORT)], notifications, GRACE)
        results[0]["path_interval_seconds"] = 20.0
        text = fr.render(results, unexplained, notifications, START)
        self.assertIn("port t1n3/mlx5_2 x0", text)
        self.assertIn("5.0", text)  # 100 s at 20 s a probe

    def test_a_notification_long_after_the_fault_ended_is_late_not_its_one(self):
        # The fault ended at 1900: within the grace its notification is on time...
        results, _, fails = judge([fault(**PORT)], [line(1900 + GRACE - 10, "firing", PORT_LABELS)])
        self.assertEqual(fails, [])
        # ... after it, late: a failure, and not the one notification the fault must cause.
        results, unexplained, fails = judge([fault(**PORT)], [line(1900 + GRACE + 600, "firing", PORT_LABELS)])
        self.assertEqual(unexplained, [])
        self.assertEqual((results[0]["notifications"], results[0]["late_notifications"]), (0, 1))
        self.assertTrue(any("0 notifications, want 1" in f for f in fails), fails)
        self.assertTrue(any("late" in f for f in fails), fails)
        self.assertIn("LATE", results[0]["sent"][0])

    def test_a_late_notification_goes_to_a_later_fault_in_the_same_place_that_started(self):
        first, again = fault(**PORT), fault(**PORT, start_unix=3000, end_unix=3600)
        results, _, fails = judge([first, again], [
            line(1400, "firing", PORT_LABELS), line(1600, "resolved", PORT_LABELS),
            line(3100, "firing", PORT_LABELS)])
        self.assertEqual(fails, [])
        self.assertEqual([r["notifications"] for r in results], [1, 1])

    def test_a_body_without_status_is_malformed_not_dropped(self):
        no_status = json.loads(line(1500, "firing", PORT_LABELS))
        del no_status["body"]["status"]
        results, _, fails = judge([], [json.dumps(no_status)])
        self.assertEqual(len(fails), 1, fails)
        self.assertIn("malformed notification", fails[0])
        self.assertIn("status None", fails[0])
        # Nor does it close the group it names: the fault still has its one notification.
        _, _, fails = judge([fault(**PORT)], [line(1400, "firing", PORT_LABELS), json.dumps(no_status),
                                              line(1700, "firing", PORT_LABELS)])
        self.assertEqual(len(fails), 1, fails)
        # A line that is no receiver's entry at all (the receiver's `unparsed` body included).
        unparsed = json.dumps({"received": 1500, "receiver": "/warning", "body": {"unparsed": "x"}})
        for bad in ["{not json", json.dumps({"body": {}}), unparsed]:
            notifications = fr.read_notifications([bad], START, END)
            self.assertEqual(len(notifications.malformed), 1, bad)
            self.assertIn("malformed notifications: 1 (target 0)", fr.render([], [], notifications, START))

    def test_the_state_at_the_end_is_prometheus_own_not_the_last_alerts_sample(self):
        f = fault(**PORT)
        live = lambda state, **labels: [{"labels": {**PORT_LABELS, **labels}, "state": state}]
        self.assertEqual(fr.state_at_end(f, live("firing")), "firing")
        self.assertEqual(fr.state_at_end(f, live("pending")), "pending")
        self.assertEqual(fr.state_at_end(f, live("pending") + live("firing")), "firing")
        self.assertIsNone(fr.state_at_end(f, live("firing", device="mlx5_3")))
        self.assertIsNone(fr.state_at_end(f, []))

    def test_missed_evaluations_and_targets_not_up_are_failures(self):
        healthy = dict(rules_unhealthy=[], rule_group_iterations_missed=0.0, targets_up_seconds=12.0)
        self.assertEqual(fr.prometheus_problems(healthy), [])
        missed = fr.prometheus_problems({**healthy, "rule_group_iterations_missed": 3.0})
        self.assertEqual(len(missed), 1)
        self.assertIn("missed 3 rule group evaluations", missed[0])
        self.assertEqual(len(fr.prometheus_problems({**healthy, "rule_group_iterations_missed": None})), 1)
        down = fr.prometheus_problems({**healthy, "targets_up_seconds": None, "targets_up_wait_seconds": 160,
                                       "targets_up": 60.0, "targets": 64.0})
        self.assertEqual(down, ["not every target was up 160 s after Prometheus started (60 of 64 at the end)"])

    def test_a_failed_delivery_or_a_receiver_gone_fails(self):
        ok = dict(receiver_answering=True, alertmanager_notifications_failed=0.0,
                  prometheus_notifications_errors=0.0, prometheus_notifications_dropped=0.0,
                  prometheus_alertmanagers_discovered=1.0)
        self.assertEqual(fr.delivery_problems(ok), [])
        for key, value in [("receiver_answering", False), ("alertmanager_notifications_failed", 2.0),
                           ("alertmanager_notifications_failed", None), ("prometheus_notifications_errors", 1.0),
                           ("prometheus_notifications_dropped", 5.0), ("prometheus_alertmanagers_discovered", 0.0)]:
            self.assertEqual(len(fr.delivery_problems({**ok, key: value})), 1, key)

    def test_the_test_alert_must_come_once_through_every_receiver(self):
        check = lambda severity, receiver, t=1100: line(
            t, "firing", {"alertname": fr.PIPELINE_ALERT, "severity": severity}, receiver=receiver)
        lines = [check("critical", "/critical"), check("warning", "/warning"), check("info", "/info")]
        notifications = fr.read_notifications(lines, START, END)
        severities, receivers = ("critical", "warning", "info"), ["/critical", "/info", "/warning"]
        self.assertEqual(fr.pipeline_problems(notifications, severities, receivers), [])
        # The test alert is no fault's and not unexplained.
        self.assertEqual(judge([], lines)[1], [])
        # None arrived (a dead receiver), one missing, one twice.
        self.assertEqual(len(fr.pipeline_problems(fr.read_notifications([], START, END), severities, receivers)), 6)
        missing = fr.read_notifications(lines[:2], START, END)
        self.assertEqual(fr.pipeline_problems(missing, severities, receivers),
                         ["pipeline check: 0 notifications of the info test alert, want 1",
                          "pipeline check: receiver /info got no test alert"])
        again = line(1200, "firing", {"alertname": fr.PIPELINE_ALERT, "severity": "info"}, group="another",
                     receiver="/info")
        twice = fr.read_notifications(lines + [again], START, END)
        self.assertEqual(len(fr.pipeline_problems(twice, severities, receivers)), 1)

    def test_a_metric_is_summed_over_its_labels_from_a_text_exposition(self):
        text = ('# HELP alertmanager_notifications_failed_total x\n'
                'alertmanager_notifications_failed_total{integration="webhook"} 2\n'
                'alertmanager_notifications_failed_total{integration="email",reason="a} b"} 1 1700000000\n'
                'alertmanager_notifications_failed_total_other 7\n'
                'alertmanager_notifications_total 5\n')
        self.assertEqual(fr.metric_sum(text, "alertmanager_notifications_failed_total"), 3.0)
        self.assertEqual(fr.metric_sum(text, "alertmanager_notifications_total"), 5.0)
        self.assertIsNone(fr.metric_sum(text, "alertmanager_alerts"))

    def test_the_alerts_a_run_is_too_short_to_judge_are_printed(self):
        # A printout, not a target: the alerts whose `for:` is longer than the run has left
        # after its last fault (the ci scenario's 5-minute ones) are named.
        alert_for = {"RdmaProbeNodeUnprobed": 300.0, "RdmaProbePortDown": 10.0, "RdmaProbePcieLinkDegraded": 100.0}
        unjudged = fr.unjudged_alerts(alert_for, since=1380.0, at=1475.0)
        self.assertEqual([a["alert"] for a in unjudged], ["RdmaProbeNodeUnprobed", "RdmaProbePcieLinkDegraded"])
        text = fr.render_unjudged(unjudged, 1380.0, 1475.0, START)
        self.assertIn("after +380 s", text)
        self.assertIn("RdmaProbeNodeUnprobed (300 s)", text)
        self.assertEqual(fr.unjudged_alerts(alert_for, since=1000.0, at=4600.0), [])
        self.assertIn("none", fr.render_unjudged([], 1000.0, 4600.0, START))


class FakeProm(bench.Prom):
    """Prometheus's answers for the bench's collect: ALERTS samples of the port fault's alert
    until `last_sample`, and /api/v1/alerts as given."""

    def __init__(self, last_sample, live):
        super().__init__(0)
        self.last_sample, self.live = last_sample, live

    def query(self, expr, at=None):
        if expr.startswith("ALERTS{") and 'node="t1n3"' in expr:
            return [{"metric": {}, "values": [[t, "1"] for t in range(1400, int(self.last_sample) + 1, 10)]}]
        return []

    def get(self, path, **params):
        return {"/api/v1/alerts": {"alerts": self.live}, "/api/v1/rules": {"groups": []}}[path]


def healthy_report(faults=(), **prometheus):
    """What collect and the delivery figures give for a run that met every target."""
    p = dict(head_series=1.0, head_series_max=1.0, peak_rss_bytes=2.0**20, targets_up=64.0, targets=64.0,
             samples_per_scrape=1.0, scrape_seconds_max=0.1, rule_group_max_seconds={"g": 0.5},
             rule_group_iterations_missed=0.0, costliest_rules=[], rules=1, rules_unhealthy=[],
             alert_for={"RdmaProbePortFailing": 20.0}, targets_up_seconds=12.0, targets_up_wait_seconds=160)
    p.update(prometheus)
    delivery = dict(receiver_answering=True, alertmanager_notifications=3.0, alertmanager_notifications_failed=0.0,
                    prometheus_notifications_errors=0.0, prometheus_notifications_dropped=0.0,
                    prometheus_alertmanagers_discovered=1.0)
    per_fault = [dict(path_interval_seconds=20.0, path_interval_max_seconds=20.0, affected_paths=1,
                      alert_seconds=80.0, resolved_in_prometheus_seconds=30.0, state_at_end=None) for _ in faults]
    return {"faults": list(faults), "per_fault": per_fault, "prometheus": p, "delivery": delivery,
            "nodes": 64, "manifest": {}, "collected_unix": 4900.0, "prometheus_start_unix": START + 20,
            "versions": {"prometheus": "prometheus 2", "alertmanager": "alertmanager 0"}}


ARGS = types.SimpleNamespace(scenario="clean", at_once=False, rails=8, per_tor=16, interval="10s", seed=1)
AM = {"group_wait": 30, "group_interval": 300, "receivers": ["/critical", "/info", "/warning"]}
TEST_ALERTS = [line(1040, "firing", {"alertname": fr.PIPELINE_ALERT, "severity": s}, receiver=f"/{s}")
               for s in ("critical", "warning", "info")]


def finish(report, lines):
    return bench.finish(report, lines, START, END, ARGS, START, 10.0, AM)


class Bench(unittest.TestCase):
    """The bench's collect and finish on recorded answers; its self-test's count."""

    def test_a_clean_run_that_met_every_target_passes(self):
        report = healthy_report()
        self.assertEqual(finish(report, TEST_ALERTS), [])
        self.assertIn("all targets met", report["text"])

    def test_a_clean_run_with_a_dead_receiver_fails(self):
        # Nothing was notified: no test alert came through, and the receiver did not answer.
        report = healthy_report()
        report["delivery"]["receiver_answering"] = False
        fails = finish(report, [])
        self.assertIn("the webhook receiver was not answering at the end of the run", fails)
        self.assertIn("pipeline check: 0 notifications of the warning test alert, want 1", fails)
        self.assertNotIn("all targets met", report["text"])
        # Alertmanager's own count of failed sends fails a run too.
        report = healthy_report()
        report["delivery"]["alertmanager_notifications_failed"] = 4.0
        self.assertEqual(finish(report, TEST_ALERTS), ["Alertmanager's failed notifications: 4 (target 0)"])

    def test_missed_evaluations_and_targets_never_up_fail_the_run(self):
        fails = finish(healthy_report(rule_group_iterations_missed=34.0, targets_up_seconds=None), TEST_ALERTS)
        self.assertEqual(len(fails), 2, fails)
        self.assertIn("missed 34 rule group evaluations", fails[0])
        self.assertIn("not every target was up", fails[1])

    def test_a_fault_still_firing_behind_a_lagging_rule_group_is_not_cleared(self):
        # At the end (4900) the group's last ALERTS sample is 100 s old (an evaluation taking
        # ten intervals), and Prometheus still holds the alert firing.
        manifest = {"nodes": [{"node": "t1n3", "tor": "t1", "address": "127.0.0.1:1"}],
                    "faults": [dict(PORT, start_unix=1300, end_unix=1900)]}
        live = [{"labels": PORT_LABELS, "state": "firing"}]
        with tempfile.TemporaryDirectory() as d:
            report = bench.collect(FakeProm(4800, live), manifest, Path(d), START, 4900.0, 10.0)
        self.assertEqual(report["per_fault"][0]["state_at_end"], "firing")
        self.assertIsNone(report["per_fault"][0]["resolved_in_prometheus_seconds"])
        # The rest as a run that met its targets.
        report["prometheus"].update(rule_group_iterations_missed=0.0, targets_up_seconds=12.0,
                                    targets_up_wait_seconds=160)
        report.update(delivery=healthy_report()["delivery"], versions=healthy_report()["versions"])
        fails = finish(report, TEST_ALERTS + [line(1400, "firing", PORT_LABELS)])
        self.assertEqual(fails, ["port t1n3/mlx5_2 x0: its alert was still firing at the end of the run"])

    def test_the_self_test_fails_without_its_tests(self):
        with tempfile.TemporaryDirectory() as d:
            suite, short = bench.self_tests(Path(d), {"test_fb_probe_none.py": 1})
            self.assertEqual(suite.countTestCases(), 0)
            self.assertEqual(len(short), 1)
            (Path(d) / "test_fb_probe_one.py").write_text(
                "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        pass\n")
            suite, short = bench.self_tests(Path(d), {"test_fb_probe_one.py": 2})
            self.assertEqual((suite.countTestCases(), len(short)), (1, 1))
            self.assertIn("1 tests, want at least 2", short[0])
            suite, short = bench.self_tests(Path(d), {"test_fb_probe_one.py": 1})
            self.assertEqual((suite.countTestCases(), short), (1, []))
        sys.modules.pop("test_fb_probe_one", None)  # imported from a folder now gone


if __name__ == "__main__":
    unittest.main()
