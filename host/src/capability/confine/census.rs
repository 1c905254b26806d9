//! Every control path in a workspace, at any depth: what a confined command
//! finds read-only, and what it created and must give back (rule 6).
//!
//! A nested repository decides what runs as much as the workspace's own:
//! `git status` in `vendor/lib/` runs the `core.fsmonitor` of
//! `vendor/lib/.git/config`, whoever types it (the user, a shell prompt
//! that shows the branch, zot's own `bash`, none of them sandboxed), and zot
//! started in `docs/` runs `docs/.zot/extensions/*`. So before a command
//! runs, every `.git`, `.zot` and `.shiro` below the workspace, and every
//! folder git takes for a repository whatever its name (a bare one), is
//! found (and bound read-only by the jail), and once every process of the command
//! is dead, any that was not there before is set aside (renamed).
//!
//! Walking a large workspace twice per command would cost more than the
//! command, so a process keeps the folders it walked, by workspace, and
//! reads a folder's entries again only when the folder's change time moved
//! (which every entry added, removed or renamed in it does, and which no
//! unprivileged process can set back). A folder that changed within the last
//! [`SETTLE`] is read again whatever its time says, as git does with racy
//! index entries: two changes within one clock tick share a time.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Component, Path, PathBuf};
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cap_std::fs::{Dir, MetadataExt as _};

use super::CONTROL_PATHS;
use crate::capability::fs::open_dir_nofollow;
use crate::capability::repository::{self, Kind, Signs};
use crate::text::Shown;

/// The most folders a workspace may hold for its control paths to be
/// checked; past it nothing is run (a command could hide a `.git` in the
/// part that was not looked at).
pub const MAX_FOLDERS: usize = 250_000;

/// How long after a folder changed its change time is trusted to say
/// whether it changed again.
const SETTLE: Duration = Duration::from_secs(3);

/// The most times a command's workspace is looked at again after it ends:
/// each folder found made a repository is walked on the next look, once
/// what made it one is set aside.
const MAX_LOOKS_BACK: usize = 8;

/// The most workspaces whose folders one process keeps.
const KEPT_WORKSPACES: usize = 8;

/// The workspace cannot be checked for control paths.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CensusError {
    /// The workspace itself cannot be read.
    #[error("cannot read the workspace `{}` to find its control paths: {reason}", .workspace.display())]
    Workspace {
        /// The workspace.
        workspace: PathBuf,
        /// Why.
        reason: String,
    },
    /// The workspace holds more folders than are walked.
    #[error(
        "the workspace `{}` holds more than {MAX_FOLDERS} folders, too many to check for control \
         paths (`.git`, `.zot`, `.shiro`); confined commands and extensions run only in a \
         smaller workspace",
        .workspace.display()
    )]
    TooLarge {
        /// The workspace.
        workspace: PathBuf,
    },
}

/// The control paths of one workspace at one moment.
#[derive(Debug, Clone, Default)]
pub struct Census {
    workspace: PathBuf,
    found: Vec<Found>,
    unreadable: Vec<Unreadable>,
    /// Control paths named by the caller, not by their name (a file git's
    /// configuration includes), that did not exist: relative.
    absent: Vec<PathBuf>,
    /// Control paths a repository's configuration or hooks name
    /// ([`Census::with_configured`]) that exist: absolute.
    configured: Vec<PathBuf>,
    /// git takes the workspace's root itself for a repository (a bare one).
    root_repository: bool,
    /// For the census of a command whose zotbox died: the latest change
    /// time (seconds since 1970) of what that command can have made. What
    /// changed later is someone else's (a clone since), left alone.
    made_by: Option<i64>,
}

/// A folder that could not be read, and when it last changed (when not even
/// that can be read, when its parent did: opening the parent to reach it
/// changes that). `None`: neither is known, so it counts as changed.
type Unreadable = (PathBuf, Option<Stamp>);

/// One entry named as a control path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Found {
    /// Relative to the workspace.
    path: PathBuf,
    dev: u64,
    ino: u64,
    dir: bool,
    /// A folder git takes for a repository by what it holds, whatever its
    /// name: what made it one is set aside, not the folder.
    repository: bool,
    link: bool,
    /// When the entry was made, where the file system keeps it.
    born: Option<Born>,
}

/// A birth time: seconds and nanoseconds since 1970.
type Born = (i64, u32);

/// When what `meta` describes was made, where the file system keeps it
/// (ext4, xfs, btrfs, tmpfs do).
fn born(meta: &std::fs::Metadata) -> Option<Born> {
    let since = meta.created().ok()?.duration_since(UNIX_EPOCH).ok()?;
    Some((i64::try_from(since.as_secs()).ok()?, since.subsec_nanos()))
}

/// What tells an entry from another that took its inode once it was
/// removed: a command may delete a control path that is a link (the bind
/// holds where it leads, not the link) and make a folder or a file there,
/// which the file system gives the freed inode at once.
type Identity = (u64, u64, bool, bool, Option<Born>);

impl Found {
    fn identity(&self) -> Identity {
        (self.dev, self.ino, self.dir, self.link, self.born)
    }

    /// `sub/.git/` for a folder, `sub/.git` for anything else, escaped.
    fn shown(&self) -> String {
        let path = self.path.to_string_lossy();
        let slash = if self.dir { "/" } else { "" };
        format!("`{}{slash}`", Shown(&path))
    }
}

/// What a command left behind that decides what runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Left {
    /// Control paths it created (set aside now), shown as `` `sub/.git/` ``.
    pub created: Vec<String>,
    /// Folders that cannot be read (made unreadable, or too deep to
    /// name), so they could not be checked, shown as `` `sub/` ``.
    pub unreadable: Vec<String>,
    /// Folders of the user's it had closed to them (`chmod 311`: git
    /// still enters one), opened again to be looked in, shown as `` `sub/` ``.
    pub reopened: Vec<String>,
}

impl Left {
    /// Whether the command left nothing.
    pub fn is_empty(&self) -> bool {
        self.created.is_empty() && self.unreadable.is_empty() && self.reopened.is_empty()
    }
}

impl Census {
    /// The control paths in `workspace` now.
    ///
    /// # Errors
    ///
    /// [`CensusError`] when the workspace cannot be read or is too large.
    pub fn take(workspace: &Path) -> Result<Self, CensusError> {
        let root = workspace
            .canonicalize()
            .map_err(|err| CensusError::Workspace {
                workspace: workspace.to_owned(),
                reason: err.to_string(),
            })?;
        let mut trees = TREES.lock().unwrap_or_else(PoisonError::into_inner);
        if !trees.contains_key(&root) && trees.len() >= KEPT_WORKSPACES {
            trees.clear();
        }
        let tree = trees.entry(root.clone()).or_default();
        match tree.refresh(&root) {
            Ok(()) => Ok(tree.census(root)),
            Err(err) => {
                trees.remove(&root);
                Err(match err {
                    Refresh::Workspace(err) => CensusError::Workspace {
                        workspace: workspace.to_owned(),
                        reason: err.to_string(),
                    },
                    Refresh::TooLarge => CensusError::TooLarge {
                        workspace: workspace.to_owned(),
                    },
                })
            }
        }
    }

    /// This census, watching the control paths `named` (relative to the
    /// workspace) that do not exist now: one a command creates is set
    /// aside as a `.git` would be (a file git's configuration includes
    /// when it is there, `include.path = ../.gitconfig.local`, cannot be
    /// bound read-only before it exists).
    #[must_use]
    pub fn watching(mut self, named: impl IntoIterator<Item = PathBuf>) -> Self {
        for path in named {
            let missing = matches!(
                self.workspace.join(&path).symlink_metadata(),
                Err(err) if err.kind() == io::ErrorKind::NotFound
            );
            if missing && !self.absent.contains(&path) {
                self.absent.push(path);
            }
        }
        self
    }

    /// This census, with what the configuration of each repository nested
    /// in the workspace names in it for its working tree: the hooks folder,
    /// included files and programs, and the files its hooks run
    /// (`repository::configured`, `~/` and the user's own configuration
    /// from `home`). `git commit` in
    /// `vendor/lib/` runs `vendor/lib/.husky/pre-commit` when that
    /// repository's `config` says `hooksPath = .husky`. Those that exist
    /// are bound read-only with the rest ([`Census::nested`]); those that
    /// do not are watched as [`Census::watching`] watches. The repository
    /// the workspace itself lies in counts too: its configuration may have
    /// changed since the caller's control paths were found (`npm install`
    /// runs husky, which sets `core.hooksPath`).
    #[must_use]
    pub fn with_configured(mut self, home: Option<&Path>) -> Self {
        let nested = self
            .nested_repositories()
            .map(|worktree| self.workspace.join(worktree));
        let worktrees: Vec<PathBuf> = std::iter::once(self.workspace.clone())
            .chain(nested)
            .collect();
        let mut absent = Vec::new();
        for worktree in worktrees {
            for (path, folder, _) in repository::configured(&worktree, home).into_control_paths() {
                let Some(canonical) = crate::capability::fs::canonical_lenient(&path) else {
                    continue;
                };
                let Ok(relative) = canonical.strip_prefix(&self.workspace) else {
                    continue;
                };
                if let Ok(meta) = canonical.symlink_metadata() {
                    // A word of a command that names a folder
                    // (`!cd web && make`) runs nothing of its own.
                    if !folder && meta.is_dir() {
                        continue;
                    }
                    if !self.configured.contains(&canonical) {
                        self.configured.push(canonical);
                    }
                } else {
                    absent.push(relative.to_owned());
                }
            }
        }
        self.watching(absent)
    }

    /// The workspace, canonical: what the paths it gives are relative to.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The repositories nested in the workspace, relative, as
    /// `repository::configured` takes them: the working tree of each (a
    /// folder below the root holding a `.git`), and the folder of each
    /// that git takes for a repository whatever its name (a bare one).
    pub fn nested_repositories(&self) -> impl Iterator<Item = &Path> + '_ {
        self.found.iter().filter_map(|found| {
            let name = found.path.file_name()?;
            if name.as_encoded_bytes().eq_ignore_ascii_case(b".git") {
                found
                    .path
                    .parent()
                    .filter(|worktree| !worktree.as_os_str().is_empty())
            } else if found.dir && !is_control(name) {
                Some(found.path.as_path())
            } else {
                None
            }
        })
    }

    /// The control paths below the workspace's root, and those at its root
    /// not spelt as [`CONTROL_PATHS`] (`.GIT`), absolute: what the jail binds
    /// read-only besides the root's own.
    pub fn nested(&self) -> impl Iterator<Item = PathBuf> + '_ {
        self.found
            .iter()
            .filter(|found| {
                found.path.components().count() > 1
                    || !CONTROL_PATHS
                        .iter()
                        .any(|name| found.path.as_os_str() == OsStr::new(name))
            })
            .map(|found| self.workspace.join(&found.path))
            .chain(self.configured.iter().cloned())
    }

    /// Looks again, once nothing the command started can run: sets aside
    /// every control path that was not here before (renamed, a link as a
    /// link, the folders leading to it opened without following a link),
    /// and names it and every unreadable folder that is new or changed (a
    /// command may open a folder it owns, write in it, and close it again).
    ///
    /// # Errors
    ///
    /// [`CensusError`] when the workspace cannot be read again.
    // One copy for both callers (a command's own take-back and one of
    // an abandoned record), whatever the optimiser would inline.
    #[inline(never)]
    pub fn take_back(&self) -> Result<Left, CensusError> {
        let known: HashSet<Identity> = self.found.iter().map(Found::identity).collect();
        let mut left = Left::default();
        // A folder that is a repository is not walked (it is bound or set
        // aside whole); one that stops being one when what made it one is
        // set aside is walked on the next look, which may find more in it.
        let unreadable: HashSet<&Unreadable> = self.unreadable.iter().collect();
        let changed = |folder: &&Unreadable| folder.1.is_none() || !unreadable.contains(*folder);
        let mut looks = 0;
        let after = loop {
            looks += 1;
            let after = Self::take(&self.workspace)?;
            let unmade = self.set_aside_new(&after, &known, &mut left);
            // A folder closed to its owner hides what lies in it from this
            // look, not from git, which needs only to enter it (`chmod
            // 311` over a `.git` made first): opened, and looked at again.
            let mut opened = false;
            for (path, _) in after.unreadable.iter().filter(changed) {
                if reopen(&self.workspace, path) {
                    left.reopened
                        .push(format!("`{}/`", Shown(&path.to_string_lossy())));
                    opened = true;
                }
            }
            if !(unmade || opened) || looks >= MAX_LOOKS_BACK {
                break after;
            }
        };
        for (path, _) in after.unreadable.iter().filter(changed) {
            left.unreadable
                .push(format!("`{}/`", Shown(&path.to_string_lossy())));
        }
        Ok(left)
    }

    /// Sets aside what `after` finds that was not here before (`known`,
    /// by [`Identity`]), naming each in `left`. Returns whether a folder
    /// stopped being a repository, whose insides were not looked at.
    fn set_aside_new(&self, after: &Self, known: &HashSet<Identity>, left: &mut Left) -> bool {
        // What the caller named and was not there, if it is now (and not
        // found by its name as well).
        let appeared = self
            .absent
            .iter()
            .filter(|path| !after.found.iter().any(|found| &found.path == *path))
            .filter_map(|path| {
                let meta = self.workspace.join(path).symlink_metadata().ok()?;
                Some(Found {
                    path: path.clone(),
                    dev: meta.dev(),
                    ino: meta.ino(),
                    dir: meta.is_dir(),
                    repository: false,
                    link: meta.is_symlink(),
                    born: born(&meta),
                })
            });
        // The root made a repository (`HEAD`, `objects/`, `refs/` and a
        // `config` written in a workspace that is no checkout): what made
        // it one is set aside, as in any folder.
        let root = (after.root_repository && !self.root_repository).then(|| Found {
            path: PathBuf::new(),
            dev: 0,
            ino: 0,
            dir: true,
            repository: true,
            link: false,
            born: None,
        });
        let mut unmade = false;
        for found in after.found.iter().cloned().chain(appeared).chain(root) {
            if !found.path.as_os_str().is_empty() && known.contains(&found.identity()) {
                continue;
            }
            if self
                .made_by
                .is_some_and(|made_by| made_after(&self.workspace, &found, made_by))
            {
                continue;
            }
            let set = if found.repository {
                set_aside_what_makes_a_repository(&self.workspace, &found)
            } else {
                set_aside(&self.workspace, &found).map(|()| vec![found.shown()])
            };
            match set {
                Ok(shown) => {
                    unmade |= found.repository && !shown.is_empty();
                    left.created.extend(shown);
                }
                Err(err) => {
                    tracing::error!(
                        "cannot set aside the control path {} a command created in `{}`: {err}",
                        found.shown(),
                        self.workspace.display()
                    );
                    left.created.push(found.shown());
                }
            }
        }
        unmade
    }
}

/// A census written down before a command runs ([`Census::recorded`]):
/// a zotbox that dies before the command ends takes nothing back, so the
/// next census of that workspace does it ([`Census::take_back_abandoned`]).
/// Written as a JSON `Value` the binary reads and writes already: a derived
/// serializer of its own cost the binary 50 KB it does not have under its
/// cap. Paths are written as text (one that is not UTF-8 is named wrongly,
/// and only its name is used, in a message).
struct Record {
    workspace: PathBuf,
    pid: u32,
    /// The latest change time (seconds since 1970) of what the command can
    /// make: it is killed at its deadline.
    made_by: i64,
    found: Vec<Found>,
    absent: Vec<PathBuf>,
    root_repository: bool,
}

impl Record {
    fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        let text = |path: &Path| Value::from(path.to_string_lossy().into_owned());
        let found = self.found.iter().map(|found| {
            Value::from(vec![
                text(&found.path),
                Value::from(found.dev),
                Value::from(found.ino),
                Value::from(found.dir),
                Value::from(found.repository),
                Value::from(found.link),
                found
                    .born
                    .map_or(Value::Null, |(secs, _)| Value::from(secs)),
                found
                    .born
                    .map_or(Value::Null, |(_, nanos)| Value::from(nanos)),
            ])
        });
        let mut record = serde_json::Map::new();
        record.insert("workspace".into(), text(&self.workspace));
        record.insert("pid".into(), Value::from(self.pid));
        record.insert("made_by".into(), Value::from(self.made_by));
        record.insert("found".into(), Value::from_iter(found));
        let absent = self.absent.iter().map(|path| text(path));
        record.insert("absent".into(), Value::from_iter(absent));
        record.insert("root_repository".into(), Value::from(self.root_repository));
        Value::Object(record)
    }

    fn from_json(record: &serde_json::Value) -> Option<Self> {
        let path = |value: &serde_json::Value| value.as_str().map(PathBuf::from);
        let found = record["found"].as_array()?.iter().map(|found| {
            Some(Found {
                path: path(&found[0])?,
                dev: found[1].as_u64()?,
                ino: found[2].as_u64()?,
                dir: found[3].as_bool()?,
                repository: found[4].as_bool()?,
                link: found[5].as_bool()?,
                born: match (found[6].as_i64(), found[7].as_u64()) {
                    (Some(secs), Some(nanos)) => Some((secs, u32::try_from(nanos).ok()?)),
                    _ => None,
                },
            })
        });
        Some(Self {
            workspace: path(&record["workspace"])?,
            pid: u32::try_from(record["pid"].as_u64()?).ok()?,
            made_by: record["made_by"].as_i64()?,
            found: found.collect::<Option<_>>()?,
            absent: record["absent"]
                .as_array()?
                .iter()
                .map(path)
                .collect::<Option<_>>()?,
            root_repository: record["root_repository"].as_bool()?,
        })
    }
}

/// A census written down until its command's take-back is done.
#[derive(Debug)]
pub struct Recorded {
    path: PathBuf,
}

impl Recorded {
    /// The take-back ran: the record is no longer needed. (A command whose
    /// zotbox died, or whose call was dropped, never gets here, and its
    /// record is taken back by the next census of its workspace.)
    pub fn done(self) {
        if let Err(err) = std::fs::remove_file(&self.path) {
            tracing::warn!("cannot remove `{}`: {err}", self.path.display());
        }
    }
}

impl Census {
    /// Writes this census down in `folder` (made private to the user),
    /// where no confined command reaches (`$ZOT_HOME` is covered, and so
    /// is the user's home it lies in), until [`Recorded::done`], for a
    /// command that may run for `lasts` at the most.
    ///
    /// # Errors
    ///
    /// When the folder or the record cannot be written.
    pub fn recorded(&self, folder: &Path, lasts: Duration) -> io::Result<Recorded> {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(folder)?;
        // Its deadline, and a margin for the kill and a clock's tick.
        let made_by = SystemTime::now()
            .checked_add(lasts.saturating_add(Duration::from_secs(5)))
            .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
            .and_then(|since| i64::try_from(since.as_secs()).ok())
            .unwrap_or(i64::MAX);
        let record = Record {
            workspace: self.workspace.clone(),
            pid: std::process::id(),
            made_by,
            found: self.found.clone(),
            absent: self.absent.clone(),
            root_repository: self.root_repository,
        };
        let bytes = serde_json::to_vec(&record.to_json()).map_err(io::Error::other)?;
        let file = tempfile::Builder::new()
            .prefix(&format!("{}-", record.pid))
            .suffix(".json")
            .tempfile_in(folder)?;
        std::io::Write::write_all(&mut file.as_file(), &bytes)?;
        let (_, path) = file.keep().map_err(|err| err.error)?;
        Ok(Recorded { path })
    }

    /// Whether `folder` holds any census record: most often none, and
    /// nothing needs taking back.
    pub fn any_recorded(folder: &Path) -> bool {
        std::fs::read_dir(folder).is_ok_and(|mut entries| entries.next().is_some())
    }

    /// Takes back, in `workspace`, what each command recorded in `folder`
    /// by a process that is gone left behind: set aside as
    /// [`Census::take_back`] does, but only what was made before that
    /// command's deadline (a repository the user cloned since is theirs).
    /// Returns what was set aside, per record.
    pub fn take_back_abandoned(folder: &Path, workspace: &Path) -> Vec<Left> {
        // One at a time: a host starting in the workspace and its first
        // command may both come here.
        static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
        let Ok(workspace) = workspace.canonicalize() else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir(folder) else {
            return Vec::new();
        };
        let mut taken = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(text) = crate::user_file::read_text(&path, MAX_RECORD_BYTES) else {
                continue;
            };
            let Some(record) = serde_json::from_str(&text)
                .ok()
                .and_then(|json| Record::from_json(&json))
            else {
                continue;
            };
            if record.workspace != workspace || process_lives(record.pid) {
                continue;
            }
            let census = Census {
                workspace: record.workspace,
                found: record.found,
                unreadable: Vec::new(),
                absent: record.absent,
                configured: Vec::new(),
                root_repository: record.root_repository,
                made_by: Some(record.made_by),
            };
            match census.take_back() {
                Ok(left) => {
                    let _ = std::fs::remove_file(&path);
                    if !left.created.is_empty() {
                        taken.push(Left {
                            created: left.created,
                            ..Left::default()
                        });
                    }
                }
                Err(err) => tracing::warn!(
                    "cannot take back what a command left in `{}`: {err}",
                    workspace.display()
                ),
            }
        }
        taken
    }
}

/// The most a census record is read (it names the control paths found).
const MAX_RECORD_BYTES: u64 = 16 * 1024 * 1024;

/// Whether process `pid` is this one or still running (a pid taken again
/// by another process counts as running: its record waits).
fn process_lives(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// What a control path a command created is renamed to, beside it: not a
/// name git, zot or shiro reads, and nothing lost should it have been
/// yours (a repository cloned in another terminal while the command ran).
pub const SET_ASIDE: &str = ".refused-by-zotbox";

/// Renames `found` to its name and [`SET_ASIDE`] (replacing nothing; with
/// `-2`, `-3`, … when taken), or removes it when no such name is free, if
/// the entry at its path is still the one found: the folders leading to it
/// are opened one by one without following a link, so a link swapped in by
/// another command cannot lead elsewhere, out of the workspace or onto a
/// control path that was there before.
fn set_aside(workspace: &Path, found: &Found) -> io::Result<()> {
    let components = normal_components(&found.path)?;
    let Some((name, parents)) = components.split_last() else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    let dir = open_folder(workspace, parents)?;
    let meta = dir.symlink_metadata(name)?;
    if meta.ino() != found.ino {
        return Err(io::Error::other("it was replaced while being set aside"));
    }
    rename_aside(&dir, name, meta.is_dir(), &found.shown())
}

/// For a folder git takes for a repository by what it holds (`HEAD` with
/// `objects` and `refs`, or with `commondir`), found new: its `HEAD` and
/// `commondir` are set aside, which makes it none, rather than the folder
/// (`src/`, made a repository by three files written in it, is the
/// user's). Returns what was set aside, shown.
/// Whether `found`, in `workspace`, was made after `made_by` (seconds
/// since 1970): by someone else than a command whose deadline that was.
/// When it was made, where the file system keeps it; else when it last
/// changed, which a later change in it also moves. For a folder made a
/// repository by what it holds, when what made it one was (an editor's
/// save in `src/` changes `src/`, not its `HEAD`).
fn made_after(workspace: &Path, found: &Found, made_by: i64) -> bool {
    let made = |path: &Path| {
        let meta = path.symlink_metadata().ok()?;
        Some(born(&meta).map_or(meta.ctime(), |(secs, _)| secs))
    };
    let path = workspace.join(&found.path);
    let when = if found.repository {
        ["HEAD", "commondir"]
            .iter()
            .filter_map(|sign| made(&path.join(sign)))
            .min()
    } else {
        made(&path)
    };
    when.is_some_and(|when| when > made_by)
}

fn set_aside_what_makes_a_repository(workspace: &Path, found: &Found) -> io::Result<Vec<String>> {
    let components = normal_components(&found.path)?;
    let dir = open_folder(workspace, &components)?;
    // The root is found by its path alone; any other folder must still be
    // the one found.
    if !components.is_empty() && dir.dir_metadata()?.ino() != found.ino {
        return Err(io::Error::other("it was replaced while being set aside"));
    }
    let mut names = Vec::new();
    for entry in dir.entries()? {
        let entry = entry?;
        let name = entry.file_name();
        let bytes = name.as_encoded_bytes();
        // git reads a `HEAD` or `commondir` that is no folder (a folder of
        // the user's called `head` stays where it is).
        let sign = bytes.eq_ignore_ascii_case(b"HEAD") || bytes.eq_ignore_ascii_case(b"commondir");
        if sign && !entry.file_type()?.is_dir() {
            names.push(name);
        }
    }
    names.sort();
    let mut shown = Vec::new();
    for name in names {
        let path = found.path.join(&name);
        let entry = format!("`{}`", Shown(&path.to_string_lossy()));
        rename_aside(&dir, &name, false, &entry)?;
        shown.push(entry);
    }
    Ok(shown)
}

/// The components of `path`, each a plain name.
fn normal_components(path: &Path) -> io::Result<Vec<&OsStr>> {
    path.components()
        .map(|component| match component {
            Component::Normal(name) => Ok(name),
            _ => Err(io::Error::from(io::ErrorKind::InvalidInput)),
        })
        .collect()
}

/// The folder at `components` below `workspace`, each opened without
/// following a link.
fn open_folder(workspace: &Path, components: &[&OsStr]) -> io::Result<Dir> {
    let mut dir = Dir::open_ambient_dir(workspace, cap_std::ambient_authority())?;
    for component in components {
        dir = open_dir_nofollow(&dir, *component)?;
    }
    Ok(dir)
}

/// Gives the owner back read, write and search on the folder at `path` in
/// `workspace`, when this process is that owner, and on every folder
/// closed so below it (`chmod 311` from the deepest up: one look per
/// level would stop at the looks' limit): what a command closed can then
/// be looked in, and what it made there set aside. The folders leading to
/// it are opened without following a link. Whether it did.
fn reopen(workspace: &Path, path: &Path) -> bool {
    use cap_std::fs::{Permissions, PermissionsExt as _};
    let Ok(components) = normal_components(path) else {
        return false;
    };
    let Some((name, parents)) = components.split_last() else {
        return false;
    };
    let Ok(parent) = open_folder(workspace, parents) else {
        return false;
    };
    let me = nix::unistd::geteuid().as_raw();
    // Opens `name` in `dir` when it is a folder of this user's that is not
    // open to them; whether it did.
    let open_up = |dir: &Dir, name: &OsStr| {
        let Ok(meta) = dir.symlink_metadata(name) else {
            return false;
        };
        let mode = meta.permissions().mode();
        if !meta.is_dir() || meta.uid() != me || mode & 0o700 == 0o700 {
            return false;
        }
        match dir.set_permissions(name, Permissions::from_mode(mode | 0o700)) {
            Ok(()) => true,
            Err(err) => {
                tracing::warn!("cannot open `{}` again: {err}", path.display());
                false
            }
        }
    };
    if !open_up(&parent, name) {
        return false;
    }
    // Below it, as far as the census would walk.
    let mut pending = vec![(std::sync::Arc::new(parent), name.to_os_string())];
    let mut seen = 0;
    while let Some((dir, name)) = pending.pop() {
        let Ok(folder) = open_dir_nofollow(&dir, &name) else {
            continue;
        };
        let Ok(entries) = folder.entries() else {
            continue;
        };
        let folder = std::sync::Arc::new(folder);
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_FOLDERS {
                return true;
            }
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                let name = entry.file_name();
                open_up(&folder, &name);
                pending.push((std::sync::Arc::clone(&folder), name));
            }
        }
    }
    true
}

/// Renames `name` in `dir` to its name and [`SET_ASIDE`] (see
/// [`set_aside`]); `shown` names it in a warning.
fn rename_aside(dir: &Dir, name: &OsStr, folder: bool, shown: &str) -> io::Result<()> {
    for attempt in 1..=9 {
        let mut aside = name.to_os_string();
        aside.push(SET_ASIDE);
        if attempt > 1 {
            aside.push(format!("-{attempt}"));
        }
        let renamed = nix::fcntl::renameat2(
            dir,
            name,
            dir,
            aside.as_os_str(),
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        );
        match renamed {
            Ok(()) => return Ok(()),
            Err(nix::errno::Errno::EEXIST) => {}
            Err(err) => {
                tracing::warn!("cannot rename {shown}: {err}; removing it");
                break;
            }
        }
    }
    if folder {
        dir.remove_dir_all(name)
    } else {
        dir.remove_file(name)
    }
}

/// The folders each workspace held when last walked by this process.
static TREES: LazyLock<Mutex<HashMap<PathBuf, Tree>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The folders of one workspace, by path relative to it.
#[derive(Debug, Default)]
struct Tree {
    folders: HashMap<PathBuf, Folder>,
    unreadable: Vec<Unreadable>,
}

/// What identifies a folder's state: it, and its change time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Stamp {
    dev: u64,
    ino: u64,
    ctime: i64,
    ctime_nsec: i64,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            ctime: meta.ctime(),
            ctime_nsec: meta.ctime_nsec(),
        }
    }

    /// Whether the folder last changed at least [`SETTLE`] before `now`
    /// (seconds since the epoch).
    fn settled(&self, now: Duration) -> bool {
        let nanos = u32::try_from(self.ctime_nsec).unwrap_or(0);
        let Ok(secs) = u64::try_from(self.ctime) else {
            return true;
        };
        Duration::new(secs, nanos).saturating_add(SETTLE) <= now
    }
}

/// One folder's entries that matter here.
#[derive(Debug)]
struct Folder {
    stamp: Stamp,
    born: Option<Born>,
    /// Whether `stamp` can be trusted to show the next change.
    settled: bool,
    /// Subfolders to walk (not links, not control paths).
    subfolders: Vec<OsString>,
    /// Entries named as control paths.
    controls: Vec<Control>,
    /// Whether the folder is a git repository whatever its name (a bare
    /// one, `remote.git/`, or one a `.git` file names): it holds `HEAD`,
    /// and `objects/` and `refs/` or a `commondir`, git's own test
    /// ([`Signs`]). git runs its hooks (a push to it runs
    /// `hooks/post-receive`) and reads its `config`.
    repository: bool,
}

/// An entry of a folder named as a control path.
#[derive(Debug)]
struct Control {
    name: OsString,
    ino: u64,
    dir: bool,
    link: bool,
    born: Option<Born>,
}

/// Why a walk stopped.
enum Refresh {
    Workspace(io::Error),
    TooLarge,
}

impl Tree {
    /// Walks `root` again, reading only the folders that changed.
    fn refresh(&mut self, root: &Path) -> Result<(), Refresh> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut before = std::mem::take(&mut self.folders);
        self.unreadable.clear();
        let mut todo = vec![PathBuf::new()];
        while let Some(relative) = todo.pop() {
            if self.folders.len() >= MAX_FOLDERS {
                return Err(Refresh::TooLarge);
            }
            let path = root.join(&relative);
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.is_dir() => meta,
                // Gone, or replaced, since its parent was read.
                Ok(_) => continue,
                Err(err) if err.kind() == io::ErrorKind::NotFound && relative.as_os_str() != "" => {
                    continue;
                }
                Err(err) => {
                    if relative.as_os_str().is_empty() {
                        return Err(Refresh::Workspace(err));
                    }
                    // Too deep a path to name: what lies below it cannot
                    // be seen at all, so it never counts as unchanged.
                    let parent = relative.parent().and_then(|p| self.folders.get(p));
                    let stamp = parent
                        .filter(|_| err.raw_os_error() != Some(nix::libc::ENAMETOOLONG))
                        .map(|folder| folder.stamp);
                    self.unreadable.push((relative, stamp));
                    continue;
                }
            };
            let stamp = Stamp::of(&meta);
            let mut folder = match before.remove(&relative) {
                Some(folder) if folder.settled && folder.stamp == stamp => folder,
                _ => match Folder::read(&path, stamp, born(&meta)) {
                    Ok(folder) => folder,
                    Err(err) => {
                        if relative.as_os_str().is_empty() {
                            return Err(Refresh::Workspace(err));
                        }
                        // Another user's folder this process cannot even
                        // enter (a container's volume): a command, with
                        // the same rights, could neither reach below it
                        // nor open it up.
                        if reachable(&path, &meta) {
                            self.unreadable.push((relative, Some(stamp)));
                        }
                        continue;
                    }
                },
            };
            folder.settled = stamp.settled(now);
            todo.extend(folder.subfolders.iter().map(|name| relative.join(name)));
            self.folders.insert(relative, folder);
        }
        Ok(())
    }

    /// What this tree, of `workspace`, holds.
    fn census(&self, workspace: PathBuf) -> Census {
        let mut found: Vec<Found> = self
            .folders
            .iter()
            .flat_map(|(relative, folder)| {
                let repository =
                    (folder.repository && !relative.as_os_str().is_empty()).then(|| Found {
                        path: relative.clone(),
                        dev: folder.stamp.dev,
                        ino: folder.stamp.ino,
                        dir: true,
                        repository: true,
                        link: false,
                        born: folder.born,
                    });
                let controls = folder.controls.iter().map(move |control| Found {
                    path: relative.join(&control.name),
                    dev: folder.stamp.dev,
                    ino: control.ino,
                    dir: control.dir,
                    repository: false,
                    link: control.link,
                    born: control.born,
                });
                repository.into_iter().chain(controls)
            })
            .collect();
        found.sort_by(|a, b| a.path.cmp(&b.path));
        let mut unreadable = self.unreadable.clone();
        unreadable.sort_by(|a, b| a.0.cmp(&b.0));
        let root_repository = self
            .folders
            .get(Path::new(""))
            .is_some_and(|root| root.repository);
        Census {
            workspace,
            found,
            unreadable,
            absent: Vec::new(),
            configured: Vec::new(),
            root_repository,
            made_by: None,
        }
    }
}

impl Folder {
    fn read(path: &Path, stamp: Stamp, born: Option<Born>) -> io::Result<Self> {
        let mut subfolders = Vec::new();
        let mut controls = Vec::new();
        let mut signs = Signs::default();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            let name = entry.file_name();
            let kind = entry.file_type()?;
            signs.note(&name, Kind::new(kind.is_symlink(), kind.is_dir()));
            if is_control(&name) {
                // Not walked: the entry is bound or set aside whole.
                // One look more for the few such entries: when it was made.
                let born = entry.metadata().ok().as_ref().and_then(self::born);
                controls.push(Control {
                    ino: entry.ino(),
                    dir: kind.is_dir(),
                    link: kind.is_symlink(),
                    born,
                    name,
                });
            } else if kind.is_dir() {
                subfolders.push(name);
            }
        }
        let repository = signs.repository();
        if repository {
            // Not walked either: it is bound or set aside whole.
            subfolders.clear();
        }
        Ok(Self {
            stamp,
            born,
            settled: false,
            subfolders,
            controls,
            repository,
        })
    }
}

/// Whether a command running as this process's user could change what is
/// in the folder: it owns it (and so may open it up), or may enter it.
fn reachable(path: &Path, meta: &std::fs::Metadata) -> bool {
    meta.uid() == nix::unistd::geteuid().as_raw()
        || nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok()
}

/// Whether `name` is a control path's name, ASCII case-insensitively (a
/// case-insensitive filesystem opens `.GIT` as `.git`), as the fs
/// capability compares them.
fn is_control(name: &OsStr) -> bool {
    CONTROL_PATHS.iter().any(|control| {
        name.as_encoded_bytes()
            .eq_ignore_ascii_case(control.as_bytes())
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn census(dir: &Path) -> Census {
        Census::take(dir).unwrap()
    }

    fn paths(census: &Census) -> Vec<String> {
        census
            .found
            .iter()
            .map(|found| found.path.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn control_paths_are_found_at_any_depth_and_not_walked_into() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for folder in [".git/objects/x/.git", "a/b/c/.zot", "a/.SHIRO", "d/e"] {
            std::fs::create_dir_all(root.join(folder)).unwrap();
        }
        std::fs::write(root.join("d/e/.git"), "gitdir: ../../.git\n").unwrap();
        // A link is not followed: what it leads to is not in the workspace.
        std::os::unix::fs::symlink(root.join("a"), root.join("link")).unwrap();
        let found = census(root);
        assert_eq!(
            paths(&found),
            [".git", "a/.SHIRO", "a/b/c/.zot", "d/e/.git"]
        );
        let nested: Vec<PathBuf> = found.nested().collect();
        let root = root.canonicalize().unwrap();
        assert_eq!(
            nested,
            [
                root.join("a/.SHIRO"),
                root.join("a/b/c/.zot"),
                root.join("d/e/.git")
            ]
        );
    }

    #[test]
    fn what_appears_later_is_set_aside_and_what_was_there_stays() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("sub/.git")).unwrap();
        std::fs::write(root.join("sub/.git/config"), "[core]\n").unwrap();
        let before = census(root);
        // What a command does: a new repository two levels down, a gitfile,
        // a link named `.zot`, and the old repository moved (kept).
        std::fs::create_dir_all(root.join("new/deep/.git/hooks")).unwrap();
        std::fs::create_dir(root.join("file")).unwrap();
        std::fs::write(root.join("file/.git"), "gitdir: /elsewhere\n").unwrap();
        std::os::unix::fs::symlink("/", root.join("file/.zot")).unwrap();
        std::fs::rename(root.join("sub"), root.join("moved")).unwrap();
        let left = before.take_back().unwrap();
        assert_eq!(
            left.created,
            ["`file/.git`", "`file/.zot`", "`new/deep/.git/`"]
        );
        assert!(left.unreadable.is_empty());
        assert!(!root.join("new/deep/.git").exists());
        assert!(root.join("new/deep/.git.refused-by-zotbox/hooks").is_dir());
        assert_eq!(
            std::fs::read_to_string(root.join("file/.git.refused-by-zotbox")).unwrap(),
            "gitdir: /elsewhere\n"
        );
        assert!(
            std::fs::symlink_metadata(root.join("file/.zot.refused-by-zotbox"))
                .unwrap()
                .is_symlink()
        );
        assert!(std::fs::symlink_metadata(root.join("file/.zot")).is_err());
        assert!(!root.join("file/.git").exists());
        assert_eq!(
            std::fs::read_to_string(root.join("moved/.git/config")).unwrap(),
            "[core]\n"
        );
        // Looked at again, nothing more is left.
        assert!(census(root).take_back().unwrap().is_empty());
    }

    /// Makes the kept folder at `relative` carry its current time, as
    /// if the change since it was read had not moved it (a coarse clock).
    fn as_if_unchanged(root: &Path, relative: &str) {
        let root = root.canonicalize().unwrap();
        let stamp = Stamp::of(&std::fs::symlink_metadata(root.join(relative)).unwrap());
        let mut trees = TREES.lock().unwrap();
        let folder = trees
            .get_mut(&root)
            .and_then(|tree| tree.folders.get_mut(Path::new(relative)))
            .unwrap();
        folder.stamp = stamp;
    }

    #[test]
    fn a_repository_of_any_name_is_a_control_path() {
        // A bare repository (`git init --bare`): git runs its hooks when
        // the user pushes to it. Attack: one a command creates, and a hook
        // written into one that was there.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for folder in [
            "fixtures/remote.git/objects",
            "fixtures/remote.git/refs/heads",
            "docs/refs",
        ] {
            std::fs::create_dir_all(root.join(folder)).unwrap();
        }
        std::fs::write(
            root.join("fixtures/remote.git/HEAD"),
            "ref: refs/heads/main\n",
        )
        .unwrap();
        // Control: a folder with only some of the three is not one.
        std::fs::write(root.join("docs/HEAD"), "a heading").unwrap();
        let before = census(root);
        assert_eq!(paths(&before), ["fixtures/remote.git"]);
        let root_canonical = root.canonicalize().unwrap();
        assert_eq!(
            before.nested().collect::<Vec<_>>(),
            [root_canonical.join("fixtures/remote.git")]
        );
        for folder in ["made.git/objects", "made.git/refs"] {
            std::fs::create_dir_all(root.join(folder)).unwrap();
        }
        std::fs::write(root.join("made.git/HEAD"), "ref: refs/heads/main\n").unwrap();
        // Attack: git's test follows links (`objects` may lead anywhere),
        // and a linked worktree's folder looks for `objects/` and `refs/`
        // where its `commondir` points, whose `config` git then reads.
        for folder in ["linked", "tree", "store/objects", "store/refs"] {
            std::fs::create_dir_all(root.join(folder)).unwrap();
        }
        for name in ["objects", "refs"] {
            std::os::unix::fs::symlink("/usr", root.join("linked").join(name)).unwrap();
        }
        std::fs::write(root.join("store/config"), "[core]\n\tfsmonitor = x\n").unwrap();
        for folder in ["linked", "tree"] {
            std::fs::write(root.join(folder).join("HEAD"), "ref: refs/heads/main\n").unwrap();
        }
        std::fs::write(root.join("tree/commondir"), "../store\n").unwrap();
        // What makes each one is set aside, not the folder.
        assert_eq!(
            before.take_back().unwrap().created,
            [
                "`linked/HEAD`",
                "`made.git/HEAD`",
                "`tree/HEAD`",
                "`tree/commondir`"
            ]
        );
        assert!(root.join("made.git/HEAD.refused-by-zotbox").is_file());
        assert!(root.join("made.git/objects").is_dir());
        assert!(root.join("fixtures/remote.git/HEAD").is_file());
        assert!(census(root).take_back().unwrap().is_empty());
    }

    /// `before` written down in `records` as a command's whose process is
    /// gone, its deadline at `made_by`.
    fn abandoned(before: &Census, records: &Path, made_by: i64) -> Recorded {
        let recorded = before.recorded(records, Duration::from_secs(30)).unwrap();
        let json = serde_json::from_slice(&std::fs::read(&recorded.path).unwrap()).unwrap();
        let mut record = Record::from_json(&json).unwrap();
        record.pid = u32::MAX;
        record.made_by = made_by;
        let json = serde_json::to_vec(&record.to_json()).unwrap();
        std::fs::write(&recorded.path, json).unwrap();
        recorded
    }

    /// A command whose zotbox died left a `.git`; the next command's census
    /// takes it back from the record, once no process of the record's is
    /// alive, and only what was made before that command's deadline: a
    /// repository cloned since is someone else's.
    #[test]
    fn what_a_command_whose_zotbox_died_left_is_taken_back_from_its_record() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        let records = dir.path().join("records");
        std::fs::create_dir_all(root.join("lib")).unwrap();
        let before = census(&root);
        // Its own process's record waits: the command may still run.
        let recorded = before.recorded(&records, Duration::from_secs(30)).unwrap();
        std::fs::create_dir_all(root.join("lib/.git")).unwrap();
        assert!(Census::take_back_abandoned(&records, &root).is_empty());
        assert!(root.join("lib/.git").is_dir());
        recorded.done();
        // Records of a process that is gone.
        let abandoned = |made_by: i64| abandoned(&before, &records, made_by);
        // A deadline long past: the `.git` is newer, someone else's.
        let recorded = abandoned(1);
        assert!(Census::take_back_abandoned(&records, &root).is_empty());
        assert!(root.join("lib/.git").is_dir());
        assert!(!recorded.path.exists());
        let recorded = abandoned(i64::MAX);
        let taken = Census::take_back_abandoned(&records, &root);
        assert_eq!(
            taken
                .iter()
                .map(|left| left.created.clone())
                .collect::<Vec<_>>(),
            [vec!["`lib/.git/`".to_owned()]]
        );
        assert!(root.join("lib/.git.refused-by-zotbox").is_dir());
        // Taken back once: the record is gone.
        assert!(!recorded.path.exists());
    }

    /// Attack: the workspace brings `vendor/.git` as a link (to a
    /// repository elsewhere in it, which is bound read-only; the link is
    /// not); the command removes the link and makes a repository there,
    /// which ext4 gives the link's freed inode at once. Counted as there
    /// before by its inode, it stayed. The inode is forced here, as ext4
    /// gives it when nothing else took it first.
    #[test]
    fn a_control_path_made_where_a_link_was_is_set_aside_though_it_took_its_inode() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("vendor")).unwrap();
        std::fs::create_dir_all(root.join("vgit")).unwrap();
        for link in ["vendor/.git", "docs/.zot"] {
            std::fs::create_dir_all(root.join(link).parent().unwrap()).unwrap();
            std::os::unix::fs::symlink("../vgit", root.join(link)).unwrap();
        }
        let mut before = census(root);
        std::fs::remove_file(root.join("vendor/.git")).unwrap();
        std::fs::create_dir(root.join("vendor/.git")).unwrap();
        std::fs::write(root.join("vendor/.git/config"), "[core]\n\tfsmonitor = x\n").unwrap();
        std::fs::remove_file(root.join("docs/.zot")).unwrap();
        std::os::unix::fs::symlink("../vendor", root.join("docs/.zot")).unwrap();
        for (path, meta) in [
            ("vendor/.git", root.join("vendor/.git").metadata().unwrap()),
            (
                "docs/.zot",
                root.join("docs/.zot").symlink_metadata().unwrap(),
            ),
        ] {
            let found = before
                .found
                .iter_mut()
                .find(|found| found.path == Path::new(path))
                .unwrap();
            found.ino = meta.ino();
        }
        // A link that took a link's inode differs by when it was made,
        // where the file system keeps that (ext4 and tmpfs do).
        let link_born = born(&root.join("docs/.zot").symlink_metadata().unwrap());
        let left = before.take_back().unwrap();
        let mut expected = vec!["`vendor/.git/`".to_owned()];
        if link_born.is_some() {
            expected.insert(0, "`docs/.zot`".to_owned());
        }
        assert_eq!(left.created, expected);
        assert!(root.join("vendor/.git.refused-by-zotbox/config").is_file());
    }

    /// Attack: a command whose zotbox died made `src/` a repository; an
    /// editor's save in `src/` after its deadline moved the folder's change
    /// time past it, and the take-back from its record took the repository
    /// for someone else's. What made it one was made before the deadline.
    #[test]
    fn a_later_save_in_a_folder_made_a_repository_does_not_spare_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        let records = dir.path().join("records");
        std::fs::create_dir_all(root.join("src")).unwrap();
        let before = census(&root);
        let src = root.join("src");
        std::fs::write(src.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::create_dir(src.join("objects")).unwrap();
        std::fs::create_dir(src.join("refs")).unwrap();
        let deadline = src.join("HEAD").symlink_metadata().unwrap().ctime();
        // The save, a second later: the folder changes, its `HEAD` not.
        // (Saved again until the file system's coarser clock has moved on.)
        for _ in 0..100 {
            std::fs::write(src.join("main.rs.tmp"), "fn main() {}\n").unwrap();
            std::fs::rename(src.join("main.rs.tmp"), src.join("main.rs")).unwrap();
            if src.metadata().unwrap().ctime() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(src.metadata().unwrap().ctime() > deadline);
        abandoned(&before, &records, deadline);
        let taken = Census::take_back_abandoned(&records, &root);
        assert_eq!(
            taken
                .iter()
                .map(|left| left.created.clone())
                .collect::<Vec<_>>(),
            [vec!["`src/HEAD`".to_owned()]]
        );
        assert!(!src.join("HEAD").exists());
    }

    /// Attack: a command makes a folder of the user's (`src/`), or the
    /// workspace itself where it is no checkout, a repository git uses
    /// from every folder below: a `HEAD`, `objects` and `refs` (executable
    /// files pass git's test as folders do) and a `config` whose pager the
    /// user's next `git branch` runs. Neither was seen; now what makes
    /// each a repository is set aside, and the folder stays.
    #[test]
    fn a_folder_or_the_root_made_a_repository_loses_its_head() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("src")).unwrap();
        std::fs::write(root.join("src/main.rs"), "fn main() {}\n").unwrap();
        let before = census(root);
        for folder in ["src", ""] {
            let folder = root.join(folder);
            std::fs::write(folder.join("HEAD"), "ref: refs/heads/main\n").unwrap();
            std::fs::write(folder.join("config"), "[core]\n\tpager = touch pwned\n").unwrap();
            for name in ["objects", "refs"] {
                std::fs::write(folder.join(name), "").unwrap();
                std::fs::set_permissions(folder.join(name), std::fs::Permissions::from_mode(0o755))
                    .unwrap();
            }
        }
        // The root first: inside a repository nothing is walked, so `src/`
        // is found on the next look, once the root is none.
        assert_eq!(
            before.take_back().unwrap().created,
            ["`HEAD`", "`src/HEAD`"]
        );
        for folder in [root.join("src"), root.to_owned()] {
            assert!(!folder.join("HEAD").exists());
            assert!(folder.join("HEAD.refused-by-zotbox").is_file());
        }
        assert!(root.join("src/main.rs").is_file());
    }

    #[test]
    fn a_named_control_path_that_appears_is_set_aside() {
        // A file git's configuration includes when it exists: a command
        // creating it is caught though its name is nothing special.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("conf")).unwrap();
        std::fs::write(root.join("there.gitconfig"), "[user]\n").unwrap();
        let named = ["conf/local.gitconfig", "there.gitconfig", "never.gitconfig"];
        let before = census(root).watching(named.map(PathBuf::from));
        std::fs::write(root.join("conf/local.gitconfig"), "[core]\n").unwrap();
        // Control: one that was there is the jail's to bind, not this.
        std::fs::write(root.join("there.gitconfig"), "[user]\n\tname = x\n").unwrap();
        assert_eq!(
            before.take_back().unwrap().created,
            ["`conf/local.gitconfig`"]
        );
        assert!(!root.join("conf/local.gitconfig").exists());
        assert!(
            root.join("conf/local.gitconfig.refused-by-zotbox")
                .is_file()
        );
        assert!(root.join("there.gitconfig").is_file());
    }

    #[test]
    fn setting_aside_replaces_nothing() {
        // Attack: a file waiting under the name a `.git` is set aside to,
        // and one under the next.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("a")).unwrap();
        for taken in [".git.refused-by-zotbox", ".git.refused-by-zotbox-2"] {
            std::fs::write(root.join("a").join(taken), "kept").unwrap();
        }
        let before = census(root);
        std::fs::create_dir_all(root.join("a/.git/objects")).unwrap();
        assert_eq!(before.take_back().unwrap().created, ["`a/.git/`"]);
        for taken in [".git.refused-by-zotbox", ".git.refused-by-zotbox-2"] {
            assert_eq!(
                std::fs::read_to_string(root.join("a").join(taken)).unwrap(),
                "kept"
            );
        }
        assert!(root.join("a/.git.refused-by-zotbox-3/objects").is_dir());
        assert!(!root.join("a/.git").exists());
    }

    #[test]
    fn a_change_within_the_same_clock_tick_is_seen() {
        // Attack: a `.git` made in the tick the folder last changed in, so
        // its change time does not move. A folder that changed recently is
        // read again whatever its time says.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("a")).unwrap();
        let before = census(root);
        std::fs::create_dir(root.join("a/.git")).unwrap();
        as_if_unchanged(root, "a");
        assert_eq!(before.take_back().unwrap().created, ["`a/.git/`"]);
        std::fs::create_dir(root.join("a/.git")).unwrap();
        // A folder that settled long ago is trusted, and not read again.
        let before = census(root);
        std::fs::create_dir(root.join("a/.zot")).unwrap();
        as_if_unchanged(root, "a");
        {
            let mut trees = TREES.lock().unwrap();
            let tree = trees.get_mut(&root.canonicalize().unwrap()).unwrap();
            tree.folders.get_mut(Path::new("a")).unwrap().settled = true;
        }
        assert!(before.take_back().unwrap().is_empty());
        // Trusted once, it is read again on the next look: it changed
        // within the settling time of that look.
        assert_eq!(paths(&census(root)), ["a/.git", "a/.zot"]);
    }

    #[test]
    fn stamps_settle_after_a_while() {
        let stamp = Stamp {
            dev: 1,
            ino: 2,
            ctime: 100,
            ctime_nsec: 500,
        };
        assert!(!stamp.settled(Duration::new(100, 500)));
        assert!(!stamp.settled(Duration::new(102, 0)));
        assert!(stamp.settled(Duration::new(103, 500)));
        assert!(stamp.settled(Duration::new(1_000, 0)));
    }

    #[test]
    fn a_folder_made_unreadable_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let before = census(root);
        std::fs::create_dir_all(root.join("hid\x1b[2Jden/.git")).unwrap();
        let hidden = root.join("hid\x1b[2Jden");
        std::fs::set_permissions(&hidden, std::os::unix::fs::PermissionsExt::from_mode(0o000))
            .unwrap();
        let left = before.take_back();
        std::fs::set_permissions(&hidden, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let left = left.unwrap();
        // As root every folder can be read: the `.git` is found instead.
        if nix::unistd::geteuid().is_root() {
            assert_eq!(left.created, ["`hid\\u{1b}[2Jden/.git/`"]);
        } else {
            assert_eq!(left.unreadable, ["`hid\\u{1b}[2Jden/`"]);
        }
    }

    /// Attack (by an ordinary user's command; root reads every folder):
    /// a `.git` made in a folder then closed to its owner (`chmod 311`).
    /// The census could not look in, so named the folder unreadable and
    /// left the `.git`, which git (needing only to enter the folder) used:
    /// the user's next `git status` there ran its `core.fsmonitor`. The
    /// folder is opened again and the `.git` set aside. As root the test
    /// runs itself again as `nobody`, through `setpriv`.
    #[test]
    fn a_folder_closed_to_its_owner_is_opened_and_what_it_hid_set_aside() {
        const AS_NOBODY: &str = "ZOTBOX_TEST_AS_NOBODY";
        if nix::unistd::geteuid().is_root() {
            use std::os::unix::fs::PermissionsExt as _;
            // A copy of this test binary `nobody` can run, wherever the
            // build lies, and a temporary folder it can write in.
            let open = tempfile::tempdir().unwrap();
            std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
            let this = open.path().join("census-test");
            std::fs::copy(std::env::current_exe().unwrap(), &this).unwrap();
            let run = std::process::Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(&this)
                .env("TMPDIR", open.path())
                .args([
                    "--exact",
                    "capability::confine::census::tests::a_folder_closed_to_its_owner_is_opened_and_what_it_hid_set_aside",
                    "--nocapture",
                ])
                .env(AS_NOBODY, "1")
                .output()
                .unwrap();
            let out = String::from_utf8_lossy(&run.stdout);
            assert!(
                run.status.success() && out.contains("1 passed"),
                "as nobody: {out}\n{}",
                String::from_utf8_lossy(&run.stderr)
            );
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::create_dir(root.join("newdir")).unwrap();
        // A folder closed before the command ran is the user's: left so.
        std::fs::create_dir(root.join("kept")).unwrap();
        std::fs::set_permissions(root.join("kept"), std::fs::Permissions::from_mode(0o311))
            .unwrap();
        let before = census(root);
        std::fs::create_dir_all(root.join("newdir/sub/.git")).unwrap();
        std::fs::write(root.join("newdir/sub/.git/config"), "[core]\n").unwrap();
        std::fs::set_permissions(
            root.join("newdir/sub"),
            std::fs::Permissions::from_mode(0o311),
        )
        .unwrap();
        // Ten closed one inside the other, from the deepest up: more than
        // the looks back, one a level.
        let deep: PathBuf = (1..=10).map(|level| format!("a{level}")).collect();
        std::fs::create_dir_all(root.join(&deep).join(".git")).unwrap();
        for level in (1..=10).rev() {
            let folder: PathBuf = (1..=level).map(|l| format!("a{l}")).collect();
            std::fs::set_permissions(root.join(folder), std::fs::Permissions::from_mode(0o311))
                .unwrap();
        }
        let left = before.take_back().unwrap();
        let kept = root.join("kept").metadata().unwrap().permissions().mode();
        std::fs::set_permissions(root.join("kept"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        assert_eq!(left.reopened, ["`a1/`", "`newdir/sub/`"]);
        assert_eq!(
            left.created,
            [
                format!("`{}/.git/`", deep.display()),
                "`newdir/sub/.git/`".to_owned()
            ]
        );
        assert!(left.unreadable.is_empty(), "{left:?}");
        assert!(
            root.join("newdir/sub/.git.refused-by-zotbox/config")
                .is_file()
        );
        assert!(root.join(&deep).join(".git.refused-by-zotbox").is_dir());
        assert_eq!(kept & 0o777, 0o311);
    }

    #[test]
    fn a_folder_too_deep_to_name_is_named_every_time() {
        // Attack: a `.git` below a path longer than the kernel opens by
        // name, made with relative opens. Nothing below it can be seen, so
        // it is named whether it changed or not.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let long = "d".repeat(250);
        let mut deep = Dir::open_ambient_dir(root, cap_std::ambient_authority()).unwrap();
        for _ in 0..20 {
            deep.create_dir(&long).unwrap();
            deep = deep.open_dir(&long).unwrap();
        }
        let before = census(root);
        deep.create_dir(".git").unwrap();
        let left = before.take_back().unwrap();
        assert!(left.created.is_empty());
        assert_eq!(left.unreadable.len(), 1, "{left:?}");
        let shown = &left.unreadable[0];
        assert!(
            shown.starts_with(&format!("`{long}/")) && shown.ends_with("/`"),
            "{shown}"
        );
        assert_eq!(census(root).take_back().unwrap(), left);
    }
}
