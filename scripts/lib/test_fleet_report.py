"""Tests of scripts/fleet-bench's judging (fleet_report.py) on recorded notifications, without
Prometheus: `python3 -m unittest discover -s scripts/lib -p 'test_fleet_report.py'`, or
`scripts/fleet-bench --self-test`."""

import json
import unittest

import fleet_report as fr

TOR_OF = {"t0n1": "t0", "t0n7": "t0", "t1n3": "t1", "t2n5": "t2"}
START, END = 1000.0, 5000.0


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
    results, unexplained = fr.judge(faults, notifications)
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
        results, unexplained = fr.judge([fault(**PORT)], notifications)
        self.assertEqual(len(fr.verdict(results, unexplained, notifications)), 1)

    def test_the_report_renders(self):
        notifications = fr.read_notifications([line(1400, "firing", PORT_LABELS)], START, END)
        results, unexplained = fr.judge([fault(**PORT)], notifications)
        results[0]["path_interval_seconds"] = 20.0
        text = fr.render(results, unexplained, notifications, START)
        self.assertIn("port t1n3/mlx5_2 x0", text)
        self.assertIn("5.0", text)  # 100 s at 20 s a probe


if __name__ == "__main__":
    unittest.main()
