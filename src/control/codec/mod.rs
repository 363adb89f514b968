//! Framing of control messages: pure encode/decode, no I/O, so it can be unit-tested and fuzzed.
//!
//! A frame is a fixed 12-byte header followed by the payload:
//!
//! ```text
//! offset  size  field
//!      0     4  magic  b"RPXC"           (rejects stray clients, e.g. HTTP, at the first bytes)
//!      4     2  protocol version, u16 BE (checked before anything else is interpreted)
//!      6     2  flags, u16 BE            (bit 0: protected; every other bit must be 0)
//!      8     4  payload length, u32 BE   (at most MAX_FRAME_LEN - HEADER_LEN)
//!     12     n  payload: the Message as JSON (see `message`), or, in a protected frame, that
//!               JSON encrypted and followed by its 16-byte tag (see `seal`)
//! ```
//!
//! The handshake's frames are clear; every frame after it is protected, unless both ends run
//! with `auth: none` (docs/security.md). This module handles the header and clear frames;
//! `seal` protects and opens the others with the same header checks.
//!
//! Why JSON for the payload: the messages are small and rare (a handful per burst, bursts are
//! seconds apart), so compactness buys nothing, while a readable payload makes packet captures and
//! interop work easy, and `serde_json` is already a dependency (a binary serde format would add one
//! more crate to audit in a decoder that faces the network). Why a binary header anyway: the
//! length and version must be readable before the payload is trusted, and a fixed-size header makes
//! "check the length before allocating" trivial.
//!
//! The decoder never panics and never allocates on the strength of the length field: a length above
//! the limit is an error as soon as the header is complete, and the payload is parsed in place from
//! the caller's buffer.
//!
//! What the decoder hands on is safe to print: the payload must be a JSON object (not the array
//! form serde would also take), names with control characters are refused, and such characters
//! are escaped in free text and in the decoder's own error texts, which quote the peer's bytes (an
//! unknown `type` or `reason`, a bad hex string). See "Text from the peer" in `message`.

mod decode;
mod encode;
#[cfg(test)]
pub(crate) mod tests;

pub use decode::decode;
#[cfg(test)]
pub(crate) use decode::decode_with_version;
pub(crate) use decode::{parse_message, split_frame};
pub use encode::encode;
#[cfg(test)]
pub(crate) use encode::encode_with_version;
pub(crate) use encode::{header, message_json};

use thiserror::Error;

/// The first four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"RPXC";
/// The control protocol version this build speaks. Bump on any incompatible change.
pub const PROTOCOL_VERSION: u16 = 3;
/// Size of the fixed frame header.
pub const HEADER_LEN: usize = 12;
/// Largest frame (header + payload) either side sends or accepts. The biggest legitimate message,
/// a `SessionAccept` for 64 QPs, is about 10 KiB of JSON; the cap bounds what a peer can make us
/// buffer.
pub const MAX_FRAME_LEN: usize = 64 * 1024;
/// Largest payload that fits in a frame.
pub const MAX_PAYLOAD_LEN: usize = MAX_FRAME_LEN - HEADER_LEN;

/// Why bytes could not be turned into a message (or a message into a frame).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CodecError {
    /// The stream does not start with our magic: not a control-protocol peer (or out of sync).
    #[error(
        "not a control protocol frame (bad magic {found:02x?}, expected {MAGIC:02x?} \"RPXC\")"
    )]
    BadMagic { found: Vec<u8> },
    /// The peer runs an incompatible build; both versions are named so the operator knows which
    /// side to upgrade.
    #[error("peer speaks control protocol v{theirs}, we speak v{ours}: upgrade the older side")]
    UnsupportedVersion { ours: u16, theirs: u16 },
    /// The announced (or, on encode, the actual) frame is above [`MAX_FRAME_LEN`].
    #[error("control frame of {len} bytes exceeds the maximum of {max} bytes")]
    FrameTooLarge { len: u64, max: usize },
    /// The header was fine but the frame is not a valid message.
    #[error("malformed control message: {0}")]
    Malformed(String),
}

/// The flags field of a frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameFlags(u16);

impl FrameFlags {
    /// A frame of the handshake, or of a connection with `auth: none`: the payload is JSON.
    pub const CLEAR: FrameFlags = FrameFlags(0);
    /// A frame after the handshake: the payload is the encrypted JSON and its tag (`seal`).
    pub const PROTECTED: FrameFlags = FrameFlags(1);
    /// Every flag this version knows; any other bit is refused rather than ignored (a new flag
    /// would change how the payload is read, and needs a new protocol version anyway).
    const KNOWN: u16 = 1;

    pub fn contains(self, other: FrameFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// One whole frame found at the start of a buffer, its header checked, its payload not read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawFrame<'a> {
    /// The 12 header bytes (the associated data of a protected frame).
    pub header: &'a [u8],
    pub flags: FrameFlags,
    pub payload: &'a [u8],
    /// Header and payload: the bytes the frame takes in the stream.
    pub len: usize,
}
