//! The authentication handshakes: [`client_handshake`] for the prober, [`server_handshake`] for
//! the responder.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use super::{Connection, ControlError};
use crate::control::auth::{self, AuthMode, OwnHello, Transcript};
use crate::control::codec::CodecError;
use crate::control::message::{Identity, Message};
use crate::control::seal::Role;
use crate::reason::ErrorReason;

/// The prober's side of the handshake: prove the key, check the server's proof, all within
/// `deadline`. On success the connection is authenticated both ways, its frames are protected
/// from here on (unless `auth: none`), and session messages may flow.
///
/// If none of the server's proofs verifies, the server is told (`Error{auth}`) and the result is
/// [`ControlError::Auth`]; nothing about local QPs has been sent at that point. The server's
/// `AuthOk` is the first protected frame: it confirms that both ends derived the same keys, and
/// carries what the responder says about itself (returned; `None` from a responder that does not
/// tell).
pub async fn client_handshake(
    conn: &mut Connection,
    node_name: &str,
    auth: &AuthMode,
    deadline: Duration,
) -> Result<Option<Identity>, ControlError> {
    let until = Instant::now() + deadline;
    let client_nonce = auth::new_nonce().map_err(ControlError::Random)?;
    // While this handshake runs, this process's responder refuses a Hello with this nonce that
    // was not meant for it (a connection redirected back here).
    let _own = OwnHello::register(client_nonce);
    let target = conn.target.clone();
    let hello = Message::Hello {
        node: node_name.to_string(),
        target: target.clone(),
        client_nonce,
    };
    conn.send_before(&hello, until, deadline).await?;

    let (server_nonce, server_proofs) = match conn.recv_before(until, deadline).await? {
        Message::Challenge {
            server_nonce,
            server_proofs,
        } => (server_nonce, server_proofs),
        other => return Err(ControlError::unexpected("challenge", other)),
    };
    let transcript = Transcript::new(node_name, &target, &client_nonce, &server_nonce);
    let Some(key) = auth::verify_server_proofs(auth, &transcript, &server_proofs) else {
        conn.send_error_best_effort(ErrorReason::Auth, "authentication failed")
            .await;
        return Err(ControlError::Auth(
            "the responder's proof did not verify (different pre-shared key, auth: none on one side only, or the handshake was changed on the way)",
        ));
    };

    let transcript = transcript.with_proofs(&server_proofs);
    let client_proof = key.client_proof(&transcript);
    conn.send_before(&Message::Authenticate { client_proof }, until, deadline)
        .await?;
    conn.keys = key.frame_keys(&transcript, Role::Prober);
    conn.ping_key = Some(key.ping_key(&transcript));
    match conn.recv_before(until, deadline).await? {
        Message::AuthOk { identity } => Ok(identity),
        other => Err(ControlError::unexpected("auth_ok", other)),
    }
}

/// The responder's side of the handshake, within `deadline`. Returns the prober's node name (as
/// claimed in its `Hello`; it is only trustworthy as far as every PSK holder is).
///
/// Failures are reported to the peer before returning: a wrong proof as `Error{auth}` (with no
/// detail, so the message is no oracle), a version mismatch as `Error{protocol}` naming both
/// versions (framed in our version, so an older or newer peer can still tell what happened).
/// On success every later frame is protected (unless `auth: none`), starting with `AuthOk`, which
/// carries `identity`: only a prober that proved the key learns it.
pub async fn server_handshake(
    conn: &mut Connection,
    auth: &AuthMode,
    identity: Option<&Identity>,
    deadline: Duration,
) -> Result<String, ControlError> {
    let until = Instant::now() + deadline;
    let (node, target, client_nonce) = match conn.recv_before(until, deadline).await {
        Ok(Message::Hello {
            node,
            target,
            client_nonce,
        }) => (node, target, client_nonce),
        Ok(other) => {
            let err = ControlError::unexpected("hello", other);
            if matches!(err, ControlError::Unexpected { .. }) {
                conn.send_error_best_effort(ErrorReason::Protocol, &err.to_string())
                    .await;
            }
            return Err(err);
        }
        Err(err @ ControlError::Codec(CodecError::UnsupportedVersion { .. })) => {
            conn.send_error_best_effort(ErrorReason::Protocol, &err.to_string())
                .await;
            return Err(err);
        }
        Err(err) => return Err(err),
    };

    // This process's own prober sent this Hello, for an address that is not this node: the
    // connection was redirected back here. Answering would make the prober believe the peer is
    // this node and skip its paths (docs/security.md, "Redirected connections").
    if OwnHello::is_own(&client_nonce) {
        let local = conn.stream.local_addr().ok();
        if !designates(&target, local, identity.map(|i| i.node.as_str())) {
            let err = ControlError::Redirected { target };
            conn.send_error_best_effort(ErrorReason::Protocol, &err.to_string())
                .await;
            return Err(err);
        }
    }

    let server_nonce = auth::new_nonce().map_err(ControlError::Random)?;
    let transcript = Transcript::new(&node, &target, &client_nonce, &server_nonce);
    let server_proofs = auth::server_proofs(auth, &transcript);
    let transcript = transcript.with_proofs(&server_proofs);
    let challenge = Message::Challenge {
        server_nonce,
        server_proofs,
    };
    conn.send_before(&challenge, until, deadline).await?;

    let client_proof = match conn.recv_before(until, deadline).await? {
        Message::Authenticate { client_proof } => client_proof,
        other => return Err(ControlError::unexpected("authenticate", other)),
    };
    let Some(key) = auth::verify_client_proof(auth, &transcript, &client_proof) else {
        conn.send_error_best_effort(ErrorReason::Auth, "authentication failed")
            .await;
        return Err(ControlError::Auth(
            "the prober's proof did not verify (different pre-shared key, or auth: none on one side only)",
        ));
    };
    conn.keys = key.frame_keys(&transcript, Role::Responder);
    conn.ping_key = Some(key.ping_key(&transcript));
    let auth_ok = Message::AuthOk {
        identity: identity.cloned(),
    };
    conn.send_before(&auth_ok, until, deadline).await?;
    Ok(node)
}

/// Whether `target` (a `host:port` a prober dialed) names this node: its node name, a loopback
/// host, or the address the connection arrived on.
pub(super) fn designates(target: &str, local: Option<SocketAddr>, node: Option<&str>) -> bool {
    let host = match target.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => host,
        _ => target,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if Some(host) == node || host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => {
            let ip = ip.to_canonical();
            ip.is_loopback() || local.is_some_and(|l| l.ip().to_canonical() == ip)
        }
        Err(_) => false,
    }
}
