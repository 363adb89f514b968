//! UD pings between two lab nodes (lab/scenarios/ud-ping.sh, examples/ud_ping.rs): the verbs
//! module's UD QPs and address handles carry the ping module's packets both ways, and what the
//! path accounting makes of them follows the link: a clean link answers every ping, `netem delay
//! 3ms` on the prober's NIC adds 3 ms (± 1 ms) to the median RTT, `netem loss 5%` loses 2-10% of
//! the pings.

use std::path::Path;

use serde_json::Value;

use crate::support;

const TOOL: &str = "target/release/examples/ud_ping";

#[test]
fn ud_pings_measure_the_rtt_and_loss_of_the_link() {
    let run = support::run("ud-ping", 2, "ud-ping.sh", &[Path::new(TOOL)], 300);
    run.assert_success();
    let node1 = run.results("node1");
    eprintln!("node1: {node1:#?}\nnode2: {:#?}", run.results("node2"));
    for phase in ["clean", "delay", "loss"] {
        assert_eq!(
            node1.get(&format!("{phase}_exit")).map(String::as_str),
            Some("0"),
            "{phase}: {}",
            run.file("node1", &format!("{phase}.err"))
        );
    }
    run.assert_result("node2", "serve_exit", "0");
    let figures = |phase: &str| -> Value {
        let text = run.file("node1", &format!("{phase}.json"));
        eprintln!("{phase}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{phase}.json: {e}: {text}"))
    };
    let (clean, delay, loss) = (figures("clean"), figures("delay"), figures("loss"));
    let n = |v: &Value, k: &str| v[k].as_f64().unwrap_or_else(|| panic!("no {k} in {v}"));
    // Clean: every ping answered. An answer is never unexpected (nothing is forged or replayed
    // here); a sample whose software timestamps contradict each other (the responder's delay
    // longer than the round trip: two hosts' scheduling) is invalid and gives none, at most 5%.
    assert_eq!(n(&clean, "sent"), 300.0);
    assert_eq!(n(&clean, "lost"), 0.0, "{clean}");
    assert_eq!(
        n(&clean, "samples") + n(&clean, "invalid"),
        300.0,
        "{clean}"
    );
    for v in [&clean, &delay, &loss] {
        assert_eq!(n(v, "unexpected"), 0.0, "{v}");
        assert!(n(v, "invalid") <= 0.05 * n(v, "sent"), "{v}");
        assert!(n(v, "rtt_p50_us") <= n(v, "rtt_p99_us"), "{v}");
    }
    // Soft-RoCE in VMs is slow (the ICMP RTT of the same link is in `icmp_rtt_ms`): a sanity
    // bound, not a target.
    assert!(n(&clean, "rtt_p50_us") < 10_000.0, "{clean}");
    // Delay: the median rises by 3 ms ± 1 ms.
    let rise = n(&delay, "rtt_p50_us") - n(&clean, "rtt_p50_us");
    assert!(
        (2_000.0..=4_000.0).contains(&rise),
        "median rose {rise:.0} us: {delay}"
    );
    assert_eq!(n(&delay, "lost"), 0.0, "{delay}");
    // Loss: 2-10% of the pings lost (5% of the pings dropped on the way out).
    let lost = n(&loss, "lost") / n(&loss, "sent");
    assert!(
        (0.02..=0.10).contains(&lost),
        "lost {:.1}%: {loss}",
        lost * 100.0
    );
}
