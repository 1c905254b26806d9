//! Workspace trust: whether a repository's own extensions and data tools may
//! run, recorded by the user in `$ZOT_HOME/trust.json`.
//!
//! # Rules
//!
//! 1. **A workspace is inert until trusted.** Its extensions
//!    (`<ws>/.zot/extensions/*`) and data tools (`<ws>/.zot/tools`,
//!    `<ws>/.shiro/tools`) run only when [`assess`] says
//!    [`Standing::allows`]. Its refusal plugins and skills need no trust:
//!    a plugin can only block, a skill is text.
//! 2. **Trust names exact content.** A record binds the workspace's
//!    canonical path to the SHA-256 of every covered file ([`Contents`]).
//!    Any change to a covered file (one byte, a new file, a removed one, a
//!    symlink retargeted) makes the workspace untrusted again, and a record
//!    for one path never covers another.
//! 3. **What is covered is what can run or decide**: every entry under each
//!    extension folder `<ws>/.zot/extensions/<name>/` (one holding an
//!    `extension.json`, as discovery and zot find them), walked without
//!    following symlinks (a symlink is hashed as its link text, a FIFO,
//!    socket or device as its type, never read); the files a workspace
//!    manifest's `exec`, first argument or `wasm` name when they lie in the
//!    workspace outside the extension's folder; and every entry of
//!    `.zot/tools` and `.shiro/tools` (a symlink there is hashed as its text
//!    *and* the regular file it leads to, since the loader follows it).
//! 4. **Fail closed.** Past [`MAX_HASHED_BYTES`] or [`MAX_COVERED_FILES`],
//!    or when a covered file cannot be read, the workspace cannot be
//!    trusted, with a reason saying so. An unreadable or broken
//!    `trust.json` trusts nothing.
//! 5. **The policy decides first.** `workspace_trust: never` keeps every
//!    workspace inert, records or not; `always` (which only the system
//!    policy can set) trusts without a record.
//! 6. **Only the user writes records**, through [`TrustStore::save`], into
//!    `$ZOT_HOME`; nothing is ever read from the workspace to decide.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::libc;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::home::ZotHome;
use crate::manifest::{MANIFEST_FILE, Manifest};
use crate::policy::{Policy, WorkspaceTrust};

/// The most bytes of covered files hashed for one workspace: 256 MiB. A
/// workspace holding more cannot be trusted (the hash would take too long
/// to check at every start).
pub const MAX_HASHED_BYTES: u64 = 256 * 1024 * 1024;

/// The most covered entries in one workspace.
pub const MAX_COVERED_FILES: usize = 100_000;

/// The largest `trust.json` read.
const MAX_TRUST_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Where a workspace's extensions live, relative to it.
pub const EXTENSIONS_DIR: &str = ".zot/extensions";

/// Where a workspace's data tools live, relative to it.
pub const TOOL_DIRS: [&str; 2] = [".zot/tools", ".shiro/tools"];

/// The workspace's files could not be hashed, so it cannot be trusted.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// A covered file or folder could not be read.
    #[error("cannot read `{}`: {source}", path.display())]
    Read {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The covered files hold more than the cap.
    #[error("its extensions and data tools hold more than {}", size(*limit))]
    TooLarge {
        /// The cap, in bytes.
        limit: u64,
    },
    /// There are more covered entries than the cap.
    #[error("its extensions and data tools hold more than {limit} files")]
    TooMany {
        /// The cap.
        limit: usize,
    },
}

/// What one covered entry is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum EntryKind {
    /// A regular file, read and hashed.
    File {
        /// Its size.
        bytes: u64,
    },
    /// A symbolic link, hashed as its text (and, in a tools folder, the
    /// file it leads to).
    Symlink {
        /// The link text.
        target: PathBuf,
    },
    /// A FIFO, socket or device: never opened, hashed as its type.
    Special {
        /// `fifo`, `socket`, `block device`, `char device`.
        what: &'static str,
    },
}

/// One covered entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Covered {
    /// The path relative to the workspace, e.g. `.zot/extensions/x/run.sh`.
    pub path: PathBuf,
    /// What it is.
    #[serde(flatten)]
    pub kind: EntryKind,
}

/// Everything in a workspace that trust covers, hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contents {
    /// The workspace, canonical.
    pub workspace: PathBuf,
    /// The covered entries, sorted by path.
    pub covered: Vec<Covered>,
    /// The bytes read and hashed.
    pub bytes: u64,
    /// SHA-256 (lowercase hex) over every covered entry's path and content.
    pub sha256: String,
}

/// Caps on one scan.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    pub(crate) bytes: u64,
    pub(crate) files: usize,
}

impl Default for Caps {
    fn default() -> Self {
        Self {
            bytes: MAX_HASHED_BYTES,
            files: MAX_COVERED_FILES,
        }
    }
}

impl Contents {
    /// Hashes every covered entry of `workspace` (see the module rules).
    ///
    /// # Errors
    ///
    /// [`ScanError`] when a covered entry cannot be read or the caps are
    /// exceeded: the workspace then cannot be trusted.
    pub fn scan(workspace: &Path) -> Result<Self, ScanError> {
        Self::scan_with(workspace, Caps::default())
    }

    pub(crate) fn scan_with(workspace: &Path, caps: Caps) -> Result<Self, ScanError> {
        let workspace = std::fs::canonicalize(workspace).map_err(|source| ScanError::Read {
            path: workspace.to_owned(),
            source,
        })?;
        let mut scanner = Scanner {
            workspace: &workspace,
            caps,
            bytes: 0,
            visited: 0,
            entries: BTreeMap::new(),
        };
        scanner.extensions()?;
        for dir in TOOL_DIRS {
            scanner.tools(Path::new(dir))?;
        }
        let (entries, bytes) = (scanner.entries, scanner.bytes);
        let mut hasher = Sha256::new();
        hasher.update(b"zotbox-trust-v1");
        let mut covered = Vec::with_capacity(entries.len());
        for (path, (kind, digest)) in entries {
            let tag: u8 = match kind {
                EntryKind::File { .. } => 0,
                EntryKind::Symlink { .. } => 1,
                EntryKind::Special { .. } => 2,
            };
            let bytes = path.as_os_str().as_bytes();
            hasher.update([tag]);
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
            hasher.update(digest);
            covered.push(Covered { path, kind });
        }
        Ok(Self {
            workspace,
            covered,
            bytes,
            sha256: hex(&hasher.finalize()),
        })
    }

    /// Whether the workspace brings nothing that needs trust.
    pub fn is_empty(&self) -> bool {
        self.covered.is_empty()
    }
}

struct Scanner<'a> {
    workspace: &'a Path,
    caps: Caps,
    bytes: u64,
    // Entries met while walking extension folders, folders included.
    visited: usize,
    // relative path → (kind, digest of the content)
    entries: BTreeMap<PathBuf, (EntryKind, [u8; 32])>,
}

impl Scanner<'_> {
    fn add(&mut self, path: PathBuf, kind: EntryKind, digest: [u8; 32]) -> Result<(), ScanError> {
        self.entries.insert(path, (kind, digest));
        if self.entries.len() > self.caps.files {
            return Err(ScanError::TooMany {
                limit: self.caps.files,
            });
        }
        Ok(())
    }

    /// Every extension folder, as discovery (and zot) find them: the
    /// folders, or links to folders, directly in `.zot/extensions` that
    /// hold an `extension.json`. Anything else there runs nothing.
    fn extensions(&mut self) -> Result<(), ScanError> {
        let rel_root = Path::new(EXTENSIONS_DIR);
        for name in sorted_names(&self.workspace.join(rel_root)) {
            let rel = rel_root.join(&name);
            let path = self.workspace.join(&rel);
            // Discovery follows the folder itself (only that link), and so
            // does the hash, so the content loaded is the content hashed.
            let is_extension = std::fs::metadata(&path).is_ok_and(|m| m.is_dir())
                && path.join(MANIFEST_FILE).is_file();
            if !is_extension {
                continue;
            }
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_symlink()) {
                self.link(&path, rel.clone())?;
            }
            self.walk(&path, &rel)?;
            self.named_files(&path, &rel)?;
        }
        Ok(())
    }

    /// Every entry below `dir`, without following symlinks.
    fn walk(&mut self, dir: &Path, rel: &Path) -> Result<(), ScanError> {
        let mut pending = vec![(dir.to_owned(), rel.to_owned())];
        while let Some((dir, rel)) = pending.pop() {
            let entries = std::fs::read_dir(&dir).map_err(|source| ScanError::Read {
                path: dir.clone(),
                source,
            })?;
            for entry in entries {
                let entry = entry.map_err(|source| ScanError::Read {
                    path: dir.clone(),
                    source,
                })?;
                // Folders count too: a tree of empty folders is no cheaper to walk.
                self.visited += 1;
                if self.visited > self.caps.files {
                    return Err(ScanError::TooMany {
                        limit: self.caps.files,
                    });
                }
                let path = entry.path();
                let rel = rel.join(entry.file_name());
                let kind = entry.file_type().map_err(|source| ScanError::Read {
                    path: path.clone(),
                    source,
                })?;
                if kind.is_dir() {
                    pending.push((path, rel));
                } else if kind.is_symlink() {
                    self.link(&path, rel)?;
                } else if kind.is_file() {
                    self.file(&path, rel, false)?;
                } else {
                    self.special(&kind, rel)?;
                }
            }
        }
        Ok(())
    }

    /// The files a manifest makes zot or zotbox run that lie in the
    /// workspace outside the extension's folder (`"exec": "../../../bin/x"`,
    /// `"args": ["../../../scripts/x.py"]`, an `exec` through a symlink
    /// leading out): editing them changes what runs as surely as editing
    /// the folder. Those are the `exec` when it is a path, the first
    /// argument that is not an option (an interpreter's script), and the
    /// `wasm` file; later arguments are often data the extension writes.
    fn named_files(&mut self, dir: &Path, rel: &Path) -> Result<(), ScanError> {
        let Ok(manifest) = Manifest::load(&dir.join(MANIFEST_FILE)) else {
            // An invalid manifest runs nothing; its text is hashed above.
            return Ok(());
        };
        let Ok(folder) = std::fs::canonicalize(dir) else {
            return Ok(());
        };
        let mut named: Vec<PathBuf> = Vec::new();
        if let Some(exec) = &manifest.raw.exec
            && exec.contains('/')
        {
            named.push(dir.join(exec));
        }
        if let Some(script) = manifest.raw.args.iter().find(|a| !a.starts_with('-')) {
            named.push(dir.join(script));
        }
        if let crate::manifest::Program::Wasm { path } = &manifest.program {
            named.push(path.clone());
        }
        for candidate in named {
            let Ok(real) = std::fs::canonicalize(&candidate) else {
                continue;
            };
            if real.starts_with(&folder) || !real.is_file() {
                continue;
            }
            let Ok(inside) = real.strip_prefix(self.workspace) else {
                // Outside the workspace: not the workspace's content.
                continue;
            };
            let inside = inside.to_owned();
            if !self.entries.contains_key(&inside) {
                tracing::debug!(
                    "`{}` names `{}`: covered by trust",
                    rel.display(),
                    inside.display()
                );
                self.file(&real, inside, true)?;
            }
        }
        Ok(())
    }

    /// The entries directly in a tools folder, as the loader reads them
    /// (following a symlink to a regular file).
    fn tools(&mut self, rel_root: &Path) -> Result<(), ScanError> {
        for name in sorted_names(&self.workspace.join(rel_root)) {
            let rel = rel_root.join(&name);
            let path = self.workspace.join(&rel);
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            let kind = meta.file_type();
            if kind.is_symlink() {
                // The link text and what the loader reads through it.
                let target = read_link(&path)?;
                let mut hasher = Sha256::new();
                hasher.update(target.as_os_str().as_bytes());
                if std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
                    match self.read(&path, true)? {
                        Digested::File { digest, .. } => hasher.update(digest),
                        Digested::Special(what) => hasher.update(what.as_bytes()),
                    }
                }
                self.add(rel, EntryKind::Symlink { target }, hasher.finalize().into())?;
            } else if kind.is_file() {
                self.file(&path, rel, false)?;
            } else if !kind.is_dir() {
                self.special(&kind, rel)?;
            }
        }
        Ok(())
    }

    fn link(&mut self, path: &Path, rel: PathBuf) -> Result<(), ScanError> {
        let target = read_link(path)?;
        let digest = Sha256::digest(target.as_os_str().as_bytes()).into();
        self.add(rel, EntryKind::Symlink { target }, digest)
    }

    fn special(&mut self, kind: &std::fs::FileType, rel: PathBuf) -> Result<(), ScanError> {
        let what = special_kind(kind);
        let digest = Sha256::digest(what.as_bytes()).into();
        self.add(rel, EntryKind::Special { what }, digest)
    }

    fn file(&mut self, path: &Path, rel: PathBuf, follow: bool) -> Result<(), ScanError> {
        match self.read(path, follow)? {
            Digested::File { digest, bytes } => self.add(rel, EntryKind::File { bytes }, digest),
            Digested::Special(what) => {
                let digest = Sha256::digest(what.as_bytes()).into();
                self.add(rel, EntryKind::Special { what }, digest)
            }
        }
    }

    /// Hashes one regular file, within the byte cap. Opened non-blocking
    /// (a FIFO swapped in cannot hang the scan) and, unless `follow`,
    /// without following a symlink swapped in; anything but a regular file
    /// once opened is reported by its type, unread.
    fn read(&mut self, path: &Path, follow: bool) -> Result<Digested, ScanError> {
        let read_err = |source| ScanError::Read {
            path: path.to_owned(),
            source,
        };
        let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
        if !follow {
            flags |= libc::O_NOFOLLOW;
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(path)
            .map_err(read_err)?;
        let meta = file.metadata().map_err(read_err)?;
        if !meta.is_file() {
            return Ok(Digested::Special(special_kind(&meta.file_type())));
        }
        let budget = self.caps.bytes.saturating_sub(self.bytes);
        let mut hasher = Sha256::new();
        let mut reader = file.take(budget.saturating_add(1));
        let mut chunk = vec![0u8; 64 * 1024];
        let mut read: u64 = 0;
        loop {
            let n = reader.read(&mut chunk).map_err(read_err)?;
            if n == 0 {
                break;
            }
            read += n as u64;
            if read > budget {
                return Err(ScanError::TooLarge {
                    limit: self.caps.bytes,
                });
            }
            hasher.update(&chunk[..n]);
        }
        self.bytes += read;
        Ok(Digested::File {
            digest: hasher.finalize().into(),
            bytes: read,
        })
    }
}

/// What reading one covered path found.
enum Digested {
    File { digest: [u8; 32], bytes: u64 },
    Special(&'static str),
}

fn read_link(path: &Path) -> Result<PathBuf, ScanError> {
    std::fs::read_link(path).map_err(|source| ScanError::Read {
        path: path.to_owned(),
        source,
    })
}

fn special_kind(kind: &std::fs::FileType) -> &'static str {
    if kind.is_fifo() {
        "fifo"
    } else if kind.is_socket() {
        "socket"
    } else if kind.is_block_device() {
        "block device"
    } else if kind.is_char_device() {
        "char device"
    } else {
        "special file"
    }
}

/// The entry names of `dir` (followed if it is a link), sorted; none when
/// it cannot be read: discovery and the loaders then find nothing there
/// either.
fn sorted_names(dir: &Path) -> Vec<std::ffi::OsString> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.file_name())
        .collect();
    names.sort();
    names
}

/// A size for people: `256 MiB`, `10 bytes`.
fn size(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

// ---------------------------------------------------------------------------
// The records.

/// The trust records could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// `trust.json` could not be read.
    #[error("cannot read `{}`: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `trust.json` is not what zotbox writes.
    #[error("`{}`: {detail}; fix it or remove it (every workspace is then untrusted)", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong, with the field.
        detail: String,
    },
    /// `trust.json` could not be written.
    #[error("cannot write `{}`: {source}", path.display())]
    Write {
        /// The file (or its folder).
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The workspace's path is not UTF-8, so no record can name it.
    #[error("workspace `{}`: its path is not UTF-8, so trust cannot be recorded for it", crate::text::Shown(&path.to_string_lossy()))]
    NotUtf8 {
        /// The workspace.
        path: PathBuf,
    },
    /// The workspace's files could not be hashed.
    #[error("workspace `{}` cannot be trusted: {source}", crate::text::Shown(&path.to_string_lossy()))]
    Scan {
        /// The workspace.
        path: PathBuf,
        /// Why.
        source: ScanError,
    },
}

/// One trusted workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct Record {
    /// [`Contents::sha256`] of what the user trusted.
    pub sha256: String,
    /// When: RFC 3339, UTC.
    #[serde(default)]
    pub trusted_at: String,
    /// How many entries it covered then.
    #[serde(default)]
    pub files: usize,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
struct TrustFile {
    #[serde(default)]
    workspaces: BTreeMap<String, Record>,
}

/// The user's trust records, as stored in `$ZOT_HOME/trust.json`:
///
/// ```json
/// { "workspaces": { "/home/me/src/app": { "sha256": "…", "trusted_at": "…", "files": 3 } } }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustStore {
    path: PathBuf,
    workspaces: BTreeMap<String, Record>,
}

impl TrustStore {
    /// Reads the records of `home`; a missing file holds none.
    ///
    /// # Errors
    ///
    /// [`TrustError`] when the file cannot be read or parsed: the caller
    /// then trusts no workspace.
    pub fn load(home: &ZotHome) -> Result<Self, TrustError> {
        let path = home.trust_file();
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Self {
                    path,
                    workspaces: BTreeMap::new(),
                });
            }
            Err(source) => return Err(TrustError::Read { path, source }),
        };
        let mut bytes = Vec::new();
        file.take(MAX_TRUST_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| TrustError::Read {
                path: path.clone(),
                source,
            })?;
        let parse_err = |detail: String| TrustError::Parse {
            path: path.clone(),
            detail,
        };
        if bytes.len() as u64 > MAX_TRUST_FILE_BYTES {
            return Err(parse_err(format!(
                "is larger than {MAX_TRUST_FILE_BYTES} bytes"
            )));
        }
        let text = String::from_utf8(bytes).map_err(|_| parse_err("is not UTF-8".to_owned()))?;
        let parsed = crate::user_json::parse::<TrustFile>(&text).map_err(parse_err)?;
        for key in parsed.unknown_keys {
            tracing::warn!("`{}`: unknown key `{key}` ignored", path.display());
        }
        Ok(Self {
            path,
            workspaces: parsed.value.workspaces,
        })
    }

    /// The file these records are saved to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The record of `workspace` (a canonical path), if any.
    pub fn record(&self, workspace: &Path) -> Option<&Record> {
        self.workspaces.get(workspace.to_str()?)
    }

    /// Every record, by workspace path.
    pub fn records(&self) -> impl Iterator<Item = (&str, &Record)> {
        self.workspaces.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Trusts `contents` (replacing an earlier record of its workspace).
    /// Call [`TrustStore::save`] to keep it.
    ///
    /// # Errors
    ///
    /// [`TrustError::NotUtf8`] for a workspace path that is not UTF-8.
    pub fn trust(&mut self, contents: &Contents) -> Result<&Record, TrustError> {
        let key = contents
            .workspace
            .to_str()
            .ok_or_else(|| TrustError::NotUtf8 {
                path: contents.workspace.clone(),
            })?
            .to_owned();
        let record = Record {
            sha256: contents.sha256.clone(),
            trusted_at: crate::data::approval::rfc3339_now(),
            files: contents.covered.len(),
        };
        self.workspaces.insert(key.clone(), record);
        self.workspaces
            .get(&key)
            .ok_or_else(|| TrustError::NotUtf8 {
                path: contents.workspace.clone(),
            })
    }

    /// Forgets `workspace`; `false` when it had no record. Call
    /// [`TrustStore::save`] to keep it.
    pub fn revoke(&mut self, workspace: &Path) -> bool {
        workspace
            .to_str()
            .is_some_and(|key| self.workspaces.remove(key).is_some())
    }

    /// Writes the records atomically: a temporary file in the same folder,
    /// then renamed over the old one.
    ///
    /// # Errors
    ///
    /// [`TrustError::Write`] naming the path.
    pub fn save(&self) -> Result<(), TrustError> {
        let write_err = |path: &Path| {
            let path = path.to_owned();
            move |source| TrustError::Write { path, source }
        };
        let dir = self
            .path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        std::fs::create_dir_all(&dir).map_err(write_err(&dir))?;
        let file = TrustFile {
            workspaces: self.workspaces.clone(),
        };
        let mut text = serde_json::to_string_pretty(&file)
            .map_err(|err| write_err(&self.path)(std::io::Error::other(err)))?;
        text.push('\n');
        let mut tmp = tempfile::NamedTempFile::new_in(&dir).map_err(write_err(&dir))?;
        std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(write_err(&self.path))?;
        tmp.as_file().sync_all().map_err(write_err(&self.path))?;
        tmp.persist(&self.path)
            .map_err(|err| write_err(&self.path)(err.error))?;
        Ok(())
    }
}

/// Trusts `workspace` as it is now, for the user: hashes it, records it in
/// `home`'s `trust.json`. What `zotbox trust --yes` does once it has shown
/// the contents; returns what was trusted.
///
/// # Errors
///
/// [`TrustError`] when the workspace cannot be hashed or the records cannot
/// be read or written.
pub fn trust_workspace(home: &ZotHome, workspace: &Path) -> Result<Contents, TrustError> {
    let contents = Contents::scan(workspace).map_err(|source| TrustError::Scan {
        path: workspace.to_owned(),
        source,
    })?;
    let mut store = TrustStore::load(home)?;
    store.trust(&contents)?;
    store.save()?;
    Ok(contents)
}

// ---------------------------------------------------------------------------
// The decision.

/// Why a workspace's extensions and data tools do not run. Displayed as the
/// end of a sentence about the workspace: ``tool `x` comes from the
/// workspace `/w`, <this>``.
#[derive(Debug, thiserror::Error)]
pub enum Untrusted {
    /// No record for this workspace.
    #[error("which you have not trusted: run `zotbox trust` to review and trust it")]
    NotTrusted,
    /// A record, for other content.
    #[error(
        "which changed since you trusted it on {at}: run `zotbox trust` to review and trust it"
    )]
    Changed {
        /// When the earlier content was trusted.
        at: String,
    },
    /// The policy keeps every workspace inert.
    #[error("and `workspace_trust` is `never` in `{}`: workspace extensions and tools do not run", by.display())]
    Never {
        /// The policy file that says so.
        by: PathBuf,
    },
    /// The workspace's files cannot be hashed.
    #[error("which cannot be trusted: {0}")]
    Unhashable(ScanError),
    /// The records cannot be read.
    #[error("whose trust cannot be checked: {0}")]
    Store(TrustError),
}

/// Where a workspace stands.
#[derive(Debug)]
pub enum Standing {
    /// It brings no extension and no data tool.
    NothingToTrust,
    /// The user trusted exactly this content.
    Trusted {
        /// When.
        at: String,
    },
    /// The system policy trusts every workspace (`workspace_trust: always`).
    TrustedByPolicy {
        /// The policy file.
        by: PathBuf,
    },
    /// Its extensions and data tools stay off.
    Untrusted(Untrusted),
}

impl Standing {
    /// Whether the workspace's extensions and data tools may run.
    pub fn allows(&self) -> bool {
        !matches!(self, Self::Untrusted(_))
    }

    /// The standing in a few words, for `doctor`: ``trusted on …``,
    /// ``not trusted: …``.
    pub fn summary(&self) -> String {
        match self {
            Self::NothingToTrust => "nothing to trust (no extensions or data tools)".to_owned(),
            Self::Trusted { at } => format!("trusted on {at}"),
            Self::TrustedByPolicy { by } => {
                format!("trusted by `workspace_trust: always` in `{}`", by.display())
            }
            Self::Untrusted(Untrusted::Never { by }) => {
                format!("off by `workspace_trust: never` in `{}`", by.display())
            }
            Self::Untrusted(Untrusted::NotTrusted) => {
                "not trusted: run `zotbox trust` to review and trust it".to_owned()
            }
            Self::Untrusted(Untrusted::Changed { at }) => format!(
                "changed since you trusted it on {at}: run `zotbox trust` to review and trust it"
            ),
            Self::Untrusted(Untrusted::Unhashable(err)) => format!("cannot be trusted: {err}"),
            Self::Untrusted(Untrusted::Store(err)) => format!("cannot be checked: {err}"),
        }
    }

    /// Why not, when they may not.
    pub fn untrusted(&self) -> Option<&Untrusted> {
        match self {
            Self::Untrusted(why) => Some(why),
            _ => None,
        }
    }
}

/// A workspace and where it stands.
#[derive(Debug)]
pub struct Assessment {
    /// The workspace, canonical when it exists.
    pub workspace: PathBuf,
    /// Where it stands.
    pub standing: Standing,
}

impl Assessment {
    /// ``comes from the workspace `/w`, which …``: why something of this
    /// workspace does not run; `None` when it may.
    pub fn refusal(&self) -> Option<String> {
        self.standing.untrusted().map(|why| {
            format!(
                "comes from the workspace `{}`, {why}",
                crate::text::Shown(&self.workspace.to_string_lossy())
            )
        })
    }
}

/// Where `workspace` stands under `policy` and the records in `home`.
/// Reads (hashes) the workspace's covered files; starts nothing.
pub fn assess(policy: &Policy, home: &ZotHome, workspace: &Path) -> Assessment {
    let workspace = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_owned());
    let (setting, by) = policy.workspace_trust();
    let by = by.map(Path::to_path_buf).unwrap_or_default();
    let standing = match setting {
        WorkspaceTrust::Never => Standing::Untrusted(Untrusted::Never { by }),
        WorkspaceTrust::Always => Standing::TrustedByPolicy { by },
        WorkspaceTrust::Ask => match Contents::scan(&workspace) {
            Err(err) => Standing::Untrusted(Untrusted::Unhashable(err)),
            Ok(contents) if contents.is_empty() => Standing::NothingToTrust,
            Ok(contents) => match TrustStore::load(home) {
                Err(err) => Standing::Untrusted(Untrusted::Store(err)),
                Ok(store) => match store.record(&workspace) {
                    None => Standing::Untrusted(Untrusted::NotTrusted),
                    Some(record) if record.sha256 == contents.sha256 => Standing::Trusted {
                        at: record.trusted_at.clone(),
                    },
                    Some(record) => Standing::Untrusted(Untrusted::Changed {
                        at: record.trusted_at.clone(),
                    }),
                },
            },
        },
    };
    Assessment {
        workspace,
        standing,
    }
}

/// The workspace whose `.zot/extensions/` holds the extension folder `dir`
/// (its `../../..`), if any, as `zotbox run` sees it: the folder's real
/// path, and the path zot started it in (`$PWD`) when that names the same
/// folder. The user's own `$ZOT_HOME/extensions` is no workspace's.
pub fn workspace_of_extension(dir: &Path, home: &ZotHome) -> Option<PathBuf> {
    let real = std::fs::canonicalize(dir).ok()?;
    let mut candidates = vec![real.clone()];
    if dir.is_relative()
        && let Some(pwd) = std::env::var_os("PWD").map(PathBuf::from)
        && pwd.is_absolute()
    {
        let logical = normalise(&pwd.join(dir));
        if std::fs::canonicalize(&logical).is_ok_and(|p| p == real) {
            candidates.push(logical);
        }
    }
    let user_dir = home.extensions_dir();
    let user_real = std::fs::canonicalize(&user_dir).ok();
    candidates.into_iter().find_map(|folder| {
        let extensions = folder.parent()?;
        if extensions == user_dir || Some(extensions) == user_real.as_deref() {
            return None;
        }
        let dot_zot = extensions.parent()?;
        (extensions.file_name()? == "extensions" && dot_zot.file_name()? == ".zot")
            .then(|| dot_zot.parent().map(Path::to_path_buf))
            .flatten()
    })
}

/// `path` with `.` and `..` components resolved lexically.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Refuses the extension folder `dir` when it lies in some workspace's
/// `.zot/extensions/` and that workspace may not run (what `zotbox run`
/// checks before it starts anything).
///
/// # Errors
///
/// The refusal, ``comes from the workspace `/w`, which …``.
pub fn check_extension_dir(dir: &Path, home: &ZotHome, policy: &Policy) -> Result<(), String> {
    let Some(workspace) = workspace_of_extension(dir, home) else {
        return Ok(());
    };
    match assess(policy, home, &workspace).refusal() {
        Some(refusal) => Err(refusal),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    struct Fixture {
        _tmp: tempfile::TempDir,
        ws: PathBuf,
        home: ZotHome,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = std::fs::canonicalize(tmp.path()).unwrap_or_else(|e| panic!("{e}"));
        let ws = root.join("ws");
        let ext = ws.join(".zot/extensions/helper");
        std::fs::create_dir_all(&ext).unwrap_or_else(|e| panic!("{e}"));
        write(
            &ext.join("extension.json"),
            r#"{"name":"helper","exec":"sh","args":["-c","./run.sh"]}"#,
        );
        write(&ext.join("run.sh"), "touch marker\n");
        Fixture {
            _tmp: tmp,
            ws,
            home: ZotHome::new(root.join("home")),
        }
    }

    fn write(path: &Path, text: &str) {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::write(path, text).unwrap_or_else(|e| panic!("{e}"));
    }

    fn sha(ws: &Path) -> String {
        Contents::scan(ws).unwrap_or_else(|e| panic!("{e}")).sha256
    }

    fn standing(f: &Fixture) -> Standing {
        assess(&Policy::permissive(), &f.home, &f.ws).standing
    }

    #[test]
    fn any_change_to_what_can_run_changes_the_hash() {
        let f = fixture();
        let ext = f.ws.join(".zot/extensions/helper");
        let base = sha(&f.ws);
        // Each case edits the workspace, checks the hash moved, and undoes it.
        type Edit = Box<dyn Fn(&Path)>;
        let cases: Vec<(&str, Edit, Edit)> = vec![
            (
                "one byte of the script",
                Box::new(|e| write(&e.join("run.sh"), "touch markes\n")),
                Box::new(|e| write(&e.join("run.sh"), "touch marker\n")),
            ),
            (
                "a new file deep inside",
                Box::new(|e| write(&e.join("lib/deep/x.py"), "")),
                Box::new(|e| {
                    std::fs::remove_dir_all(e.join("lib")).unwrap_or_else(|e| panic!("{e}"))
                }),
            ),
            (
                "a symlink",
                Box::new(|e| symlink("/etc/passwd", e.join("l")).unwrap_or_else(|e| panic!("{e}"))),
                Box::new(|e| std::fs::remove_file(e.join("l")).unwrap_or_else(|e| panic!("{e}"))),
            ),
            (
                "a data tool",
                Box::new(|e| write(&e.join("../../../.shiro/tools/t.json"), "{}")),
                Box::new(|e| {
                    std::fs::remove_file(e.join("../../../.shiro/tools/t.json"))
                        .unwrap_or_else(|e| panic!("{e}"))
                }),
            ),
        ];
        for (what, edit, undo) in cases {
            edit(&ext);
            assert_ne!(sha(&f.ws), base, "{what}");
            undo(&ext);
            assert_eq!(sha(&f.ws), base, "{what} undone");
        }
        // Plugins and skills are not covered: they need no trust.
        write(&f.ws.join(".zot/plugins/p.json"), "{}");
        write(&f.ws.join(".zot/skills/s.md"), "x");
        assert_eq!(sha(&f.ws), base);
    }

    #[test]
    fn links_are_hashed_as_text_and_never_followed_out_of_an_extension() {
        let f = fixture();
        let ext = f.ws.join(".zot/extensions/helper");
        let outside = f.ws.parent().map(|p| p.join("outside")).unwrap_or_default();
        write(&outside.join("big"), "secret");
        symlink(&outside, ext.join("out")).unwrap_or_else(|e| panic!("{e}"));
        let before = Contents::scan(&f.ws).unwrap_or_else(|e| panic!("{e}"));
        // The target outside is neither listed nor read.
        assert!(
            before.covered.iter().all(|c| !c.path.ends_with("big")),
            "{:?}",
            before.covered
        );
        write(&outside.join("big"), "changed");
        assert_eq!(sha(&f.ws), before.sha256);
        // A FIFO is recorded by its type, never opened (it would block).
        // nix's `mkfifo` needs its `fs` feature, which the crate does not enable.
        let made = std::process::Command::new("mkfifo")
            .arg(ext.join("pipe"))
            .status()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(made.success());
        let with_fifo = Contents::scan(&f.ws).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            with_fifo
                .covered
                .iter()
                .any(|c| c.path.ends_with("pipe") && c.kind == EntryKind::Special { what: "fifo" })
        );
    }

    #[test]
    fn a_script_named_outside_the_folder_or_a_hardlink_is_covered_by_content() {
        let f = fixture();
        let ext = f.ws.join(".zot/extensions/helper");
        write(&f.ws.join("scripts/run.py"), "print(1)\n");
        write(
            &ext.join("extension.json"),
            r#"{"name":"helper","exec":"python3","args":["../../../scripts/run.py"]}"#,
        );
        let base = sha(&f.ws);
        write(&f.ws.join("scripts/run.py"), "print(2)\n");
        assert_ne!(sha(&f.ws), base, "the named script is covered");
        // A hardlink inside the folder is a file like any other: editing
        // it through the other name changes the hash.
        std::fs::hard_link(f.ws.join("scripts/run.py"), ext.join("hard.py"))
            .unwrap_or_else(|e| panic!("{e}"));
        let linked = sha(&f.ws);
        write(&f.ws.join("scripts/run.py"), "print(3)\n");
        assert_ne!(sha(&f.ws), linked);
    }

    #[test]
    fn only_folders_holding_a_manifest_are_walked_and_folders_count_against_the_cap() {
        let f = fixture();
        let base = Contents::scan(&f.ws).unwrap_or_else(|e| panic!("{e}"));
        // Attack: a link to `/` in `.zot/extensions` would walk the disk;
        // it holds no `extension.json`, so nothing would run from it.
        symlink("/", f.ws.join(".zot/extensions/root")).unwrap_or_else(|e| panic!("{e}"));
        write(&f.ws.join(".zot/extensions/notes.txt"), "not an extension");
        assert_eq!(sha(&f.ws), base.sha256);
        // Attack: a deep tree of empty folders inside a real extension.
        let mut deep = f.ws.join(".zot/extensions/helper");
        for _ in 0..20 {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap_or_else(|e| panic!("{e}"));
        let caps = Caps {
            bytes: 1 << 20,
            files: 10,
        };
        let err = Contents::scan_with(&f.ws, caps)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(err, "its extensions and data tools hold more than 10 files");
    }

    #[test]
    fn a_workspace_past_the_caps_cannot_be_hashed() {
        let f = fixture();
        let caps = Caps {
            bytes: 10,
            files: 100,
        };
        let err = Contents::scan_with(&f.ws, caps)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(err, "its extensions and data tools hold more than 10 bytes");
        let caps = Caps {
            bytes: 1 << 20,
            files: 1,
        };
        let err = Contents::scan_with(&f.ws, caps)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(err, "its extensions and data tools hold more than 1 files");
    }

    #[test]
    fn trust_is_bound_to_the_path_and_the_content() {
        let f = fixture();
        assert!(matches!(
            standing(&f),
            Standing::Untrusted(Untrusted::NotTrusted)
        ));
        trust_workspace(&f.home, &f.ws).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(standing(&f), Standing::Trusted { .. }));
        // The same content at another path is not trusted.
        let twin = f.ws.with_file_name("twin");
        std::fs::create_dir_all(twin.join(".zot/extensions/helper"))
            .unwrap_or_else(|e| panic!("{e}"));
        for file in ["extension.json", "run.sh"] {
            std::fs::copy(
                f.ws.join(".zot/extensions/helper").join(file),
                twin.join(".zot/extensions/helper").join(file),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        }
        let twin_standing = assess(&Policy::permissive(), &f.home, &twin).standing;
        assert!(matches!(
            twin_standing,
            Standing::Untrusted(Untrusted::NotTrusted)
        ));
        // One byte changed: untrusted again, saying since when.
        write(
            &f.ws.join(".zot/extensions/helper/run.sh"),
            "touch markes\n",
        );
        let Standing::Untrusted(why @ Untrusted::Changed { .. }) = standing(&f) else {
            panic!("not changed: {:?}", standing(&f));
        };
        assert!(
            why.to_string()
                .starts_with("which changed since you trusted it on "),
            "{why}"
        );
        // Revoked: not trusted; only trust.json is left in the home.
        let mut store = TrustStore::load(&f.home).unwrap_or_else(|e| panic!("{e}"));
        assert!(store.revoke(&f.ws));
        assert!(!store.revoke(&f.ws));
        store.save().unwrap_or_else(|e| panic!("{e}"));
        let files: Vec<_> = std::fs::read_dir(f.home.root())
            .unwrap_or_else(|e| panic!("{e}"))
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        assert_eq!(files, vec![std::ffi::OsString::from("trust.json")]);
    }

    #[test]
    fn an_empty_workspace_needs_nothing_and_a_broken_record_trusts_nothing() {
        let f = fixture();
        let empty = f.ws.with_file_name("empty");
        std::fs::create_dir_all(empty.join(".zot/skills")).unwrap_or_else(|e| panic!("{e}"));
        let standing = assess(&Policy::permissive(), &f.home, &empty).standing;
        assert!(matches!(standing, Standing::NothingToTrust));
        write(
            &f.home.trust_file(),
            r#"{"workspaces":{"/x":{"sha256":1}}}"#,
        );
        let Standing::Untrusted(why) = self::standing(&f) else {
            panic!("trusted with a broken file");
        };
        let why = why.to_string();
        assert!(
            why.starts_with("whose trust cannot be checked: `")
                && why.contains("field `workspaces./x.sha256`"),
            "{why}"
        );
    }

    #[test]
    fn the_policy_decides_before_any_record() {
        let f = fixture();
        trust_workspace(&f.home, &f.ws).unwrap_or_else(|e| panic!("{e}"));
        let layer = |scope, path: &str, json: &str| crate::policy::Layer {
            scope,
            path: PathBuf::from(path),
            file: serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}")),
        };
        use crate::policy::Scope::{System, User};
        let cases = [
            // The user's `never` beats their own record.
            (
                vec![layer(User, "/u", r#"{"workspace_trust":"never"}"#)],
                false,
            ),
            // The system's `always` needs no record, even for an untrusted twin.
            (
                vec![layer(System, "/s", r#"{"workspace_trust":"always"}"#)],
                true,
            ),
        ];
        for (layers, allows) in cases {
            let policy = Policy::from_layers(layers);
            assert_eq!(assess(&policy, &f.home, &f.ws).standing.allows(), allows);
        }
        let never = Policy::from_layers(vec![layer(User, "/u", r#"{"workspace_trust":"never"}"#)]);
        assert_eq!(
            assess(&never, &f.home, &f.ws).refusal().unwrap_or_default(),
            format!(
                "comes from the workspace `{}`, and `workspace_trust` is `never` in `/u`: \
                 workspace extensions and tools do not run",
                f.ws.display()
            )
        );
    }

    #[test]
    fn zotbox_run_finds_the_workspace_of_a_project_extension_only() {
        let f = fixture();
        let ext = f.ws.join(".zot/extensions/helper");
        assert_eq!(workspace_of_extension(&ext, &f.home), Some(f.ws.clone()));
        let user = f.home.extensions_dir().join("helper");
        std::fs::create_dir_all(&user).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(workspace_of_extension(&user, &f.home), None);
        // A home at `<ws>/.zot` is the user's own, whatever its path says.
        let home_in_ws = ZotHome::new(f.ws.join(".zot"));
        assert_eq!(workspace_of_extension(&ext, &home_in_ws), None);
        let elsewhere = f.ws.join("tools/x");
        std::fs::create_dir_all(&elsewhere).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(workspace_of_extension(&elsewhere, &f.home), None);
        let refusal = check_extension_dir(&ext, &f.home, &Policy::permissive())
            .err()
            .unwrap_or_default();
        assert_eq!(
            refusal,
            format!(
                "comes from the workspace `{}`, which you have not trusted: run `zotbox trust` \
                 to review and trust it",
                f.ws.display()
            )
        );
    }
}
