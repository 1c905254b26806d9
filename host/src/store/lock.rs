//! The lockfile: what each installed extension was installed from, and the
//! digest of the files that landed, re-checked at every start.
//!
//! # Rules
//!
//! 1. **Every install is recorded** in `$ZOT_HOME/zotbox.lock` (JSON,
//!    written atomically), keyed by the installed folder's canonical path:
//!    name, version, scope (user or project), source (text that parses
//!    back to it), the archive's SHA-256 or the git commit, the publisher
//!    key when there is one, the capabilities granted at install, and the
//!    [`Tree`] of the installed folder. `ext remove` drops the entry.
//! 2. **The tree covers everything in the folder**: every entry's relative
//!    path, kind, size, execute bit and SHA-256 (a link as its text, a FIFO
//!    or device as its type), by the same scanner and caps as workspace
//!    trust (`store::trust::scan_folder`). Nothing that could run is left out.
//! 3. **Every start re-checks** ([`check_at_load`], called by `zotbox run`
//!    and by the host before an extension starts): a folder with a lock
//!    entry whose tree differs is refused, naming the first file that
//!    differs. An extension without an entry (installed before the lock
//!    existed, or loaded from a folder by path) is not locked and starts. A
//!    lockfile that cannot be read refuses every start until it is fixed or
//!    removed (fail closed).
//! 4. **A project lock only narrows.** `<ws>/.zot/zotbox.lock` is looked
//!    at only when the workspace is trusted (`store::trust`): until then
//!    not even a link, folder or FIFO there refuses anything. Either lock
//!    is opened without following a link or blocking, and must be a
//!    regular file of at most 16 MiB. Its entries, by
//!    extension name, may pin `tree`, `sha256`, `commit` or refuse
//!    versions (`refuse_versions`); an installed extension that does not
//!    match is refused at start, naming the project lock. Nothing else in
//!    it is read: it cannot grant capabilities, approve, install or
//!    un-refuse anything, and an entry for an extension that is not
//!    installed does nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::source::Provenance;
use super::trust::{EntryKind, ScanError};
use crate::data::DataSearch;
use crate::home::ZotHome;
use crate::manifest::{MANIFEST_FILE, Manifest};
use crate::policy::Policy;
use crate::text::Shown;
use crate::text::hex;
use crate::user_file::Links;

/// Where a workspace's own lock lives, relative to it.
pub const PROJECT_LOCK: &str = ".zot/zotbox.lock";
/// The largest lockfile read.
const MAX_LOCK_BYTES: u64 = 16 * 1024 * 1024;

/// The lock could not be read or written, or an extension does not match it.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The lockfile could not be read.
    #[error("cannot read `{}`: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The lockfile is not what zotbox writes.
    #[error(
        "`{}`: {detail}; fix it or remove it (then reinstall your extensions to lock them again)",
        path.display()
    )]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The lockfile could not be written.
    #[error("cannot write `{}`: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The installed folder could not be hashed.
    #[error("extension `{}` cannot be checked against the lock: {source}", Shown(.name))]
    Scan {
        /// The extension.
        name: String,
        /// Why.
        source: ScanError,
    },
    /// Rule 3: the installed files are not the locked ones.
    #[error(
        "extension `{}` changed since it was installed (`{}` differs from the lock); reinstall \
         it or run `zotbox ext verify`",
        Shown(.name),
        Shown(.path)
    )]
    Changed {
        /// The extension.
        name: String,
        /// The first file that differs, relative to its folder.
        path: String,
    },
    /// Rule 3: the manifest a start holds is not the installed one (it
    /// was parsed before a reinstall or an edit that the lock followed).
    #[error(
        "extension `{}`: its `extension.json` changed since it was read (reinstalled or \
         edited); start it again to load what is installed",
        Shown(.name)
    )]
    Stale {
        /// The extension.
        name: String,
    },
    /// Rule 4: a project lock's pin is not met.
    #[error(
        "extension `{}` refused by the project lock `{}`: {reason}; install the version it pins, \
         or change the project lock",
        Shown(.name),
        Shown(&.lock.display().to_string())
    )]
    Pinned {
        /// The extension.
        name: String,
        /// The project lock.
        lock: PathBuf,
        /// Which pin, and what was found.
        reason: String,
    },
}

/// One entry of an installed folder, as locked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct FileRecord {
    /// `file`, `symlink` or `special`.
    pub kind: String,
    /// Its size (a file's bytes; 0 otherwise).
    #[serde(default)]
    pub bytes: u64,
    /// A regular file with an execute bit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub executable: bool,
    /// SHA-256 of its content (a link's text, a special file's type).
    pub sha256: String,
}

/// The digest of an installed folder (rule 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    /// `sha256:` and the SHA-256 over every entry's record, in path order.
    pub digest: String,
    /// Every entry, by relative path.
    pub files: BTreeMap<String, FileRecord>,
}

impl Tree {
    /// Hashes the folder `dir`.
    ///
    /// # Errors
    ///
    /// [`ScanError`] when an entry cannot be read or the caps are passed.
    pub fn of(dir: &Path) -> Result<Self, ScanError> {
        let mut files = BTreeMap::new();
        for entry in super::trust::scan_folder(dir)? {
            let (kind, bytes) = match entry.kind {
                EntryKind::File { bytes } => ("file", bytes),
                EntryKind::Symlink { .. } => ("symlink", 0),
                EntryKind::Special { .. } => ("special", 0),
            };
            files.insert(
                entry.path,
                FileRecord {
                    kind: kind.to_owned(),
                    bytes,
                    executable: entry.executable,
                    sha256: hex(&entry.sha256),
                },
            );
        }
        Ok(Self::from_files(files))
    }

    /// The SHA-256 of the regular file at `path` (relative, `/`-separated)
    /// in this tree; `None` for a link, a special file or no entry.
    pub fn file_sha256(&self, path: &str) -> Option<[u8; 32]> {
        let record = self.files.get(path).filter(|r| r.kind == "file")?;
        let hex = record.sha256.as_bytes();
        if hex.len() != 64 {
            return None;
        }
        let mut digest = [0u8; 32];
        for (byte, pair) in digest.iter_mut().zip(hex.chunks_exact(2)) {
            let pair = std::str::from_utf8(pair).ok()?;
            *byte = u8::from_str_radix(pair, 16).ok()?;
        }
        Some(digest)
    }

    /// The tree of these records.
    pub fn from_files(files: BTreeMap<String, FileRecord>) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(b"zotbox-tree-v1");
        for (path, record) in &files {
            for field in [
                path.as_bytes(),
                record.kind.as_bytes(),
                &record.bytes.to_le_bytes(),
                &[u8::from(record.executable)],
                record.sha256.as_bytes(),
            ] {
                hasher.update((field.len() as u64).to_le_bytes());
                hasher.update(field);
            }
        }
        Self {
            digest: format!("sha256:{}", hex(&hasher.finalize())),
            files,
        }
    }

    /// The first path (in order) that is in one tree and not the other, or
    /// differs between them.
    pub fn first_difference(&self, locked: &BTreeMap<String, FileRecord>) -> Option<String> {
        self.files
            .keys()
            .chain(locked.keys())
            .filter(|path| self.files.get(*path) != locked.get(*path))
            .min()
            .cloned()
    }
}

/// Who an install is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// `$ZOT_HOME/extensions/`.
    User,
    /// `<workspace>/.zot/extensions/`.
    Project,
}

/// One locked install (rule 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct LockEntry {
    /// The extension's name.
    pub name: String,
    /// Its manifest's version (empty when it has none).
    #[serde(default)]
    pub version: String,
    /// User or project.
    pub scope: Scope,
    /// The source, as text that parses back to it.
    pub source: String,
    /// An archive's SHA-256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// A git source's commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The key that signed it (its id), when it was signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publisher_key: Option<String>,
    /// That key itself, in base64: what an update's signer is compared
    /// with (ids can be chosen; locks written before it have only the id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publisher: Option<String>,
    /// The index URL of the registry it came from (what `ext update` asks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
    /// [`Tree::digest`] of the installed folder.
    pub tree: String,
    /// [`Tree::files`] of the installed folder.
    pub files: BTreeMap<String, FileRecord>,
    /// The capabilities granted at install, by capability.
    #[serde(default)]
    pub capabilities: BTreeMap<String, Vec<String>>,
    /// When: RFC 3339, UTC.
    #[serde(default)]
    pub installed_at: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
struct LockFile {
    #[serde(default)]
    extensions: BTreeMap<String, LockEntry>,
}

/// `$ZOT_HOME/zotbox.lock`:
///
/// ```json
/// { "extensions": { "/home/me/.zot/extensions/x": { "name": "x", "tree": "sha256:…", … } } }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    path: PathBuf,
    entries: BTreeMap<String, LockEntry>,
}

impl Lock {
    /// Reads the lock of `home`; a missing file locks nothing.
    ///
    /// # Errors
    ///
    /// [`LockError::Read`] or [`LockError::Parse`].
    pub fn load(home: &ZotHome) -> Result<Self, LockError> {
        let path = home.lock_file();
        let entries = match read_json::<LockFile>(&path)? {
            Some(file) => file.extensions,
            None => BTreeMap::new(),
        };
        Ok(Self { path, entries })
    }

    /// The file this lock is saved to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The entry of the installed folder `dir`, if any.
    pub fn entry(&self, dir: &Path) -> Option<&LockEntry> {
        self.entries.get(&key(dir))
    }

    /// Every entry, by installed folder.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &LockEntry)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Records `entry` for the installed folder `dir` (replacing one).
    pub fn insert(&mut self, dir: &Path, entry: LockEntry) {
        self.entries.insert(key(dir), entry);
    }

    /// Drops the entry of `dir`; whether there was one.
    pub fn remove(&mut self, dir: &Path) -> bool {
        self.entries.remove(&key(dir)).is_some()
    }

    /// Writes the lock atomically.
    ///
    /// # Errors
    ///
    /// [`LockError::Write`].
    pub fn save(&self) -> Result<(), LockError> {
        let write = |source| LockError::Write {
            path: self.path.clone(),
            source,
        };
        if let Some(parent) = self.path.parent() {
            std::fs::create_dir_all(parent).map_err(write)?;
        }
        let file = LockFile {
            extensions: self.entries.clone(),
        };
        let mut text =
            serde_json::to_string_pretty(&file).map_err(|err| write(std::io::Error::other(err)))?;
        text.push('\n');
        crate::home::write_atomic(&self.path, text.as_bytes()).map_err(write)
    }
}

/// The key of an installed folder: its canonical path.
fn key(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .unwrap_or_else(|_| dir.to_owned())
        .to_string_lossy()
        .into_owned()
}

/// Reads a JSON file of at most [`MAX_LOCK_BYTES`]; `None` when missing.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, LockError> {
    // The file itself, never a link to elsewhere, and never a FIFO that
    // would block every start.
    let not_regular = || LockError::Parse {
        path: path.to_owned(),
        detail: "is not a regular file".to_owned(),
    };
    let file = match crate::user_file::open_regular(path, Links::Refuse) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) if err.kind() == std::io::ErrorKind::InvalidInput => return Err(not_regular()),
        Err(source) => {
            return Err(LockError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    let bytes = crate::user_file::read_file_at_most(file, MAX_LOCK_BYTES).map_err(|source| {
        LockError::Read {
            path: path.to_owned(),
            source,
        }
    })?;
    let parse = |detail: String| LockError::Parse {
        path: path.to_owned(),
        detail,
    };
    let Some(bytes) = bytes else {
        return Err(parse(format!("is larger than {MAX_LOCK_BYTES} bytes")));
    };
    let text = String::from_utf8(bytes).map_err(|_| parse("is not UTF-8".to_owned()))?;
    let parsed = crate::user_file::parse::<T>(&text).map_err(parse)?;
    for unknown in parsed.unknown_keys {
        // Rule 4: a key zotbox does not know is never read.
        tracing::warn!(
            "`{}`: unknown key `{}` ignored",
            path.display(),
            Shown(&unknown)
        );
    }
    Ok(Some(parsed.value))
}

/// Records the install at `installed` in the user's lock (rule 1).
///
/// # Errors
///
/// [`LockError`] when the folder cannot be hashed or the lock not written.
pub fn record_install(
    home: &ZotHome,
    installed: &Path,
    manifest: &Manifest,
    provenance: &Provenance,
    scope: Scope,
    capabilities: BTreeMap<String, Vec<String>>,
) -> Result<LockEntry, LockError> {
    let name = manifest.name().to_owned();
    let tree = Tree::of(installed).map_err(|source| LockError::Scan {
        name: name.clone(),
        source,
    })?;
    let entry = LockEntry {
        name,
        version: manifest.raw.version.clone(),
        scope,
        source: provenance.source.clone(),
        sha256: provenance.sha256.clone(),
        commit: provenance.commit.clone(),
        publisher_key: provenance.publisher_key.clone(),
        publisher: provenance.publisher.clone(),
        registry: provenance.registry.clone(),
        tree: tree.digest,
        files: tree.files,
        capabilities,
        installed_at: crate::data::approval::rfc3339_now(),
    };
    let mut lock = Lock::load(home)?;
    lock.insert(installed, entry.clone());
    lock.save()?;
    Ok(entry)
}

/// The user's own edit of a locked install's manifest (`ext enable`, `ext
/// disable`): runs `edit`, then records the folder's new manifest in its
/// lock entry, but only when the folder matched the lock before the edit
/// and no other file changed since, so that the user's edit never blesses
/// a change someone else made. A folder without an entry is only edited.
///
/// # Errors
///
/// `edit`'s error (nothing recorded), or [`LockError`] when the lock
/// cannot be read or written or the folder hashed.
pub fn edit_locked<E: From<LockError>>(
    home: &ZotHome,
    dir: &Path,
    edit: impl FnOnce() -> Result<(), E>,
) -> Result<(), E> {
    let mut lock = Lock::load(home)?;
    let scan = |name: &str| {
        let name = name.to_owned();
        move |source| LockError::Scan { name, source }
    };
    let intact = match lock.entry(dir) {
        Some(entry) => Tree::of(dir).map_err(scan(&entry.name))?.digest == entry.tree,
        None => false,
    };
    edit()?;
    if !intact {
        return Ok(());
    }
    if let Some(mut entry) = lock.entry(dir).cloned() {
        let tree = Tree::of(dir).map_err(scan(&entry.name))?;
        // Only the manifest may have changed since the check above.
        let others = |files: &BTreeMap<String, FileRecord>| {
            files
                .iter()
                .filter(|(path, _)| path.as_str() != MANIFEST_FILE)
                .map(|(path, record)| (path.clone(), record.clone()))
                .collect::<Vec<_>>()
        };
        if others(&tree.files) != others(&entry.files) {
            return Ok(());
        }
        entry.tree = tree.digest;
        entry.files = tree.files;
        lock.insert(dir, entry);
        lock.save()?;
    }
    Ok(())
}

/// Drops the entry of the installed folder `dir` (before it is removed);
/// whether there was one.
///
/// # Errors
///
/// [`LockError`] when the lock cannot be read or written.
pub fn forget(home: &ZotHome, dir: &Path) -> Result<bool, LockError> {
    let mut lock = Lock::load(home)?;
    let removed = lock.remove(dir);
    if removed {
        lock.save()?;
    }
    Ok(removed)
}

/// One pin of a project lock (rule 4).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct Pin {
    /// The [`Tree::digest`] the installed folder must have.
    #[serde(default)]
    pub tree: Option<String>,
    /// The archive SHA-256 it must have been installed from.
    #[serde(default)]
    pub sha256: Option<String>,
    /// The git commit it must have been installed from.
    #[serde(default)]
    pub commit: Option<String>,
    /// Versions that may not run here.
    #[serde(default)]
    pub refuse_versions: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
struct ProjectLockFile {
    #[serde(default)]
    extensions: BTreeMap<String, Pin>,
}

/// A workspace's `.zot/zotbox.lock`, read only when the workspace is trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectLock {
    /// The file.
    pub path: PathBuf,
    /// The pins, by extension name.
    pub pins: BTreeMap<String, Pin>,
}

impl ProjectLock {
    /// The lock of `workspace` when the policy and the user's trust let it
    /// speak; `None` when it has none or is not trusted.
    ///
    /// # Errors
    ///
    /// [`LockError`] when a trusted workspace's lock cannot be read.
    pub fn load(
        policy: &Policy,
        home: &ZotHome,
        workspace: &Path,
    ) -> Result<Option<Self>, LockError> {
        let path = workspace.join(PROJECT_LOCK);
        if std::fs::symlink_metadata(&path).is_err() {
            return Ok(None);
        }
        // Trust before anything about the file: an untrusted workspace's
        // lock is never read, and its oddities (a link, a folder, a FIFO)
        // must not refuse the user's own extensions either.
        if !trusted(policy, home, workspace) {
            tracing::debug!("`{}` ignored: the workspace is not trusted", path.display());
            return Ok(None);
        }
        Ok(read_json::<ProjectLockFile>(&path)?.map(|file| Self {
            path,
            pins: file.extensions,
        }))
    }

    /// Whether the installed extension (its manifest, its user lock entry,
    /// its tree) meets this lock's pin for it.
    ///
    /// # Errors
    ///
    /// [`LockError::Pinned`] naming the pin.
    pub fn check(
        &self,
        manifest: &Manifest,
        entry: Option<&LockEntry>,
        tree: &Tree,
    ) -> Result<(), LockError> {
        let name = manifest.name();
        let Some(pin) = self.pins.get(name) else {
            return Ok(());
        };
        let refused = |reason: String| LockError::Pinned {
            name: name.to_owned(),
            lock: self.path.clone(),
            reason,
        };
        let version = &manifest.raw.version;
        if pin.refuse_versions.iter().any(|v| v == version) {
            return Err(refused(format!("version `{}` is refused", Shown(version))));
        }
        if let Some(pinned) = &pin.tree
            && *pinned != tree.digest
        {
            return Err(refused(format!(
                "its files are `{}`, not the pinned `{}`",
                tree.digest,
                Shown(pinned)
            )));
        }
        let recorded = |field: Option<&String>| field.cloned().unwrap_or_else(|| "none".into());
        if let Some(pinned) = &pin.sha256
            && entry.and_then(|e| e.sha256.as_ref()) != Some(pinned)
        {
            return Err(refused(format!(
                "it was installed from an archive with sha256 `{}`, not the pinned `{}`",
                recorded(entry.and_then(|e| e.sha256.as_ref())),
                Shown(pinned)
            )));
        }
        if let Some(pinned) = &pin.commit
            && entry.and_then(|e| e.commit.as_ref()) != Some(pinned)
        {
            return Err(refused(format!(
                "it was installed from commit `{}`, not the pinned `{}`",
                recorded(entry.and_then(|e| e.commit.as_ref())),
                Shown(pinned)
            )));
        }
        Ok(())
    }
}

/// Rule 4: whether the user (or the system policy) trusted `workspace`.
/// A workspace that brings nothing to run needs no trust to run, but its
/// lock is read only once the user trusted that path (`zotbox trust`):
/// a cloned repository cannot refuse the user's own extensions.
fn trusted(policy: &Policy, home: &ZotHome, workspace: &Path) -> bool {
    use super::trust::Standing;
    let assessment = super::trust::assess(policy, home, workspace);
    match assessment.standing {
        Standing::Trusted { .. } | Standing::TrustedByPolicy { .. } => true,
        Standing::NothingToTrust => super::trust::TrustStore::load(home)
            .is_ok_and(|store| store.record(&assessment.workspace).is_some()),
        Standing::Untrusted(_) => false,
    }
}

/// Rules 3 and 4, before the extension in `manifest.dir` starts: its tree
/// against its lock entry, and against the pins of `workspace`'s lock when
/// that workspace is trusted. The one check `zotbox run` and the host share.
/// Returns the tree it checked, if any: what the files read after it must
/// hold ([`Tree::file_sha256`]).
///
/// # Errors
///
/// [`LockError::Changed`], [`LockError::Pinned`], or why the check could
/// not be made.
pub fn check_at_load(
    manifest: &Manifest,
    home: &ZotHome,
    policy: &Policy,
    workspace: Option<&Path>,
) -> Result<Option<Tree>, LockError> {
    let lock = Lock::load(home)?;
    let project = match workspace {
        Some(workspace) => ProjectLock::load(policy, home, workspace)?,
        None => None,
    };
    check_against(manifest, &lock, project.as_ref())
}

/// [`check_at_load`] with the user's lock and the workspace's already read.
fn check_against(
    manifest: &Manifest,
    lock: &Lock,
    project: Option<&ProjectLock>,
) -> Result<Option<Tree>, LockError> {
    let dir = &manifest.dir;
    let entry = lock.entry(dir);
    let project = project.filter(|project| project.pins.contains_key(manifest.name()));
    if entry.is_none() && project.is_none() {
        return Ok(None);
    }
    let tree = Tree::of(dir).map_err(|source| LockError::Scan {
        name: manifest.name().to_owned(),
        source,
    })?;
    if let Some(entry) = entry
        && entry.tree != tree.digest
    {
        let path = tree
            .first_difference(&entry.files)
            .unwrap_or_else(|| MANIFEST_FILE.to_owned());
        return Err(LockError::Changed {
            name: manifest.name().to_owned(),
            path,
        });
    }
    // The files are the locked ones; the manifest in hand must be theirs.
    if entry.is_some()
        && tree
            .file_sha256(MANIFEST_FILE)
            .is_some_and(|installed| installed != manifest.sha256)
    {
        return Err(LockError::Stale {
            name: manifest.name().to_owned(),
        });
    }
    if let Some(project) = project {
        project.check(manifest, entry, &tree)?;
    }
    Ok(Some(tree))
}

/// Rules 3 and 4 for the installed data packages `search` would load,
/// before the host loads them: each whose files changed since its install,
/// or that the trusted workspace's lock refuses, is refused in `search`
/// ([`DataSearch::refuse`]) and loads nothing. The locks are read once for
/// all of them; when they cannot be read, every package is refused.
pub fn check_packages(search: &mut DataSearch, home: &ZotHome, policy: &Policy) {
    let packages: Vec<Manifest> = search
        .packages()
        .into_iter()
        .map(|(manifest, _)| manifest)
        .filter(|manifest| manifest.raw.enabled)
        .collect();
    if packages.is_empty() {
        return;
    }
    let locks = Lock::load(home).and_then(|lock| {
        let project = ProjectLock::load(policy, home, &search.workspace)?;
        Ok((lock, project))
    });
    for manifest in packages {
        let checked = match &locks {
            Ok((lock, project)) => check_against(&manifest, lock, project.as_ref())
                .map(drop)
                .map_err(|err| err.to_string()),
            // Unreadable locks refuse every package, with their error.
            Err(err) => Err(err.to_string()),
        };
        if let Err(why) = checked {
            search.refuse(&manifest.dir, why);
        }
    }
}

/// What `ext verify` found for one installed extension.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum Status {
    /// Its files are the locked ones.
    Ok,
    /// A file differs: the first one.
    Changed {
        /// Relative to its folder.
        file: String,
    },
    /// It has no lock entry.
    NotLocked,
    /// The lock names it, but its folder is gone.
    Missing,
    /// Its folder could not be hashed.
    Unreadable {
        /// Why.
        reason: String,
    },
}

/// One line of `ext verify`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// The extension's name (the folder's, when it has no valid manifest).
    pub name: String,
    /// Its installed folder.
    pub path: PathBuf,
    /// What was found.
    #[serde(flatten)]
    pub status: Status,
}

impl Verdict {
    /// Whether this verdict fails `ext verify`.
    pub fn failed(&self) -> bool {
        matches!(
            self.status,
            Status::Changed { .. } | Status::Missing | Status::Unreadable { .. }
        )
    }
}

/// Checks every installed extension (the user's, and `workspace`'s project
/// installs) and every lock entry against the installed files.
///
/// # Errors
///
/// [`LockError`] when the lock cannot be read.
pub fn verify(home: &ZotHome, workspace: Option<&Path>) -> Result<Vec<Verdict>, LockError> {
    let lock = Lock::load(home)?;
    let mut folders: Vec<PathBuf> = Vec::new();
    let mut roots = vec![home.extensions_dir(), home.packages_dir()];
    if let Some(workspace) = workspace {
        roots.push(workspace.join(super::trust::EXTENSIONS_DIR));
        roots.push(workspace.join(".zot").join(crate::home::PACKAGES_DIR));
    }
    for root in roots {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.join(MANIFEST_FILE).is_file())
            .collect();
        found.sort();
        folders.extend(found);
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut verdicts = Vec::new();
    for folder in folders {
        let key = key(&folder);
        if !seen.insert(key.clone()) {
            continue;
        }
        let entry = lock.entries.get(&key);
        let name = entry.map(|e| e.name.clone()).unwrap_or_else(|| {
            Manifest::load(&folder.join(MANIFEST_FILE))
                .map(|m| m.name().to_owned())
                .unwrap_or_else(|_| {
                    folder
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default()
                })
        });
        let status = match entry {
            None => Status::NotLocked,
            Some(entry) => match Tree::of(&folder) {
                Err(err) => Status::Unreadable {
                    reason: err.to_string(),
                },
                Ok(tree) if tree.digest == entry.tree => Status::Ok,
                Ok(tree) => Status::Changed {
                    file: tree
                        .first_difference(&entry.files)
                        .unwrap_or_else(|| MANIFEST_FILE.to_owned()),
                },
            },
        };
        verdicts.push(Verdict {
            name,
            path: folder,
            status,
        });
    }
    for (key, entry) in &lock.entries {
        let path = PathBuf::from(key);
        if seen.contains(key) || path.exists() && !path.join(MANIFEST_FILE).is_file() {
            continue;
        }
        // A project install of another workspace is that workspace's to check.
        if entry.scope == Scope::Project && path.exists() {
            continue;
        }
        if !path.exists() {
            verdicts.push(Verdict {
                name: entry.name.clone(),
                path,
                status: Status::Missing,
            });
        }
    }
    Ok(verdicts)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    struct Fixture {
        _tmp: tempfile::TempDir,
        home: ZotHome,
        ws: PathBuf,
        ext: PathBuf,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let home = ZotHome::new(tmp.path().join("home"));
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join(".zot")).unwrap();
        let ext = home.extensions_dir().join("x");
        std::fs::create_dir_all(ext.join("bin")).unwrap();
        std::fs::write(
            ext.join(MANIFEST_FILE),
            r#"{"name":"x","version":"1.0.0","exec":"./bin/run"}"#,
        )
        .unwrap();
        std::fs::write(ext.join("bin/run"), "#!/bin/sh\n").unwrap();
        Fixture {
            _tmp: tmp,
            home,
            ws,
            ext,
        }
    }

    fn manifest(f: &Fixture) -> Manifest {
        Manifest::load(&f.ext.join(MANIFEST_FILE)).unwrap()
    }

    fn record(f: &Fixture, commit: Option<&str>) -> LockEntry {
        let provenance = Provenance {
            commit: commit.map(Into::into),
            ..Provenance::of_source("git+/srv/x".into())
        };
        let mut caps = BTreeMap::new();
        caps.insert(
            "http".to_owned(),
            vec!["https://api.example.com".to_owned()],
        );
        record_install(
            &f.home,
            &f.ext,
            &manifest(f),
            &provenance,
            Scope::User,
            caps,
        )
        .unwrap()
    }

    fn policy(f: &Fixture) -> Policy {
        Policy::load_for(&f.home).unwrap()
    }

    #[test]
    fn packages_are_checked_against_locks_read_once_and_an_unreadable_lock_refuses_them_all() {
        let f = fixture();
        for name in ["a", "b"] {
            let dir = f.home.packages_dir().join(name);
            std::fs::create_dir_all(dir.join("skills")).unwrap();
            std::fs::write(
                dir.join(MANIFEST_FILE),
                format!(r#"{{"name":"{name}","version":"1.0.0","kind":"data"}}"#),
            )
            .unwrap();
            std::fs::write(dir.join("skills/s.md"), "# s\nA skill.\n").unwrap();
        }
        // Unlocked packages pass.
        let mut search = DataSearch::new(&f.ws, f.home.root());
        check_packages(&mut search, &f.home, &policy(&f));
        assert!(search.refused.is_empty(), "{:?}", search.refused);
        // A lock that does not parse refuses each of them, with its error.
        std::fs::write(f.home.lock_file(), "not a lock").unwrap();
        let expected = Lock::load(&f.home).map(drop).unwrap_err().to_string();
        let mut search = DataSearch::new(&f.ws, f.home.root());
        check_packages(&mut search, &f.home, &policy(&f));
        let refused: Vec<(String, &String)> = search
            .refused
            .iter()
            .map(|(dir, why)| (dir.file_name().unwrap().to_string_lossy().into_owned(), why))
            .collect();
        assert_eq!(
            refused,
            [("a".to_owned(), &expected), ("b".to_owned(), &expected)]
        );
    }

    fn check(f: &Fixture) -> Result<(), LockError> {
        check_at_load(&manifest(f), &f.home, &policy(f), Some(&f.ws)).map(drop)
    }

    #[test]
    fn the_tree_sees_content_new_removed_and_mode_changes() {
        let f = fixture();
        let base = Tree::of(&f.ext).unwrap();
        assert_eq!(
            base.files.keys().collect::<Vec<_>>(),
            ["bin/run", "extension.json"]
        );
        assert_eq!(Tree::of(&f.ext).unwrap(), base, "stable");
        type Change = Box<dyn Fn(&Path)>;
        let changes: Vec<(&str, Change, &str)> = vec![
            (
                "content",
                Box::new(|d| std::fs::write(d.join("bin/run"), "#!/bin/sh\nevil\n").unwrap()),
                "bin/run",
            ),
            (
                "new file",
                Box::new(|d| std::fs::write(d.join("bin/extra.py"), "x").unwrap()),
                "bin/extra.py",
            ),
            (
                "removed file",
                Box::new(|d| std::fs::remove_file(d.join("bin/run")).unwrap()),
                "bin/run",
            ),
            (
                "exec bit",
                Box::new(|d| {
                    std::fs::set_permissions(
                        d.join("bin/run"),
                        std::fs::Permissions::from_mode(0o755),
                    )
                    .unwrap()
                }),
                "bin/run",
            ),
            (
                "a file turned into a link",
                Box::new(|d| {
                    std::fs::remove_file(d.join("bin/run")).unwrap();
                    std::os::unix::fs::symlink("/bin/sh", d.join("bin/run")).unwrap();
                }),
                "bin/run",
            ),
        ];
        for (what, change, path) in changes {
            let f = fixture();
            change(&f.ext);
            let tree = Tree::of(&f.ext).unwrap();
            assert_ne!(tree.digest, base.digest, "{what}");
            assert_eq!(
                tree.first_difference(&base.files).as_deref(),
                Some(path),
                "{what}"
            );
        }
    }

    #[test]
    fn the_lock_is_written_read_and_dropped() {
        let f = fixture();
        let entry = record(&f, Some("abc"));
        let lock = Lock::load(&f.home).unwrap();
        assert_eq!(lock.entry(&f.ext), Some(&entry));
        assert_eq!(entry.commit.as_deref(), Some("abc"));
        assert_eq!(entry.version, "1.0.0");
        assert_eq!(entry.capabilities["http"], ["https://api.example.com"]);
        assert!(check(&f).is_ok());
        assert!(forget(&f.home, &f.ext).unwrap());
        assert_eq!(Lock::load(&f.home).unwrap().entry(&f.ext), None);
        assert!(!forget(&f.home, &f.ext).unwrap());
    }

    #[test]
    fn a_changed_installed_file_is_refused_at_load_naming_it() {
        let f = fixture();
        record(&f, None);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(f.ext.join(MANIFEST_FILE))
            .unwrap();
        std::io::Write::write_all(&mut file, b" ").unwrap();
        assert_eq!(
            check(&f).unwrap_err().to_string(),
            "extension `x` changed since it was installed (`extension.json` differs from the \
             lock); reinstall it or run `zotbox ext verify`"
        );
        let verdicts = verify(&f.home, Some(&f.ws)).unwrap();
        assert_eq!(verdicts.len(), 1);
        assert_eq!(
            verdicts[0].status,
            Status::Changed {
                file: "extension.json".into()
            }
        );
        assert!(verdicts[0].failed());
    }

    #[test]
    fn a_manifest_read_before_a_reinstall_does_not_start_with_the_new_files() {
        let f = fixture();
        record(&f, None);
        let held = manifest(&f);
        check_at_load(&held, &f.home, &policy(&f), Some(&f.ws)).unwrap();
        // Reinstalled (files and lock both new) while a host held the old
        // manifest: its restart would run the new files under the old one.
        std::fs::write(
            f.ext.join(MANIFEST_FILE),
            r#"{"name":"x","version":"1.1.0","exec":"./bin/run"}"#,
        )
        .unwrap();
        record(&f, None);
        assert_eq!(
            check_at_load(&held, &f.home, &policy(&f), Some(&f.ws))
                .unwrap_err()
                .to_string(),
            "extension `x`: its `extension.json` changed since it was read (reinstalled or \
             edited); start it again to load what is installed"
        );
        // Read again, it starts.
        assert!(check(&f).is_ok());
    }

    #[test]
    fn the_users_own_manifest_edit_is_locked_and_nothing_else_is() {
        let f = fixture();
        record(&f, None);
        let rewrite = |enabled: bool| {
            let text = format!(
                r#"{{"name":"x","version":"1.0.0","exec":"./bin/run","enabled":{enabled}}}"#
            );
            let path = f.ext.join(MANIFEST_FILE);
            move || -> Result<(), LockError> {
                std::fs::write(&path, text).unwrap();
                Ok(())
            }
        };
        // `ext disable`: the new manifest is what the lock holds now.
        edit_locked(&f.home, &f.ext, rewrite(false)).unwrap();
        check(&f).unwrap();
        // Attack: the edit races another change in the folder: not blessed.
        let program = f.ext.join("bin/run");
        edit_locked(&f.home, &f.ext, || -> Result<(), LockError> {
            rewrite(true)()?;
            std::fs::write(&program, "#!/bin/sh\ncurl evil\n").unwrap();
            Ok(())
        })
        .unwrap();
        let refused = check(&f).unwrap_err().to_string();
        assert!(
            refused.contains("(`bin/run` differs from the lock)"),
            "{refused}"
        );
        // A folder that had changed before the edit stays refused after it.
        edit_locked(&f.home, &f.ext, rewrite(false)).unwrap();
        let refused = check(&f).unwrap_err().to_string();
        assert!(refused.contains("differs from the lock"), "{refused}");
    }

    #[test]
    fn a_broken_lock_refuses_every_start() {
        let f = fixture();
        std::fs::create_dir_all(f.home.root()).unwrap();
        std::fs::write(f.home.lock_file(), "{ nope").unwrap();
        assert!(matches!(check(&f), Err(LockError::Parse { .. })));
    }

    fn write_project_lock(f: &Fixture, text: &str) {
        std::fs::write(f.ws.join(PROJECT_LOCK), text).unwrap();
    }

    fn trust(f: &Fixture) {
        crate::store::trust::trust_workspace(&f.home, &f.ws).unwrap();
    }

    #[test]
    fn a_project_lock_is_read_only_in_a_trusted_workspace_and_only_narrows() {
        let f = fixture();
        record(&f, Some("1111"));
        write_project_lock(
            &f,
            r#"{"extensions":{"x":{"commit":"2222"},"never-installed":{"commit":"3"}}}"#,
        );
        // Untrusted, with nothing to run and then with an extension of its own: ignored.
        assert!(check(&f).is_ok());
        let own = f.ws.join(".zot/extensions/p");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join(MANIFEST_FILE), r#"{"name":"p","exec":"true"}"#).unwrap();
        assert!(check(&f).is_ok());
        trust(&f);
        let err = check(&f).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "extension `x` refused by the project lock `{}`: it was installed from commit \
                 `1111`, not the pinned `2222`; install the version it pins, or change the \
                 project lock",
                f.ws.join(PROJECT_LOCK).display()
            )
        );
        // Pins that hold pass; a refused version does not.
        let tree = Tree::of(&f.ext).unwrap();
        write_project_lock(
            &f,
            &format!(
                r#"{{"extensions":{{"x":{{"commit":"1111","tree":"{}"}}}}}}"#,
                tree.digest
            ),
        );
        assert!(check(&f).is_ok());
        write_project_lock(&f, r#"{"extensions":{"x":{"refuse_versions":["1.0.0"]}}}"#);
        assert!(
            check(&f)
                .unwrap_err()
                .to_string()
                .contains("version `1.0.0` is refused")
        );
        write_project_lock(&f, r#"{"extensions":{"x":{"sha256":"ab"}}}"#);
        assert!(
            check(&f)
                .unwrap_err()
                .to_string()
                .contains("installed from an archive with sha256 `none`, not the pinned `ab`")
        );
        // An entry for an extension not installed installs nothing.
        assert!(!f.home.extensions_dir().join("never-installed").exists());
    }

    #[test]
    fn a_project_lock_cannot_widen_or_excuse_a_change() {
        let f = fixture();
        record(&f, None);
        trust(&f);
        std::fs::write(f.ext.join("bin/run"), "#!/bin/sh\nevil\n").unwrap();
        let tampered = Tree::of(&f.ext).unwrap();
        // Pinning the tampered tree, granting, approving: none of it is read.
        write_project_lock(
            &f,
            &format!(
                r#"{{"extensions":{{"x":{{"tree":"{}","capabilities":{{"shell":["*"]}},"approved":true}}}},"grant_all":true}}"#,
                tampered.digest
            ),
        );
        assert!(matches!(check(&f), Err(LockError::Changed { .. })));
        let lock = Lock::load(&f.home).unwrap();
        assert_eq!(
            lock.entry(&f.ext)
                .unwrap()
                .capabilities
                .keys()
                .collect::<Vec<_>>(),
            ["http"],
            "the user lock is as it was"
        );
        let project = ProjectLock::load(&policy(&f), &f.home, &f.ws)
            .unwrap()
            .unwrap();
        assert_eq!(
            project.pins["x"],
            Pin {
                tree: Some(tampered.digest.clone()),
                ..Pin::default()
            }
        );
    }

    #[test]
    fn verify_lists_ok_not_locked_and_missing() {
        let f = fixture();
        record(&f, None);
        let other = f.home.extensions_dir().join("y");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join(MANIFEST_FILE), r#"{"name":"y","exec":"true"}"#).unwrap();
        let statuses = |f: &Fixture| {
            verify(&f.home, Some(&f.ws))
                .unwrap()
                .into_iter()
                .map(|v| (v.name, v.status))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            statuses(&f),
            [
                ("x".to_owned(), Status::Ok),
                ("y".to_owned(), Status::NotLocked)
            ]
        );
        std::fs::remove_dir_all(&f.ext).unwrap();
        assert_eq!(
            statuses(&f),
            [
                ("y".to_owned(), Status::NotLocked),
                ("x".to_owned(), Status::Missing)
            ]
        );
    }

    #[test]
    fn checking_a_locked_extension_is_cheap() {
        // A 4 MiB component: the check reads it once. Printed, not asserted
        // (a loaded machine must not fail the suite); see the report.
        let f = fixture();
        std::fs::write(f.ext.join("x.wasm"), vec![7u8; 4 * 1024 * 1024]).unwrap();
        record(&f, None);
        let started = std::time::Instant::now();
        for _ in 0..5 {
            check(&f).unwrap();
        }
        eprintln!(
            "check_at_load, 4 MiB: {:?} per start",
            started.elapsed() / 5
        );
    }

    #[test]
    fn an_untrusted_workspace_cannot_refuse_the_users_extensions_with_an_odd_lock_file() {
        // Attack: the cloned repository's `.zot/zotbox.lock` is a link, a
        // folder or a FIFO; unread while the workspace is untrusted, it must
        // not refuse the user's own extension either.
        type Make = Box<dyn Fn(&Path)>;
        let cases: Vec<(&str, Make)> = vec![
            (
                "symlink",
                Box::new(|p| std::os::unix::fs::symlink("/etc/passwd", p).unwrap()),
            ),
            ("folder", Box::new(|p| std::fs::create_dir(p).unwrap())),
            (
                "fifo",
                Box::new(|p| {
                    nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap()
                }),
            ),
        ];
        for (what, make) in cases {
            let f = fixture();
            record(&f, None);
            make(&f.ws.join(PROJECT_LOCK));
            assert!(check(&f).is_ok(), "{what}: {:?}", check(&f));
            trust(&f);
            assert_eq!(
                check(&f).unwrap_err().to_string(),
                format!(
                    "`{}`: is not a regular file; fix it or remove it (then reinstall your \
                     extensions to lock them again)",
                    f.ws.join(PROJECT_LOCK).display()
                ),
                "{what}, trusted"
            );
        }
    }
}
