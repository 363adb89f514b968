//! A session kept warm across bursts: [`WarmSession`] builds it at the first burst and rebuilds
//! it after a failure or when the responder closed it while idle.

use crate::control::message::Identity;
use crate::verbs::Context;

use super::session::Session;
use super::{device_placement, BurstRequest, BurstWorker, ProbeError, ProbeOutcome, ProbeSettings};

/// A session to one responder kept warm across bursts: built on the first burst, rebuilt after
/// a failure (an errored QP is never reused) and when the responder closed it while idle; a
/// rebuild is setup (`new_session`, `setup_seconds`), never a link failure.
pub struct WarmSession {
    settings: ProbeSettings,
    /// The local device and its burst thread, opened once (by the caller, or at the first
    /// burst) and shared by every session this builds.
    device: Option<(Context, BurstWorker)>,
    session: Option<Session>,
    /// What the responder said about itself at the last handshake that got that far.
    peer: Option<Identity>,
    /// The local device's ping QP, told to the responder in every session request.
    ping_qpn: Option<u32>,
}

impl WarmSession {
    /// Opens the device named in `settings` at the first burst.
    pub fn new(settings: ProbeSettings) -> Self {
        WarmSession {
            settings,
            device: None,
            session: None,
            peer: None,
            ping_qpn: None,
        }
    }

    /// Uses a device the caller already opened and its burst thread (a device worker's).
    pub fn on_device(ctx: Context, worker: BurstWorker, settings: ProbeSettings) -> Self {
        WarmSession {
            settings,
            device: Some((ctx, worker)),
            session: None,
            peer: None,
            ping_qpn: None,
        }
    }

    /// Tells the responders of this path's sessions where the local device's pings come from, so
    /// that they answer them and say where to send them (`ProbeOutcome::ping`).
    pub fn with_pings(mut self, ping_qpn: u32) -> Self {
        self.ping_qpn = Some(ping_qpn);
        self
    }

    /// Runs one burst as the settings describe it, (re)building the session first when needed.
    pub async fn burst(&mut self) -> ProbeOutcome {
        let request = BurstRequest::from(&self.settings);
        self.burst_with(&request).await
    }

    /// Runs one burst of `request` (e.g. paced now, unpaced for a capacity check later) on the
    /// warm session, (re)building it first when needed.
    pub async fn burst_with(&mut self, request: &BurstRequest) -> ProbeOutcome {
        let mut rebuilt_once = false;
        loop {
            let fresh = self.session.is_none();
            let mut session = match self.session.take() {
                Some(s) => s,
                None => match self.establish().await {
                    Ok(s) => s,
                    Err(e) => {
                        let mut outcome = ProbeOutcome::failed(&self.settings, &e);
                        outcome.kind = request.kind();
                        outcome.new_session = true;
                        outcome.peer_identity = self.peer.clone();
                        return outcome;
                    }
                },
            };
            let mut outcome = session.burst_with(request).await;
            outcome.new_session = fresh;
            outcome.peer_identity = self.peer.clone();
            let closed_by_responder = session.closed_by_responder;
            if session.is_usable() && !closed_by_responder {
                self.session = Some(session); // warm for the next burst
            } else {
                session.close().await;
            }
            if closed_by_responder && !fresh && !rebuilt_once {
                tracing::debug!(target = %self.settings.target, "the responder closed the idle session: rebuilding");
                rebuilt_once = true;
                continue;
            }
            return outcome;
        }
    }

    async fn establish(&mut self) -> Result<Session, ProbeError> {
        let (ctx, worker) = match &self.device {
            Some(device) => device.clone(),
            None => {
                // The local device first: a node without RDMA says so without touching the
                // network.
                let local = &self.settings.local;
                let ctx = Context::open(local.device.as_deref(), local.port)?;
                let worker = BurstWorker::start(device_placement(ctx.device_name()).await)?;
                self.device.insert((ctx, worker)).clone()
            }
        };
        Session::establish(ctx, worker, &self.settings, &mut self.peer, self.ping_qpn).await
    }

    /// Says goodbye to the responder (best effort) and releases everything.
    pub async fn close(mut self) {
        if let Some(session) = self.session.take() {
            session.close().await;
        }
    }
}
