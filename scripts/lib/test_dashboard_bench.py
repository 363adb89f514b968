"""Tests of scripts/fleet-bench --dashboards' logic (dashboard_bench.py), without Prometheus:
`scripts/fleet-bench --self-test`, or `python3 -m unittest discover -s scripts/lib -p
'test_dashboard_bench.py'`."""

import unittest

import dashboard_bench as db


def run(panel, instant=False, data=1, seconds=(0.01,), error=None, dashboard="fleet-overview.json",
        expr="rdma_probe_success"):
    return {"dashboard": dashboard, "panel": panel, "where": f"{dashboard}: panel {panel} (query A)",
            "expr": expr, "instant": instant, "instant_seconds": list(seconds), "range_seconds": list(seconds),
            "instant_series": data, "range_series": data,
            "error": error}


class DashboardBenchTest(unittest.TestCase):
    def test_the_step_is_the_scrape_interval_for_a_wide_panel_and_grows_for_a_narrow_one(self):
        self.assertEqual(db.step_seconds(12, 10), 10)
        # 30 min over a 3-column panel's 240 points: 7.5 s, rounded up, above a 5 s scrape interval.
        self.assertEqual(db.step_seconds(3, 5), 8)
        self.assertEqual(db.step_seconds(24, 1), 1)

    def test_the_rate_interval_is_four_scrapes_or_the_step_plus_one(self):
        self.assertEqual(db.builtins(10, 10)["__rate_interval"], "40s")
        self.assertEqual(db.builtins(60, 10)["__rate_interval"], "70s")
        self.assertEqual(db.builtins(10, 10)["__interval"], "10s")

    def test_the_drilldown_opens_on_the_worst_node_and_tor_pair_the_others_on_all(self):
        s = db.settings("j", {"node": "t0n1:9", "tor": "t3", "peer_tor": "t1",
                              "tor_nodes": "(t3n0|t3n1)", "peer_tor_nodes": "(t1n0)"})
        self.assertEqual(s["fleet-overview.json"], ["job=j"])
        self.assertEqual(s["exporter-health.json"], ["job=j"])
        self.assertEqual(s["path-drilldown.json"], ["job=j", "node=t0n1:9", "tor=t3", "peer_tor=t1",
                                                    "tor_nodes=(t3n0|t3n1)", "peer_tor_nodes=(t1n0)"])
        # A fleet without ToR pairs keeps the drilldown's ToR variables at their default.
        self.assertEqual(db.settings("j", {"node": "n", "tor": None})["path-drilldown.json"], ["job=j", "node=n"])

    def test_percentile_by_nearest_rank(self):
        values = [i / 100 for i in range(1, 101)]
        self.assertEqual(db.percentile(values, 99), 0.99)
        self.assertEqual(db.percentile(values, 50), 0.5)
        self.assertEqual(db.percentile([3.0], 99), 3.0)
        # Nearest rank rounds up: the p99 of ten runs is the slowest.
        self.assertEqual(db.percentile([float(i) for i in range(1, 11)], 99), 10.0)
        self.assertIsNone(db.percentile([], 99))

    def test_a_panel_has_data_only_when_every_query_has_in_the_mode_it_runs(self):
        s = db.summarize([run("1 A"), run("2 B", data=0), run("2 B"),
                          run("3 T", instant=True, data=4)])
        by = {p["panel"]: p for p in s["panels"]}
        self.assertTrue(by["1 A"]["data"])
        self.assertFalse(by["2 B"]["data"])
        self.assertEqual(by["2 B"]["queries"], 2)
        self.assertTrue(by["3 T"]["data"])
        self.assertEqual(s["panels_without_data"], ["fleet-overview.json: 2 B"])
        # A table (instant) with no range data still has data.
        t = run("4 T", instant=True, data=1)
        t["range_series"] = 0
        self.assertTrue(db.summarize([t])["panels"][0]["data"])

    def test_p99_is_over_the_runs_in_the_panels_own_mode_and_judges_the_target(self):
        fast = [run(f"{i} P", seconds=(0.05, 0.05)) for i in range(60)]
        s = db.summarize(fast)
        self.assertEqual(s["runs"], 240)
        self.assertEqual(s["p99_seconds"], 0.05)
        self.assertTrue(s["met"])
        self.assertEqual(db.problems(s), [])
        # Three slow runs in 123 of the panels' own mode put the p99 above the target.
        slow = fast + [run("99 Slow", seconds=(1.5,)) for _ in range(3)]
        s = db.summarize(slow)
        self.assertGreaterEqual(s["p99_seconds"], 1.0)
        self.assertFalse(s["met"])
        self.assertEqual(len(db.problems(s)), 1)
        self.assertIn("p99", db.problems(s)[0])
        self.assertEqual(max(p["max_seconds"] for p in s["panels"]), 1.5)

    def test_a_table_slow_only_as_a_range_query_counts_in_both_modes_not_in_the_target(self):
        fast = [run(f"{i} P", seconds=(0.05,)) for i in range(60)]
        table = run("70 T", instant=True, data=3, seconds=(0.05,))
        table["range_seconds"] = [2.0, 2.0]
        s = db.summarize(fast + [table])
        self.assertEqual(s["p99_seconds"], 0.05)
        self.assertTrue(s["met"])
        self.assertEqual(s["p99_seconds_any_mode"], 2.0)
        self.assertEqual(s["max_seconds_any_mode"], 2.0)
        by = {p["panel"]: p for p in s["panels"]}
        self.assertEqual(by["70 T"]["max_seconds"], 0.05)
        self.assertEqual(by["70 T"]["max_seconds_any_mode"], 2.0)

    def test_an_error_is_a_problem_and_no_data(self):
        s = db.summarize([run("1 A"), run("2 E", error="parse error")])
        self.assertFalse(s["met"])
        self.assertEqual(db.problems(s), ["fleet-overview.json: panel 2 E (query A): parse error"])
        self.assertIn("fleet-overview.json: 2 E", s["panels_without_data"])

    def test_a_ping_panel_without_data_has_no_pings_to_show_in_a_fleet_without_pings(self):
        ping = "path:rdma_probe_ping_loss_ratio:worst"
        runs = [run("1 A"), run("2 P", data=0, expr=ping), run("3 Q", data=0, expr="rdma_probe_ping_rtt_seconds"),
                run("3 Q", data=0, expr="rdma_probe_success")]
        s = db.summarize(runs, pings=False)
        by = {p["panel"]: p for p in s["panels"]}
        self.assertTrue(by["2 P"]["data"])
        self.assertEqual(s["panels_without_pings"], ["fleet-overview.json: 2 P"])
        # A panel with another query without data has none, pings or not.
        self.assertEqual(s["panels_without_data"], ["fleet-overview.json: 3 Q"])
        self.assertTrue(s["met"])
        text = db.render(s)
        self.assertIn("no pings in the emulated fleet: fleet-overview.json: panel 2 P (query A)", text)
        self.assertIn("panels of pings without data, no pings in the emulated fleet: 1", text)
        # Where the fleet pings, an empty ping query is a panel without data like any other.
        s = db.summarize(runs)
        self.assertEqual(s["panels_without_data"], ["fleet-overview.json: 2 P", "fleet-overview.json: 3 Q"])
        self.assertEqual(s["panels_without_pings"], [])

    def test_nothing_run_is_a_problem(self):
        self.assertEqual(db.problems(db.summarize([])), ["dashboards: no query ran"])

    def test_the_report_renders(self):
        text = db.render(db.summarize([run("1 A", seconds=(0.2,)), run("2 B", data=0)]))
        self.assertIn("p99 200 ms", text)
        self.assertIn("both modes: p99 200 ms", text)
        self.assertIn("no data: fleet-overview.json: panel 2 B (query A)", text)
        self.assertIn("NO", text)

    def test_empty_runs_are_left_out_of_the_latency_figures(self):
        # One slow panel among a hundred whose selectors match nothing (milliseconds each):
        # counted, the empty runs would put the p99 at 2 ms and the target met.
        empty = [run(f"{i} E", data=0, seconds=(0.002,)) for i in range(100)]
        data = [run("200 A", seconds=(0.05,)), run("201 B", seconds=(1.5,))]
        s = db.summarize(empty + data)
        self.assertEqual(s["p99_seconds"], 1.5)
        self.assertEqual(s["p50_seconds"], 0.05)
        self.assertEqual(s["p99_seconds_any_mode"], 1.5)
        self.assertFalse(s["met"])
        self.assertIn("p99", db.problems(s)[0])
        # Reported apart, and in full.
        self.assertEqual((s["empty_runs"], s["p99_seconds_empty"], s["runs"]), (100, 0.002, 204))
        text = db.render(s)
        self.assertIn("runs left out, as the panels run them, for returning no series: 100 (p99 2 ms)", text)
        self.assertIn("over the runs that returned data", text)

    def test_no_query_with_data_is_a_problem_not_a_met_target(self):
        s = db.summarize([run("1 E", data=0), run("2 E", data=0)])
        self.assertIsNone(s["p99_seconds"])
        self.assertFalse(s["met"])
        self.assertEqual(db.problems(s), ["dashboards: no query returned data: the latency target judges nothing"])

    def test_an_empty_query_whose_every_series_exists_fails(self):
        where = "fleet-overview.json: panel 2 J (query A)"
        joined = dict(run("2 J", data=0), missing_series=[])
        s = db.summarize([run("1 A"), joined])
        self.assertEqual(s["empty_with_series"], [where])
        self.assertFalse(s["met"])
        self.assertEqual(db.problems(s), [f"{where}: no data, though every series it reads exists"])
        self.assertIn(f"FAIL no data, though every series it reads exists: {where}", db.render(s))
        # A series the fleet does not have explains it (named), as does not checking at all.
        absent = dict(run("2 J", data=0), missing_series=['x{kind="capacity"}'])
        s = db.summarize([run("1 A"), absent])
        self.assertEqual((s["empty_with_series"], db.problems(s)), ([], []))
        self.assertIn(f'no data: {where} (no series x{{kind="capacity"}})', db.render(s))
        self.assertEqual(db.problems(db.summarize([run("1 A"), run("2 J", data=0)])), [])

    def test_the_selectors_a_query_reads(self):
        self.assertEqual(db.selectors('sum by (instance, reason) (rate(x_total{job="j", a=~"}[("}[5m])) * 60'),
                         ['x_total{job="j", a=~"}[("}[5m]'])
        self.assertEqual(db.selectors('bottomk(25, a{d=~".*"} / on(job, device) group_left() max by (job) (a))'),
                         ['a{d=~".*"}', "a"])
        self.assertEqual(db.selectors("count(path:x:slow{j=\"1\"}) or vector(0)"), ['path:x:slow{j="1"}'])
        self.assertEqual(db.selectors('time() - y offset 5m > bool 1e3 unless ignoring(q) {__name__="z"}'),
                         ["y", '{__name__="z"}'])
        self.assertEqual(db.selectors('label_replace(w, "dst", "$1", "src", "(.*)")'), ["w"])

    def test_a_range_selector_is_present_with_two_samples_an_instant_one_with_one_series(self):
        self.assertEqual(db.presence_query('x{a="b"}'), 'count(x{a="b"})')
        self.assertEqual(db.presence_query('x{a="b"}[5m]'), 'count(count_over_time(x{a="b"}[5m]) >= 2)')


if __name__ == "__main__":
    unittest.main()
