//! Where the shared host's socket lives, and the lock that makes one host.
//!
//! The folder is `$XDG_RUNTIME_DIR/zotbox` when the runtime folder is usable
//! (absolute, the user's, `0700`), else `$ZOT_HOME/run`. Either way the
//! folder must be a real folder owned by the user with no access for group
//! or others: one that is not is refused rather than repaired, since someone
//! else could have put it there. The socket's name carries a hash of what
//! decides how an extension runs (the canonical `$ZOT_HOME`, the system
//! policy's path and `$HOME`), so two homes never share a host.
//!
//! Beside the socket, the host keeps a token (`Place::new_token`), which
//! every request must carry: a process of the user's that cannot read the
//! folder (a shell command zotbox confines: Landlock grants it neither the
//! home nor `/run`) may still connect to the socket, since the kernel
//! checks no file access on connecting to one, and must not pass for a
//! relay (it would name the workspace, and so the jail, of the extension
//! it asks for).

use std::os::unix::fs::{
    DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _,
};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::home::ZotHome;

/// The longest path a Unix socket address holds (`sun_path`, less its NUL).
const MAX_SOCKET_PATH: usize = 107;
/// Random bytes in the host's token.
const TOKEN_BYTES: usize = 32;

/// Whether `given` is the host's `token`, in time that does not depend on
/// where they differ.
pub(crate) fn token_matches(given: &str, token: &str) -> bool {
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

/// The shared host's socket folder is missing, unsafe or unusable.
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    /// The folder (or `$ZOT_HOME`) cannot be created or read.
    #[error("cannot prepare the shared host's folder `{}`: {error}", dir.display())]
    Io {
        /// The folder.
        dir: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The folder is a link, not the user's, or open to others.
    #[error("refusing the shared host's folder `{}`: {why}", dir.display())]
    Unsafe {
        /// The folder.
        dir: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The socket's path is longer than a socket address holds.
    #[error("the shared host's socket path `{}` is over {MAX_SOCKET_PATH} bytes", path.display())]
    TooLong {
        /// The path.
        path: PathBuf,
    },
    /// Another process held the start lock for too long.
    #[error("waited {secs} s for the lock `{}` to start the shared host", path.display())]
    LockTimeout {
        /// The lock file.
        path: PathBuf,
        /// How long.
        secs: u64,
    },
}

/// The socket and lock of the shared host for one `$ZOT_HOME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    socket: PathBuf,
    lock: PathBuf,
    token: PathBuf,
}

impl Place {
    /// The place for `home`, its folder created (`0700`) if missing and
    /// checked.
    ///
    /// # Errors
    ///
    /// [`PlaceError`] when the folder cannot be made or is unsafe, or the
    /// path is too long for a socket.
    pub fn for_home(home: &ZotHome) -> Result<Self, PlaceError> {
        let root = std::fs::canonicalize(home.root()).unwrap_or_else(|_| home.root().to_owned());
        let dir = match runtime_dir() {
            Some(runtime) => runtime.join("zotbox"),
            None => root.join("run"),
        };
        private_dir(&dir)?;
        let key = key(&root);
        let socket = dir.join(format!("host-{key}.sock"));
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(PlaceError::TooLong { path: socket });
        }
        Ok(Self {
            lock: dir.join(format!("host-{key}.lock")),
            token: dir.join(format!("host-{key}.token")),
            socket,
        })
    }

    /// The socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Makes a new token for the host about to listen here and writes it
    /// beside the socket (`0600`, replacing any earlier host's): 32 random
    /// bytes, as hex.
    ///
    /// # Errors
    ///
    /// [`PlaceError::Io`] when no random bytes can be had or the file
    /// cannot be written.
    pub(crate) fn new_token(&self) -> Result<String, PlaceError> {
        let io = |error| PlaceError::Io {
            dir: self.token.clone(),
            error,
        };
        let mut bytes = [0u8; TOKEN_BYTES];
        getrandom::fill(&mut bytes).map_err(|err| io(std::io::Error::other(err.to_string())))?;
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        crate::home::write_atomic_with_mode(&self.token, token.as_bytes(), 0o600).map_err(io)?;
        Ok(token)
    }

    /// The token of the host listening here, as it wrote it.
    ///
    /// # Errors
    ///
    /// The I/O error of reading it (`PermissionDenied` where the process
    /// may not read the folder), or `InvalidData` when it is no token.
    pub(crate) fn token(&self) -> std::io::Result<String> {
        use std::io::Read as _;
        let mut text = String::new();
        std::fs::File::open(&self.token)?
            .take(TOKEN_BYTES as u64 * 2 + 1)
            .read_to_string(&mut text)?;
        if text.len() != TOKEN_BYTES * 2 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("`{}` holds no host token", self.token.display()),
            ));
        }
        Ok(text)
    }

    /// Takes the start lock, waiting at most `patience` for it; released
    /// when the returned value is dropped.
    ///
    /// # Errors
    ///
    /// [`PlaceError::Io`] when the lock file cannot be opened,
    /// [`PlaceError::LockTimeout`] when it stays taken.
    pub(crate) fn lock(&self, patience: Duration) -> Result<StartLock, PlaceError> {
        use nix::fcntl::{Flock, FlockArg};
        let io = |error| PlaceError::Io {
            dir: self.lock.clone(),
            error,
        };
        let deadline = Instant::now() + patience;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&self.lock)
            .map_err(io)?;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Ok(StartLock { _lock: lock }),
                Err((back, nix::errno::Errno::EWOULDBLOCK | nix::errno::Errno::EINTR)) => {
                    if Instant::now() >= deadline {
                        return Err(PlaceError::LockTimeout {
                            path: self.lock.clone(),
                            secs: patience.as_secs(),
                        });
                    }
                    file = back;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err((_, errno)) => return Err(io(errno.into())),
            }
        }
    }
}

/// The start lock, held while a relay looks for a host and starts one.
#[derive(Debug)]
pub(crate) struct StartLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

/// `$XDG_RUNTIME_DIR`, when it is an absolute folder of the user's that
/// only the user can enter.
fn runtime_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("XDG_RUNTIME_DIR")?);
    (dir.is_absolute() && check_private(&dir).is_ok()).then_some(dir)
}

/// Creates `dir` (`0700`) if missing and checks it is private.
fn private_dir(dir: &Path) -> Result<(), PlaceError> {
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => {
            return Err(PlaceError::Io {
                dir: dir.to_owned(),
                error,
            });
        }
    }
    check_private(dir)
}

/// Refuses `dir` unless it is a folder (not a link), owned by this user,
/// with no permission for group or others.
fn check_private(dir: &Path) -> Result<(), PlaceError> {
    let meta = std::fs::symlink_metadata(dir).map_err(|error| PlaceError::Io {
        dir: dir.to_owned(),
        error,
    })?;
    let unsafe_dir = |why: String| PlaceError::Unsafe {
        dir: dir.to_owned(),
        why,
    };
    if meta.file_type().is_symlink() {
        return Err(unsafe_dir("it is a symbolic link".to_owned()));
    }
    if !meta.is_dir() {
        return Err(unsafe_dir("it is not a folder".to_owned()));
    }
    let uid = nix::unistd::getuid().as_raw();
    if meta.uid() != uid {
        return Err(unsafe_dir(format!(
            "it belongs to uid {}, not to uid {uid}",
            meta.uid()
        )));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(unsafe_dir(format!(
            "its mode is {mode:03o}: group or others may enter (it must be 700)"
        )));
    }
    Ok(())
}

/// 16 hex digits naming the host of this home, system policy and `$HOME`.
fn key(home_root: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    let mut hasher = blake3::Hasher::new();
    for part in [
        home_root.as_os_str().to_owned(),
        crate::policy::Policy::system_path().into_os_string(),
        std::env::var_os("HOME").unwrap_or_default(),
    ] {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.finalize().to_hex()[..16].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp() -> tempfile::TempDir {
        tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_folder_open_to_others_a_link_or_a_file_is_refused() {
        let root = temp();
        let open = root.path().join("open");
        std::fs::create_dir(&open).unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("{e}"));
        let private = root.path().join("private");
        private_dir(&private).unwrap_or_else(|e| panic!("{e}"));
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&private, &link).unwrap_or_else(|e| panic!("{e}"));
        let file = root.path().join("file");
        std::fs::write(&file, b"").unwrap_or_else(|e| panic!("{e}"));
        // (folder, what the refusal says)
        let cases = [
            (
                &open,
                "its mode is 755: group or others may enter (it must be 700)",
            ),
            (&link, "it is a symbolic link"),
            (&file, "it is not a folder"),
        ];
        for (dir, why) in cases {
            let err = private_dir(dir).err();
            assert!(
                matches!(&err, Some(PlaceError::Unsafe { why: got, .. }) if got == why),
                "{}: {err:?}",
                dir.display()
            );
        }
        // The open folder was not repaired behind the user's back.
        let mode = std::fs::metadata(&open).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode.ok(), Some(0o755));
        // A new folder is made private.
        let mode = std::fs::metadata(&private).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode.ok(), Some(0o700));
    }

    #[test]
    fn two_homes_get_two_sockets_and_one_home_always_the_same() {
        let (a, b) = (temp(), temp());
        let key_a = key(a.path());
        assert_eq!(key_a, key(a.path()));
        assert_ne!(key_a, key(b.path()));
        assert_eq!(key_a.len(), 16);
    }

    #[test]
    fn the_lock_is_exclusive_and_released_on_drop() {
        let root = temp();
        let place = Place {
            socket: root.path().join("host.sock"),
            lock: root.path().join("host.lock"),
            token: root.path().join("host.token"),
        };
        let held = place.lock(Duration::from_secs(1));
        assert!(held.is_ok(), "{held:?}");
        let again = place.lock(Duration::from_millis(50));
        assert!(
            matches!(again, Err(PlaceError::LockTimeout { .. })),
            "{again:?}"
        );
        drop(held);
        assert!(place.lock(Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn a_token_is_private_new_for_each_host_and_read_back_whole() {
        let root = temp();
        let place = Place {
            socket: root.path().join("host.sock"),
            lock: root.path().join("host.lock"),
            token: root.path().join("host.token"),
        };
        // No host yet: nothing to show.
        assert!(place.token().is_err());
        let first = place.new_token().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(first.len(), 64);
        assert_eq!(place.token().ok().as_deref(), Some(first.as_str()));
        let mode = std::fs::metadata(root.path().join("host.token"))
            .map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode.ok(), Some(0o600));
        // The next host's replaces it.
        let second = place.new_token().unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(first, second);
        assert_eq!(place.token().ok().as_deref(), Some(second.as_str()));
        assert!(token_matches(&second, &second));
        assert!(!token_matches(&first, &second));
        assert!(!token_matches("", &second));
        assert!(!token_matches(&second[..63], &second));
        // A file that holds no token is not taken for one.
        std::fs::write(root.path().join("host.token"), "x".repeat(64))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(place.token().is_err());
    }
}
