//! `$ZOT_HOME`: where zot (and zotbox) keep extensions, logs and caches.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// The folder data packages are installed into, beside `extensions/` (in
/// `$ZOT_HOME` and in a workspace's `.zot`).
pub const PACKAGES_DIR: &str = "packages";

/// The folder layout under `$ZOT_HOME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZotHome {
    root: PathBuf,
}

impl ZotHome {
    /// A home rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// zot's default: `$ZOT_HOME`, else `$XDG_STATE_HOME/zot`, else
    /// `~/.local/state/zot`; `None` when none of these can be known.
    pub fn from_env() -> Option<Self> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(home) = var("ZOT_HOME") {
            return Some(Self::new(home));
        }
        if let Some(state) = var("XDG_STATE_HOME") {
            return Some(Self::new(PathBuf::from(state).join("zot")));
        }
        var("HOME").map(|home| Self::new(PathBuf::from(home).join(".local/state/zot")))
    }

    /// The root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `extensions/`: one folder per installed extension.
    pub fn extensions_dir(&self) -> PathBuf {
        self.root.join("extensions")
    }

    /// `packages/`: the installed data packages, one folder each.
    pub fn packages_dir(&self) -> PathBuf {
        self.root.join(PACKAGES_DIR)
    }

    /// `logs/`: extension stderr logs and the audit log.
    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    /// `logs/ext-<name>.log`: one extension's stderr.
    pub fn extension_log(&self, name: &str) -> PathBuf {
        self.logs_dir().join(format!("ext-{name}.log"))
    }

    /// `logs/audit.jsonl`: every capability use and guard decision.
    pub fn audit_log(&self) -> PathBuf {
        self.logs_dir().join("audit.jsonl")
    }

    /// `policy.json`: the user's policy, which can only narrow the system one.
    pub fn user_policy(&self) -> PathBuf {
        self.root.join("policy.json")
    }

    /// `trust.json`: the workspaces the user trusted, each bound to its
    /// canonical path and a hash of the files that can run.
    pub fn trust_file(&self) -> PathBuf {
        self.root.join("trust.json")
    }

    /// `zotbox.lock`: what each installed extension was installed from and
    /// the digest of its files, re-checked at every start.
    pub fn lock_file(&self) -> PathBuf {
        self.root.join("zotbox.lock")
    }

    /// `cache/`: compiled wasm artifacts.
    pub fn cache_dir(&self) -> PathBuf {
        self.root.join("cache")
    }

    /// `data/`: one writable folder per confined native extension.
    pub fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    /// `secrets.json`: the values of the user's secrets (`zotbox secret
    /// set`), readable by the user alone (`0600`).
    pub fn secrets_file(&self) -> PathBuf {
        self.root.join("secrets.json")
    }

    /// `keys/`: signing keys `zotbox keygen` writes by default (mode 0700;
    /// the secret key file 0600).
    pub fn keys_dir(&self) -> PathBuf {
        self.root.join("keys")
    }

    /// `registries.json`: the newest index version seen from each registry
    /// (by URL), so an older index replayed is refused.
    pub fn registry_state(&self) -> PathBuf {
        self.root.join("registries.json")
    }

    /// Where each confined command's census is written down while it runs.
    pub fn census_records(&self) -> PathBuf {
        self.root.join("run").join("census")
    }

    /// `built-folders`: the folders `ext build` has built (and warned
    /// about) before, one per line.
    pub fn built_folders(&self) -> PathBuf {
        self.root.join("built-folders")
    }
}

/// The user's home folder, `$HOME` (none when unset or empty): where git
/// reads the user's configuration, what `~` in a deny rule means, and
/// what no workspace may be.
pub(crate) fn user_home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|home| !home.is_empty())
        .map(PathBuf::from)
}

/// An exclusive lock on `<path>.lock` (created `0600`, empty), held while
/// the lock lives: how a read-modify-write of one of `$ZOT_HOME`'s files
/// (`registries.json`, `secrets.json`) keeps a concurrent one from losing
/// its change. The file replaced is still written atomically beside it.
pub(crate) fn lock_beside(path: &Path) -> std::io::Result<nix::fcntl::Flock<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(PathBuf::from(name))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| std::io::Error::from(errno))
}

/// Opens `path` for appending, creating it and its folder: how every log
/// under `$ZOT_HOME/logs` is written.
pub(crate) fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // A log holds paths, URLs and commands (and an extension's stderr
    // whatever it prints): a new one is the user's alone.
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// Writes `bytes` to `path` atomically: into a new file beside it, synced,
/// then renamed over it (and the folder synced). A reader or a crash never
/// sees half a file, and a `path` that is a symlink is replaced by the new
/// file, never written through. An existing regular file's mode is kept;
/// a new file gets `0644`.
///
/// # Errors
///
/// The I/O error of creating, writing, syncing or renaming the new file; on
/// error `path` is unchanged and the new file is gone.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mode = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => meta.permissions().mode() & 0o7777,
        _ => 0o644,
    };
    write_atomic_with_mode(path, bytes, mode)
}

/// [`write_atomic`] with the new file created with `mode` (whatever the
/// old file's): a `0600` file is never readable by others, not even for
/// the moment between creating and renaming it.
///
/// # Errors
///
/// As [`write_atomic`].
pub fn write_atomic_with_mode(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let mut file = tempfile::Builder::new()
        .prefix(".zotbox-")
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(mode))
        .tempfile_in(dir)?;
    file.write_all(bytes)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|err| err.error)?;
    // The rename is durable once the folder is synced; a failure here
    // leaves the new content in place, so it is not an error of the write.
    if let Ok(folder) = std::fs::File::open(dir) {
        let _ = folder.sync_all();
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn write_atomic_replaces_a_link_instead_of_writing_through_it() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("other-extension.json");
        std::fs::write(&outside, "theirs").unwrap();
        let path = tmp.path().join("extension.json");
        // Attack: a manifest that is a link to a file elsewhere.
        std::os::unix::fs::symlink(&outside, &path).unwrap();
        write_atomic(&path, b"mine").unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"theirs");
        assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
        assert_eq!(std::fs::read(&path).unwrap(), b"mine");
        // A regular file keeps its mode; no temporary file is left behind.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        write_atomic(&path, b"again").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let names: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }
}
