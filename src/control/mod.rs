//! The out-of-band control protocol over TCP between a prober (client) and a responder (server).
//!
//! Layers, each usable on its own:
//!
//! * [`message`]: the message types, their structural validation (serde), and the policy for the
//!   strings a peer sends, which end up in terminals, logs and labels.
//! * [`codec`]: versioned, length-prefixed frames; pure encode/decode with no I/O, so it is unit-
//!   tested, property-tested, and fuzzed: `control_decode` from raw frames (seeded with
//!   `fuzz/seeds/control_decode/`) and `control_structured` from messages built field by field,
//!   both in `fuzz/fuzz_targets/` and run with `scripts/fuzz`.
//! * [`auth`]: the pre-shared keys, nonces and HMAC proofs of the mutual handshake (pure).
//! * [`seal`]: the frames after the handshake, encrypted and authenticated with keys derived
//!   from it (pure; fuzzed by `control_sealed`).
//! * [`connection`]: tokio TCP I/O with a deadline on every read and write, and the client/server
//!   handshakes.
//!
//! Security property (docs/security.md): the handshake (`Hello`, `Challenge`, `Authenticate`)
//! carries only a node name, nonces and MACs. QP numbers, rkeys and addresses travel in
//! `SessionRequest`/`SessionAccept`, which a caller sends only after [`client_handshake`] /
//! [`server_handshake`] returned `Ok`, and from then on every frame is protected (unless both
//! ends run with `auth: none`). The responder's identity (node name, labels, devices and rails)
//! travels in `AuthOk`, the first protected frame, so only a prober that proved the key learns
//! it.

pub mod auth;
pub mod codec;
pub mod connection;
#[cfg(test)]
mod fuzz_corpus;
pub mod message;
pub mod seal;

pub use auth::{AuthMode, Keys, Psk, PskError};
pub use codec::{decode, encode, CodecError, MAX_FRAME_LEN, PROTOCOL_VERSION};
pub use connection::{client_handshake, connect, server_handshake, Connection, ControlError};
pub use message::{
    BurstOutcome, BurstResult, Identity, IdentityDevice, Message, PingEndpoint, QpEndpoint,
    RemoteRegion, SessionAccept, SessionRequest, MAX_QPS,
};
