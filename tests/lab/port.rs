//! The `port` module on real kernel sysfs: `devices --json` and the exporter's port gauges on
//! rxe0, and the allowlisted counters rising across a loopback burst (read by `devices` around
//! it, and by the prober and the responder within it).

use serde_json::Value;

use crate::promtool;
use crate::support::{self, LabRun};

const BIN: &str = "target/release/rdma-probe-exporter";

fn rxe0_port(run: &LabRun, file: &str) -> Value {
    let text = run.file("node1", file);
    let v: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file} is not JSON ({e}):\n{text}"));
    let rxe0 = v
        .as_array()
        .and_then(|a| a.iter().find(|d| d["name"] == "rxe0"))
        .unwrap_or_else(|| panic!("no rxe0 in {file}:\n{text}"))
        .clone();
    rxe0["ports"][0].clone()
}

#[test]
fn port_facts_and_counters_on_rxe() {
    let run = support::run("port-facts", 1, "port-facts.sh", &[BIN.as_ref()], 400);
    run.assert_success();
    let steps = [
        "devices",
        "devices-text",
        "probe",
        "responder",
        "devices-after",
        "metrics",
        "exporter",
    ];
    let every_step_ok: Vec<(&str, &str)> = steps.iter().map(|step| (*step, "0")).collect();
    run.assert_exits("node1", "exits", &every_step_ok);
    let results = run.results("node1");

    // What sysfs says, as the kernel printed it in this boot: the rate file's rate.
    let before = rxe0_port(&run, "devices-before.json");
    let sysfs = &before["sysfs"];
    let rate_text = &results["rate"];
    assert_eq!(sysfs["rate"]["text"], rate_text.as_str(), "{sysfs}");
    let rate = sysfs["link_rate_bits_per_second"]
        .as_u64()
        .unwrap_or_else(|| panic!("no link rate: {sysfs}"));
    assert!(
        (1_000_000_000..=400_000_000_000).contains(&rate),
        "link rate {rate}: {sysfs}"
    );
    assert_eq!(sysfs["state"], "active", "{sysfs}");
    assert_eq!(sysfs["phys_state"], "link_up", "{sysfs}");
    assert_eq!(sysfs["link_layer"], "ethernet", "{sysfs}");
    assert_eq!(sysfs["netdev"]["name"], "eth0", "{sysfs}");
    // Verbs and sysfs agree on the port listed.
    assert_eq!(before["state"], "active", "{before}");
    assert!(
        before["gids"].as_array().is_some_and(|g| !g.is_empty()),
        "{before}"
    );
    let counters = &sysfs["counters"];
    for name in [
        "sent_pkts",
        "rcvd_pkts",
        "completer_retry_err",
        "retry_exceeded_err",
        "rcvd_seq_err",
        "duplicate_request",
        "link_downed",
        "netdev_tx_bytes",
    ] {
        assert!(counters[name].is_u64(), "{name} missing: {counters}");
    }
    assert!(counters.get("lifespan").is_none(), "{counters}");

    // A 200-message loopback burst of 16 KiB: at least one packet per message each way.
    let probe: Value = serde_json::from_str(&run.file("node1", "probe.json")).unwrap();
    assert_eq!(probe["messages"], 200, "{probe}");
    let after = rxe0_port(&run, "devices-after.json");
    let count = |port: &Value, name: &str| port["sysfs"]["counters"][name].as_u64().unwrap();
    let sent = count(&after, "sent_pkts") - count(&before, "sent_pkts");
    let received = count(&after, "rcvd_pkts") - count(&before, "rcvd_pkts");
    assert!(
        sent >= 200 && received >= 200,
        "sent {sent}, received {received}"
    );
    // The prober read the same counters around its burst: its own increases are in the outcome.
    let local = &probe["local_counters"];
    let probe_sent = local
        .as_array()
        .and_then(|l| l.iter().find(|c| c[0] == "sent_pkts"))
        .and_then(|c| c[1].as_u64())
        .unwrap_or_else(|| panic!("no sent_pkts in the probe's local counters: {probe}"));
    assert!(
        (200..=sent).contains(&probe_sent),
        "probe's sent_pkts +{probe_sent}, devices' +{sent}"
    );
    // The responder (the same rxe0 here) read its counters around the burst and returned them.
    let remote_received = probe["remote_counters"]
        .as_array()
        .and_then(|l| l.iter().find(|c| c[0] == "rcvd_pkts"))
        .and_then(|c| c[1].as_u64())
        .unwrap_or_else(|| panic!("no rcvd_pkts in the responder's counters: {probe}"));
    assert!(
        (200..=received).contains(&remote_received),
        "responder's rcvd_pkts +{remote_received}, devices' +{received}"
    );
    eprintln!(
        "rxe0: rate {rate_text:?} (netdev speed {}), {:.2} Gb/s; loopback burst of 200 x 16 KiB: \
         sent_pkts +{sent} (+{probe_sent} as the prober read them), rcvd_pkts +{received} \
         (+{remote_received} as the responder read them)",
        results["netdev_speed"],
        rate as f64 / 1e9
    );

    // The exporter's gauges, from the same sysfs.
    let metrics = run.file("node1", "metrics.txt");
    let labels = r#"{device="rxe0",port="1"}"#;
    assert_eq!(
        promtool::sample(&metrics, &format!("rdma_probe_port_up{labels}")),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        promtool::sample(
            &metrics,
            &format!("rdma_probe_port_rate_bytes_per_second{labels}")
        ),
        Some(rate as f64 / 8.0),
        "{metrics}"
    );
    assert_eq!(
        promtool::sample(&metrics, &format!("rdma_probe_port_phys_state_id{labels}")),
        Some(5.0),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"rdma_probe_port_info{device="rxe0",port="1",link_layer="ethernet",netdev="eth0""#
        ),
        "{metrics}"
    );
    promtool::assert_promtool_accepts(&metrics);
}
