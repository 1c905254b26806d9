//! A registry's signed index, and the checks of each entry and its archive.
//!
//! A registry is a static HTTPS site: `index.json` listing the extensions
//! (name, version, kind, archive URL, sha256, declared capabilities,
//! publisher key, the archive's signature), signed by the registry's key in
//! `index.json.minisig`. Everything here is pure: bytes in, a decision out;
//! fetching is the caller's.
//!
//! Rules:
//!
//! 1. **The index is the registry's.** [`verify_index`] checks its
//!    signature against the keys the policy lists for that registry before
//!    reading a field: another key is [`RegistryError::UnknownKey`], a
//!    changed byte [`RegistryError::Invalid`].
//! 2. **No stale index.** An index past its `expires` is
//!    [`RegistryError::Expired`] (a frozen mirror cannot serve yesterday's
//!    index forever); an index older than the last one seen from that
//!    registry ([`RegistryState`]) is [`RegistryError::Replayed`] (an old,
//!    validly signed index cannot bring back a revoked or vulnerable entry).
//!    The same version again is fine.
//! 3. **Strict format.** Unknown fields anywhere are refused, the text is
//!    capped at [`MAX_INDEX_BYTES`], names read as manifest names, versions
//!    as [`pack::check_version`], sha256 as 64 lowercase hex, an archive URL
//!    is relative or `https://`, and a name at a version appears once.
//! 4. **The archive is the entry's.** [`check_entry`], in this order:
//!    a revoked entry is [`RegistryError::Revoked`]; a native entry under
//!    `native_extensions: false` is [`RegistryError::NativeForbidden`]; the
//!    bytes must hash to the entry's sha256 ([`RegistryError::DigestMismatch`]);
//!    an unsigned entry is [`RegistryError::Unsigned`] under
//!    `require_signature` or a system `publishers` ceiling; a signature
//!    must be by the entry's `key` ([`RegistryError::KeyMismatch`]), by a
//!    key the policy lists ([`RegistryError::UnknownKey`]) and allowed by
//!    every layer ([`RegistryError::PublisherNotAllowed`]), and match the
//!    bytes ([`RegistryError::Invalid`]).
//!
//! 5. **The archive is what the entry says.** [`check_archive_manifest`]:
//!    the manifest inside the archive names the entry's name and version,
//!    is of its kind, and declares exactly the capabilities the entry shows
//!    (a data package: its tools need exactly those, derived from them)
//!    ([`RegistryError::ArchiveMismatch`]): a validly signed archive of
//!    another extension, or one declaring more than the listing showed,
//!    is refused.
//!
//! The index signature proves what the registry lists; a publisher's
//! signature proves who made the archive, independently of the registry.

pub mod build;
pub mod client;
pub mod state;
pub mod time;

use std::cmp::Ordering;
use std::path::PathBuf;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::manifest::Capabilities;
use crate::policy::PublisherRules;
use crate::store::pack;
use crate::store::signature::{self, KeyId, PublicKey, SignatureError};
use crate::text::{Shown, shown};

pub use build::{build_index, build_index_at};
pub use state::RegistryState;
pub use time::UtcTime;

/// The largest index text read: 8 MiB (≈ 20 000 entries).
pub const MAX_INDEX_BYTES: usize = 8 * 1024 * 1024;
/// The most entries one index may list.
pub const MAX_ENTRIES: usize = 50_000;

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A WebAssembly extension, run in the sandbox.
    Wasm,
    /// A native extension (a subprocess, unsandboxed unless confined).
    Native,
    /// Data only: tools, plugins, skills.
    Data,
}

impl Kind {
    /// The kind as written in the index.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Wasm => "wasm",
            Self::Native => "native",
            Self::Data => "data",
        }
    }
}

/// A registry's index, as signed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub struct Index {
    /// The URL it is served at, when its publisher named it
    /// (`registry index --url`): it is refused at any other, so that an
    /// index signed with a key two registries share cannot stand in for
    /// the other's (and, by its version, freeze it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
    /// The index's own version: it only grows (rule 2).
    pub version: u64,
    /// When it stops being accepted.
    pub expires: UtcTime,
    /// What it lists.
    #[serde(default)]
    pub entries: Vec<Entry>,
}

/// One extension at one version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub struct Entry {
    /// The extension's name (as in its manifest).
    pub name: String,
    /// Its version.
    pub version: String,
    /// What it is.
    pub kind: Kind,
    /// The archive: a URL relative to the index's, or an `https://` URL.
    pub archive: String,
    /// The archive's sha256, 64 lowercase hex digits.
    pub sha256: String,
    /// The capabilities its manifest declares (shown before an install).
    #[serde(default, skip_serializing_if = "Capabilities::is_empty")]
    pub capabilities: Capabilities,
    /// The publisher's key id: the key that signed the archive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<KeyId>,
    /// The archive's signature (a `.minisig` file's text), inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Withdrawn by the registry: never installed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub revoked: bool,
    /// Why it was withdrawn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// One line about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl Entry {
    /// `extension `name` version`, for messages.
    fn subject(&self) -> String {
        format!("extension `{}` {}", Shown(&self.name), Shown(&self.version))
    }

    /// The archive's absolute URL, resolved against the index's URL.
    ///
    /// # Errors
    ///
    /// [`RegistryError::BadField`] when it is not `https://` once resolved.
    pub fn archive_url(&self, index_url: &str) -> Result<String, RegistryError> {
        let refused = |problem: String| RegistryError::BadField {
            field: format!("entries[`{}`].archive", Shown(&self.name)),
            problem,
        };
        let base = reqwest::Url::parse(index_url)
            .map_err(|err| refused(format!("the index URL does not parse: {err}")))?;
        let url = base
            .join(&self.archive)
            .map_err(|err| refused(format!("`{}` does not parse: {err}", Shown(&self.archive))))?;
        if url.scheme() != "https" {
            return Err(refused(format!(
                "`{}` is not an https URL; archives are fetched over https only",
                Shown(url.as_str())
            )));
        }
        Ok(url.to_string())
    }
}

/// What [`check_entry`] established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The publisher key that signed the archive (`None`: unsigned, allowed
    /// by the policy).
    pub key: Option<KeyId>,
    /// That key itself, in base64: another key may have the same id.
    pub public: Option<String>,
}

/// Why an index or an entry was refused.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The index text is larger than [`MAX_INDEX_BYTES`].
    #[error("the registry index is larger than {limit} bytes; refused before reading it")]
    TooLarge {
        /// The cap.
        limit: usize,
    },
    /// The index is not valid JSON of the format, or has unknown fields.
    #[error("the registry index does not parse: {0}")]
    Parse(String),
    /// A field of the index has a value that is refused.
    #[error("the registry index is invalid: field `{field}` {problem}")]
    BadField {
        /// The field, as a path (`entries[2].sha256`).
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// Signed by a key not trusted for this purpose.
    #[error(
        "{subject}: signed by key `{key}`, which is not among the {trusted}; add the key to the \
         policy only if you trust its owner"
    )]
    UnknownKey {
        /// What was signed.
        subject: String,
        /// The signing key.
        key: KeyId,
        /// Which keys were asked: the registry's, or the publishers'.
        trusted: &'static str,
    },
    /// The signature does not match the bytes.
    #[error(
        "{subject}: the signature does not match; the content was changed after signing \
         (tampered, or a broken download)"
    )]
    Invalid {
        /// What was signed.
        subject: String,
    },
    /// The signature text is not minisign's format.
    #[error("{subject}: {detail}")]
    Malformed {
        /// What was signed.
        subject: String,
        /// What is wrong.
        detail: String,
    },
    /// The index is past its expiry.
    #[error(
        "the registry index expired at `{expires}`; a stale or frozen index is refused (the \
         registry must publish a fresh one)"
    )]
    Expired {
        /// When it expired.
        expires: UtcTime,
    },
    /// The index names another registry's URL as its own.
    #[error(
        "the registry index names `{}` as its URL; an index served at another registry's URL \
         is refused",
        Shown(named)
    )]
    ForAnotherRegistry {
        /// The URL it names.
        named: String,
    },
    /// The index is older than one seen before from the same registry.
    #[error(
        "the registry index is version {version}, older than version {last_seen} seen before; an \
         older index replayed is refused (a stale mirror, or an attempt to bring back a revoked \
         entry)"
    )]
    Replayed {
        /// The index's version.
        version: u64,
        /// The newest version seen before.
        last_seen: u64,
    },
    /// The archive does not hash to the entry's sha256.
    #[error(
        "{subject}: the archive's sha256 is `{found}`, not `{expected}` as the index lists; \
         refused (tampered, or a broken download)"
    )]
    DigestMismatch {
        /// The entry.
        subject: String,
        /// The sha256 the index lists.
        expected: String,
        /// The archive's.
        found: String,
    },
    /// The registry withdrew this entry.
    #[error(
        "extension `{}` {}: revoked by the registry{}; choose another version",
        Shown(name),
        Shown(version),
        reason.as_deref().map(|r| format!(" ({})", Shown(r))).unwrap_or_default()
    )]
    Revoked {
        /// The name.
        name: String,
        /// The version.
        version: String,
        /// The registry's reason, if it gave one.
        reason: Option<String>,
    },
    /// No publisher signature, where the policy requires one.
    #[error(
        "extension `{}` {}: unsigned, refused by {rule}; ask its publisher for a signed archive",
        Shown(name),
        Shown(version)
    )]
    Unsigned {
        /// The name.
        name: String,
        /// The version.
        version: String,
        /// The rule that requires a signature.
        rule: String,
    },
    /// Signed by a key some layer lists but the policy does not allow.
    #[error(
        "{subject}: publisher key `{key}` is not among the allowed publishers of `{}`; the \
         system policy restricts who may publish",
        rule.display()
    )]
    PublisherNotAllowed {
        /// The entry.
        subject: String,
        /// The signing key.
        key: KeyId,
        /// The policy file whose ceiling refuses it.
        rule: PathBuf,
    },
    /// The signature is by another key than the entry's `key`.
    #[error("{subject}: signed by key `{signed}`, but the index names publisher `{declared}`")]
    KeyMismatch {
        /// The entry.
        subject: String,
        /// The key the index names.
        declared: KeyId,
        /// The key that signed.
        signed: KeyId,
    },
    /// A native entry where the policy forbids native extensions.
    #[error(
        "extension `{}` {}: a native extension, refused by `native_extensions: false` in `{}`; \
         choose a wasm build",
        Shown(name),
        Shown(version),
        path.display()
    )]
    NativeForbidden {
        /// The name.
        name: String,
        /// The version.
        version: String,
        /// The policy file.
        path: PathBuf,
    },
    /// The archive's manifest is not the extension its entry lists.
    #[error("{subject}: the archive does not match its index entry: {problem}; refused")]
    ArchiveMismatch {
        /// The entry.
        subject: String,
        /// What differs.
        problem: String,
    },
    /// A key in the policy does not parse.
    #[error(transparent)]
    Key(SignatureError),
    /// An archive given to [`build_index`] is not a packed extension.
    #[error("archive `{}` refused: {problem}", Shown(&path.display().to_string()))]
    Archive {
        /// The archive.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
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

impl RegistryError {
    fn from_signature(subject: String, trusted: &'static str, err: SignatureError) -> Self {
        match err {
            SignatureError::UnknownKey { key } => Self::UnknownKey {
                subject,
                key,
                trusted,
            },
            SignatureError::Invalid => Self::Invalid { subject },
            other => Self::Malformed {
                subject,
                detail: other.to_string(),
            },
        }
    }
}

const INDEX: &str = "the registry index";

impl Index {
    /// Parses and checks index text (rule 3), unsigned: call
    /// [`verify_index`] for an index from a registry.
    ///
    /// # Errors
    ///
    /// [`RegistryError::TooLarge`], [`RegistryError::Parse`],
    /// [`RegistryError::BadField`].
    pub fn parse(bytes: &[u8]) -> Result<Self, RegistryError> {
        if bytes.len() > MAX_INDEX_BYTES {
            return Err(RegistryError::TooLarge {
                limit: MAX_INDEX_BYTES,
            });
        }
        let text = std::str::from_utf8(bytes)
            .map_err(|_| RegistryError::Parse("it is not UTF-8".to_owned()))?;
        // An array would be read by position as the fields.
        crate::user_file::not_an_object(text).map_err(RegistryError::Parse)?;
        // The parser quotes the index (an unknown field, a bad value):
        // escaped, as every author's string.
        let index: Self = serde_json::from_str(text)
            .map_err(|err| RegistryError::Parse(shown(&err.to_string()).into_owned()))?;
        index.validate()?;
        Ok(index)
    }

    fn validate(&self) -> Result<(), RegistryError> {
        if self.entries.len() > MAX_ENTRIES {
            return Err(RegistryError::BadField {
                field: "entries".to_owned(),
                problem: format!("lists more than {MAX_ENTRIES} entries"),
            });
        }
        let mut seen = std::collections::HashSet::new();
        for (index, entry) in self.entries.iter().enumerate() {
            let bad = |field: &str, problem: String| RegistryError::BadField {
                field: format!("entries[{index}].{field}"),
                problem,
            };
            crate::manifest::validate_name(&entry.name).map_err(|p| bad("name", p))?;
            pack::check_version(&entry.version).map_err(|p| bad("version", p))?;
            if !is_sha256_hex(&entry.sha256) {
                return Err(bad(
                    "sha256",
                    format!(
                        "`{}` is not a sha256: 64 lowercase hex digits",
                        Shown(&entry.sha256)
                    ),
                ));
            }
            check_archive(&entry.archive).map_err(|p| bad("archive", p))?;
            for (field, text) in [
                ("description", &entry.description),
                ("reason", &entry.reason),
            ] {
                if text.as_ref().is_some_and(|t| t.len() > 4096) {
                    return Err(bad(field, "is longer than 4096 bytes".to_owned()));
                }
            }
            if entry
                .signature
                .as_ref()
                .is_some_and(|s| s.len() > signature::MAX_SIGNATURE_TEXT)
            {
                return Err(bad(
                    "signature",
                    format!("is longer than {} bytes", signature::MAX_SIGNATURE_TEXT),
                ));
            }
            if !seen.insert((entry.name.as_str(), entry.version.as_str())) {
                return Err(bad(
                    "version",
                    format!(
                        "`{}` {} is listed twice",
                        Shown(&entry.name),
                        Shown(&entry.version)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The entry `name` at `version`; with no version, its newest version
    /// that is not revoked. An exact version is returned even when revoked,
    /// so that [`check_entry`] says so.
    pub fn find(&self, name: &str, version: Option<&str>) -> Option<&Entry> {
        let mut named = self.entries.iter().filter(|e| e.name == name);
        match version {
            Some(version) => named.find(|e| e.version == version),
            None => named
                .filter(|e| !e.revoked)
                .max_by(|a, b| compare_versions(&a.version, &b.version)),
        }
    }

    /// The entries that are not revoked whose name or description contains
    /// `text` (ignoring case), by name, newest version first.
    pub fn search(&self, text: &str) -> Vec<&Entry> {
        let needle = text.to_lowercase();
        let mut found: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| !e.revoked)
            .filter(|e| {
                e.name.to_lowercase().contains(&needle)
                    || e.description
                        .as_ref()
                        .is_some_and(|d| d.to_lowercase().contains(&needle))
            })
            .collect();
        found.sort_by(|a, b| {
            a.name
                .cmp(&b.name)
                .then_with(|| compare_versions(&b.version, &a.version))
        });
        found
    }
}

/// Orders versions by their dot-separated numbers (`1.10` after `1.9`); a
/// version with a `-pre` suffix comes before the same numbers without one;
/// `+build` is ignored, except as a last tie-break.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    fn split(version: &str) -> (Vec<u64>, Option<&str>) {
        let (without_build, _) = version.split_once('+').unwrap_or((version, ""));
        let (core, pre) = match without_build.split_once('-') {
            Some((core, pre)) => (core, Some(pre)),
            None => (without_build, None),
        };
        let numbers = core
            .split('.')
            .map(|part| part.parse().unwrap_or(0))
            .collect();
        (numbers, pre)
    }
    let (numbers_a, pre_a) = split(a);
    let (numbers_b, pre_b) = split(b);
    let width = numbers_a.len().max(numbers_b.len());
    let at = |numbers: &[u64], i: usize| numbers.get(i).copied().unwrap_or(0);
    for i in 0..width {
        match at(&numbers_a, i).cmp(&at(&numbers_b, i)) {
            Ordering::Equal => {}
            other => return other,
        }
    }
    match (pre_a, pre_b) {
        (None, Some(_)) => Ordering::Greater,
        (Some(_), None) => Ordering::Less,
        (Some(x), Some(y)) if x != y => x.cmp(y),
        _ => a.cmp(b),
    }
}

/// Whether `text` is 64 lowercase hex digits.
pub fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// An archive reference: `https://…`, or relative without a scheme.
fn check_archive(archive: &str) -> Result<(), String> {
    if archive.is_empty() || archive.len() > 2048 || crate::text::has_unsafe(archive) {
        return Err(format!(
            "`{}` is not an archive URL (empty, too long, or with control characters)",
            Shown(archive)
        ));
    }
    let lowered = archive.to_ascii_lowercase();
    let has_scheme = lowered
        .split_once(':')
        .is_some_and(|(scheme, _)| !scheme.contains('/'));
    if has_scheme && !lowered.starts_with("https://") {
        return Err(format!(
            "`{}` is refused: an archive is an `https://` URL or a path relative to the index",
            Shown(archive)
        ));
    }
    Ok(())
}

/// Checks a registry's index: its signature by one of `registry_keys`
/// (rule 1), then its format (rule 3), expiry against `now` and version
/// against `last_seen` (rule 2).
///
/// # Errors
///
/// [`RegistryError::UnknownKey`], [`RegistryError::Invalid`],
/// [`RegistryError::Malformed`], [`RegistryError::Expired`],
/// [`RegistryError::Replayed`], and those of [`Index::parse`].
pub fn verify_index(
    bytes: &[u8],
    signature_text: &str,
    registry_keys: &[PublicKey],
    now: SystemTime,
    last_seen: Option<u64>,
) -> Result<Index, RegistryError> {
    if bytes.len() > MAX_INDEX_BYTES {
        return Err(RegistryError::TooLarge {
            limit: MAX_INDEX_BYTES,
        });
    }
    signature::verify(bytes, signature_text, registry_keys).map_err(|err| {
        RegistryError::from_signature(INDEX.to_owned(), "keys of this registry", err)
    })?;
    let index = Index::parse(bytes)?;
    if UtcTime::from_system(now) >= index.expires {
        return Err(RegistryError::Expired {
            expires: index.expires,
        });
    }
    if let Some(last_seen) = last_seen
        && index.version < last_seen
    {
        return Err(RegistryError::Replayed {
            version: index.version,
            last_seen,
        });
    }
    Ok(index)
}

/// Parses policy key texts.
///
/// # Errors
///
/// [`RegistryError::Key`] for one that does not parse.
pub fn parse_keys(keys: &[String]) -> Result<Vec<PublicKey>, RegistryError> {
    keys.iter()
        .map(|key| PublicKey::parse(key).map_err(RegistryError::Key))
        .collect()
}

/// Checks `archive_bytes` against `entry` under the policy's `rules`
/// (rule 4).
///
/// # Errors
///
/// [`RegistryError::Revoked`], [`RegistryError::NativeForbidden`],
/// [`RegistryError::DigestMismatch`], [`RegistryError::Unsigned`],
/// [`RegistryError::KeyMismatch`], [`RegistryError::PublisherNotAllowed`],
/// [`RegistryError::UnknownKey`], [`RegistryError::Invalid`],
/// [`RegistryError::Malformed`], [`RegistryError::Key`].
pub fn check_entry(
    entry: &Entry,
    archive_bytes: &[u8],
    rules: &PublisherRules,
) -> Result<Verified, RegistryError> {
    if entry.revoked {
        return Err(RegistryError::Revoked {
            name: entry.name.clone(),
            version: entry.version.clone(),
            reason: entry.reason.clone(),
        });
    }
    if entry.kind == Kind::Native
        && let Some(path) = &rules.native_forbidden_by
    {
        return Err(RegistryError::NativeForbidden {
            name: entry.name.clone(),
            version: entry.version.clone(),
            path: path.clone(),
        });
    }
    let found = pack::sha256_hex(archive_bytes);
    if found != entry.sha256 {
        return Err(RegistryError::DigestMismatch {
            subject: entry.subject(),
            expected: entry.sha256.clone(),
            found,
        });
    }
    let Some(signature_text) = &entry.signature else {
        let rule = match (&rules.signature_required_by, &rules.restricted_by) {
            (Some(path), _) => format!("`require_signature: true` in `{}`", path.display()),
            (None, Some(path)) => format!(
                "the `publishers` ceiling of `{}` (only listed publishers may publish)",
                path.display()
            ),
            (None, None) => {
                return Ok(Verified {
                    key: None,
                    public: None,
                });
            }
        };
        return Err(RegistryError::Unsigned {
            name: entry.name.clone(),
            version: entry.version.clone(),
            rule,
        });
    };
    let subject = entry.subject();
    let signer = signature::signed_by(signature_text)
        .map_err(|err| RegistryError::from_signature(subject.clone(), "trusted publishers", err))?;
    if let Some(declared) = entry.key
        && declared != signer
    {
        return Err(RegistryError::KeyMismatch {
            subject,
            declared,
            signed: signer,
        });
    }
    let trusted = parse_keys(&rules.trusted)?;
    if !trusted.iter().any(|key| key.id() == signer) {
        let listed = parse_keys(&rules.listed)?;
        if let Some(rule) = &rules.restricted_by
            && listed.iter().any(|key| key.id() == signer)
        {
            return Err(RegistryError::PublisherNotAllowed {
                subject,
                key: signer,
                rule: rule.clone(),
            });
        }
    }
    let key = signature::verify_key(archive_bytes, signature_text, &trusted)
        .map_err(|err| RegistryError::from_signature(subject, "trusted publishers", err))?;
    Ok(Verified {
        key: Some(key.id()),
        public: Some(key.to_base64()),
    })
}

/// Checks that `archive_bytes` hold the extension `entry` lists (rule 5):
/// returns the manifest read from the archive (in memory, capped).
///
/// # Errors
///
/// [`RegistryError::ArchiveMismatch`].
pub fn check_archive_manifest(
    entry: &Entry,
    archive_bytes: &[u8],
) -> Result<crate::manifest::Manifest, RegistryError> {
    let mismatch = |problem: String| RegistryError::ArchiveMismatch {
        subject: entry.subject(),
        problem,
    };
    let packed = build::Packed::read(archive_bytes).map_err(&mismatch)?;
    let manifest = packed.manifest().map_err(&mismatch)?;
    let top = &packed.top;
    let differs = |what: &str, found: &str, listed: &str| {
        mismatch(format!(
            "its manifest's {what} is `{}`, the index lists `{}`",
            Shown(found),
            Shown(listed)
        ))
    };
    if top != manifest.name() || manifest.name() != entry.name {
        return Err(differs("name", manifest.name(), &entry.name));
    }
    if manifest.raw.version != entry.version {
        return Err(differs("version", &manifest.raw.version, &entry.version));
    }
    if manifest.kind() != entry.kind.as_str() {
        return Err(differs("kind", manifest.kind(), entry.kind.as_str()));
    }
    if packed.declared(&manifest).map_err(&mismatch)? != entry.capabilities {
        let what = if manifest.is_data() {
            "its tools need"
        } else {
            "its manifest declares"
        };
        return Err(mismatch(format!(
            "{what} other capabilities than the index shows"
        )));
    }
    Ok(manifest)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
