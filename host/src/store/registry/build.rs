//! `zotbox registry index DIR`: an index built from packed archives, and
//! signed.
//!
//! Every `*.tar.gz` in the folder is read in memory (never unpacked to
//! disk): its manifest, found in the tar stream under the archive's one
//! top folder, gives the entry's name, version, kind, description and
//! capabilities (a data package's, derived from its tools, which must all
//! load); the archive's sha256 and file name (under `base_url` when
//! given) complete it, with the `*.tar.gz.minisig` beside it, when there
//! is one, inlined as the publisher's signature. Reading is capped: an
//! archive of at most `install::MAX_INSTALL_BYTES`, unpacking at most
//! that plus headers, a manifest of at most 1 MiB.
//!
//! A previous `index.json` in the folder gives the next version (its
//! version + 1) and its revocations: an entry it marks revoked stays
//! revoked (and listed, even once its archive is removed), so rebuilding
//! never brings a withdrawn version back.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{Entry, Index, Kind, RegistryError, UtcTime};
use crate::data::package;
use crate::manifest::{Capabilities, MANIFEST_FILE, Manifest, Program};
use crate::store::install::MAX_INSTALL_BYTES;
use crate::store::signature::{self, SecretKey};
use crate::store::{pack, signature::SignatureError};
use crate::text::Shown;
use crate::user_file::Links;

/// The index's file name in a registry folder.
pub const INDEX_FILE: &str = "index.json";
/// Its signature's.
pub const INDEX_SIGNATURE_FILE: &str = "index.json.minisig";
/// How long a built index is accepted by default: 30 days.
pub const DEFAULT_EXPIRY_SECS: u64 = 30 * 24 * 3600;
/// The most tools, plugins and skills one packed data package may hold.
const MAX_PACKAGE_FILES: usize = 10_000;
/// Headers and padding allowed on top of the files' bytes when unpacking.
const MAX_TAR_OVERHEAD: u64 = 64 * 1024 * 1024;

/// Builds and signs the index of the archives in `dir`: returns the
/// index's text and its signature's. `version` defaults to the previous
/// `index.json`'s + 1 (else the unix time), `expires` to 30 days from now.
///
/// # Errors
///
/// [`RegistryError::Archive`] naming an archive that is not a packed
/// extension, [`RegistryError::BadField`] when the entries do not make a
/// valid index (a name at a version twice), [`RegistryError::Io`],
/// [`RegistryError::Malformed`] when signing fails.
pub fn build_index(
    dir: &Path,
    base_url: Option<&str>,
    key: &SecretKey,
    version: Option<u64>,
    expires: Option<UtcTime>,
) -> Result<(String, String), RegistryError> {
    build_index_at(dir, None, base_url, key, version, expires)
}

/// [`build_index`] for an index served at `url`, which it names (clients
/// refuse it at any other URL); without one, the URL the index in `dir`
/// named, if any.
///
/// # Errors
///
/// As [`build_index`].
pub fn build_index_at(
    dir: &Path,
    url: Option<&str>,
    base_url: Option<&str>,
    key: &SecretKey,
    version: Option<u64>,
    expires: Option<UtcTime>,
) -> Result<(String, String), RegistryError> {
    let now = UtcTime::from_system(SystemTime::now());
    let previous = previous_index(dir)?;
    let mut entries = Vec::new();
    for path in archives(dir)? {
        let mut entry = entry_of(&path, base_url)?;
        if let Some(old) = previous.as_ref().and_then(|p| {
            p.entries
                .iter()
                .find(|e| e.name == entry.name && e.version == entry.version)
        }) && old.revoked
        {
            entry.revoked = true;
            entry.reason.clone_from(&old.reason);
        }
        entries.push(entry);
    }
    if let Some(previous) = &previous {
        for old in previous.entries.iter().filter(|e| e.revoked) {
            if !entries
                .iter()
                .any(|e| e.name == old.name && e.version == old.version)
            {
                entries.push(old.clone());
            }
        }
    }
    entries.sort_by(|a, b| {
        a.name
            .cmp(&b.name)
            .then_with(|| super::compare_versions(&a.version, &b.version))
    });
    let index = Index {
        registry: url
            .map(str::to_owned)
            .or_else(|| previous.as_ref().and_then(|p| p.registry.clone())),
        version: version.unwrap_or_else(|| {
            previous
                .as_ref()
                .map_or(now.unix(), |p| p.version.saturating_add(1))
        }),
        expires: expires
            .unwrap_or_else(|| UtcTime::from_unix(now.unix().saturating_add(DEFAULT_EXPIRY_SECS))),
        entries,
    };
    index.validate()?;
    let mut text = serde_json::to_string_pretty(&index)
        .map_err(|err| RegistryError::Parse(err.to_string()))?;
    text.push('\n');
    let comment = format!(
        "zotbox registry index version {} expires {}",
        index.version, index.expires
    );
    let signed = signature::sign(text.as_bytes(), key, &comment).map_err(|err| {
        RegistryError::Malformed {
            subject: "the registry index".to_owned(),
            detail: err.to_string(),
        }
    })?;
    Ok((text, signed))
}

/// The previous index in `dir`, if there is one (unsigned: it is the
/// maintainer's own file, read for its version and revocations).
fn previous_index(dir: &Path) -> Result<Option<Index>, RegistryError> {
    let path = dir.join(INDEX_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => Index::parse(&bytes).map(Some).map_err(|err| match err {
            RegistryError::Parse(detail) => RegistryError::Parse(format!(
                "the previous `{}`: {detail}; fix or remove it",
                path.display()
            )),
            other => other,
        }),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(RegistryError::Io {
            action: "read",
            path,
            error,
        }),
    }
}

/// The `*.tar.gz` regular files of `dir`, by name.
fn archives(dir: &Path) -> Result<Vec<PathBuf>, RegistryError> {
    let io = |error| RegistryError::Io {
        action: "list",
        path: dir.to_owned(),
        error,
    };
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.ends_with(".tar.gz") {
            continue;
        }
        found.push(entry.path());
    }
    found.sort();
    Ok(found)
}

fn entry_of(path: &Path, base_url: Option<&str>) -> Result<Entry, RegistryError> {
    let refused = |problem: String| RegistryError::Archive {
        path: path.to_owned(),
        problem,
    };
    let bytes = read_archive(path)?;
    let packed = Packed::read(&bytes).map_err(refused)?;
    let manifest = packed.manifest().map_err(refused)?;
    let capabilities = packed.declared(&manifest).map_err(refused)?;
    let top = &packed.top;
    if manifest.name() != top {
        return Err(refused(format!(
            "its top folder `{}` is not the manifest's name `{}`; pack it with `zotbox ext pack`",
            Shown(top),
            Shown(manifest.name())
        )));
    }
    pack::check_version(&manifest.raw.version)
        .map_err(|problem| refused(format!("its manifest's `version` {problem}")))?;
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned();
    let signature_path = PathBuf::from(format!("{}.minisig", path.display()));
    let signature = match std::fs::symlink_metadata(&signature_path) {
        Ok(_) => {
            let text = read_capped(&signature_path, signature::MAX_SIGNATURE_TEXT as u64)?;
            Some(
                String::from_utf8(text)
                    .map_err(|_| refused("its `.minisig` is not UTF-8".to_owned()))?,
            )
        }
        Err(_) => None,
    };
    let key = signature
        .as_deref()
        .map(signature::signed_by)
        .transpose()
        .map_err(|err: SignatureError| refused(format!("its `.minisig`: {err}")))?;
    let archive = match base_url {
        Some(base) => format!("{}/{file_name}", base.trim_end_matches('/')),
        None => file_name,
    };
    Ok(Entry {
        name: manifest.name().to_owned(),
        version: manifest.raw.version.clone(),
        kind: match manifest.program {
            Program::Native { .. } => Kind::Native,
            Program::Wasm { .. } => Kind::Wasm,
            Program::Data => Kind::Data,
        },
        archive,
        sha256: pack::sha256_hex(&bytes),
        capabilities,
        key,
        signature,
        revoked: false,
        reason: None,
        description: manifest.raw.description.clone(),
    })
}

/// The bytes of the packed extension at `path` (`ext pack`'s output): a
/// regular file (never a link, a FIFO or a device) of at most what an
/// install copies ([`MAX_INSTALL_BYTES`]).
///
/// # Errors
///
/// [`RegistryError::Archive`] for anything else, [`RegistryError::Io`]
/// when it cannot be read.
pub fn read_archive(path: &Path) -> Result<Vec<u8>, RegistryError> {
    read_capped(path, MAX_INSTALL_BYTES)
}

fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, RegistryError> {
    let io = |error| RegistryError::Io {
        action: "read",
        path: path.to_owned(),
        error,
    };
    let file = match crate::user_file::open_regular(path, Links::Refuse) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::InvalidInput => {
            return Err(RegistryError::Archive {
                path: path.to_owned(),
                problem: "is not a regular file (a link, a FIFO or a device?)".to_owned(),
            });
        }
        Err(err) => return Err(io(err)),
    };
    crate::user_file::read_file_at_most(file, cap)
        .map_err(io)?
        .ok_or_else(|| RegistryError::Archive {
            path: path.to_owned(),
            problem: format!("is larger than {cap} bytes"),
        })
}

/// What an index needs from a packed archive, read from the stream with
/// caps: its one top folder, its manifest's text, and a data package's
/// files (those [`package::classify`] knows, each at most
/// [`crate::data::MAX_FILE_BYTES`]).
#[derive(Debug)]
pub struct Packed {
    /// The archive's top folder.
    pub top: String,
    /// The text of `<top>/extension.json`.
    pub manifest_text: String,
    /// `(path inside the top folder, text)` of each package file.
    pub package_files: Vec<(String, String)>,
}

impl Packed {
    /// Reads `bytes`, a packed `.tar.gz`.
    ///
    /// # Errors
    ///
    /// Why it is not a packed extension, as a phrase.
    pub fn read(bytes: &[u8]) -> Result<Self, String> {
        let stream = flate2::read::GzDecoder::new(bytes).take(MAX_INSTALL_BYTES + MAX_TAR_OVERHEAD);
        let mut archive = tar::Archive::new(stream);
        let entries = archive
            .entries()
            .map_err(|err| format!("it is not a .tar.gz: {err}"))?;
        let mut top: Option<String> = None;
        let mut manifest_text = None;
        let mut package_files = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|err| format!("it is not a .tar.gz: {err}"))?;
            let path = entry
                .path()
                .map_err(|err| format!("an entry has an unreadable path: {err}"))?
                .to_string_lossy()
                .into_owned();
            // Read as unpacking reads it (`.` and empty parts dropped).
            let parts =
                crate::store::unpack::relative_parts(&path).map_err(|err| err.to_string())?;
            let Some((first, inside)) = parts.split_first() else {
                continue;
            };
            let inside = inside.join("/");
            let inside = inside.as_str();
            match &top {
                None => top = Some(first.to_owned()),
                Some(top) if top != first => {
                    return Err(format!(
                        "it has more than one top folder (`{}` and `{}`); a packed extension \
                         has one",
                        Shown(top),
                        Shown(first)
                    ));
                }
                Some(_) => {}
            }
            let wanted = if inside == MANIFEST_FILE {
                crate::user_file::MAX_MANIFEST_BYTES
            } else if package::classify(inside).is_some() {
                crate::data::MAX_FILE_BYTES
            } else {
                continue;
            };
            let inside = inside.to_owned();
            if entry.header().entry_type() != tar::EntryType::Regular {
                return Err(format!("its `{}` is not a regular file", Shown(&inside)));
            }
            let mut text = String::new();
            entry
                .take(wanted + 1)
                .read_to_string(&mut text)
                .map_err(|err| format!("its `{}` cannot be read: {err}", Shown(&inside)))?;
            if text.len() as u64 > wanted {
                return Err(format!(
                    "its `{}` is larger than {wanted} bytes",
                    Shown(&inside)
                ));
            }
            if inside == MANIFEST_FILE {
                manifest_text = Some(text);
            } else if package_files.len() < MAX_PACKAGE_FILES {
                package_files.push((inside, text));
            } else {
                return Err(format!(
                    "it holds more than {MAX_PACKAGE_FILES} tools, plugins and skills"
                ));
            }
        }
        let (Some(top), Some(manifest_text)) = (top, manifest_text) else {
            return Err(format!(
                "it has no `<name>/{MANIFEST_FILE}`; pack the extension with `zotbox ext pack`"
            ));
        };
        Ok(Self {
            top,
            manifest_text,
            package_files,
        })
    }

    /// Its manifest, validated.
    ///
    /// # Errors
    ///
    /// Why it is invalid, as a phrase.
    pub fn manifest(&self) -> Result<Manifest, String> {
        let path = Path::new(&self.top).join(MANIFEST_FILE);
        Manifest::parse(&self.manifest_text, &path)
            .map_err(|err| format!("its manifest is invalid: {err}"))
    }

    /// What it asks to be allowed: the manifest's capabilities, or a data
    /// package's, derived from its tools (checked whole, as an install
    /// checks them).
    ///
    /// # Errors
    ///
    /// Why the package's files are refused, as a phrase.
    pub fn declared(&self, manifest: &Manifest) -> Result<Capabilities, String> {
        if !manifest.is_data() {
            return Ok(manifest.raw.capabilities.clone());
        }
        package::Contents::parse(
            self.package_files
                .iter()
                .map(|(path, text)| (path.as_str(), text.as_str())),
            Path::new(&self.top),
            crate::data::DataOrigin::Registry,
        )
        .map(|contents| contents.declared())
        .map_err(|err| format!("its data files are refused: {err}"))
    }
}

#[cfg(test)]
mod tests {
    use super::read_capped;

    /// What `read_capped` refuses `path` for, or `None` when it reads it.
    fn refusal(path: &std::path::Path, cap: u64) -> Option<String> {
        read_capped(path, cap).err().map(|err| err.to_string())
    }

    #[test]
    fn an_archive_is_read_only_as_a_regular_file_within_its_cap() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let archive = tmp.path().join("x.tar.gz");
        std::fs::write(&archive, b"0123456789").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(refusal(&archive, 10), None);
        assert_eq!(
            refusal(&archive, 9),
            Some(format!(
                "archive `{}` refused: is larger than 9 bytes",
                archive.display()
            ))
        );
        // A link to it, and a FIFO: neither is read (nor waited on).
        let link = tmp.path().join("link.tar.gz");
        std::os::unix::fs::symlink(&archive, &link).unwrap_or_else(|e| panic!("{e}"));
        let fifo = tmp.path().join("fifo.tar.gz");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap_or_else(|e| panic!("{e}"));
        for path in [link, fifo] {
            let shown = path.display().to_string();
            let refused = crate::user_file::without_waiting(move || refusal(&path, 10));
            assert_eq!(
                refused,
                Some(format!(
                    "archive `{shown}` refused: is not a regular file (a link, a FIFO or a device?)"
                ))
            );
        }
    }
}
