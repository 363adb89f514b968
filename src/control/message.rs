//! The messages of the control protocol, and the checks every decoded message must pass.
//!
//! The set is one serde enum, internally tagged by `"type"` (snake_case), so a frame's payload is a
//! self-describing JSON object such as `{"type":"burst_start","burst_id":7,"seed":42}`. Only that
//! object form decodes, at every level: serde would also take a struct or a tagged enum as a JSON
//! array (`["burst_start",7,42]`), a second wire form that no documentation describes and no peer
//! sends, so `codec::decode` and the nested fields' deserializers refuse it. Adding a
//! message kind is adding a variant; a peer that does not know a kind fails to decode it with a
//! `Malformed` error (never a panic). Unknown *fields* are ignored on purpose, so a later revision
//! of protocol v2 can add an optional field (with `#[serde(default)]`) without breaking old peers;
//! anything incompatible must bump [`PROTOCOL_VERSION`](super::codec::PROTOCOL_VERSION).
//!
//! Byte arrays (nonces, proofs, GIDs) travel as lowercase hex strings: readable in a packet capture
//! and a third of the size of a JSON array of numbers.
//!
//! Validation lives in exactly one place, [`Message::validate`], which both `codec::encode` and
//! `codec::decode` call: a message that reaches the responder or prober is structurally sound
//! (QP counts in range, one endpoint per QP, 24-bit QPNs/PSNs, a real IB MTU), and we never put an
//! invalid message on the wire ourselves. Policy limits (pinned memory, allowed devices) are the
//! responder's job, not the codec's.
//!
//! # Text from the peer
//!
//! Every string in a message ends up in a terminal (`probe` output), a log line or a metric label,
//! and a responder can send an `Error` before the prober has authenticated it. So no string gets
//! past `codec::decode` with a character a terminal or log reader would act on
//! ([`is_unsafe_char`]: C0 and C1 controls such as ESC, CR, LF, NUL and DEL, the Unicode line and
//! paragraph separators, and the bidirectional overrides and isolates). Two kinds of string, two
//! treatments:
//!
//! * Names (`Hello.node`, the `device` of `SessionRequest` and `SessionAccept`, the counter names
//!   of `BurstResult`, the node and device names of an [`Identity`]) identify things and become
//!   label values: [`Message::validate`] rejects a name with such a character or any whitespace,
//!   because an escaped name would be a different name, and a space lets a name pose as a second
//!   `key=value` pair in a log line. The label values of an [`Identity`] may hold spaces (as the
//!   config's may) but are refused with such a character for the same reason.
//! * Free text (`Error.message`, the `detail` of a failed `BurstOutcome` and of `BurstResult`) is
//!   read by people, and refusing the message would hide why the peer gave up: the decoder keeps it
//!   and escapes each such character as Rust's `\u{1b}` ([`escape_unsafe_chars`]). Backslashes are
//!   left alone, so escaping twice changes nothing and a re-encoded message decodes to itself.
//!
//! `encode` sends free text as it is; escaping is the receiver's job, done once, in
//! [`Message::escape_free_text`], which `codec::decode` calls on every message.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::reason::ErrorReason;
pub use crate::text::{escape_unsafe_chars, is_unsafe_char};

/// 32 random bytes chosen by one side of the handshake; see `auth`.
pub type Nonce = [u8; 32];
/// An HMAC-SHA256 tag proving knowledge of the pre-shared key; see `auth`.
pub type Proof = [u8; 32];

/// Most QPs one session may ask for: enough to spread a probe over many ECMP paths, small enough that
/// a single request cannot make a responder create an unbounded number of QPs.
pub const MAX_QPS: u32 = 64;
/// Largest RDMA message (RC allows at most 2^31 bytes per work request).
pub const MAX_MESSAGE_SIZE: u64 = 1 << 31;
/// Longest node or device name accepted (DNS names and Kubernetes node names fit in 253).
pub const MAX_NAME_LEN: usize = 255;
/// Longest `BurstStart.deadline_ms` a responder accepts: the longest burst a prober can plan
/// (`burst::plan::MAX_BURST_DURATION`, a count burst's deadline being twice its planned length)
/// plus 10 minutes of control timeout. A longer one would let one prober keep a device's burst
/// claimed, and every other prober get `busy`, for as long as it likes.
pub const MAX_DEADLINE_MS: u64 = (crate::burst::plan::MAX_BURST_DURATION.as_millis() as u64)
    * crate::burst::run::DEADLINE_FACTOR as u64
    + 10 * 60 * 1000;
/// Longest `Hello.target`: a DNS name (253) with `:` and a port.
pub const MAX_TARGET_LEN: usize = 253 + 6;
/// Path MTUs that exist in InfiniBand/RoCE (`ibv_mtu`), in bytes.
pub const VALID_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];
/// Most keys a node holds at once: its key and, during a rollover, the previous one
/// (docs/security.md, "Rotating the key").
pub const MAX_KEYS: usize = 2;
/// QPNs and PSNs are 24-bit quantities on the wire of the RDMA transport.
const MAX_24BIT: u32 = (1 << 24) - 1;
/// Most labels an [`Identity`] carries: far above the few a node has (rack, ToR, pod), and small
/// enough that the largest identity fits a frame with room to spare.
pub const MAX_IDENTITY_LABELS: usize = 32;
/// Most devices an [`Identity`] lists: one per rail of the largest GPU nodes, several times over.
pub const MAX_IDENTITY_DEVICES: usize = 32;
/// Longest label value of an [`Identity`], in characters: the config's limit.
pub const MAX_LABEL_VALUE_CHARS: usize = 253;

/// One message of the control protocol. See the module docs for the wire form.
///
/// The conversation (prober = client, responder = server):
///
/// ```text
/// Hello ──────────────▶                       (no secrets: node name and a nonce)
///       ◀────────────── Challenge            (server nonce + server proof; client verifies)
/// Authenticate ───────▶                       (client proof; server verifies)
///       ◀────────────── AuthOk | Error{auth}     (AuthOk: the first protected frame, with the
///                                             responder's identity)
/// SessionRequest ─────▶                       (first QP numbers/GIDs: only after AuthOk)
///       ◀────────────── SessionAccept | Busy | Error
/// BurstStart ─────────▶
///       ◀────────────── BurstReady | Busy | Error
///   ... RDMA WRITEs, closing WRITE WITH IMMEDIATE ...
/// BurstEnd ───────────▶
///       ◀────────────── BurstResult
/// (BurstStart ... again on the warm session, or Close)
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// Client → server, first message. Carries nothing secret.
    Hello {
        /// The prober's node name (for logs and the responder's `peer` label). Covered by both
        /// proofs (the handshake's transcript, `auth.rs`).
        node: String,
        /// The address the prober meant to reach (`host:port`, as it dialed it). Covered by both
        /// proofs, so a responder can tell a connection redirected to it from one meant for it.
        target: String,
        /// Fresh random nonce; binds the server's proof to this connection.
        #[serde(with = "hex_array")]
        client_nonce: Nonce,
    },
    /// Server → client: the server's nonce and its proof of the key, so the client authenticates the
    /// server too (mutual authentication) before it sends anything about its QPs.
    Challenge {
        #[serde(with = "hex_array")]
        server_nonce: Nonce,
        /// `HMAC-SHA256(proof_key, "rdma-probe server" || transcript)` (`auth.rs`), one per key the
        /// server holds (1..=[`MAX_KEYS`]: two during a key rollover), so a client holding either
        /// key can check the server before the server knows which key the client has.
        #[serde(with = "hex_list")]
        server_proofs: Vec<Proof>,
    },
    /// Client → server: the client's proof of the key.
    Authenticate {
        /// `HMAC-SHA256(proof_key, "rdma-probe client" || transcript with the server's proofs)`.
        #[serde(with = "hex_array")]
        client_proof: Proof,
    },
    /// Server → client: authentication succeeded; the session may now be negotiated. The first
    /// protected frame, so the responder's identity travels encrypted (unless `auth: none`).
    AuthOk {
        /// What the responder says about itself; absent from a responder that does not tell (an
        /// earlier revision of protocol v2). Old probers ignore the field.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "object_form::option"
        )]
        identity: Option<Identity>,
    },
    /// Client → server: set up a probe session (QPs and memory regions) on the responder.
    SessionRequest(SessionRequest),
    /// Server → client: the responder's half of the QP connection and where to write.
    SessionAccept(SessionAccept),
    /// Client → server: a burst is about to start; the responder prepares its region (pattern
    /// check for `seed`) and snapshots its port counters.
    BurstStart {
        burst_id: u64,
        seed: u64,
        /// How long the prober lets the burst run before abandoning it (its planned length plus
        /// slack); `None` for an unpaced count burst, which takes as long as the link needs. The
        /// control channel is silent during a burst: the responder waits at least this long (plus
        /// its control timeout) for `BurstEnd` before it gives up on the session.
        #[serde(default)]
        deadline_ms: Option<u64>,
    },
    /// Server → client: ready for the burst announced by `burst_id`.
    BurstReady { burst_id: u64 },
    /// Server → client: the responder is serving someone else or out of resources; not a failure
    /// (counted as `deferred{reason="busy"}`).
    Busy { retry_after_ms: u32 },
    /// Client → server: the prober saw its last completion (or gave up).
    BurstEnd {
        burst_id: u64,
        #[serde(deserialize_with = "object_form::deserialize")]
        outcome: BurstOutcome,
        /// WRITEs posted on each QP: the responder verifies the last slots' worth of each.
        #[serde(default)]
        posted_per_qp: Vec<u64>,
    },
    /// Server → client: the responder's verdict on the data and its counter increases.
    BurstResult(BurstResult),
    /// Either direction: a failure with a metric reason. The sender closes the connection after it
    /// unless the reason leaves the session usable.
    Error {
        reason: ErrorReason,
        message: String,
    },
    /// Either direction: orderly end of the session.
    Close,
}

/// InfiniBand service levels are 4 bits.
pub const MAX_SERVICE_LEVEL: u8 = 15;

/// What a responder says about itself after the prober proved the key: its node name, its
/// node's labels and the devices it serves with their rails. The prober names a peer known by
/// its address alone with this in `rdma_probe_peer_info`, and skips the paths on rails the peer
/// has no device on (docs/metrics.md, "Peer identity").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// The responder's node name (its config's `node`, or `--node`).
    pub node: String,
    /// Its node's static labels: its own entry in the shared `peers` list, overridden by its
    /// `labels` (at most [`MAX_IDENTITY_LABELS`]).
    #[serde(default, deserialize_with = "object_form::unique_map")]
    pub labels: BTreeMap<String, String>,
    /// The devices it serves, in its order (at most [`MAX_IDENTITY_DEVICES`]).
    #[serde(default, deserialize_with = "object_form::vec")]
    pub devices: Vec<IdentityDevice>,
}

/// One device a responder serves, as its [`Identity`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityDevice {
    pub name: String,
    pub port: u8,
    /// The rail it answers for; `None`: not on a rail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rail: Option<u16>,
}

impl Identity {
    /// Whether one of its devices is on `rail`: the device a session request for that rail gets
    /// (the responder's `select_device` rule).
    pub fn serves_rail(&self, rail: u16) -> bool {
        self.devices.iter().any(|d| d.rail == Some(rail))
    }

    /// Its devices as `mlx5_0 (rail 0), mlx5_1 (rail 1)`, for messages.
    pub fn describe_devices(&self) -> String {
        let devices: Vec<String> = self
            .devices
            .iter()
            .map(|d| match d.rail {
                Some(rail) => format!("{} (rail {rail})", d.name),
                None => format!("{} (no rail)", d.name),
            })
            .collect();
        devices.join(", ")
    }

    /// The identity a responder tells, within what [`validate`](Identity::validate) accepts:
    /// labels that break a rule, and labels and devices beyond the limits, are left out (in
    /// order), each described in the second value for the responder's log. A node name that is
    /// not valid stays, and fails `validate`.
    pub fn bounded(
        node: &str,
        labels: &BTreeMap<String, String>,
        devices: impl IntoIterator<Item = IdentityDevice>,
    ) -> (Identity, Vec<String>) {
        let mut left_out = Vec::new();
        let mut kept = BTreeMap::new();
        for (name, value) in labels {
            if let Err(e) = check_label("labels", name, value) {
                left_out.push(e);
            } else if kept.len() == MAX_IDENTITY_LABELS {
                left_out.push(format!(
                    "label {name}: beyond the first {MAX_IDENTITY_LABELS} labels"
                ));
            } else {
                kept.insert(name.clone(), value.clone());
            }
        }
        let mut devices: Vec<IdentityDevice> = devices.into_iter().collect();
        for device in devices.iter().skip(MAX_IDENTITY_DEVICES) {
            left_out.push(format!(
                "device {}: beyond the first {MAX_IDENTITY_DEVICES} devices",
                device.name
            ));
        }
        devices.truncate(MAX_IDENTITY_DEVICES);
        let identity = Identity {
            node: node.to_owned(),
            labels: kept,
            devices,
        };
        (identity, left_out)
    }

    /// Structural checks of an identity from the network; see "Text from the peer".
    pub fn validate(&self) -> Result<(), String> {
        check_name("auth_ok.identity.node", &self.node)?;
        if self.labels.len() > MAX_IDENTITY_LABELS {
            return Err(format!(
                "auth_ok.identity.labels has {} entries, at most {MAX_IDENTITY_LABELS} allowed",
                self.labels.len()
            ));
        }
        for (name, value) in &self.labels {
            check_label("auth_ok.identity.labels", name, value)?;
        }
        if self.devices.len() > MAX_IDENTITY_DEVICES {
            return Err(format!(
                "auth_ok.identity.devices has {} entries, at most {MAX_IDENTITY_DEVICES} allowed",
                self.devices.len()
            ));
        }
        for (i, device) in self.devices.iter().enumerate() {
            check_name(&format!("auth_ok.identity.devices[{i}].name"), &device.name)?;
            if device.port == 0 {
                return Err(format!(
                    "auth_ok.identity.devices[{i}].port is 0; ports count from 1"
                ));
            }
        }
        Ok(())
    }
}

/// A label of an [`Identity`]: a name as the config allows it (Prometheus' rule, none of the
/// exporter's own labels), a value without control characters.
fn check_label(field: &str, name: &str, value: &str) -> Result<(), String> {
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "{field}: a label name is {} bytes long, at most {MAX_NAME_LEN} allowed",
            name.len()
        ));
    }
    // The config's rule quotes the name; escaped again so that no character of it gets through
    // whatever `Debug` leaves as it is.
    crate::label::check_label_name(name)
        .map_err(|e| format!("{field}: {}", escape_unsafe_chars(&e)))?;
    let field = format!("{field}.{name}");
    if value.is_empty() {
        return Err(format!("{field} is empty"));
    }
    if value.chars().count() > MAX_LABEL_VALUE_CHARS {
        return Err(format!(
            "{field} is longer than {MAX_LABEL_VALUE_CHARS} characters"
        ));
    }
    if let Some(c) = value.chars().find(|&c| is_unsafe_char(c)) {
        return Err(format!(
            "{field} contains {}: label values may not contain control characters",
            c.escape_unicode()
        ));
    }
    Ok(())
}

/// What the prober asks the responder to set up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRequest {
    /// Responder device to use; `None` lets the responder choose (by `rail`, else its first
    /// device).
    pub device: Option<String>,
    /// The rail whose device should answer (the prober's own rail), when `device` is not named.
    /// Absent (a prober from before this field, or one with no rail): the responder's first
    /// device. See docs/architecture.md, "One probe, end to end".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rail: Option<u16>,
    /// Number of QPs (1..=[`MAX_QPS`]); `endpoints` has one entry per QP.
    pub qps: u32,
    /// Bytes per RDMA WRITE.
    pub message_size: u64,
    /// Bytes of remote memory to register per QP (at least one message).
    pub region_bytes: u64,
    /// The prober's QPs.
    #[serde(deserialize_with = "object_form::vec")]
    pub endpoints: Vec<QpEndpoint>,
    /// The prober's active path MTU in bytes (one of [`VALID_MTUS`]).
    pub mtu: u32,
    /// The prober port's link rate, if known; the unpaced target is the lower of both ends.
    pub link_rate_bits_per_second: Option<u64>,
    /// Traffic class (RoCE: DSCP << 2) and service level of the data. The responder sends its
    /// ACKs with the same, so probing a lossless class tests that class in both directions.
    /// Absent (a prober from before these fields): 0.
    #[serde(default)]
    pub traffic_class: u8,
    #[serde(default)]
    pub service_level: u8,
    /// The prober device's ping QP (absent from a prober without pings): the responder answers
    /// its pings at the GID of `endpoints`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ping_qpn: Option<u32>,
}

/// What the responder set up for a [`SessionRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionAccept {
    /// The responder device actually used (the `peer_device` label).
    pub device: String,
    /// The responder's QPs, in the order of the request's endpoints.
    #[serde(deserialize_with = "object_form::vec")]
    pub endpoints: Vec<QpEndpoint>,
    /// One remote-writable region per QP, in the same order.
    #[serde(deserialize_with = "object_form::vec")]
    pub regions: Vec<RemoteRegion>,
    /// The responder's active MTU in bytes; the path MTU is the minimum of both ends and the config.
    pub mtu: u32,
    /// The responder port's link rate, if known.
    pub link_rate_bits_per_second: Option<u64>,
    /// Where the responder device answers pings (absent from a responder without pings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ping: Option<PingEndpoint>,
}

/// The responder device's UD QP that answers pings, on the same port and GID as the session's
/// QPs, and the id of the ping key this session agreed on (docs/architecture.md, "Pings").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PingEndpoint {
    /// UD QP number (24 bits).
    pub qpn: u32,
    /// Which key tags this session's pings (the responder's name for it).
    pub key_id: u32,
}

/// The addressing information of one RC QP, exchanged like perftest does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpEndpoint {
    /// QP number (24 bits).
    pub qpn: u32,
    /// Initial packet sequence number (24 bits).
    pub psn: u32,
    /// Port LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The port's GID as chosen per device/port (not derived from the control connection).
    #[serde(with = "hex_array")]
    pub gid: [u8; 16],
}

/// A memory region the prober may RDMA WRITE into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteRegion {
    pub addr: u64,
    pub rkey: u32,
    pub len: u64,
}

/// How the prober's side of a burst ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum BurstOutcome {
    /// All WRs, including the closing WRITE WITH IMMEDIATE, completed successfully.
    Completed,
    /// The burst failed locally; the responder tears the session down (an errored QP is never reused).
    Failed {
        reason: ErrorReason,
        #[serde(default)]
        detail: String,
    },
}

/// The responder's report on one burst.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BurstResult {
    pub burst_id: u64,
    /// Whether the written pattern matched the burst's seed.
    pub validated: bool,
    /// Why validation failed or was skipped, for logs.
    pub detail: Option<String>,
    /// Increases of allowlisted port counters on the responder during the burst (`side="remote"`).
    pub counters: Vec<(String, u64)>,
    /// How many messages' data the responder checked (each at its own offset).
    #[serde(default)]
    pub verified_messages: u64,
}

impl Message {
    /// The message kind as it appears in the `type` field; for logs and "unexpected message" errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Hello { .. } => "hello",
            Message::Challenge { .. } => "challenge",
            Message::Authenticate { .. } => "authenticate",
            Message::AuthOk { .. } => "auth_ok",
            Message::SessionRequest(_) => "session_request",
            Message::SessionAccept(_) => "session_accept",
            Message::BurstStart { .. } => "burst_start",
            Message::BurstReady { .. } => "burst_ready",
            Message::Busy { .. } => "busy",
            Message::BurstEnd { .. } => "burst_end",
            Message::BurstResult(_) => "burst_result",
            Message::Error { .. } => "error",
            Message::Close => "close",
        }
    }

    /// Cheap structural checks; `Err` says what is wrong in words an operator can act on.
    ///
    /// Called by the codec on both encode and decode, so callers never need to call it themselves.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Message::Hello { node, target, .. } => {
                check_name("hello.node", node)?;
                check_name_up_to("hello.target", target, MAX_TARGET_LEN)
            }
            Message::Challenge { server_proofs, .. }
                if server_proofs.is_empty() || server_proofs.len() > MAX_KEYS =>
            {
                Err(format!(
                    "challenge.server_proofs has {} entries, 1..={MAX_KEYS} allowed",
                    server_proofs.len()
                ))
            }
            Message::AuthOk {
                identity: Some(identity),
            } => identity.validate(),
            Message::SessionRequest(r) => r.validate(),
            Message::SessionAccept(a) => a.validate(),
            Message::BurstEnd { posted_per_qp, .. } if posted_per_qp.len() > MAX_QPS as usize => {
                Err(format!(
                    "burst_end.posted_per_qp has {} entries, more than {MAX_QPS} QPs",
                    posted_per_qp.len()
                ))
            }
            Message::BurstResult(r) => r.validate(),
            Message::BurstStart {
                deadline_ms: Some(ms),
                ..
            } if *ms > MAX_DEADLINE_MS => Err(format!(
                "burst_start.deadline_ms is {ms}, at most {MAX_DEADLINE_MS} allowed"
            )),
            _ => Ok(()),
        }
    }

    /// Escapes the free text of a message that came from the peer, so that no terminal or log line
    /// gets a raw control character from it; names are [`validate`]'s business.
    /// See "Text from the peer" in the module docs. `codec::decode` calls it on every message.
    ///
    /// [`validate`]: Message::validate
    pub fn escape_free_text(&mut self) {
        match self {
            Message::Error { message, .. } => escape_in_place(message),
            Message::BurstEnd {
                outcome: BurstOutcome::Failed { detail, .. },
                ..
            } => escape_in_place(detail),
            Message::BurstResult(BurstResult {
                detail: Some(detail),
                ..
            }) => escape_in_place(detail),
            _ => {}
        }
    }
}

fn escape_in_place(text: &mut String) {
    let escaped = match escape_unsafe_chars(text) {
        Cow::Borrowed(_) => return,
        Cow::Owned(escaped) => escaped,
    };
    *text = escaped;
}

impl SessionRequest {
    fn validate(&self) -> Result<(), String> {
        if let Some(device) = &self.device {
            check_name("session_request.device", device)?;
        }
        if self.qps == 0 || self.qps > MAX_QPS {
            return Err(format!(
                "session_request.qps must be 1..={MAX_QPS}, got {}",
                self.qps
            ));
        }
        if self.endpoints.len() != self.qps as usize {
            return Err(format!(
                "session_request has {} endpoints for {} QPs",
                self.endpoints.len(),
                self.qps
            ));
        }
        if self.message_size == 0 || self.message_size > MAX_MESSAGE_SIZE {
            return Err(format!(
                "session_request.message_size must be 1..={MAX_MESSAGE_SIZE}, got {}",
                self.message_size
            ));
        }
        if self.service_level > MAX_SERVICE_LEVEL {
            return Err(format!(
                "session_request.service_level must be 0..={MAX_SERVICE_LEVEL}, got {}",
                self.service_level
            ));
        }
        if self.region_bytes < self.message_size {
            return Err(format!(
                "session_request.region_bytes ({}) is smaller than one message ({})",
                self.region_bytes, self.message_size
            ));
        }
        check_mtu("session_request.mtu", self.mtu)?;
        check_ping_qpn("session_request.ping_qpn", self.ping_qpn)?;
        check_endpoints("session_request", &self.endpoints)
    }
}

impl SessionAccept {
    fn validate(&self) -> Result<(), String> {
        check_name("session_accept.device", &self.device)?;
        let n = self.endpoints.len();
        if n == 0 || n > MAX_QPS as usize {
            return Err(format!(
                "session_accept must have 1..={MAX_QPS} endpoints, got {n}"
            ));
        }
        if self.regions.len() != n {
            return Err(format!(
                "session_accept has {} regions for {n} endpoints",
                self.regions.len()
            ));
        }
        if let Some(i) = self.regions.iter().position(|r| r.len == 0) {
            return Err(format!("session_accept.regions[{i}] is empty"));
        }
        check_mtu("session_accept.mtu", self.mtu)?;
        check_ping_qpn("session_accept.ping.qpn", self.ping.map(|p| p.qpn))?;
        check_endpoints("session_accept", &self.endpoints)
    }
}

impl BurstResult {
    fn validate(&self) -> Result<(), String> {
        for (i, (name, _)) in self.counters.iter().enumerate() {
            check_name(&format!("burst_result.counters[{i}]"), name)?;
        }
        Ok(())
    }
}

/// Names become log fields and label values; see "Text from the peer" in the module docs.
fn check_name(field: &str, name: &str) -> Result<(), String> {
    check_name_up_to(field, name, MAX_NAME_LEN)
}

fn check_name_up_to(field: &str, name: &str, max: usize) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{field} is empty"));
    }
    if name.len() > max {
        return Err(format!(
            "{field} is {} bytes long, at most {max} allowed",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|&c| is_unsafe_char(c) || c.is_whitespace())
    {
        // The escaped form only: the name itself is what must not reach the log.
        return Err(format!(
            "{field} contains {}: names may not contain whitespace or control characters",
            c.escape_unicode()
        ));
    }
    Ok(())
}

fn check_mtu(field: &str, mtu: u32) -> Result<(), String> {
    if VALID_MTUS.contains(&mtu) {
        Ok(())
    } else {
        Err(format!("{field} must be one of {VALID_MTUS:?}, got {mtu}"))
    }
}

/// A UD QP number is 24 bits, and 0 is the special QP0.
fn check_ping_qpn(field: &str, qpn: Option<u32>) -> Result<(), String> {
    match qpn {
        Some(q) if q == 0 || q > 0x00ff_ffff => {
            Err(format!("{field} {q} is not a 24-bit QP number"))
        }
        _ => Ok(()),
    }
}

fn check_endpoints(msg: &str, endpoints: &[QpEndpoint]) -> Result<(), String> {
    for (i, ep) in endpoints.iter().enumerate() {
        if ep.qpn > MAX_24BIT {
            return Err(format!(
                "{msg}.endpoints[{i}].qpn {} does not fit in 24 bits",
                ep.qpn
            ));
        }
        if ep.psn > MAX_24BIT {
            return Err(format!(
                "{msg}.endpoints[{i}].psn {} does not fit in 24 bits",
                ep.psn
            ));
        }
    }
    Ok(())
}

/// Serde adapter for a struct or tagged enum nested in a message: the JSON-object form only.
///
/// Derived `Deserialize` impls also take a JSON array of the field values (and internally tagged
/// enums an array that starts with the tag), which would make the field order a second, undocumented
/// wire format. Asking the deserializer for a map instead of "anything" leaves the derived visitor
/// unchanged but makes an array an "invalid type" error. `codec::decode` applies the same to the
/// whole payload.
pub(crate) mod object_form {
    use std::collections::BTreeMap;
    use std::fmt;

    use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
    use serde::forward_to_deserialize_any;

    pub fn deserialize<'de, D, T>(deserializer: D) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: Deserialize<'de>,
    {
        T::deserialize(MapOnly(deserializer))
    }

    /// An optional object (`null` or absent: `None`).
    pub fn option<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
    where
        D: Deserializer<'de>,
        T: Deserialize<'de>,
    {
        let item = Option::<Object<T>>::deserialize(deserializer)?;
        Ok(item.map(|Object(item)| item))
    }

    /// An object of strings, each key once: serde's maps keep the last of a repeated key without
    /// a word, and a label given twice by a peer has no one right value.
    pub fn unique_map<'de, D>(deserializer: D) -> Result<BTreeMap<String, String>, D::Error>
    where
        D: Deserializer<'de>,
    {
        struct Unique;
        impl<'de> Visitor<'de> for Unique {
            type Value = BTreeMap<String, String>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of strings")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = BTreeMap::new();
                while let Some((key, value)) = map.next_entry::<String, String>()? {
                    if out.contains_key(&key) {
                        return Err(de::Error::custom(format_args!("{key:?} is given twice")));
                    }
                    out.insert(key, value);
                }
                Ok(out)
            }
        }
        deserializer.deserialize_map(Unique)
    }

    /// A list of objects.
    pub fn vec<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
    where
        D: Deserializer<'de>,
        T: Deserialize<'de>,
    {
        let items = Vec::<Object<T>>::deserialize(deserializer)?;
        Ok(items.into_iter().map(|Object(item)| item).collect())
    }

    struct Object<T>(T);

    impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserialize(deserializer).map(Object)
        }
    }

    /// Answers every request for a value (`deserialize_struct` from derived structs,
    /// `deserialize_any` from internally tagged enums) with the inner deserializer's map.
    struct MapOnly<D>(D);

    impl<'de, D: Deserializer<'de>> Deserializer<'de> for MapOnly<D> {
        type Error = D::Error;

        fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            self.0.deserialize_map(visitor)
        }

        fn is_human_readable(&self) -> bool {
            self.0.is_human_readable()
        }

        forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
            identifier ignored_any
        }
    }
}

/// Serde adapter: `Vec<[u8; N]>` as a list of hex strings (each as [`hex_array`] writes it).
pub(crate) mod hex_list {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(transparent)]
    struct Item<const N: usize>(#[serde(with = "super::hex_array")] [u8; N]);

    pub fn serialize<S: Serializer, const N: usize>(
        items: &[[u8; N]],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(items.iter().map(|bytes| Item(*bytes)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>, const N: usize>(
        deserializer: D,
    ) -> Result<Vec<[u8; N]>, D::Error> {
        let items = Vec::<Item<N>>::deserialize(deserializer)?;
        Ok(items.into_iter().map(|Item(bytes)| bytes).collect())
    }
}

/// Serde adapter: `[u8; N]` as a lowercase hex string of exactly `2 * N` characters.
pub(crate) mod hex_array {
    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;

    const DIGITS: &[u8; 16] = b"0123456789abcdef";

    pub fn serialize<S: Serializer, const N: usize>(
        bytes: &[u8; N],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let mut s = String::with_capacity(2 * N);
        for b in bytes {
            s.push(DIGITS[usize::from(b >> 4)] as char);
            s.push(DIGITS[usize::from(b & 0x0f)] as char);
        }
        serializer.serialize_str(&s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>, const N: usize>(
        deserializer: D,
    ) -> Result<[u8; N], D::Error> {
        deserializer.deserialize_str(HexVisitor::<N>)
    }

    struct HexVisitor<const N: usize>;

    impl<const N: usize> Visitor<'_> for HexVisitor<N> {
        type Value = [u8; N];

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a hex string of {} characters", 2 * N)
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            let raw = v.as_bytes();
            if raw.len() != 2 * N {
                return Err(E::invalid_length(raw.len(), &self));
            }
            let mut out = [0u8; N];
            for (o, pair) in out.iter_mut().zip(raw.chunks_exact(2)) {
                let hi = nibble(pair[0])
                    .ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self))?;
                let lo = nibble(pair[1])
                    .ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self))?;
                *o = (hi << 4) | lo;
            }
            Ok(out)
        }
    }

    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_chars_are_controls_separators_and_bidi_formatting() {
        for c in [
            '\0', '\t', '\n', '\r', '\u{1b}', '\u{7f}', '\u{85}', '\u{9b}', '\u{2028}', '\u{2029}',
            '\u{61c}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{202e}', '\u{2066}', '\u{2069}',
        ] {
            assert!(is_unsafe_char(c), "{c:?}");
        }
        for c in [
            ' ',
            'a',
            '\\',
            '"',
            '\u{e9}',
            '\u{a0}',
            '\u{200b}',
            '\u{1f600}',
            '\u{fffd}',
        ] {
            assert!(!is_unsafe_char(c), "{c:?}");
        }
    }

    #[test]
    fn escaping_shows_the_code_point_and_is_idempotent() {
        assert!(matches!(
            escape_unsafe_chars("plain \\ text \u{e9}"),
            Cow::Borrowed("plain \\ text \u{e9}")
        ));
        let once = escape_unsafe_chars("a\u{1b}[0m\r\n\u{202e}b\0");
        assert_eq!(once, r"a\u{1b}[0m\u{d}\u{a}\u{202e}b\u{0}");
        assert!(matches!(escape_unsafe_chars(&once), Cow::Borrowed(_)));
    }

    #[test]
    fn only_free_text_is_escaped() {
        let mut msg = Message::Error {
            reason: ErrorReason::PeerError,
            message: "line 1\nline 2".into(),
        };
        msg.escape_free_text();
        assert_eq!(
            msg,
            Message::Error {
                reason: ErrorReason::PeerError,
                message: r"line 1\u{a}line 2".into(),
            }
        );
        // A name is never rewritten, only rejected: escaping it would make another name.
        let mut hello = Message::Hello {
            node: "a\u{1b}b".into(),
            target: "t:1".into(),
            client_nonce: [0; 32],
        };
        hello.escape_free_text();
        assert!(matches!(&hello, Message::Hello { node, .. } if node == "a\u{1b}b"));
        assert!(hello.validate().is_err());
    }

    #[test]
    fn a_burst_deadline_beyond_the_longest_burst_is_refused() {
        let start = |deadline_ms| Message::BurstStart {
            burst_id: 1,
            seed: 2,
            deadline_ms,
        };
        assert!(start(None).validate().is_ok());
        assert!(start(Some(MAX_DEADLINE_MS)).validate().is_ok());
        // An hour-long burst's deadline fits.
        assert!(start(Some(2 * 3600 * 1000 + 30_000)).validate().is_ok());
        for ms in [MAX_DEADLINE_MS + 1, u64::MAX] {
            let err = start(Some(ms)).validate().unwrap_err();
            assert!(err.contains("burst_start.deadline_ms"), "{err}");
            // Refused where the responder reads it, before it claims the device's burst.
            let frame = crate::control::codec::encode_with_version(
                &Message::Close,
                crate::control::codec::PROTOCOL_VERSION,
            )
            .unwrap();
            let json = serde_json::to_vec(&start(Some(ms))).unwrap();
            let mut raw = frame[..crate::control::codec::HEADER_LEN].to_vec();
            raw[8..12].copy_from_slice(&(json.len() as u32).to_be_bytes());
            raw.extend_from_slice(&json);
            assert!(crate::control::codec::decode(&raw).is_err());
        }
    }
}
