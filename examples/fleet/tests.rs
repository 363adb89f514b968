//! A small fleet run as the bench runs it: read `fleet.json`, scrape every node's `/metrics`
//! over HTTP, and check that the faults show where they should and nowhere else.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::Value;

const NODES: u16 = 6;

/// A base port with `NODES` free ports after it.
fn free_ports() -> u16 {
    let mut base = 24_000 + (std::process::id() % 2_000) as u16 * 8;
    loop {
        let free = (0..NODES).all(|i| TcpListener::bind((Ipv4Addr::LOCALHOST, base + i)).is_ok());
        if free {
            return base;
        }
        base = 24_000 + (base - 24_000 + 8) % 16_000;
    }
}

/// `GET /metrics` from the port: the body.
fn scrape(port: u16) -> std::io::Result<String> {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: fleet\r\nConnection: close\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    Ok(body.to_owned())
}

/// The samples of metric `name`: labels and value.
fn samples(text: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix('{')?;
            let (labels, value) = rest.split_once("} ")?;
            let labels = labels
                .split(',')
                .filter_map(|pair| {
                    let (k, v) = pair.split_once('=')?;
                    Some((k.to_owned(), v.trim_matches('"').to_owned()))
                })
                .collect();
            Some((labels, value.trim().parse().ok()?))
        })
        .collect()
}

#[test]
fn a_small_fleet_shows_each_fault_where_it_is_and_nowhere_else() {
    let out: PathBuf =
        std::env::temp_dir().join(format!("fleet-emulator-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let base = free_ports();
    let args = super::Args::try_parse_from([
        "fleet",
        "--nodes=6",
        "--rails=2",
        "--per-tor=3",
        "--interval=1s",
        "--burst=20ms",
        "--duration=14s",
        "--probe-timeout=200ms",
        "--failure-rate=0",
        &format!("--base-port={base}"),
        &format!("--out={}", out.display()),
        "--fault=port:node=t0n1,device=mlx5_1,fraction=0",
        "--fault=port_width:node=t1n0,device=mlx5_0",
        "--fault=node:node=t1n2",
        "--fault=reboot:node=t0n2,start=1s,end=3s",
    ])
    .unwrap();
    let fleet = std::thread::spawn(move || {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(super::run(args, std::future::pending()))
    });

    let started = Instant::now();
    let manifest = loop {
        if let Ok(text) = std::fs::read_to_string(out.join("fleet.json")) {
            break serde_json::from_str::<Value>(&text).unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no fleet.json");
        std::thread::sleep(Duration::from_millis(100));
    };
    let started_unix = manifest["started_unix"].as_f64().unwrap();
    let nodes = manifest["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 6);
    assert_eq!(nodes[5]["node"], "t1n2");
    assert_eq!(nodes[5]["tor"], "t1");
    assert_eq!(nodes[5]["address"], format!("127.0.0.1:{}", base + 5));
    let faults = manifest["faults"].as_array().unwrap();
    assert_eq!(faults.len(), 4);
    assert_eq!(faults[0]["kind"], "port");
    assert_eq!(faults[0]["device"], "mlx5_1");
    assert!(faults[0]["start_unix"].as_f64().unwrap() > 1e9);
    let targets: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("targets.json")).unwrap()).unwrap();
    assert_eq!(targets[0]["targets"].as_array().unwrap().len(), 6);

    // t0n2 reboots from 1 s to 3 s: gone meanwhile, back with fresh state after.
    std::thread::sleep(Duration::from_millis(2000).saturating_sub(started.elapsed()));
    assert!(
        TcpStream::connect((Ipv4Addr::LOCALHOST, base + 2)).is_err(),
        "a rebooting node listens"
    );

    // Every path probed a few times (1 s intervals, stretched by the budget to about 2 s), the
    // rebooted node's paths and those into it since it came back.
    std::thread::sleep(Duration::from_secs(9).saturating_sub(started.elapsed()));
    let faulty_port = |node: &str, device: &str, peer: &str| {
        device == "mlx5_1" && (node == "t0n1" || peer == "t0n1")
    };
    for (k, entry) in nodes.iter().enumerate() {
        let node = entry["node"].as_str().unwrap();
        let port = base + k as u16;
        if node == "t1n2" {
            let refused = TcpStream::connect((Ipv4Addr::LOCALHOST, port));
            assert!(refused.is_err(), "the powered-off node listens");
            continue;
        }
        let text = scrape(port).unwrap();
        let success = samples(&text, "rdma_probe_success");
        let failures = samples(&text, "rdma_probe_consecutive_failures");
        assert_eq!(
            success.len(),
            2 * 5,
            "{node}: a series per path: {success:?}"
        );
        for (labels, value) in &success {
            let (device, peer) = (&labels["device"], &labels["peer"]);
            let failing = failures.iter().any(|(l, v)| l == labels && *v > 0.0);
            if faulty_port(node, device, peer) || peer == "t1n2" {
                assert!(
                    *value == 0.0 && failing,
                    "{node} {device} -> {peer} should fail"
                );
            } else {
                assert_eq!(*value, 1.0, "{node} {device} -> {peer} should succeed");
                assert!(!failing, "{node} {device} -> {peer}");
            }
        }
        // The config is loaded once per life of a node: t0n2's second life began at 3 s.
        let loaded = text
            .lines()
            .find_map(|l| l.strip_prefix("rdma_probe_config_last_reload_timestamp_seconds "))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap()
            - started_unix;
        if node == "t0n2" {
            assert!(
                loaded >= 3.0,
                "{node} is the same exporter after its reboot: {loaded}"
            );
        } else {
            assert!(loaded < 1.0, "{node} loaded its config at {loaded} s");
        }
        let rates = samples(&text, "rdma_probe_port_rate_bytes_per_second");
        assert_eq!(rates.len(), 2, "{node}: {rates:?}");
        for (labels, value) in rates {
            let half = node == "t1n0" && labels["device"] == "mlx5_0";
            let expected = if half { 25e9 } else { 50e9 };
            assert_eq!(value, expected, "{node} {labels:?}");
        }
    }

    assert_eq!(fleet.join().unwrap(), Ok(()));
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the run outlasted --duration: {:?}",
        started.elapsed()
    );
    assert!(
        TcpStream::connect((Ipv4Addr::LOCALHOST, base)).is_err(),
        "every node stops at the end"
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_bad_fault_is_an_error_before_anything_starts() {
    let out = std::env::temp_dir().join(format!("fleet-emulator-bad-{}", std::process::id()));
    let args = super::Args::try_parse_from([
        "fleet",
        "--nodes=4",
        &format!("--out={}", out.display()),
        "--fault=port:node=t0n9,device=0,fraction=0",
    ])
    .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let error = runtime
        .block_on(super::run(args, std::future::pending()))
        .unwrap_err();
    assert!(error.contains("no node t0n9"), "{error}");
    assert!(!out.exists(), "nothing written");
}

#[test]
fn a_burst_as_long_as_the_interval_is_the_configs_error_before_anything_starts() {
    let out = std::env::temp_dir().join(format!("fleet-emulator-burst-{}", std::process::id()));
    let args = super::Args::try_parse_from([
        "fleet",
        "--nodes=4",
        "--interval=1s",
        "--burst=1s",
        "--duration=3s",
        &format!("--base-port={}", free_ports()),
        &format!("--out={}", out.display()),
    ])
    .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let error = runtime
        .block_on(super::run(args, std::future::pending()))
        .unwrap_err();
    assert!(error.contains("not shorter than the interval"), "{error}");
    assert!(!out.exists(), "nothing written");
}
