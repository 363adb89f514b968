//! Pre-shared-key authentication: the key type, nonces, and the HMAC proofs of the handshake.
//!
//! Mutual challenge/response over a transcript of the whole handshake (protocol v3):
//!
//! ```text
//! prk          = HKDF-Extract(salt = "rdma-probe v3", ikm = psk)
//! proof_key    = HKDF-Expand(prk, "rdma-probe v3 proof key", 32)
//! frame_secret = HKDF-Expand(prk, "rdma-probe v3 frame secret", 32)
//! t1           = SHA-256("rdma-probe v3" || version u16 BE || len u64 BE || Hello.node
//!                        || len u64 BE || Hello.target || client_nonce || server_nonce)
//! server_proof = HMAC-SHA256(proof_key, "rdma-probe server" || t1)
//! t2           = SHA-256("rdma-probe v3" || t1 || count u64 BE || server_proofs...)
//! client_proof = HMAC-SHA256(proof_key, "rdma-probe client" || t2)
//! frame keys   = seal::FrameKeys::derive(frame_secret, salt = t2)
//! ```
//!
//! The distinct labels stop a proof from one role being reflected back as the other role's proof;
//! the fresh nonces of both sides stop replay of a recorded handshake against either side; the
//! transcript binds the proofs to the version, the prober's node name and the address it meant
//! to reach, so none of them can be changed on the way. Tags are compared in constant time
//! (`Mac::verify_slice`).
//!
//! A server holding two keys (during a rollover) sends a proof under each; the client proves with
//! the first of its own keys that one of them verifies under, and the server accepts a client
//! proof under either of its keys. The key both proved is what `seal` derives the connection's
//! frame keys from, so every frame after the handshake is encrypted and authenticated too
//! (docs/security.md).
//!
//! Everything here is pure (apart from drawing nonces from the OS, and the registry of this
//! process's own nonces, [`OwnHello`]) and unit-tested.

use std::fmt;
use std::path::{Path, PathBuf};

use base64ct::Encoding as _;
use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::{Digest as _, Sha256};
use thiserror::Error;

use zeroize::Zeroizing;

use super::codec::PROTOCOL_VERSION;
#[cfg(doc)]
use super::message::MAX_KEYS;
use super::message::{Nonce, Proof};
use super::seal::{FrameKeys, Role};
use crate::ping::packet::PingKey;

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
        "pre-shared key{} is {len} bytes, at least {min} random bytes required. {}",
        in_file(.path),
        new_key_hint(.path)
    )]
    TooShort {
        path: Option<PathBuf>,
        len: usize,
        min: usize,
    },
    /// The file is not one line of base64: a key of an older version (any 16 bytes, such as a
    /// passphrase), or not a key at all. The content is never quoted.
    #[error(
        "pre-shared key file {} is not base64: since control protocol v3 a key file holds at \
         least 32 random bytes, base64-encoded, on one line (a passphrase or an older key is \
         refused). {}",
        .path.display(),
        new_key_hint(&Some(.path.clone()))
    )]
    NotBase64 { path: PathBuf },
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

/// How to make a key that is accepted.
fn new_key_hint(path: &Option<PathBuf>) -> String {
    let file = path
        .as_ref()
        .map_or("FILE".to_owned(), |p| p.display().to_string());
    format!(
        "Make a new key with `(umask 077 && head -c 32 /dev/urandom | base64 > {file})` and give \
         the same file to every node (docs/security.md, \"Key files\")"
    )
}

fn in_file(path: &Option<PathBuf>) -> String {
    match path {
        Some(p) => format!(" in {}", p.display()),
        None => String::new(),
    }
}

impl Psk {
    /// Shortest key accepted: 32 bytes (256 bits, random). Anyone can get a responder's proof
    /// over a nonce of their choice (the server proves first), so a key that can be guessed
    /// (a passphrase) could be found offline (docs/security.md, "What the pre-shared key
    /// protects").
    pub const MIN_LEN: usize = 32;

    /// Use `bytes` (the decoded key, at least [`Psk::MIN_LEN`]) as the key, exactly as given.
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Result<Psk, PskError> {
        Self::checked(Zeroizing::new(bytes.into()), None)
    }

    /// Read the key from a file (e.g. a mounted Kubernetes Secret): one line of standard base64
    /// (padded or not) that decodes to at least [`Psk::MIN_LEN`] bytes, as `head -c 32
    /// /dev/urandom | base64` writes it. Whitespace around it (the trailing newline) is ignored.
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
        let mut text = Zeroizing::new(Vec::new());
        file.read_to_end(&mut text).map_err(read_error)?;
        let encoded = text.trim_ascii();
        if encoded.is_empty() {
            return Err(PskError::Empty {
                path: Some(path.to_path_buf()),
            });
        }
        let not_base64 = || PskError::NotBase64 {
            path: path.to_path_buf(),
        };
        let mut decoded = Zeroizing::new(vec![0u8; encoded.len()]);
        let len = if encoded.ends_with(b"=") {
            base64ct::Base64::decode(encoded, &mut decoded)
        } else {
            base64ct::Base64Unpadded::decode(encoded, &mut decoded)
        }
        .map_err(|_| not_base64())?
        .len();
        decoded.truncate(len);
        Self::checked(decoded, Some(path.to_path_buf()))
    }

    /// The key, if long enough; the bytes are wiped whatever the answer.
    fn checked(bytes: Zeroizing<Vec<u8>>, path: Option<PathBuf>) -> Result<Psk, PskError> {
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

/// Domain separation for everything the handshake derives or hashes (protocol v3).
const CONTEXT: &[u8] = b"rdma-probe v3";
/// HKDF-Expand labels: the proof key and the frame secret come from one HKDF-Extract of the key,
/// so the key itself is never an HMAC key (docs/security.md, "What the pre-shared key protects").
const PROOF_KEY_LABEL: &[u8] = b"rdma-probe v3 proof key";
const FRAME_SECRET_LABEL: &[u8] = b"rdma-probe v3 frame secret";

/// What both proofs of one handshake cover, hashed: the protocol version, the `Hello` (the
/// prober's node name, the address it meant to reach, its nonce) and the server's nonce; the
/// client's proof, and the frame keys, also cover the server's proofs as sent
/// ([`Transcript::with_proofs`]). So a proof from one handshake verifies in no other, and
/// nothing of the `Hello` can be changed on the way without the handshake failing.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Transcript([u8; 32]);

impl Transcript {
    /// The transcript up to the server's nonce.
    pub fn new(node: &str, target: &str, client_nonce: &Nonce, server_nonce: &Nonce) -> Self {
        let mut hash = Sha256::new();
        hash.update(CONTEXT);
        hash.update(PROTOCOL_VERSION.to_be_bytes());
        // Length-prefixed, so that no two (node, target) pairs hash alike.
        for field in [node.as_bytes(), target.as_bytes()] {
            hash.update((field.len() as u64).to_be_bytes());
            hash.update(field);
        }
        hash.update(client_nonce);
        hash.update(server_nonce);
        Transcript(hash.finalize().into())
    }

    /// The transcript after the server's proofs, in the order they were sent.
    pub fn with_proofs(&self, proofs: &[Proof]) -> Self {
        let mut hash = Sha256::new();
        hash.update(CONTEXT);
        hash.update(self.0);
        hash.update((proofs.len() as u64).to_be_bytes());
        for proof in proofs {
            hash.update(proof);
        }
        Transcript(hash.finalize().into())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for Transcript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Transcript(..)")
    }
}

/// The secrets one key gives: the proof key and the frame secret, from one HKDF-Extract. Wiped
/// when dropped.
struct Schedule {
    proof_key: Zeroizing<[u8; 32]>,
    frame_secret: Zeroizing<[u8; 32]>,
}

impl Schedule {
    fn of(key: &[u8]) -> Schedule {
        let hkdf = Hkdf::<Sha256>::new(Some(CONTEXT), key);
        let expand = |label: &[u8]| {
            let mut out = Zeroizing::new([0u8; 32]);
            // 32 bytes is far below HKDF-SHA256's limit of 255 * 32, so this cannot fail.
            hkdf.expand(label, out.as_mut())
                .unwrap_or_else(|_| unreachable!("32 bytes is a valid HKDF-SHA256 length"));
            out
        };
        Schedule {
            proof_key: expand(PROOF_KEY_LABEL),
            frame_secret: expand(FRAME_SECRET_LABEL),
        }
    }

    fn mac(&self, label: &[u8], transcript: &Transcript) -> HmacSha256 {
        // HMAC accepts keys of any length, so this cannot fail.
        let mut mac = <HmacSha256 as hmac::KeyInit>::new_from_slice(self.proof_key.as_ref())
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(label);
        mac.update(&transcript.0);
        mac
    }

    fn server_proof(&self, transcript: &Transcript) -> Proof {
        self.mac(SERVER_LABEL, transcript)
            .finalize()
            .into_bytes()
            .into()
    }

    fn client_proof(&self, transcript: &Transcript) -> Proof {
        self.mac(CLIENT_LABEL, transcript)
            .finalize()
            .into_bytes()
            .into()
    }
}

/// The key both ends proved in one handshake, from which that connection's frame keys come.
pub struct AgreedKey<'a> {
    /// Which key: the tests check the choice.
    #[cfg(test)]
    key: &'a [u8],
    #[cfg(not(test))]
    key: std::marker::PhantomData<&'a [u8]>,
    schedule: Schedule,
    protect: bool,
}

impl AgreedKey<'_> {
    /// The connection's frame keys, bound to the whole handshake (`transcript` after the
    /// server's proofs), or `None` with `auth: none` (frames stay clear).
    pub fn frame_keys(&self, transcript: &Transcript, role: Role) -> Option<FrameKeys> {
        self.protect.then(|| {
            FrameKeys::derive(
                self.schedule.frame_secret.as_ref(),
                transcript.as_bytes(),
                role,
            )
        })
    }

    /// The key that tags this session's pings (`transcript` after the server's proofs), both
    /// directions; with `auth: none` the public one ([`PingKey::unauthenticated`]).
    pub fn ping_key(&self, transcript: &Transcript) -> PingKey {
        if self.protect {
            PingKey::derive(self.schedule.frame_secret.as_ref(), transcript.as_bytes())
        } else {
            PingKey::unauthenticated()
        }
    }

    /// The client's proof for this handshake (`transcript` after the server's proofs).
    pub fn client_proof(&self, transcript: &Transcript) -> Proof {
        self.schedule.client_proof(transcript)
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

/// The server's proofs, one per key it holds, in its order of preference.
pub fn server_proofs(auth: &AuthMode, transcript: &Transcript) -> Vec<Proof> {
    auth.keys()
        .into_iter()
        .map(|key| Schedule::of(key).server_proof(transcript))
        .collect()
}

/// The client's side: the first of its keys that one of the server's proofs verifies under
/// (constant-time comparisons), or `None` if the server holds none of them.
pub fn verify_server_proofs<'a>(
    auth: &'a AuthMode,
    transcript: &Transcript,
    proofs: &[Proof],
) -> Option<AgreedKey<'a>> {
    auth.keys().into_iter().find_map(|key| {
        let schedule = Schedule::of(key);
        proofs
            .iter()
            .any(|proof| {
                schedule
                    .mac(SERVER_LABEL, transcript)
                    .verify_slice(proof)
                    .is_ok()
            })
            .then(|| AgreedKey {
                #[cfg(test)]
                key,
                #[cfg(not(test))]
                key: std::marker::PhantomData,
                schedule,
                protect: auth.protects_frames(),
            })
    })
}

/// The server's side: the key among its own the client's proof verifies under (constant-time
/// comparisons), or `None`. `transcript` is the one after the server's proofs.
pub fn verify_client_proof<'a>(
    auth: &'a AuthMode,
    transcript: &Transcript,
    proof: &Proof,
) -> Option<AgreedKey<'a>> {
    auth.keys().into_iter().find_map(|key| {
        let schedule = Schedule::of(key);
        schedule
            .mac(CLIENT_LABEL, transcript)
            .verify_slice(proof)
            .is_ok()
            .then(|| AgreedKey {
                #[cfg(test)]
                key,
                #[cfg(not(test))]
                key: std::marker::PhantomData,
                schedule,
                protect: auth.protects_frames(),
            })
    })
}

/// The nonces of the handshakes this process's prober has under way: a `Hello` that carries one
/// came back to the node that sent it ([`OwnHello`]).
static OWN_NONCES: std::sync::Mutex<Vec<Nonce>> = std::sync::Mutex::new(Vec::new());

/// A client nonce registered as this process's own while its handshake runs.
pub struct OwnHello(Nonce);

impl OwnHello {
    pub fn register(nonce: Nonce) -> OwnHello {
        OWN_NONCES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(nonce);
        OwnHello(nonce)
    }

    /// Whether `nonce` is one this process's prober sent and is still waiting on.
    pub fn is_own(nonce: &Nonce) -> bool {
        OWN_NONCES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(nonce)
    }
}

impl Drop for OwnHello {
    fn drop(&mut self) {
        let mut own = OWN_NONCES.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = own.iter().position(|n| *n == self.0) {
            own.swap_remove(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    /// The key-derived states of the MAC and the KDF are SHA-256 states (HMAC's inner and
    /// outer digests; HKDF holds an HMAC), and those wipe themselves when dropped with sha2's
    /// `zeroize` feature: this does not compile without it.
    #[test]
    fn the_hash_states_under_the_mac_and_kdf_wipe_themselves() {
        fn wiped_on_drop<T: zeroize::ZeroizeOnDrop>() {}
        wiped_on_drop::<Sha256>();
        wiped_on_drop::<<Sha256 as hmac::digest::block_api::CoreProxy>::Core>();
    }

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
        let key = b"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n";
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

    /// `0123456789abcdef0123456789abcdef`, base64-encoded.
    const KEY_B64: &[u8] = b"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

    #[test]
    fn load_decodes_one_line_of_base64_padded_or_not() {
        for (name, contents) in [
            ("lf", [KEY_B64, b"\n"].concat()),
            ("crlf", [KEY_B64, b"\r\n"].concat()),
            ("bare", KEY_B64.to_vec()),
            ("unpadded", [&KEY_B64[..KEY_B64.len() - 1], b"\n"].concat()),
        ] {
            let p = temp_file(name, &contents);
            assert_eq!(Psk::load(&p).unwrap().as_bytes(), KEY, "{name}");
        }
    }

    #[test]
    fn load_rejects_empty_short_and_old_keys_with_the_command_for_a_new_one() {
        let p = temp_file("empty", b"\n");
        let err = Psk::load(&p).unwrap_err();
        assert!(matches!(err, PskError::Empty { .. }));
        assert!(err.to_string().contains("empty"));
        assert!(err.to_string().contains(&p.display().to_string()));

        // 16 random bytes, base64: too short.
        let p = temp_file("short", b"aHVudGVyMmh1bnRlcjJoaQ==\n");
        let err = Psk::load(&p).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, PskError::TooShort { len: 16, .. }), "{text}");
        assert!(text.contains("16 bytes"), "{text}");
        assert!(
            text.contains("head -c 32 /dev/urandom | base64 >"),
            "{text}"
        );
        assert!(!text.contains("aHVudGVy"), "{text}");

        // A key file of an older version (a passphrase, any 16 bytes): refused, with the fix.
        for old in [
            &b"lab-psk-0123456789abcdef\n"[..],
            b"hunter2 hunter2 hunter2 hunter2!",
        ] {
            let p = temp_file("old", old);
            let err = Psk::load(&p).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, PskError::NotBase64 { .. }), "{text}");
            assert!(
                text.contains(&format!(
                    "head -c 32 /dev/urandom | base64 > {})",
                    p.display()
                )),
                "{text}"
            );
            assert!(
                !text.contains("hunter2") && !text.contains("lab-psk"),
                "{text}"
            );
            assert!(!format!("{err:?}").contains("hunter2"));
        }

        let err = Psk::load(temp_file("missing", b"").with_extension("nope")).unwrap_err();
        assert!(matches!(err, PskError::Read { .. }));
        assert!(Psk::from_bytes(Vec::new()).is_err());
        assert!(Psk::from_bytes(&KEY[..31]).is_err());
    }

    #[test]
    fn debug_never_shows_the_key() {
        let secret = Psk::from_bytes(&b"super-secret-key-material, 32+ bytes"[..]).unwrap();
        assert_eq!(format!("{secret:?}"), "Psk(<redacted>)");
        let mode = AuthMode::Psk(Keys::new(secret.clone(), Some(secret)));
        assert!(!format!("{mode:?}").contains("secret"));
        let t = transcript();
        let agreed = verify_server_proofs(&mode, &t, &server_proofs(&mode, &t));
        assert_eq!(format!("{agreed:?}"), "Some(AgreedKey(<redacted>))");
    }

    #[test]
    fn nonces_are_fresh() {
        assert_ne!(new_nonce().unwrap(), new_nonce().unwrap());
    }

    /// The transcript of a handshake from node-a to node-b:18516 with nonces of 1s and 2s.
    fn transcript() -> Transcript {
        Transcript::new("node-a", "node-b:18516", &[1; 32], &[2; 32])
    }

    /// Whether a client holding `client` and a server holding `server` agree on a key.
    fn agree(client: &AuthMode, server: &AuthMode) -> bool {
        let t = transcript();
        let proofs = server_proofs(server, &t);
        let Some(key) = verify_server_proofs(client, &t, &proofs) else {
            return false;
        };
        let t = t.with_proofs(&proofs);
        let proof = key.client_proof(&t);
        verify_client_proof(server, &t, &proof).is_some()
    }

    #[test]
    fn proofs_verify_with_the_same_key_only() {
        let (a, b) = (psk(KEY), psk(b"another key, 32 or more bytes long"));
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
            &b"the old key, 32 or more bytes long"[..],
            &b"the new key, 32 or more bytes long"[..],
        );
        let both = AuthMode::Psk(Keys::new(key(new), Some(key(old))));
        assert!(agree(&psk(old), &both));
        assert!(agree(&psk(new), &both));
        assert!(agree(&both, &psk(old)));
        assert!(agree(&both, &psk(new)));
        assert!(agree(&both, &both));
        let neither = psk(b"neither key, 32 or more bytes long");
        assert!(!agree(&neither, &both));
        assert!(!agree(&both, &neither));
        assert!(!agree(&AuthMode::None, &both));
    }

    #[test]
    fn a_client_with_both_keys_prefers_its_first() {
        let (old, new) = (
            &b"the old key, 32 or more bytes long"[..],
            &b"the new key, 32 or more bytes long"[..],
        );
        let client = AuthMode::Psk(Keys::new(key(new), Some(key(old))));
        let server = AuthMode::Psk(Keys::new(key(old), Some(key(new))));
        let t = transcript();
        let proofs = server_proofs(&server, &t);
        let agreed = verify_server_proofs(&client, &t, &proofs).unwrap();
        assert_eq!(agreed.key, new);
        // The server finds the key the client proved, whatever its own order.
        let t = t.with_proofs(&proofs);
        let proof = agreed.client_proof(&t);
        assert_eq!(verify_client_proof(&server, &t, &proof).unwrap().key, new);
    }

    #[test]
    fn proofs_are_bound_to_role_and_nonces() {
        let a = psk(KEY);
        let t = transcript();
        let sp = server_proofs(&a, &t)[0];
        // A server proof is not a client proof (reflection), before or after the proofs.
        assert!(verify_client_proof(&a, &t, &sp).is_none());
        assert!(verify_client_proof(&a, &t.with_proofs(&[sp]), &sp).is_none());
        // Another nonce on either side invalidates it (replay).
        let other_cn = Transcript::new("node-a", "node-b:18516", &[3; 32], &[2; 32]);
        let other_sn = Transcript::new("node-a", "node-b:18516", &[1; 32], &[3; 32]);
        assert!(verify_server_proofs(&a, &other_cn, &[sp]).is_none());
        assert!(verify_server_proofs(&a, &other_sn, &[sp]).is_none());
        let mut flipped = sp;
        flipped[31] ^= 1;
        assert!(verify_server_proofs(&a, &t, &[flipped]).is_none());
        assert!(verify_server_proofs(&a, &t, &[flipped, sp]).is_some());
    }

    #[test]
    fn proofs_cover_the_node_the_target_and_the_server_proofs() {
        let a = psk(KEY);
        let t = transcript();
        let sp = server_proofs(&a, &t);
        // The Hello's node name and the address the prober meant to reach, changed on the way,
        // or shifted between the two fields: the server's proof does not verify.
        for changed in [
            Transcript::new("node-x", "node-b:18516", &[1; 32], &[2; 32]),
            Transcript::new("node-a", "node-p:18516", &[1; 32], &[2; 32]),
            Transcript::new("node-an", "ode-b:18516", &[1; 32], &[2; 32]),
        ] {
            assert!(verify_server_proofs(&a, &changed, &sp).is_none());
        }
        // The client's proof covers the server's proofs as the client saw them: a proof dropped
        // on the way (of two, during a rollover) fails the handshake.
        let both = AuthMode::Psk(Keys::new(
            key(KEY),
            Some(key(b"the old key, 32 or more bytes long")),
        ));
        let sent = server_proofs(&both, &t);
        let seen = &sent[..1];
        let agreed = verify_server_proofs(&a, &t, seen).unwrap();
        let proof = agreed.client_proof(&t.with_proofs(seen));
        assert!(verify_client_proof(&both, &t.with_proofs(&sent), &proof).is_none());
        assert!(verify_client_proof(&both, &t.with_proofs(seen), &proof).is_some());
    }

    #[test]
    fn frames_are_protected_except_with_auth_none() {
        let t = transcript();
        for (mode, protected) in [(psk(KEY), true), (AuthMode::None, false)] {
            let agreed = verify_server_proofs(&mode, &t, &server_proofs(&mode, &t)).unwrap();
            assert_eq!(agreed.frame_keys(&t, Role::Prober).is_some(), protected);
        }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn matches_vectors_from_an_independent_implementation() {
        // Computed with Python's hmac/hashlib (HKDF written out from RFC 5869) from the
        // construction in the module docs, so another implementation of the protocol (or a
        // refactor of this one) can check itself against the same bytes.
        let t = transcript();
        let mode = psk(KEY);
        let sp = server_proofs(&mode, &t);
        assert_eq!(
            hex(&sp[0]),
            "65f86866768f005d31a8126a132310551be5ba3cc8b829c8b4174a38fac79e3e"
        );
        let agreed = verify_server_proofs(&mode, &t, &sp).unwrap();
        assert_eq!(
            hex(&agreed.client_proof(&t.with_proofs(&sp))),
            "3d9886ee4fe1510b1759f449857b5c4f3f7ad722d51380b22c132d85ded59717"
        );
        assert_eq!(
            hex(&server_proofs(&AuthMode::None, &t)[0]),
            "f5eaf74bc16553775e60a999b220014d0141e756b182764388d64b28a80871d6"
        );
    }
}
