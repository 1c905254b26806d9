//! Kernel confinement of every process zotbox starts for a shell command, a
//! data shell tool or (under `confine_native`) a native extension.
//!
//! Pattern grants and deny rules decide *which* commands run; this module
//! makes the kernel decide *what they can touch*. Rules, each with an attack
//! test (unit tests below, e2e in `tests/e2e/confinement.rs`):
//!
//! 1. **Files (Landlock).** Read and execute on the system directories
//!    ([`SYSTEM_DIRS`]), read and write on a few devices (`/dev/null`, …),
//!    read, write and execute on the workspace and the directories the caller
//!    names writable (the run's private `HOME`, a native extension's data
//!    dir), read on the ones it names readable (a native extension's folder)
//!    and on the repository outside the workspace that a worktree's `.git`
//!    file names, only when that repository names the worktree back
//!    (`repository::worktree_dirs`: the `.git` file is the workspace's to
//!    write, and `gitdir: ~/.ssh` must open nothing); nothing else, the
//!    user's home included. A symlink does not help: the kernel checks
//!    where the path leads. A descriptor opened before (one zotbox was
//!    started with) does not reach the command: every one past stderr is
//!    closed at its `execve`.
//! 2. **Network.** Unless the policy grants the shell network, the command
//!    gets a network namespace of its own (a loopback that is down) and
//!    Landlock refuses TCP `connect` and `bind` (ABI 4+). From ABI 6 it also
//!    cannot reach abstract Unix sockets or signal processes outside it.
//! 3. **Control paths** `.git/`, `.zot/` and `.shiro/` of the workspace
//!    (where they exist), and the ones the caller names ([`Jail::guarding`]:
//!    `$ZOT_HOME` or an extension folder lying in it), are bound read-only
//!    in a private mount namespace, inside an unprivileged user namespace
//!    that maps the caller's own uid, as bubblewrap does. Capabilities
//!    inside it end at `execve`. A secret path lying in the workspace
//!    (`$ZOT_HOME`, whole) is covered with an empty, read-only tmpfs (a
//!    file with `/dev/null` on a mount that opens no device), so a file
//!    made or replaced in it later is covered too; a writable folder inside
//!    it (a native extension's data dir) is moved back into the cover.
//!    Without namespaces to do so nothing starts ([`ConfineError::CannotHide`]).
//! 4. **Every descendant dies with the call.** The command runs in a new PID
//!    namespace whose init dies with the process zotbox waits for, and the
//!    kernel then kills everything in it: `setsid`, double forks and
//!    daemons do not leave a PID namespace. That process dies with zotbox
//!    (`PR_SET_PDEATHSIG`), so a zotbox killed mid-call takes the command
//!    along.
//! 5. **Degrade, say so, or refuse.** Where the kernel lacks a protection
//!    the others still apply, [`Kernel::report`] (`zotbox doctor`) names what
//!    is missing, and a policy with `require_confinement` refuses to run
//!    anything instead ([`ConfineError::Unavailable`]).
//!
//! 6. **Control paths at any depth.** A nested repository decides what runs
//!    as much as the workspace's own (`git status` in `vendor/lib/` runs the
//!    `core.fsmonitor` of `vendor/lib/.git/config`, and a shell prompt runs
//!    `git status` on entering the folder), and zot started in a subfolder
//!    runs its `.zot/extensions/*`. A [`Census`] finds every `.git`, `.zot`
//!    and `.shiro` below the workspace, and every folder git takes for a
//!    repository whatever its name (`HEAD` with `objects/` and `refs/`, a
//!    bare one, whose hooks run when the user pushes to it; or `HEAD` with
//!    a `commondir`, a linked worktree's), before the command runs (or the
//!    native extension starts); they are bound read-only like the root's,
//!    and so are the folder a `.git` file (a worktree's,
//!    `--separate-git-dir`) names and the one a `commondir` names, inside
//!    the workspace, which git reads as the repository, and what a nested
//!    repository's configuration names in the workspace (its hooks folder,
//!    included files, programs: [`Census::with_configured`]). A folder that does
//!    not exist cannot be bound, so once every descendant of a command is
//!    dead the census is taken again
//!    and any control path that was not there before (the caller's named
//!    ones too, such as a file git's configuration includes when it
//!    exists: [`Census::watching`]) is set aside (renamed
//!    with [`SET_ASIDE`] added, a link as a link: nothing is lost should it
//!    have been the user's, cloned in another terminal while the command
//!    ran); a folder git takes for a repository by what it holds (`src/`
//!    given a `HEAD`, `objects` and `refs`, executable files passing git's
//!    test as folders do, or the workspace's root where it is no checkout)
//!    loses its `HEAD` and `commondir` instead, and stays; the call then
//!    fails as a refusal naming them. A folder of the user's the command
//!    closed to them (`chmod 311`, which git still enters) is opened again
//!    for its owner and looked in; one that still cannot be read is named
//!    in the refusal too. A workspace of more than [`MAX_FOLDERS`] folders runs
//!    nothing ([`CensusError::TooLarge`]). The census before a command is
//!    written down in `$ZOT_HOME` ([`Settings::records`]) until the one
//!    after it is done: should zotbox die mid-call, the next host or
//!    command in that workspace takes back what the dead one left (what
//!    was made before its deadline; a clone made since is the user's). A
//!    Ctrl-C, `SIGTERM` or `SIGHUP` does not leave that to them: zotbox
//!    stops the commands in flight and takes back first
//!    ([`super::shell::interrupt`]).
//!
//! 7. **The session's sockets are out of reach.** Landlock checks no file
//!    access on connecting to a Unix socket by its path, and the user's
//!    session listens on many: D-Bus and `systemd --user` (which start any
//!    program, unconfined), X11, tmux and editors' servers (which type into
//!    a terminal), the ssh and gpg agents, docker, zotbox's own shared host.
//!    Their folders ([`SOCKET_DIRS`] and `$HOME`), `/dev/shm`, and every
//!    other folder of the top level of `/` but the system's, `/proc`,
//!    `/dev` and `/sys` (`/srv`, `/mnt`, `/home`, `/var`: a socket can lie
//!    in any of them, WSL's X11 and sound servers in `/mnt/wslg/`), are
//!    covered with an empty, read-only tmpfs, what the command is given
//!    inside them (the workspace, the private `HOME`, …) moved back, and
//!    the command enters its working folder again under the covers.
//!    Without a mount namespace they stay reachable (`doctor` says mount
//!    namespaces are missing); the shared host then still refuses a
//!    request without its token.
//!
//! Not covered: `/proc` stays the host's (other processes' command lines
//! are readable, their memory and environment are not: Landlock refuses
//! `ptrace` access across domains); Unix sockets in the workspace itself
//! and in what the command is given can still be connected to where file
//! permissions allow; a control path a command creates exists until it
//! ends; a confined native extension finds the
//! control paths that were there when it started read-only, at any depth,
//! but one it creates is not set aside (it lives as long as zot, and one
//! the user makes meanwhile in another terminal, a clone or a
//! `cargo new`, could not be told from its own); the census trusts a
//! folder's change time to say that its entries changed, as every local
//! filesystem makes it; CPU and memory are not limited here.
//!
//! How: everything that allocates or can fail for reasons other than the
//! kernel (the Landlock ruleset and its path fds, the uid maps, the mount
//! points as C strings) is prepared before `fork`; between `fork` and
//! `execve` the child only makes system calls. With namespaces the process
//! chain is: the process zotbox spawned (outside; it waits and mirrors the
//! exit status) → the namespace's init (reaps orphans, forwards `SIGTERM`)
//! → the command.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use landlock::{
    ABI, Access, AccessFs, AccessNet, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr, Scope,
};

use super::fs::ControlPaths;
use super::repository;

/// Directories every confined process may read and execute from.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/etc",
];

/// Folders that hold the sockets of the user's session, besides `$HOME`:
/// covered for every confined process (`Jail::socket_covers`).
pub const SOCKET_DIRS: &[&str] = &["/tmp", "/var/tmp", "/run"];

/// Directories every confined process may read (not execute from).
const READ_ONLY_DIRS: &[&str] = &["/proc"];

/// Devices every confined process may read and write.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// The workspace folders that decide grants or run code: read-only.
pub const CONTROL_PATHS: &[&str] = &[".git", ".zot", ".shiro"];

/// The Landlock ABI this module asks for: 6 adds the scopes (signals,
/// abstract Unix sockets). Older kernels get what they support.
const TARGET_ABI: ABI = ABI::V6;

/// What the policy says about confinement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// Shell commands may use the network (`shell_network: true`). Default: no.
    pub shell_network: bool,
    /// The policy file that sets `require_confinement: true`, if any: then
    /// nothing runs without every protection. Default: none.
    pub required_by: Option<PathBuf>,
    /// Where each command's census is written down while it runs (in
    /// `$ZOT_HOME`, out of every command's reach), so that what a command
    /// left when its zotbox died mid-call is taken back by the next
    /// command in that workspace ([`Census::take_back_abandoned`]).
    /// Default: none (nothing is written down).
    pub records: Option<PathBuf>,
}

/// One protection the kernel may or may not offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    /// Landlock file access rules (ABI 1).
    Landlock,
    /// Landlock TCP rules (ABI 4).
    LandlockNetwork,
    /// Landlock scopes: signals and abstract Unix sockets (ABI 6).
    LandlockScopes,
    /// Unprivileged user namespaces.
    UserNamespace,
    /// Mount namespaces (read-only control paths, the session's sockets
    /// covered).
    MountNamespace,
    /// PID namespaces (every descendant dies with the call).
    PidNamespace,
    /// Network namespaces.
    NetworkNamespace,
}

impl Protection {
    /// Every protection, in the order `doctor` lists them.
    pub const ALL: [Self; 7] = [
        Self::Landlock,
        Self::LandlockNetwork,
        Self::LandlockScopes,
        Self::UserNamespace,
        Self::MountNamespace,
        Self::PidNamespace,
        Self::NetworkNamespace,
    ];

    /// What it is and what it protects, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Landlock => "Landlock (file access: workspace and system directories only)",
            Self::LandlockNetwork => "Landlock network rules, ABI 4 (no TCP connect or bind)",
            Self::LandlockScopes => "Landlock scopes, ABI 6 (no signals or abstract sockets out)",
            Self::UserNamespace => "unprivileged user namespaces",
            Self::MountNamespace => {
                "mount namespaces (read-only `.git/`, `.zot/`, `.shiro/`; the session's sockets \
                 out of reach)"
            }
            Self::PidNamespace => "PID namespaces (every descendant dies with the call)",
            Self::NetworkNamespace => "network namespaces (no network unless granted)",
        }
    }
}

/// What this kernel offers, probed once per process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    /// The Landlock ABI version; 0 when Landlock is absent or disabled.
    pub landlock_abi: i32,
    /// Whether a user, mount, PID and network namespace could be made and
    /// used (a test process ran confined), or why not.
    pub namespaces: Result<(), String>,
}

impl Kernel {
    /// The kernel's protections, probed on first use (a few milliseconds:
    /// one confined run of `true`).
    pub fn get() -> &'static Self {
        static KERNEL: OnceLock<Kernel> = OnceLock::new();
        KERNEL.get_or_init(|| {
            let landlock_abi = child::landlock_abi();
            let namespaces = probe_namespaces();
            if let Err(why) = &namespaces {
                tracing::warn!("kernel namespaces unavailable for confinement: {why}");
            }
            Self {
                landlock_abi,
                namespaces,
            }
        })
    }

    /// Whether `protection` is available, or why not.
    pub fn offers(&self, protection: Protection) -> Result<(), String> {
        let abi = |needed: i32| {
            if self.landlock_abi >= needed {
                Ok(())
            } else if self.landlock_abi == 0 {
                Err("Landlock is not enabled in this kernel".to_owned())
            } else {
                Err(format!(
                    "this kernel offers Landlock ABI {}; {needed} is needed",
                    self.landlock_abi
                ))
            }
        };
        match protection {
            Protection::Landlock => abi(1),
            Protection::LandlockNetwork => abi(4),
            Protection::LandlockScopes => abi(6),
            Protection::UserNamespace
            | Protection::MountNamespace
            | Protection::PidNamespace
            | Protection::NetworkNamespace => self.namespaces.clone(),
        }
    }

    /// Every protection with whether it is offered, for `doctor`.
    pub fn report(&self) -> Vec<(Protection, Result<(), String>)> {
        Protection::ALL
            .iter()
            .map(|p| (*p, self.offers(*p)))
            .collect()
    }

    /// The first protection a jail needs that is missing: Landlock and the
    /// namespaces (whose network namespace blocks the network where
    /// Landlock's TCP rules are missing).
    fn missing(&self) -> Option<Protection> {
        if self.offers(Protection::Landlock).is_err() {
            return Some(Protection::Landlock);
        }
        if self.namespaces.is_err() {
            return Some(Protection::UserNamespace);
        }
        None
    }
}

/// Why a process could not be confined.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfineError {
    /// The policy requires a protection the kernel lacks.
    #[error(
        "policy `{}` requires kernel confinement (`require_confinement: true`), but this \
         kernel lacks {}; run `zotbox doctor` to see what it offers",
        policy.display(),
        protection.describe()
    )]
    Unavailable {
        /// What is missing.
        protection: Protection,
        /// The policy file that requires it.
        policy: PathBuf,
    },
    /// Preparing the confinement failed (a path or ruleset error).
    #[error("cannot prepare the kernel confinement: {0}")]
    Prepare(String),
    /// The workspace holds the user's secrets ([`Jail::hidden`]), and only a
    /// mount namespace can cover them, which this system does not offer.
    #[error(
        "the workspace holds the user's secrets (`$ZOT_HOME` lies in it), which this system \
         cannot hide from a confined process (no user namespaces): keep `$ZOT_HOME` outside \
         the workspace"
    )]
    CannotHide,
}

/// What a confined process may reach.
#[derive(Debug, Clone, Default)]
pub struct Jail {
    /// The workspace: read, write and execute; its control paths read-only.
    pub workspace: Option<PathBuf>,
    /// Further directories to read (a native extension's folder).
    pub read: Vec<PathBuf>,
    /// Further directories to read and write (the private `HOME`, a data dir).
    pub write: Vec<PathBuf>,
    /// Whether TCP and the network namespace are left open.
    pub network: bool,
    /// Further paths inside the workspace made read-only, as its control
    /// paths are (`$ZOT_HOME` or an extension folder lying in it).
    pub read_only: Vec<PathBuf>,
    /// Paths inside the workspace covered so that nothing of them can be
    /// read (the user's secrets, when `$ZOT_HOME` lies in it): an empty
    /// folder over a folder, `/dev/null` on a mount that opens no device
    /// over a file.
    pub hidden: Vec<PathBuf>,
    /// The user's home, whose sockets are covered with those of
    /// [`SOCKET_DIRS`]. `None`: `$HOME`.
    pub home: Option<PathBuf>,
}

impl Jail {
    /// This jail, with the workspace's own `control` paths (an extension
    /// folder lying in it) read-only, as `.git`, `.zot` and `.shiro` are,
    /// and the secret ones (`$ZOT_HOME`, whole) [hidden](Jail::hidden).
    /// Without a workspace it is unchanged.
    #[must_use]
    pub fn guarding(mut self, control: &ControlPaths) -> Self {
        let Some(workspace) = &self.workspace else {
            return self;
        };
        for path in control.paths() {
            let inside = workspace.join(&path.path);
            // A covered path needs no read-only bind under its cover.
            if path.secret {
                self.hidden.push(inside);
            } else {
                self.read_only.push(inside);
            }
        }
        self
    }

    /// Prepares the confinement for one process under `settings` (only its
    /// `required_by` is read here; the caller sets [`Jail::network`]).
    ///
    /// # Errors
    ///
    /// [`ConfineError::Unavailable`] when the policy requires a protection
    /// this kernel lacks; [`ConfineError::Prepare`] when the ruleset cannot
    /// be built.
    pub fn prepare(&self, settings: &Settings) -> Result<Prepared, ConfineError> {
        self.prepare_on(Kernel::get(), settings)
    }

    fn prepare_on(&self, kernel: &Kernel, settings: &Settings) -> Result<Prepared, ConfineError> {
        if let Some(policy) = &settings.required_by
            && let Some(protection) = kernel.missing()
        {
            return Err(ConfineError::Unavailable {
                protection,
                policy: policy.clone(),
            });
        }
        self.prepare_with(kernel.landlock_abi, kernel.namespaces.is_ok())
    }

    fn prepare_with(&self, landlock_abi: i32, namespaces: bool) -> Result<Prepared, ConfineError> {
        // Landlock cannot take one file out of a readable tree: without a
        // mount namespace to cover them, the secrets would be readable.
        if !namespaces && self.hidden.iter().any(|path| path.exists()) {
            return Err(ConfineError::CannotHide);
        }
        let ruleset = if landlock_abi >= 1 {
            self.ruleset(landlock_abi)
                .map_err(|err| ConfineError::Prepare(format!("landlock: {err}")))?
        } else {
            None
        };
        let namespaces = if namespaces {
            Some(self.namespaces()?)
        } else {
            None
        };
        let (report_read, report_write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
                .map_err(|err| ConfineError::Prepare(format!("cannot make a pipe: {err}")))?;
        Ok(Prepared {
            ruleset,
            namespaces,
            report_read,
            report_write,
        })
    }

    fn ruleset(&self, abi: i32) -> Result<Option<OwnedFd>, landlock::RulesetError> {
        let mut ruleset = Ruleset::default().handle_access(AccessFs::from_all(TARGET_ABI))?;
        if !self.network {
            ruleset = ruleset.handle_access(AccessNet::from_all(TARGET_ABI))?;
        }
        if abi >= 6 {
            ruleset = ruleset.scope(Scope::from_all(TARGET_ABI))?;
        }
        let mut created = ruleset.create()?;
        let read = AccessFs::from_read(TARGET_ABI);
        let read_only = read & !AccessFs::Execute;
        let all = AccessFs::from_all(TARGET_ABI);
        let device = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate;
        let system = SYSTEM_DIRS.iter().map(|d| (PathBuf::from(d), read));
        let proc = READ_ONLY_DIRS.iter().map(|d| (PathBuf::from(d), read_only));
        let devices = DEVICES.iter().map(|d| (PathBuf::from(d), device));
        let workspace = self.workspace.iter().map(|d| (d.clone(), all));
        // A worktree's repository outside it, read-only: git needs it for
        // `status` and `diff`.
        let git = self
            .workspace
            .iter()
            .flat_map(|w| repository::worktree_dirs(w))
            .map(|d| (d, read));
        let write = self.write.iter().map(|d| (d.clone(), all));
        let extra = self.read.iter().map(|d| (d.clone(), read));
        for (path, access) in system
            .chain(proc)
            .chain(devices)
            .chain(workspace)
            .chain(git)
            .chain(write)
            .chain(extra)
        {
            created = add_rule(created, &path, access)?;
        }
        Ok(created.into())
    }

    fn namespaces(&self) -> Result<Namespaces, ConfineError> {
        let uid = nix::unistd::getuid().as_raw();
        let gid = nix::unistd::getgid().as_raw();
        let mut writable = Vec::new();
        let mut binds = Vec::new();
        let mut masks = Vec::new();
        let workspace = self.workspace.as_ref().and_then(|w| w.canonicalize().ok());
        if let Some(workspace) = &workspace {
            // A writable folder inside a read-only one (a native extension's
            // data dir when `$ZOT_HOME` lies in the workspace) is a mount of
            // its own first: the read-only bind above it carries it along
            // and makes only its own mount read-only.
            for path in &self.write {
                let Ok(path) = std::fs::canonicalize(path) else {
                    continue;
                };
                if path.starts_with(workspace) && path != *workspace {
                    writable.push(c_string(&path)?);
                }
            }
            let named = CONTROL_PATHS.iter().map(|name| workspace.join(name));
            let controls: Vec<PathBuf> = named.chain(self.read_only.iter().cloned()).collect();
            // A `.git` file (a worktree's, `--separate-git-dir`) makes the
            // folder it points to the repository, and a repository's
            // `commondir` the folder it names: inside the workspace, they
            // are as read-only as a `.git` folder would be.
            let pointed = controls
                .iter()
                .flat_map(|path| repository::pointed_to(path))
                .filter_map(|path| path.canonicalize().ok())
                .filter(|path| path.starts_with(workspace) && path != workspace);
            // Through a symlink, the folder it leads to is what git or zot
            // reads. One bind each: the policy's control paths and a `.git`
            // file may name the same folder.
            let controls = controls.iter().filter_map(|path| path.canonicalize().ok());
            let mut bound = std::collections::HashSet::new();
            for path in controls.chain(pointed) {
                if bound.insert(path.clone()) {
                    binds.push((c_string(&path)?, locked_flags(&path)));
                }
            }
            // What the process is given inside a cover (a native extension's
            // data dir, and its own folder when installed in `$ZOT_HOME`) is
            // moved back into it, as it was mounted (a control path
            // read-only).
            let given: Vec<PathBuf> = self
                .write
                .iter()
                .chain(&self.read)
                .filter_map(|given| std::fs::canonicalize(given).ok())
                .collect();
            for path in &self.hidden {
                // Only what exists and lies in the workspace: anything
                // else is outside what a command may read at all.
                let Ok(path) = std::fs::canonicalize(path) else {
                    continue;
                };
                if !path.starts_with(workspace) {
                    continue;
                }
                masks.push(Mask::over(&path, path.is_dir(), &given)?);
            }
        }
        // Last, over what the covers above made: the folders of the user's
        // sockets, what the command is given in them moved back.
        masks.extend(self.socket_covers(workspace.as_deref())?);
        Ok(Namespaces {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            network: !self.network,
            writable,
            binds,
            masks,
        })
    }
}

impl Jail {
    /// Covers for the folders that hold the sockets of the user's session
    /// ([`SOCKET_DIRS`] and `$HOME`) or may hold others (`/dev/shm`, and
    /// the top of `/` but for what the command keeps in view: `/srv`,
    /// `/mnt`), each with the folders the command is given inside it (the
    /// workspace, its git folders, the writable and readable ones) moved
    /// back. Landlock checks no file access on connecting to a socket by
    /// its path, so without them a confined
    /// command reaches the user's D-Bus and `systemd --user` (which start
    /// any program, unconfined), X11, tmux or an editor's server (which
    /// type into the user's terminal), the ssh and gpg agents, and zotbox's
    /// own shared host. Landlock grants nothing in these folders anyway,
    /// so what the command may read or write does not change. A folder
    /// that is or lies in the workspace, or lies in another cover, is not
    /// covered.
    fn socket_covers(&self, workspace: Option<&Path>) -> Result<Vec<Mask>, ConfineError> {
        let home = self.home.clone().or_else(crate::home::user_home);
        let mut covers: Vec<PathBuf> = SOCKET_DIRS
            .iter()
            .map(PathBuf::from)
            .chain(home)
            .chain(other_top_level_folders())
            .chain(std::iter::once(PathBuf::from(SHARED_MEMORY)))
            .filter_map(|dir| dir.canonicalize().ok())
            .filter(|dir| dir.is_dir() && dir.parent().is_some())
            .filter(|dir| !workspace.is_some_and(|w| dir.starts_with(w)))
            .collect();
        covers.sort();
        covers.dedup();
        let outer: Vec<PathBuf> = covers
            .iter()
            .filter(|dir| !covers.iter().any(|o| o != *dir && dir.starts_with(o)))
            .cloned()
            .collect();
        let mut given: Vec<PathBuf> = workspace
            .map(Path::to_path_buf)
            .into_iter()
            .chain(workspace.into_iter().flat_map(repository::worktree_dirs))
            .chain(self.write.iter().cloned())
            .chain(self.read.iter().cloned())
            .filter_map(|dir| dir.canonicalize().ok())
            .collect();
        given.sort();
        given.dedup();
        // Only the outermost: one inside another comes back with it.
        let given: Vec<&PathBuf> = given
            .iter()
            .filter(|dir| !given.iter().any(|o| o != *dir && dir.starts_with(o)))
            .collect();
        outer
            .iter()
            .map(|cover| Mask::over(cover, true, given.iter().copied()))
            .collect()
    }
}

/// The folders at the top of `/`, links aside, but the ones a confined
/// command keeps in view ([`SYSTEM_DIRS`] and [`IN_VIEW`]): `/srv`,
/// `/mnt`, `/home`, `/var`, `/nix`, whatever a system adds. A socket can
/// lie in any of them (WSL's `/mnt/wslg/` holds its X11, Wayland and sound
/// servers', RHEL's MySQL listens in `/var/lib/mysql/`, Nix's daemon in
/// `/nix/var/`), and Landlock grants nothing in them, so covering them
/// takes away only the sockets (and the names of what is there).
fn other_top_level_folders() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .map(|entry| entry.path())
        .filter(|dir| {
            !SYSTEM_DIRS
                .iter()
                .chain(IN_VIEW)
                .any(|kept| dir == Path::new(kept))
        })
        .collect()
}

/// The folder of POSIX shared memory, which every program may write, and
/// so make a socket in (Landlock grants nothing in it).
const SHARED_MEMORY: &str = "/dev/shm";

/// The folders at the top of `/` a confined command keeps in view beside
/// [`SYSTEM_DIRS`]: `/proc`, `/dev` with its devices, and `/sys`, where no
/// socket can be made.
const IN_VIEW: &[&str] = &["/proc", "/dev", "/sys"];

/// A covered folder: an empty tmpfs over it, or `/dev/null` over a file.
#[derive(Debug, Clone)]
struct Mask {
    path: CString,
    folder: bool,
    /// Writable folders inside it, bound back into the cover.
    restore: Vec<Restore>,
}

impl Mask {
    /// The cover of `path` (a folder when `folder`, else a file), with
    /// those of the `given` folders (canonical) that lie in it moved back.
    fn over<'a>(
        path: &Path,
        folder: bool,
        given: impl IntoIterator<Item = &'a PathBuf>,
    ) -> Result<Self, ConfineError> {
        let mut restore = Vec::new();
        if folder {
            for dir in given {
                if let Ok(inside) = dir.strip_prefix(path)
                    && !inside.as_os_str().is_empty()
                {
                    restore.push(Restore::prepare(path, inside)?);
                }
            }
        }
        if restore.len() > MAX_RESTORES {
            return Err(ConfineError::Prepare(format!(
                "more than {MAX_RESTORES} given folders inside `{}`",
                path.display()
            )));
        }
        Ok(Self {
            path: c_string(path)?,
            folder,
            restore,
        })
    }
}

/// The most folders moved back into one cover.
const MAX_RESTORES: usize = 8;

/// A folder given to the process inside a covered one (a native
/// extension's data dir or own folder in `$ZOT_HOME`): copied as a detached
/// mount before the cover goes on (`open_tree`), then moved back to its own
/// path, made anew in the cover.
#[derive(Debug, Clone)]
struct Restore {
    /// The folders to make inside the cover, outermost first; the last is
    /// the folder itself.
    dirs: Vec<CString>,
}

impl Restore {
    /// Plans the way back to `covered/inside`.
    fn prepare(covered: &Path, inside: &Path) -> Result<Self, ConfineError> {
        let mut dirs = Vec::new();
        let mut path = covered.to_owned();
        for part in inside.components() {
            path.push(part);
            dirs.push(c_string(&path)?);
        }
        Ok(Self { dirs })
    }
}

/// `path` for a system call.
fn c_string(path: &Path) -> Result<CString, ConfineError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| ConfineError::Prepare(format!("`{}` holds a NUL byte", path.display())))
}

/// Adds one path rule; a path that does not exist is skipped.
fn add_rule(
    created: RulesetCreated,
    path: &Path,
    access: landlock::BitFlags<AccessFs>,
) -> Result<RulesetCreated, landlock::RulesetError> {
    match PathFd::new(path) {
        Ok(fd) => created.add_rule(PathBeneath::new(fd, access)),
        Err(_) => Ok(created),
    }
}

/// The mount flags a read-only bind of `path` must keep: inside a user
/// namespace the kernel refuses a remount that drops `nosuid`, `nodev`,
/// `noexec` or the atime flags of the mount it copies.
fn locked_flags(path: &Path) -> u64 {
    use nix::sys::statvfs::FsFlags;
    let Ok(stat) = nix::sys::statvfs::statvfs(path) else {
        return 0;
    };
    let flags = stat.flags();
    let pairs = [
        (FsFlags::ST_NOSUID, nix::libc::MS_NOSUID),
        (FsFlags::ST_NODEV, nix::libc::MS_NODEV),
        (FsFlags::ST_NOEXEC, nix::libc::MS_NOEXEC),
        (FsFlags::ST_NOATIME, nix::libc::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, nix::libc::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, nix::libc::MS_RELATIME),
    ];
    pairs
        .iter()
        .filter(|(st, _)| flags.contains(*st))
        .fold(0, |acc, (_, ms)| acc | *ms)
}

/// The namespace half of a prepared confinement.
#[derive(Debug, Clone)]
struct Namespaces {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// Make a network namespace too.
    network: bool,
    /// Writable paths inside the workspace, bound to themselves before
    /// [`Namespaces::binds`] so that a read-only bind above one leaves it
    /// writable.
    writable: Vec<CString>,
    /// Paths to bind read-only, with the mount flags they must keep.
    binds: Vec<(CString, u64)>,
    /// Secret paths to cover.
    masks: Vec<Mask>,
}

/// A confinement ready to install on one command.
#[derive(Debug)]
pub struct Prepared {
    ruleset: Option<OwnedFd>,
    namespaces: Option<Namespaces>,
    // The child writes the number of the step that failed here.
    report_read: OwnedFd,
    report_write: OwnedFd,
}

impl Prepared {
    /// Whether the command runs in namespaces (so a PID namespace ends all
    /// of it), not under Landlock alone.
    pub fn namespaced(&self) -> bool {
        self.namespaces.is_some()
    }

    /// Whether Landlock rules apply.
    pub fn landlocked(&self) -> bool {
        self.ruleset.is_some()
    }

    /// Installs the confinement on `command`, to be applied in the child
    /// between `fork` and `execve`. Keep `self` until `spawn` has returned:
    /// it holds the descriptors the child uses.
    pub fn install(&self, command: &mut std::process::Command) {
        let plan = child::Plan {
            ruleset: self.ruleset.as_ref().map(AsRawFd::as_raw_fd),
            namespaces: self.namespaces.clone(),
            report: self.report_write.as_raw_fd(),
        };
        child::install(command, plan);
    }

    /// After a failed `spawn`: the step that failed, in words.
    pub fn failed_step(&self) -> Option<&'static str> {
        let mut byte = [0u8; 1];
        match nix::unistd::read(&self.report_read, &mut byte) {
            Ok(1) => Some(child::step_name(byte[0])),
            _ => None,
        }
    }

    /// A spawn error with the step that failed, for messages.
    pub fn explain(&self, error: &std::io::Error) -> String {
        match self.failed_step() {
            Some(step) => format!("cannot {step}: {error}"),
            None => error.to_string(),
        }
    }
}

/// Runs `true` confined in namespaces (no Landlock) to learn whether they work.
fn probe_namespaces() -> Result<(), String> {
    let dir = tempfile::Builder::new()
        .prefix("zotbox-probe-")
        .tempdir()
        .map_err(|err| format!("cannot make a probe folder: {err}"))?;
    std::fs::create_dir(dir.path().join(".git"))
        .map_err(|err| format!("cannot make a probe folder: {err}"))?;
    let jail = Jail {
        workspace: Some(dir.path().to_owned()),
        ..Jail::default()
    };
    let prepared = jail.prepare_with(0, true).map_err(|err| err.to_string())?;
    let program = ["/usr/bin/true", "/bin/true"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .ok_or("no `true` program to probe with")?;
    let mut command = std::process::Command::new(program);
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    prepared.install(&mut command);
    match command.status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("a confined test process failed ({status})")),
        Err(err) => Err(prepared.explain(&err)),
    }
}

/// The code that runs between `fork` and `execve`: system calls only.
#[allow(unsafe_code)]
mod child;

mod census;
pub use census::{Census, CensusError, Left, MAX_FOLDERS, Recorded, SET_ASIDE};

/// Makes the process `command` starts die with the thread that starts it
/// (`PR_SET_PDEATHSIG`), confined or not.
pub(crate) fn die_with_parent(command: &mut std::process::Command) {
    child::die_with_parent(command);
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::symlink;
    use std::process::{Command, Output, Stdio};

    use super::*;

    /// A workspace beside an `outside` folder holding a secret.
    struct World {
        _tmp: tempfile::TempDir,
        workspace: PathBuf,
        outside: PathBuf,
    }

    fn world() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let workspace = root.join("workspace");
        let outside = root.join("outside");
        for dir in [
            &workspace,
            &outside,
            &workspace.join("docs"),
            &workspace.join(".git"),
        ] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(outside.join("secret"), "top secret").unwrap();
        std::fs::write(workspace.join("inside.txt"), "inside").unwrap();
        std::fs::write(workspace.join(".git/config"), "[core]\n").unwrap();
        symlink(outside.join("secret"), workspace.join("docs/evil.md")).unwrap();
        World {
            _tmp: tmp,
            workspace,
            outside,
        }
    }

    fn jail(world: &World) -> Jail {
        Jail {
            workspace: Some(world.workspace.clone()),
            ..Jail::default()
        }
    }

    /// Runs `sh -c script` in the workspace, confined by `jail`.
    fn confined(jail: &Jail, cwd: &Path, script: &str) -> Output {
        run_prepared(&jail.prepare(&Settings::default()).unwrap(), cwd, script)
    }

    /// Runs `sh -c script` in `cwd`, confined as `prepared` says.
    fn run_prepared(prepared: &Prepared, cwd: &Path, script: &str) -> Output {
        let mut command = Command::new("sh");
        command
            .args(["-c", script])
            .current_dir(cwd)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .stdin(Stdio::null());
        prepared.install(&mut command);
        command.output().unwrap()
    }

    fn text(bytes: &[u8]) -> String {
        String::from_utf8_lossy(bytes).into_owned()
    }

    #[test]
    fn this_kernel_offers_every_protection() {
        // The project's machines do (Landlock ABI 7, user namespaces): a
        // regression here means the rest of this suite proves nothing.
        let kernel = Kernel::get();
        for (protection, offered) in kernel.report() {
            assert_eq!(offered, Ok(()), "{protection:?}");
        }
    }

    /// Attack: a descriptor the process that started zotbox left open (a
    /// file of the user's home, a terminal to type into with `TIOCSTI`)
    /// was the command's: Landlock checks a path when it is opened, not a
    /// descriptor opened before.
    #[test]
    fn a_descriptor_zotbox_inherited_is_not_the_command_s() {
        use std::os::fd::AsRawFd as _;
        let world = world();
        // Without `O_CLOEXEC`, as a careless parent would leave it.
        let leaked = nix::fcntl::open(
            &world.outside.join("secret"),
            nix::fcntl::OFlag::O_RDONLY,
            nix::sys::stat::Mode::empty(),
        )
        .unwrap();
        let fd = leaked.as_raw_fd();
        assert!(fd > 2);
        let out = confined(&jail(&world), &world.workspace, &format!("cat <&{fd}"));
        drop(leaked);
        assert_eq!(text(&out.stdout), "");
        assert!(!out.status.success(), "{}", text(&out.stderr));
    }

    #[test]
    fn files_outside_the_workspace_are_unreadable_even_through_a_symlink() {
        let world = world();
        let secret = world.outside.join("secret");
        let home = std::env::var("HOME").unwrap_or_else(|_| "/root".to_owned());
        // (script, what it must print on stdout)
        let cases = [
            // Control: the workspace and system files are readable.
            ("cat inside.txt".to_owned(), "inside"),
            (
                "test -r /etc/hostname -o -r /etc/passwd && echo ok".to_owned(),
                "ok\n",
            ),
            // Attack: the issue's `cat docs/*.md` with a symlink leading out.
            ("cat docs/evil.md".to_owned(), ""),
            // Attack: an absolute path, and `..`.
            (format!("cat {}", secret.display()), ""),
            ("cat ../outside/secret".to_owned(), ""),
            // Attack: the user's home.
            (format!("ls -A {home}"), ""),
            // Attack: a hard link made inside, to the secret outside.
            (format!("ln {} hard && cat hard", secret.display()), ""),
        ];
        for (script, expected) in cases {
            let output = confined(&jail(&world), &world.workspace, &script);
            assert_eq!(
                text(&output.stdout),
                expected,
                "{script}: {}",
                text(&output.stderr)
            );
            if expected.is_empty() {
                // Landlock answers a link across its rules with EXDEV; a
                // folder of sockets (`/tmp`, where these tests run) is
                // covered whole, so its paths name nothing.
                let stderr = text(&output.stderr);
                assert!(
                    stderr.contains("Permission denied")
                        || stderr.contains("Invalid cross-device link")
                        || stderr.contains("No such file or directory"),
                    "{script}: {}",
                    text(&output.stderr)
                );
            }
        }
        assert!(!world.workspace.join("hard").exists());
    }

    #[test]
    fn nothing_outside_the_workspace_can_be_written() {
        let world = world();
        let target = world.outside.join("written");
        for script in [
            format!("echo x > {}", target.display()),
            format!("touch {}", target.display()),
            format!("cp inside.txt {}", target.display()),
            format!("mv inside.txt {}", target.display()),
            format!("ln -s /etc/passwd {}", target.display()),
        ] {
            let output = confined(&jail(&world), &world.workspace, &script);
            assert!(!output.status.success(), "{script} succeeded");
            assert!(!target.exists(), "{script} wrote outside");
        }
        assert!(world.workspace.join("inside.txt").exists());
        // Control: the workspace itself is writable.
        let output = confined(
            &jail(&world),
            &world.workspace,
            "echo x > new.txt && mkdir d",
        );
        assert!(output.status.success(), "{}", text(&output.stderr));
    }

    #[test]
    fn control_paths_are_read_only() {
        let world = world();
        std::fs::create_dir(world.workspace.join(".zot")).unwrap();
        let scripts = [
            // Attack: git configuration that runs code on the user's next `git status`.
            "printf '\\tfsmonitor = touch pwned\\n' >> .git/config",
            "mkdir .git/hooks && echo 'touch pwned' > .git/hooks/pre-commit",
            // Attack: a new workspace extension or data tool.
            "mkdir -p .zot/tools && echo {} > .zot/tools/x.json",
            // Attack: move the control folder away and make a new one.
            "mv .git .git-old && mkdir .git",
            "rm -rf .git",
        ];
        for script in scripts {
            let output = confined(&jail(&world), &world.workspace, script);
            assert!(!output.status.success(), "{script} succeeded");
            let stderr = text(&output.stderr);
            assert!(
                stderr.contains("Read-only file system") || stderr.contains("busy"),
                "{script}: {stderr}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(world.workspace.join(".git/config")).unwrap(),
            "[core]\n"
        );
        assert!(!world.workspace.join(".git/hooks").exists());
        assert!(!world.workspace.join(".zot/tools").exists());
        assert!(!world.workspace.join(".git-old").exists());
        // Control: reading them works.
        let output = confined(&jail(&world), &world.workspace, "cat .git/config");
        assert_eq!(text(&output.stdout), "[core]\n");
    }

    /// Attack: Landlock checks no file access on connecting to a Unix
    /// socket by its path, so a confined command could reach any socket of
    /// the user's session: D-Bus and `systemd --user` start programs
    /// outside the sandbox, X11, tmux and editors' servers type into the
    /// user's terminal, the agents sign with the user's keys.
    #[test]
    fn the_sockets_of_the_users_session_are_out_of_reach() {
        let world = world();
        // A home in no folder of sockets (`world` lies in `/tmp`, covered
        // itself), with the workspace in it.
        let uncovered = uncovered_dir();
        let home = tempfile::Builder::new()
            .prefix("confine-home-")
            .tempdir_in(&uncovered)
            .unwrap();
        let home_path = home.path().canonicalize().unwrap();
        let workspace = home_path.join("project");
        std::fs::create_dir_all(workspace.join("sub")).unwrap();
        let listen = |path: &Path| {
            let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
            listener.set_nonblocking(true).unwrap();
            listener
        };
        // A folder at the top level of `/` (`/srv`, `/mnt/wslg`), beside
        // the system's.
        let top_level = top_level_dir();
        let shared_memory = tempfile::Builder::new()
            .prefix("zotbox-confine-")
            .tempdir_in(SHARED_MEMORY)
            .unwrap();
        let outside = [
            world.outside.join("agent.sock"),
            home_path.join("bus.sock"),
            top_level.path().join("server.sock"),
            shared_memory.path().join("app.sock"),
        ];
        let listeners: Vec<_> = outside.iter().map(|path| listen(path)).collect();
        let inside = workspace.join("sub/own.sock");
        let own = listen(&inside);
        let jail = Jail {
            workspace: Some(workspace.clone()),
            home: Some(home_path.clone()),
            ..Jail::default()
        };
        let connect = |path: &Path| {
            format!(
                "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); \
                 s.connect(\"{}\"); print(\"connected\")'",
                path.display()
            )
        };
        for (path, listener) in outside.iter().zip(&listeners) {
            let output = confined(&jail, &workspace, &connect(path));
            assert_eq!(text(&output.stdout), "", "{}", path.display());
            assert!(
                text(&output.stderr).contains("FileNotFoundError"),
                "{}: {}",
                path.display(),
                text(&output.stderr)
            );
            assert!(listener.accept().is_err(), "{}: connected", path.display());
            // Nor from the working folder up, where the process held it
            // before the covers.
            let relative = relative_path(&workspace, path);
            let output = confined(&jail, &workspace, &connect(&relative));
            assert_eq!(text(&output.stdout), "", "{}", relative.display());
            assert!(
                listener.accept().is_err(),
                "{}: connected",
                relative.display()
            );
            // Nor through the root of a process outside the jail (this
            // test's, zotbox's), whose view of the file system has no
            // covers: Landlock refuses it `ptrace`'s access, which
            // `/proc/PID/root` needs.
            let through_proc = PathBuf::from(format!("/proc/{}/root", std::process::id()))
                .join(path.strip_prefix("/").unwrap());
            let output = confined(&jail, &workspace, &connect(&through_proc));
            assert_eq!(text(&output.stdout), "", "{}", through_proc.display());
            assert!(
                text(&output.stderr).contains("PermissionError"),
                "{}: {}",
                through_proc.display(),
                text(&output.stderr)
            );
            assert!(
                listener.accept().is_err(),
                "{}: connected",
                through_proc.display()
            );
        }
        // Beside the covers, Landlock still holds: a file of a folder no
        // cover hides and no rule grants (`/sys`) is there but cannot be
        // read.
        let kept = "/sys/kernel/uevent_seqnum";
        assert!(std::fs::read(kept).is_ok(), "{kept} cannot be read here");
        let output = confined(&jail, &workspace, &format!("test -e {kept} && cat {kept}"));
        assert_eq!(text(&output.stdout), "");
        assert_eq!(
            text(&output.stderr),
            format!("cat: {kept}: Permission denied\n")
        );
        // Control: a socket in the workspace is the command's to use, and
        // the workspace is there, writable, under the cover of the home.
        let output = confined(&jail, &workspace, &connect(&inside));
        assert_eq!(
            text(&output.stdout),
            "connected\n",
            "{}",
            text(&output.stderr)
        );
        assert!(own.accept().is_ok());
        let output = confined(
            &jail,
            &workspace,
            "echo hi > sub/note && cat sub/note && pwd",
        );
        assert_eq!(
            text(&output.stdout),
            format!("hi\n{}\n", workspace.display()),
            "{}",
            text(&output.stderr)
        );
    }

    /// A writable folder in none of [`SOCKET_DIRS`]: `/dev/shm` (where a
    /// checkout in `/tmp` puts `target/` under a cover), else `target/`.
    fn uncovered_dir() -> PathBuf {
        let covered: Vec<PathBuf> = SOCKET_DIRS
            .iter()
            .filter_map(|dir| Path::new(dir).canonicalize().ok())
            .collect();
        [
            "/dev/shm",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../target"),
        ]
        .iter()
        .filter_map(|dir| Path::new(dir).canonicalize().ok())
        .find(|dir| {
            !covered.iter().any(|c| dir.starts_with(c)) && tempfile::tempdir_in(dir).is_ok()
        })
        .unwrap_or_else(|| panic!("no writable folder outside {SOCKET_DIRS:?}"))
    }

    /// A folder covered for its sockets that is gone by the time the cover
    /// goes on (one at the top of `/`, listed when the command was
    /// prepared and removed before it started) fails nothing: there is
    /// nothing in it to hide.
    #[test]
    fn a_covered_folder_gone_before_the_command_starts_fails_nothing() {
        let world = world();
        let gone = top_level_dir();
        let jail = Jail {
            workspace: Some(world.workspace.clone()),
            home: Some(gone.path().to_owned()),
            ..Jail::default()
        };
        let prepared = jail.prepare(&Settings::default()).unwrap();
        drop(gone);
        let output = run_prepared(&prepared, &world.workspace, "cat inside.txt");
        assert_eq!(text(&output.stdout), "inside", "{}", text(&output.stderr));
    }

    /// A new folder that lies in a folder of the top level of `/` that is
    /// neither a system one nor one of [`SOCKET_DIRS`]: made in `/` itself
    /// where the tests may (as root), else in this repository's `target/`
    /// when that lies in such a folder (`/home`, `/srv`).
    fn top_level_dir() -> tempfile::TempDir {
        let in_root = tempfile::Builder::new()
            .prefix(".zotbox-confine-")
            .tempdir_in("/");
        in_root.unwrap_or_else(|_| {
            let target = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../target"))
                .canonicalize()
                .unwrap();
            let top = target.components().take(2).collect::<PathBuf>();
            let kept = SYSTEM_DIRS
                .iter()
                .chain(IN_VIEW)
                .any(|dir| top == Path::new(dir));
            let sockets = SOCKET_DIRS.iter().any(|dir| target.starts_with(dir));
            assert!(
                !kept && !sockets,
                "no folder to make in `/`, and `{}` lies in {top:?}",
                target.display()
            );
            tempfile::tempdir_in(&target).unwrap()
        })
    }

    /// `to` relative to `from`, through `..`.
    fn relative_path(from: &Path, to: &Path) -> PathBuf {
        let common = from
            .ancestors()
            .find(|a| to.starts_with(a))
            .unwrap_or(Path::new("/"));
        let ups = from.strip_prefix(common).unwrap().components().count();
        let mut path: PathBuf = std::iter::repeat_n("..", ups).collect();
        path.push(to.strip_prefix(common).unwrap());
        path
    }

    /// Runs `git args…` in `dir`, quietly, with a fixed identity and no
    /// user or system config.
    fn git(dir: &Path, args: &[&str]) {
        let status = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t.invalid"])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?} in {}", dir.display());
    }

    #[test]
    fn a_git_file_opens_to_commands_only_the_worktree_git_made() {
        let world = world();
        let root = world.outside.parent().unwrap().to_owned();
        let secret = world.outside.join("secret");
        let main = root.join("main");
        std::fs::create_dir(&main).unwrap();
        git(&main, &["init", "-q"]);
        git(&main, &["commit", "-q", "--allow-empty", "-m", "first"]);
        git(&main, &["worktree", "add", "-q", "../tree"]);
        let config = main.join(".git/config");
        let cat = |path: &Path| format!("cat {}", path.display());
        // Control: in a worktree git made, git works, reading the main
        // repository's folder outside the workspace.
        let tree = root.join("tree");
        let jail_of = |workspace: &Path| Jail {
            workspace: Some(workspace.to_owned()),
            ..Jail::default()
        };
        let out = confined(&jail_of(&tree), &tree, "git status --short && echo clean");
        assert_eq!(text(&out.stdout), "clean\n", "{}", text(&out.stderr));
        assert!(
            confined(&jail_of(&tree), &tree, &cat(&config))
                .status
                .success()
        );
        // Attacks: a `.git` file the workspace's author wrote (an unpacked
        // archive) naming what the command should read.
        let cases: [(&str, String, &Path); 4] = [
            (
                "any folder",
                format!("gitdir: {}", world.outside.display()),
                &secret,
            ),
            (
                "another repository",
                format!("gitdir: {}", main.join(".git").display()),
                &config,
            ),
            (
                "a real worktree's folder, which names another workspace back",
                format!("gitdir: {}", main.join(".git/worktrees/tree").display()),
                &config,
            ),
            (
                "a folder inside whose `commondir` names one outside",
                "gitdir: store".to_owned(),
                &secret,
            ),
        ];
        for (index, (case, pointer, read)) in cases.into_iter().enumerate() {
            let workspace = root.join(format!("ws-{index}"));
            std::fs::create_dir_all(workspace.join("store")).unwrap();
            std::fs::write(workspace.join(".git"), format!("{pointer}\n")).unwrap();
            std::fs::write(
                workspace.join("store/commondir"),
                format!("{}\n", world.outside.display()),
            )
            .unwrap();
            let out = confined(&jail_of(&workspace), &workspace, &cat(read));
            assert_eq!(text(&out.stdout), "", "{case}");
            assert!(!out.status.success(), "{case}");
            // Control: the file is there to read.
            assert!(read.is_file(), "{case}");
        }
    }

    #[test]
    fn the_network_is_closed_unless_granted() {
        let world = world();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let connect = format!(
            "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2); \
             print(\"connected\")'"
        );
        // Attack: connect to a server on this machine.
        let output = confined(&jail(&world), &world.workspace, &connect);
        assert_eq!(text(&output.stdout), "", "{}", text(&output.stderr));
        assert!(listener.accept().is_err(), "a connection arrived");
        // Attack: listen for connections.
        let bind = "python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); \
                    s.listen(); print(\"bound\")'";
        let output = confined(&jail(&world), &world.workspace, bind);
        assert_eq!(text(&output.stdout), "", "{}", text(&output.stderr));
        // Control: granted, both work.
        let open = Jail {
            network: true,
            ..jail(&world)
        };
        let output = confined(&open, &world.workspace, &connect);
        assert_eq!(
            text(&output.stdout),
            "connected\n",
            "{}",
            text(&output.stderr)
        );
        let output = confined(&open, &world.workspace, bind);
        assert_eq!(text(&output.stdout), "bound\n", "{}", text(&output.stderr));
    }

    #[test]
    fn a_required_protection_the_kernel_lacks_refuses_naming_it_and_the_policy() {
        let world = world();
        let settings = Settings {
            shell_network: false,
            required_by: Some(PathBuf::from("/etc/zotbox/policy.json")),
            ..Settings::default()
        };
        let cases = [
            (
                Kernel {
                    landlock_abi: 0,
                    namespaces: Ok(()),
                },
                "policy `/etc/zotbox/policy.json` requires kernel confinement \
                 (`require_confinement: true`), but this kernel lacks Landlock (file access: \
                 workspace and system directories only); run `zotbox doctor` to see what it \
                 offers",
            ),
            (
                Kernel {
                    landlock_abi: 7,
                    namespaces: Err("no".to_owned()),
                },
                "policy `/etc/zotbox/policy.json` requires kernel confinement \
                 (`require_confinement: true`), but this kernel lacks unprivileged user \
                 namespaces; run `zotbox doctor` to see what it offers",
            ),
        ];
        for (kernel, message) in cases {
            let err = jail(&world).prepare_on(&kernel, &settings).unwrap_err();
            assert_eq!(err.to_string(), message);
            // Without the requirement, the same kernel runs what it can.
            assert!(
                jail(&world)
                    .prepare_on(&kernel, &Settings::default())
                    .is_ok()
            );
        }
        // A kernel with everything: nothing is missing.
        let full = Kernel {
            landlock_abi: 7,
            namespaces: Ok(()),
        };
        assert!(jail(&world).prepare_on(&full, &settings).is_ok());
        assert_eq!(
            Kernel {
                landlock_abi: 3,
                namespaces: Ok(())
            }
            .offers(Protection::LandlockNetwork),
            Err("this kernel offers Landlock ABI 3; 4 is needed".to_owned())
        );
    }

    /// `$ZOT_HOME` inside the workspace, guarded as the host guards it
    /// (`ControlSources::secrets`: the whole folder): nothing of it reads or
    /// writes, zot's credentials included, not even a secrets file made or
    /// replaced while the command runs; a writable folder inside it (a
    /// native extension's data dir) is bound back and stays writable.
    #[test]
    fn zot_home_in_the_workspace_is_covered_but_for_a_writable_folder_in_it() {
        let world = world();
        let home = world.workspace.join("zh");
        let data = home.join("data/ext");
        std::fs::create_dir_all(&data).unwrap();
        let own = home.join("extensions/ext");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join("run.sh"), "echo ran\n").unwrap();
        std::fs::create_dir_all(home.join("keys")).unwrap();
        std::fs::write(home.join("keys/zotbox.key"), "private key").unwrap();
        std::fs::write(home.join("auth.json"), "sk-zot-credential").unwrap();
        std::fs::write(home.join("policy.json"), "{}").unwrap();
        std::fs::write(data.join("kept"), "the extension's own").unwrap();
        let control = ControlPaths::new(
            &world.workspace,
            &[
                (home.clone(), true, "h".into()),
                (own.clone(), true, "e".into()),
            ],
        )
        .with_secrets(&world.workspace, &[(home.clone(), true, "s".into())]);
        let guarded = Jail {
            write: vec![data.clone()],
            read: vec![own.clone()],
            ..jail(&world)
        }
        .guarding(&control);
        // Attack: read zot's credentials and the key, rewrite the policy,
        // move the folder away; and read a secrets file the user writes
        // (by rename, as `zotbox secret set` does) while the command runs.
        let script = "sleep 0.3; cat zh/auth.json zh/keys/zotbox.key zh/secrets.json; ls -A zh; \
                      echo '{\"grant\":1}' > zh/policy.json; rm -rf zh/keys; mv zh zh-old";
        let prepared = guarded.prepare(&Settings::default()).unwrap();
        let mut command = Command::new("sh");
        command
            .args(["-c", script])
            .current_dir(&world.workspace)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        prepared.install(&mut command);
        let child = command.spawn().unwrap();
        drop(prepared);
        std::thread::sleep(std::time::Duration::from_millis(100));
        std::fs::write(home.join("secrets.tmp"), "hunter2").unwrap();
        std::fs::rename(home.join("secrets.tmp"), home.join("secrets.json")).unwrap();
        let output = child.wait_with_output().unwrap();
        let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
        // `ls -A zh` lists the ways back to what it was given, nothing else.
        assert_eq!(stdout, "data\nextensions\n", "{stderr}");
        for secret in ["sk-zot", "private", "hunter2"] {
            assert!(
                !stdout.contains(secret) && !stderr.contains(secret),
                "{secret}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(home.join("policy.json")).unwrap(),
            "{}"
        );
        assert!(home.join("keys/zotbox.key").exists());
        assert!(!world.workspace.join("zh-old").exists());
        // Control: the data dir inside it keeps its files and takes writes.
        let output = confined(
            &guarded,
            &world.workspace,
            "cat zh/data/ext/kept && echo d > zh/data/ext/f && cat zh/data/ext/f",
        );
        assert_eq!(
            text(&output.stdout),
            "the extension's ownd\n",
            "{}",
            text(&output.stderr)
        );
        assert_eq!(std::fs::read_to_string(data.join("f")).unwrap(), "d\n");
        // Control: its own folder there runs, read-only as a control path.
        let output = confined(
            &guarded,
            &world.workspace,
            "sh zh/extensions/ext/run.sh; echo x > zh/extensions/ext/run.sh",
        );
        assert_eq!(text(&output.stdout), "ran\n", "{}", text(&output.stderr));
        assert!(
            text(&output.stderr).contains("Read-only file system"),
            "{}",
            text(&output.stderr)
        );
        // Without a mount namespace it could not be covered: refused.
        let err = guarded.prepare_with(7, false).unwrap_err();
        assert!(matches!(err, ConfineError::CannotHide), "{err}");
        assert!(
            err.to_string().contains("keep `$ZOT_HOME` outside"),
            "{err}"
        );
        // Control: with nothing to hide, Landlock alone still runs.
        let elsewhere = Jail {
            hidden: vec![world.workspace.join("absent")],
            ..jail(&world)
        };
        assert!(elsewhere.prepare_with(7, false).is_ok());
    }

    /// `$ZOT_HOME` at the workspace's `.zot` (zot's own place, a control
    /// name bound read-only before the cover goes on): the data dir moved
    /// back is still writable, since it was made a mount of its own first.
    #[test]
    fn a_data_dir_in_a_zot_home_named_dot_zot_stays_writable() {
        let world = world();
        let home = world.workspace.join(".zot");
        let data = home.join("data/ext");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(home.join("auth.json"), "sk-zot-credential").unwrap();
        let control = ControlPaths::new(&world.workspace, &[])
            .with_secrets(&world.workspace, &[(home.clone(), true, "s".into())]);
        let guarded = Jail {
            write: vec![data.clone()],
            ..jail(&world)
        }
        .guarding(&control);
        let output = confined(
            &guarded,
            &world.workspace,
            "cat .zot/auth.json; echo d > .zot/data/ext/f && cat .zot/data/ext/f",
        );
        assert_eq!(text(&output.stdout), "d\n", "{}", text(&output.stderr));
        assert_eq!(std::fs::read_to_string(data.join("f")).unwrap(), "d\n");
    }

    #[test]
    fn exit_codes_and_signals_pass_through_the_namespaces() {
        let world = world();
        let output = confined(&jail(&world), &world.workspace, "exit 7");
        assert_eq!(output.status.code(), Some(7));
        let output = confined(&jail(&world), &world.workspace, "kill -9 $$");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(output.status.signal(), Some(9));
        // The command is not the namespace's init, so its own signals work.
        let output = confined(&jail(&world), &world.workspace, "echo $$");
        assert_eq!(text(&output.stdout), "2\n");
    }
}
