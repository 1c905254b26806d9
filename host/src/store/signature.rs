//! Ed25519 signatures in minisign's format: extension archives and
//! registry indexes are signed and checked with these.
//!
//! Rules:
//!
//! 1. **Only a listed key verifies.** [`verify`] takes the keys the caller
//!    trusts; a signature by any other key is [`SignatureError::UnknownKey`]
//!    (naming the key id, so the user can tell which key it was), whatever
//!    else it says.
//! 2. **The bytes are what was signed.** One changed byte is
//!    [`SignatureError::Invalid`]; the trusted comment is covered too (a
//!    changed comment is `Invalid`, not a different valid signature).
//! 3. **Only prehashed signatures** (minisign's default since 0.8, `ED`):
//!    the legacy `Ed` form is refused as [`SignatureError::Malformed`],
//!    as `minisign -V` refuses it by default.
//! 4. **Bounded input.** A signature text larger than
//!    [`MAX_SIGNATURE_TEXT`] or a key file larger than [`MAX_KEY_FILE`] is
//!    refused before it is parsed.
//! 5. **The secret stays secret.** [`keygen`] writes the secret key file
//!    `0600` from its first byte (through [`crate::home::write_atomic_with_mode`]),
//!    refuses to replace an existing key, and [`SecretKey`]'s `Debug` never
//!    shows the key. The key file is **not** encrypted: CI and tests sign
//!    without a terminal, so the file itself is the secret.
//!
//! The files interoperate with the `minisign` tool: `minisign -V -p
//! KEY.pub -m FILE` checks what [`sign`] wrote, and `minisign -S -s KEY`
//! with a key from [`keygen`] writes what [`verify`] checks.

use std::fmt;
use std::io::Cursor;
use std::path::{Path, PathBuf};

use crate::text::Shown;

/// The largest signature text read: a signature is ≈ 300 bytes plus its
/// trusted comment.
pub const MAX_SIGNATURE_TEXT: usize = 16 * 1024;
/// The largest key file read.
pub const MAX_KEY_FILE: u64 = 16 * 1024;
/// The default key file name under `$ZOT_HOME/keys/` (and in a folder given
/// to [`keygen`]).
pub const DEFAULT_KEY_FILE: &str = "zotbox.key";

/// Why a signature, or a key, was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    /// Signed by a key the caller does not trust.
    #[error(
        "signed by key `{key}`, which is not among the trusted keys; add its public key to the \
         policy if you trust its owner"
    )]
    UnknownKey {
        /// The signing key's id.
        key: KeyId,
    },
    /// The signature does not match the bytes (or its trusted comment was changed).
    #[error(
        "the signature does not match: the signed content (or the signature's trusted comment) \
         was changed after signing"
    )]
    Invalid,
    /// The signature or key text is not minisign's format.
    #[error("not a minisign signature: {0}")]
    Malformed(String),
    /// A key text or key file is not usable.
    #[error("key `{}` refused: {problem}", Shown(subject))]
    Key {
        /// The file, or the key text as given.
        subject: String,
        /// What is wrong with it.
        problem: String,
    },
    /// `keygen` would replace an existing key file.
    #[error(
        "key file `{}` already exists; a key is never overwritten (choose another path with \
         `--out`, or move the old key away first)",
        Shown(&.0.display().to_string())
    )]
    Exists(PathBuf),
    /// A file could not be read or written.
    #[error("cannot {action} `{}`: {error}", Shown(&path.display().to_string()))]
    Io {
        /// What was being done.
        action: &'static str,
        /// On which path.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
}

/// A key's 8-byte id, as minisign prints it (16 uppercase hex digits).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId([u8; 8]);

impl KeyId {
    /// The id from its raw bytes (little-endian, as minisign stores it).
    pub fn from_bytes(bytes: [u8; 8]) -> Self {
        Self(bytes)
    }

    fn from_slice(bytes: &[u8]) -> Option<Self> {
        <[u8; 8]>::try_from(bytes).ok().map(Self)
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016X}", u64::from_le_bytes(self.0))
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({self})")
    }
}

impl std::str::FromStr for KeyId {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let valid = text.len() == 16 && text.bytes().all(|b| b.is_ascii_hexdigit());
        let value = valid
            .then(|| u64::from_str_radix(text, 16).ok())
            .flatten()
            .ok_or_else(|| {
                format!(
                    "`{}` is not a key id; a key id is 16 hex digits, as `zotbox keygen` and \
                     minisign print it",
                    Shown(text)
                )
            })?;
        Ok(Self(value.to_le_bytes()))
    }
}

impl serde::Serialize for KeyId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for KeyId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A public key that verifies signatures.
#[derive(Clone)]
pub struct PublicKey {
    inner: minisign::PublicKey,
}

impl PublicKey {
    /// Parses the base64 line minisign prints (`RWQ…`), or the text of a
    /// `.pub` file (its `untrusted comment:` line is skipped).
    ///
    /// # Errors
    ///
    /// [`SignatureError::Key`] naming the text.
    pub fn parse(text: &str) -> Result<Self, SignatureError> {
        let line = text
            .lines()
            .map(str::trim)
            .find(|line| !line.is_empty() && !line.starts_with("untrusted comment:"))
            .unwrap_or_default();
        let refused = |problem: String| SignatureError::Key {
            subject: shorten(text),
            problem,
        };
        let inner = minisign::PublicKey::from_base64(line).map_err(|_| {
            refused(
                "is not a minisign public key (the 56-character base64 line `zotbox keygen` and \
                 `minisign -G` print)"
                    .to_owned(),
            )
        })?;
        if inner.to_bytes().first_chunk::<2>() != Some(b"Ed") {
            return Err(refused("is not an Ed25519 minisign key".to_owned()));
        }
        Ok(Self { inner })
    }

    /// Reads a `.pub` file (or a file holding the base64 line).
    ///
    /// # Errors
    ///
    /// [`SignatureError::Io`], or [`SignatureError::Key`] naming the file.
    pub fn load(path: &Path) -> Result<Self, SignatureError> {
        let text = read_key_file(path)?;
        Self::parse(&text).map_err(|err| match err {
            SignatureError::Key { problem, .. } => SignatureError::Key {
                subject: path.display().to_string(),
                problem,
            },
            other => other,
        })
    }

    /// The key's id.
    pub fn id(&self) -> KeyId {
        KeyId::from_slice(self.inner.keynum()).unwrap_or(KeyId([0; 8]))
    }

    /// The base64 line, as minisign prints it and a policy lists it.
    pub fn to_base64(&self) -> String {
        self.inner.to_base64()
    }

    /// The text of a `.pub` file: minisign's comment line and the base64 line.
    pub fn to_file_text(&self) -> String {
        format!(
            "untrusted comment: minisign public key {}\n{}\n",
            self.id(),
            self.to_base64()
        )
    }
}

impl PartialEq for PublicKey {
    fn eq(&self, other: &Self) -> bool {
        self.inner.to_bytes() == other.inner.to_bytes()
    }
}

impl Eq for PublicKey {}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({} {})", self.id(), self.to_base64())
    }
}

/// A secret key that signs. Its `Debug` shows only the key id.
pub struct SecretKey {
    inner: minisign::SecretKey,
    public: PublicKey,
}

impl SecretKey {
    /// Reads an unencrypted minisign secret key file (as [`keygen`] or
    /// `minisign -G -W` writes it).
    ///
    /// # Errors
    ///
    /// [`SignatureError::Io`]; [`SignatureError::Key`] when the file is not
    /// a minisign secret key, or is encrypted (zotbox never prompts for a
    /// password).
    pub fn load(path: &Path) -> Result<Self, SignatureError> {
        let text = read_key_file(path)?;
        let refused = |problem: String| SignatureError::Key {
            subject: path.display().to_string(),
            problem,
        };
        let boxed =
            minisign::SecretKeyBox::from_string(&text).map_err(|err| refused(lower(&err)))?;
        let inner = minisign::SecretKey::from_unencrypted_box(boxed).map_err(|err| {
            if err.to_string().contains("encrypted") {
                refused(
                    "is an encrypted minisign key; zotbox signs without a password prompt, with \
                     an unencrypted key file (`zotbox keygen`, or `minisign -G -W`)"
                        .to_owned(),
                )
            } else {
                refused(format!("is not a minisign secret key: {}", lower(&err)))
            }
        })?;
        let public = minisign::PublicKey::from_secret_key(&inner)
            .map_err(|err| refused(format!("is not a minisign secret key: {}", lower(&err))))?;
        Ok(Self {
            inner,
            public: PublicKey { inner: public },
        })
    }

    /// The matching public key.
    pub fn public(&self) -> &PublicKey {
        &self.public
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretKey({})", self.public.id())
    }
}

/// Makes a new key pair: the secret key file at `path` (or at
/// `path/zotbox.key` when `path` names a folder, see
/// [`names_a_folder`](crate::store::names_a_folder)), mode `0600`,
/// unencrypted, and the public key beside it (`zotbox.pub` for
/// `zotbox.key`, else `path.pub`). Returns the public key and the secret
/// key's path.
///
/// # Errors
///
/// [`SignatureError::Exists`] when either file exists (nothing is written);
/// [`SignatureError::Io`].
pub fn keygen(path: &Path) -> Result<(PublicKey, PathBuf), SignatureError> {
    let secret_path = if crate::store::names_a_folder(path) {
        path.join(DEFAULT_KEY_FILE)
    } else {
        path.to_owned()
    };
    // The secret key under a public key's name would be handed out as one.
    if secret_path.extension().is_some_and(|ext| ext == "pub") {
        return Err(SignatureError::Key {
            subject: secret_path.display().to_string(),
            problem: "the secret key would be written under a public key's name (`.pub`); \
                      name it `….key` (its public key goes beside it as `….pub`)"
                .to_owned(),
        });
    }
    let public_path = public_path_for(&secret_path);
    for existing in [&secret_path, &public_path] {
        if std::fs::symlink_metadata(existing).is_ok() {
            return Err(SignatureError::Exists(existing.clone()));
        }
    }
    if let Some(parent) = secret_path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|error| SignatureError::Io {
            action: "create",
            path: parent.to_owned(),
            error,
        })?;
    }
    let pair = minisign::KeyPair::generate_unencrypted_keypair()
        .map_err(|err| SignatureError::Malformed(format!("cannot make a key: {}", lower(&err))))?;
    let secret_text = pair
        .sk
        .to_box(Some(
            "zotbox secret key (unencrypted: this file is the secret)",
        ))
        .map_err(|err| SignatureError::Malformed(lower(&err)))?
        .into_string();
    let public = PublicKey { inner: pair.pk };
    let write = |path: &Path, text: &str, mode: u32| {
        crate::home::write_atomic_with_mode(path, text.as_bytes(), mode).map_err(|error| {
            SignatureError::Io {
                action: "write",
                path: path.to_owned(),
                error,
            }
        })
    };
    write(&secret_path, &secret_text, 0o600)?;
    write(&public_path, &public.to_file_text(), 0o644)?;
    Ok((public, secret_path))
}

/// Where [`keygen`] puts the public key for the secret key at `secret`:
/// `x.pub` for `x.key`, else `secret.pub`.
pub fn public_path_for(secret: &Path) -> PathBuf {
    if secret.extension().is_some_and(|ext| ext == "key") {
        secret.with_extension("pub")
    } else {
        let mut text = secret.as_os_str().to_owned();
        text.push(".pub");
        PathBuf::from(text)
    }
}

/// Signs `bytes` with `secret`: the text of a `.minisig` file, with
/// `trusted_comment` signed too (one line; line breaks become spaces).
///
/// # Errors
///
/// [`SignatureError::Malformed`] when signing fails (no randomness).
pub fn sign(
    bytes: &[u8],
    secret: &SecretKey,
    trusted_comment: &str,
) -> Result<String, SignatureError> {
    let comment: String = trusted_comment
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    let signature = minisign::sign(
        Some(&secret.public.inner),
        &secret.inner,
        Cursor::new(bytes),
        Some(comment.trim()),
        Some("signature from zotbox secret key"),
    )
    .map_err(|err| SignatureError::Malformed(format!("cannot sign: {}", lower(&err))))?;
    Ok(signature.into_string())
}

/// Checks that `signature_text` (a `.minisig` file's text) signs `bytes`,
/// by one of `keys`. Returns the id of the key that signed.
///
/// # Errors
///
/// [`SignatureError::Malformed`], [`SignatureError::UnknownKey`],
/// [`SignatureError::Invalid`] (rules 1 to 4).
pub fn verify(
    bytes: &[u8],
    signature_text: &str,
    keys: &[PublicKey],
) -> Result<KeyId, SignatureError> {
    verify_key(bytes, signature_text, keys).map(PublicKey::id)
}

/// [`verify`], returning the key itself: two keys may share an id (anyone
/// may give a key any id), so what must stay the same signer is compared
/// by key, not by id.
///
/// # Errors
///
/// As [`verify`].
pub fn verify_key<'k>(
    bytes: &[u8],
    signature_text: &str,
    keys: &'k [PublicKey],
) -> Result<&'k PublicKey, SignatureError> {
    let signature = parse_signature(signature_text)?;
    let signer = signer_of(&signature)?;
    // A key id is 8 bytes anyone can copy into a signature: every listed
    // key with that id is tried, and only the key itself decides.
    let mut candidates = keys.iter().filter(|key| key.id() == signer).peekable();
    if candidates.peek().is_none() {
        return Err(SignatureError::UnknownKey { key: signer });
    }
    candidates
        .find(|key| {
            minisign::verify(
                &key.inner,
                &signature,
                Cursor::new(bytes),
                true,
                false,
                false,
            )
            .is_ok()
        })
        .ok_or(SignatureError::Invalid)
}

/// The id of the key that made `signature_text`, unchecked (for messages
/// and for telling which publisher an entry claims).
///
/// # Errors
///
/// [`SignatureError::Malformed`].
pub fn signed_by(signature_text: &str) -> Result<KeyId, SignatureError> {
    signer_of(&parse_signature(signature_text)?)
}

/// The trusted comment of `signature_text`, unchecked: call [`verify`] first.
///
/// # Errors
///
/// [`SignatureError::Malformed`].
pub fn trusted_comment(signature_text: &str) -> Result<String, SignatureError> {
    parse_signature(signature_text)?
        .trusted_comment()
        .map_err(|err| SignatureError::Malformed(lower(&err)))
}

fn parse_signature(text: &str) -> Result<minisign::SignatureBox, SignatureError> {
    if text.len() > MAX_SIGNATURE_TEXT {
        return Err(SignatureError::Malformed(format!(
            "it is larger than {MAX_SIGNATURE_TEXT} bytes"
        )));
    }
    let signature = minisign::SignatureBox::from_string(text)
        .map_err(|err| SignatureError::Malformed(lower(&err)))?;
    if !signature.is_prehashed() {
        return Err(SignatureError::Malformed(
            "it is a legacy (not prehashed) signature; sign again with a current minisign or \
             `zotbox ext sign`"
                .to_owned(),
        ));
    }
    Ok(signature)
}

fn signer_of(signature: &minisign::SignatureBox) -> Result<KeyId, SignatureError> {
    KeyId::from_slice(signature.keynum())
        .ok_or_else(|| SignatureError::Malformed("its key id is not 8 bytes".to_owned()))
}

fn read_key_file(path: &Path) -> Result<String, SignatureError> {
    let refused = |problem: String| SignatureError::Key {
        subject: path.display().to_string(),
        problem,
    };
    let bytes = crate::user_file::read_regular(path, MAX_KEY_FILE)
        .map_err(|error| SignatureError::Io {
            action: "read",
            path: path.to_owned(),
            error,
        })?
        .ok_or_else(|| {
            refused(format!(
                "is larger than {MAX_KEY_FILE} bytes; a key file is a few lines"
            ))
        })?;
    String::from_utf8(bytes).map_err(|_| refused("is not UTF-8 text".to_owned()))
}

/// minisign's messages start with a capital; ours do not.
fn lower(err: &dyn fmt::Display) -> String {
    let text = err.to_string();
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    }
}

/// A key text as shown in a message: its first 60 characters.
fn shorten(text: &str) -> String {
    let trimmed = text.trim();
    if trimmed.chars().count() > 60 {
        format!("{}…", trimmed.chars().take(60).collect::<String>())
    } else {
        trimmed.to_owned()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn pair(dir: &Path, name: &str) -> (PublicKey, SecretKey) {
        let (public, path) = keygen(&dir.join(format!("{name}.key"))).unwrap();
        (public, SecretKey::load(&path).unwrap())
    }

    #[test]
    fn a_key_file_too_large_not_text_or_not_a_file_is_refused_without_waiting() {
        let tmp = tempfile::tempdir().unwrap();
        let refusal = |path: &Path| PublicKey::load(path).unwrap_err().to_string();
        let big = tmp.path().join("big.pub");
        std::fs::write(&big, vec![b'a'; 16 * 1024 + 1]).unwrap();
        assert!(
            refusal(&big).ends_with("is larger than 16384 bytes; a key file is a few lines"),
            "{}",
            refusal(&big)
        );
        let binary = tmp.path().join("binary.pub");
        std::fs::write(&binary, [0xff, 0xfe, b'\n']).unwrap();
        assert!(
            refusal(&binary).ends_with("is not UTF-8 text"),
            "{}",
            refusal(&binary)
        );
        // A FIFO nobody writes to would block a reader for good.
        let fifo = tmp.path().join("fifo.pub");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(
            refusal(&fifo).contains("not a regular file"),
            "{}",
            refusal(&fifo)
        );
        assert!(refusal(tmp.path()).contains("not a regular file"));
    }

    #[test]
    fn a_signature_round_trips_through_its_text() {
        let tmp = tempfile::tempdir().unwrap();
        let (public, secret) = pair(tmp.path(), "a");
        let text = sign(b"archive bytes", &secret, "file:a.tar.gz").unwrap();
        assert!(text.starts_with("untrusted comment: "), "{text}");
        assert_eq!(text.lines().count(), 4, "{text}");
        // Through the text, as a `.minisig` file carries it.
        let read_back = public_key_from_file(tmp.path(), "a");
        assert_eq!(read_back, public);
        assert_eq!(
            verify(b"archive bytes", &text, &[read_back]).unwrap(),
            public.id()
        );
        assert_eq!(trusted_comment(&text).unwrap(), "file:a.tar.gz");
        assert_eq!(signed_by(&text).unwrap(), public.id());
    }

    fn public_key_from_file(dir: &Path, name: &str) -> PublicKey {
        PublicKey::load(&dir.join(format!("{name}.pub"))).unwrap()
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn tampered_bytes_a_changed_comment_and_other_keys_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let (public, secret) = pair(tmp.path(), "a");
        let (other, _) = pair(tmp.path(), "b");
        let text = sign(b"archive bytes", &secret, "file:a.tar.gz").unwrap();
        let changed_comment = text.replace("file:a.tar.gz", "file:b.tar.gz");
        let cases: [(&str, &[u8], &str, Vec<PublicKey>, String); 4] = [
            // Attack: one byte of the archive changed after signing.
            (
                "tampered",
                b"archive bytez",
                &text,
                vec![public.clone()],
                SignatureError::Invalid.to_string(),
            ),
            // Attack: the trusted comment rewritten (another file name).
            (
                "comment",
                b"archive bytes",
                &changed_comment,
                vec![public.clone()],
                SignatureError::Invalid.to_string(),
            ),
            // Attack: signed by a key the verifier does not list.
            (
                "other key",
                b"archive bytes",
                &text,
                vec![other.clone()],
                format!(
                    "signed by key `{}`, which is not among the trusted keys; add its public key \
                     to the policy if you trust its owner",
                    public.id()
                ),
            ),
            // No keys at all.
            (
                "no keys",
                b"archive bytes",
                &text,
                vec![],
                SignatureError::UnknownKey { key: public.id() }.to_string(),
            ),
        ];
        for (case, bytes, text, keys, expected) in cases {
            let err = verify(bytes, text, &keys).unwrap_err();
            assert_eq!(err.to_string(), expected, "{case}");
        }
        assert!(matches!(
            verify(b"archive bytes", &text, &[other]),
            Err(SignatureError::UnknownKey { key }) if key == public.id()
        ));
    }

    #[test]
    fn a_key_id_copied_into_another_key_decides_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let (real, secret) = pair(tmp.path(), "real");
        let (other, _) = pair(tmp.path(), "other");
        // Attack: a key of the attacker's under the real key's id.
        let mut bytes = other.inner.to_bytes();
        bytes[2..10].copy_from_slice(real.inner.keynum());
        let impostor = PublicKey {
            inner: minisign::PublicKey::from_bytes(&bytes).unwrap(),
        };
        assert_eq!(impostor.id(), real.id());
        let text = sign(b"bytes", &secret, "c").unwrap();
        // Listed first, it does not hide the real key; alone, it verifies nothing.
        assert_eq!(
            verify(b"bytes", &text, &[impostor.clone(), real.clone()]).unwrap(),
            real.id()
        );
        assert!(matches!(
            verify(b"bytes", &text, &[impostor]),
            Err(SignatureError::Invalid)
        ));
    }

    #[test]
    fn malformed_signature_texts_are_refused_before_any_check() {
        let tmp = tempfile::tempdir().unwrap();
        let (public, secret) = pair(tmp.path(), "a");
        let text = sign(b"x", &secret, "c").unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let huge = "a".repeat(MAX_SIGNATURE_TEXT + 1);
        let no_prefix = text.replacen("untrusted comment: ", "", 1);
        let cases = [
            ("empty", String::new()),
            ("two lines", lines[..2].join("\n")),
            ("no comment prefix", no_prefix),
            (
                "bad base64",
                format!("{}\n!!!\n{}\n{}", lines[0], lines[2], lines[3]),
            ),
            ("huge", huge),
        ];
        for (case, text) in cases {
            let err = verify(b"x", &text, std::slice::from_ref(&public)).unwrap_err();
            assert!(matches!(err, SignatureError::Malformed(_)), "{case}: {err}");
            assert!(
                err.to_string().starts_with("not a minisign signature: "),
                "{case}: {err}"
            );
        }
    }

    #[test]
    fn keygen_writes_a_private_secret_and_never_overwrites_a_key() {
        let tmp = tempfile::tempdir().unwrap();
        let (public, path) = keygen(tmp.path()).unwrap();
        assert_eq!(path, tmp.path().join("zotbox.key"));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let pub_text = std::fs::read_to_string(tmp.path().join("zotbox.pub")).unwrap();
        assert!(pub_text.contains(&public.to_base64()), "{pub_text}");
        assert!(pub_text.contains(&public.id().to_string()), "{pub_text}");
        let secret_before = std::fs::read(&path).unwrap();
        // A second keygen at the same place changes nothing.
        let err = keygen(tmp.path()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "key file `{}` already exists; a key is never overwritten (choose another path \
                 with `--out`, or move the old key away first)",
                path.display()
            )
        );
        assert_eq!(std::fs::read(&path).unwrap(), secret_before);
        // A public key left alone also blocks a new pair under its name.
        std::fs::write(tmp.path().join("lone.pub"), "x").unwrap();
        assert!(matches!(
            keygen(&tmp.path().join("lone.key")),
            Err(SignatureError::Exists(p)) if p == tmp.path().join("lone.pub")
        ));
        assert!(!tmp.path().join("lone.key").exists());
        // A secret key is never written under a public key's name.
        let err = keygen(&tmp.path().join("k2.pub")).unwrap_err().to_string();
        assert!(
            err.ends_with(
                "the secret key would be written under a public key's name (`.pub`); \
                           name it `….key` (its public key goes beside it as `….pub`)"
            ),
            "{err}"
        );
        assert!(!tmp.path().join("k2.pub").exists());
        // The Debug of a secret key shows its id, never the key.
        let secret = SecretKey::load(&path).unwrap();
        assert_eq!(format!("{secret:?}"), format!("SecretKey({})", public.id()));
    }

    #[test]
    fn key_texts_parse_as_minisign_prints_them() {
        let tmp = tempfile::tempdir().unwrap();
        let (public, path) = keygen(&tmp.path().join("k.key")).unwrap();
        let line = public.to_base64();
        assert_eq!(line.len(), 56);
        assert_eq!(PublicKey::parse(&line).unwrap(), public);
        assert_eq!(PublicKey::parse(&format!("  {line}\n")).unwrap(), public);
        assert_eq!(PublicKey::parse(&public.to_file_text()).unwrap(), public);
        let id = public.id().to_string();
        assert_eq!(id.len(), 16);
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
        );
        assert_eq!(id.parse::<KeyId>().unwrap(), public.id());
        for bad in ["", "RWQ", "not a key at all", &line[..55]] {
            let err = PublicKey::parse(bad).unwrap_err();
            assert!(matches!(err, SignatureError::Key { .. }), "{bad}: {err}");
        }
        for bad in ["", "123", "zzzzzzzzzzzzzzzz", "0123456789ABCDEF0"] {
            assert!(bad.parse::<KeyId>().is_err(), "{bad}");
        }
        // A public key is not a secret key.
        let err = SecretKey::load(&tmp.path().join("k.pub")).unwrap_err();
        assert!(matches!(err, SignatureError::Key { .. }), "{err}");
        assert!(SecretKey::load(&path).is_ok());
    }

    /// Interoperation with the `minisign` tool, where it is installed: it
    /// verifies what `sign` wrote, and `verify` accepts what it signs with
    /// a key from `keygen`.
    #[test]
    fn the_minisign_tool_reads_our_signatures_and_we_read_its_own() {
        let Ok(status) = std::process::Command::new("minisign").arg("-v").output() else {
            eprintln!("skipped: the `minisign` tool is not installed");
            return;
        };
        assert!(status.status.success() || !status.stdout.is_empty());
        let tmp = tempfile::tempdir().unwrap();
        let (public, secret) = pair(tmp.path(), "a");
        let file = tmp.path().join("archive.tar.gz");
        std::fs::write(&file, b"archive bytes").unwrap();
        let ours = sign(b"archive bytes", &secret, "file:archive.tar.gz").unwrap();
        std::fs::write(tmp.path().join("archive.tar.gz.minisig"), &ours).unwrap();
        let checked = std::process::Command::new("minisign")
            .arg("-Vq")
            .arg("-p")
            .arg(tmp.path().join("a.pub"))
            .arg("-m")
            .arg(&file)
            .output()
            .unwrap();
        assert!(checked.status.success(), "{checked:?}");
        let theirs_path = tmp.path().join("theirs.minisig");
        let signed = std::process::Command::new("minisign")
            .arg("-S")
            .arg("-s")
            .arg(tmp.path().join("a.key"))
            .arg("-m")
            .arg(&file)
            .arg("-x")
            .arg(&theirs_path)
            .arg("-t")
            .arg("by the tool")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(signed.status.success(), "{signed:?}");
        let theirs = std::fs::read_to_string(&theirs_path).unwrap();
        assert_eq!(
            verify(b"archive bytes", &theirs, std::slice::from_ref(&public)).unwrap(),
            public.id()
        );
        assert_eq!(trusted_comment(&theirs).unwrap(), "by the tool");
        assert!(matches!(
            verify(b"archive bytez", &theirs, &[public]),
            Err(SignatureError::Invalid)
        ));
    }
}
