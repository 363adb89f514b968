//! Pre-shared-key authentication: the key type, nonces, and the HMAC proofs of the handshake.
//!
//! Mutual challenge/response, both directions bound to both nonces:
//!
//! ```text
//! server_proof = HMAC-SHA256(psk, "rdma-probe server" || client_nonce || server_nonce)
//! client_proof = HMAC-SHA256(psk, "rdma-probe client" || server_nonce || client_nonce)
//! ```
//!
//! The distinct labels stop a proof from one role being reflected back as the other role's proof;
//! the fresh nonces of both sides stop replay of a recorded handshake against either side. All
//! inputs have a fixed length, so the concatenation is unambiguous. Tags are compared in constant
//! time (`Mac::verify_slice`).
//!
//! What this does *not* do: it authenticates the handshake, not every later frame, and nothing is
//! encrypted. It keeps unauthenticated clients from obtaining QP numbers, rkeys and addresses or
//! from making a responder pin memory, which is the threat it is for (docs/architecture.md,
//! "Authentication"); an attacker who can hijack an established TCP connection on the management
//! network is out of scope (run the control port on a trusted network, or add TLS in front).
//!
//! Everything here is pure (apart from drawing nonces from the OS) and unit-tested.

use std::fmt;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use thiserror::Error;

use super::message::{Nonce, Proof};

type HmacSha256 = Hmac<Sha256>;

const SERVER_LABEL: &[u8] = b"rdma-probe server";
const CLIENT_LABEL: &[u8] = b"rdma-probe client";

/// A pre-shared key. Its bytes never appear in `Debug` output or in error messages.
#[derive(Clone)]
pub struct Psk(Vec<u8>);

/// Why a PSK could not be loaded. Deliberately never contains key material.
#[derive(Debug, Error)]
pub enum PskError {
    #[error("cannot read pre-shared key file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("pre-shared key{} is empty", in_file(.path))]
    Empty { path: Option<PathBuf> },
    #[error(
        "pre-shared key{} is {len} bytes, at least {min} required (e.g. `head -c 32 /dev/urandom | base64`)",
        in_file(.path)
    )]
    TooShort {
        path: Option<PathBuf>,
        len: usize,
        min: usize,
    },
}

fn in_file(path: &Option<PathBuf>) -> String {
    match path {
        Some(p) => format!(" in {}", p.display()),
        None => String::new(),
    }
}

impl Psk {
    /// Shortest key accepted: 16 bytes (128 bits if random). Short keys would make an offline
    /// guess from one recorded handshake cheap.
    pub const MIN_LEN: usize = 16;

    /// Use `bytes` as the key, exactly as given.
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Result<Psk, PskError> {
        Self::checked(bytes.into(), None)
    }

    /// Read the key from a file (e.g. a mounted Kubernetes Secret). One trailing newline (`\n` or
    /// `\r\n`) is removed, because `echo secret > file` and most editors add one and the two ends
    /// would otherwise disagree on the key; any other byte, including other whitespace, is key.
    pub fn load(path: impl AsRef<Path>) -> Result<Psk, PskError> {
        let path = path.as_ref();
        let mut bytes = std::fs::read(path).map_err(|source| PskError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
        }
        Self::checked(bytes, Some(path.to_path_buf()))
    }

    fn checked(bytes: Vec<u8>, path: Option<PathBuf>) -> Result<Psk, PskError> {
        if bytes.is_empty() {
            return Err(PskError::Empty { path });
        }
        if bytes.len() < Self::MIN_LEN {
            return Err(PskError::TooShort {
                path,
                len: bytes.len(),
                min: Self::MIN_LEN,
            });
        }
        Ok(Psk(bytes))
    }

    fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Psk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Psk(<redacted>)")
    }
}

/// How the control channel authenticates.
///
/// `None` exists only because the config can say `auth: none` explicitly. It runs the very same
/// handshake with an empty key, so there is one code path: both ends must agree, and a node with
/// `None` talking to a node with a PSK fails exactly like a wrong key (reason `auth`).
#[derive(Clone, Debug)]
pub enum AuthMode {
    Psk(Psk),
    None,
}

impl AuthMode {
    fn key(&self) -> &[u8] {
        match self {
            AuthMode::Psk(psk) => psk.as_bytes(),
            AuthMode::None => &[],
        }
    }
}

/// A fresh nonce from the operating system's CSPRNG.
pub fn new_nonce() -> Result<Nonce, getrandom::Error> {
    let mut nonce = [0u8; 32];
    getrandom::getrandom(&mut nonce)?;
    Ok(nonce)
}

fn mac(auth: &AuthMode, label: &[u8], first: &Nonce, second: &Nonce) -> HmacSha256 {
    // HMAC accepts keys of any length (including empty), so this cannot fail.
    let mut mac = <HmacSha256 as Mac>::new_from_slice(auth.key())
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(label);
    mac.update(first);
    mac.update(second);
    mac
}

/// The server's proof for this pair of nonces.
pub fn server_proof(auth: &AuthMode, client_nonce: &Nonce, server_nonce: &Nonce) -> Proof {
    mac(auth, SERVER_LABEL, client_nonce, server_nonce)
        .finalize()
        .into_bytes()
        .into()
}

/// The client's proof for this pair of nonces.
pub fn client_proof(auth: &AuthMode, server_nonce: &Nonce, client_nonce: &Nonce) -> Proof {
    mac(auth, CLIENT_LABEL, server_nonce, client_nonce)
        .finalize()
        .into_bytes()
        .into()
}

/// Constant-time check of a server proof (done by the client).
pub fn verify_server_proof(
    auth: &AuthMode,
    client_nonce: &Nonce,
    server_nonce: &Nonce,
    proof: &Proof,
) -> bool {
    mac(auth, SERVER_LABEL, client_nonce, server_nonce)
        .verify_slice(proof)
        .is_ok()
}

/// Constant-time check of a client proof (done by the server).
pub fn verify_client_proof(
    auth: &AuthMode,
    server_nonce: &Nonce,
    client_nonce: &Nonce,
    proof: &Proof,
) -> bool {
    mac(auth, CLIENT_LABEL, server_nonce, client_nonce)
        .verify_slice(proof)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn psk(key: &[u8]) -> AuthMode {
        AuthMode::Psk(Psk::from_bytes(key).unwrap())
    }

    fn temp_file(name: &str, contents: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rdma-probe-psk-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    #[test]
    fn load_trims_exactly_one_trailing_newline() {
        let p = temp_file("lf", b"0123456789abcdef\n");
        assert_eq!(Psk::load(&p).unwrap().as_bytes(), b"0123456789abcdef");
        let p = temp_file("crlf", b"0123456789abcdef\r\n");
        assert_eq!(Psk::load(&p).unwrap().as_bytes(), b"0123456789abcdef");
        let p = temp_file("two", b"0123456789abcdef\n\n");
        assert_eq!(Psk::load(&p).unwrap().as_bytes(), b"0123456789abcdef\n");
        let p = temp_file("none", b"0123456789abcdef ");
        assert_eq!(Psk::load(&p).unwrap().as_bytes(), b"0123456789abcdef ");
    }

    #[test]
    fn load_rejects_empty_and_short_keys_without_printing_them() {
        let p = temp_file("empty", b"\n");
        let err = Psk::load(&p).unwrap_err();
        assert!(matches!(err, PskError::Empty { .. }));
        assert!(err.to_string().contains("empty"));
        assert!(err.to_string().contains(&p.display().to_string()));

        let p = temp_file("short", b"hunter2\n");
        let err = Psk::load(&p).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, PskError::TooShort { len: 7, .. }));
        assert!(text.contains("7 bytes"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!format!("{err:?}").contains("hunter2"));

        let err = Psk::load(temp_file("missing", b"").with_extension("nope")).unwrap_err();
        assert!(matches!(err, PskError::Read { .. }));
        assert!(Psk::from_bytes(Vec::new()).is_err());
    }

    #[test]
    fn debug_never_shows_the_key() {
        let key = Psk::from_bytes(&b"super-secret-key-material"[..]).unwrap();
        assert_eq!(format!("{key:?}"), "Psk(<redacted>)");
        let mode = AuthMode::Psk(key);
        assert!(!format!("{mode:?}").contains("secret"));
    }

    #[test]
    fn nonces_are_fresh() {
        assert_ne!(new_nonce().unwrap(), new_nonce().unwrap());
    }

    #[test]
    fn proofs_verify_with_the_same_key_only() {
        let (a, b) = (psk(KEY), psk(b"another key, 16+ bytes long"));
        let (cn, sn) = ([1u8; 32], [2u8; 32]);
        let sp = server_proof(&a, &cn, &sn);
        let cp = client_proof(&a, &sn, &cn);
        assert!(verify_server_proof(&a, &cn, &sn, &sp));
        assert!(verify_client_proof(&a, &sn, &cn, &cp));
        assert!(!verify_server_proof(&b, &cn, &sn, &sp));
        assert!(!verify_client_proof(&b, &sn, &cn, &cp));
        assert!(!verify_server_proof(&AuthMode::None, &cn, &sn, &sp));
    }

    #[test]
    fn proofs_are_bound_to_role_and_nonces() {
        let a = psk(KEY);
        let (cn, sn) = ([1u8; 32], [2u8; 32]);
        let sp = server_proof(&a, &cn, &sn);
        // A server proof is not a client proof (reflection), even with the nonces swapped.
        assert!(!verify_client_proof(&a, &sn, &cn, &sp));
        assert!(!verify_client_proof(&a, &cn, &sn, &sp));
        // Another nonce on either side invalidates it (replay).
        assert!(!verify_server_proof(&a, &[3; 32], &sn, &sp));
        assert!(!verify_server_proof(&a, &cn, &[3; 32], &sp));
        let mut flipped = sp;
        flipped[31] ^= 1;
        assert!(!verify_server_proof(&a, &cn, &sn, &flipped));
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn matches_vectors_from_an_independent_implementation() {
        // Computed with Python's hmac/hashlib, so another implementation of the protocol (or a
        // refactor of this one) can check itself against the same bytes.
        let (cn, sn) = ([1u8; 32], [2u8; 32]);
        assert_eq!(
            hex(&server_proof(&psk(KEY), &cn, &sn)),
            "7b7a0c3f5aea2f7ea5f98cd7255ecb3c0f5ba264ec2abebfa908303fdce175d2"
        );
        assert_eq!(
            hex(&client_proof(&psk(KEY), &sn, &cn)),
            "5aebb3526f6fed5a21d44309bad331a86e8a0871d1ae4f1092e4d2a251b01cd4"
        );
        assert_eq!(
            hex(&server_proof(&AuthMode::None, &cn, &sn)),
            "276dcf324baae7a35bab3a74719fdf3cebd5ec5cb4ca3d2e60bf8f8e0494dbc6"
        );
    }

    #[test]
    fn auth_none_uses_an_empty_key_on_both_sides() {
        let (cn, sn) = ([9u8; 32], [8u8; 32]);
        let sp = server_proof(&AuthMode::None, &cn, &sn);
        assert!(verify_server_proof(&AuthMode::None, &cn, &sn, &sp));
        assert!(!verify_server_proof(&psk(KEY), &cn, &sn, &sp));
    }
}
