//! Bytes from the peer into messages: the header checked as early as the bytes allow, then the
//! payload parsed in place, validated and its free text escaped.

use super::{
    CodecError, FrameFlags, RawFrame, HEADER_LEN, MAGIC, MAX_FRAME_LEN, MAX_PAYLOAD_LEN,
    PROTOCOL_VERSION,
};
use crate::control::message::{escape_unsafe_chars, object_form, Message};

/// Try to decode one clear frame from the start of `buf`.
///
/// * `Ok(Some((msg, consumed)))`: a complete, valid message; drop `consumed` bytes from the buffer.
/// * `Ok(None)`: `buf` is a valid prefix of a frame; read more bytes and call again.
/// * `Err(_)`: the stream is unusable (after a framing error there is no way to resynchronize);
///   the caller should report the error and close the connection.
///
/// Errors are reported as early as the bytes allow: a wrong magic at the first differing byte, a
/// wrong version or oversize length as soon as the header is complete (before waiting for, or
/// buffering, the payload). A protected frame is an error here: [`seal::Opener`] opens those.
///
/// [`seal::Opener`]: crate::control::seal::Opener
pub fn decode(buf: &[u8]) -> Result<Option<(Message, usize)>, CodecError> {
    decode_with_version(buf, PROTOCOL_VERSION)
}

/// [`decode`] as a peer speaking `ours` would; see [`encode_with_version`].
pub(crate) fn decode_with_version(
    buf: &[u8],
    ours: u16,
) -> Result<Option<(Message, usize)>, CodecError> {
    let Some(frame) = split_frame_with_version(buf, ours)? else {
        return Ok(None);
    };
    if frame.flags.contains(FrameFlags::PROTECTED) {
        return Err(CodecError::Malformed(
            "a protected frame where a clear one belongs (before the handshake finished, or \
             with auth: none)"
                .into(),
        ));
    }
    Ok(Some((parse_message(frame.payload)?, frame.len)))
}

/// The frame at the start of `buf`, its header checked (magic, version, flags, length);
/// `Ok(None)` while the buffer holds only part of it.
pub(crate) fn split_frame(buf: &[u8]) -> Result<Option<RawFrame<'_>>, CodecError> {
    split_frame_with_version(buf, PROTOCOL_VERSION)
}

fn split_frame_with_version(buf: &[u8], ours: u16) -> Result<Option<RawFrame<'_>>, CodecError> {
    let magic_seen = buf.len().min(MAGIC.len());
    if buf[..magic_seen] != MAGIC[..magic_seen] {
        return Err(CodecError::BadMagic {
            found: buf[..magic_seen].to_vec(),
        });
    }
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let version = u16::from_be_bytes([header[4], header[5]]);
    if version != ours {
        return Err(CodecError::UnsupportedVersion {
            ours,
            theirs: version,
        });
    }
    let flags = u16::from_be_bytes([header[6], header[7]]);
    if flags & !FrameFlags::KNOWN != 0 {
        return Err(CodecError::Malformed(format!(
            "reserved header flags set ({flags:#06x})"
        )));
    }
    let payload_len = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    // u32 -> usize is lossless on every platform we build for; compare in u64 to be sure.
    if u64::from(payload_len) > MAX_PAYLOAD_LEN as u64 {
        return Err(CodecError::FrameTooLarge {
            len: u64::from(payload_len) + HEADER_LEN as u64,
            max: MAX_FRAME_LEN,
        });
    }
    let len = HEADER_LEN + payload_len as usize;
    let Some(payload) = buf.get(HEADER_LEN..len) else {
        return Ok(None);
    };
    Ok(Some(RawFrame {
        header,
        flags: FrameFlags(flags),
        payload,
        len,
    }))
}

/// A payload as a message that passed [`Message::validate`], its free text escaped.
pub(crate) fn parse_message(payload: &[u8]) -> Result<Message, CodecError> {
    let mut msg = parse_payload(payload).map_err(|e| {
        CodecError::Malformed(format!(
            "invalid payload: {}",
            escape_unsafe_chars(&e.to_string())
        ))
    })?;
    msg.validate().map_err(CodecError::Malformed)?;
    msg.escape_free_text();
    Ok(msg)
}

/// The payload as a message in its documented form: one JSON object and nothing after it.
fn parse_payload(payload: &[u8]) -> Result<Message, serde_json::Error> {
    let mut json = serde_json::Deserializer::from_slice(payload);
    let msg = object_form::deserialize(&mut json)?;
    json.end()?;
    Ok(msg)
}
