//! The out-of-band control protocol over TCP between a prober (client) and a responder (server).
//!
//! Layers, each usable on its own:
//!
//! * [`message`]: the message types and their structural validation (serde).
//! * [`codec`]: versioned, length-prefixed frames; pure encode/decode with no I/O, so it is unit-
//!   tested and fuzzed (`fuzz/fuzz_targets/control_decode.rs`, and property tests in `codec`).
//! * [`auth`]: the pre-shared key, nonces and HMAC proofs of the mutual handshake (pure).
//! * [`connection`]: tokio TCP I/O with a deadline on every read and write, and the client/server
//!   handshakes.
//!
//! Security property (brief §4 "Secure by default"): the handshake (`Hello`, `Challenge`,
//! `Authenticate`, `AuthOk`) carries only a node name, nonces and MACs. QP numbers, rkeys and
//! addresses travel in `SessionRequest`/`SessionAccept`, which a caller sends only after
//! [`client_handshake`] / [`server_handshake`] returned `Ok`.

pub mod auth;
pub mod codec;
pub mod connection;
#[cfg(test)]
mod fuzz_corpus;
pub mod message;

pub use auth::{AuthMode, Psk, PskError};
pub use codec::{decode, encode, CodecError, MAX_FRAME_LEN, PROTOCOL_VERSION};
pub use connection::{client_handshake, connect, server_handshake, Connection, ControlError};
pub use message::{
    BurstOutcome, BurstResult, Message, QpEndpoint, RemoteRegion, SessionAccept, SessionRequest,
    MAX_QPS,
};
