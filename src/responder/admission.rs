//! Who gets a session: places among the handshakes in progress, the connection and session
//! permits, and each prober address's share of the sessions (docs/security.md, "Responder
//! admission").

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::control::message::Identity as NodeIdentity;
use crate::control::{server_handshake, AuthMode, Connection};
use crate::metrics::SessionResult;
use crate::reason::ErrorReason;

use super::failure::{failure, SessionFailure};
use super::ResponderSettings;

/// The sessions one prober address may hold at once: half of `max_sessions` (rounded up), so
/// that one node, or one key holder, cannot take them all and keep the others out
/// (docs/security.md, "Responder admission").
pub fn prober_share(max_sessions: usize) -> usize {
    max_sessions.div_ceil(2).max(1)
}

/// Who gets a session: a connection authenticates in one of a few places among the handshakes in
/// progress, under the control timeout; only then does it take a session permit.
/// Unauthenticated clients therefore never hold sessions. When every place is taken, a new connection takes the oldest one's place
/// and that one is refused: connections held open without finishing their handshake (silent,
/// slow, truncated) cannot keep a prober out, whose handshake takes a round trip or two.
///
/// Every connection served holds a connection permit for its life: the handshakes and sessions,
/// plus [`REFUSALS_IN_FLIGHT`] for connections on their way out (a refused handshake sending
/// its `Error`, a session freeing its memory). Past them a connection is refused at accept.
pub(super) struct Admission {
    auth: AuthMode,
    /// Sent in `AuthOk`, to authenticated probers only.
    identity: Option<NodeIdentity>,
    io_timeout: Duration,
    connections: Arc<Semaphore>,
    max_connections: usize,
    pub(super) handshakes: Arc<HandshakeQueue>,
    sessions: Arc<Semaphore>,
    max_sessions: usize,
    /// The sessions each prober address holds now.
    per_prober: Arc<ProberSessions>,
}

/// Connections beyond the handshakes and sessions that may be finishing a refusal or a session's
/// teardown at once.
const REFUSALS_IN_FLIGHT: usize = 64;

impl Admission {
    pub(super) fn new(settings: &ResponderSettings, identity: Option<NodeIdentity>) -> Self {
        let max_handshakes = settings.max_handshakes.max(1);
        let max_connections = max_handshakes
            .saturating_add(settings.max_sessions)
            .saturating_add(REFUSALS_IN_FLIGHT);
        Admission {
            auth: settings.auth.clone(),
            identity,
            io_timeout: settings.io_timeout,
            connections: Arc::new(Semaphore::new(max_connections)),
            max_connections,
            handshakes: Arc::new(HandshakeQueue::new(max_handshakes)),
            sessions: Arc::new(Semaphore::new(settings.max_sessions)),
            max_sessions: settings.max_sessions,
            per_prober: Arc::new(ProberSessions::new(prober_share(settings.max_sessions))),
        }
    }

    /// The permit a new connection is served under, or its refusal when `max_connections` are
    /// served already.
    pub(super) fn connection_permit(&self) -> Result<OwnedSemaphorePermit, SessionFailure> {
        Arc::clone(&self.connections)
            .try_acquire_owned()
            .map_err(|_| SessionFailure {
                refusal: Some(SessionResult::ConnectionLimit),
                ..failure(
                    ErrorReason::PeerError,
                    format!(
                        "responder has {} control connections open",
                        self.max_connections
                    ),
                )
            })
    }

    /// Authenticates the prober in `handshake` (given up when the handshake ends) and returns
    /// its node name and the permit held for its session. `prober` is the address the
    /// connection came from: it may hold its share of the sessions, no more.
    pub(super) async fn admit(
        &self,
        conn: &mut Connection,
        mut handshake: HandshakePlace,
        prober: std::net::IpAddr,
    ) -> Result<(String, SessionPermit), SessionFailure> {
        let node = tokio::select! {
            authenticated = server_handshake(conn, &self.auth, self.identity.as_ref(), self.io_timeout) => authenticated?,
            () = handshake.given_way() => {
                return Err(SessionFailure {
                    refusal: Some(SessionResult::HandshakeLimit),
                    ..failure(
                        ErrorReason::PeerError,
                        format!(
                            "responder has {} handshakes in progress; the oldest, this one, \
                             gave way to a newer connection",
                            self.handshakes.max
                        ),
                    )
                })
            }
        };
        drop(handshake);
        let Ok(session) = Arc::clone(&self.sessions).try_acquire_owned() else {
            return Err(SessionFailure {
                refusal: Some(SessionResult::Limit),
                ..failure(
                    ErrorReason::PeerError,
                    format!("responder at its session limit ({})", self.max_sessions),
                )
            });
        };
        let Some(share) = self.per_prober.take(prober) else {
            return Err(SessionFailure {
                refusal: Some(SessionResult::Limit),
                ..failure(
                    ErrorReason::PeerError,
                    format!(
                        "this prober's address holds its share of the responder's sessions ({} of {})",
                        self.per_prober.max, self.max_sessions
                    ),
                )
            });
        };
        Ok((
            node,
            SessionPermit {
                _session: session,
                _share: share,
            },
        ))
    }
}

/// What an admitted prober holds for its session: a place under `max_sessions` and one of its
/// address's share; both are given back when dropped.
#[derive(Debug)]
pub(super) struct SessionPermit {
    _session: OwnedSemaphorePermit,
    _share: ProberShare,
}

/// The sessions each prober address holds, at most `max` each.
#[derive(Debug)]
struct ProberSessions {
    max: usize,
    held: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
}

/// One session of a prober address's share, given back when dropped.
#[derive(Debug)]
struct ProberShare {
    prober: std::net::IpAddr,
    sessions: Arc<ProberSessions>,
}

impl ProberSessions {
    fn new(max: usize) -> Self {
        ProberSessions {
            max,
            held: std::sync::Mutex::default(),
        }
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<std::net::IpAddr, usize>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One more session for `prober`, unless it holds its share already.
    fn take(self: &Arc<Self>, prober: std::net::IpAddr) -> Option<ProberShare> {
        let prober = prober.to_canonical();
        let mut held = self.lock();
        let n = held.entry(prober).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(ProberShare {
            prober,
            sessions: Arc::clone(self),
        })
    }

    #[cfg(test)]
    fn held_by(&self, prober: std::net::IpAddr) -> usize {
        self.lock()
            .get(&prober.to_canonical())
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for ProberShare {
    fn drop(&mut self) {
        let mut held = self.sessions.lock();
        if let Some(n) = held.get_mut(&self.prober) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.prober);
            }
        }
    }
}

/// The handshakes in progress, oldest first: at most `max`.
pub(super) struct HandshakeQueue {
    max: usize,
    held: std::sync::Mutex<HeldPlaces>,
}

#[derive(Default)]
struct HeldPlaces {
    next_id: u64,
    /// Each place's id and the sender that tells its connection to give way, oldest first.
    by_age: std::collections::VecDeque<(u64, tokio::sync::oneshot::Sender<()>)>,
}

/// One connection's place among the handshakes in progress, given up when dropped.
pub(super) struct HandshakePlace {
    id: u64,
    queue: Arc<HandshakeQueue>,
    give_way: tokio::sync::oneshot::Receiver<()>,
}

impl HandshakeQueue {
    fn new(max: usize) -> Self {
        HandshakeQueue {
            max: max.max(1),
            held: std::sync::Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HeldPlaces> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a new connection, the oldest connection giving way when all are taken.
    pub(super) fn take(self: &Arc<Self>) -> HandshakePlace {
        let (tell, give_way) = tokio::sync::oneshot::channel();
        let mut held = self.lock();
        while held.by_age.len() >= self.max {
            if let Some((_, oldest)) = held.by_age.pop_front() {
                let _ = oldest.send(());
            }
        }
        let id = held.next_id;
        held.next_id += 1;
        held.by_age.push_back((id, tell));
        HandshakePlace {
            id,
            queue: Arc::clone(self),
            give_way,
        }
    }

    #[cfg(test)]
    pub(super) fn in_progress(&self) -> usize {
        self.lock().by_age.len()
    }
}

impl HandshakePlace {
    /// Completes when a newer connection took this place.
    async fn given_way(&mut self) {
        // The sender is dropped without a word only with this place itself.
        let _ = (&mut self.give_way).await;
    }
}

impl Drop for HandshakePlace {
    fn drop(&mut self) {
        self.queue.lock().by_age.retain(|(id, _)| *id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::message::IdentityDevice;
    use crate::control::{client_handshake, ControlError, Message};
    use crate::responder::test_support::{hello, settings, until};
    use std::time::Instant;
    use tokio::net::TcpListener;

    /// Accepts connections on loopback and admits each; returns the listener's address, a
    /// channel of admission results (the permits are held until the receiver drops them) and
    /// the handshake queue (how many connections are in their handshake).
    async fn admitting(
        admission: Admission,
    ) -> (
        String,
        tokio::sync::mpsc::UnboundedReceiver<Result<(String, SessionPermit), SessionFailure>>,
        Arc<HandshakeQueue>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let admission = Arc::new(admission);
        let handshakes = Arc::clone(&admission.handshakes);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = listener.accept().await.unwrap();
                let admission = Arc::clone(&admission);
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut conn = Connection::new(stream).unwrap();
                    let place = admission.handshakes.take();
                    let result = admission.admit(&mut conn, place, peer.ip()).await;
                    if let Err(e) = &result {
                        conn.send_error_best_effort(e.reason, &e.message).await;
                    }
                    let _ = tx.send(result);
                });
            }
        });
        (addr, rx, handshakes)
    }

    #[tokio::test]
    async fn silent_strangers_cannot_take_the_only_session() {
        let (addr, mut results, handshakes) =
            admitting(Admission::new(&settings(1, 4), None)).await;
        // Three connections that never say hello hold handshake permits, not the session.
        let mut strangers = Vec::new();
        for _ in 0..3 {
            strangers.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
        }
        until("the strangers in their handshakes", || {
            handshakes.in_progress() == 3
        })
        .await;
        let (_prober, handshake) = hello(&addr, "node-a").await;
        handshake.unwrap();
        let admitted = results
            .recv()
            .await
            .unwrap()
            .expect("the prober is admitted");
        assert_eq!(admitted.0, "node-a");
        // The strangers time out in the handshake, refused as timeouts, not as sessions.
        for _ in 0..3 {
            let e = results.recv().await.unwrap().unwrap_err();
            assert_eq!(e.reason, ErrorReason::Timeout, "{}", e.message);
        }
        drop(strangers);
    }

    #[tokio::test]
    async fn past_the_handshake_cap_the_oldest_gives_way_to_a_prober() {
        let (addr, mut results, handshakes) =
            admitting(Admission::new(&settings(16, 2), None)).await;
        let _a = tokio::net::TcpStream::connect(&addr).await.unwrap();
        until("a in its handshake", || handshakes.in_progress() == 1).await;
        let _b = tokio::net::TcpStream::connect(&addr).await.unwrap();
        until("a and b in their handshakes", || {
            handshakes.in_progress() == 2
        })
        .await;
        let started = Instant::now();
        let (_third, handshake) = hello(&addr, "node-c").await;
        handshake.unwrap();
        assert!(started.elapsed() < Duration::from_millis(500));
        let mut refused = None;
        let mut admitted = None;
        for _ in 0..2 {
            match results.recv().await.unwrap() {
                Ok(a) => admitted = Some(a),
                Err(e) => refused = Some(e),
            }
        }
        assert_eq!(admitted.unwrap().0, "node-c");
        let refused = refused.unwrap();
        assert_eq!(refused.refusal(), Some(SessionResult::HandshakeLimit));
        assert!(refused.message.contains("gave way"), "{}", refused.message);
    }

    #[test]
    fn the_handshake_queue_holds_at_most_max_and_the_oldest_gives_way() {
        let handshakes = Arc::new(HandshakeQueue::new(2));
        let mut first = handshakes.take();
        let mut second = handshakes.take();
        assert_eq!(handshakes.in_progress(), 2);
        let third = handshakes.take();
        assert_eq!(handshakes.in_progress(), 2);
        assert!(first.give_way.try_recv().is_ok());
        assert!(second.give_way.try_recv().is_err());
        drop(first);
        assert_eq!(handshakes.in_progress(), 2);
        drop(second);
        drop(third);
        assert_eq!(handshakes.in_progress(), 0);
    }

    #[test]
    fn connections_past_the_cap_are_refused_as_connection_limit() {
        let admission = Admission::new(&settings(3, 2), None);
        let held: Vec<_> = (0..2 + 3 + REFUSALS_IN_FLIGHT)
            .map(|_| admission.connection_permit().unwrap())
            .collect();
        let refused = admission.connection_permit().unwrap_err();
        assert_eq!(refused.refusal(), Some(SessionResult::ConnectionLimit));
        drop(held);
        assert!(admission.connection_permit().is_ok());
    }

    fn told() -> NodeIdentity {
        NodeIdentity {
            node: "responder".into(),
            labels: [("tor".to_owned(), "t1".to_owned())].into(),
            devices: vec![IdentityDevice {
                name: "mlx5_0".into(),
                port: 1,
                rail: Some(0),
            }],
        }
    }

    #[tokio::test]
    async fn an_admitted_prober_learns_the_responders_identity() {
        let (addr, mut results, _) = admitting(Admission::new(&settings(1, 4), Some(told()))).await;
        let (_prober, identity) = hello(&addr, "node-a").await;
        let identity = identity.unwrap();
        assert_eq!(identity, Some(told()));
        assert_eq!(results.recv().await.unwrap().unwrap().0, "node-a");
        // A responder without one (a node name the protocol does not take) tells nothing.
        let (addr, _results, _) = admitting(Admission::new(&settings(1, 4), None)).await;
        let (_prober, identity) = hello(&addr, "node-a").await;
        let identity = identity.unwrap();
        assert_eq!(identity, None);
    }

    #[tokio::test]
    async fn a_prober_past_the_session_limit_learned_the_identity_but_gets_no_session() {
        // The identity comes with AuthOk, before the session permit: a prober refused at the
        // limit has proved the key all the same.
        let (addr, mut results, _) = admitting(Admission::new(&settings(1, 4), Some(told()))).await;
        let (_first, handshake) = hello(&addr, "node-a").await;
        handshake.unwrap();
        let _held = results.recv().await.unwrap().unwrap();
        let (mut second, told_second) = hello(&addr, "node-b").await;
        let told_second = told_second.unwrap();
        assert_eq!(told_second, Some(told()));
        let refused = results.recv().await.unwrap().unwrap_err();
        assert_eq!(refused.refusal(), Some(SessionResult::Limit));
        let said = second.recv(Duration::from_secs(2)).await.unwrap();
        assert!(
            matches!(&said, Message::Error { message, .. } if message.contains("session limit")),
            "{said:?}"
        );
    }

    /// [`hello`] from source address `from` (any 127.0.0.0/8 address works on loopback).
    async fn hello_from(
        addr: &str,
        from: std::net::Ipv4Addr,
        node: &str,
    ) -> (Connection, Result<Option<NodeIdentity>, ControlError>) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind((from, 0).into()).unwrap();
        let stream = socket.connect(addr.parse().unwrap()).await.unwrap();
        let mut conn = Connection::new(stream).unwrap();
        let told = client_handshake(&mut conn, node, &AuthMode::None, Duration::from_secs(2)).await;
        (conn, told)
    }

    #[tokio::test]
    async fn one_prober_address_holds_half_the_sessions_and_another_still_gets_in() {
        assert_eq!(
            [1, 2, 3, 4, 16].map(prober_share),
            [1, 1, 2, 2, 8],
            "half of max_sessions, rounded up, at least one"
        );
        let (addr, mut results, _) = admitting(Admission::new(&settings(4, 8), None)).await;
        let greedy = std::net::Ipv4Addr::new(127, 0, 0, 1);
        let mut held = Vec::new();
        for name in ["greedy-1", "greedy-2"] {
            let (conn, handshake) = hello_from(&addr, greedy, name).await;
            handshake.unwrap();
            held.push((conn, results.recv().await.unwrap().unwrap()));
        }
        // Another node name from the same address changes nothing: the share is per address.
        let (mut third, handshake) = hello_from(&addr, greedy, "greedy-3").await;
        handshake.unwrap();
        let refused = results.recv().await.unwrap().unwrap_err();
        assert_eq!(refused.refusal(), Some(SessionResult::Limit));
        let said = third.recv(Duration::from_secs(2)).await.unwrap();
        assert!(
            matches!(&said, Message::Error { message, .. } if message.contains("share") && message.contains("2 of 4")),
            "{said:?}"
        );
        // Two sessions are free, and another prober's address takes one.
        let (_other, handshake) =
            hello_from(&addr, std::net::Ipv4Addr::new(127, 0, 0, 2), "other").await;
        handshake.unwrap();
        let admitted = results
            .recv()
            .await
            .unwrap()
            .expect("another prober gets in");
        assert_eq!(admitted.0, "other");
        // A session that ends gives its place back to its address.
        held.pop();
        let (_again, handshake) = hello_from(&addr, greedy, "greedy-4").await;
        handshake.unwrap();
        results
            .recv()
            .await
            .unwrap()
            .expect("the freed place is taken again");
    }

    #[test]
    fn a_prober_share_is_given_back_when_its_session_ends() {
        let sessions = Arc::new(ProberSessions::new(1));
        let a: std::net::IpAddr = "192.0.2.1".parse().unwrap();
        let mapped: std::net::IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        let first = sessions.take(a).expect("the first");
        assert!(
            sessions.take(mapped).is_none(),
            "the same address over IPv6"
        );
        assert_eq!(sessions.held_by(a), 1);
        drop(first);
        assert_eq!(sessions.held_by(a), 0);
        assert!(sessions.take(a).is_some());
    }

    #[tokio::test]
    async fn past_the_session_limit_an_authenticated_prober_is_refused_as_limit() {
        let (addr, mut results, _) = admitting(Admission::new(&settings(1, 4), None)).await;
        let (_first, handshake) = hello(&addr, "node-a").await;
        handshake.unwrap();
        let _held = results.recv().await.unwrap().unwrap();
        let (_second, _) = hello(&addr, "node-b").await;
        let refused = results.recv().await.unwrap().unwrap_err();
        assert_eq!(refused.refusal(), Some(SessionResult::Limit));
    }
}
