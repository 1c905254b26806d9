//! Native extensions: subprocesses speaking the protocol on their pipes, as zot runs them.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::sync::watch;

use super::{Control, Exit, Transport};
use crate::capability::confine::{self, Jail};
use crate::capability::fs::ControlPaths;

/// A subprocess could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// A bare `exec` name is not on `PATH`.
    #[error("`{exec}` was not found on PATH")]
    NotOnPath {
        /// The name looked up.
        exec: String,
    },
    /// The policy requires kernel confinement this kernel cannot give, or
    /// it could not be set up.
    #[error("cannot confine `{}`: {reason}", program.display())]
    Confine {
        /// The resolved program.
        program: PathBuf,
        /// Why not.
        reason: String,
    },
    /// The OS refused to start the program.
    #[error("cannot start `{}`: {error}", program.display())]
    Spawn {
        /// The resolved program.
        program: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
}

/// Resolves `exec` by zot's rules (see [`crate::discovery::locate_program`]).
///
/// # Errors
///
/// [`SpawnError::NotOnPath`] when a bare name is found nowhere on `PATH`.
pub fn resolve_exec(exec: &str, dir: &Path) -> Result<PathBuf, SpawnError> {
    crate::discovery::locate_program(exec, dir).ok_or_else(|| SpawnError::NotOnPath {
        exec: exec.to_owned(),
    })
}

/// How native extensions run when the policy says `confine_native` (or
/// `require_confinement`): the kernel confinement of shell commands (see
/// [`confine`]), with the extension's folder readable, its data dir
/// ([`NativeConfinement::data_dir`]) and a private `HOME` writable, the
/// network open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeConfinement {
    /// The workspace, read-write (control paths read-only), when known.
    pub workspace: Option<PathBuf>,
    /// The workspace's own control paths (`$ZOT_HOME`, an extension folder
    /// lying in it): read-only, the secret ones hidden.
    pub control: ControlPaths,
    /// Where each extension's data dir is made.
    pub data_root: PathBuf,
    /// Where the user's extensions are installed (`$ZOT_HOME/extensions`).
    pub installed_root: PathBuf,
    /// The policy's confinement settings (`required_by` refuses to start
    /// without every protection).
    pub settings: confine::Settings,
}

impl NativeConfinement {
    /// Whether `policy` confines native extensions (`confine_native`, or
    /// `require_confinement`).
    pub fn wanted(policy: &crate::policy::Policy) -> bool {
        policy.confine_native() || policy.confinement_required_by().is_some()
    }

    /// The confinement `policy` asks for native extensions, if any: data
    /// dirs under `$ZOT_HOME/data`; `workspace` with its control paths.
    pub fn from_policy(
        policy: &crate::policy::Policy,
        workspace: Option<(PathBuf, ControlPaths)>,
        home: &crate::home::ZotHome,
    ) -> Option<Self> {
        let required_by = policy.confinement_required_by().map(Path::to_owned);
        // The home folder (or what holds it) is no project: the extension
        // gets no workspace there, as a guest gets none.
        let user_home = crate::home::user_home();
        let workspace = workspace.filter(|(workspace, _)| {
            crate::sandbox::no_project_refusal(workspace, user_home.as_deref()).is_none()
        });
        let (workspace, control) = workspace.unzip();
        Self::wanted(policy).then(|| Self {
            workspace,
            control: control.unwrap_or_default(),
            data_root: home.data_dir(),
            installed_root: home.extensions_dir(),
            settings: confine::Settings {
                shell_network: true,
                required_by,
                records: None,
            },
        })
    }

    /// The data dir of the extension `manifest` describes:
    /// `<data_root>/<name>/` for one the user installed
    /// (`$ZOT_HOME/extensions/<name>/`), `<data_root>/<name>@<key>/` for
    /// any other (a project's, one given by path), the key 16 hex digits
    /// of the SHA-256 of its folder's canonical path. A workspace's
    /// extension named as one the user installed (which it shadows, zot
    /// preferring the workspace's) never opens that one's data, a token it
    /// saved, nor one of the same name in another workspace: a name is
    /// the author's to choose, a folder is not.
    pub fn data_dir(&self, manifest: &crate::manifest::Manifest) -> PathBuf {
        let name = manifest.name();
        let folder = manifest
            .dir
            .canonicalize()
            .unwrap_or_else(|_| manifest.dir.clone());
        let installed = self.installed_root.join(name).canonicalize().ok();
        if installed.as_deref() == Some(folder.as_path()) {
            return self.data_root.join(name);
        }
        let digest = <sha2::Sha256 as sha2::Digest>::digest(folder.as_os_str().as_encoded_bytes());
        let key = crate::text::hex(digest.get(..8).unwrap_or_default());
        self.data_root.join(format!("{name}@{key}"))
    }

    /// The workspace's control paths below its root (rule 6 of
    /// [`confine`]: every nested `.git`, `.zot` and `.shiro`, every
    /// folder git takes for a repository whatever its name, and what a
    /// nested repository's configuration names in it), bound
    /// read-only for the extension's whole life. Walked on a blocking
    /// thread: a large workspace is not walked where frames are answered.
    ///
    /// # Errors
    ///
    /// [`confine::CensusError`] when the workspace cannot be walked, or is
    /// too large to be: a nested repository left writable would let the
    /// extension plant what `git status` there runs, unsandboxed.
    pub async fn nested_control_paths(&self) -> Result<Vec<PathBuf>, confine::CensusError> {
        let Some(workspace) = self.workspace.clone() else {
            return Ok(Vec::new());
        };
        let shown = workspace.clone();
        tokio::task::spawn_blocking(move || {
            let home = crate::home::user_home();
            confine::Census::take(&workspace)
                .map(|census| census.with_configured(home.as_deref()).nested().collect())
        })
        .await
        .unwrap_or_else(|err| {
            Err(confine::CensusError::Workspace {
                workspace: shown,
                reason: err.to_string(),
            })
        })
    }
}

/// How one native extension is confined.
#[derive(Debug)]
pub struct Confined<'a> {
    /// The policy's confinement of native extensions.
    pub settings: &'a NativeConfinement,
    /// Its data dir ([`NativeConfinement::data_dir`]).
    pub data_dir: PathBuf,
    /// The workspace's nested control paths
    /// ([`NativeConfinement::nested_control_paths`]), bound read-only.
    pub nested: Vec<PathBuf>,
}

/// How long the end of an extension waits for what it last wrote to
/// stderr to reach its log: a process it started that keeps the pipe open
/// costs its end this, and no more.
const LOG_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// Starts `exec args...` in `dir` with piped stdin/stdout and stderr
/// appended to `log` as text, capped ([`copy_shown`]); confined as
/// `confinement` says, when it does; with `secrets` (variable, value)
/// added to its environment.
///
/// # Errors
///
/// [`SpawnError`] when the program cannot be found, confined or started.
pub fn spawn(
    exec: &str,
    args: &[String],
    dir: &Path,
    log: Option<std::fs::File>,
    confinement: Option<Confined<'_>>,
    secrets: &[(String, String)],
) -> Result<Transport, SpawnError> {
    let program = resolve_exec(exec, dir)?;
    let stderr = if log.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    };
    let mut command = tokio::process::Command::new(&program);
    command
        // Only the secrets it declared as variables, granted and set
        // (`Sandbox::secret_env`); they are outside the sandbox from here.
        .envs(secrets.iter().map(|(name, value)| (name, value)))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true);
    // `kill_on_drop` needs this process alive to act: should it be killed
    // (zot's `SIGKILL`), the kernel ends the extension instead.
    crate::capability::confine::die_with_parent(command.as_std_mut());
    let confine_error = |reason: String| SpawnError::Confine {
        program: program.clone(),
        reason,
    };
    // The private HOME lives as long as the process.
    let mut home = None;
    let mut prepared = None;
    if let Some(Confined {
        settings,
        data_dir,
        nested,
    }) = confinement
    {
        std::fs::create_dir_all(&data_dir)
            .map_err(|err| confine_error(format!("cannot make `{}`: {err}", data_dir.display())))?;
        let private = tempfile::Builder::new()
            .prefix("zotbox-home-")
            .tempdir()
            .map_err(|err| confine_error(format!("cannot make a private home: {err}")))?;
        let jail = Jail {
            workspace: settings.workspace.clone(),
            read: vec![dir.to_owned()],
            write: vec![data_dir, private.path().to_owned()],
            network: true,
            read_only: nested,
            ..Jail::default()
        }
        .guarding(&settings.control);
        let ready = jail
            .prepare(&settings.settings)
            .map_err(|err| confine_error(err.to_string()))?;
        command
            .env("HOME", private.path())
            .env("TMPDIR", private.path());
        ready.install(command.as_std_mut());
        home = Some(private);
        prepared = Some(ready);
    }
    let mut child = command.spawn().map_err(|error| match &prepared {
        Some(ready) if ready.failed_step().is_some() => confine_error(ready.explain(&error)),
        _ => SpawnError::Spawn {
            program: program.clone(),
            error,
        },
    })?;
    drop(prepared);
    let logged = match (child.stderr.take(), log) {
        (Some(stderr), Some(log)) => copy_shown(stderr, log),
        _ => None,
    };
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(SpawnError::Spawn {
            program,
            error: std::io::Error::other("the child's pipes were not created"),
        });
    };
    let exited = Arc::new(AtomicBool::new(false));
    let control = Arc::new(ProcessControl {
        pid: child.id(),
        exited: exited.clone(),
    });
    let (exit_tx, exit_rx) = watch::channel(None);
    tokio::spawn(async move {
        let exit = match child.wait().await {
            Ok(status) => exit_of(status),
            Err(err) => Exit::Killed(format!("waiting for the process failed: {err}")),
        };
        exited.store(true, Ordering::SeqCst);
        // Its last words (why it ended) are in the log before its end is
        // told, unless a process it started still holds the pipe.
        if let Some(logged) = logged {
            let _ = tokio::time::timeout(LOG_PATIENCE, logged).await;
        }
        drop(home);
        let _ = exit_tx.send(Some(exit));
    });
    Ok(Transport {
        output: Box::new(stdout),
        input: Box::new(stdin),
        control,
        exit: exit_rx,
        direct_output: None,
    })
}

/// Appends what the extension writes to stderr to `log` as a wasm guest's
/// is ([`super::stderr_log`]: as text, up to a cap), on a thread of its own
/// until the last writer closes the pipe.
///
/// What resolves when the pipe has closed and all of it is written.
fn copy_shown(
    stderr: tokio::process::ChildStderr,
    log: std::fs::File,
) -> Option<tokio::sync::oneshot::Receiver<()>> {
    use std::io::Read as _;
    let mut stderr = std::fs::File::from(stderr.into_owned_fd().ok()?);
    let (done, logged) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("zotbox-native-stderr".to_owned())
        .stack_size(64 * 1024)
        .spawn(move || {
            let mut log = super::stderr_log::StderrLog::new(log);
            let mut buffer = [0u8; 8192];
            // A log that refuses writes (a full disk) is given nothing
            // more, but the pipe is still read: closed, it would end the
            // extension's next write to stderr with `SIGPIPE`.
            let mut writable = true;
            loop {
                let read = match stderr.read(&mut buffer) {
                    Ok(0) => break,
                    Ok(read) => read,
                    Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                writable = writable && log.append(&buffer[..read]).is_ok();
            }
            if writable {
                log.finish();
            }
            let _ = done.send(());
        });
    match spawned {
        Ok(_) => Some(logged),
        Err(err) => {
            tracing::warn!("an extension's stderr goes unlogged: no thread to copy it: {err}");
            None
        }
    }
}

fn exit_of(status: std::process::ExitStatus) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(signal)) => Exit::Signal(signal),
        (None, None) => Exit::Killed("unknown exit status".to_owned()),
    }
}

struct ProcessControl {
    pid: Option<u32>,
    exited: Arc<AtomicBool>,
}

impl ProcessControl {
    fn signal(&self, signal: Signal) {
        // After the child is reaped its pid may be reused: never signal then.
        if self.exited.load(Ordering::SeqCst) {
            return;
        }
        if let Some(pid) = self.pid.and_then(|pid| i32::try_from(pid).ok()) {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }
}

impl Control for ProcessControl {
    fn terminate(&self) {
        self.signal(Signal::SIGTERM);
    }

    fn kill(&self) {
        self.signal(Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_resolution_follows_zot() {
        let dir = Path::new("/ext/weather");
        let cases = [
            ("/usr/bin/env", "/usr/bin/env"),
            ("./weather", "/ext/weather/./weather"),
            ("../shared/run", "/ext/weather/../shared/run"),
            ("bin/weather", "/ext/weather/bin/weather"),
        ];
        for (exec, expected) in cases {
            let resolved = resolve_exec(exec, dir).unwrap_or_default();
            assert_eq!(resolved, Path::new(expected), "{exec}");
        }
        // A bare name is looked up on PATH.
        let sh = resolve_exec("sh", dir).unwrap_or_default();
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        let missing = resolve_exec("no-such-program-zotbox", dir);
        assert!(
            matches!(&missing, Err(SpawnError::NotOnPath { exec }) if exec == "no-such-program-zotbox")
        );
    }
}
