//! A hostile client of a responder's control port: what a stranger, a broken peer or a holder of
//! the key can throw at it, and what each attack got back.
//!
//! Usage: `hostile ADDR ATTACK [--count N] [--wait S] [--hold S] [--interval S]
//! [--psk-file F | --no-auth]`, ATTACK one of `random`, `oversize`, `truncated`, `stall`,
//! `slow`, `flood`, `wrong-psk`, `absurd`, `valid`, `all`.
//!
//! Each attack prints one JSON line: how many connections it made, what came back on them
//! (`error:REASON` with a sample message, `closed` for a close without a reply, `open` for a
//! connection the responder still held when the attack stopped watching, `connect_failed`), and
//! how long the responder took to close them. Meant for loopback and the lab's own addresses.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use rdma_probe_exporter::control::{
    self, client_handshake, connect, AuthMode, ControlError, Message, Psk, QpEndpoint,
    SessionRequest, PROTOCOL_VERSION,
};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

#[derive(Debug, Parser)]
#[command(about = "Attacks a responder's control port and reports what each attack got back")]
pub struct Args {
    /// The responder's control address, HOST:PORT.
    pub addr: String,
    /// The attack.
    #[arg(value_enum)]
    pub attack: Attack,
    /// Connections per attack (`flood`: held at once).
    #[arg(long, default_value_t = 4)]
    pub count: usize,
    /// Connections of one attack open at once (not `flood`): at most the responder's
    /// `max_handshakes`, or newer connections push older ones out before they are answered.
    #[arg(long, default_value_t = 8)]
    pub parallel: usize,
    /// How long to wait for the responder to answer or close each connection, in seconds.
    #[arg(long, default_value_t = 15.0)]
    pub wait: f64,
    /// `flood`: how long to hold the connections open, in seconds.
    #[arg(long, default_value_t = 5.0)]
    pub hold: f64,
    /// `slow`: seconds between the bytes of a `Hello`.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// The cluster's pre-shared key, for the attacks after a valid handshake (`absurd`,
    /// `valid`).
    #[arg(long, conflicts_with = "no_auth")]
    pub psk_file: Option<PathBuf>,
    /// The responder runs with `auth: none`.
    #[arg(long)]
    pub no_auth: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Attack {
    /// Random bytes instead of a frame.
    Random,
    /// A frame header announcing a 4 GiB frame.
    Oversize,
    /// A header announcing 1,000 bytes, 10 of them, then EOF.
    Truncated,
    /// A header announcing 1,000 bytes, 10 of them, then nothing, the connection held open.
    Stall,
    /// A valid `Hello`, one byte every `--interval` seconds.
    Slow,
    /// `--count` connections opened at once and held `--hold` seconds, saying nothing.
    Flood,
    /// Handshakes with a random key.
    WrongPsk,
    /// After a valid handshake, session requests for absurd memory and QP counts.
    Absurd,
    /// A prober's valid handshake and a small session request.
    Valid,
    /// Every attack above but `valid`, one after the other.
    All,
}

/// What came back on the connections of one attack.
#[derive(Debug, Default)]
struct Tally {
    outcomes: BTreeMap<String, usize>,
    samples: BTreeMap<String, String>,
    closed_after_ms: Vec<u64>,
}

impl Tally {
    fn add(&mut self, seen: Seen) {
        *self.outcomes.entry(seen.outcome.clone()).or_default() += 1;
        if let Some(detail) = seen.detail {
            self.samples.entry(seen.outcome).or_insert(detail);
        }
        self.closed_after_ms.extend(seen.closed_after_ms);
    }

    fn report(&self, attack: &str, started: Instant, extra: Value) -> Value {
        let closed = &self.closed_after_ms;
        json!({
            "attack": attack,
            "connections": self.outcomes.values().sum::<usize>(),
            "outcomes": self.outcomes,
            "samples": self.samples,
            "closed_after_ms": {
                "min": closed.iter().min(),
                "max": closed.iter().max(),
            },
            "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            "extra": extra,
        })
    }
}

/// What one connection got: `error:REASON`, `closed`, `open`, a message kind, or
/// `connect_failed`.
#[derive(Debug)]
struct Seen {
    outcome: String,
    detail: Option<String>,
    closed_after_ms: Option<u64>,
}

impl Seen {
    fn failed(outcome: &str, detail: impl ToString) -> Seen {
        Seen {
            outcome: outcome.to_owned(),
            detail: Some(detail.to_string()),
            closed_after_ms: None,
        }
    }
}

/// Reads what the responder sends on `stream` until it closes or `wait` passes (from `since`),
/// and names the first frame in it.
async fn watch(mut stream: TcpStream, since: Instant, wait: Duration) -> Seen {
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    let closed = loop {
        match tokio::time::timeout_at((since + wait).into(), stream.read(&mut chunk)).await {
            Err(_) => break false,
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) if got.len() < 64 * 1024 => got.extend_from_slice(&chunk[..n]),
            Ok(Ok(_)) => {}
        }
    };
    let closed_after_ms = closed.then(|| since.elapsed().as_millis() as u64);
    let (outcome, detail) = match control::decode(&got) {
        Ok(Some((Message::Error { reason, message }, _))) => {
            (format!("error:{reason}"), Some(message))
        }
        Ok(Some((other, _))) => (other.kind().to_owned(), None),
        _ if closed => ("closed".to_owned(), None),
        _ => ("open".to_owned(), None),
    };
    Seen {
        outcome,
        detail,
        closed_after_ms,
    }
}

/// A frame header of our version: magic, version, flags, payload length.
fn header(payload_len: u32) -> Vec<u8> {
    let mut h = b"RPXC".to_vec();
    h.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    h.extend_from_slice(&0u16.to_be_bytes());
    h.extend_from_slice(&payload_len.to_be_bytes());
    h
}

fn random_bytes(n: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; n];
    getrandom::getrandom(&mut bytes).expect("random bytes");
    // Never our magic by chance.
    bytes[0] = b'X';
    bytes
}

/// Connects, sends `bytes` (then EOF if `close`), and watches.
async fn send_and_watch(addr: String, bytes: Vec<u8>, close: bool, wait: Duration) -> Seen {
    let since = Instant::now();
    let mut stream = match TcpStream::connect(&addr).await {
        Ok(s) => s,
        Err(e) => return Seen::failed("connect_failed", e),
    };
    if let Err(e) = stream.write_all(&bytes).await {
        return Seen::failed("write_failed", e);
    }
    if close {
        let _ = stream.shutdown().await;
    }
    watch(stream, since, wait).await
}

/// Runs `count` copies of one connection's attack, `parallel` at a time.
async fn many<F, Fut>(count: usize, parallel: usize, one: F) -> Tally
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Seen> + Send + 'static,
{
    let mut tasks = JoinSet::new();
    let mut tally = Tally::default();
    for i in 0..count {
        if tasks.len() >= parallel.max(1) {
            if let Some(seen) = tasks.join_next().await {
                tally.add(seen.unwrap_or_else(|e| Seen::failed("task_failed", e)));
            }
        }
        tasks.spawn(one(i));
    }
    while let Some(seen) = tasks.join_next().await {
        tally.add(seen.unwrap_or_else(|e| Seen::failed("task_failed", e)));
    }
    tally
}

/// A `Hello` frame, sent one byte every `interval`; the responder should close it at its
/// handshake deadline.
async fn slow_hello(addr: String, interval: Duration, wait: Duration) -> (Seen, usize) {
    let hello = control::encode(&Message::Hello {
        node: "slow".into(),
        target: addr.clone(),
        client_nonce: [7; 32],
    })
    .expect("a hello encodes");
    let since = Instant::now();
    let mut stream = match TcpStream::connect(&addr).await {
        Ok(s) => s,
        Err(e) => return (Seen::failed("connect_failed", e), 0),
    };
    let mut sent = 0;
    for byte in &hello {
        if since.elapsed() >= wait || stream.write_all(&[*byte]).await.is_err() {
            break;
        }
        sent += 1;
        // A closed connection shows as a read of 0 while we dribble.
        let mut probe = [0u8; 256];
        match tokio::time::timeout(interval, stream.peek(&mut probe)).await {
            Ok(Ok(_)) => break,
            Ok(Err(_)) => break,
            Err(_) => {}
        }
    }
    (watch(stream, since, wait).await, sent)
}

/// Opens `count` connections at once and holds them `hold`: how many the responder kept, and
/// what the others got.
async fn flood(addr: &str, count: usize, hold: Duration) -> (Tally, Value) {
    let since = Instant::now();
    let connected = Arc::new(AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    for _ in 0..count {
        let (addr, connected) = (addr.to_owned(), Arc::clone(&connected));
        tasks.spawn(async move {
            let started = Instant::now();
            let result = TcpStream::connect(&addr).await;
            connected.fetch_add(1, Ordering::Relaxed);
            match result {
                Ok(stream) => watch(stream, started, hold).await,
                Err(e) => Seen::failed("connect_failed", e),
            }
        });
    }
    // Tells a script on stderr when every connection is open, so it can probe in the middle.
    let announce = tokio::spawn(async move {
        while connected.load(Ordering::Relaxed) < count {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        eprintln!(
            "flood: {count} connections made in {} ms",
            since.elapsed().as_millis()
        );
    });
    let mut tally = Tally::default();
    while let Some(seen) = tasks.join_next().await {
        tally.add(seen.unwrap_or_else(|e| Seen::failed("task_failed", e)));
    }
    announce.abort();
    let within_1s = tally
        .closed_after_ms
        .iter()
        .filter(|&&ms| ms < 1000)
        .count();
    let extra = json!({
        "opened_in_ms": since.elapsed().as_millis() as u64,
        "closed_within_1s": within_1s,
    });
    (tally, extra)
}

/// A handshake that proves a random key: `Hello`, then, whatever the responder's `Challenge`
/// proves, an `Authenticate` with a wrong proof. The responder must refuse it with `auth`.
async fn wrong_psk(addr: String, wait: Duration) -> Seen {
    let since = Instant::now();
    let mut stream = match TcpStream::connect(&addr).await {
        Ok(s) => s,
        Err(e) => return Seen::failed("connect_failed", e),
    };
    let mut nonce = [0u8; 32];
    nonce.copy_from_slice(&random_bytes(32));
    let hello = Message::Hello {
        node: "wrong-psk".into(),
        target: addr.clone(),
        client_nonce: nonce,
    };
    if let Err(e) = stream.write_all(&control::encode(&hello).unwrap()).await {
        return Seen::failed("write_failed", e);
    }
    match read_message(&mut stream, since + wait).await {
        Ok(Message::Challenge { .. }) => {}
        Ok(other) => return Seen::failed(other.kind(), "instead of a challenge"),
        Err(e) => return Seen::failed("no_challenge", e),
    }
    let mut proof = [0u8; 32];
    proof.copy_from_slice(&random_bytes(32));
    let authenticate = Message::Authenticate {
        client_proof: proof,
    };
    if let Err(e) = stream
        .write_all(&control::encode(&authenticate).unwrap())
        .await
    {
        return Seen::failed("write_failed", e);
    }
    watch(stream, since, wait).await
}

/// One clear message from `stream`, before `until`.
async fn read_message(stream: &mut TcpStream, until: Instant) -> Result<Message, String> {
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match control::decode(&got) {
            Ok(Some((msg, _))) => return Ok(msg),
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        match tokio::time::timeout_at(until.into(), stream.read(&mut chunk)).await {
            Err(_) => return Err("timed out".into()),
            Ok(Ok(0)) => return Err("closed".into()),
            Ok(Ok(n)) => got.extend_from_slice(&chunk[..n]),
            Ok(Err(e)) => return Err(e.to_string()),
        }
    }
}

fn control_outcome(e: &ControlError) -> Seen {
    match e {
        ControlError::Peer { reason, message } => Seen::failed(&format!("error:{reason}"), message),
        other => Seen::failed(&format!("failed:{}", other.reason()), other),
    }
}

/// A session request as a prober sends it, for `qps` QPs of `message_size`.
fn request(qps: u32, message_size: u64, region_bytes: u64) -> SessionRequest {
    SessionRequest {
        device: None,
        rail: None,
        qps,
        message_size,
        region_bytes,
        endpoints: (0..qps)
            .map(|q| QpEndpoint {
                qpn: 0x100 + q,
                psn: 1,
                lid: 0,
                gid: [0; 16],
            })
            .collect(),
        mtu: 1024,
        link_rate_bits_per_second: None,
        traffic_class: 0,
        service_level: 0,
        ping_qpn: None,
    }
}

/// The absurd requests: name and JSON payload (some beyond what this build would ever send).
fn absurd_requests() -> Vec<(&'static str, Value)> {
    let as_json = |r: SessionRequest| serde_json::to_value(Message::SessionRequest(r)).unwrap();
    let mut qps_65 = as_json(request(64, 4096, 4096));
    qps_65["qps"] = json!(65);
    let endpoint = qps_65["endpoints"][0].clone();
    qps_65["endpoints"].as_array_mut().unwrap().push(endpoint);
    let mut qps_huge = as_json(request(1, 4096, 4096));
    qps_huge["qps"] = json!(u32::MAX);
    let mut qps_zero = as_json(request(1, 4096, 4096));
    qps_zero["qps"] = json!(0);
    let mut message_max = as_json(request(1, 4096, 4096));
    message_max["message_size"] = json!(u64::MAX);
    message_max["region_bytes"] = json!(u64::MAX);
    vec![
        ("message_2GiB", as_json(request(1, 1 << 31, 1 << 31))),
        ("qps_64_of_1GiB", as_json(request(64, 1 << 30, 1 << 30))),
        ("qps_65", qps_65),
        ("qps_4294967295", qps_huge),
        ("qps_0", qps_zero),
        ("message_u64_max", message_max),
    ]
}

/// A valid handshake, then `payload` as the session request; what came back.
async fn after_handshake(addr: String, auth: AuthMode, payload: Vec<u8>, wait: Duration) -> Seen {
    let mut conn = match connect(&addr, wait).await {
        Ok(c) => c,
        Err(e) => return Seen::failed("connect_failed", e),
    };
    if let Err(e) = client_handshake(&mut conn, "hostile", &auth, wait).await {
        return control_outcome(&e);
    }
    if let Err(e) = conn.send_unchecked_payload(&payload, wait).await {
        return control_outcome(&e);
    }
    match conn.recv(wait).await {
        Ok(Message::Error { reason, message }) => Seen::failed(&format!("error:{reason}"), message),
        Ok(other) => Seen::failed(other.kind(), "answered"),
        Err(e) => control_outcome(&e),
    }
}

fn auth_mode(args: &Args) -> Result<AuthMode, String> {
    match (&args.psk_file, args.no_auth) {
        (Some(path), _) => Psk::load(path)
            .map(AuthMode::psk)
            .map_err(|e| e.to_string()),
        (None, true) => Ok(AuthMode::None),
        (None, false) => Err("absurd and valid need --psk-file FILE or --no-auth".into()),
    }
}

/// Lifts the soft limit on open files to the hard one: a flood holds one descriptor per
/// connection.
pub fn raise_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

pub async fn run(args: &Args, attack: Attack) -> Result<Value, String> {
    let wait = Duration::from_secs_f64(args.wait);
    let addr = args.addr.clone();
    let started = Instant::now();
    let name = attack
        .to_possible_value()
        .map_or_else(|| format!("{attack:?}"), |v| v.get_name().to_owned());
    let report = match attack {
        Attack::Random => many(args.count, args.parallel, |_| {
            send_and_watch(addr.clone(), random_bytes(4096), false, wait)
        })
        .await
        .report(&name, started, json!({})),
        Attack::Oversize => many(args.count, args.parallel, |_| {
            send_and_watch(addr.clone(), header(u32::MAX), false, wait)
        })
        .await
        .report(&name, started, json!({})),
        Attack::Truncated | Attack::Stall => {
            let mut partial = header(1000);
            partial.extend_from_slice(b"{\"type\":\"h");
            let close = attack == Attack::Truncated;
            many(args.count, args.parallel, |_| {
                send_and_watch(addr.clone(), partial.clone(), close, wait)
            })
            .await
            .report(&name, started, json!({}))
        }
        Attack::Slow => {
            let interval = Duration::from_secs_f64(args.interval);
            let (seen, sent) = slow_hello(addr, interval, wait).await;
            let mut tally = Tally::default();
            tally.add(seen);
            tally.report(&name, started, json!({ "bytes_sent": sent }))
        }
        Attack::Flood => {
            let (tally, extra) = flood(&addr, args.count, Duration::from_secs_f64(args.hold)).await;
            tally.report(&name, started, extra)
        }
        Attack::WrongPsk => many(args.count, args.parallel, |_| wrong_psk(addr.clone(), wait))
            .await
            .report(&name, started, json!({})),
        Attack::Absurd => {
            let auth = auth_mode(args)?;
            let mut by_request = serde_json::Map::new();
            let mut tally = Tally::default();
            for (what, payload) in absurd_requests() {
                let bytes = serde_json::to_vec(&payload).unwrap();
                let seen = after_handshake(addr.clone(), auth.clone(), bytes, wait).await;
                by_request.insert(
                    what.to_owned(),
                    json!({ "outcome": seen.outcome, "detail": seen.detail }),
                );
                tally.add(seen);
            }
            tally.report(&name, started, Value::Object(by_request))
        }
        Attack::Valid => {
            let auth = auth_mode(args)?;
            let payload =
                serde_json::to_vec(&Message::SessionRequest(request(1, 65536, 65536))).unwrap();
            let mut tally = Tally::default();
            tally.add(after_handshake(addr, auth, payload, wait).await);
            tally.report(&name, started, json!({}))
        }
        Attack::All => return Err("`all` runs the others".into()),
    };
    Ok(report)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    raise_fd_limit();
    let attacks = match args.attack {
        Attack::All => {
            let mut all = vec![
                Attack::Random,
                Attack::Oversize,
                Attack::Truncated,
                Attack::Stall,
                Attack::Slow,
                Attack::WrongPsk,
                Attack::Flood,
            ];
            if args.psk_file.is_some() || args.no_auth {
                all.insert(6, Attack::Absurd);
            }
            all
        }
        one => vec![one],
    };
    for attack in attacks {
        match run(&args, attack).await {
            Ok(report) => println!("{report}"),
            Err(e) => {
                eprintln!("hostile: {e}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    std::process::ExitCode::SUCCESS
}
