//! Lab tool: pings between two devices over UD QPs, with the `verbs` module's UD QPs and address
//! handles and the `ping` module's packets and path accounting, software timestamps (the lab's
//! Soft-RoCE has no completion timestamps: a send is stamped right after its post returned, a
//! receive when its completion is polled). It proves those parts on a real device before the
//! exporter's ping engine uses them; it is not the product's ping (no control channel: the two
//! ends swap their QPN and GID through files).
//!
//! ```text
//! ud_ping serve DEVICE ME PEER SECONDS          answers every ping for SECONDS
//! ud_ping ping DEVICE ME PEER COUNT INTERVAL_MS pings COUNT times, prints one JSON line
//! ```
//!
//! ME is where this end writes "QPN GID-HEX GID-INDEX"; PEER is where it waits (up to 60 s)
//! for the other end's. Exits non-zero on any verbs error.

use std::collections::VecDeque;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rdma_probe_exporter::ping::delay::Clock;
use rdma_probe_exporter::ping::packet::{Kind, Packet, PingKey, PACKET_LEN};
use rdma_probe_exporter::ping::path::{Answer, PathPings};
use rdma_probe_exporter::verbs::{
    self, AddressHandle, Completion, CompletionQueue, Context, MemoryRegion, RemoteAccess, Route,
    UdQueuePair, GRH_LEN,
};

const QKEY: u32 = 0x7264_7061;
const RECVS: u64 = 32;
const SLOT: usize = GRH_LEN + PACKET_LEN;
/// wr_ids at and above this are sends (one send slot, after the receive slots).
const SEND_WR: u64 = RECVS;
const TIMEOUT: Duration = Duration::from_millis(200);

type Res<T> = Result<T, String>;

struct End {
    start: Instant,
    key: PingKey,
    cq: CompletionQueue,
    qp: UdQueuePair,
    mr: MemoryRegion,
    peer: AddressHandle,
    peer_qpn: u32,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["serve", device, me, peer, seconds] => {
            setup(device, me, peer).and_then(|end| serve(end, number(seconds)?))
        }
        ["ping", device, me, peer, count, interval] => setup(device, me, peer).and_then(|end| {
            ping(
                end,
                number(count)?,
                Duration::from_millis(number(interval)?),
            )
        }),
        _ => Err(
            "usage: ud_ping serve DEVICE ME PEER SECONDS | ping DEVICE ME PEER COUNT INTERVAL_MS"
                .into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ud_ping: {e}");
            ExitCode::FAILURE
        }
    }
}

fn number(s: &str) -> Res<u64> {
    s.parse().map_err(|e| format!("{s}: {e}"))
}

fn setup(device: &str, me: &str, peer: &str) -> Res<End> {
    let v = |e: verbs::VerbsError| e.to_string();
    let ctx = Context::open(Some(device), 1).map_err(v)?;
    let sgid = ctx.select_gid().map_err(v)?.ok_or("no usable GID")?;
    let gid = ctx.gid(sgid).map_err(v)?.gid.octets();
    let pd = ctx.alloc_pd().map_err(v)?;
    let cq = ctx.create_cq(2 * RECVS as u32 + 2).map_err(v)?;
    let mut qp = pd.create_ud_qp(&cq, RECVS as u32).map_err(v)?;
    qp.activate(1, 0, QKEY, 0).map_err(v)?;
    let mr = pd
        .register(SLOT * (RECVS as usize + 1), RemoteAccess::Receives)
        .map_err(v)?;
    for slot in 0..RECVS {
        qp.post_recv(&mr, slot as usize * SLOT, SLOT as u32, slot)
            .map_err(v)?;
    }
    let hex: String = gid.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(format!("{me}.tmp"), format!("{} {hex} {sgid}\n", qp.qpn()))
        .and_then(|()| std::fs::rename(format!("{me}.tmp"), me))
        .map_err(|e| format!("{me}: {e}"))?;
    let (peer_qpn, peer_gid) = read_peer(peer)?;
    let route = Route {
        port: 1,
        sgid_index: u8::try_from(sgid).map_err(|_| "GID index above 255")?,
        gid: peer_gid,
        hop_limit: 64,
        traffic_class: 0,
    };
    let peer = pd.create_ah(&route).map_err(v)?;
    cq.arm().map_err(v)?;
    Ok(End {
        start: Instant::now(),
        key: PingKey::derive(b"lab ud_ping", &[0; 32]),
        cq,
        qp,
        mr,
        peer,
        peer_qpn,
    })
}

fn read_peer(path: &str) -> Res<(u32, [u8; 16])> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        match std::fs::read_to_string(path) {
            Ok(t) => break t,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Err(format!("{path}: {e}")),
        }
    };
    let mut fields = text.split_whitespace();
    let qpn = fields
        .next()
        .and_then(|q| q.parse().ok())
        .ok_or("bad QPN")?;
    let hex = fields.next().filter(|h| h.len() == 32).ok_or("bad GID")?;
    let mut gid = [0u8; 16];
    for (i, b) in gid.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
    }
    Ok((qpn, gid))
}

impl End {
    /// CPU time in ns since the start: the software completion clock.
    fn now_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The next completion, or `None` after `timeout`: event-driven (arm, poll, wait).
    fn next(&self, timeout: Duration) -> Res<Option<Completion>> {
        let deadline = Instant::now() + timeout;
        let mut out = [Completion::EMPTY; 1];
        loop {
            if self.cq.poll(&mut out).map_err(|e| e.to_string())? == 1 {
                out[0].check().map_err(|e| e.to_string())?;
                return Ok(Some(out[0]));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            if self.cq.wait(left).map_err(|e| e.to_string())? {
                self.cq.arm().map_err(|e| e.to_string())?;
            }
        }
    }

    /// Sends `packet` to the UD QP `qpn` of the peer and waits for its send completion (the
    /// buffer is reused); receives that complete meanwhile are handed to `on_recv`. Returns the
    /// software send timestamp: the CPU time right after `ibv_post_send` returned. Soft-RoCE
    /// sends inside that call and reports the completion later, sometimes after the answer
    /// arrived, so the time the completion is polled would shorten the RTT by the poll's delay.
    fn send(
        &mut self,
        packet: &Packet,
        qpn: u32,
        mut on_recv: impl FnMut(&mut Self, Completion, u64) -> Res<()>,
    ) -> Res<u64> {
        let at = RECVS as usize * SLOT;
        self.mr.as_mut_slice()[at..at + PACKET_LEN].copy_from_slice(&packet.encode(&self.key));
        self.qp
            .post_send(
                &self.mr,
                (at, PACKET_LEN as u32),
                &self.peer,
                (qpn, QKEY),
                SEND_WR,
            )
            .map_err(|e| e.to_string())?;
        let sent = self.now_ns();
        loop {
            let c = self.next(TIMEOUT)?.ok_or("no send completion")?;
            let t = self.now_ns();
            if c.wr_id == SEND_WR {
                return Ok(sent);
            }
            on_recv(self, c, t)?;
        }
    }

    /// The packet a receive completion holds, and its slot posted again.
    fn take(&mut self, c: &Completion) -> Res<Result<Packet, String>> {
        let at = c.wr_id as usize * SLOT;
        let len = (c.byte_len as usize)
            .saturating_sub(GRH_LEN)
            .min(PACKET_LEN);
        let bytes = self.mr.as_slice()[at + GRH_LEN..at + GRH_LEN + len].to_vec();
        self.qp
            .post_recv(&self.mr, at, SLOT as u32, c.wr_id)
            .map_err(|e| e.to_string())?;
        Ok(Packet::decode(&bytes, |_| Some(&self.key)).map_err(|e| e.to_string()))
    }
}

fn serve(mut end: End, seconds: u64) -> Res<()> {
    let until = Instant::now() + Duration::from_secs(seconds);
    let (mut answered, mut refused) = (0u64, 0u64);
    // Pings that arrive while another is answered wait here, with their receive times.
    let mut pending = VecDeque::new();
    while Instant::now() < until {
        let (c, received) = match pending.pop_front() {
            Some(next) => next,
            None => match end.next(Duration::from_millis(500))? {
                Some(c) => (c, end.now_ns()),
                None => continue,
            },
        };
        match end.take(&c)? {
            Ok(p) if p.kind == Kind::Ping => {
                let mut queue = |_: &mut End, c, t| {
                    pending.push_back((c, t));
                    Ok(())
                };
                let acked = end.send(&p.ack(), c.src_qp, &mut queue)?;
                end.send(&p.delay(acked - received), c.src_qp, &mut queue)?;
                answered += 1;
            }
            _ => refused += 1,
        }
    }
    println!("{{\"answered\":{answered},\"refused\":{refused}}}");
    Ok(())
}

fn ping(mut end: End, count: u64, interval: Duration) -> Res<()> {
    let mut path = PathPings::new(Clock::software(), TIMEOUT, Duration::from_secs(3600));
    let mut answers = 0u64;
    // Pings whose answers both arrived before their send completion was polled.
    let mut completed_late = 0u64;
    let mut on_recv = |end: &mut End, c: Completion, t: u64, path: &mut PathPings| -> Res<()> {
        if let Ok(p) = end.take(&c)? {
            let now = Duration::from_nanos(t);
            if matches!(
                path.on_answer(now, &p, t, end.now_ns()),
                Answer::Measured(_) | Answer::Partial
            ) {
                answers += 1;
            }
        }
        Ok(())
    };
    for _ in 0..count {
        let posted = end.now_ns();
        let seq = path.on_posted(Duration::from_nanos(posted), posted);
        let packet = Packet {
            kind: Kind::Ping,
            key_id: 1,
            seq,
            responder_delay_ns: 0,
        };
        let peer_qpn = end.peer_qpn;
        let sent = end.send(&packet, peer_qpn, |end, c, t| on_recv(end, c, t, &mut path))?;
        if matches!(
            path.on_send_completed(Duration::from_nanos(sent), seq, sent),
            Answer::Measured(_) | Answer::Invalid
        ) {
            completed_late += 1;
        }
        let deadline = Instant::now() + interval;
        while let Some(c) = end.next(deadline.saturating_duration_since(Instant::now()))? {
            let t = end.now_ns();
            on_recv(&mut end, c, t, &mut path)?;
        }
    }
    let deadline = Instant::now() + TIMEOUT;
    while let Some(c) = end.next(deadline.saturating_duration_since(Instant::now()))? {
        let t = end.now_ns();
        on_recv(&mut end, c, t, &mut path)?;
    }
    path.expire(Duration::from_nanos(end.now_ns()) + TIMEOUT);
    let counts = path.counts();
    let s = path.summary().ok_or("no ping answered")?;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{{\"sent\":{},\"lost\":{},\"unexpected\":{},\"invalid\":{},\"answers\":{answers},\"send_completed_last\":{completed_late},\"samples\":{},\"rtt_p50_us\":{:.1},\"rtt_p90_us\":{:.1},\"rtt_p99_us\":{:.1},\"responder_p50_us\":{:.1}}}",
        counts.sent, counts.lost, counts.unexpected, counts.invalid, s.samples,
        us(s.rtt_p50), us(s.rtt_p90), us(s.rtt_p99), us(s.responder_p50)
    );
    Ok(())
}
