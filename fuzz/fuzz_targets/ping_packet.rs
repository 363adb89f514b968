//! Fuzz the ping datagram's decoder, and a prober's handling of the answers it lets through. A
//! datagram reaches the decoder from any host on the fabric that knows the ping QP's number, and
//! a correctly tagged one from any holder of a key (docs/security.md, "Pings").
//!
//! Properties (the decoder's also run as proptest tests in `src/ping/packet.rs`, for stable
//! toolchains):
//! * `Packet::decode` returns, never panics, for any bytes, under the public key of `auth: none`
//!   and under a secret one;
//! * a packet it accepts is canonical: encoding it again under the same key gives back the input
//!   exactly, so no byte escapes the tag and no field has two spellings;
//! * retagged under the public key (as a key holder can tag anything), the first 32 bytes still
//!   meet every field check, and fail only at one of them, never at the length, key or tag;
//! * a path's pings, driven by the rest of the input (posts, send completions, acks and delay
//!   answers with any sequence numbers, delays and timestamps, on the CPU's clock or a device's
//!   with any frequency and mask, time moving on by any step), never panic, never count more
//!   pings lost or answered than were sent, and give quantiles in order.
//!
//! Seeds: `fuzz/seeds/ping_packet/`, a ping, an ack and a delay answer under the public key;
//! `scripts/fuzz ping_packet 600` passes them.
#![no_main]

use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use libfuzzer_sys::fuzz_target;
use rdma_probe_exporter::ping::delay::Clock;
use rdma_probe_exporter::ping::packet::{Kind, Packet, PacketError, PingKey, PACKET_LEN};
use rdma_probe_exporter::ping::path::{Answer, PathPings};
use sha2::Sha256;

/// The bytes a packet's tag covers, and how much of the HMAC it keeps (src/ping/packet.rs).
const TAGGED_LEN: usize = 32;

/// The input, read as a sequence of numbers; zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        let Some((first, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        *first
    }

    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |n, _| n << 8 | u64::from(self.u8()))
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn decoded_under_each_key(data: &[u8]) {
    let secret = PingKey::derive(b"fuzz secret", &[7; 32]);
    for key in [&PingKey::unauthenticated(), &secret] {
        if let Ok(packet) = Packet::decode(data, |_| Some(key)) {
            assert_eq!(
                &packet.encode(key)[..],
                data,
                "an accepted packet is canonical"
            );
        }
    }
}

fn retagged_by_a_key_holder(data: &[u8]) {
    let mut buf = [0u8; PACKET_LEN];
    let n = data.len().min(TAGGED_LEN);
    buf[..n].copy_from_slice(&data[..n]);
    // The public key of `auth: none` is 32 zero bytes.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&[0u8; 32]).expect("any key length");
    mac.update(&buf[..TAGGED_LEN]);
    let tag = mac.finalize().into_bytes();
    buf[TAGGED_LEN..].copy_from_slice(&tag[..PACKET_LEN - TAGGED_LEN]);
    let public = PingKey::unauthenticated();
    match Packet::decode(&buf, |_| Some(&public)) {
        Ok(packet) => assert_eq!(packet.encode(&public), buf),
        Err(PacketError::Length(_) | PacketError::UnknownKey(_) | PacketError::Tag) => {
            panic!("a well-tagged packet of the right length failed past its fields")
        }
        Err(_) => {}
    }
}

fn a_paths_pings_take_any_answers(mut input: Input) {
    let clock = match input.u8() % 3 {
        0 => Clock::software(),
        _ => Clock::hardware(input.u64(), input.u64()).unwrap_or_else(Clock::software),
    };
    let timeout = Duration::from_millis(input.u64() % 10_000);
    let window = Duration::from_millis(input.u64() % 100_000);
    let first_seq = input.u64();
    let mut pings = PathPings::new(clock, timeout, window, first_seq);
    let mut now = Duration::ZERO;
    let mut answered = 0u64;
    while !input.is_empty() {
        now = now.saturating_add(Duration::from_micros(input.u64() % 10_000_000));
        // Sequence numbers near the path's own, where answers can match, and anywhere.
        let seq = match input.u8() % 4 {
            3 => input.u64(),
            near => first_seq.wrapping_add(u64::from(input.u8()) + u64::from(near)),
        };
        match input.u8() % 5 {
            0 => {
                pings.on_posted(now, input.u64());
            }
            1 => {
                pings.on_send_completed(now, seq, input.u64());
            }
            2 | 3 => {
                let kind = if input.u8() % 2 == 0 {
                    Kind::Ack
                } else {
                    Kind::Delay
                };
                let responder_delay_ns = if kind == Kind::Delay { input.u64() } else { 0 };
                let packet = Packet {
                    kind,
                    key_id: 1,
                    seq,
                    responder_delay_ns,
                };
                let answer = pings.on_answer(now, &packet, input.u64(), input.u64());
                answered += u64::from(matches!(answer, Answer::Measured(_)));
            }
            _ => pings.expire(now),
        }
        let counts = pings.counts();
        assert!(
            counts.lost + answered <= counts.sent,
            "{counts:?}, {answered} measured"
        );
        if let Some(s) = pings.summary() {
            assert!(s.samples > 0);
            assert!(s.rtt_min <= s.rtt_p50 && s.rtt_p50 <= s.rtt_p90);
            assert!(s.rtt_p90 <= s.rtt_p99 && s.rtt_p99 <= s.rtt_max);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    decoded_under_each_key(data);
    retagged_by_a_key_holder(data);
    a_paths_pings_take_any_answers(Input(data));
});
