//! Shared helpers: a fresh lab per test (zot home, workspace, extension
//! folders), extensions built from the one configurable Python fixture, the
//! real binary, and bounded waits on host events and recorded frames.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast::{self, error::RecvError};
use zotbox::protocol::{CommandResponse, ToolResult};
use zotbox::{HostBuilder, HostEvent};

/// How long any wait for something that should happen promptly may take
/// before the test fails. Generous: it bounds a hang, it measures nothing.
pub const PATIENCE: Duration = Duration::from_secs(15);

/// The configurable Python test extension.
pub fn pyext_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/pyext/ext.py")
}

/// A fixture folder under `tests/fixtures`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

/// One test's private world: `$ZOT_HOME`, a workspace, and a folder for
/// explicit extensions, all in a temp dir removed at the end.
pub struct Lab {
    _tmp: tempfile::TempDir,
    /// `$ZOT_HOME`.
    pub home: PathBuf,
    /// The workspace (canonical).
    pub workspace: PathBuf,
    /// Where explicit (`--ext`) extensions are written.
    pub dev: PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        // A shared host started for this lab's home would idle on after
        // the test, for a minute: end it now.
        if self.home.join("run").is_dir() {
            for pid in shared_hosts(&self.home) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// Every running `zotbox host serve` process for `home`.
pub fn shared_hosts(home: &Path) -> Vec<i32> {
    let home = home.display().to_string();
    let mut pids = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let serves = args.windows(2).any(|w| w == [&b"host"[..], &b"serve"[..]]);
        if serves && args.contains(&home.as_bytes()) && alive(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// Whether process `pid` runs (a zombie does not).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(") ")
                .map(|(_, rest)| !rest.starts_with('Z'))
        })
        .unwrap_or(false)
}

impl Lab {
    /// A fresh lab in a new folder of `/tmp`, whatever `TMPDIR` says: a
    /// confined command finds `/tmp` covered (its sockets out of reach), so
    /// the refusals the tests expect for the lab's folders outside the
    /// workspace read "No such file or directory" there, and would read
    /// "Permission denied" in a folder no cover hides.
    pub fn new() -> Self {
        let tmp = tempfile::Builder::new()
            .prefix("zotbox-e2e-")
            .tempdir_in("/tmp")
            .expect("temp dir");
        let root = tmp.path().canonicalize().expect("canonical temp dir");
        let lab = Self {
            home: root.join("home"),
            workspace: root.join("workspace"),
            dev: root.join("dev"),
            _tmp: tmp,
        };
        for dir in [&lab.home, &lab.workspace, &lab.dev] {
            std::fs::create_dir_all(dir).expect("lab folder");
        }
        lab
    }

    /// `<workspace>/.zot/extensions`.
    pub fn project_dir(&self) -> PathBuf {
        self.workspace.join(".zot/extensions")
    }

    /// `$ZOT_HOME/extensions`.
    pub fn user_dir(&self) -> PathBuf {
        self.home.join("extensions")
    }

    /// A host builder over this lab, with timings short enough for tests.
    pub fn builder(&self) -> HostBuilder {
        zotbox::Host::builder()
            .zot_home(&self.home)
            .workspace(&self.workspace)
            .hello_timeout(Duration::from_secs(5))
            .tool_timeout(Duration::from_secs(10))
            .intercept_timeout(Duration::from_secs(5))
    }

    /// Trusts the workspace as it is now: what `zotbox trust --yes`
    /// records, through the library. Any later change to its extensions or
    /// data tools makes it untrusted again.
    pub fn trust_workspace(&self) {
        self.trust(&self.workspace);
    }

    /// Trusts `workspace` (any folder) as it is now, in this lab's home.
    pub fn trust(&self, workspace: &Path) {
        let home = zotbox::home::ZotHome::new(&self.home);
        zotbox::store::trust::trust_workspace(&home, workspace)
            .unwrap_or_else(|e| panic!("cannot trust `{}`: {e}", workspace.display()));
    }

    /// Runs the real binary in `workspace` with this lab's home, the lab's
    /// system policy file (`$ZOT_HOME/system-policy.json`, absent unless a
    /// test writes it) and a `HOME` of its own.
    pub fn zotbox_in(&self, workspace: &Path, args: &[&str]) -> Run {
        self.zotbox_in_with(workspace, args, "")
    }

    /// As [`Lab::zotbox_in`], with `input` on stdin (then closed).
    pub fn zotbox_in_with(&self, workspace: &Path, args: &[&str], input: &str) -> Run {
        use std::io::Write as _;
        let mut child = zotbox_command(&self.home, workspace, args)
            .env("ZOTBOX_SYSTEM_POLICY", self.home.join("system-policy.json"))
            .env("HOME", self.home.join("user-home"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run zotbox");
        if let Some(mut stdin) = child.stdin.take() {
            // A command that reads nothing may exit before the write: fine.
            let _ = stdin.write_all(input.as_bytes());
        }
        Run::from(child.wait_with_output().expect("wait for zotbox"))
    }

    /// As [`Lab::zotbox`], with `env` set for the process (e.g. cargo's
    /// `CARGO_TARGET_DIR` for `ext build`).
    pub fn zotbox_env(&self, args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Run {
        let mut command = self.command(args);
        for (key, value) in env {
            command.env(key, value);
        }
        Run::from(command.output().expect("run zotbox"))
    }

    /// As [`Lab::zotbox_env`], with stdin, stdout and stderr on a
    /// terminal (util-linux `script`; both streams arrive on `stdout`).
    /// `None` when `script` is not installed.
    pub fn zotbox_on_terminal(
        &self,
        args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Option<Run> {
        let mut command = self.script(args);
        for (key, value) in env {
            command.env(key, value);
        }
        command.output().ok().map(Run::from)
    }

    /// `script` running `zotbox ARGS` on a pseudo-terminal with this lab's
    /// homes, in the workspace.
    fn script(&self, args: &[&str]) -> Command {
        let mut words = vec![
            env!("CARGO_BIN_EXE_zotbox").to_owned(),
            "--zot-home".to_owned(),
            self.home.display().to_string(),
            "--workspace".to_owned(),
            self.workspace.display().to_string(),
        ];
        words.extend(args.iter().map(|arg| (*arg).to_owned()));
        let quoted: Vec<String> = words
            .iter()
            .map(|word| format!("'{}'", word.replace('\'', "'\\''")))
            .collect();
        let mut command = Command::new("script");
        command
            .args(["-qec", &quoted.join(" "), "/dev/null"])
            .current_dir(&self.workspace)
            .env("ZOT_HOME", &self.home)
            .env_remove("ZOTBOX_LOG")
            .env_remove("XDG_STATE_HOME");
        command
    }

    /// As [`Lab::zotbox_on_terminal`], typing `typed` once the output shows
    /// `prompt` (as a person would: after the question). `None` when
    /// `script` is not installed.
    pub fn zotbox_typing_on_terminal(
        &self,
        args: &[&str],
        prompt: &str,
        typed: &str,
    ) -> Option<Run> {
        use std::io::{Read as _, Write as _};
        let mut child = self
            .script(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .ok()?;
        let stdout = Collected::from(child.stdout.take()?);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !stdout.text().contains(prompt) {
            assert!(
                std::time::Instant::now() < deadline,
                "no prompt `{prompt}` within 30 s: {}",
                stdout.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut stdin = child.stdin.take()?;
        stdin.write_all(typed.as_bytes()).expect("type");
        stdin.flush().expect("type");
        let status = child.wait().expect("wait for script");
        drop(stdin);
        let stdout = stdout.join();
        let mut stderr = String::new();
        if let Some(mut err) = child.stderr.take() {
            let _ = err.read_to_string(&mut stderr);
        }
        Some(Run {
            code: status.code(),
            stdout,
            stderr,
        })
    }

    /// Runs the real `zotbox` binary in the workspace with this lab's home.
    pub fn zotbox(&self, args: &[&str]) -> Run {
        Run::from(self.command(args).output().expect("run zotbox"))
    }

    /// The real `zotbox` binary, not yet started, in the workspace with
    /// this lab's home (see [`zotbox_command`]).
    pub fn command(&self, args: &[&str]) -> Command {
        zotbox_command(&self.home, &self.workspace, args)
    }
}

/// What a child writes to one of its pipes, gathered on a thread as it
/// comes: for a test that acts on the output while the child runs.
pub struct Collected {
    seen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    reader: std::thread::JoinHandle<()>,
}

impl Collected {
    /// Starts gathering what `pipe` gives until its end.
    pub fn from(mut pipe: impl std::io::Read + Send + 'static) -> Self {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let reader = {
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut buffer = [0u8; 1024];
                while let Ok(read) = pipe.read(&mut buffer) {
                    if read == 0 {
                        break;
                    }
                    seen.lock()
                        .expect("output")
                        .extend_from_slice(&buffer[..read]);
                }
            })
        };
        Self { seen, reader }
    }

    /// What came so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().expect("output")).into_owned()
    }

    /// Everything, once the pipe has ended.
    pub fn join(self) -> String {
        let Self { seen, reader } = self;
        reader.join().expect("the output reader");
        String::from_utf8_lossy(&seen.lock().expect("output")).into_owned()
    }
}

/// `zotbox --zot-home HOME --workspace WORKSPACE ARGS`, not yet started:
/// in WORKSPACE, with `$ZOT_HOME` at HOME and the test runner's own log
/// settings (`ZOTBOX_LOG`, `XDG_STATE_HOME`) cleared. Callers add a system
/// policy, a `HOME` or stdio as their test needs.
pub fn zotbox_command(home: &Path, workspace: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_zotbox"));
    command
        .arg("--zot-home")
        .arg(home)
        .arg("--workspace")
        .arg(workspace)
        .args(args)
        .current_dir(workspace)
        .env("ZOT_HOME", home)
        .env_remove("ZOTBOX_LOG")
        .env_remove("XDG_STATE_HOME");
    command
}

/// What a run of the binary did.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(output: Output) -> Self {
        Self {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

impl Run {
    /// Asserts the exit status, showing both streams when it differs.
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(self.code, Some(code), "unexpected exit status: {self:#?}");
        self
    }
}

/// How the manifest launches the fixture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launch {
    /// `"exec": "python3"` (a bare name, found on PATH) with the script's
    /// absolute path as the first argument.
    Python,
    /// The script copied into the folder, `"exec": "./ext.py"`.
    Copied,
    /// The interpreter's absolute path, skipping launcher shims (pyenv's
    /// costs ≈ 0.1 s of CPU per start): for tests that time starts.
    Interpreter,
}

/// The absolute path of the `python3` found on PATH, past any shim.
fn interpreter() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let output = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 on PATH");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    })
}

/// An extension folder to write: a manifest running the fixture with flags.
#[derive(Debug, Clone)]
pub struct Spec {
    name: String,
    flags: Vec<String>,
    launch: Launch,
    enabled: bool,
}

/// A spec for an extension called `name` (also its `hello` name).
pub fn ext(name: &str) -> Spec {
    Spec {
        name: name.to_owned(),
        flags: Vec::new(),
        launch: Launch::Python,
        enabled: true,
    }
}

impl Spec {
    /// Adds flags, e.g. `["--intercept", "block"]`.
    pub fn flags(mut self, flags: &[&str]) -> Self {
        self.flags.extend(flags.iter().map(|f| (*f).to_owned()));
        self
    }

    /// Launches through a copy of the script and a relative `exec`.
    pub fn copied(mut self) -> Self {
        self.launch = Launch::Copied;
        self
    }

    /// Launches through the interpreter's absolute path.
    pub fn direct(mut self) -> Self {
        self.launch = Launch::Interpreter;
        self
    }

    /// Writes `"enabled": false`.
    pub fn disabled(mut self) -> Self {
        self.enabled = false;
        self
    }

    /// Writes the folder `<parent>/<name>/`; the extension records what it
    /// receives in `<parent>/<name>.record.jsonl`.
    pub fn write_in(&self, parent: &Path) -> Ext {
        let dir = parent.join(&self.name);
        std::fs::create_dir_all(&dir).expect("extension folder");
        let record = parent.join(format!("{}.record.jsonl", self.name));
        let mut args: Vec<String> = Vec::new();
        let exec = match self.launch {
            Launch::Python => {
                args.push(pyext_script().display().to_string());
                "python3".to_owned()
            }
            Launch::Interpreter => {
                args.push(pyext_script().display().to_string());
                interpreter().to_owned()
            }
            Launch::Copied => {
                let script = dir.join("ext.py");
                std::fs::copy(pyext_script(), &script).expect("copy ext.py");
                make_executable(&script);
                "./ext.py".to_owned()
            }
        };
        args.extend(["--name".to_owned(), self.name.clone()]);
        args.extend(["--record".to_owned(), record.display().to_string()]);
        args.extend(self.flags.iter().cloned());
        let manifest = json!({
            "name": self.name,
            "version": "1.0.0",
            "exec": exec,
            "args": args,
            "language": "python",
            "description": format!("test extension {}", self.name),
            "enabled": self.enabled,
        });
        write_json(&dir.join("extension.json"), &manifest);
        Ext {
            name: self.name.clone(),
            dir,
            record,
        }
    }
}

/// Sets the exec bits of `path`.
pub fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut perms = std::fs::metadata(path).expect("metadata").permissions();
    perms.set_mode(0o755);
    std::fs::set_permissions(path, perms).expect("chmod");
}

/// Names in `$ZOT_HOME/extensions` (none when it does not exist).
pub fn installed_names(lab: &Lab) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(lab.user_dir())
        .map(|dir| {
            dir.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The JSON file at `path`.
pub fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read `{}`: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("`{}`: {e}", path.display()))
}

/// Writes pretty JSON to `path`, creating its folder.
pub fn write_json(path: &Path, value: &Value) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).expect("the file's folder");
    }
    let text = serde_json::to_string_pretty(value).expect("encode json");
    std::fs::write(path, text + "\n").expect("write json");
}

/// A written extension.
#[derive(Debug, Clone)]
pub struct Ext {
    pub name: String,
    /// Its folder.
    pub dir: PathBuf,
    /// Where it records the frames it receives.
    pub record: PathBuf,
}

impl Ext {
    /// Every recorded entry so far (frames received, and `_` markers).
    pub fn recorded(&self) -> Vec<Value> {
        let Ok(text) = std::fs::read_to_string(&self.record) else {
            return Vec::new();
        };
        // A line being written right now may be incomplete: skip it.
        text.lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// Recorded entries of one `type`.
    pub fn recorded_of(&self, frame_type: &str) -> Vec<Value> {
        self.recorded()
            .into_iter()
            .filter(|frame| frame["type"] == frame_type)
            .collect()
    }

    /// Waits until at least `count` entries of `frame_type` are recorded.
    pub async fn wait_for(&self, frame_type: &str, count: usize) -> Vec<Value> {
        eventually(
            &format!("`{}` to record {count} `{frame_type}`", self.name),
            || {
                let found = self.recorded_of(frame_type);
                (found.len() >= count).then_some(found)
            },
        )
        .await
        .unwrap_or_else(|| panic!("recorded so far: {:#?}", self.recorded()))
    }

    /// The pid the extension reported at start (its latest start).
    pub fn pid(&self) -> i32 {
        let started = self.recorded_of("_started");
        let last = started.last().expect("the extension never started");
        i32::try_from(last["pid"].as_i64().expect("pid")).expect("pid fits")
    }

    /// Rewrites this extension's manifest (after `edit`).
    pub fn edit_manifest(&self, edit: impl FnOnce(&mut Value)) {
        let path = self.dir.join("extension.json");
        let text = std::fs::read_to_string(&path).expect("read manifest");
        let mut value: Value = serde_json::from_str(&text).expect("manifest json");
        edit(&mut value);
        write_json(&path, &value);
    }
}

/// Polls `check` every 20 ms until it yields, for at most [`PATIENCE`].
/// `None` when it never did; the caller panics with context.
pub async fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(found) = check() {
            return Some(found);
        }
        if tokio::time::Instant::now() >= deadline {
            eprintln!("gave up waiting for {what}");
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The next host event matching `pred`, skipping others; panics after
/// [`PATIENCE`] with the events seen.
pub async fn next_event(
    events: &mut broadcast::Receiver<HostEvent>,
    what: &str,
    mut pred: impl FnMut(&HostEvent) -> bool,
) -> HostEvent {
    let mut seen = Vec::new();
    let wait = async {
        loop {
            match events.recv().await {
                Ok(event) if pred(&event) => return event,
                Ok(event) => seen.push(event),
                Err(RecvError::Lagged(n)) => panic!("lagged by {n} events waiting for {what}"),
                Err(RecvError::Closed) => panic!("event stream closed waiting for {what}"),
            }
        }
    };
    match tokio::time::timeout(PATIENCE, wait).await {
        Ok(event) => event,
        Err(_) => panic!("no {what} within {PATIENCE:?}; other events: {seen:#?}"),
    }
}

/// Runs every future concurrently on this task (the e2e crate has no
/// `futures`); their outputs in order.
pub async fn join_all<F: Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut pending: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (future, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none()
                && let std::task::Poll::Ready(value) = future.as_mut().poll(cx)
            {
                *output = Some(value);
            }
        }
        if outputs.iter().all(Option::is_some) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// Awaits `future` for at most [`PATIENCE`].
pub async fn bounded<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(PATIENCE, future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {PATIENCE:?}"))
}

/// Whether process `pid` still exists (a zombie counts as gone: it has exited).
pub fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// The `list()` entry of extension `name`.
pub fn info(host: &zotbox::Host, name: &str) -> zotbox::host::ExtensionInfo {
    host.list()
        .into_iter()
        .find(|info| info.name == name)
        .unwrap_or_else(|| panic!("no `{name}` in list: {:#?}", host.list()))
}

/// Names of every live tool.
pub fn tool_names(host: &zotbox::Host) -> Vec<String> {
    host.tools().into_iter().map(|t| t.name).collect()
}

/// The `list()` entry of `name` once it has left `starting`.
///
/// build() should only return once every first start has become ready or
/// failed, but a failed start may be recorded just after it returns (see
/// `failure::build_returns_only_once_a_failed_start_is_recorded`).
pub async fn settled(host: &zotbox::Host, name: &str) -> zotbox::host::ExtensionInfo {
    eventually(&format!("`{name}` to settle"), || {
        let entry = info(host, name);
        (entry.state != zotbox::host::ExtensionState::Starting).then_some(entry)
    })
    .await
    .unwrap_or_else(|| panic!("`{name}` still starting: {:#?}", host.list()))
}

/// The longest line a [`Peer`] keeps; the rest of a longer line is dropped.
const PEER_LINE_CAP: usize = 8 * 1024 * 1024;

/// The other end of a process's stdio, as zot holds an extension: raw
/// bytes in (anything, including what no encoder would write), lines out
/// with the time each arrived, every wait bounded.
pub struct Peer {
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    lines: tokio::sync::mpsc::UnboundedReceiver<(tokio::time::Instant, Vec<u8>)>,
    stderr: Option<tokio::task::JoinHandle<String>>,
    /// Every line received so far, lossily decoded, for failure messages.
    pub transcript: Vec<String>,
    /// `false` while zot stops reading the process's output
    /// ([`Peer::stop_reading`]).
    reading: tokio::sync::watch::Sender<bool>,
}

/// How a [`Peer`]'s process ended.
#[derive(Debug)]
pub struct PeerEnd {
    pub status: std::process::ExitStatus,
    pub stderr: String,
    /// Lines that arrived while it was ending.
    pub last_lines: Vec<String>,
}

impl Lab {
    /// Starts the real `zotbox` with `args` in `cwd` as zot starts an
    /// extension: this lab's `ZOT_HOME`, `HOME` an empty folder (so the
    /// runner's own `~/.shiro-neko` adds nothing), stdio piped.
    pub fn spawn_zotbox(&self, args: &[&str], cwd: &Path) -> Peer {
        let home = self.dev.join("user-home");
        std::fs::create_dir_all(&home).expect("user home");
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_zotbox"));
        command
            .args(args)
            .current_dir(cwd)
            .env("ZOT_HOME", &self.home)
            .env("HOME", &home)
            .env_remove("ZOTBOX_LOG")
            .env_remove("XDG_STATE_HOME");
        Peer::spawn(command)
    }
}

/// Starts `command` with its stdin, stdout and stderr piped, killed when
/// dropped.
pub fn spawn_piped(mut command: tokio::process::Command) -> tokio::process::Child {
    command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the peer's process")
}

impl Peer {
    /// Spawns `command` with piped stdio.
    pub fn spawn(command: tokio::process::Command) -> Self {
        use tokio::io::{AsyncBufReadExt, BufReader};
        let mut child = spawn_piped(command);
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        let (reading, mut gate) = tokio::sync::watch::channel(true);
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                // Stopped: nothing more leaves the pipe until reading resumes
                // (or the peer is dropped).
                if gate.wait_for(|reading| *reading).await.is_err() {
                    break;
                }
                let Ok(buffer) = reader.fill_buf().await else {
                    break;
                };
                if buffer.is_empty() {
                    break;
                }
                let (taken, complete) = match buffer.iter().position(|&b| b == b'\n') {
                    Some(at) => (at + 1, true),
                    None => (buffer.len(), false),
                };
                let room = PEER_LINE_CAP.saturating_sub(line.len());
                let keep = taken - usize::from(complete);
                line.extend_from_slice(&buffer[..keep.min(room)]);
                reader.consume(taken);
                if complete {
                    let done = std::mem::take(&mut line);
                    if tx.send((tokio::time::Instant::now(), done)).is_err() {
                        break;
                    }
                }
            }
        });
        let stderr = collect_stderr(&mut child);
        Self {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr: Some(stderr),
            transcript: Vec::new(),
            reading,
        }
    }

    /// The process's pid (`None` once it was waited for).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Stops taking the process's output, as a zot that is busy elsewhere
    /// does: once the pipe is full, the process's writes wait.
    pub fn stop_reading(&self) {
        self.reading.send_replace(false);
    }

    /// Takes the process's output again after [`Peer::stop_reading`].
    pub fn resume_reading(&self) {
        self.reading.send_replace(true);
    }

    /// Writes `frame` as one line.
    pub async fn send(&mut self, frame: &Value) {
        let mut line = serde_json::to_vec(frame).expect("encode frame");
        line.push(b'\n');
        self.send_bytes(&line).await;
    }

    /// Writes raw bytes, as they are.
    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        use tokio::io::AsyncWriteExt;
        let stdin = self.stdin.as_mut().expect("stdin is still open");
        let written = async {
            stdin.write_all(bytes).await?;
            stdin.flush().await
        };
        match tokio::time::timeout(PATIENCE, written).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("cannot write to the peer: {e}; {}", self.describe()),
            Err(_) => panic!("the peer reads nothing: {}", self.describe()),
        }
    }

    /// The next line within `wait`, as JSON, with the time it arrived:
    /// `Ok(None)` at the end of the output, `Err(())` when nothing came.
    /// A line that is not JSON fails the test.
    pub async fn recv_within(
        &mut self,
        wait: Duration,
    ) -> Result<Option<(tokio::time::Instant, Value)>, ()> {
        match tokio::time::timeout(wait, self.lines.recv()).await {
            Err(_) => Err(()),
            Ok(None) => Ok(None),
            Ok(Some((at, line))) => {
                let text = String::from_utf8_lossy(&line).into_owned();
                self.transcript.push(text.clone());
                match serde_json::from_slice(&line) {
                    Ok(frame) => Ok(Some((at, frame))),
                    Err(e) => panic!("not a JSON line ({e}): {text}\n{}", self.describe()),
                }
            }
        }
    }

    /// The next frame (within [`PATIENCE`]); panics at the end of output.
    pub async fn recv(&mut self) -> Value {
        match self.recv_within(PATIENCE).await {
            Ok(Some((_, frame))) => frame,
            Ok(None) => panic!("the peer's output ended: {}", self.describe()),
            Err(()) => panic!(
                "nothing from the peer within {PATIENCE:?}: {}",
                self.describe()
            ),
        }
    }

    /// Frames up to and including the first of `frame_type` (within [`PATIENCE`]).
    pub async fn recv_through(&mut self, frame_type: &str) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self.recv().await;
            let done = frame["type"] == frame_type;
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }

    /// Waits for the end of the output and the exit, each within [`PATIENCE`].
    pub async fn end(mut self) -> PeerEnd {
        let mut last_lines = Vec::new();
        loop {
            match tokio::time::timeout(PATIENCE, self.lines.recv()).await {
                Ok(Some((_, line))) => last_lines.push(String::from_utf8_lossy(&line).into_owned()),
                Ok(None) => break,
                Err(_) => panic!("output still open after {PATIENCE:?}: {}", self.describe()),
            }
        }
        let status = match tokio::time::timeout(PATIENCE, self.child.wait()).await {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => panic!("cannot wait for the peer: {e}"),
            Err(_) => panic!("output closed but no exit within {PATIENCE:?}"),
        };
        let stderr = match self.stderr.take() {
            Some(task) => tokio::time::timeout(PATIENCE, task)
                .await
                .expect("stderr closes with the process")
                .expect("stderr reader"),
            None => String::new(),
        };
        PeerEnd {
            status,
            stderr,
            last_lines,
        }
    }

    /// The state for a failure message.
    pub fn describe(&self) -> String {
        format!(
            "pid {:?}, lines so far:\n{}",
            self.child.id(),
            self.transcript.join("\n")
        )
    }
}

/// One value of `/proc/PROCESS/status` in KiB (`VmRSS`, `VmHWM`), where
/// PROCESS is `self` or a pid.
pub fn proc_status_kib(process: impl std::fmt::Display, field: &str) -> u64 {
    let path = format!("/proc/{process}/status");
    let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {path}"))
}

/// One value of this process's `/proc/self/status`, in KiB.
pub fn status_kib(field: &str) -> u64 {
    proc_status_kib("self", field)
}

/// This process's resident set size (`VmRSS`), in KiB.
pub fn rss_kib() -> u64 {
    status_kib("VmRSS")
}

/// Whether to run the body of the test named `test` (its path in this
/// binary, e.g. `limits::some_test`) here.
///
/// Resident size is one figure per process, and this binary runs its tests
/// side by side: another test compiling a guest meanwhile shows in the
/// figure. So a test that measures it calls this first: the first time, it
/// runs the test again in a process of its own (this binary, that test
/// only), asserts that it passed and returns `false`; in that process it
/// returns `true`.
pub fn alone(test: &str) -> bool {
    const ALONE: &str = "ZOTBOX_TEST_ALONE";
    if std::env::var(ALONE).is_ok_and(|running| running == test) {
        return true;
    }
    let binary = std::env::current_exe().expect("the test binary");
    let run = Command::new(binary)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(ALONE, test)
        .output()
        .expect("run the test in a process of its own");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success() && stdout.contains("1 passed"),
        "`{test}` in a process of its own:\n{stdout}\n{stderr}"
    );
    eprint!("{stderr}");
    false
}

/// Runs `work` and says how far this process's resident memory rose above
/// where it stood when `work` began, at its peak, in MiB. Measurements take
/// turns (the peak is the whole process's); call it under [`alone`], or
/// tests running meanwhile count too.
pub async fn peak_rss_growth_mib<F: Future>(work: F) -> (F::Output, u64) {
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _turn = ONE_AT_A_TIME.lock().await;
    // Writing 5 resets the peak (VmHWM) to the current resident size.
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak resident size");
    let before = status_kib("VmRSS");
    let output = work.await;
    let peak = status_kib("VmHWM");
    (output, peak.saturating_sub(before) / 1024)
}

/// Writes `<parent>/prober/`: the prober wasm guest (see `tests/guests/prober`)
/// with a manifest declaring `capabilities`; returns the folder. Unlike
/// `attack::prober`, the folder may be anywhere, the workspace included.
pub fn prober_in(parent: &Path, capabilities: &Value) -> PathBuf {
    let dir = parent.join("prober");
    std::fs::create_dir_all(&dir).expect("prober folder");
    let wasm = crate::guests::guests().artifact("prober", crate::guests::Form::Wasm);
    std::fs::copy(wasm, dir.join("prober.wasm")).expect("copy prober.wasm");
    let manifest = json!({
        "name": "prober",
        "version": "0.1.0",
        "wasm": "./prober.wasm",
        "capabilities": capabilities,
    });
    write_json(&dir.join("extension.json"), &manifest);
    dir
}

/// Runs the real binary with `$ZOT_HOME` at `home` (not the lab's), the
/// lab's workspace, and a system policy that does not exist.
pub fn zotbox_with_home(lab: &Lab, home: &Path, args: &[&str]) -> Run {
    let output = zotbox_command(home, &lab.workspace, args)
        .env(
            "ZOTBOX_SYSTEM_POLICY",
            lab.home.join("no-system-policy.json"),
        )
        .output()
        .expect("run zotbox");
    Run::from(output)
}

/// Starts `zotbox run DIR` as zot does (in DIR, `$ZOT_HOME` the lab's),
/// answers its `hello` with the lab's workspace as `cwd`, makes each tool
/// call in turn and returns each answer as `(is_error, text)`; then shuts
/// it down. Every wait is bounded by [`PATIENCE`].
pub fn zotbox_run_calls(lab: &Lab, dir: &Path, calls: &[(&str, Value)]) -> Vec<(bool, String)> {
    zotbox_run_calls_with(lab, dir, &[], calls)
}

/// [`zotbox_run_calls`] with `env` added to `zotbox run`'s environment.
pub fn zotbox_run_calls_with(
    lab: &Lab,
    dir: &Path,
    env: &[(&str, &Path)],
    calls: &[(&str, Value)],
) -> Vec<(bool, String)> {
    use std::io::{BufRead, Write};
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_zotbox"))
        .args(["run", &dir.display().to_string()])
        .envs(env.iter().copied())
        .current_dir(dir)
        .env("ZOT_HOME", &lab.home)
        .env(
            "ZOTBOX_SYSTEM_POLICY",
            lab.home.join("no-system-policy.json"),
        )
        .env_remove("ZOTBOX_LOG")
        .env_remove("XDG_STATE_HOME")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start zotbox run");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, lines) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(frame) = serde_json::from_str(&line)
                && tx.send(frame).is_err()
            {
                break;
            }
        }
    });
    let next = |what: &str, pred: &dyn Fn(&Value) -> bool| -> Value {
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match lines.recv_timeout(left) {
                Ok(frame) if pred(&frame) => return frame,
                Ok(_) => {}
                Err(err) => panic!("no {what} from `zotbox run`: {err}"),
            }
        }
    };
    let mut stdin = child.stdin.take().expect("piped stdin");
    let mut send = |frame: Value| {
        writeln!(stdin, "{frame}").expect("write a frame");
        stdin.flush().expect("flush");
    };
    next("hello", &|frame| frame["type"] == "hello");
    send(json!({
        "type": "hello_ack",
        "protocol_version": 1,
        "capabilities": ["call_tool"],
        "zot_version": "0.0.0-zotbox-e2e",
        "provider": "anthropic",
        "model": "claude-test",
        "cwd": lab.workspace,
        "extension_dir": dir,
        "data_dir": dir,
    }));
    let mut answers = Vec::new();
    for (index, (tool, args)) in calls.iter().enumerate() {
        let id = format!("call-{index}");
        send(json!({"type": "tool_call", "id": id, "name": tool, "args": args}));
        let result = next(&format!("answer to `{tool}`"), &|frame| {
            frame["type"] == "tool_result" && frame["id"] == id.as_str()
        });
        let text = result["content"]
            .as_array()
            .map(|blocks| {
                blocks
                    .iter()
                    .filter_map(|b| b["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        answers.push((result["is_error"] == json!(true), text));
    }
    send(json!({"type": "shutdown"}));
    drop(stdin);
    let deadline = std::time::Instant::now() + PATIENCE;
    while child.try_wait().expect("wait for zotbox run").is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "`zotbox run` did not end after shutdown"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    answers
}

/// Runs the real binary like [`Lab::zotbox`], but ends it (and fails the
/// test) if it has not finished within [`PATIENCE`]: for runs that must not hang.
pub fn zotbox_bounded(lab: &Lab, args: &[&str]) -> Run {
    use std::process::Stdio;
    let mut child = lab
        .command(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run zotbox");
    let deadline = std::time::Instant::now() + PATIENCE;
    while child.try_wait().expect("wait for zotbox").is_none() {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`zotbox {}` hung for {PATIENCE:?}", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Run::from(child.wait_with_output().expect("zotbox output"))
}

/// Starts a host over the extension `folders` with restart policy
/// `restart`, once each has settled, within the test bound.
pub async fn host_over(
    lab: &Lab,
    folders: &[PathBuf],
    restart: zotbox::host::RestartPolicy,
) -> zotbox::Host {
    let mut builder = lab.builder().restart_policy(restart);
    for folder in folders {
        builder = builder.extension(folder);
    }
    bounded("starting the host", builder.build())
        .await
        .expect("build")
}

/// Reads all of a spawned child's piped stderr, as text, on a task.
pub fn collect_stderr(child: &mut tokio::process::Child) -> tokio::task::JoinHandle<String> {
    let mut stderr = child.stderr.take().expect("piped stderr");
    tokio::spawn(async move {
        let mut bytes = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut stderr, &mut bytes).await;
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Invokes `/name args` on `host`, within the test bound.
pub async fn command(host: &zotbox::Host, name: &str, args: &str) -> CommandResponse {
    bounded(&format!("/{name} {args}"), host.invoke_command(name, args))
        .await
        .unwrap_or_else(|e| panic!("/{name} {args}: {e}"))
}

/// Asserts a whole command response; only the id is the host's choice.
pub fn assert_response(got: CommandResponse, expected: CommandResponse) {
    assert_eq!(
        got,
        CommandResponse {
            id: got.id.clone(),
            ..expected
        }
    );
}

/// Calls tool `name` on `host`, within the test bound.
pub async fn tool(host: &zotbox::Host, name: &str, args: Value) -> ToolResult {
    bounded(&format!("tool {name}"), host.call_tool(name, args.clone()))
        .await
        .unwrap_or_else(|e| panic!("tool {name} {args}: {e}"))
}

/// Asserts a tool result's text and error flag.
pub fn assert_result(got: &ToolResult, is_error: bool, text: &str) {
    assert_eq!(
        (got.is_error, got.text().as_str()),
        (is_error, text),
        "{got:?}"
    );
}

/// An extension `zotbox new` wrote as `name`, once built in `folder`
/// (the Go, Python and JavaScript templates): `ext install` installs its
/// manifest and component and nothing else, and it answers: `count_words`
/// and its refusal of bad arguments (`missing`: what the language's library
/// says of a missing `text`), the command, and the guard over `rm -rf /`.
pub fn assert_template_installs_and_answers(lab: &Lab, folder: &str, name: &str, missing: &str) {
    let run = lab.zotbox(&["ext", "install", folder, "--yes"]);
    run.expect_code(0);
    // `tree` lists by name: the module comes first for a name before `e`.
    let mut installed = vec!["extension.json".to_owned(), format!("{name}.wasm")];
    installed.sort();
    assert_eq!(
        tree(&lab.user_dir().join(name))
            .into_keys()
            .collect::<Vec<_>>(),
        installed
    );
    let run = lab.zotbox(&["call", "count_words", r#"{"text": "one two three"}"#]);
    run.expect_code(0);
    assert_eq!(run.stdout, "3\n");
    for (args, problem) in [
        ("{}", missing),
        (r#"{"text": 3}"#, "`text` must be a string"),
    ] {
        let run = lab.zotbox(&["call", "count_words", args]);
        run.expect_code(3);
        assert_eq!(
            run.stdout,
            format!("invalid arguments for tool `count_words`: {problem}\n")
        );
    }
    let run = lab.zotbox(&["command", name, "Ada"]);
    run.expect_code(0);
    assert_eq!(run.stdout, format!("display: hello, Ada, from {name}\n"));
    let run = lab.zotbox(&["check", "bash", r#"{"command": "rm -rf /"}"#]);
    assert!(
        run.stdout
            .contains(&format!("{name}: `rm -rf /` is not run here")),
        "{run:#?}"
    );
}

/// The `.cwasm` files in `home`'s compile cache, sorted.
pub fn cache_entries(home: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(home.join("cache")) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    found.sort();
    found
}

/// Whether a compile-cache entry is well formed: wasmtime's artifact, then
/// a trailer of the format's magic and the BLAKE3 hash of the artifact.
pub fn entry_is_valid(bytes: &[u8]) -> bool {
    let Some(body) = bytes.len().checked_sub(12).filter(|body| *body > 0) else {
        return false;
    };
    let (artifact, trailer) = bytes.split_at(body);
    &trailer[..8] == b"ZOTBOXC3" && trailer[8..] == crc32fast::hash(artifact).to_le_bytes()
}

/// `artifact` under a cache trailer whose checksum matches it.
pub fn with_valid_trailer(mut artifact: Vec<u8>) -> Vec<u8> {
    let checksum = crc32fast::hash(&artifact);
    artifact.extend_from_slice(b"ZOTBOXC3");
    artifact.extend_from_slice(&checksum.to_le_bytes());
    artifact
}

/// Every entry under `dir` by relative path: a file's bytes, a symlink's
/// target (`-> target`), a folder or special file by its kind. Never opens
/// anything but regular files (a FIFO would block).
pub fn tree(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut found = std::collections::BTreeMap::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a folder entry").path();
            let key = path
                .strip_prefix(dir)
                .expect("under the root")
                .display()
                .to_string();
            let meta = std::fs::symlink_metadata(&path).expect("metadata");
            let value = if meta.is_symlink() {
                let target = std::fs::read_link(&path).expect("read link");
                format!("-> {}", target.display()).into_bytes()
            } else if meta.is_dir() {
                pending.push(path);
                b"folder".to_vec()
            } else if meta.is_file() {
                std::fs::read(&path).expect("read a file")
            } else {
                b"special".to_vec()
            };
            found.insert(key, value);
        }
    }
    found
}

/// Every file under `root` (links not followed) whose bytes hold `needle`:
/// for tests that a secret's value reached no log, audit line or cache.
pub fn files_holding(root: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                dirs.push(path);
            } else if kind.is_file()
                && std::fs::read(&path).is_ok_and(|bytes| {
                    bytes
                        .windows(needle.len())
                        .any(|window| window == needle.as_bytes())
                })
            {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}
