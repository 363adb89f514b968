//! Messages into clear frames, and the header every frame (clear or protected) starts with.

use super::{
    CodecError, FrameFlags, HEADER_LEN, MAGIC, MAX_FRAME_LEN, MAX_PAYLOAD_LEN, PROTOCOL_VERSION,
};
use crate::control::message::Message;

/// Encode `msg` as one clear frame of the current protocol version.
///
/// Fails if the message does not pass [`Message::validate`] (we never send what we would reject)
/// or if it does not fit in [`MAX_FRAME_LEN`].
pub fn encode(msg: &Message) -> Result<Vec<u8>, CodecError> {
    encode_with_version(msg, PROTOCOL_VERSION)
}

/// Encode with an explicit header version. Only tests need another version than ours (to act as an
/// old or future peer); production code uses [`encode`].
pub(crate) fn encode_with_version(msg: &Message, version: u16) -> Result<Vec<u8>, CodecError> {
    let json = message_json(msg)?;
    let mut frame = header_with_version(version, FrameFlags::CLEAR, json.len())?.to_vec();
    frame.extend_from_slice(&json);
    Ok(frame)
}

/// The payload of `msg`: its JSON, once it passed [`Message::validate`].
pub(crate) fn message_json(msg: &Message) -> Result<Vec<u8>, CodecError> {
    msg.validate().map_err(CodecError::Malformed)?;
    serde_json::to_vec(msg)
        .map_err(|e| CodecError::Malformed(format!("cannot serialize {}: {e}", msg.kind())))
}

/// The header of a frame of this version with `payload_len` bytes of payload.
pub(crate) fn header(
    flags: FrameFlags,
    payload_len: usize,
) -> Result<[u8; HEADER_LEN], CodecError> {
    header_with_version(PROTOCOL_VERSION, flags, payload_len)
}

fn header_with_version(
    version: u16,
    flags: FrameFlags,
    payload_len: usize,
) -> Result<[u8; HEADER_LEN], CodecError> {
    let too_large = || CodecError::FrameTooLarge {
        len: (HEADER_LEN as u64).saturating_add(payload_len as u64),
        max: MAX_FRAME_LEN,
    };
    if payload_len > MAX_PAYLOAD_LEN {
        return Err(too_large());
    }
    let len = u32::try_from(payload_len).map_err(|_| too_large())?;
    let mut header = [0u8; HEADER_LEN];
    header[..4].copy_from_slice(&MAGIC);
    header[4..6].copy_from_slice(&version.to_be_bytes());
    header[6..8].copy_from_slice(&flags.0.to_be_bytes());
    header[8..].copy_from_slice(&len.to_be_bytes());
    Ok(header)
}
