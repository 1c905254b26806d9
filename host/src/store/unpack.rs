//! Unpacking a downloaded `.tar.gz` extension archive, entry by entry.
//!
//! An archive is the author's (or a network attacker's) bytes: nothing in
//! it may write outside the folder it is unpacked into, or make the unpack
//! itself a denial of service. `tar::Archive::unpack` is never used; every
//! entry is checked here and written by this module.
//!
//! # Rules
//!
//! 1. **Relative paths only.** An entry whose path (after the GNU long-name
//!    and PAX `path` records the archive carries, which is how a long name
//!    is read) is absolute, or has a `..` component anywhere, is refused
//!    ([`UnpackError::Absolute`], [`UnpackError::Parent`]). A path that is
//!    not UTF-8 is refused too.
//! 2. **No links at all.** Every symlink and hard link entry is refused
//!    ([`UnpackError::Link`]), wherever it leads: an extension folder needs
//!    none (an install copies a link inside the folder as the file's
//!    content anyway, so a packer resolves them), and refusing all of them
//!    leaves no link for a later entry to write through.
//! 3. **Only files and folders.** Character and block devices, FIFOs,
//!    sparse and other special entries are refused ([`UnpackError::Special`]).
//! 4. **Bounded.** The decompressed stream (headers included) is counted as
//!    it is read and stops past the byte cap ([`Caps::bytes`], by default
//!    [`MAX_INSTALL_BYTES`]) plus a small allowance for headers: a gzip
//!    bomb is stopped after reading about the cap, not after filling the
//!    disk ([`UnpackError::TooLarge`]). The files' content counts against
//!    the same cap; entries past [`Caps::entries`] are refused
//!    ([`UnpackError::TooManyEntries`]).
//! 5. **One top folder.** Every entry lies in one and the same top folder
//!    (what `tar czf x.tar.gz x/` makes); a second top folder or a file at
//!    the top is refused ([`UnpackError::TopFolders`]). That folder is what
//!    an install then reads.
//! 6. **No entry twice.** A path met twice (a file over a file, a file over
//!    a folder) is refused ([`UnpackError::Duplicate`]): the second copy
//!    would silently replace what a reviewer of the listing saw first.
//! 7. **Writes only inside, never through a link.** The target folder must
//!    be empty (a fresh private folder); folders are created with `mkdir`,
//!    files with `O_CREAT | O_EXCL | O_NOFOLLOW`, mode `0644` (`0755` when
//!    the entry is executable). After any refusal, what was written is
//!    removed: the folder is empty again.
//!
//! What is unpacked then goes through the install rules
//! (`store::install::plan`), which check it again as any folder.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::libc;

pub use super::install::MAX_INSTALL_BYTES;
use crate::text::Shown;

/// The most entries one archive may hold, by default.
pub const MAX_ENTRIES: usize = 10_000;

/// Bytes of headers allowed beyond the byte cap: 2 KiB per entry.
const HEADER_ALLOWANCE: u64 = 2048;

/// The caps of one unpack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// The most bytes of file content (and, with an allowance for headers,
    /// of the decompressed stream).
    pub bytes: u64,
    /// The most entries.
    pub entries: usize,
}

impl Default for Caps {
    fn default() -> Self {
        Self {
            bytes: MAX_INSTALL_BYTES,
            entries: MAX_ENTRIES,
        }
    }
}

/// Why an archive was not unpacked. After any of these, nothing is left in
/// the target folder.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UnpackError {
    /// Rule 1: an absolute path.
    #[error(
        "archive refused: entry `{}` has an absolute path; an archive unpacks only inside its \
         own folder",
        Shown(.entry)
    )]
    Absolute {
        /// The entry's path, as written.
        entry: String,
    },
    /// Rule 1: a `..` component.
    #[error(
        "archive refused: entry `{}` climbs out with `..`; an archive unpacks only inside its \
         own folder",
        Shown(.entry)
    )]
    Parent {
        /// The entry's path, as written.
        entry: String,
    },
    /// Rule 1: a path that is not UTF-8.
    #[error("archive refused: an entry's path is not UTF-8 (`{}`)", Shown(.entry))]
    NotUtf8 {
        /// The path, lossily decoded.
        entry: String,
    },
    /// Rule 2: a symlink or hard link.
    #[error(
        "archive refused: entry `{}` is a {kind} (to `{}`); an extension archive holds only \
         files and folders",
        Shown(.entry),
        Shown(.target)
    )]
    Link {
        /// The entry's path.
        entry: String,
        /// `symlink` or `hard link`.
        kind: &'static str,
        /// Where it leads, as written.
        target: String,
    },
    /// Rule 3: a device, FIFO or other special entry.
    #[error(
        "archive refused: entry `{}` is {kind}; an extension archive holds only files and folders",
        Shown(.entry)
    )]
    Special {
        /// The entry's path.
        entry: String,
        /// What it is.
        kind: &'static str,
    },
    /// Rule 4: more bytes than the cap.
    #[error(
        "archive refused: it unpacks to more than {} MiB (the install cap); nothing was unpacked",
        .limit / (1024 * 1024)
    )]
    TooLarge {
        /// The cap, in bytes.
        limit: u64,
    },
    /// Rule 4: more entries than the cap.
    #[error("archive refused: it holds more than {limit} entries")]
    TooManyEntries {
        /// The cap.
        limit: usize,
    },
    /// Rule 5: not exactly one top folder.
    #[error(
        "archive refused: entry `{}` is not in the top folder `{}`; an extension archive holds \
         one top folder (`tar czf NAME.tar.gz NAME/`)",
        Shown(.entry),
        Shown(.top)
    )]
    TopFolders {
        /// The first top folder (empty when the first entry was a file at the top).
        top: String,
        /// The entry outside it.
        entry: String,
    },
    /// Rule 5: nothing in the archive.
    #[error("archive refused: it holds no extension folder")]
    Empty,
    /// Rule 6: a path met twice.
    #[error(
        "archive refused: entry `{}` appears twice; an archive lists each file once",
        Shown(.entry)
    )]
    Duplicate {
        /// The entry's path.
        entry: String,
    },
    /// The bytes are not a readable `.tar.gz`.
    #[error("archive refused: it is not a readable `.tar.gz` ({0})")]
    Corrupt(String),
    /// Rule 7: the target folder is not empty, or a write failed.
    #[error("cannot unpack into `{}`: {error}", Shown(&.path.display().to_string()))]
    Io {
        /// The path.
        path: PathBuf,
        /// What went wrong.
        error: String,
    },
}

/// Counts decompressed bytes and fails the read past `limit`.
struct Capped<R> {
    inner: R,
    read: u64,
    limit: u64,
    exceeded: Arc<AtomicBool>,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        if self.read > self.limit {
            self.exceeded.store(true, Ordering::Relaxed);
            return Err(io::Error::other("past the unpack cap"));
        }
        Ok(n)
    }
}

/// Unpacks the `.tar.gz` `archive` into the empty folder `into` (rules
/// above) and returns the path of its single top folder.
///
/// # Errors
///
/// [`UnpackError`] naming the entry and the rule; `into` is empty again.
pub fn unpack(archive: &[u8], into: &Path, caps: Caps) -> Result<PathBuf, UnpackError> {
    let io_err = |path: &Path| {
        let path = path.to_owned();
        move |error: io::Error| UnpackError::Io {
            path,
            error: error.to_string(),
        }
    };
    let mut listing = std::fs::read_dir(into).map_err(io_err(into))?;
    if listing.next().is_some() {
        return Err(UnpackError::Io {
            path: into.to_owned(),
            error: "the folder is not empty".to_owned(),
        });
    }
    let result = unpack_entries(archive, into, caps);
    if result.is_err() {
        // Rule 7: nothing stays behind.
        if let Ok(entries) = std::fs::read_dir(into) {
            for entry in entries.flatten() {
                let path = entry.path();
                let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
                if let Err(err) = removed {
                    tracing::warn!("cannot remove `{}`: {err}", path.display());
                }
            }
        }
    }
    result
}

/// What an unpacked path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Made {
    /// A folder made for an entry of the archive.
    Folder,
    /// A folder made because a path lay in it.
    Implied,
    File,
}

fn unpack_entries(archive: &[u8], into: &Path, caps: Caps) -> Result<PathBuf, UnpackError> {
    let exceeded = Arc::new(AtomicBool::new(false));
    let stream_limit = caps
        .bytes
        .saturating_add(HEADER_ALLOWANCE.saturating_mul(caps.entries as u64 + 2));
    let capped = Capped {
        inner: flate2::read::GzDecoder::new(archive),
        read: 0,
        limit: stream_limit,
        exceeded: exceeded.clone(),
    };
    let too_large = UnpackError::TooLarge { limit: caps.bytes };
    let corrupt = |err: io::Error| {
        if exceeded.load(Ordering::Relaxed) {
            UnpackError::TooLarge { limit: caps.bytes }
        } else {
            UnpackError::Corrupt(err.to_string())
        }
    };
    let mut tar = tar::Archive::new(capped);
    let mut made: BTreeMap<String, Made> = BTreeMap::new();
    let mut top: Option<String> = None;
    let mut count = 0usize;
    let mut written: u64 = 0;
    for entry in tar.entries().map_err(corrupt)? {
        let mut entry = entry.map_err(corrupt)?;
        count += 1;
        if count > caps.entries {
            return Err(UnpackError::TooManyEntries {
                limit: caps.entries,
            });
        }
        let raw = entry.path_bytes().into_owned();
        let written_path = String::from_utf8(raw).map_err(|err| UnpackError::NotUtf8 {
            entry: String::from_utf8_lossy(err.as_bytes()).into_owned(),
        })?;
        let parts = relative_parts(&written_path)?;
        let kind = entry.header().entry_type();
        // Rules 2 and 3 before anything is made.
        if kind.is_symlink() || kind.is_hard_link() {
            let target = entry
                .link_name_bytes()
                .map(|t| String::from_utf8_lossy(&t).into_owned())
                .unwrap_or_default();
            return Err(UnpackError::Link {
                entry: written_path,
                kind: if kind.is_symlink() {
                    "symlink"
                } else {
                    "hard link"
                },
                target,
            });
        }
        let is_dir = kind.is_dir();
        if !is_dir && !kind.is_file() && kind != tar::EntryType::Continuous {
            return Err(UnpackError::Special {
                entry: written_path,
                kind: special_kind(kind),
            });
        }
        if parts.is_empty() {
            // `./`: the archive's root itself.
            if is_dir {
                continue;
            }
            return Err(UnpackError::TopFolders {
                top: top.unwrap_or_default(),
                entry: written_path,
            });
        }
        // Rule 5.
        match &top {
            None if parts.len() == 1 && !is_dir => {
                return Err(UnpackError::TopFolders {
                    top: String::new(),
                    entry: written_path,
                });
            }
            None => top = Some(parts[0].clone()),
            Some(first) if *first != parts[0] || (parts.len() == 1 && !is_dir) => {
                return Err(UnpackError::TopFolders {
                    top: first.clone(),
                    entry: written_path,
                });
            }
            Some(_) => {}
        }
        // Folders on the way, made as needed.
        for depth in 1..parts.len() {
            let folder = parts[..depth].join("/");
            match made.get(&folder) {
                Some(Made::Folder | Made::Implied) => {}
                Some(Made::File) => {
                    return Err(UnpackError::Duplicate {
                        entry: written_path,
                    });
                }
                None => {
                    make_folder(&into.join(&folder))?;
                    made.insert(folder, Made::Implied);
                }
            }
        }
        let path = parts.join("/");
        let target = into.join(&path);
        // Rule 6.
        match (made.get(&path).copied(), is_dir) {
            (None, true) => {
                make_folder(&target)?;
                made.insert(path, Made::Folder);
            }
            (Some(Made::Implied), true) => {
                made.insert(path, Made::Folder);
            }
            (Some(_), _) => {
                return Err(UnpackError::Duplicate {
                    entry: written_path,
                });
            }
            (None, false) => {
                let size = entry.header().size().map_err(corrupt)?;
                if written.saturating_add(size) > caps.bytes {
                    return Err(too_large);
                }
                let executable = entry.header().mode().map_err(corrupt)? & 0o100 != 0;
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(if executable { 0o755 } else { 0o644 })
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(&target)
                    .map_err(|error| UnpackError::Io {
                        path: target.clone(),
                        error: error.to_string(),
                    })?;
                let budget = caps.bytes - written;
                let copied = io::copy(&mut (&mut entry).take(budget.saturating_add(1)), &mut file)
                    .map_err(corrupt)?;
                written += copied;
                if written > caps.bytes {
                    return Err(too_large);
                }
                made.insert(path, Made::File);
            }
        }
    }
    match top {
        Some(top) => Ok(into.join(top)),
        None => Err(UnpackError::Empty),
    }
}

/// Rule 1: the path's parts, without `.` and empty ones: the path an entry
/// is unpacked to, so whoever reads an archive without unpacking it (the
/// registry's index, the check of what an entry declares) must read its
/// paths through this too, or it would read another file than the one
/// installed (`kit/tools//x.json` is `kit/tools/x.json`).
pub(crate) fn relative_parts(written: &str) -> Result<Vec<String>, UnpackError> {
    if written.starts_with('/') {
        return Err(UnpackError::Absolute {
            entry: written.to_owned(),
        });
    }
    let mut parts = Vec::new();
    for part in written.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(UnpackError::Parent {
                    entry: written.to_owned(),
                });
            }
            other => parts.push(other.to_owned()),
        }
    }
    Ok(parts)
}

fn make_folder(path: &Path) -> Result<(), UnpackError> {
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(path)
        .map_err(|error| UnpackError::Io {
            path: path.to_owned(),
            error: error.to_string(),
        })
}

fn special_kind(kind: tar::EntryType) -> &'static str {
    match kind {
        tar::EntryType::Char => "a character device",
        tar::EntryType::Block => "a block device",
        tar::EntryType::Fifo => "a FIFO",
        tar::EntryType::GNUSparse => "a sparse file",
        _ => "a special entry",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::io::Write as _;

    use super::*;

    /// An archive built entry by entry with raw headers, so that hostile
    /// entries the `tar` crate's safe setters refuse can be written.
    #[derive(Default)]
    struct Hostile {
        tar: Vec<u8>,
    }

    impl Hostile {
        fn raw(mut self, name: &[u8], kind: tar::EntryType, data: &[u8], link: &[u8]) -> Self {
            let mut header = tar::Header::new_gnu();
            header.as_old_mut().name[..name.len()].copy_from_slice(name);
            header.as_old_mut().linkname[..link.len()].copy_from_slice(link);
            header.set_entry_type(kind);
            header.set_size(data.len() as u64);
            header.set_mode(if kind.is_dir() { 0o755 } else { 0o644 });
            header.set_cksum();
            self.tar.extend_from_slice(header.as_bytes());
            self.tar.extend_from_slice(data);
            let pad = (512 - data.len() % 512) % 512;
            self.tar.extend(std::iter::repeat_n(0u8, pad));
            self
        }
        fn file(self, name: &str, data: &[u8]) -> Self {
            self.raw(name.as_bytes(), tar::EntryType::Regular, data, b"")
        }
        fn dir(self, name: &str) -> Self {
            self.raw(name.as_bytes(), tar::EntryType::Directory, b"", b"")
        }
        fn gz(mut self) -> Vec<u8> {
            self.tar.extend(std::iter::repeat_n(0u8, 1024));
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            encoder.write_all(&self.tar).unwrap();
            encoder.finish().unwrap()
        }
    }

    fn good() -> Hostile {
        Hostile::default()
            .dir("ext/")
            .file("ext/extension.json", b"{}")
            .dir("ext/bin/")
    }

    fn pax(record: &str) -> Vec<u8> {
        // "LEN key=value\n" where LEN counts the whole record.
        let body = format!(" {record}\n");
        let mut len = body.len() + 1;
        while format!("{len}{body}").len() != len {
            len += 1;
        }
        format!("{len}{body}").into_bytes()
    }

    fn run(archive: &[u8], caps: Caps) -> (Result<PathBuf, UnpackError>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let into = dir.path().join("into");
        std::fs::create_dir(&into).unwrap();
        let result = unpack(archive, &into, caps);
        (result, dir)
    }

    /// Every path under `root`, to show nothing was written anywhere.
    fn everything(root: &Path) -> Vec<String> {
        let mut found = Vec::new();
        let mut pending = vec![root.to_owned()];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                found.push(path.strip_prefix(root).unwrap().display().to_string());
                if entry.file_type().unwrap().is_dir() {
                    pending.push(path);
                }
            }
        }
        found.sort();
        found
    }

    #[test]
    fn a_plain_archive_unpacks_its_one_top_folder() {
        let archive = good()
            .file("ext/bin/run", b"#!/bin/sh\n")
            .file("ext/./data/x.txt", b"x")
            .gz();
        let (result, dir) = run(&archive, Caps::default());
        let top = result.unwrap();
        assert_eq!(top, dir.path().join("into/ext"));
        assert_eq!(std::fs::read(top.join("extension.json")).unwrap(), b"{}");
        assert_eq!(std::fs::read(top.join("data/x.txt")).unwrap(), b"x");
        assert_eq!(
            everything(dir.path()),
            [
                "into",
                "into/ext",
                "into/ext/bin",
                "into/ext/bin/run",
                "into/ext/data",
                "into/ext/data/x.txt",
                "into/ext/extension.json"
            ]
        );
    }

    #[test]
    fn every_hostile_archive_is_refused_with_its_rule_and_leaves_nothing() {
        use tar::EntryType as T;
        let long_name = |name: &str| {
            let mut data = name.as_bytes().to_vec();
            data.push(0);
            good().raw(b"././@LongLink", T::GNULongName, &data, b"")
        };
        let bomb = {
            // 2 MiB of zeros compress to a few KiB; the cap is 1 MiB.
            good().file("ext/zeros", &vec![0u8; 2 * 1024 * 1024])
        };
        let small = Caps {
            bytes: 1024 * 1024,
            entries: 8,
        };
        let cases: Vec<(&str, Vec<u8>, Caps, UnpackError)> = vec![
            (
                "parent",
                good().file("ext/../../evil", b"x").gz(),
                Caps::default(),
                UnpackError::Parent {
                    entry: "ext/../../evil".into(),
                },
            ),
            (
                "absolute",
                good().file("/tmp/evil", b"x").gz(),
                Caps::default(),
                UnpackError::Absolute {
                    entry: "/tmp/evil".into(),
                },
            ),
            (
                "symlink out",
                good().raw(b"ext/link", T::Symlink, b"", b"/etc").gz(),
                Caps::default(),
                UnpackError::Link {
                    entry: "ext/link".into(),
                    kind: "symlink",
                    target: "/etc".into(),
                },
            ),
            (
                "symlink inside",
                good()
                    .raw(b"ext/link", T::Symlink, b"", b"extension.json")
                    .gz(),
                Caps::default(),
                UnpackError::Link {
                    entry: "ext/link".into(),
                    kind: "symlink",
                    target: "extension.json".into(),
                },
            ),
            (
                "hard link",
                good().raw(b"ext/hard", T::Link, b"", b"/etc/passwd").gz(),
                Caps::default(),
                UnpackError::Link {
                    entry: "ext/hard".into(),
                    kind: "hard link",
                    target: "/etc/passwd".into(),
                },
            ),
            (
                "char device",
                good().raw(b"ext/null", T::Char, b"", b"").gz(),
                Caps::default(),
                UnpackError::Special {
                    entry: "ext/null".into(),
                    kind: "a character device",
                },
            ),
            (
                "block device",
                good().raw(b"ext/sda", T::Block, b"", b"").gz(),
                Caps::default(),
                UnpackError::Special {
                    entry: "ext/sda".into(),
                    kind: "a block device",
                },
            ),
            (
                "fifo",
                good().raw(b"ext/pipe", T::Fifo, b"", b"").gz(),
                Caps::default(),
                UnpackError::Special {
                    entry: "ext/pipe".into(),
                    kind: "a FIFO",
                },
            ),
            (
                "too large",
                good().file("ext/big", &vec![7u8; 1024 * 1024 + 1]).gz(),
                small,
                UnpackError::TooLarge { limit: 1024 * 1024 },
            ),
            (
                "bomb",
                bomb.gz(),
                small,
                UnpackError::TooLarge { limit: 1024 * 1024 },
            ),
            (
                "too many entries",
                (0..9)
                    .fold(good(), |a, i| a.file(&format!("ext/f{i}"), b""))
                    .gz(),
                small,
                UnpackError::TooManyEntries { limit: 8 },
            ),
            (
                "two top folders",
                good().file("other/x", b"x").gz(),
                Caps::default(),
                UnpackError::TopFolders {
                    top: "ext".into(),
                    entry: "other/x".into(),
                },
            ),
            (
                "a file at the top",
                good().file("README", b"x").gz(),
                Caps::default(),
                UnpackError::TopFolders {
                    top: "ext".into(),
                    entry: "README".into(),
                },
            ),
            (
                "duplicate file",
                good().file("ext/extension.json", b"{\"evil\":1}").gz(),
                Caps::default(),
                UnpackError::Duplicate {
                    entry: "ext/extension.json".into(),
                },
            ),
            (
                "file over a folder",
                good().file("ext/bin", b"x").gz(),
                Caps::default(),
                UnpackError::Duplicate {
                    entry: "ext/bin".into(),
                },
            ),
            (
                "gnu long name with ..",
                long_name("ext/a/../../../evil")
                    .file("ext/innocent", b"x")
                    .gz(),
                Caps::default(),
                UnpackError::Parent {
                    entry: "ext/a/../../../evil".into(),
                },
            ),
            (
                "pax path with ..",
                good()
                    .raw(b"PaxHeader", T::XHeader, &pax("path=ext/../../evil"), b"")
                    .file("ext/innocent", b"x")
                    .gz(),
                Caps::default(),
                UnpackError::Parent {
                    entry: "ext/../../evil".into(),
                },
            ),
            (
                "pax absolute path",
                good()
                    .raw(b"PaxHeader", T::XHeader, &pax("path=/tmp/evil"), b"")
                    .file("ext/innocent", b"x")
                    .gz(),
                Caps::default(),
                UnpackError::Absolute {
                    entry: "/tmp/evil".into(),
                },
            ),
            (
                "not gzip",
                b"PK\x03\x04 a zip".to_vec(),
                Caps::default(),
                UnpackError::Corrupt("invalid gzip header".into()),
            ),
            (
                "empty",
                Hostile::default().gz(),
                Caps::default(),
                UnpackError::Empty,
            ),
        ];
        for (what, archive, caps, expected) in cases {
            let (result, dir) = run(&archive, caps);
            assert_eq!(result, Err(expected), "{what}");
            assert_eq!(everything(dir.path()), ["into"], "{what}: something stayed");
        }
    }

    #[test]
    fn a_refusal_message_names_the_entry_and_the_rule() {
        let (result, _dir) = run(&good().file("ext/../../evil", b"x").gz(), Caps::default());
        assert_eq!(
            result.unwrap_err().to_string(),
            "archive refused: entry `ext/../../evil` climbs out with `..`; an archive unpacks \
             only inside its own folder"
        );
    }

    #[test]
    fn a_folder_that_is_not_empty_is_not_unpacked_into() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x"), "x").unwrap();
        let err = unpack(&good().gz(), dir.path(), Caps::default()).unwrap_err();
        assert!(matches!(err, UnpackError::Io { .. }), "{err}");
        assert_eq!(everything(dir.path()), ["x"]);
    }

    #[test]
    fn an_entry_name_that_cannot_be_written_is_shown_escaped() {
        // Attack: a name too long to create, carrying an escape sequence
        // and a bidi override; the write fails and the error names it.
        let name = format!("ext/\u{1b}[2J\u{202e}{}", "a".repeat(300));
        let long = {
            let mut data = name.as_bytes().to_vec();
            data.push(0);
            good().raw(b"././@LongLink", tar::EntryType::GNULongName, &data, b"")
        };
        let (result, dir) = run(&long.file("ext/x", b"x").gz(), Caps::default());
        let message = result.unwrap_err().to_string();
        assert!(!crate::text::has_unsafe(&message), "{message:?}");
        assert!(
            message.contains("ext/\\u{1b}[2J\\u{202e}aaaa"),
            "{message:?}"
        );
        assert_eq!(everything(dir.path()), ["into"]);
    }
}
