//! `zotbox ext pack`: an extension folder as a reproducible `.tar.gz`, the
//! unit a registry publishes and signs.
//!
//! Rules:
//!
//! 1. **What an install would copy, nothing else.** The archive holds
//!    exactly the entries of [`install::plan`] for the folder (manifest,
//!    program, `files` selection), with the same refusals: a link out of
//!    the folder, a FIFO, a missing program are refused here as they are at
//!    install. A link inside is packed as the file's content.
//! 2. **One top folder.** Every entry lies under `<name>/`, the name of the
//!    manifest; no absolute path, no `..`, no link in the archive.
//! 3. **Reproducible.** The same folder content gives the same bytes:
//!    entries in path order, mtime 0, uid/gid 0, no owner names, modes
//!    `0644` (`0755` for an executable and a folder), a gzip header without
//!    time or name. So the sha256 a registry lists can be checked by anyone
//!    who packs the same source.
//! 4. **A published archive has a version.** The manifest's `version` must
//!    be set and read as a version ([`check_version`]): a registry entry is
//!    `name` at `version`.

use std::path::Path;

use sha2::{Digest as _, Sha256};

use crate::store::install::{self, EntryKind, InstallError};
use crate::text::Shown;

/// The longest version string accepted.
const MAX_VERSION_LEN: usize = 64;

/// A packed extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    /// The `.tar.gz` bytes.
    pub bytes: Vec<u8>,
    /// Their sha256, 64 lowercase hex digits.
    pub sha256_hex: String,
    /// The extension's name (the archive's top folder).
    pub name: String,
    /// Its version.
    pub version: String,
}

impl Packed {
    /// The archive's conventional file name: `<name>-<version>.tar.gz`.
    pub fn file_name(&self) -> String {
        format!("{}-{}.tar.gz", self.name, self.version)
    }
}

/// Why a folder was not packed.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// What an install of the folder would refuse.
    #[error(transparent)]
    Install(#[from] InstallError),
    /// The manifest has no usable `version`.
    #[error("pack of `{}` refused: {problem}", Shown(&folder.display().to_string()))]
    Version {
        /// The folder.
        folder: std::path::PathBuf,
        /// What is wrong, naming the field and the fix.
        problem: String,
    },
    /// Writing the archive in memory failed.
    #[error("cannot write the archive of `{}`: {error}", Shown(&folder.display().to_string()))]
    Io {
        /// The folder.
        folder: std::path::PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
}

/// The sha256 of `bytes`, as 64 lowercase hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut text, byte| {
            let _ = write!(text, "{byte:02x}");
            text
        })
}

/// Checks a version as a registry reads it: 1 to 4 dot-separated numbers
/// (`1`, `1.2`, `1.2.3`), optionally followed by `-pre` and/or `+build`
/// of `A-Z a-z 0-9 . -`; at most 64 characters.
///
/// # Errors
///
/// What is wrong, as a phrase.
pub fn check_version(version: &str) -> Result<(), String> {
    let shown = Shown(version);
    if version.is_empty() {
        return Err("is empty".to_owned());
    }
    if version.len() > MAX_VERSION_LEN {
        return Err(format!("is longer than {MAX_VERSION_LEN} characters"));
    }
    let end = version.find(['-', '+']).unwrap_or(version.len());
    let (core, suffix) = version.split_at(end);
    let parts: Vec<&str> = core.split('.').collect();
    let numeric = parts.len() <= 4
        && parts.iter().all(|part| {
            !part.is_empty() && part.len() <= 18 && part.bytes().all(|b| b.is_ascii_digit())
        });
    let suffix_ok = suffix
        .bytes()
        .skip(1)
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+'))
        && suffix != "-"
        && suffix != "+";
    if numeric && suffix_ok {
        Ok(())
    } else {
        Err(format!(
            "`{shown}` is not a version; write dot-separated numbers such as `1.2.3` \
             (optionally `-beta.1`)"
        ))
    }
}

/// Packs the extension folder `dir` (rules 1 to 4). Nothing is written.
///
/// # Errors
///
/// [`PackError::Install`] for what an install refuses,
/// [`PackError::Version`], [`PackError::Io`].
pub fn pack(dir: &Path) -> Result<Packed, PackError> {
    // The plan's destination is never used: nothing is installed.
    let plan = install::plan(dir, Path::new(""))?;
    let manifest = plan.manifest();
    let name = manifest.name().to_owned();
    let version = manifest.raw.version.clone();
    if version.is_empty() {
        return Err(PackError::Version {
            folder: dir.to_owned(),
            problem: "its manifest has no `version`; a published archive is a name at a version \
                      (add `\"version\": \"1.0.0\"` to `extension.json`)"
                .to_owned(),
        });
    }
    check_version(&version).map_err(|problem| PackError::Version {
        folder: dir.to_owned(),
        problem: format!("field `version` {problem}"),
    })?;
    let io = |error| PackError::Io {
        folder: dir.to_owned(),
        error,
    };
    let gzip = flate2::GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(Vec::new(), flate2::Compression::best());
    let mut tar = tar::Builder::new(gzip);
    tar.mode(tar::HeaderMode::Deterministic);
    tar.follow_symlinks(false);
    append(&mut tar, &format!("{name}/"), true, true, &[]).map_err(io)?;
    for entry in plan.entries() {
        let path = format!("{name}/{}", entry.path);
        match entry.kind {
            EntryKind::Folder => append(&mut tar, &format!("{path}/"), true, true, &[]),
            EntryKind::File if entry.path == crate::manifest::MANIFEST_FILE => append(
                &mut tar,
                &path,
                false,
                false,
                plan.manifest_text().as_bytes(),
            ),
            EntryKind::File | EntryKind::Link { .. } => {
                let content = plan.read(entry)?;
                append(&mut tar, &path, false, entry.executable, &content)
            }
        }
        .map_err(io)?;
    }
    let bytes = tar
        .into_inner()
        .and_then(flate2::write::GzEncoder::finish)
        .map_err(io)?;
    Ok(Packed {
        sha256_hex: sha256_hex(&bytes),
        bytes,
        name,
        version,
    })
}

/// Appends one entry with every varying field fixed (rule 3).
fn append<W: std::io::Write>(
    tar: &mut tar::Builder<W>,
    path: &str,
    folder: bool,
    executable: bool,
    content: &[u8],
) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(if folder {
        tar::EntryType::Directory
    } else {
        tar::EntryType::Regular
    });
    header.set_mode(if folder || executable { 0o755 } else { 0o644 });
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header.set_size(content.len() as u64);
    tar.append_data(&mut header, path, content)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::io::Read as _;
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn folder(manifest: &str) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("extension.json"), manifest).unwrap();
        tmp
    }

    const DATA: &str =
        r#"{"name":"notes","version":"1.2.0","exec":"./run","files":["prompts/**"]}"#;

    fn populated() -> tempfile::TempDir {
        let tmp = folder(DATA);
        let dir = tmp.path();
        std::fs::write(dir.join("run"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(dir.join("run"), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::create_dir(dir.join("prompts")).unwrap();
        std::fs::write(dir.join("prompts/a.md"), "a").unwrap();
        std::os::unix::fs::symlink("a.md", dir.join("prompts/b.md")).unwrap();
        // Not selected: stays out of the archive.
        std::fs::write(dir.join("notes.txt"), "private").unwrap();
        tmp
    }

    /// `(path, mode, uid, mtime, content)` of every entry.
    fn listing(bytes: &[u8]) -> Vec<(String, u32, u64, u64, String)> {
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
        archive
            .entries()
            .unwrap()
            .map(|entry| {
                let mut entry = entry.unwrap();
                let header = entry.header().clone();
                let mut content = String::new();
                entry.read_to_string(&mut content).unwrap();
                (
                    entry.path().unwrap().display().to_string(),
                    header.mode().unwrap(),
                    header.uid().unwrap(),
                    header.mtime().unwrap(),
                    content,
                )
            })
            .collect()
    }

    #[test]
    fn packing_twice_gives_identical_bytes_of_exactly_the_installed_files() {
        let tmp = populated();
        let first = pack(tmp.path()).unwrap();
        // Times and modes of the sources change; the archive does not.
        std::fs::set_permissions(
            tmp.path().join("prompts/a.md"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(tmp.path().join("prompts/a.md"), "a").unwrap();
        let second = pack(tmp.path()).unwrap();
        assert_eq!(first, second);
        assert_eq!(first.sha256_hex, sha256_hex(&first.bytes));
        assert_eq!(first.sha256_hex.len(), 64);
        assert_eq!(first.file_name(), "notes-1.2.0.tar.gz");
        // The gzip header carries no time (bytes 4..8) and no name flag.
        assert_eq!(&first.bytes[4..8], &[0, 0, 0, 0]);
        assert_eq!(first.bytes[3] & 0x08, 0);
        let entries = listing(&first.bytes);
        let shape: Vec<(&str, u32, u64, u64, &str)> = entries
            .iter()
            .map(|(p, m, u, t, c)| (p.as_str(), *m, *u, *t, c.as_str()))
            .collect();
        assert_eq!(
            shape,
            vec![
                ("notes/", 0o755, 0, 0, ""),
                ("notes/extension.json", 0o644, 0, 0, DATA),
                ("notes/prompts/", 0o755, 0, 0, ""),
                ("notes/prompts/a.md", 0o644, 0, 0, "a"),
                // A link inside is packed as the file's content.
                ("notes/prompts/b.md", 0o644, 0, 0, "a"),
                ("notes/run", 0o755, 0, 0, "#!/bin/sh\n"),
            ]
        );
    }

    #[test]
    fn a_path_past_the_tar_name_field_packs_the_same_and_reads_back() {
        let tmp = populated();
        let deep = format!("prompts/{}/{}.md", "d".repeat(80), "f".repeat(90));
        std::fs::create_dir_all(tmp.path().join(&deep).parent().unwrap()).unwrap();
        std::fs::write(tmp.path().join(&deep), "deep").unwrap();
        let first = pack(tmp.path()).unwrap();
        assert_eq!(first, pack(tmp.path()).unwrap());
        let entries = listing(&first.bytes);
        assert!(
            entries
                .iter()
                .any(|(path, _, _, _, content)| *path == format!("notes/{deep}")
                    && content == "deep"),
            "{entries:?}"
        );
        let packed = crate::store::registry::build::Packed::read(&first.bytes).unwrap();
        assert_eq!(
            (packed.manifest_text.as_str(), packed.top.as_str()),
            (DATA, "notes")
        );
    }

    #[test]
    fn pack_refuses_what_install_refuses_and_a_manifest_without_version() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "theirs").unwrap();
        // Attack: a selected file that is a link to a file outside the folder.
        let link_out = populated();
        std::os::unix::fs::symlink(
            outside.path().join("secret"),
            link_out.path().join("prompts/c.md"),
        )
        .unwrap();
        let no_version = folder(r#"{"name":"notes","exec":"./run"}"#);
        std::fs::write(no_version.path().join("run"), "x").unwrap();
        let bad_version = folder(r#"{"name":"notes","version":"latest","exec":"./run"}"#);
        std::fs::write(bad_version.path().join("run"), "x").unwrap();
        let cases = [
            (
                link_out.path(),
                format!(
                    "install of `{}` refused: `prompts/c.md` is a symlink leading outside the \
                     extension's folder (to `{}`); an install copies only the folder's own files",
                    link_out.path().display(),
                    outside.path().join("secret").display()
                ),
            ),
            (
                no_version.path(),
                format!(
                    "pack of `{}` refused: its manifest has no `version`; a published archive \
                     is a name at a version (add `\"version\": \"1.0.0\"` to `extension.json`)",
                    no_version.path().display()
                ),
            ),
            (
                bad_version.path(),
                format!(
                    "pack of `{}` refused: field `version` `latest` is not a version; write \
                     dot-separated numbers such as `1.2.3` (optionally `-beta.1`)",
                    bad_version.path().display()
                ),
            ),
        ];
        for (dir, expected) in cases {
            assert_eq!(pack(dir).unwrap_err().to_string(), expected);
        }
    }

    #[test]
    fn versions_are_dot_separated_numbers_with_an_optional_suffix() {
        for good in [
            "1",
            "1.2",
            "1.2.3",
            "1.2.3.4",
            "1.0.0-beta.1",
            "2.0.0+build-7",
            "0.1.0-rc1+x",
        ] {
            assert_eq!(check_version(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "v1",
            "1.",
            ".1",
            "1..2",
            "1.2.3.4.5",
            "1.x",
            "1-",
            "1.0 ",
            "1.0-a b",
            "1.0\u{202e}",
        ] {
            assert!(check_version(bad).is_err(), "{bad:?}");
        }
    }
}
