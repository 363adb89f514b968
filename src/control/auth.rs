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
//! A server holding two keys (during a rollover) sends a proof under each; the client proves with
//! the first of its own keys that one of them verifies under, and the server accepts a client
//! proof under either of its keys. The key both proved is what `seal` derives the connection's
//! frame keys from, so every frame after the handshake is encrypted and authenticated too
//! (docs/security.md).
//!
//! Everything here is pure (apart from drawing nonces from the OS) and unit-tested.

use std::fmt;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use thiserror::Error;

use zeroize::Zeroizing;

#[cfg(doc)]
use super::message::MAX_KEYS;
use super::message::{Nonce, Proof};
use super::seal::{FrameKeys, Role};

type HmacSha256 = Hmac<Sha256>;

const SERVER_LABEL: &[u8] = b"rdma-probe server";
const CLIENT_LABEL: &[u8] = b"rdma-probe client";

/// A pre-shared key. Its bytes never appear in `Debug` output or in error messages.
#[derive(Clone)]
pub struct Psk(Zeroizing<Vec<u8>>);

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
    /// The file's mode lets others than its owner read (or change) the key.
    #[error(
        "pre-shared key file {path} has mode {mode:04o}: {exposure}; refusing a key that is not \
         private. Fix: chmod 600 {path} (docs/security.md, \"Key files\")",
        path = .path.display()
    )]
    NotPrivate {
        path: PathBuf,
        mode: u32,
        exposure: &'static str,
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
    ///
    /// A file others may read is refused before it is read ([`exposure`]), checked on the open
    /// file so that what is checked is what is read.
    pub fn load(path: impl AsRef<Path>) -> Result<Psk, PskError> {
        use std::io::Read;
        use std::os::unix::fs::MetadataExt;

        let path = path.as_ref();
        let read_error = |source| PskError::Read {
            path: path.to_path_buf(),
            source,
        };
        let mut file = std::fs::File::open(path).map_err(read_error)?;
        let meta = file.metadata().map_err(read_error)?;
        if let Some(exposure) = exposure(meta.mode(), meta.uid()) {
            return Err(PskError::NotPrivate {
                path: path.to_path_buf(),
                mode: meta.mode() & 0o7777,
                exposure,
            });
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(read_error)?;
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
        Ok(Psk(Zeroizing::new(bytes)))
    }

    fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Why a key file with this mode and owner is not private, or `None` if it is.
///
/// Others may have no access at all, and the group may never write. The group may read only a
/// file owned by root: that is how a Kubernetes Secret volume reaches a non-root exporter (the
/// kubelet owns the files and, with `fsGroup`, gives that group read access whatever the
/// `defaultMode`), and how a root-managed key is shared with a service's group (PostgreSQL
/// accepts its key files on the same terms). A file owned by anyone else must be `0600` or
/// stricter (docs/security.md, "Key files").
pub fn exposure(mode: u32, owner_uid: u32) -> Option<&'static str> {
    if mode & 0o007 != 0 {
        Some("users other than its owner and group can access it")
    } else if mode & 0o020 != 0 {
        Some("its group can change it")
    } else if mode & 0o050 != 0 && owner_uid != 0 {
        Some("its group can read it (allowed only for a file owned by root)")
    } else {
        None
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
/// `None` talking to a node with a PSK fails exactly like a wrong key (reason `auth`). It does not
/// protect the frames after the handshake: keys derived from an empty secret would be anyone's.
#[derive(Clone, Debug)]
pub enum AuthMode {
    Psk(Keys),
    None,
}

/// The keys a node holds: the one it prefers and, during a rollover, the previous one
/// (docs/security.md, "Rotating the key"). A responder accepts either; a prober proves with the
/// first one the responder also holds.
#[derive(Clone, Debug)]
pub struct Keys {
    current: Psk,
    previous: Option<Psk>,
}

impl Keys {
    pub fn new(current: Psk, previous: Option<Psk>) -> Keys {
        Keys { current, previous }
    }

    /// Whether a previous key is held next to the current one.
    pub fn has_previous(&self) -> bool {
        self.previous.is_some()
    }
}

impl AuthMode {
    /// One key.
    pub fn psk(psk: Psk) -> AuthMode {
        AuthMode::Psk(Keys::new(psk, None))
    }

    /// The keys to try, in order of preference: at most [`MAX_KEYS`]; `None` proves with the
    /// empty key.
    fn keys(&self) -> Vec<&[u8]> {
        match self {
            AuthMode::Psk(keys) => std::iter::once(&keys.current)
                .chain(keys.previous.as_ref())
                .map(Psk::as_bytes)
                .collect(),
            AuthMode::None => vec![&[]],
        }
    }

    /// Whether frames after the handshake are protected (always, except with `auth: none`).
    pub fn protects_frames(&self) -> bool {
        matches!(self, AuthMode::Psk(_))
    }
}

/// The key both ends proved in one handshake, from which that connection's frame keys come.
pub struct AgreedKey<'a> {
    key: &'a [u8],
    protect: bool,
}

impl AgreedKey<'_> {
    /// The connection's frame keys, or `None` with `auth: none` (frames stay clear).
    pub fn frame_keys(
        &self,
        client_nonce: &Nonce,
        server_nonce: &Nonce,
        role: Role,
    ) -> Option<FrameKeys> {
        self.protect
            .then(|| FrameKeys::derive(self.key, client_nonce, server_nonce, role))
    }

    /// The client's proof for this handshake.
    pub fn client_proof(&self, server_nonce: &Nonce, client_nonce: &Nonce) -> Proof {
        client_proof(self.key, server_nonce, client_nonce)
    }
}

impl fmt::Debug for AgreedKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AgreedKey(<redacted>)")
    }
}

/// A fresh nonce from the operating system's CSPRNG.
pub fn new_nonce() -> Result<Nonce, getrandom::Error> {
    let mut nonce = [0u8; 32];
    getrandom::getrandom(&mut nonce)?;
    Ok(nonce)
}

fn mac(key: &[u8], label: &[u8], first: &Nonce, second: &Nonce) -> HmacSha256 {
    // HMAC accepts keys of any length (including empty), so this cannot fail.
    let mut mac = <HmacSha256 as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(label);
    mac.update(first);
    mac.update(second);
    mac
}

/// The server's proof for this pair of nonces under `key`.
fn server_proof(key: &[u8], client_nonce: &Nonce, server_nonce: &Nonce) -> Proof {
    mac(key, SERVER_LABEL, client_nonce, server_nonce)
        .finalize()
        .into_bytes()
        .into()
}

/// The client's proof for this pair of nonces under `key`.
fn client_proof(key: &[u8], server_nonce: &Nonce, client_nonce: &Nonce) -> Proof {
    mac(key, CLIENT_LABEL, server_nonce, client_nonce)
        .finalize()
        .into_bytes()
        .into()
}

/// The server's proofs, one per key it holds, in its order of preference.
pub fn server_proofs(auth: &AuthMode, client_nonce: &Nonce, server_nonce: &Nonce) -> Vec<Proof> {
    auth.keys()
        .into_iter()
        .map(|key| server_proof(key, client_nonce, server_nonce))
        .collect()
}

/// The client's side: the first of its keys that one of the server's proofs verifies under
/// (constant-time comparisons), or `None` if the server holds none of them.
pub fn verify_server_proofs<'a>(
    auth: &'a AuthMode,
    client_nonce: &Nonce,
    server_nonce: &Nonce,
    proofs: &[Proof],
) -> Option<AgreedKey<'a>> {
    auth.keys()
        .into_iter()
        .find(|key| {
            proofs.iter().any(|proof| {
                mac(key, SERVER_LABEL, client_nonce, server_nonce)
                    .verify_slice(proof)
                    .is_ok()
            })
        })
        .map(|key| AgreedKey {
            key,
            protect: auth.protects_frames(),
        })
}

/// The server's side: the key among its own the client's proof verifies under (constant-time
/// comparisons), or `None`.
pub fn verify_client_proof<'a>(
    auth: &'a AuthMode,
    server_nonce: &Nonce,
    client_nonce: &Nonce,
    proof: &Proof,
) -> Option<AgreedKey<'a>> {
    auth.keys()
        .into_iter()
        .find(|key| {
            mac(key, CLIENT_LABEL, server_nonce, client_nonce)
                .verify_slice(proof)
                .is_ok()
        })
        .map(|key| AgreedKey {
            key,
            protect: auth.protects_frames(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn key(bytes: &[u8]) -> Psk {
        Psk::from_bytes(bytes).unwrap()
    }

    fn psk(bytes: &[u8]) -> AuthMode {
        AuthMode::psk(key(bytes))
    }

    fn temp_file_with_mode(name: &str, contents: &[u8], mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("rdma-probe-psk-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    fn temp_file(name: &str, contents: &[u8]) -> PathBuf {
        temp_file_with_mode(name, contents, 0o600)
    }

    #[test]
    fn key_files_others_can_read_are_refused_with_the_fix() {
        use std::os::unix::fs::MetadataExt;
        let key = b"0123456789abcdef0123\n";
        for mode in [0o600, 0o400] {
            let p = temp_file_with_mode(&format!("ok-{mode:o}"), key, mode);
            assert!(Psk::load(&p).is_ok(), "{mode:o}");
        }
        for (mode, said) in [
            (0o644, "other"),
            (0o604, "other"),
            (0o602, "other"),
            (0o620, "group can change"),
        ] {
            let p = temp_file_with_mode(&format!("bad-{mode:o}"), key, mode);
            let err = Psk::load(&p).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, PskError::NotPrivate { .. }), "{text}");
            assert!(text.contains(&format!("mode {mode:04o}")), "{text}");
            assert!(text.contains(said), "{text}");
            assert!(
                text.contains(&format!("chmod 600 {}", p.display())),
                "{text}"
            );
            assert!(!text.contains("0123456789abcdef"), "{text}");
        }
        // Group-readable: only for a root-owned file.
        let p = temp_file_with_mode("group-read", key, 0o640);
        let owner = std::fs::metadata(&p).unwrap().uid();
        assert_eq!(Psk::load(&p).is_ok(), owner == 0);
    }

    #[test]
    fn exposure_follows_owner_and_mode() {
        assert_eq!(exposure(0o100600, 1000), None);
        assert_eq!(exposure(0o100400, 1000), None);
        assert_eq!(exposure(0o100000, 1000), None);
        // A Kubernetes Secret with fsGroup: root-owned, 0440.
        assert_eq!(exposure(0o100440, 0), None);
        assert_eq!(exposure(0o100640, 0), None);
        assert!(exposure(0o100440, 65532).is_some());
        assert!(exposure(0o100640, 1000).is_some());
        assert!(exposure(0o100660, 0).is_some());
        assert!(exposure(0o100444, 0).is_some());
        assert!(exposure(0o100604, 0).is_some());
        assert!(exposure(0o100601, 1000).is_some());
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
        let secret = Psk::from_bytes(&b"super-secret-key-material"[..]).unwrap();
        assert_eq!(format!("{secret:?}"), "Psk(<redacted>)");
        let mode = AuthMode::Psk(Keys::new(secret.clone(), Some(secret)));
        assert!(!format!("{mode:?}").contains("secret"));
        let (cn, sn) = ([1u8; 32], [2u8; 32]);
        let agreed = verify_server_proofs(&mode, &cn, &sn, &server_proofs(&mode, &cn, &sn));
        assert_eq!(format!("{agreed:?}"), "Some(AgreedKey(<redacted>))");
    }

    #[test]
    fn nonces_are_fresh() {
        assert_ne!(new_nonce().unwrap(), new_nonce().unwrap());
    }

    /// Whether a client holding `client` and a server holding `server` agree on a key.
    fn agree(client: &AuthMode, server: &AuthMode) -> bool {
        let (cn, sn) = ([1u8; 32], [2u8; 32]);
        let proofs = server_proofs(server, &cn, &sn);
        let Some(key) = verify_server_proofs(client, &cn, &sn, &proofs) else {
            return false;
        };
        let proof = key.client_proof(&sn, &cn);
        verify_client_proof(server, &sn, &cn, &proof).is_some()
    }

    #[test]
    fn proofs_verify_with_the_same_key_only() {
        let (a, b) = (psk(KEY), psk(b"another key, 16+ bytes long"));
        assert!(agree(&a, &a));
        assert!(agree(&AuthMode::None, &AuthMode::None));
        assert!(!agree(&a, &b));
        assert!(!agree(&b, &a));
        assert!(!agree(&AuthMode::None, &a));
        assert!(!agree(&a, &AuthMode::None));
    }

    #[test]
    fn either_key_of_a_rollover_is_accepted() {
        let (old, new) = (
            &b"the old key, 16+ bytes long"[..],
            &b"the new key, 16+ bytes long"[..],
        );
        let both = AuthMode::Psk(Keys::new(key(new), Some(key(old))));
        assert!(agree(&psk(old), &both));
        assert!(agree(&psk(new), &both));
        assert!(agree(&both, &psk(old)));
        assert!(agree(&both, &psk(new)));
        assert!(agree(&both, &both));
        let neither = psk(b"neither key, 16+ bytes long");
        assert!(!agree(&neither, &both));
        assert!(!agree(&both, &neither));
        assert!(!agree(&AuthMode::None, &both));
    }

    #[test]
    fn a_client_with_both_keys_prefers_its_first() {
        let (old, new) = (
            &b"the old key, 16+ bytes long"[..],
            &b"the new key, 16+ bytes long"[..],
        );
        let client = AuthMode::Psk(Keys::new(key(new), Some(key(old))));
        let server = AuthMode::Psk(Keys::new(key(old), Some(key(new))));
        let (cn, sn) = ([1u8; 32], [2u8; 32]);
        let agreed =
            verify_server_proofs(&client, &cn, &sn, &server_proofs(&server, &cn, &sn)).unwrap();
        assert_eq!(agreed.key, new);
        // The server finds the key the client proved, whatever its own order.
        let proof = agreed.client_proof(&sn, &cn);
        assert_eq!(
            verify_client_proof(&server, &sn, &cn, &proof).unwrap().key,
            new
        );
    }

    #[test]
    fn proofs_are_bound_to_role_and_nonces() {
        let a = psk(KEY);
        let (cn, sn) = ([1u8; 32], [2u8; 32]);
        let sp = server_proof(KEY, &cn, &sn);
        // A server proof is not a client proof (reflection), even with the nonces swapped.
        assert!(verify_client_proof(&a, &sn, &cn, &sp).is_none());
        assert!(verify_client_proof(&a, &cn, &sn, &sp).is_none());
        // Another nonce on either side invalidates it (replay).
        assert!(verify_server_proofs(&a, &[3; 32], &sn, &[sp]).is_none());
        assert!(verify_server_proofs(&a, &cn, &[3; 32], &[sp]).is_none());
        let mut flipped = sp;
        flipped[31] ^= 1;
        assert!(verify_server_proofs(&a, &cn, &sn, &[flipped]).is_none());
        assert!(verify_server_proofs(&a, &cn, &sn, &[flipped, sp]).is_some());
    }

    #[test]
    fn frames_are_protected_except_with_auth_none() {
        let (cn, sn) = ([1u8; 32], [2u8; 32]);
        for (mode, protected) in [(psk(KEY), true), (AuthMode::None, false)] {
            let agreed =
                verify_server_proofs(&mode, &cn, &sn, &server_proofs(&mode, &cn, &sn)).unwrap();
            assert_eq!(
                agreed.frame_keys(&cn, &sn, Role::Prober).is_some(),
                protected
            );
        }
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
            hex(&server_proof(KEY, &cn, &sn)),
            "7b7a0c3f5aea2f7ea5f98cd7255ecb3c0f5ba264ec2abebfa908303fdce175d2"
        );
        assert_eq!(
            hex(&client_proof(KEY, &sn, &cn)),
            "5aebb3526f6fed5a21d44309bad331a86e8a0871d1ae4f1092e4d2a251b01cd4"
        );
        assert_eq!(
            hex(&server_proofs(&AuthMode::None, &cn, &sn)[0]),
            "276dcf324baae7a35bab3a74719fdf3cebd5ec5cb4ca3d2e60bf8f8e0494dbc6"
        );
    }
}
