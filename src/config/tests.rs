//! End-to-end tests of the config: text in, [`Config`] or [`ConfigError`] out.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::burst::BurstLength;
use crate::units::{ByteSize, RateLimit};

const EXAMPLE: &str = include_str!("../../config/example.yaml");
const LAB: &str = include_str!("../../config/lab.yaml");

fn env(name: &str) -> Option<String> {
    match name {
        "NODE_NAME" => Some("node1".into()),
        "EMPTY" => Some(String::new()),
        _ => None,
    }
}

fn load(text: &str) -> Result<Config, ConfigError> {
    Config::from_str(text, "test.yaml", env)
}

fn ok(text: &str) -> Config {
    load(text).unwrap_or_else(|e| panic!("{e}\n--- config ---\n{text}"))
}

/// The smallest valid config, plus `extra`.
fn minimal(extra: &str) -> String {
    format!("node: node1\nauth: none\n{extra}")
}

#[test]
fn shipped_example_parses() {
    let c = Config::from_str(EXAMPLE, "config/example.yaml", |name| {
        (name == "NODE_NAME").then(|| "gpu-a01".to_owned())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.node(), "gpu-a01");
    assert_eq!(
        c.labels()["rack"],
        "unknown",
        "${{RACK:-unknown}} with RACK unset"
    );
    let Devices::Listed(devices) = c.devices() else {
        panic!("devices are listed")
    };
    assert_eq!(devices.len(), 8);
    let rails: Vec<_> = devices.iter().map(|d| d.rail.unwrap()).collect();
    assert_eq!(rails, (0..8).collect::<Vec<u16>>());
    assert!(c.is_excluded("mlx5_8"));
    assert_eq!(
        c.defaults().rate_limit(),
        Some(RateLimit::PercentOfLink(25.0))
    );
    assert_eq!(c.defaults().traffic_class(), 106);
    assert_eq!(c.peers().len(), 4);
    assert_eq!(c.peers()[0].skipped(), Some(SkipReason::Itself));
    assert_eq!(c.active_peers().count(), 3);
    let b01 = &c.peers()[2];
    assert_eq!(
        b01.probe().rate_limit(),
        Some(RateLimit::BitsPerSecond(5e9))
    );
    assert_eq!(b01.probe().qps(), 4);
    assert_eq!(b01.probe().traffic_class(), 106, "from defaults");
    assert_eq!(b01.overrides(), ["rate_limit", "qps"]);
    let legacy = &c.peers()[3];
    assert_eq!(legacy.mode(), PeerMode::Perftest);
    assert_eq!(legacy.address().port(), 18515);
    assert_eq!(
        legacy.probe().rate_limit(),
        None,
        "`unpaced` overrides the default 25%"
    );
    assert_eq!(legacy.probe().length(), BurstLength::Messages(5000));
    let discovery = c.discovery().unwrap();
    assert_eq!(discovery.forget_after, Duration::from_secs(3600));
    assert_eq!(discovery.dns[0].port(), 18516);
    let selection = c.selection();
    assert_eq!(
        (
            selection.group_by.as_str(),
            selection.sample,
            selection.max_peers
        ),
        ("tor", 10, 32)
    );
    assert_eq!(selection.round, Duration::from_secs(600));
}

#[test]
fn shipped_lab_config_parses() {
    for node in ["node1", "node2", "node3"] {
        let c = Config::from_str(LAB, "config/lab.yaml", |name| {
            (name == "NODE_NAME").then(|| node.to_owned())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.node(), node);
        let skipped: Vec<_> = c
            .peers()
            .iter()
            .filter(|p| p.skipped().is_some())
            .map(Peer::name)
            .collect();
        assert_eq!(skipped, [node]);
        assert_eq!(c.active_peers().count(), 2);
        let p = c.active_peers().next().unwrap().probe();
        assert_eq!(p.interval(), Duration::from_secs(5));
        assert_eq!(p.rate_limit(), Some(RateLimit::BitsPerSecond(20e6)));
        assert_eq!(p.qp_timeout(), 17);
        assert_eq!(
            c.auth(),
            &Auth::PskFile {
                path: "/tmp/psk".into(),
                previous: None
            }
        );
    }
    let e = Config::from_str(LAB, "config/lab.yaml", |_| None).unwrap_err();
    assert!(e.to_string().contains("NODE_NAME is not set"), "{e}");
}

#[test]
fn limits_default_to_the_responders_and_can_be_set() {
    let c = ok(&minimal(""));
    assert_eq!(
        *c.limits(),
        Limits {
            max_sessions: 16,
            max_pinned_bytes: 1 << 30,
            max_session_bytes: 64 << 20
        }
    );
    let c = ok(&minimal(
        "limits: {max_sessions: 4, max_pinned: 256MiB, max_session_memory: 8MiB}\n",
    ));
    assert_eq!(
        *c.limits(),
        Limits {
            max_sessions: 4,
            max_pinned_bytes: 256 << 20,
            max_session_bytes: 8 << 20
        }
    );
    assert!(c
        .render()
        .contains("limits: serves at most 4 sessions pinning 256MiB together; 8MiB per session"));
}

#[test]
fn a_previous_key_is_read_for_a_rollover() {
    let c = ok("node: a\nauth: {psk_file: /k/new, previous_psk_file: /k/old}\n");
    assert_eq!(
        c.auth(),
        &Auth::PskFile {
            path: "/k/new".into(),
            previous: Some("/k/old".into())
        }
    );
    assert_eq!(
        c.auth().previous_psk_file(),
        Some(std::path::Path::new("/k/old"))
    );
    assert!(c
        .render()
        .contains("auth: pre-shared key from /k/new, and the previous key from /k/old"));
}

#[test]
fn both_keys_of_a_rollover_are_loaded_and_checked() {
    use crate::control::AuthMode;
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("rdma-probe-rollover-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, mode: u32| {
        let path = dir.join(name);
        // `name` padded with `A` to 44 base64 characters: a key of 33 bytes.
        std::fs::write(&path, format!("{:A<44}\n", name)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path.display().to_string()
    };
    let (new, old, open) = (
        write("new", 0o600),
        write("old", 0o400),
        write("open", 0o644),
    );
    let config = |prev: &str| {
        ok(&format!(
            "node: a\nauth: {{psk_file: {new}, previous_psk_file: {prev}}}\n"
        ))
    };
    match config(&old).auth().load().unwrap() {
        AuthMode::Psk(keys) => assert!(keys.has_previous()),
        AuthMode::None => panic!("expected keys"),
    }
    let err = config(&open).auth().load().unwrap_err().to_string();
    assert!(err.contains(&format!("chmod 600 {open}")), "{err}");
    let missing = format!("{old}.missing");
    let err = config(&missing).auth().load().unwrap_err().to_string();
    assert!(err.contains(&missing), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn defaults_are_the_products() {
    let c = ok(&minimal(""));
    assert_eq!(c.listen().metrics, "0.0.0.0:9587".parse().unwrap());
    assert_eq!(c.listen().control, "0.0.0.0:18516".parse().unwrap());
    assert_eq!(c.auth(), &Auth::None);
    assert_eq!(c.devices(), &Devices::AllActive);
    assert!(c.exclude_devices().is_empty() && c.labels().is_empty());
    assert!(c.peers().is_empty() && c.discovery().is_none());
    assert_eq!(c.selection(), &Selection::default());
    let d = c.defaults();
    assert_eq!(d.interval(), Duration::from_secs(60));
    assert_eq!(d.jitter(), 0.1);
    assert_eq!(d.message_size(), ByteSize(65536));
    assert_eq!(
        d.length(),
        BurstLength::Duration(Duration::from_millis(500))
    );
    assert_eq!(d.rate_limit(), None);
    assert_eq!(d.unpaced_every(), 24);
    assert_eq!((d.qps(), d.tx_depth(), d.post_list()), (1, 128, 1));
    assert_eq!((d.cq_mod(), d.plan().cq_mod()), (None, 1));
    assert_eq!(d.mtu(), None);
    assert_eq!(
        (d.traffic_class(), d.service_level(), d.qp_timeout()),
        (0, 0, 14)
    );
    assert_eq!(d.timeout(), Duration::from_secs(10));
    assert!(d.plan().rate().is_none());
}

#[test]
fn peers_inherit_and_override() {
    let c = ok(&minimal(
        "defaults:
  interval: 30s
  rate_limit: 25%
  message_size: 4KiB
peers:
  - {name: node2, address: 10.0.0.2, labels: {rack: r1}}
  - name: node3
    address: node3.example:1234
    rate_limit: 1200MiB/s
    burst: {bytes: 1MiB}
    cq_mod: 16
    mtu: 1024
  - {name: node1, address: 10.0.0.1}
",
    ));
    let [p2, p3, me] = c.peers() else {
        panic!("three peers")
    };
    assert_eq!(p2.address().to_string(), "10.0.0.2:18516");
    assert_eq!(p2.labels()["rack"], "r1");
    assert_eq!(p2.mode(), PeerMode::Exporter);
    assert_eq!(p2.probe().interval(), Duration::from_secs(30));
    assert_eq!(
        p2.probe().plan().cq_mod(),
        100,
        "4 KiB messages: perftest's 100"
    );
    assert!(p2.overrides().is_empty());
    // A percentage is kept for run time; the plan is checked without a pace.
    assert_eq!(
        p2.probe().rate_limit(),
        Some(RateLimit::PercentOfLink(25.0))
    );
    let rate = p2.probe().resolve_rate(Some(1e9)).unwrap().unwrap();
    assert_eq!(rate.bytes_per_second(), 2.5e8);
    assert_eq!(p2.probe().plan_with_rate(Some(rate)).rate(), Some(rate));
    assert_eq!(p3.probe().length(), BurstLength::Bytes(1 << 20));
    assert_eq!(p3.probe().plan().total_messages(), Some(256));
    assert_eq!(
        (p3.probe().cq_mod(), p3.probe().mtu()),
        (Some(16), Some(1024))
    );
    assert_eq!(
        p3.probe().interval(),
        Duration::from_secs(30),
        "from defaults"
    );
    assert_eq!(p3.overrides(), ["rate_limit", "cq_mod", "mtu", "burst"]);
    assert_eq!(me.skipped(), Some(SkipReason::Itself));
    assert_eq!(c.active_peers().count(), 2);
    let settings = p3.probe().prober_settings(
        p3.address(),
        c.node(),
        crate::verbs::LocalPort {
            device: Some("rxe0".into()),
            port: 1,
            gid_index: None,
        },
        crate::control::AuthMode::None,
    );
    assert_eq!(settings.target, "node3.example:1234");
    assert_eq!(settings.node_name, "node1");
    assert_eq!(settings.message_size, 4096);
    assert_eq!(settings.cq_mod, Some(16));
}

#[test]
fn auto_values_and_devices() {
    let c = ok(&minimal(
        "devices:
  - {name: mlx5_0, rail: 0, gid_index: 3}
  - {name: mlx5_1, port: 2, rail: 1, gid_index: auto}
exclude_devices: [mlx5_8, mlx5_9]
defaults: {cq_mod: auto, mtu: auto, jitter: 0%, unpaced_every: 0}
",
    ));
    let Devices::Listed(d) = c.devices() else {
        panic!("listed")
    };
    assert_eq!(
        d[0],
        Device {
            name: "mlx5_0".into(),
            port: 1,
            rail: Some(0),
            gid_index: GidIndex::Index(3)
        }
    );
    assert_eq!((d[1].port, d[1].gid_index), (2, GidIndex::Auto));
    assert_eq!(d[0].local_port().gid_index, Some(3));
    assert_eq!(c.exclude_devices(), ["mlx5_8", "mlx5_9"]);
    assert!(c.rdma_networks().is_empty());
    let networks = ok(&minimal("rdma_networks: [10.1.0.0/16, 'fd00:1::/64']\n"));
    let networks: Vec<String> = networks
        .rdma_networks()
        .iter()
        .map(|n| n.to_string())
        .collect();
    assert_eq!(networks, ["10.1.0.0/16", "fd00:1::/64"]);
    assert_eq!(c.defaults().jitter(), 0.0);
    assert_eq!(c.defaults().unpaced_every(), 0);
}

#[test]
fn interpolation_in_values() {
    let c = ok("node: ${NODE_NAME}
auth: {psk_file: \"/run/${NODE_NAME}/psk\"}
labels: {zone: '${ZONE:-z1}', empty: \"${EMPTY:-e}\", dollar: a$$b}
defaults:
  qps: ${QPS:-2}
peers:
  - {name: \"${PEER:-node2}\", address: \"${PEER:-node2}:1\"}
");
    assert_eq!(c.node(), "node1");
    assert_eq!(
        c.auth().psk_file().unwrap().to_str(),
        Some("/run/node1/psk")
    );
    assert_eq!(c.labels()["zone"], "z1");
    assert_eq!(c.labels()["empty"], "e");
    assert_eq!(c.labels()["dollar"], "a$b");
    assert_eq!(c.defaults().qps(), 2);
    assert_eq!(c.peers()[0].address().to_string(), "node2:1");
    // Comments are not interpolated: an example commented out needs no variables.
    ok(&minimal("# node: ${UNSET}\n"));
}

#[test]
fn a_peer_without_a_name_is_named_by_its_address() {
    let c = ok(&minimal(
        "peers:
  - {address: 10.0.0.5}
  - {address: '10.0.0.6:9999', labels: {tor: t2}}
  - {address: node-c.example}
  - {address: 'fd00::7'}
  - {address: 10.0.0.8, mode: perftest}
  - {name: named, address: 10.0.0.9}
",
    ));
    let names: Vec<&str> = c.peers().iter().map(|p| p.name()).collect();
    // The host alone on the default control port, else HOST:PORT (perftest's port is not the
    // control port).
    assert_eq!(
        names,
        [
            "10.0.0.5",
            "10.0.0.6:9999",
            "node-c.example",
            "fd00::7",
            "10.0.0.8:18515",
            "named"
        ]
    );
    assert_eq!(c.peers()[0].address().to_string(), "10.0.0.5:18516");
    assert_eq!(c.peers()[1].labels()["tor"], "t2");
    // An address is known as this node only when it reads as the node's name; otherwise its
    // responder tells its name at the first probe (docs/metrics.md, "Peer identity").
    assert_eq!(c.active_peers().count(), 6);
    let c = ok(&minimal("peers:\n  - {address: node1}\n"));
    assert_eq!(c.peers()[0].name(), "node1");
    assert_eq!(c.peers()[0].skipped(), Some(SkipReason::Itself));
}

#[test]
fn listen_and_selection() {
    let c = ok(&minimal(
        "listen: {metrics: '127.0.0.1:9100', control: '[::]:18000'}
selection: {group_by: rack, max_peers: 8, round: 30m}
discovery: {files: [/etc/peers/*.yaml]}
",
    ));
    assert_eq!(c.listen().metrics.port(), 9100);
    assert!(c.listen().control.is_ipv6());
    let s = c.selection();
    assert_eq!(
        (s.group_by.as_str(), s.max_peers, s.sample),
        ("rack", 8, 10)
    );
    assert_eq!(s.round, Duration::from_secs(1800));
    let d = c.discovery().unwrap();
    assert!(d.dns.is_empty());
    assert_eq!(d.files, ["/etc/peers/*.yaml"]);
    assert_eq!(d.refresh_interval, Duration::from_secs(30));
    let d = ok(&minimal(
        "discovery: {dns: [peers.lab], refresh_interval: 2s}\n",
    ));
    assert_eq!(
        d.discovery().unwrap().refresh_interval,
        Duration::from_secs(2)
    );
    // Same port on different specific IPs is fine.
    ok(&minimal(
        "listen: {metrics: '10.0.0.1:9000', control: '10.0.0.2:9000'}\n",
    ));
}

/// What a table row expects of an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Yaml,
    Limit,
    Env,
    Value,
}

fn kind(e: &ConfigError) -> Kind {
    match e {
        ConfigError::Yaml(_) => Kind::Yaml,
        ConfigError::Limit(_) => Kind::Limit,
        ConfigError::Env(_) => Kind::Env,
        ConfigError::Value(_) => Kind::Value,
        other => panic!("unexpected file-level error {other}"),
    }
}

#[test]
fn errors_name_file_line_column_field_and_what_is_valid() {
    // (config text, kind, line, column, field path, text the message contains)
    let n = "node: node1\nauth: none\n";
    let cases: Vec<(String, Kind, u64, u64, &str, &str)> = vec![
        // Shape: syntax, unknown and missing fields, wrong types, duplicates.
        ("node: 'a\n".into(), Kind::Yaml, 1, 7, "", "quote"),
        ("node: a\n\tauth: none\n".into(), Kind::Yaml, 1, 7, "", "tab"),
        (format!("{n}bogus: 1\n"), Kind::Yaml, 3, 1, "bogus", "unknown field `bogus`"),
        (format!("{n}peers:\n  - {{name: a, address: b, rate: 1Gbps}}\n"), Kind::Yaml, 4, 27,
         "peers[0].rate", "expected one of"),
        (format!("{n}defaults: {{burst: {{seconds: 1}}}}\n"), Kind::Yaml, 3, 20,
         "defaults.burst.seconds", "duration, bytes, messages"),
        (format!("{n}peers: {{a: 1}}\n"), Kind::Yaml, 3, 8, "peers", "a list of {name"),
        (format!("{n}defaults: [1]\n"), Kind::Yaml, 3, 11, "defaults", "a mapping of probe"),
        (format!("{n}defaults: {{qps: [1]}}\n"), Kind::Yaml, 3, 17, "defaults.qps",
         "single value belongs; expected a whole number from 1 to 64"),
        (format!("{n}labels: {{rack: ~}}\n"), Kind::Value, 3, 10, "labels.rack", "null"),
        (format!("{n}labels: {{a: 1, a: 2}}\n"), Kind::Yaml, 3, 16, "labels", "duplicate"),
        (format!("{n}node: again\n"), Kind::Yaml, 3, 1, "", "duplicate"),
        (format!("{n}auth2: x\n"), Kind::Yaml, 3, 1, "auth2", "expected one of"),
        ("node: a\nauth: {psk: /x}\n".into(), Kind::Yaml, 2, 8, "auth.psk", "psk_file"),
        (format!("{n}---\nnode: b\n"), Kind::Yaml, 3, 1, "", "document"),
        // Values.
        ("auth: none\n".into(), Kind::Value, 1, 1, "node", "${NODE_NAME}"),
        ("node:\nauth: none\n".into(), Kind::Value, 1, 5, "node", "empty (null)"),
        (format!("{n}defaults: {{qps: *nope}}\n"), Kind::Yaml, 3, 17, "defaults", "no anchor"),
        ("node: a\n".into(), Kind::Value, 1, 1, "auth", "auth: none"),
        ("node: a\nauth: open\n".into(), Kind::Value, 2, 7, "auth", "literally"),
        ("node: a\nauth: {psk_file: ''}\n".into(), Kind::Value, 2, 18, "auth.psk_file", "empty"),
        (format!("{n}limits: {{max_sessions: 0}}\n"), Kind::Value, 3, 24, "limits.max_sessions",
         "out of range"),
        (format!("{n}limits: {{max_sessions: 5000}}\n"), Kind::Value, 3, 24,
         "limits.max_sessions", "1 to 4096"),
        (format!("{n}limits: {{max_pinned: 0}}\n"), Kind::Value, 3, 22, "limits.max_pinned",
         "zero"),
        (format!("{n}limits: {{max_pinned: 32MiB}}\n"), Kind::Value, 3, 22, "limits.max_pinned",
         "32MiB is less than limits.max_session_memory (64MiB)"),
        (format!("{n}limits: {{max_session_memory: lots}}\n"), Kind::Value, 3, 30,
         "limits.max_session_memory", "lots"),
        (format!("{n}limits: {{sessions: 3}}\n"), Kind::Yaml, 3, 10, "limits.sessions",
         "max_sessions"),
        ("node: a\nauth: {previous_psk_file: /old}\n".into(), Kind::Yaml, 2, 8, "auth",
         "missing field `psk_file`"),
        ("node: a\nauth: {psk_file: /k, previous_psk_file: ''}\n".into(), Kind::Value, 2, 41,
         "auth.previous_psk_file", "empty"),
        ("node: a\nauth: {psk_file: /k, previous_psk_file: /k}\n".into(), Kind::Value, 2, 41,
         "auth.previous_psk_file", "same file as auth.psk_file"),
        ("node: a\nauth: {psk_file: /k, psk_file: /j}\n".into(), Kind::Yaml, 2, 22, "auth",
         "duplicate mapping key `psk_file`"),
        ("node: a b\nauth: none\n".into(), Kind::Value, 1, 7, "node", "whitespace"),
        (format!("{n}labels: {{1rack: x}}\n"), Kind::Value, 3, 10, "labels.1rack", "Prometheus"),
        (format!("{n}labels: {{__x: x}}\n"), Kind::Value, 3, 10, "labels.__x", "reserved"),
        (format!("{n}labels: {{peer: x}}\n"), Kind::Value, 3, 10, "labels.peer", "sets itself"),
        (format!("{n}labels: {{job: x}}\n"), Kind::Value, 3, 10, "labels.job", "sets itself"),
        (format!("{n}labels: {{instance: x}}\n"), Kind::Value, 3, 10, "labels.instance",
         "sets itself"),
        (format!("{n}listen: {{metrics: 9587}}\n"), Kind::Value, 3, 19, "listen.metrics",
         "IP:PORT"),
        (format!("{n}listen: {{metrics: '0.0.0.0:0'}}\n"), Kind::Value, 3, 19,
         "listen.metrics", "fixed"),
        (format!("{n}listen: {{control: '0.0.0.0:9587'}}\n"), Kind::Value, 3, 19,
         "listen.control", "different ports"),
        (format!("{n}devices: []\n"), Kind::Value, 3, 10, "devices", "every active"),
        (format!("{n}devices:\n  - {{port: 1}}\n"), Kind::Value, 4, 5, "devices[0].name",
         "missing"),
        (format!("{n}devices:\n  - {{name: m, port: 0}}\n"), Kind::Value, 4, 21,
         "devices[0].port", "from 1 to 255"),
        (format!("{n}devices:\n  - {{name: m, gid_index: first}}\n"), Kind::Value, 4, 26,
         "devices[0].gid_index", "auto or a GID"),
        (format!("{n}devices:\n  - {{name: m}}\n  - {{name: m}}\n"), Kind::Value, 5, 5,
         "devices[1]", "listed twice"),
        (format!("{n}devices:\n  - {{name: m, rail: 1}}\n  - {{name: n, rail: 1}}\n"),
         Kind::Value, 5, 21, "devices[1].rail", "rail 1 is also devices[0]'s"),
        (format!("{n}devices:\n  - {{name: m, rail: 1}}\n  - {{name: n}}\n"), Kind::Value, 5, 5,
         "devices[1]", "every device a rail, or none"),
        (format!("{n}devices:\n  - {{name: m}}\nexclude_devices: [m]\n"), Kind::Value, 4, 5,
         "devices[0].name", "exclude_devices"),
        (format!("{n}exclude_devices: [m, m]\n"), Kind::Value, 3, 22, "exclude_devices[1]",
         "twice"),
        (format!("{n}rdma_networks: [10.1.0.0/16, rail-1]\n"), Kind::Value, 3, 30,
         "rdma_networks[1]", "CIDR"),
        (format!("{n}rdma_networks: [10.1.2.3/16]\n"), Kind::Value, 3, 17, "rdma_networks[0]",
         "the network is 10.1.0.0/16"),
        (format!("{n}defaults: {{interval: 0s}}\n"), Kind::Value, 3, 22, "defaults.interval",
         "greater than zero"),
        (format!("{n}defaults: {{interval: 60}}\n"), Kind::Value, 3, 22, "defaults.interval",
         "e.g. 60s"),
        (format!("{n}defaults: {{jitter: 0.1}}\n"), Kind::Value, 3, 20, "defaults.jitter",
         "0% to 50%"),
        (format!("{n}defaults: {{jitter: 60%}}\n"), Kind::Value, 3, 20, "defaults.jitter",
         "out of range"),
        (format!("{n}defaults: {{message_size: 64X}}\n"), Kind::Value, 3, 26,
         "defaults.message_size", "KiB"),
        (format!("{n}defaults: {{message_size: 0}}\n"), Kind::Value, 3, 26,
         "defaults.message_size", "zero"),
        (format!("{n}defaults: {{message_size: 2GiB}}\n"), Kind::Value, 3, 26,
         "defaults.message_size", "1 GiB"),
        (format!("{n}defaults: {{rate_limit: 10Gb/s}}\n"), Kind::Value, 3, 24,
         "defaults.rate_limit", "ambiguous"),
        (format!("{n}defaults: {{rate_limit: 10}}\n"), Kind::Value, 3, 24, "defaults.rate_limit",
         "Gbps"),
        (format!("{n}defaults: {{rate_limit: 1Mbps, burst: {{messages: 1000}}}}\n"), Kind::Value, 3,
         38, "defaults.burst", "takes about 8m 44s, which"),
        (format!("{n}defaults: {{qps: 65}}\n"), Kind::Value, 3, 17, "defaults.qps",
         "from 1 to 64"),
        (format!("{n}defaults: {{qps: -1}}\n"), Kind::Value, 3, 17, "defaults.qps",
         "not a whole number"),
        (format!("{n}defaults: {{qps: 99999999999999999999999}}\n"), Kind::Value, 3, 17,
         "defaults.qps", "out of range"),
        (format!("{n}defaults: {{tx_depth: 0}}\n"), Kind::Value, 3, 22, "defaults.tx_depth",
         "from 1 to 15000"),
        (format!("{n}defaults: {{cq_mod: 200}}\n"), Kind::Value, 3, 20, "defaults.cq_mod",
         "cq_mod"),
        (format!("{n}defaults: {{mtu: 1500}}\n"), Kind::Value, 3, 17, "defaults.mtu",
         "not an RDMA MTU"),
        (format!("{n}defaults: {{traffic_class: 256}}\n"), Kind::Value, 3, 27,
         "defaults.traffic_class", "0 to 255"),
        (format!("{n}defaults: {{service_level: 16}}\n"), Kind::Value, 3, 27,
         "defaults.service_level", "0 to 15"),
        (format!("{n}defaults: {{qp_timeout: 32}}\n"), Kind::Value, 3, 24, "defaults.qp_timeout",
         "0 to 31"),
        (format!("{n}defaults: {{burst: {{}}}}\n"), Kind::Value, 3, 19, "defaults.burst",
         "no length given"),
        (format!("{n}defaults: {{burst: {{duration: 1s, messages: 5}}}}\n"), Kind::Value, 3, 19,
         "defaults.burst", "duration and messages given together"),
        (format!("{n}defaults: {{burst: {{duration: 2h}}}}\n"), Kind::Value, 3, 30,
         "defaults.burst.duration", "too long"),
        (format!("{n}defaults: {{burst: {{messages: 0}}}}\n"), Kind::Value, 3, 30,
         "defaults.burst.messages", "out of range"),
        (format!("{n}defaults: {{burst: {{duration: 90s}}}}\n"), Kind::Value, 3, 19,
         "defaults.burst", "not shorter than the interval 1m"),
        // Settings that only fail together: the burst plan is built at load.
        (format!("{n}defaults: {{qps: 4, burst: {{messages: 2}}}}\n"), Kind::Value, 3, 27,
         "defaults.burst", "every QP needs at least one"),
        (format!("{n}defaults: {{tx_depth: 8, post_list: 16}}\n"), Kind::Value, 3, 36,
         "defaults.post_list", "post_list"),
        (format!("{n}defaults: {{qps: 4}}\npeers:\n  - {{name: p, address: h, burst: {{messages: 3}}}}\n"),
         Kind::Value, 5, 34, "peers[0].burst", "settings this peer does not set come from defaults"),
        (format!("{n}defaults: {{burst: {{messages: 3}}}}\npeers:\n  - {{name: p, address: h, qps: 4}}\n"),
         Kind::Value, 5, 32, "peers[0].qps", "every QP needs at least one"),
        // Peers.
        (format!("{n}peers:\n  - {{labels: {{a: b}}}}\n"), Kind::Value, 4, 5, "peers[0].address",
         "missing: every peer has an address"),
        (format!("{n}peers:\n  - {{name: h, address: i}}\n  - {{address: h}}\n"), Kind::Value, 5,
         15, "peers[1].address", "peer h is listed twice (first at line 4)"),
        (format!("{n}peers:\n  - {{name: p}}\n"), Kind::Value, 4, 5, "peers[0].address",
         "HOST:PORT"),
        (format!("{n}peers:\n  - {{name: p, address: 'h:0'}}\n"), Kind::Value, 4, 24,
         "peers[0].address", "HOST:PORT"),
        (format!("{n}peers:\n  - {{name: p, address: h, mode: ib}}\n"), Kind::Value, 4, 33,
         "peers[0].mode", "perftest"),
        (format!("{n}peers:\n  - {{name: p, address: h}}\n  - {{name: p, address: i}}\n"),
         Kind::Value, 5, 12, "peers[1].name", "listed twice (first at line 4)"),
        (format!("{n}peers:\n  - {{name: p, address: h}}\n  - {{name: q, address: 'h:18516'}}\n"),
         Kind::Value, 5, 24, "peers[1].address", "also peer p's"),
        (format!("{n}peers:\n  - {{name: p, address: h, labels: {{a-b: 1}}}}\n"), Kind::Value,
         4, 36, "peers[0].labels.a-b", "label name"),
        (format!("{n}peers:\n  - {{name: p, address: h, interval: soon}}\n"), Kind::Value, 4,
         37, "peers[0].interval", "soon"),
        // Discovery and selection.
        (format!("{n}discovery: {{}}\n"), Kind::Value, 3, 12, "discovery", "no source"),
        (format!("{n}discovery: {{dns: ['h:x']}}\n"), Kind::Value, 3, 19, "discovery.dns[0]",
         "HOST:PORT"),
        (format!("{n}discovery: {{files: [a], forget_after: 0s}}\n"), Kind::Value, 3, 39,
         "discovery.forget_after", "greater than zero"),
        (format!("{n}discovery: {{files: [a], refresh_interval: 2h}}\n"), Kind::Value, 3, 43,
         "discovery.refresh_interval", "from 1s to 1h"),
        (format!("{n}discovery: {{files: ['/a*/b.yaml']}}\n"), Kind::Value, 3, 21,
         "discovery.files[0]", "in the file name only"),
        (format!("{n}selection: {{group_by: 'a b'}}\n"), Kind::Value, 3, 23,
         "selection.group_by", "label name"),
        (format!("{n}selection: {{sample: many}}\n"), Kind::Value, 3, 21, "selection.sample",
         "whole number"),
        (format!("{n}selection: {{max_peers: 0}}\n"), Kind::Value, 3, 24, "selection.max_peers",
         "out of range"),
        (format!("{n}selection: {{round: 10s}}\n"), Kind::Value, 3, 20, "selection.round",
         "from 1m to 24h"),
        (format!("{n}selection: {{group_by: peer}}\n"), Kind::Value, 3, 23, "selection.group_by",
         "sets itself"),
        // Interpolation: the position of the `$` itself when the value is written as is.
        ("node: ${UNSET}\nauth: none\n".into(), Kind::Env, 1, 7, "node", "UNSET is not set"),
        ("node: x-${UNSET}\nauth: none\n".into(), Kind::Env, 1, 9, "node", "${UNSET:-default}"),
        (format!("{n}peers:\n  - {{name: \"p${{UNSET}}\", address: h}}\n"), Kind::Env, 4, 14,
         "peers[0].name", "UNSET"),
        (format!("{n}labels: {{rack: ${{X}}}}\n"), Kind::Yaml, 3, 17, "labels",
         "must be quoted"),
        (format!("{n}labels:\n  rack: ${{1x}}\n"), Kind::Env, 4, 9, "labels.rack",
         "invalid variable reference"),
        (format!("{n}labels:\n  rack: \"a\\tb${{X}}\"\n"), Kind::Env, 4, 9, "labels.rack",
         "X is not set"),
    ];
    let mut failures = Vec::new();
    for (text, want_kind, line, column, path, needle) in cases {
        let e = match load(&text) {
            Ok(_) => {
                failures.push(format!("accepted:\n{text}"));
                continue;
            }
            Err(e) => e,
        };
        let shown = e.to_string();
        let Some(l) = e.located() else {
            failures.push(format!("{text}\n{shown}: no position"));
            continue;
        };
        let got = (kind(&e), l.line, l.column, l.path.as_str());
        if got != (want_kind, line, column, path) || !l.message.contains(needle) {
            failures.push(format!(
                "{text}{shown}\n  got {got:?}, wanted {:?} with {needle:?}",
                (want_kind, line, column, path)
            ));
        }
        assert!(
            shown.starts_with(&format!("test.yaml:{}:{}: ", l.line, l.column)),
            "{shown}"
        );
        assert!(!shown.contains('\n'), "one line: {shown}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn file_level_errors() {
    let dir = std::env::temp_dir().join(format!("rdma-probe-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("missing.yaml");
    let e = Config::load(&missing).unwrap_err();
    assert!(matches!(e, ConfigError::Read { .. }), "{e}");
    assert!(e.to_string().contains("missing.yaml"), "{e}");

    let big = dir.join("big.yaml");
    let mut text = minimal("");
    text.push_str(&"# padding\n".repeat(120_000));
    std::fs::write(&big, &text).unwrap();
    let start = Instant::now();
    let e = Config::load(&big).unwrap_err();
    assert!(matches!(e, ConfigError::TooLarge { .. }), "{e}");
    assert!(e.to_string().contains("1048576"), "{e}");
    assert!(start.elapsed() < Duration::from_secs(1));
    assert!(matches!(load(&text), Err(ConfigError::TooLarge { .. })));

    let binary = dir.join("binary.yaml");
    std::fs::write(&binary, b"node: \xff\n").unwrap();
    let e = Config::load(&binary).unwrap_err();
    assert!(e.to_string().contains("UTF-8"), "{e}");

    let good = dir.join("good.yaml");
    std::fs::write(&good, minimal("")).unwrap();
    // NODE_NAME is not needed: the file names the node itself.
    assert_eq!(
        Config::load(&good).unwrap().origin(),
        good.display().to_string()
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Hostile documents fail cleanly (an error, not a panic, a hang or a huge allocation) and soon.
#[test]
fn hostile_yaml_fails_fast() {
    fn refused(name: &str, text: &str) -> ConfigError {
        let start = Instant::now();
        let e = load(text).expect_err(name);
        let took = start.elapsed();
        // A bound on blow-ups (an alias bomb expanded, a quadratic walk), not a speed goal: a
        // debug build on a loaded machine took over 1 s for a document it refuses at once.
        assert!(took < Duration::from_secs(10), "{name} took {took:?}");
        e
    }
    let deep_flow = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let e = refused("deep flow", &minimal(&format!("labels: {deep_flow}\n")));
    assert!(
        matches!(e, ConfigError::Yaml(_) | ConfigError::Limit(_)),
        "{e}"
    );
    let mut deep_block = minimal("labels:\n");
    for i in 0..10_000 {
        deep_block.push_str(&" ".repeat(2 * i + 2));
        deep_block.push_str("-\n");
    }
    // Over 1 MiB: refused before parsing. A smaller deep document hits the depth budget.
    assert!(matches!(
        refused("deep block", &deep_block),
        ConfigError::TooLarge { .. }
    ));
    // A smaller one is refused as soon as its shape is wrong (no config value is a list of
    // lists), before its depth costs anything.
    let mut deep_block = minimal("exclude_devices:\n");
    for i in 0..1_000 {
        deep_block.push_str(&" ".repeat(i + 2));
        deep_block.push_str("-\n");
    }
    let e = refused("deep block", &deep_block);
    assert!(
        matches!(e, ConfigError::Yaml(_) | ConfigError::Limit(_)),
        "{e}"
    );

    // Billion laughs: 10 levels of 10 aliases each would expand to 10^10 values.
    let mut bomb = minimal("x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        bomb.push_str(&format!("x{i}: &a{i} [{refs}]\n"));
    }
    // Unknown top-level keys are refused, so hide the bomb where a list is accepted.
    let bomb = bomb
        .replace("x0:", "exclude_devices:\n  - ")
        .lines()
        .map(|l| {
            if l.starts_with('x') {
                format!("  - {}", l.split_once(": ").unwrap().1)
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let e = refused("alias bomb", &bomb);
    assert!(
        matches!(e, ConfigError::Limit(_) | ConfigError::Yaml(_)),
        "{e}"
    );

    // The same bomb as the value of labels (a mapping): also refused.
    let mut bomb = minimal("labels:\n  a: &a0 [lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        bomb.push_str(&format!("  a{i}: &a{i} [{refs}]\n"));
    }
    refused("alias bomb in a mapping", &bomb);

    // Many aliases of one big scalar: the bytes after expansion are bounded too.
    let big = "x".repeat(500_000);
    let mut text = minimal(&format!("labels: {{a: &big {big}}}\nexclude_devices: ["));
    text.push_str(&vec!["*big"; 200].join(", "));
    text.push_str("]\n");
    let e = refused("alias amplification", &text);
    assert!(
        matches!(e, ConfigError::Limit(_) | ConfigError::Value(_)),
        "{e}"
    );

    // A huge scalar under the file limit: a clear value error, not a slow parse.
    let e = refused(
        "huge name",
        &format!("auth: none\nnode: {}\n", "n".repeat(1_000_000)),
    );
    assert!(e.to_string().contains("longer than"), "{e}");
    // Long lines in errors are cut, never echoed whole.
    assert!(e.to_string().len() < 500);

    // Many values, each cheap: refused by the value budget after bounded work (the bound is
    // looser for unoptimized test builds, where the parser is about 10 times slower).
    let many = minimal(&format!(
        "exclude_devices: [{}]\n",
        vec!["d"; 300_000].join(",")
    ));
    let start = Instant::now();
    let e = load(&many).unwrap_err();
    let limit = Duration::from_secs(if cfg!(debug_assertions) { 5 } else { 1 });
    assert!(
        start.elapsed() < limit,
        "many values took {:?}",
        start.elapsed()
    );
    assert!(matches!(e, ConfigError::Limit(_)), "{e}");
    assert!(e.to_string().contains("more than 50000 values"), "{e}");
}

#[test]
fn long_values_are_never_echoed_whole() {
    let long = "9".repeat(100_000);
    let host = "h".repeat(100_000);
    let key = "k".repeat(100_000);
    for text in [
        minimal(&format!("defaults: {{qps: {long}}}\n")),
        minimal(&format!("defaults: {{rate_limit: {long}Gbps}}\n")),
        minimal(&format!("peers:\n  - {{name: p, address: {host}}}\n")),
        minimal(&format!("listen: {{metrics: {host}}}\n")),
        minimal(&format!("? {key}\n: 1\n")),
        minimal(&format!("labels: {{{key}: 1}}\n")),
        format!("auth: none\nnode: {host} x\n"),
    ] {
        let e = load(&text).unwrap_err().to_string();
        assert!(e.len() < 1300, "{} chars: {}...", e.len(), &e[..200]);
    }
}

#[test]
fn names_with_bidirectional_marks_are_refused() {
    // A right-to-left override shows the rest of a name reversed wherever it is printed.
    for text in [
        "node: \"gpu\\u202e01\"\nauth: none\n".to_owned(),
        minimal("peers:\n  - {name: \"b\\u2066x\", address: \"192.0.2.2:18516\"}\n"),
    ] {
        let e = load(&text).unwrap_err().to_string();
        assert!(e.contains("bidirectional"), "{text:?}: {e}");
    }
}

#[test]
fn error_messages_escape_control_characters() {
    let e = load("node: \"a\\u0007b\"\nauth: none\n").unwrap_err();
    assert!(!e.to_string().contains('\u{7}'), "{e}");
}

#[test]
fn render_shows_the_resolved_config() {
    let c = Config::from_str(LAB, "config/lab.yaml", |name| {
        (name == "NODE_NAME").then(|| "node2".to_owned())
    })
    .unwrap();
    let text = c.render();
    for needle in [
        "config: config/lab.yaml",
        "node: node2",
        "labels: lab=\"soft-roce\"",
        "listen: metrics 0.0.0.0:9587, control 0.0.0.0:18516",
        "auth: pre-shared key from /tmp/psk",
        "  rxe0 port 1 rail 0 gid_index auto",
        "peers: 3 (2 probed, 1 skipped",
        "  node2 192.0.2.12:18516 skipped: itself",
        "  node1 192.0.2.11:18516 mode exporter",
        "interval=5s jitter=10% message_size=64KiB burst={duration: 250ms} rate_limit=20Mbps",
        "cq_mod=auto(1)",
        "qp_timeout=17",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    let c = ok(&minimal("peers:\n  - {name: p, address: h, qps: 2}\n"));
    let text = c.render();
    assert!(text.contains("qps=2*"), "{text}");
    assert!(text.contains("rate_limit=unpaced "), "{text}");
    assert!(text.contains("auth: none"), "{text}");
    assert!(text.contains("devices: every RDMA device"), "{text}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Any single-character edit of the example is accepted or refused with a located error:
    /// never a panic.
    #[test]
    fn edits_of_the_example_never_panic(
        at in 0usize..EXAMPLE.len(),
        delete in any::<bool>(),
        c in prop::sample::select(vec![' ', ':', '-', '{', '}', '[', ']', '"', '\'', '&', '*', '\n', '\t', '$', '#', 'x', '0', '%', '!']),
    ) {
        let mut text = EXAMPLE.to_owned();
        let at = (0..=at).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        if delete {
            if at < text.len() {
                let next = text[at..].chars().next().map_or(0, char::len_utf8);
                text.replace_range(at..at + next, "");
            }
        } else {
            text.insert(at, c);
        }
        if let Err(e) = Config::from_str(&text, "example.yaml", |n| (n == "NODE_NAME").then(|| "gpu-a01".to_owned())) {
            let l = e.located();
            prop_assert!(l.is_some(), "{}", e);
            let l = l.unwrap();
            prop_assert!(l.line >= 1 && l.column >= 1);
            prop_assert!(l.line as usize <= text.lines().count() + 1, "{}", e);
        }
    }

    /// Arbitrary short documents from YAML's punctuation never panic.
    #[test]
    fn garbage_never_panics(text in "[a-z:{}\\[\\]&*!|>'\"#%@,.\\- \n\t$]{0,80}") {
        let _ = load(&text);
        let _ = load(&minimal(&text));
    }
}

#[test]
fn the_judge_section_has_the_rules_defaults_bounds_and_a_loss_band_that_is_not_empty() {
    assert_eq!(*ok(&minimal("")).judge(), Judge::default());
    assert_eq!(
        *ok(EXAMPLE.replace("${NODE_NAME}", "n").as_str()).judge(),
        Judge::default()
    );
    let c = ok(&minimal(
        "judge: {probes_bad: 5, degraded_ratio: 60%, baseline_drop: 90%, \
         stall_min_window_ratio: 10%, gap_factor: 20, gap_floor: 5ms, stale_probes: 4, \
         baseline: 120, validation_window: 5, ping_loss_ratio: 1%, ping_loss_min: 2, \
         ping_loss_below: 40%, ping_loss_window: 30, ping_rtt_factor: 4, ping_rtt_floor: 1ms, \
         ping_baseline: 360}\n",
    ));
    let j = c.judge();
    assert_eq!((j.probes_bad, j.gap_factor, j.stale_probes), (5, 20, 4));
    assert_eq!((j.degraded_ratio, j.baseline_drop), (0.6, 0.9));
    assert_eq!((j.stall_min_window_ratio, j.ping_loss_ratio), (0.1, 0.01));
    assert_eq!(j.ping_loss_below, 0.4);
    assert_eq!(
        (j.gap_floor, j.ping_rtt_floor),
        (Duration::from_millis(5), Duration::from_millis(1))
    );
    assert_eq!((j.baseline, j.validation_window), (120, 5));
    assert_eq!(
        (j.ping_loss_min, j.ping_loss_window, j.ping_baseline),
        (2, 30, 360)
    );
    assert_eq!(j.ping_rtt_factor, 4);
    for (bad, says) in [
        ("{probes_bad: 0}", "judge.probes_bad"),
        ("{probes_bad: 3.5}", "judge.probes_bad"),
        (
            "{degraded_ratio: 0.7}",
            "judge.degraded_ratio: \"0.7\" is not a percentage",
        ),
        ("{degraded_ratio: 0%}", "judge.degraded_ratio"),
        ("{baseline_drop: 101%}", "judge.baseline_drop"),
        ("{gap_floor: soon}", "judge.gap_floor"),
        ("{baseline: 0}", "judge.baseline"),
        ("{ping_baseline: 1000000}", "judge.ping_baseline"),
        ("{ping_loss_ratio: 50%}", "judge.ping_loss_below"),
        ("{ping_loss_below: 1%}", "no loss would be judged lossy"),
        ("{probes: 3}", "probes"),
    ] {
        let e = load(&minimal(&format!("judge: {bad}\n")))
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn the_ping_section_has_defaults_bounds_and_off() {
    let c = ok(&minimal(""));
    assert_eq!(*c.ping(), Ping::default());
    assert_eq!(c.ping().interval, Some(Duration::from_secs(5)));
    assert_eq!(
        *ok(EXAMPLE.replace("${NODE_NAME}", "n").as_str()).ping(),
        Ping::default()
    );
    let c = ok(&minimal(
        "ping: {interval: 100ms, timeout: 500ms, window: 10s, max_rate: 50, max_paths: 8}\n",
    ));
    let p = c.ping();
    assert_eq!(p.interval, Some(Duration::from_millis(100)));
    assert_eq!(p.timeout, Duration::from_millis(500));
    assert_eq!(p.window, Duration::from_secs(10));
    assert_eq!((p.max_rate, p.max_paths), (50, 8));
    assert_eq!(
        ok(&minimal("ping: {interval: off}\n")).ping().interval,
        None
    );
    // A window shorter than the interval or the timeout would never hold a ping: the default
    // window grows to the larger of both, a written one is refused.
    assert_eq!(
        ok(&minimal("ping: {interval: 2m}\n")).ping().window,
        Duration::from_secs(120)
    );
    for (bad, says) in [
        ("{interval: 5ms}", "ping.interval"),
        ("{interval: sometimes}", "ping.interval"),
        ("{timeout: 0s}", "ping.timeout"),
        ("{interval: 10s, window: 5s}", "ping.window"),
        ("{max_rate: 0}", "ping.max_rate"),
        ("{max_paths: 1000000}", "ping.max_paths"),
        ("{intervall: 5s}", "intervall"),
    ] {
        let e = load(&minimal(&format!("ping: {bad}\n")))
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

/// A config file and the Slurm topology file it names, in a directory of their own.
fn with_topology(name: &str, config: &str, topology: &str) -> Result<Config, ConfigError> {
    let dir =
        std::env::temp_dir().join(format!("rdma-probe-topology-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let topology_path = dir.join("topology.conf");
    std::fs::write(&topology_path, topology).unwrap();
    let config_path = dir.join("config.yaml");
    let text = config.replace("TOPOLOGY", &topology_path.display().to_string());
    std::fs::write(&config_path, text).unwrap();
    Config::load(&config_path)
}

const TOPOLOGY_CONFIG: &str = "node: gpu0001\nauth: none\ntopology: {slurm: TOPOLOGY}\n\
    labels: {tor: configured, lab: x}\npeers:\n\
    - {name: gpu0002, address: 10.0.0.2, labels: {tor: configured, rack: r2}}\n\
    - {name: gpu0040, address: 10.0.0.40}\n\
    - {name: other, address: 10.0.0.99, labels: {tor: t9}}\n";

const TREE: &str = "# leaf switches\nSwitchName=leaf00 Nodes=gpu[0001-0032]\n\
    SwitchName=leaf01 Nodes=gpu[0033-0064]\nSwitchName=spine0 Switches=leaf[00-01]\n";

fn labels_of<'a>(labels: &'a Labels, names: &[&str]) -> Vec<Option<&'a str>> {
    names
        .iter()
        .map(|n| labels.get(*n).map(String::as_str))
        .collect()
}

#[test]
fn a_slurm_topology_gives_the_nodes_it_names_their_tor_and_spine() {
    let c = with_topology("tree", TOPOLOGY_CONFIG, TREE).unwrap();
    assert_eq!(
        c.topology_source()
            .map(|s| s.slurm.ends_with("topology.conf")),
        Some(true)
    );
    // The node itself: the file's leaf and spine over its configured `tor`; other labels stay.
    assert_eq!(
        labels_of(c.labels(), &["tor", "spine", "lab"]),
        [Some("leaf00"), Some("spine0"), Some("x")]
    );
    let peer = |name: &str| {
        c.peers()
            .iter()
            .find(|p| p.name() == name)
            .unwrap()
            .labels()
    };
    assert_eq!(
        labels_of(peer("gpu0002"), &["tor", "spine", "rack"]),
        [Some("leaf00"), Some("spine0"), Some("r2")]
    );
    assert_eq!(
        labels_of(peer("gpu0040"), &["tor", "spine"]),
        [Some("leaf01"), Some("spine0")]
    );
    // A peer the file does not name keeps its configured labels.
    assert_eq!(
        labels_of(peer("other"), &["tor", "spine"]),
        [Some("t9"), None]
    );
    // A discovered peer the file names takes its place too; one it does not keeps its own.
    let defaults = c.defaults().clone();
    let discovered = |name: &str| {
        Peer::discovered(
            name.to_owned(),
            parse_host_port("10.0.0.7:18516", DEFAULT_CONTROL_PORT).unwrap(),
            Labels::from([("tor".to_owned(), "from-file-sd".to_owned())]),
            &defaults,
        )
    };
    let c = c.with_discovered(vec![discovered("gpu0050"), discovered("elsewhere")]);
    let tors: Vec<_> = c
        .discovered_peers()
        .iter()
        .map(|p| p.labels().get("tor").cloned())
        .collect();
    assert_eq!(tors, [Some("leaf01".into()), Some("from-file-sd".into())]);
}

#[test]
fn a_block_topology_gives_the_block_and_leaves_the_tor_alone() {
    let blocks = "BlockName=b1 Nodes=gpu[0001-0002]\nBlockName=b2 Nodes=gpu0040\nBlockSizes=2\n";
    let c = with_topology("block", TOPOLOGY_CONFIG, blocks).unwrap();
    assert_eq!(
        labels_of(c.labels(), &["tor", "block"]),
        [Some("configured"), Some("b1")]
    );
}

#[test]
fn topology_errors_name_the_file_the_line_and_the_config() {
    let bad = "SwitchName=leaf00 Nodes=gpu[0001-0032]\nSwitchName=leaf01 Nodes=gpu[0033-\n";
    let e = with_topology("bad", TOPOLOGY_CONFIG, bad).unwrap_err();
    let shown = e.to_string();
    assert!(matches!(e, ConfigError::Topology { .. }), "{shown}");
    assert!(shown.contains("topology.conf: line 2: "), "{shown}");
    assert!(shown.contains("unbalanced bracket"), "{shown}");
    assert!(shown.contains("config.yaml"), "{shown}");

    let missing = TOPOLOGY_CONFIG.replace("TOPOLOGY", "/nonexistent/topology.conf");
    let e = with_topology("missing", &missing, "").unwrap_err();
    assert!(matches!(e, ConfigError::TopologyRead { .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with("/nonexistent/topology.conf: cannot read"),
        "{e}"
    );

    for (topology, want) in [
        ("topology: {}", "names no file"),
        ("topology: {slurm: ''}", "empty value"),
        ("topology: {slurm: /x, lldp: on}", "lldp"),
    ] {
        let e = load(&minimal(topology)).unwrap_err().to_string();
        assert!(
            e.contains("topology") && e.contains(want),
            "{topology}: {e}"
        );
    }
}
