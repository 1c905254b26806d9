//! Workspace files through a jail: the `zot:host/fs` interface.
//!
//! Every access is relative to the workspace root, opened once as a cap-std
//! [`Dir`]. A call goes through four steps, and each one can refuse:
//!
//! 1. **Lexical check** of the path as written: not empty, no NUL, no `\`,
//!    not absolute, no `..` component at all (simplest and safe: nothing to
//!    normalise, nothing to get wrong). The refusal says why: a `..` that
//!    climbs above the root "may not leave the workspace"; one that stays
//!    inside is refused by the grant when the path it names is not granted
//!    (with the grant's message), and otherwise for being a `..`.
//! 2. **Grant check** of the path as written against the read or write globs,
//!    before the file system is touched (so an ungranted path cannot even be
//!    probed for existence).
//! 3. **Resolution** inside the jail: the path is walked one component at a
//!    time, symlinks are expanded by hand, and one that leads outside the root
//!    (an absolute target elsewhere, `/proc/self/root`, too many `..`) is
//!    refused. The grant is checked again on the resolved path, so a granted
//!    folder holding a symlink to an ungranted file does not leak it.
//! 4. **Open** by walking the *resolved* components from the root with
//!    `O_NOFOLLOW` opens (directories with `O_DIRECTORY`, the final file with
//!    `O_NONBLOCK` so a FIFO cannot block), then comparing each opened
//!    handle's device and inode with what the directory holds under that
//!    name. A component swapped for a symlink after step 3 fails to open or
//!    fails the comparison, so the grant checked is the file used. Only
//!    regular files are read or written; FIFOs, sockets and devices are
//!    refused after `fstat` on the opened handle.
//! 5. **Control paths** are never written, whatever the grant says
//!    (`THREATS.md` rule 3: a write grant of `**` means "the project's
//!    files", never "the configuration"). A component named `.git`, `.zot`
//!    or `.shiro` at any depth (nested repositories and submodules have
//!    their own `.git`; a file named `.git` is a gitfile), compared ASCII
//!    case-insensitively (a case-folding file system opens `.GIT` as
//!    `.git`), and every folder the jail is given as [`ControlPaths`]
//!    (`$ZOT_HOME` and every extension's folder when they lie inside the
//!    workspace, the policy files) are refused for writing, and so is every
//!    folder git takes for a repository whatever its name (a bare
//!    `fixtures/remote.git/`, whose hooks run on a push to it, or the one a
//!    nested `.git` file names; `repository::Signs`, checked on each
//!    folder the walk opens), as is a file that would make one (a `HEAD`
//!    beside `objects/` and `refs/`), and what a repository's
//!    configuration names in the workspace (its hooks folder, included
//!    files, programs) with the files its hooks run there: the
//!    configuration of the repository the root is or lies in, and of every
//!    repository nested in the workspace when the first write came (a
//!    bare one's too: a push to it runs its hooks), each read again
//!    whenever it changed, and that of one nested since, each time the
//!    walk passes through its working tree. Both the path as written and
//!    the resolved path are checked, so a symlink
//!    `out -> .git` does not reach `.git/config`. Every operation that
//!    changes the tree (today `write`, which also creates; any future
//!    rename or delete) is a mutating `Op` and passes this check. Reads
//!    of control paths stay governed by the read grant, except for the
//!    **secret** ones ([`ControlPaths::with_secrets`]: all of `$ZOT_HOME`
//!    when it lies inside the workspace, with the user's secret values and
//!    signing keys and zot's credentials), which no operation reaches: not
//!    read, listed or described.
//! 6. **Hard links**: a regular file with more than one link is neither
//!    read nor written, checked with `fstat` on the opened handle. The jail
//!    checks names, and a hard link is a second name for a file whose
//!    other name may lie outside the workspace (a link to `~/.ssh/id_ed25519`
//!    or a user's other extension), or inside it under a control path: the
//!    name in the workspace says nothing about what the file is. Refusing
//!    reads as well costs little: git checkouts never create hard links, so
//!    a project's own files have one link. What it does cost, and why it is
//!    still right: build trees that hard-link artifacts (`cargo`'s
//!    `target/`) and package stores that hard-link into the workspace
//!    (`pnpm`'s `node_modules`) are refused; those links really are names
//!    of files that live elsewhere.
//! 7. **Every refusal is a [`CapabilityError::Denied`]**, whichever layer
//!    caught it: an escape caught by cap-std (`a path led outside of the
//!    filesystem`) and `EACCES`/`EPERM` from the kernel are refusals, not
//!    failures of an allowed use, so the audit log records them as `deny`.
//!
//! The methods are synchronous; async callers wrap them in
//! `tokio::task::spawn_blocking`.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use cap_std::fs::{Dir, Metadata as CapMetadata, MetadataExt, OpenOptions, OpenOptionsExt};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use nix::libc;

use super::repository::config::Named;
use super::repository::{Kept, Signs};
use super::{Capability, CapabilityError, granted_list};

/// Default cap on a file read: 10 MiB.
pub const DEFAULT_MAX_READ: u64 = 10 * 1024 * 1024;
/// Default cap on a file write: 10 MiB.
pub const DEFAULT_MAX_WRITE: u64 = 10 * 1024 * 1024;
/// How many symlinks one resolution may expand before it gives up (as Linux's `ELOOP`).
const MAX_SYMLINKS: usize = 40;

/// Which workspace paths an extension may read and write, as globs.
///
/// Globs are relative to the workspace root and use `/`; `*` and `?` stay
/// within one component, `**` spans any number of them. A glob `dir/**` also
/// grants `dir` itself, so the folder can be listed and described; only a
/// glob that is exactly `**` grants the workspace root. Read and write are
/// separate: a write glob does not imply read. An empty grant allows nothing.
#[derive(Debug, Clone)]
pub struct FsGrant {
    read: Globs,
    write: Globs,
}

impl FsGrant {
    /// Compiles the read and write globs.
    ///
    /// # Errors
    ///
    /// [`CapabilityError::Invalid`] for an empty, absolute or malformed glob,
    /// or one with a `..` component.
    pub fn new(read: &[String], write: &[String]) -> Result<Self, CapabilityError> {
        Ok(Self {
            read: Globs::new(read, "read")?,
            write: Globs::new(write, "write")?,
        })
    }

    /// A grant that allows nothing.
    pub fn none() -> Self {
        Self {
            read: Globs::default(),
            write: Globs::default(),
        }
    }

    /// Whether the globs alone admit `path` (as written, without touching
    /// the filesystem) for writing when `write`, else for reading.
    pub fn admits(&self, write: bool, path: &str) -> bool {
        let side = if write { &self.write } else { &self.read };
        side.allows(path.strip_prefix("./").unwrap_or(path))
    }

    fn globs(&self, capability: Capability) -> &Globs {
        match capability {
            Capability::FsWrite => &self.write,
            _ => &self.read,
        }
    }
}

/// One side (read or write) of an [`FsGrant`].
#[derive(Debug, Clone, Default)]
struct Globs {
    /// The globs as declared, for messages.
    declared: Vec<String>,
    set: GlobSet,
    /// Whether a `**` glob grants the root itself.
    root: bool,
}

impl Globs {
    fn new(patterns: &[String], side: &str) -> Result<Self, CapabilityError> {
        let mut builder = GlobSetBuilder::new();
        let mut root = false;
        for pattern in patterns {
            let invalid = |problem: &str| {
                CapabilityError::Invalid(format!("{side} glob `{pattern}` {problem}"))
            };
            let trimmed = pattern.strip_prefix("./").unwrap_or(pattern);
            if trimmed.is_empty() {
                return Err(invalid("is empty"));
            }
            if trimmed.starts_with('/') {
                return Err(invalid(
                    "is absolute; globs are relative to the workspace root",
                ));
            }
            if trimmed.split('/').any(|c| c == "..") {
                return Err(invalid("contains `..`; globs stay inside the workspace"));
            }
            root |= trimmed == "**";
            let mut add = |glob: &str| -> Result<(), CapabilityError> {
                let compiled = GlobBuilder::new(glob)
                    .literal_separator(true)
                    .build()
                    .map_err(|err| invalid(&format!("is not a valid glob: {}", err.kind())))?;
                builder.add(compiled);
                Ok(())
            };
            add(trimmed)?;
            if let Some(dir) = trimmed.strip_suffix("/**") {
                add(dir)?;
            }
        }
        let set = builder
            .build()
            .map_err(|err| CapabilityError::Invalid(format!("{side} globs: {err}")))?;
        Ok(Self {
            declared: patterns.to_vec(),
            set,
            root,
        })
    }

    fn allows(&self, relative: &str) -> bool {
        if relative.is_empty() {
            self.root
        } else {
            self.set.is_match(relative)
        }
    }

    fn granted(&self) -> String {
        granted_list(self.declared.iter().map(String::as_str))
    }
}

/// Size caps on file access; they protect the host from memory exhaustion by
/// a guest that reads or writes huge files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsLimits {
    /// The largest file `read` returns, in bytes. Default 10 MiB.
    pub max_read: u64,
    /// The largest contents `write` accepts, in bytes. Default 10 MiB.
    pub max_write: u64,
}

impl Default for FsLimits {
    fn default() -> Self {
        Self {
            max_read: DEFAULT_MAX_READ,
            max_write: DEFAULT_MAX_WRITE,
        }
    }
}

/// Names refused for writing as a component at any depth, compared ASCII
/// case-insensitively: git's folder (hooks, `core.fsmonitor`) and gitfile,
/// and the two folders that hold a workspace's extensions, tools and plugins.
pub const CONTROL_NAMES: [&str; 3] = [".git", ".zot", ".shiro"];

/// Why the names in [`CONTROL_NAMES`] are control paths, for messages.
const CONTROL_NAMES_WHY: &str = "it decides what runs";

/// One path inside the workspace that decides grants or what runs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub struct ControlPath {
    /// Relative to the workspace root, `/`-separated; empty when the whole
    /// workspace lies inside a control folder.
    pub path: String,
    /// Whether it is a folder (everything under it is refused too).
    pub folder: bool,
    /// What it is and why it matters: `$ZOT_HOME: it decides grants and what runs`.
    pub what: String,
    /// Whether reading it is refused too (it holds secrets), not only writing.
    pub secret: bool,
}

impl ControlPath {
    /// The path as shown in messages: `home/`, `policy.json`, or `.` for the
    /// whole workspace.
    pub fn shown(&self) -> String {
        if self.path.is_empty() {
            ".".to_owned()
        } else if self.folder {
            format!("{}/", self.path)
        } else {
            self.path.clone()
        }
    }
}

/// The control paths of one workspace: what no write grant reaches.
///
/// [`CONTROL_NAMES`] are refused at any depth in every workspace; the
/// paths given to [`ControlPaths::new`] (absolute, canonicalised here) are
/// refused when they lie inside the workspace, and all of it when the
/// workspace lies inside one of them. Prefixes are compared ASCII
/// case-insensitively, like the names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlPaths {
    inside: Vec<ControlPath>,
}

impl ControlPaths {
    /// The control paths of `workspace`: the fixed names, plus each of
    /// `outside` (an absolute folder or file, with what it is) that lies
    /// inside the workspace or holds it. A path that does not exist yet is
    /// placed by its nearest existing ancestor.
    pub fn new(workspace: &Path, outside: &[(PathBuf, bool, String)]) -> Self {
        Self::default().placed(workspace, outside, false)
    }

    /// These control paths and `secrets` (as for [`ControlPaths::new`]),
    /// which are refused for every operation, reads included: a guest with
    /// `read: ["**"]` in a workspace holding `$ZOT_HOME` must not read the
    /// values the host keeps from it.
    #[must_use]
    pub fn with_secrets(self, workspace: &Path, secrets: &[(PathBuf, bool, String)]) -> Self {
        self.placed(workspace, secrets, true)
    }

    fn placed(
        mut self,
        workspace: &Path,
        outside: &[(PathBuf, bool, String)],
        secret: bool,
    ) -> Self {
        let Some(root) = canonical_lenient(workspace) else {
            return self;
        };
        for (path, folder, what) in outside {
            let Some(canonical) = canonical_lenient(path) else {
                continue;
            };
            let relative = if let Ok(rest) = canonical.strip_prefix(&root) {
                // A file named by what is in fact the workspace (a word of
                // git's `alias.x = !cd ./ && make`) names no file in it.
                if rest.as_os_str().is_empty() && !*folder {
                    continue;
                }
                rest
            } else if *folder && root.starts_with(&canonical) {
                // The workspace lies inside it: every write is refused.
                Path::new("")
            } else {
                continue;
            };
            let Some(relative) = relative.to_str() else {
                // A guest names paths in UTF-8; it cannot name this one.
                continue;
            };
            let entry = ControlPath {
                path: relative.to_owned(),
                folder: *folder,
                what: what.clone(),
                secret,
            };
            match self.inside.iter_mut().find(|seen| seen.path == entry.path) {
                // A control path that is also secret is secret, and says why.
                Some(seen) if secret => {
                    seen.secret = true;
                    seen.what = entry.what;
                }
                Some(_) => {}
                None => self.inside.push(entry),
            }
        }
        self.inside.sort_by(|a, b| a.path.cmp(&b.path));
        self
    }

    /// The workspace's own control paths (beside [`CONTROL_NAMES`]), sorted.
    pub fn paths(&self) -> &[ControlPath] {
        &self.inside
    }

    /// Whether any path here is secret (refused for reads too).
    fn has_secrets(&self) -> bool {
        self.inside.iter().any(|control| control.secret)
    }

    /// Why the workspace-relative `components` are refused to an operation
    /// that `mutates` the tree (every control path) or does not (only the
    /// secret ones), if they are.
    fn refusal_for(&self, components: &[String], mutates: bool) -> Option<String> {
        // The fixed names decide what runs but hold no secrets: reads of
        // them stay governed by the read grant.
        let named = if mutates { components } else { &[] };
        for (index, component) in named.iter().enumerate() {
            if CONTROL_NAMES
                .iter()
                .any(|name| component.eq_ignore_ascii_case(name))
            {
                let mut shown = components[..=index].join("/");
                if index + 1 < components.len() {
                    shown.push('/');
                }
                return Some(format!(
                    "`{shown}` is a control path ({CONTROL_NAMES_WHY}); no grant reaches it"
                ));
            }
        }
        self.inside
            .iter()
            .filter(|control| mutates || control.secret)
            .find(|control| {
                let prefix = split_components(&control.path);
                prefix.len() <= components.len()
                    && (control.folder || prefix.len() == components.len())
                    && prefix
                        .iter()
                        .zip(components)
                        .all(|(a, b)| a.eq_ignore_ascii_case(b))
            })
            .map(|control| {
                if control.path.is_empty() {
                    format!(
                        "the whole workspace lies inside a control path ({}); no grant reaches it",
                        control.what
                    )
                } else {
                    format!(
                        "`{}` is a control path ({}); no grant reaches it",
                        control.shown(),
                        control.what
                    )
                }
            })
    }
}

/// `path` made absolute and canonical; a missing tail is kept as written
/// after its nearest existing ancestor. `None` when that cannot be done
/// (a `..` in the missing tail, no ancestor at all).
pub(crate) fn canonical_lenient(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    let mut base = absolute.as_path();
    let mut missing = Vec::new();
    loop {
        if let Ok(mut canonical) = std::fs::canonicalize(base) {
            canonical.extend(missing.iter().rev());
            return Some(canonical);
        }
        missing.push(base.file_name()?);
        base = base.parent()?;
    }
}

/// What a directory entry or a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link (never followed when reported).
    Symlink,
    /// Anything else: a FIFO, a socket, a device.
    Other,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub struct Entry {
    /// The entry's name within its directory (lossily decoded as UTF-8).
    pub name: String,
    /// Its kind; symlinks are not followed.
    pub kind: Kind,
    /// Its size in bytes (0 for directories).
    pub size: u64,
}

/// What `stat` knows about a path.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub struct Metadata {
    /// Its kind; a final symlink is not followed.
    pub kind: Kind,
    /// Its size in bytes.
    pub size: u64,
    /// Last modification, milliseconds since the Unix epoch, if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_ms: Option<u64>,
}

/// The workspace root, opened once; every access goes through it.
#[derive(Debug)]
pub struct Jail {
    dir: Dir,
    root: PathBuf,
    /// The root's canonical path, to accept absolute symlinks that point
    /// back inside the workspace.
    canonical_root: Option<PathBuf>,
    /// What no write reaches.
    control: ControlPaths,
    /// Whether a folder above the root holds a `.git`: the root lies in
    /// a repository's working tree.
    in_a_worktree: bool,
    /// What the configurations of the repositories in and around the
    /// workspace name, each read again when it changes.
    configurations: std::sync::Mutex<Configurations>,
}

/// What the configurations of a jail's repositories name.
#[derive(Debug, Default)]
struct Configurations {
    /// The repository whose working tree is or holds the root.
    own: Configured,
    /// The repositories nested in the workspace when the first mutating
    /// operation came, by working tree (a bare one by its own folder)
    /// relative to the root; `None` before.
    nested: Option<Vec<(PathBuf, Configured)>>,
}

/// What one repository's configuration names, and the control paths it
/// makes (placed once read).
#[derive(Debug, Default)]
struct Configured {
    kept: Kept,
    control: Option<ControlPaths>,
}

impl Configured {
    /// Why what the configuration of the repository at `worktree` names
    /// refuses a mutating operation on the `components` of the jail at
    /// canonical `root`, read again first if it may have changed.
    fn refusal_for(
        &mut self,
        root: &Path,
        worktree: &Path,
        home: Option<&Path>,
        components: &[String],
    ) -> Option<String> {
        if self.kept.refresh(worktree, home) || self.control.is_none() {
            let named = self.kept.named().into_control_paths();
            self.control = Some(ControlPaths::new(root, &named));
        }
        self.control.as_ref()?.refusal_for(components, true)
    }
}

/// The repositories nested in the workspace at canonical `root` now, by
/// working tree (a bare one by its own folder), with nothing read yet.
/// When the workspace cannot be counted (more than [`MAX_FOLDERS`]
/// folders), none: what a nested repository names in its own working tree
/// is still refused when a walk passes through it.
///
/// [`MAX_FOLDERS`]: super::confine::MAX_FOLDERS
fn nested_repositories(root: &Path) -> Vec<(PathBuf, Configured)> {
    match super::confine::Census::take(root) {
        Ok(census) => census
            .nested_repositories()
            .map(|worktree| (worktree.to_owned(), Configured::default()))
            .collect(),
        Err(err) => {
            tracing::warn!(
                %err,
                "what repositories nested in the workspace name outside their working trees \
                 is not refused to writes"
            );
            Vec::new()
        }
    }
}

/// What an operation needs from the path's final component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Write,
    List,
    Stat,
}

impl Op {
    /// Whether it changes the tree: such an operation never reaches a
    /// control path (rule 5). A rename or delete added later is one too.
    fn mutates(self) -> bool {
        matches!(self, Self::Write)
    }

    fn capability(self) -> Capability {
        match self {
            Self::Write => Capability::FsWrite,
            Self::Read | Self::List | Self::Stat => Capability::FsRead,
        }
    }

    /// Whether a final symlink is expanded (read, list) or taken as itself
    /// (write refuses it, stat describes it).
    fn follows_last(self) -> bool {
        matches!(self, Self::Read | Self::List)
    }
}

/// A path that passed the lexical, grant and resolution checks.
#[derive(Debug)]
struct Resolved {
    op: Op,
    /// The path as the caller wrote it, for messages.
    subject: String,
    /// The resolved components from the root, none of them a symlink
    /// (except a final one for `stat`/`write`).
    components: Vec<String>,
    /// The final component's metadata at resolution time; `None` when it
    /// does not exist yet (only for `write`).
    last: Option<CapMetadata>,
}

impl Jail {
    /// Opens the workspace root. Only [`CONTROL_NAMES`] are control paths;
    /// [`Jail::with_control`] adds the workspace's own.
    ///
    /// # Errors
    ///
    /// The I/O error when `root` cannot be opened as a directory.
    pub fn open(root: &Path) -> io::Result<Self> {
        let dir = Dir::open_ambient_dir(root, cap_std::ambient_authority())?;
        let canonical_root = std::fs::canonicalize(root).ok();
        Ok(Self {
            dir,
            root: root.to_owned(),
            in_a_worktree: canonical_root.as_deref().is_some_and(|root| {
                root.ancestors()
                    .skip(1)
                    .any(|folder| folder.join(".git").symlink_metadata().is_ok())
            }),
            canonical_root,
            control: ControlPaths::default(),
            configurations: std::sync::Mutex::default(),
        })
    }

    /// The jail with `control` as its control paths (beside [`CONTROL_NAMES`]).
    pub fn with_control(mut self, control: ControlPaths) -> Self {
        self.control = control;
        self
    }

    /// The workspace root as given to [`Jail::open`].
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The workspace's control paths.
    pub fn control(&self) -> &ControlPaths {
        &self.control
    }

    /// Reads a whole regular file.
    ///
    /// # Errors
    ///
    /// [`CapabilityError::Denied`] (`fs-read`) when the path breaks a jail
    /// rule or is outside the read globs, or is not a regular file;
    /// [`CapabilityError::NotFound`]; [`CapabilityError::TooLarge`] when the
    /// file is larger than `limits.max_read` (checked before reading);
    /// [`CapabilityError::Invalid`] for a malformed path or a directory;
    /// [`CapabilityError::Failed`] for other I/O errors.
    pub fn read(
        &self,
        grant: &FsGrant,
        limits: &FsLimits,
        path: &str,
    ) -> Result<Vec<u8>, CapabilityError> {
        let resolved = self.resolve(Op::Read, grant, path)?;
        self.read_resolved(limits, &resolved)
    }

    /// Creates or replaces a regular file; missing parent folders are not created.
    ///
    /// # Errors
    ///
    /// [`CapabilityError::TooLarge`] when `contents` is larger than
    /// `limits.max_write` (nothing is written); [`CapabilityError::Denied`]
    /// (`fs-write`) when the path breaks a jail rule, is outside the write
    /// globs, or names an existing symlink or non-regular file;
    /// [`CapabilityError::NotFound`] when the parent folder is missing;
    /// otherwise as [`Jail::read`].
    pub fn write(
        &self,
        grant: &FsGrant,
        limits: &FsLimits,
        path: &str,
        contents: &[u8],
    ) -> Result<(), CapabilityError> {
        let size = u64::try_from(contents.len()).unwrap_or(u64::MAX);
        let relative = lexical(Capability::FsWrite, path)?;
        no_dots(grant, Op::Write, path, &relative)?;
        self.check_control(Op::Write, path, &relative, None)?;
        check_grant(grant, Op::Write, path, &relative.join("/"), None)?;
        if size > limits.max_write {
            return Err(CapabilityError::TooLarge {
                what: format!("write of `{path}`"),
                limit: limits.max_write,
            });
        }
        let resolved = self.resolve_relative(Op::Write, grant, path, &relative)?;
        self.write_resolved(&resolved, contents)
    }

    /// Lists a directory, sorted by name; entries are described without
    /// following symlinks.
    ///
    /// # Errors
    ///
    /// As [`Jail::read`]; [`CapabilityError::Invalid`] when the path is not a
    /// directory.
    pub fn list(&self, grant: &FsGrant, path: &str) -> Result<Vec<Entry>, CapabilityError> {
        let resolved = self.resolve(Op::List, grant, path)?;
        self.list_resolved(&resolved)
    }

    /// Describes a path without following a final symlink.
    ///
    /// # Errors
    ///
    /// As [`Jail::read`], except that any kind of file may be described.
    pub fn stat(&self, grant: &FsGrant, path: &str) -> Result<Metadata, CapabilityError> {
        let resolved = self.resolve(Op::Stat, grant, path)?;
        self.stat_resolved(&resolved)
    }

    /// Steps 1 to 3: the lexical check, the grant on the path as written,
    /// resolution inside the jail, and the grant on the resolved path.
    fn resolve(&self, op: Op, grant: &FsGrant, path: &str) -> Result<Resolved, CapabilityError> {
        let relative = lexical(op.capability(), path)?;
        no_dots(grant, op, path, &relative)?;
        self.check_control(op, path, &relative, None)?;
        check_grant(grant, op, path, &relative.join("/"), None)?;
        self.resolve_relative(op, grant, path, &relative)
    }

    fn resolve_relative(
        &self,
        op: Op,
        grant: &FsGrant,
        path: &str,
        relative: &[String],
    ) -> Result<Resolved, CapabilityError> {
        let capability = op.capability();
        let mut done: Vec<String> = Vec::new();
        let mut todo: VecDeque<String> = relative.iter().cloned().collect();
        let mut expanded = 0usize;
        let mut last = None;
        let mut missing = false;
        while let Some(component) = todo.pop_front() {
            if component.is_empty() || component == "." {
                continue;
            }
            if component == ".." {
                // Only a symlink's target can bring `..` here; the lexical
                // check refuses it in the path itself.
                if done.pop().is_none() {
                    return Err(CapabilityError::denied(
                        capability,
                        path,
                        "a symlink on the way climbs out of the workspace with `..`",
                    ));
                }
                last = None;
                continue;
            }
            let is_last = todo.is_empty();
            let candidate = join(&done, &component);
            let meta = match self.dir.symlink_metadata(&candidate) {
                Ok(meta) => meta,
                Err(err) if is_missing(&err) && is_last && op == Op::Write => {
                    done.push(component);
                    last = None;
                    missing = true;
                    break;
                }
                Err(err) if is_missing(&err) => {
                    return Err(CapabilityError::NotFound(path.to_owned()));
                }
                Err(err) => return Err(io_failure(op, path, &err)),
            };
            if meta.is_symlink() && (!is_last || op.follows_last()) {
                expanded += 1;
                if expanded > MAX_SYMLINKS {
                    return Err(CapabilityError::Failed(format!(
                        "cannot resolve `{path}`: more than {MAX_SYMLINKS} symlinks on the way \
                         (a symlink loop?)"
                    )));
                }
                let target = self
                    .dir
                    .read_link_contents(&candidate)
                    .map_err(|err| io_failure(op, path, &err))?;
                let inside = self.target_components(&target).ok_or_else(|| {
                    CapabilityError::denied(
                        capability,
                        path,
                        format!(
                            "symlink `{candidate}` points outside the workspace (`{}`)",
                            target.display()
                        ),
                    )
                })?;
                if inside.absolute {
                    done.clear();
                }
                for component in inside.components.into_iter().rev() {
                    todo.push_front(component);
                }
                continue;
            }
            if !is_last && !meta.is_dir() {
                return Err(CapabilityError::NotFound(path.to_owned()));
            }
            done.push(component);
            last = Some(meta);
        }
        if !missing && last.is_none() {
            // The root, or a folder reached by a symlink's trailing `..`.
            let meta = if done.is_empty() {
                self.dir.dir_metadata()
            } else {
                self.dir.symlink_metadata(done.join("/"))
            };
            last = Some(meta.map_err(|err| io_failure(op, path, &err))?);
        }
        self.check_control(op, path, &done, Some(relative))?;
        check_grant(grant, op, path, &done.join("/"), Some(relative))?;
        let resolved = Resolved {
            op,
            subject: path.to_owned(),
            components: done,
            last,
        };
        check_last_kind(&resolved)?;
        Ok(resolved)
    }

    /// Step 5: a mutating operation on a control path, and any operation
    /// on a secret one, is refused, for the path as written and (with
    /// `written`) as resolved.
    fn check_control(
        &self,
        op: Op,
        path: &str,
        components: &[String],
        written: Option<&[String]>,
    ) -> Result<(), CapabilityError> {
        if !op.mutates() && !self.control.has_secrets() {
            return Ok(());
        }
        let Some(reason) = self.control.refusal_for(components, op.mutates()) else {
            return Ok(());
        };
        let reason = match written {
            Some(written) if written != components => format!(
                "it resolves to `{}` through a symlink; {reason}",
                components.join("/")
            ),
            _ => reason,
        };
        Err(CapabilityError::denied(op.capability(), path, reason))
    }

    /// The components of a symlink target, if it stays inside the jail.
    /// `None` for an absolute target outside the root or a non-UTF-8 one.
    fn target_components(&self, target: &Path) -> Option<Target> {
        if target.is_absolute() {
            let root = self.canonical_root.as_deref()?;
            let inside = target.strip_prefix(root).ok()?;
            Some(Target {
                absolute: true,
                components: split_components(inside.to_str()?),
            })
        } else {
            Some(Target {
                absolute: false,
                components: split_components(target.to_str()?),
            })
        }
    }

    /// Step 4: opens the directory holding the resolved path's final
    /// component (or the root itself for the empty path), walking with
    /// no-follow opens. Returns it with the final component's name.
    fn open_parent<'r>(
        &self,
        resolved: &'r Resolved,
    ) -> Result<(Dir, Option<&'r str>), CapabilityError> {
        let (last, parents) = match resolved.components.split_last() {
            Some((last, parents)) => (Some(last.as_str()), parents),
            None => (None, &[][..]),
        };
        let mut dir = self
            .dir
            .try_clone()
            .map_err(|err| io_failure(resolved.op, &resolved.subject, &err))?;
        let mut signs = not_in_a_repository(resolved, &dir, 0)?;
        if resolved.op.mutates() {
            self.not_named_by_a_known_repository(resolved, signs.worktree() || self.in_a_worktree)?;
        }
        for (depth, component) in parents.iter().enumerate() {
            dir = open_dir_nofollow(&dir, component).map_err(|err| walk_error(resolved, err))?;
            signs = not_in_a_repository(resolved, &dir, depth + 1)?;
            if signs.worktree() && !self.is_known_worktree(&resolved.components[..=depth]) {
                self.not_named_by_a_new_repository(resolved, &dir, depth + 1)?;
            }
        }
        if let Some(last) = last {
            completes_no_repository(resolved, signs, last)?;
        }
        Ok((dir, last))
    }

    /// Step 5 for what git's configuration names: a mutating operation is
    /// refused on the hooks folder, included files and programs the
    /// configuration of a repository in or around the workspace names, and
    /// the files its hooks run ([`repository::configured`]), as the
    /// workspace's own repository's are by [`ControlPaths`] when the session
    /// begins. Here, for each mutating operation, each configuration is read
    /// again when it has changed (`npm install` runs husky, which sets
    /// `core.hooksPath`): the one of the repository whose working tree is or
    /// holds the root (`own`: the root or a folder above it holds a `.git`)
    /// and those of every repository nested in the workspace when the first
    /// mutating operation came, bare ones included, wherever what they
    /// name lies (`git commit` in `packages/app/` runs
    /// `tools/hooks/pre-commit` when its `config` says
    /// `hooksPath = ../../tools/hooks`; a push to `fixtures/remote.git/`
    /// runs `ci/hooks/post-receive` when its own says `../../ci/hooks`).
    ///
    /// [`repository::configured`]: super::repository::configured
    fn not_named_by_a_known_repository(
        &self,
        resolved: &Resolved,
        own: bool,
    ) -> Result<(), CapabilityError> {
        let Some(root) = self.canonical_root.as_deref() else {
            return Ok(());
        };
        let home = crate::home::user_home();
        let home = home.as_deref();
        let mut configurations = self
            .configurations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Configurations {
            own: own_configuration,
            nested,
        } = &mut *configurations;
        if own {
            let reason = own_configuration.refusal_for(root, root, home, &resolved.components);
            refused_if(resolved, reason)?;
        }
        let nested = nested.get_or_insert_with(|| nested_repositories(root));
        for (worktree, configured) in nested {
            let reason =
                configured.refusal_for(root, &root.join(&*worktree), home, &resolved.components);
            refused_if(resolved, reason)?;
        }
        Ok(())
    }

    /// Whether the folder at the resolved `components` is the working tree
    /// of a repository [`Jail::not_named_by_a_known_repository`] knows.
    fn is_known_worktree(&self, components: &[String]) -> bool {
        let configurations = self
            .configurations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        configurations.nested.as_ref().is_some_and(|nested| {
            nested.iter().any(|(worktree, _)| {
                worktree.components().count() == components.len()
                    && worktree
                        .iter()
                        .zip(components)
                        .all(|(known, component)| known == std::ffi::OsStr::new(component))
            })
        })
    }

    /// As [`Jail::not_named_by_a_known_repository`], for a repository that
    /// appeared in the workspace since the first mutating operation (a
    /// clone, a submodule checked out), when a walk passes through its
    /// working tree: `dir`, the first `depth` resolved components. Its
    /// configuration is read each time, through the open folder
    /// (`/proc/self/fd`), so a folder renamed and replaced since it was
    /// opened cannot lend it another's.
    ///
    /// Not covered: what such a repository names outside its own working
    /// tree, reached without passing through it, until the next session.
    fn not_named_by_a_new_repository(
        &self,
        resolved: &Resolved,
        dir: &Dir,
        depth: usize,
    ) -> Result<(), CapabilityError> {
        use std::os::fd::AsRawFd;
        let Some(root) = self.canonical_root.as_deref() else {
            return Ok(());
        };
        let by_handle = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        let worktree = if by_handle.is_dir() {
            by_handle
        } else {
            resolved
                .components
                .iter()
                .take(depth)
                .fold(root.to_owned(), |path, component| path.join(component))
        };
        let home = crate::home::user_home();
        let named = super::repository::configured(&worktree, home.as_deref());
        not_named(resolved, root, named)
    }

    fn read_resolved(
        &self,
        limits: &FsLimits,
        resolved: &Resolved,
    ) -> Result<Vec<u8>, CapabilityError> {
        let (dir, name) = self.open_parent(resolved)?;
        let Some(name) = name else {
            return Err(is_a_directory(&resolved.subject));
        };
        let mut options = OpenOptions::new();
        options
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY);
        let file = dir
            .open_with(name, &options)
            .map_err(|err| walk_error(resolved, err))?;
        let meta = file
            .metadata()
            .map_err(|err| io_failure(resolved.op, &resolved.subject, &err))?;
        check_opened(resolved, &dir, name, &meta)?;
        check_links(resolved, &meta)?;
        if meta.len() > limits.max_read {
            return Err(CapabilityError::TooLarge {
                what: format!("read of `{}`", resolved.subject),
                limit: limits.max_read,
            });
        }
        let capacity = usize::try_from(meta.len()).unwrap_or(0);
        let mut contents = Vec::with_capacity(capacity);
        // The file may grow after the `fstat`; never take more than the cap.
        file.take(limits.max_read.saturating_add(1))
            .read_to_end(&mut contents)
            .map_err(|err| io_failure(resolved.op, &resolved.subject, &err))?;
        if u64::try_from(contents.len()).unwrap_or(u64::MAX) > limits.max_read {
            return Err(CapabilityError::TooLarge {
                what: format!("read of `{}`", resolved.subject),
                limit: limits.max_read,
            });
        }
        Ok(contents)
    }

    fn write_resolved(&self, resolved: &Resolved, contents: &[u8]) -> Result<(), CapabilityError> {
        let (dir, name) = self.open_parent(resolved)?;
        let Some(name) = name else {
            return Err(is_a_directory(&resolved.subject));
        };
        let mut options = OpenOptions::new();
        // No `truncate` here: the handle is checked to be a regular file first.
        options
            .write(true)
            .create(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY);
        let mut file = dir
            .open_with(name, &options)
            .map_err(|err| walk_error(resolved, err))?;
        let meta = file
            .metadata()
            .map_err(|err| io_failure(resolved.op, &resolved.subject, &err))?;
        check_opened(resolved, &dir, name, &meta)?;
        check_links(resolved, &meta)?;
        file.set_len(0)
            .and_then(|()| file.write_all(contents))
            .and_then(|()| file.flush())
            .map_err(|err| io_failure(resolved.op, &resolved.subject, &err))
    }

    fn list_resolved(&self, resolved: &Resolved) -> Result<Vec<Entry>, CapabilityError> {
        let (parent, name) = self.open_parent(resolved)?;
        let dir = match name {
            Some(name) => {
                open_dir_nofollow(&parent, name).map_err(|err| walk_error(resolved, err))?
            }
            None => parent,
        };
        let failed = |err: io::Error| io_failure(resolved.op, &resolved.subject, &err);
        let mut entries = Vec::new();
        let mut components = resolved.components.clone();
        for entry in dir.entries().map_err(failed)? {
            let entry = entry.map_err(failed)?;
            // A secret path is not even named (rule 5).
            if self.control.has_secrets() {
                components.push(entry.file_name().to_string_lossy().into_owned());
                let secret = self.control.refusal_for(&components, false).is_some();
                components.pop();
                if secret {
                    continue;
                }
            }
            let meta = entry.metadata().map_err(failed)?;
            let kind = kind_of(&meta);
            entries.push(Entry {
                name: entry.file_name().to_string_lossy().into_owned(),
                kind,
                size: if kind == Kind::Directory {
                    0
                } else {
                    meta.len()
                },
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    fn stat_resolved(&self, resolved: &Resolved) -> Result<Metadata, CapabilityError> {
        let (dir, name) = self.open_parent(resolved)?;
        let meta = match name {
            Some(name) => dir.symlink_metadata(name),
            None => dir.dir_metadata(),
        }
        .map_err(|err| {
            if is_missing(&err) {
                CapabilityError::NotFound(resolved.subject.clone())
            } else {
                io_failure(resolved.op, &resolved.subject, &err)
            }
        })?;
        let modified_ms = (meta.mtime() >= 0).then(|| {
            let secs = u64::try_from(meta.mtime()).unwrap_or(0);
            let millis = u64::try_from(meta.mtime_nsec() / 1_000_000).unwrap_or(0);
            secs.saturating_mul(1000).saturating_add(millis)
        });
        Ok(Metadata {
            kind: kind_of(&meta),
            size: meta.len(),
            modified_ms,
        })
    }
}

/// A symlink target split into components; an absolute one restarts at the root.
struct Target {
    absolute: bool,
    components: Vec<String>,
}

/// Step 1: the path as written, split into components.
fn lexical(capability: Capability, path: &str) -> Result<Vec<String>, CapabilityError> {
    if path.is_empty() {
        return Err(CapabilityError::Invalid(
            "the path is empty; use `.` for the workspace root".to_owned(),
        ));
    }
    if path.contains('\0') {
        return Err(CapabilityError::Invalid(format!(
            "path `{}` contains a NUL byte",
            path.escape_default()
        )));
    }
    if path.contains('\\') {
        return Err(CapabilityError::Invalid(format!(
            "path `{path}` contains `\\`; separate components with `/`"
        )));
    }
    if path.starts_with('/') {
        return Err(CapabilityError::denied(
            capability,
            path,
            "absolute paths are not allowed; use a path relative to the workspace root",
        ));
    }
    Ok(split_components(path))
}

/// Step 1, for `..`: refused wherever it appears, with the reason that
/// holds (leaving the workspace, the grant, or the `..` itself).
fn no_dots(
    grant: &FsGrant,
    op: Op,
    path: &str,
    components: &[String],
) -> Result<(), CapabilityError> {
    if !components.iter().any(|c| c == "..") {
        return Ok(());
    }
    let mut named: Vec<&str> = Vec::new();
    for component in components {
        if component == ".." {
            if named.pop().is_none() {
                return Err(CapabilityError::denied(
                    op.capability(),
                    path,
                    "`..` may not leave the workspace",
                ));
            }
        } else {
            named.push(component);
        }
    }
    let named = named.join("/");
    check_grant(grant, op, path, &named, None)?;
    let shown = if named.is_empty() { "." } else { &named };
    Err(CapabilityError::denied(
        op.capability(),
        path,
        format!("`..` is not allowed in a path, even one inside the workspace; write `{shown}`"),
    ))
}

/// Splits on `/`, dropping empty and `.` components (but keeping `..`).
fn split_components(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_owned)
        .collect()
}

fn join(done: &[String], component: &str) -> String {
    if done.is_empty() {
        component.to_owned()
    } else {
        format!("{}/{component}", done.join("/"))
    }
}

/// Steps 2 (written path) and 3 (resolved path, when `written` is given).
fn check_grant(
    grant: &FsGrant,
    op: Op,
    path: &str,
    relative: &str,
    written: Option<&[String]>,
) -> Result<(), CapabilityError> {
    let capability = op.capability();
    let globs = grant.globs(capability);
    let side = capability.verb();
    if globs.allows(relative) {
        return Ok(());
    }
    let shown = if relative.is_empty() { "." } else { relative };
    let reason = match written {
        Some(written) if written.join("/") != relative => format!(
            "it resolves to `{shown}` through a symlink, which is not within the granted \
             {side} paths (granted: {})",
            globs.granted()
        ),
        _ => format!(
            "not within the granted {side} paths (granted: {})",
            globs.granted()
        ),
    };
    Err(CapabilityError::denied(capability, path, reason))
}

/// Refuses a final component the operation cannot use, as found at resolution.
fn check_last_kind(resolved: &Resolved) -> Result<(), CapabilityError> {
    let Some(meta) = &resolved.last else {
        return Ok(());
    };
    let kind = kind_of(meta);
    let subject = &resolved.subject;
    match (resolved.op, kind) {
        (Op::Stat, _) | (Op::List, Kind::Directory) => Ok(()),
        (Op::List, _) => Err(CapabilityError::Invalid(format!(
            "`{subject}` is not a directory"
        ))),
        (Op::Read | Op::Write, Kind::File) => Ok(()),
        (Op::Read | Op::Write, Kind::Directory) => Err(is_a_directory(subject)),
        (Op::Write, Kind::Symlink) => Err(CapabilityError::denied(
            Capability::FsWrite,
            subject,
            "it is a symlink; writes never follow a final symlink (remove the link first)",
        )),
        (_, _) => Err(not_regular(resolved.op, subject, meta)),
    }
}

/// After the no-follow open: the handle must be a regular file and still be
/// what the directory holds under `name`.
fn check_opened(
    resolved: &Resolved,
    dir: &Dir,
    name: &str,
    opened: &CapMetadata,
) -> Result<(), CapabilityError> {
    if opened.is_dir() {
        return Err(is_a_directory(&resolved.subject));
    }
    if !opened.is_file() {
        return Err(not_regular(resolved.op, &resolved.subject, opened));
    }
    if !same_entry(dir, name, opened) {
        return Err(changed(resolved));
    }
    Ok(())
}

/// Rule 6: a regular file with more than one link is refused, from the
/// opened handle's `fstat`, before a byte is read or the file truncated.
fn check_links(resolved: &Resolved, opened: &CapMetadata) -> Result<(), CapabilityError> {
    let links = opened.nlink();
    if links <= 1 {
        return Ok(());
    }
    Err(CapabilityError::denied(
        resolved.op.capability(),
        &resolved.subject,
        format!(
            "it has {links} hard links; a file with another name may be one outside the \
             workspace, so it is neither read nor written (replace the link with a copy)"
        ),
    ))
}

/// Whether `dir` holds exactly the opened inode under `name`, not a symlink.
///
/// The `O_NOFOLLOW` open already refuses a symlink; this also covers
/// cap-std's fallback resolver on kernels without `openat2`, which expands
/// symlinks (inside the jail) by hand.
fn same_entry(dir: &Dir, name: impl AsRef<Path>, opened: &CapMetadata) -> bool {
    dir.symlink_metadata(name).is_ok_and(|now| {
        !now.is_symlink() && now.dev() == opened.dev() && now.ino() == opened.ino()
    })
}

/// Opens `name` in `parent` as a directory without following a symlink.
pub(crate) fn open_dir_nofollow(parent: &Dir, name: impl AsRef<Path>) -> io::Result<Dir> {
    let name = name.as_ref();
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW);
    let file = parent.open_with(name, &options)?;
    let opened = file.metadata()?;
    if !opened.is_dir() || !same_entry(parent, name, &opened) {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    Ok(Dir::from_std_file(file.into_std()))
}

fn kind_of(meta: &CapMetadata) -> Kind {
    let file_type = meta.file_type();
    if file_type.is_symlink() {
        Kind::Symlink
    } else if file_type.is_dir() {
        Kind::Directory
    } else if file_type.is_file() {
        Kind::File
    } else {
        Kind::Other
    }
}

fn is_missing(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::NotFound || err.raw_os_error() == Some(libc::ENOTDIR)
}

/// Step 5 for what git's configuration `named` for a working tree in the
/// jail at canonical `root`: a mutating operation on one is refused.
fn not_named(resolved: &Resolved, root: &Path, named: Named) -> Result<(), CapabilityError> {
    if named.is_empty() {
        return Ok(());
    }
    let control = ControlPaths::new(root, &named.into_control_paths());
    refused_if(resolved, control.refusal_for(&resolved.components, true))
}

/// The resolved operation refused for `reason`, if there is one.
fn refused_if(resolved: &Resolved, reason: Option<String>) -> Result<(), CapabilityError> {
    match reason {
        Some(reason) => Err(CapabilityError::denied(
            resolved.op.capability(),
            &resolved.subject,
            reason,
        )),
        None => Ok(()),
    }
}

/// Why a folder git takes for a repository is a control path, for messages.
const REPOSITORY_WHY: &str = "a repository: git runs what its config and hooks name";

/// Step 5 for a folder of any name: a mutating operation is refused in the
/// open folder `dir`, the first `depth` resolved components, when git
/// takes it for a repository ([`Signs`]: a bare one, `fixtures/remote.git/`,
/// or the folder a nested `.git` file names). Returns the folder's signs
/// (none looked up for an operation that does not mutate).
fn not_in_a_repository(
    resolved: &Resolved,
    dir: &Dir,
    depth: usize,
) -> Result<Signs, CapabilityError> {
    if !resolved.op.mutates() {
        return Ok(Signs::default());
    }
    let signs = Signs::of(dir).map_err(|err| io_failure(resolved.op, &resolved.subject, &err))?;
    if !signs.repository() {
        return Ok(signs);
    }
    let reason = match resolved.components.get(..depth) {
        Some(folder) if !folder.is_empty() => format!(
            "`{}/` is a control path ({REPOSITORY_WHY}); no grant reaches it",
            folder.join("/")
        ),
        _ => {
            format!("the whole workspace is a control path ({REPOSITORY_WHY}); no grant reaches it")
        }
    };
    Err(CapabilityError::denied(
        resolved.op.capability(),
        &resolved.subject,
        reason,
    ))
}

/// A file `name` made in the resolved path's parent, whose `signs` these
/// are, is refused when it would make git take the folder for a
/// repository: a `HEAD` beside `objects/` and `refs/`, a `commondir`
/// beside `HEAD`.
fn completes_no_repository(
    resolved: &Resolved,
    signs: Signs,
    name: &str,
) -> Result<(), CapabilityError> {
    if !signs.completed_by(std::ffi::OsStr::new(name)) {
        return Ok(());
    }
    let parents = resolved.components.len().saturating_sub(1);
    let folder = match resolved.components.get(..parents) {
        Some(folder) if !folder.is_empty() => format!("`{}/`", folder.join("/")),
        _ => "the workspace".to_owned(),
    };
    Err(CapabilityError::denied(
        resolved.op.capability(),
        &resolved.subject,
        format!("it would make {folder} a control path ({REPOSITORY_WHY}); no grant reaches it"),
    ))
}

fn is_a_directory(subject: &str) -> CapabilityError {
    CapabilityError::Invalid(format!("`{subject}` is a directory"))
}

fn not_regular(op: Op, subject: &str, meta: &CapMetadata) -> CapabilityError {
    use cap_std::fs::FileTypeExt;
    let file_type = meta.file_type();
    let what = if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_block_device() || file_type.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    };
    CapabilityError::denied(
        op.capability(),
        subject,
        format!("it is {what}; only regular files can be read or written"),
    )
}

fn changed(resolved: &Resolved) -> CapabilityError {
    CapabilityError::denied(
        resolved.op.capability(),
        &resolved.subject,
        "the path changed while it was being opened (a symlink or special file was swapped \
         in); nothing was accessed",
    )
}

/// Maps an error of the no-follow walk: a symlink, a non-directory or a
/// reader-less FIFO where the resolution saw something else means the tree
/// changed under us.
fn walk_error(resolved: &Resolved, err: io::Error) -> CapabilityError {
    match err.raw_os_error() {
        Some(libc::ELOOP | libc::ENOTDIR | libc::ENXIO) => changed(resolved),
        _ if err.kind() == io::ErrorKind::NotFound => {
            CapabilityError::NotFound(resolved.subject.clone())
        }
        _ => io_failure(resolved.op, &resolved.subject, &err),
    }
}

/// The message of cap-std's refusal of a path that leads out of its `Dir`.
const CAP_STD_ESCAPE: &str = "a path led outside of the filesystem";

/// Maps an I/O error of an allowed use; `EACCES`/`EPERM` and cap-std's
/// escape are refusals (rule 7), everything else a failure.
fn io_failure(op: Op, subject: &str, err: &io::Error) -> CapabilityError {
    if err.kind() == io::ErrorKind::PermissionDenied {
        let reason = if err.to_string() == CAP_STD_ESCAPE {
            "the path leads outside the workspace (caught by the jail's directory handle)"
                .to_owned()
        } else {
            format!("the system refused access ({err})")
        };
        return CapabilityError::denied(op.capability(), subject, reason);
    }
    let verb = match op {
        Op::Read => "read",
        Op::Write => "write",
        Op::List => "list",
        Op::Stat => "stat",
    };
    CapabilityError::Failed(format!("cannot {verb} `{subject}`: {err}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    /// A workspace in a temp dir:
    ///
    /// ```text
    /// docs/a.md            "alpha"
    /// docs/sub/b.md        "beta"
    /// private/secret.txt   "secret"
    /// secret.txt           "top secret"
    /// ```
    struct Workspace {
        _tmp: tempfile::TempDir,
        root: PathBuf,
        jail: Jail,
    }

    impl Workspace {
        fn new() -> Self {
            let tmp = tempfile::tempdir().unwrap();
            let root = tmp.path().join("ws");
            std::fs::create_dir_all(root.join("docs/sub")).unwrap();
            std::fs::create_dir_all(root.join("private")).unwrap();
            std::fs::write(root.join("docs/a.md"), "alpha").unwrap();
            std::fs::write(root.join("docs/sub/b.md"), "beta").unwrap();
            std::fs::write(root.join("private/secret.txt"), "secret").unwrap();
            std::fs::write(root.join("secret.txt"), "top secret").unwrap();
            let jail = Jail::open(&root).unwrap();
            Self {
                _tmp: tmp,
                root,
                jail,
            }
        }

        fn path(&self, relative: &str) -> PathBuf {
            self.root.join(relative)
        }

        fn read(&self, grant: &FsGrant, path: &str) -> Result<Vec<u8>, CapabilityError> {
            self.jail.read(grant, &FsLimits::default(), path)
        }

        fn write(
            &self,
            grant: &FsGrant,
            path: &str,
            contents: &[u8],
        ) -> Result<(), CapabilityError> {
            self.jail.write(grant, &FsLimits::default(), path, contents)
        }
    }

    fn grant_of(read: &[&str], write: &[&str]) -> FsGrant {
        let owned = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        FsGrant::new(&owned(read), &owned(write)).unwrap()
    }

    fn docs() -> FsGrant {
        grant_of(&["docs/**"], &["docs/**"])
    }

    /// Asserts a refusal of `capability` whose reason contains `words`.
    #[track_caller]
    fn assert_denied<T: std::fmt::Debug>(
        result: Result<T, CapabilityError>,
        capability: Capability,
        words: &str,
    ) {
        match result {
            Err(CapabilityError::Denied {
                capability: got,
                reason,
                ..
            }) => {
                assert_eq!(got, capability, "{reason}");
                assert!(reason.contains(words), "`{reason}` lacks `{words}`");
            }
            other => panic!("expected a refusal with `{words}`, got {other:?}"),
        }
    }

    #[test]
    fn granted_paths_read_write_list_and_stat() {
        let ws = Workspace::new();
        let grant = docs();
        let everything = grant_of(&["**"], &[]);
        assert_eq!(ws.read(&grant, "docs/a.md").unwrap(), b"alpha");
        // `.` and empty components are tidied away.
        assert_eq!(ws.read(&grant, "./docs//sub/./b.md").unwrap(), b"beta");
        ws.write(&grant, "docs/new.md", b"new").unwrap();
        assert_eq!(std::fs::read(ws.path("docs/new.md")).unwrap(), b"new");
        // Replacing truncates.
        ws.write(&grant, "docs/a.md", b"A").unwrap();
        assert_eq!(ws.read(&grant, "docs/a.md").unwrap(), b"A");
        // `docs/**` grants listing `docs` itself; sorted by name.
        let names: Vec<(String, Kind)> = ws
            .jail
            .list(&grant, "docs")
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.kind))
            .collect();
        assert_eq!(
            names,
            [
                ("a.md".to_owned(), Kind::File),
                ("new.md".to_owned(), Kind::File),
                ("sub".to_owned(), Kind::Directory),
            ]
        );
        let meta = ws.jail.stat(&grant, "docs/new.md").unwrap();
        assert_eq!((meta.kind, meta.size), (Kind::File, 3));
        assert!(meta.modified_ms.is_some_and(|ms| ms > 1_600_000_000_000));
        // Only `**` grants the root.
        assert!(ws.jail.list(&everything, ".").unwrap().len() >= 3);
        assert_denied(ws.jail.list(&docs(), "."), Capability::FsRead, "not within");
    }

    #[test]
    fn malformed_paths_are_invalid() {
        let ws = Workspace::new();
        let cases = [
            // Empty path.
            ("", "the path is empty"),
            // Attack: a NUL byte to truncate the path in C.
            ("docs/a.md\0.txt", "contains a NUL byte"),
            // Backslashes are not separators here.
            ("docs\\..\\secret.txt", "contains `\\`"),
        ];
        for (path, words) in cases {
            match ws.read(&docs(), path) {
                Err(CapabilityError::Invalid(message)) => {
                    assert!(message.contains(words), "{path:?}: `{message}`");
                }
                other => panic!("{path:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn lexical_escapes_are_refused() {
        let ws = Workspace::new();
        let everything = grant_of(&["**"], &["**"]);
        let cases = [
            // Attack: an absolute path.
            ("/etc/passwd", "absolute paths are not allowed"),
            // Attack: `..` out of the root.
            ("../etc/passwd", "`..` may not leave the workspace"),
            // Attack: `..` after a granted prefix.
            ("docs/../../etc/passwd", "`..` may not leave the workspace"),
            // Even a `..` that would stay inside is refused outright,
            // saying so rather than claiming it leaves.
            (
                "docs/../secret.txt",
                "`..` is not allowed in a path, even one inside the workspace; write `secret.txt`",
            ),
        ];
        for (path, words) in cases {
            assert_denied(ws.read(&everything, path), Capability::FsRead, words);
            assert_denied(
                ws.write(&everything, path, b"x"),
                Capability::FsWrite,
                words,
            );
        }
        // A `..` that stays inside, to a file the grant does not cover: the
        // grant refuses it, in the grant's words.
        let err = ws.read(&docs(), "docs/../secret.txt").unwrap_err();
        assert_eq!(
            err.to_string(),
            "read of `docs/../secret.txt` refused: not within the granted read paths \
             (granted: docs/**)"
        );
        let err = ws.read(&everything, "../etc/passwd").unwrap_err();
        assert_eq!(
            err.to_string(),
            "read of `../etc/passwd` refused: `..` may not leave the workspace"
        );
    }

    #[test]
    fn paths_outside_the_globs_are_refused() {
        let ws = Workspace::new();
        // (read globs, write globs, path, capability used, refusal words)
        type Case<'a> = (&'a [&'a str], &'a [&'a str], &'a str, Capability, &'a str);
        let cases: [Case<'_>; 6] = [
            // Read outside the read globs.
            (
                &["docs/**"],
                &[],
                "secret.txt",
                Capability::FsRead,
                "not within the granted read paths (granted: docs/**)",
            ),
            // `*` does not cross `/`.
            (
                &["docs/*"],
                &[],
                "docs/sub/b.md",
                Capability::FsRead,
                "(granted: docs/*)",
            ),
            // An empty grant allows nothing.
            (&[], &[], "docs/a.md", Capability::FsRead, "(granted: none)"),
            // Write globs do not grant reading.
            (
                &[],
                &["docs/**"],
                "docs/a.md",
                Capability::FsRead,
                "granted read paths",
            ),
            // Read globs do not grant writing.
            (
                &["docs/**"],
                &[],
                "docs/a.md",
                Capability::FsWrite,
                "not within the granted write paths (granted: none)",
            ),
            // A prefix is not a folder: `docs/**` does not grant `docs2`.
            (
                &["docs/**"],
                &[],
                "docs2",
                Capability::FsRead,
                "granted read paths",
            ),
        ];
        for (read, write, path, capability, words) in cases {
            let g = grant_of(read, write);
            if capability == Capability::FsWrite {
                assert_denied(ws.write(&g, path, b"x"), capability, words);
            } else {
                assert_denied(ws.read(&g, path), capability, words);
            }
        }
        assert_eq!(std::fs::read(ws.path("docs/a.md")).unwrap(), b"alpha");
    }

    #[test]
    fn symlinks_leading_outside_are_refused() {
        let ws = Workspace::new();
        symlink("/etc", ws.path("docs/etc")).unwrap();
        symlink("/proc/self/root", ws.path("docs/root")).unwrap();
        symlink("../..", ws.path("docs/up")).unwrap();
        symlink("/dev/null", ws.path("docs/null")).unwrap();
        let everything = grant_of(&["**"], &["**"]);
        let cases = [
            // Attack: a symlink in the workspace to /etc.
            (
                "docs/etc/passwd",
                "symlink `docs/etc` points outside the workspace (`/etc`)",
            ),
            // Attack: the magic link to the host's root.
            ("docs/root/etc/passwd", "symlink `docs/root` points outside"),
            // Attack: a relative symlink climbing out with `..`.
            ("docs/up/etc/passwd", "climbs out of the workspace"),
            // Attack: a device reached through a symlink.
            ("docs/null", "symlink `docs/null` points outside"),
        ];
        for (path, words) in cases {
            assert_denied(ws.read(&everything, path), Capability::FsRead, words);
            assert_denied(ws.jail.list(&everything, path), Capability::FsRead, words);
        }
        // Writes through an outside symlink in the middle are refused too.
        assert_denied(
            ws.write(&everything, "docs/up/pwned", b"x"),
            Capability::FsWrite,
            "climbs out",
        );
    }

    #[test]
    fn symlinks_are_checked_against_the_globs_where_they_lead() {
        let ws = Workspace::new();
        symlink("../secret.txt", ws.path("docs/leak")).unwrap();
        symlink("../private", ws.path("docs/private")).unwrap();
        symlink("a.md", ws.path("docs/alias.md")).unwrap();
        symlink(ws.path("docs/sub/b.md"), ws.path("docs/absolute.md")).unwrap();
        symlink(ws.path("secret.txt"), ws.path("docs/absolute-leak")).unwrap();
        symlink("loop2", ws.path("docs/loop1")).unwrap();
        symlink("loop1", ws.path("docs/loop2")).unwrap();
        let grant = docs();
        // Attack: a granted folder holding a symlink to an ungranted file.
        assert_denied(
            ws.read(&grant, "docs/leak"),
            Capability::FsRead,
            "it resolves to `secret.txt` through a symlink, which is not within the granted \
             read paths (granted: docs/**)",
        );
        // Attack: the same through a symlinked folder.
        assert_denied(
            ws.read(&grant, "docs/private/secret.txt"),
            Capability::FsRead,
            "resolves to `private/secret.txt`",
        );
        // Attack: an absolute symlink into the workspace, to an ungranted file.
        assert_denied(
            ws.read(&grant, "docs/absolute-leak"),
            Capability::FsRead,
            "resolves to `secret.txt`",
        );
        // Symlinks that stay within the grant work, relative or absolute.
        assert_eq!(ws.read(&grant, "docs/alias.md").unwrap(), b"alpha");
        assert_eq!(ws.read(&grant, "docs/absolute.md").unwrap(), b"beta");
        // A symlink ending in `..` resolves to a folder.
        symlink("..", ws.path("docs/sub/up")).unwrap();
        assert!(
            ws.jail
                .list(&grant, "docs/sub/up")
                .unwrap()
                .iter()
                .any(|e| e.name == "a.md")
        );
        assert!(matches!(
            ws.read(&grant, "docs/sub/up"),
            Err(CapabilityError::Invalid(m)) if m.contains("is a directory")
        ));
        // A symlink loop ends.
        match ws.read(&grant, "docs/loop1") {
            Err(CapabilityError::Failed(message)) => assert!(message.contains("symlink loop")),
            other => panic!("{other:?}"),
        }
        // `stat` describes the link itself, `list` does not follow it.
        assert_eq!(
            ws.jail.stat(&grant, "docs/leak").unwrap().kind,
            Kind::Symlink
        );
        let kinds: Vec<Kind> = ws
            .jail
            .list(&grant, "docs")
            .unwrap()
            .into_iter()
            .filter(|e| e.name == "leak")
            .map(|e| e.kind)
            .collect();
        assert_eq!(kinds, [Kind::Symlink]);
    }

    #[test]
    fn a_folder_swapped_for_a_symlink_after_the_check_is_refused() {
        let ws = Workspace::new();
        let grant = docs();
        // Attack: check `docs/sub/b.md`, then swap `docs/sub` for a symlink to
        // `private/` before the open, hoping the open follows it.
        let resolved = ws.jail.resolve(Op::Read, &grant, "docs/sub/b.md").unwrap();
        std::fs::rename(ws.path("docs/sub"), ws.path("docs/sub.old")).unwrap();
        std::fs::create_dir(ws.path("private/sub")).unwrap();
        std::fs::write(ws.path("private/sub/b.md"), "stolen").unwrap();
        symlink("../private/sub", ws.path("docs/sub")).unwrap();
        assert_denied(
            ws.jail.read_resolved(&FsLimits::default(), &resolved),
            Capability::FsRead,
            "the path changed while it was being opened",
        );
        // The same for a write: the ungranted file stays untouched.
        let resolved = ws
            .jail
            .resolve(Op::Write, &grant, "docs/sub.old/b.md")
            .unwrap();
        std::fs::rename(ws.path("docs/sub.old"), ws.path("docs/sub.older")).unwrap();
        symlink("../private/sub", ws.path("docs/sub.old")).unwrap();
        assert_denied(
            ws.jail.write_resolved(&resolved, b"pwned"),
            Capability::FsWrite,
            "the path changed",
        );
        assert_eq!(
            std::fs::read(ws.path("private/sub/b.md")).unwrap(),
            b"stolen"
        );
    }

    #[test]
    fn a_file_swapped_for_a_symlink_after_the_check_is_refused() {
        let ws = Workspace::new();
        let grant = docs();
        // Attack: check `docs/a.md`, then replace it with a symlink to an
        // ungranted file before the open.
        let resolved = ws.jail.resolve(Op::Read, &grant, "docs/a.md").unwrap();
        std::fs::remove_file(ws.path("docs/a.md")).unwrap();
        symlink("../secret.txt", ws.path("docs/a.md")).unwrap();
        assert_denied(
            ws.jail.read_resolved(&FsLimits::default(), &resolved),
            Capability::FsRead,
            "the path changed",
        );
        // Attack: the same for a write to a name that did not exist yet.
        let resolved = ws.jail.resolve(Op::Write, &grant, "docs/fresh.md").unwrap();
        symlink("../secret.txt", ws.path("docs/fresh.md")).unwrap();
        assert_denied(
            ws.jail.write_resolved(&resolved, b"pwned"),
            Capability::FsWrite,
            "the path changed",
        );
        assert_eq!(std::fs::read(ws.path("secret.txt")).unwrap(), b"top secret");
    }

    fn mkfifo(path: &Path) {
        // nix's `mkfifo` needs its `fs` feature, which the crate does not enable.
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success());
    }

    #[test]
    fn fifos_and_sockets_are_refused_without_blocking() {
        let ws = Workspace::new();
        let grant = docs();
        mkfifo(&ws.path("docs/fifo"));
        let _socket = std::os::unix::net::UnixListener::bind(ws.path("docs/socket")).unwrap();
        // Attack: a FIFO would block a reader (or writer) forever.
        assert_denied(
            ws.read(&grant, "docs/fifo"),
            Capability::FsRead,
            "it is a FIFO",
        );
        assert_denied(
            ws.write(&grant, "docs/fifo", b"x"),
            Capability::FsWrite,
            "it is a FIFO",
        );
        assert_denied(
            ws.read(&grant, "docs/socket"),
            Capability::FsRead,
            "it is a socket",
        );
        // Attack: a FIFO swapped in after the check; the open must not hang.
        let resolved = ws.jail.resolve(Op::Read, &grant, "docs/a.md").unwrap();
        std::fs::remove_file(ws.path("docs/a.md")).unwrap();
        mkfifo(&ws.path("docs/a.md"));
        assert_denied(
            ws.jail.read_resolved(&FsLimits::default(), &resolved),
            Capability::FsRead,
            "it is a FIFO",
        );
        let resolved = ws.jail.resolve(Op::Write, &grant, "docs/late").unwrap();
        mkfifo(&ws.path("docs/late"));
        assert_denied(
            ws.jail.write_resolved(&resolved, b"x"),
            Capability::FsWrite,
            "the path changed",
        );
        // `stat` may still describe it.
        assert_eq!(ws.jail.stat(&grant, "docs/fifo").unwrap().kind, Kind::Other);
    }

    #[test]
    fn size_caps_hold() {
        let ws = Workspace::new();
        let grant = docs();
        let limits = FsLimits {
            max_read: 16,
            max_write: 16,
        };
        std::fs::write(ws.path("docs/exact"), [b'x'; 16]).unwrap();
        std::fs::write(ws.path("docs/over"), [b'x'; 17]).unwrap();
        assert_eq!(
            ws.jail.read(&grant, &limits, "docs/exact").unwrap().len(),
            16
        );
        // Attack: one byte over the cap.
        assert_eq!(
            ws.jail.read(&grant, &limits, "docs/over"),
            Err(CapabilityError::TooLarge {
                what: "read of `docs/over`".to_owned(),
                limit: 16
            })
        );
        // Attack: a sparse 64 GiB file; refused from its size, never read.
        let huge = std::fs::File::create(ws.path("docs/huge")).unwrap();
        huge.set_len(1 << 36).unwrap();
        let started = std::time::Instant::now();
        assert!(matches!(
            ws.read(&grant, "docs/huge"),
            Err(CapabilityError::TooLarge { limit, .. }) if limit == DEFAULT_MAX_READ
        ));
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        // Attack: a write one byte over the cap leaves nothing behind.
        assert_eq!(
            ws.jail.write(&grant, &limits, "docs/big", &[b'x'; 17]),
            Err(CapabilityError::TooLarge {
                what: "write of `docs/big`".to_owned(),
                limit: 16
            })
        );
        assert!(!ws.path("docs/big").exists());
        ws.jail
            .write(&grant, &limits, "docs/big", &[b'x'; 16])
            .unwrap();
    }

    #[test]
    fn writes_never_follow_a_final_symlink() {
        let ws = Workspace::new();
        symlink("a.md", ws.path("docs/link.md")).unwrap();
        // Attack: overwrite a granted file's target through a link to it.
        assert_denied(
            ws.write(&docs(), "docs/link.md", b"x"),
            Capability::FsWrite,
            "it is a symlink; writes never follow a final symlink",
        );
        assert_eq!(std::fs::read(ws.path("docs/a.md")).unwrap(), b"alpha");
    }

    #[test]
    fn missing_things_are_not_found() {
        let ws = Workspace::new();
        let grant = docs();
        let cases = [
            // A missing file.
            "docs/missing.md",
            // A missing folder on the way.
            "docs/nope/b.md",
            // A file used as a folder.
            "docs/a.md/b.md",
        ];
        for path in cases {
            assert_eq!(
                ws.read(&grant, path),
                Err(CapabilityError::NotFound(path.to_owned()))
            );
        }
        // Writes do not create missing parents.
        assert_eq!(
            ws.write(&grant, "docs/new/x.md", b"x"),
            Err(CapabilityError::NotFound("docs/new/x.md".to_owned()))
        );
        // Reading a folder or listing a file is a malformed request.
        assert!(
            matches!(ws.read(&grant, "docs/sub"), Err(CapabilityError::Invalid(m)) if m.contains("is a directory"))
        );
        assert!(
            matches!(ws.jail.list(&grant, "docs/a.md"), Err(CapabilityError::Invalid(m)) if m.contains("not a directory"))
        );
    }

    #[test]
    fn a_guest_with_write_all_cannot_write_control_paths() {
        let ws = Workspace::new();
        for dir in [
            ".git",
            "sub/.git",
            ".zot/tools",
            ".shiro/plugins",
            "home",
            "ext",
        ] {
            std::fs::create_dir_all(ws.path(dir)).unwrap();
        }
        std::fs::write(ws.path(".git/config"), "[core]").unwrap();
        std::fs::write(ws.path("sub/.git/config"), "[core]").unwrap();
        std::fs::write(ws.path("ext/extension.json"), "{}").unwrap();
        symlink(".git", ws.path("out")).unwrap();
        symlink("sub", ws.path("nested")).unwrap();
        let control = ControlPaths::new(
            &ws.root,
            &[
                (ws.path("home"), true, "$ZOT_HOME".to_owned()),
                (ws.path("ext"), true, "an extension's folder".to_owned()),
            ],
        );
        let jail = Jail::open(&ws.root).unwrap().with_control(control);
        let everything = grant_of(&["**"], &["**"]);
        let names = "is a control path (it decides what runs); no grant reaches it";
        let cases: [(&str, String); 12] = [
            // Attack: a shell data tool that runs outside the sandbox.
            (".zot/tools/x.json", format!("`.zot/` {names}")),
            // Attack: a shiro plugin that would replace the user's rules.
            (".shiro/plugins/p.json", format!("`.shiro/` {names}")),
            // Attack: `core.fsmonitor` runs at the next `git status`.
            (".git/config", format!("`.git/` {names}")),
            // Attack: a nested repository's own `.git`.
            ("sub/.git/config", format!("`sub/.git/` {names}")),
            // Attack: a case-folding file system opens `.GIT` as `.git`.
            (".GIT/config", format!("`.GIT/` {names}")),
            // Attack: a gitfile pointing git at a folder the guest controls.
            ("sub/.git", format!("`sub/.git` {names}")),
            ("x/.Git", format!("`x/.Git` {names}")),
            // Attack: through a symlink to `.git`.
            (
                "out/config",
                format!("it resolves to `.git/config` through a symlink; `.git/` {names}"),
            ),
            ("nested/.git/config", format!("`nested/.git/` {names}")),
            // Attack: `$ZOT_HOME` inside the workspace holds the user's policy.
            (
                "home/policy.json",
                "`home/` is a control path ($ZOT_HOME); no grant reaches it".to_owned(),
            ),
            // Attack: an extension rewriting a manifest to grant itself more.
            (
                "ext/extension.json",
                "`ext/` is a control path (an extension's folder); no grant reaches it".to_owned(),
            ),
            // Case differs, still the same folder on a case-folding file system.
            (
                "EXT/extension.json",
                "`ext/` is a control path (an extension's folder); no grant reaches it".to_owned(),
            ),
        ];
        for (path, reason) in cases {
            let got = jail.write(&everything, &FsLimits::default(), path, b"pwned");
            assert_eq!(
                got,
                Err(CapabilityError::denied(Capability::FsWrite, path, reason)),
                "{path}"
            );
        }
        assert_eq!(std::fs::read(ws.path(".git/config")).unwrap(), b"[core]");
        assert_eq!(
            std::fs::read(ws.path("sub/.git/config")).unwrap(),
            b"[core]"
        );
        assert_eq!(std::fs::read(ws.path("ext/extension.json")).unwrap(), b"{}");
        for absent in [
            ".zot/tools/x.json",
            ".shiro/plugins/p.json",
            "home/policy.json",
            "sub/.git/x",
        ] {
            assert!(!ws.path(absent).exists(), "{absent}");
        }
        // Reads of control paths are governed by the read grant alone.
        assert_eq!(
            jail.read(&everything, &FsLimits::default(), ".git/config")
                .unwrap(),
            b"[core]"
        );
        // The project's own files stay writable.
        std::fs::create_dir_all(ws.path("src")).unwrap();
        jail.write(&everything, &FsLimits::default(), "src/x.txt", b"ok")
            .unwrap();
        // Names that only start like a control name are ordinary.
        jail.write(&everything, &FsLimits::default(), "src/.gitignore", b"ok")
            .unwrap();
        jail.write(&everything, &FsLimits::default(), "home.txt", b"ok")
            .unwrap();
        // A plain jail knows the names, not the workspace's own folders.
        assert_denied(
            ws.write(&everything, ".git/config", b"x"),
            Capability::FsWrite,
            "`.git/` is a control path",
        );
        ws.write(&everything, "home/policy.json", b"{}").unwrap();
    }

    #[test]
    fn a_guest_with_write_all_cannot_write_in_or_complete_a_repository_of_any_name() {
        let ws = Workspace::new();
        for dir in [
            "fixtures/remote.git/objects",
            "fixtures/remote.git/refs",
            "fixtures/remote.git/hooks",
            "store/objects",
            "store/refs",
            "tree",
            "docs",
        ] {
            std::fs::create_dir_all(ws.path(dir)).unwrap();
        }
        std::fs::write(
            ws.path("fixtures/remote.git/HEAD"),
            "ref: refs/heads/main\n",
        )
        .unwrap();
        std::fs::write(ws.path("fixtures/remote.git/config"), "[core]\n").unwrap();
        std::fs::write(ws.path("tree/HEAD"), "ref: refs/heads/main\n").unwrap();
        symlink("fixtures/remote.git", ws.path("remote")).unwrap();
        let everything = grant_of(&["**"], &["**"]);
        let why = "a repository: git runs what its config and hooks name";
        let inside =
            format!("`fixtures/remote.git/` is a control path ({why}); no grant reaches it");
        let cases: [(&str, String); 6] = [
            // Attack: a hook of a bare repository, run when the user pushes to it.
            ("fixtures/remote.git/hooks/post-receive", inside.clone()),
            // Attack: its config, read by every git command run in it.
            ("fixtures/remote.git/config", inside.clone()),
            // Attack: the same through a symlink.
            ("remote/config", inside),
            // Attack: a `HEAD` beside `objects/` and `refs/` makes `store/`
            // one, whose `config` the guest wrote first.
            (
                "store/HEAD",
                format!("it would make `store/` a control path ({why}); no grant reaches it"),
            ),
            (
                "store/head",
                format!("it would make `store/` a control path ({why}); no grant reaches it"),
            ),
            // Attack: a `commondir` beside `HEAD` sends git to `store/` for
            // `objects/`, `refs/` and `config`.
            (
                "tree/commondir",
                format!("it would make `tree/` a control path ({why}); no grant reaches it"),
            ),
        ];
        for (path, reason) in cases {
            let got = ws.write(&everything, path, b"pwned");
            assert_eq!(
                got,
                Err(CapabilityError::denied(Capability::FsWrite, path, reason)),
                "{path}"
            );
        }
        assert!(!ws.path("fixtures/remote.git/hooks/post-receive").exists());
        assert!(!ws.path("store/HEAD").exists());
        assert!(!ws.path("tree/commondir").exists());
        assert_eq!(
            std::fs::read(ws.path("fixtures/remote.git/config")).unwrap(),
            b"[core]\n"
        );
        // Control: a heading in `docs/`, a `config` or a `commondir` beside
        // `objects/` but no `HEAD`, the repository read.
        ws.write(&everything, "docs/HEAD", b"a heading").unwrap();
        ws.write(&everything, "store/commondir", b"a word").unwrap();
        ws.write(&everything, "store/config", b"[core]").unwrap();
        assert_eq!(
            ws.read(&everything, "fixtures/remote.git/config").unwrap(),
            b"[core]\n"
        );
        // Attack: a workspace that is itself one (zot started in a bare
        // repository) is written nowhere.
        let bare = Workspace::new();
        for dir in ["objects", "refs", "src"] {
            std::fs::create_dir(bare.path(dir)).unwrap();
        }
        std::fs::write(bare.path("HEAD"), "ref: refs/heads/main\n").unwrap();
        assert_eq!(
            bare.write(&everything, "src/x.txt", b"x"),
            Err(CapabilityError::denied(
                Capability::FsWrite,
                "src/x.txt",
                format!("the whole workspace is a control path ({why}); no grant reaches it")
            ))
        );
    }

    #[test]
    fn a_guest_with_write_all_cannot_write_what_a_nested_repository_s_config_names() {
        let ws = Workspace::new();
        for dir in [
            "vendor/lib/.git",
            "vendor/lib/.husky/_",
            "vendor/lib/tools",
            "vendor/lib/src",
            ".git/modules/theme",
            "theme/.githooks",
            "docs/.husky",
        ] {
            std::fs::create_dir_all(ws.path(dir)).unwrap();
        }
        // A repository cloned into the workspace, set up by husky, sharing
        // settings from a file beside it and decrypting at checkout.
        std::fs::write(
            ws.path("vendor/lib/.git/config"),
            "[core]\n\thooksPath = .husky/_\n[include]\n\tpath = ../shared.gitconfig\n\
             [filter \"crypt\"]\n\tsmudge = ./tools/decrypt.sh %f\n",
        )
        .unwrap();
        // A submodule: its `.git` is a file naming its folder in the
        // workspace's own repository.
        std::fs::write(ws.path("theme/.git"), "gitdir: ../.git/modules/theme\n").unwrap();
        std::fs::write(
            ws.path(".git/modules/theme/config"),
            "[core]\n\thooksPath = .githooks\n",
        )
        .unwrap();
        let everything = grant_of(&["**"], &["**"]);
        let hooks = "the folder git runs hooks from (`core.hooksPath`): it decides what runs";
        let cases: [(&str, String); 5] = [
            // Attack: the hook `git commit` in `vendor/lib/` runs, and the
            // project's hook husky's runs.
            (
                "vendor/lib/.husky/_/pre-commit",
                format!("`vendor/lib/.husky/` is a control path ({hooks}); no grant reaches it"),
            ),
            (
                "vendor/lib/.husky/pre-commit",
                format!("`vendor/lib/.husky/` is a control path ({hooks}); no grant reaches it"),
            ),
            // Attack: the configuration it includes (a `core.fsmonitor` line
            // there runs at the next `git status`).
            (
                "vendor/lib/shared.gitconfig",
                "`vendor/lib/shared.gitconfig` is a control path (a file git reads as its \
                 config (`include.path`): it decides what runs); no grant reaches it"
                    .to_owned(),
            ),
            // Attack: the program its filter runs at checkout.
            (
                "vendor/lib/tools/decrypt.sh",
                "`vendor/lib/tools/decrypt.sh` is a control path (a program git's \
                 configuration runs (`filter.<name>.smudge`): it decides what runs); no grant \
                 reaches it"
                    .to_owned(),
            ),
            // Attack: a hook of a submodule.
            (
                "theme/.githooks/post-checkout",
                format!("`theme/.githooks/` is a control path ({hooks}); no grant reaches it"),
            ),
        ];
        for (path, reason) in cases {
            assert_eq!(
                ws.write(&everything, path, b"pwned"),
                Err(CapabilityError::denied(Capability::FsWrite, path, reason)),
                "{path}"
            );
            assert!(!ws.path(path).exists(), "{path}");
        }
        // Control: the rest of both working trees, and a `.husky/` no
        // configuration names.
        for path in [
            "vendor/lib/src/main.rs",
            "theme/style.css",
            "docs/.husky/pre-commit",
        ] {
            ws.write(&everything, path, b"ok").unwrap();
        }
    }

    #[test]
    fn what_a_nested_repository_s_config_names_outside_its_working_tree_is_a_control_path() {
        let ws = Workspace::new();
        for dir in ["packages/app/.git", "tools/hooks", "tools/lint"] {
            std::fs::create_dir_all(ws.path(dir)).unwrap();
        }
        // A monorepo's package, cloned on its own, that shares the
        // project's hooks and settings from above its working tree.
        std::fs::write(
            ws.path("packages/app/.git/config"),
            "[core]\n\thooksPath = ../../tools/hooks\n[include]\n\tpath = ../../../shared.gitconfig\n",
        )
        .unwrap();
        let everything = grant_of(&["**"], &["**"]);
        let hooks = "the folder git runs hooks from (`core.hooksPath`): it decides what runs";
        // Attack: the hook `git commit` in `packages/app/` runs, reached
        // without passing through its working tree.
        assert_eq!(
            ws.write(&everything, "tools/hooks/pre-commit", b"pwned"),
            Err(CapabilityError::denied(
                Capability::FsWrite,
                "tools/hooks/pre-commit",
                format!("`tools/hooks/` is a control path ({hooks}); no grant reaches it")
            ))
        );
        // Attack: the configuration it includes.
        assert_eq!(
            ws.write(
                &everything,
                "shared.gitconfig",
                b"[core]\n\tfsmonitor = ./x\n"
            ),
            Err(CapabilityError::denied(
                Capability::FsWrite,
                "shared.gitconfig",
                "`shared.gitconfig` is a control path (a file git reads as its config \
                 (`include.path`): it decides what runs); no grant reaches it"
            ))
        );
        assert!(!ws.path("tools/hooks/pre-commit").exists());
        assert!(!ws.path("shared.gitconfig").exists());
        // Control: the rest of the workspace, and reading the hooks.
        ws.write(&everything, "tools/lint/run.sh", b"ok").unwrap();
        std::fs::write(ws.path("tools/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
        assert_eq!(
            ws.read(&everything, "tools/hooks/pre-commit").unwrap(),
            b"#!/bin/sh\n"
        );
        // Attack: the same repository's configuration changed once the
        // session's first write had found it.
        std::fs::write(
            ws.path("packages/app/.git/config"),
            "[core]\n\thooksPath = ../../tools/lint\n",
        )
        .unwrap();
        assert_eq!(
            ws.write(&everything, "tools/lint/run.sh", b"pwned"),
            Err(CapabilityError::denied(
                Capability::FsWrite,
                "tools/lint/run.sh",
                format!("`tools/lint/` is a control path ({hooks}); no grant reaches it")
            ))
        );
        assert_eq!(std::fs::read(ws.path("tools/lint/run.sh")).unwrap(), b"ok");
    }

    #[test]
    fn what_a_bare_repository_s_config_names_in_the_workspace_is_a_control_path() {
        let ws = Workspace::new();
        for dir in [
            "fixtures/remote.git/objects",
            "fixtures/remote.git/refs",
            "ci/hooks",
        ] {
            std::fs::create_dir_all(ws.path(dir)).unwrap();
        }
        // A bare repository the project's tests push to, whose hooks, as
        // git takes them relative to the repository's own folder, are the
        // project's `ci/hooks/`: a push runs `ci/hooks/post-receive`.
        std::fs::write(
            ws.path("fixtures/remote.git/HEAD"),
            "ref: refs/heads/main\n",
        )
        .unwrap();
        std::fs::write(
            ws.path("fixtures/remote.git/config"),
            "[core]\n\tbare = true\n\thooksPath = ../../ci/hooks\n",
        )
        .unwrap();
        let everything = grant_of(&["**"], &["**"]);
        assert_eq!(
            ws.write(&everything, "ci/hooks/post-receive", b"pwned"),
            Err(CapabilityError::denied(
                Capability::FsWrite,
                "ci/hooks/post-receive",
                "`ci/hooks/` is a control path (the folder git runs hooks from \
                 (`core.hooksPath`): it decides what runs); no grant reaches it"
            ))
        );
        assert!(!ws.path("ci/hooks/post-receive").exists());
        // Control: the rest of `ci/`.
        ws.write(&everything, "ci/build.yml", b"ok").unwrap();
    }

    #[test]
    fn a_change_to_the_workspace_s_git_configuration_counts_from_the_next_write() {
        let ws = Workspace::new();
        std::fs::create_dir_all(ws.path(".git")).unwrap();
        std::fs::create_dir_all(ws.path(".githooks")).unwrap();
        let everything = grant_of(&["**"], &["**"]);
        // Control: no configuration names the folder yet.
        ws.write(&everything, ".githooks/pre-commit", b"ok")
            .unwrap();
        // Attack: the session began before husky set `core.hooksPath`.
        std::fs::write(ws.path(".git/config"), "[core]\n\thooksPath = .githooks\n").unwrap();
        assert_eq!(
            ws.write(&everything, ".githooks/pre-commit", b"pwned"),
            Err(CapabilityError::denied(
                Capability::FsWrite,
                ".githooks/pre-commit",
                "`.githooks/` is a control path (the folder git runs hooks from \
                 (`core.hooksPath`): it decides what runs); no grant reaches it"
            ))
        );
        assert_eq!(
            std::fs::read(ws.path(".githooks/pre-commit")).unwrap(),
            b"ok"
        );
        // Control: moved elsewhere, the folder is the project's again.
        std::fs::write(ws.path(".git/config"), "[core]\n\thooksPath = hooks\n").unwrap();
        ws.write(&everything, ".githooks/pre-commit", b"ok")
            .unwrap();
        // Attack: the same where the workspace is a folder of the working
        // tree (zot started in `ws/docs/`): `hooksPath` names `docs/hooks`.
        std::fs::create_dir_all(ws.path("docs/hooks")).unwrap();
        let docs = Jail::open(&ws.path("docs")).unwrap();
        let write = |path| docs.write(&everything, &FsLimits::default(), path, b"pwned");
        write("hooks/pre-commit").unwrap();
        std::fs::write(ws.path(".git/config"), "[core]\n\thooksPath = docs/hooks\n").unwrap();
        assert_eq!(
            write("hooks/pre-commit"),
            Err(CapabilityError::denied(
                Capability::FsWrite,
                "hooks/pre-commit",
                "`hooks/` is a control path (the folder git runs hooks from (`core.hooksPath`): \
                 it decides what runs); no grant reaches it"
            ))
        );
        // Control: reading, listing and describing them stay governed by
        // the read grant.
        let limits = FsLimits::default();
        assert_eq!(
            docs.read(&everything, &limits, "hooks/pre-commit").unwrap(),
            b"pwned"
        );
        assert_eq!(docs.list(&everything, "hooks").unwrap().len(), 1);
        docs.stat(&everything, "hooks/pre-commit").unwrap();
    }

    #[test]
    fn control_paths_are_placed_relative_to_the_workspace() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let ws = root.join("ws");
        std::fs::create_dir_all(ws.join("real")).unwrap();
        symlink(ws.join("real"), root.join("link-in")).unwrap();
        let what = |s: &str| s.to_owned();
        let control = ControlPaths::new(
            &ws,
            &[
                // Inside, not created yet: placed by its existing parent.
                (ws.join("home/zot"), true, what("$ZOT_HOME")),
                // Outside: not a control path of this workspace.
                (root.join("elsewhere"), true, what("outside")),
                // Reached through a symlink from outside: its real place counts.
                (root.join("link-in"), true, what("linked")),
                // A file, not a folder.
                (ws.join("policy.json"), false, what("the system policy")),
            ],
        );
        let got: Vec<(String, bool)> = control
            .paths()
            .iter()
            .map(|c| (c.shown(), c.folder))
            .collect();
        assert_eq!(
            got,
            [
                ("home/zot/".to_owned(), true),
                ("policy.json".to_owned(), false),
                ("real/".to_owned(), true),
            ]
        );
        // A file control path refuses itself, not names below or beside it.
        assert!(
            control
                .refusal_for(&["policy.json".to_owned()], true)
                .is_some()
        );
        assert!(
            control
                .refusal_for(&["policy.json5".to_owned()], true)
                .is_none()
        );
        // A secret path is refused to reads as well; control paths are not,
        // and the fixed names are not.
        let secret = control.with_secrets(&ws, &[(ws.join("home/zot/s.json"), false, what("s"))]);
        let read = |path: &[&str]| {
            let components: Vec<String> = path.iter().map(|c| (*c).to_owned()).collect();
            secret.refusal_for(&components, false)
        };
        assert_eq!(
            read(&["home", "zot", "S.json"]).as_deref(),
            Some("`home/zot/s.json` is a control path (s); no grant reaches it")
        );
        assert_eq!(read(&["home", "zot", "policy.json"]), None);
        assert_eq!(read(&[".git", "config"]), None);
        assert!(
            secret
                .refusal_for(&["home".to_owned(), "zot".to_owned()], true)
                .is_some()
        );
        // A folder holding the workspace makes all of it a control path.
        let holding = ControlPaths::new(&ws, &[(root.clone(), true, what("$ZOT_HOME"))]);
        assert_eq!(
            holding
                .refusal_for(&["src".to_owned(), "x".to_owned()], true)
                .as_deref(),
            Some("the whole workspace lies inside a control path ($ZOT_HOME); no grant reaches it")
        );
    }

    #[test]
    fn hard_links_are_neither_read_nor_written() {
        let ws = Workspace::new();
        let outside = ws._tmp.path().join("outside.txt");
        std::fs::write(&outside, "outside").unwrap();
        // Attack: a workspace name for a file outside the workspace.
        std::fs::hard_link(&outside, ws.path("docs/leak.md")).unwrap();
        let reason = "it has 2 hard links; a file with another name may be one outside the \
                      workspace, so it is neither read nor written (replace the link with a copy)";
        assert_eq!(
            ws.write(&docs(), "docs/leak.md", b"pwned"),
            Err(CapabilityError::denied(
                Capability::FsWrite,
                "docs/leak.md",
                reason
            ))
        );
        assert_eq!(
            ws.read(&docs(), "docs/leak.md"),
            Err(CapabilityError::denied(
                Capability::FsRead,
                "docs/leak.md",
                reason
            ))
        );
        assert_eq!(std::fs::read(&outside).unwrap(), b"outside");
        // `stat` and `list` still describe it.
        assert_eq!(ws.jail.stat(&docs(), "docs/leak.md").unwrap().size, 7);
        // Once the other name is gone, it is an ordinary file again.
        std::fs::remove_file(&outside).unwrap();
        ws.write(&docs(), "docs/leak.md", b"mine").unwrap();
        assert_eq!(ws.read(&docs(), "docs/leak.md").unwrap(), b"mine");
    }

    #[test]
    fn an_escape_caught_by_cap_std_is_a_refusal() {
        let ws = Workspace::new();
        symlink("/", ws.path("root")).unwrap();
        // The real error cap-std gives for a path that leads out of its `Dir`.
        let err = ws.jail.dir.symlink_metadata("root/etc").unwrap_err();
        assert_eq!(err.to_string(), CAP_STD_ESCAPE);
        assert_eq!(
            io_failure(Op::Read, "root/etc", &err),
            CapabilityError::denied(
                Capability::FsRead,
                "root/etc",
                "the path leads outside the workspace (caught by the jail's directory handle)"
            )
        );
        // EACCES from the kernel (a sandbox, a mode) is a refusal too.
        let err = io::Error::from_raw_os_error(libc::EACCES);
        assert!(io_failure(Op::Write, "x", &err).is_denied());
        // Anything else stays a failure of an allowed use.
        let err = io::Error::from_raw_os_error(libc::EIO);
        assert!(matches!(
            io_failure(Op::Read, "x", &err),
            CapabilityError::Failed(_)
        ));
    }

    #[test]
    fn bad_globs_are_invalid() {
        let cases = [
            // Absolute globs would name host paths.
            ("/etc/**", "is absolute"),
            // `..` in a glob would reach outside.
            ("../**", "contains `..`"),
            ("", "is empty"),
            // Not a glob at all.
            ("docs/[", "is not a valid glob"),
        ];
        for (glob, words) in cases {
            match FsGrant::new(&[glob.to_owned()], &[]) {
                Err(CapabilityError::Invalid(message)) => {
                    assert!(message.contains(words), "{glob}: `{message}`");
                    assert!(message.starts_with("read glob"), "{message}");
                }
                other => panic!("{glob}: {other:?}"),
            }
        }
    }
}
