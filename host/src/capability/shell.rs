//! Shell commands: the `zot:host/shell` interface and data `shell` tools.
//!
//! Three separate pieces, composed by the host (grant check, then the guard
//! chain, then [`run`], then the audit log):
//!
//! - [`ShellGrant`] decides whether a command line matches the extension's
//!   declared patterns. A command that uses shell syntax the patterns cannot
//!   see through (operators, expansions, globbing, comments) is refused unless
//!   a pattern is exactly `**`, so what is matched is what `sh` runs.
//! - [`template::Template`] splits a data tool's command once at load, so
//!   its `{arg}` is one argv element wherever it stands and the program runs
//!   by `execve`; only templates that declare `"shell": true` run with
//!   `sh -c`, and there `{arg}` is a bare word, single-quoted by [`quote`].
//! - [`run`] executes a [`Rendered`] command in a scrubbed environment, in
//!   its own process group, under a timeout and an output cap.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use globset::{GlobBuilder, GlobMatcher};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::confine::{self, ConfineError, Jail};
use super::{Capability, CapabilityError, granted_list};

pub mod interrupt;
pub mod template;

pub use template::{Invocation, Rendered};

/// Default deadline of one command: 30 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default cap on each of stdout and stderr: 1 MiB.
pub const DEFAULT_MAX_OUTPUT: usize = 1024 * 1024;
/// The `PATH` a command runs with.
pub const SAFE_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The command patterns an extension may run.
///
/// Each pattern is a command line split like the shell does (quotes work):
/// the first word is the program, matched exactly; every other word matches
/// one argument: `*` any one argument, `**` (only as the last word) any
/// number of remaining arguments, other words as globs within one argument
/// (`*` does not cross `/`; `**` inside a word does). A pattern that is
/// exactly `**` allows any command line, shell syntax included. An empty
/// grant allows nothing.
#[derive(Debug, Clone, Default)]
pub struct ShellGrant {
    patterns: Vec<Pattern>,
    anything: bool,
}

#[derive(Debug, Clone)]
struct Pattern {
    declared: String,
    program: String,
    args: Vec<ArgPattern>,
    /// Ends in `**`: any number of further arguments.
    rest: bool,
}

#[derive(Debug, Clone)]
enum ArgPattern {
    /// `*`: exactly one argument, any.
    Any,
    /// A word with glob characters.
    Glob(GlobMatcher),
    /// A plain word.
    Literal(String),
}

impl ShellGrant {
    /// Parses the declared patterns, e.g. `git status`, `git diff **`, `ls *`.
    ///
    /// # Errors
    ///
    /// [`CapabilityError::Invalid`] for an empty pattern, unbalanced quotes,
    /// `**` anywhere but last, or a bad glob.
    pub fn new(patterns: &[String]) -> Result<Self, CapabilityError> {
        let mut grant = Self::default();
        for declared in patterns {
            let invalid = |problem: &str| {
                CapabilityError::Invalid(format!("shell pattern `{declared}` {problem}"))
            };
            let words =
                shell_words::split(declared).map_err(|_| invalid("has unbalanced quotes"))?;
            let Some((program, args)) = words.split_first() else {
                return Err(invalid("is empty"));
            };
            if words.len() == 1 && program == "**" {
                grant.anything = true;
                grant.patterns.push(Pattern {
                    declared: declared.clone(),
                    program: String::new(),
                    args: Vec::new(),
                    rest: true,
                });
                continue;
            }
            if program.contains(['*', '?', '[']) {
                return Err(invalid(
                    "has a glob in the program name; name the program exactly",
                ));
            }
            let mut rest = false;
            let mut compiled = Vec::new();
            for (index, arg) in args.iter().enumerate() {
                if arg == "**" {
                    if index + 1 != args.len() {
                        return Err(invalid("uses `**` before the last word"));
                    }
                    rest = true;
                } else if arg == "*" {
                    compiled.push(ArgPattern::Any);
                } else if arg.contains(['*', '?', '[']) {
                    let glob = GlobBuilder::new(arg)
                        .literal_separator(true)
                        .build()
                        .map_err(|err| {
                            invalid(&format!("has a bad glob `{arg}`: {}", err.kind()))
                        })?;
                    compiled.push(ArgPattern::Glob(glob.compile_matcher()));
                } else {
                    compiled.push(ArgPattern::Literal(arg.clone()));
                }
            }
            grant.patterns.push(Pattern {
                declared: declared.clone(),
                program: program.clone(),
                args: compiled,
                rest,
            });
        }
        Ok(grant)
    }

    /// A grant that allows nothing.
    pub fn none() -> Self {
        Self::default()
    }

    /// Checks a command line against the patterns.
    ///
    /// # Errors
    ///
    /// [`CapabilityError::Invalid`] for an empty command or unbalanced
    /// quotes; [`CapabilityError::Denied`] (`shell`) when it uses shell
    /// syntax outside quotes (and no pattern is `**`), or matches no pattern.
    pub fn allows(&self, command: &str) -> Result<(), CapabilityError> {
        if command.trim().is_empty() {
            return Err(CapabilityError::Invalid("the command is empty".to_owned()));
        }
        if self.anything {
            return Ok(());
        }
        if let Some(reason) = shell_syntax(command) {
            return Err(CapabilityError::denied(
                Capability::Shell,
                command,
                format!(
                    "{reason}; only a `**` pattern allows shell syntax (quote the word if it \
                     is meant literally)"
                ),
            ));
        }
        let words = shell_words::split(command).map_err(|_| {
            CapabilityError::Invalid(format!("cannot parse `{command}`: unbalanced quotes"))
        })?;
        if self.patterns.iter().any(|pattern| pattern.matches(&words)) {
            return Ok(());
        }
        Err(CapabilityError::denied(
            Capability::Shell,
            command,
            format!(
                "it matches no granted command pattern (granted: {})",
                granted_list(self.patterns.iter().map(|p| p.declared.as_str()))
            ),
        ))
    }
}

impl Pattern {
    fn matches(&self, words: &[String]) -> bool {
        let Some((program, args)) = words.split_first() else {
            return false;
        };
        if *program != self.program || args.len() < self.args.len() {
            return false;
        }
        if args.len() > self.args.len() && !self.rest {
            return false;
        }
        self.args
            .iter()
            .zip(args)
            .all(|(pattern, arg)| match pattern {
                ArgPattern::Any => true,
                ArgPattern::Glob(glob) => glob.is_match(arg),
                ArgPattern::Literal(literal) => literal == arg,
            })
    }
}

/// The first piece of shell syntax outside single quotes that would make
/// `sh` run something other than the words a pattern saw, if any.
fn shell_syntax(command: &str) -> Option<String> {
    #[derive(PartialEq)]
    enum State {
        Plain,
        Single,
        Double,
    }
    let mut state = State::Plain;
    let mut word_start = true;
    let mut previous = ' ';
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match state {
            State::Single => {
                if c == '\'' {
                    state = State::Plain;
                }
            }
            State::Double => match c {
                '"' => state = State::Plain,
                '\\' => {
                    chars.next();
                }
                '$' | '`' => {
                    return Some(format!("{} inside double quotes is an expansion", shown(c)));
                }
                _ => {}
            },
            State::Plain => {
                let at_start = word_start;
                let after_assignment = matches!(previous, '=' | ':');
                word_start = c == ' ' || c == '\t';
                previous = c;
                match c {
                    '\'' => state = State::Single,
                    '"' => state = State::Double,
                    '\\' => {
                        // An escaped character is literal; an escaped newline
                        // is a line continuation, which joins commands.
                        let escaped = chars.next();
                        if escaped == Some('\n') {
                            return Some("a newline outside quotes separates commands".to_owned());
                        }
                    }
                    '\n' | '\r' => {
                        return Some("a newline outside quotes separates commands".to_owned());
                    }
                    ';' | '&' | '|' | '<' | '>' | '(' | ')' => {
                        return Some(format!("`{c}` outside quotes is a shell operator"));
                    }
                    '$' | '`' => {
                        return Some(format!("{} outside quotes is an expansion", shown(c)));
                    }
                    '*' | '?' | '[' | '{' | '}' => {
                        return Some(format!(
                            "`{c}` outside quotes would be expanded by the shell"
                        ));
                    }
                    '~' if at_start || after_assignment => {
                        return Some(
                            "`~` at the start of a word (or after `=` or `:`) is an expansion"
                                .to_owned(),
                        );
                    }
                    '#' if at_start => {
                        return Some("`#` at the start of a word starts a comment".to_owned());
                    }
                    _ => {}
                }
            }
        }
    }
    None
}

/// A character for a message: in backticks, except the backtick itself.
fn shown(c: char) -> String {
    if c == '`' {
        "a backtick".to_owned()
    } else {
        format!("`{c}`")
    }
}

/// Quotes `arg` as one POSIX shell word: `'…'`, with each `'` written as `'\''`.
///
/// Whatever `arg` holds (`;`, `$(…)`, backticks, newlines, quotes), the
/// shell sees exactly one word with exactly these characters.
pub fn quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

/// Caps on one command; they keep a runaway command from holding the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShellLimits {
    /// The deadline; the whole process group is killed after it. Default 30 s.
    pub timeout: Duration,
    /// The most bytes kept of each of stdout and stderr; the rest is read
    /// and dropped so the command never blocks on a full pipe. Default 1 MiB.
    pub max_output: usize,
}

impl Default for ShellLimits {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            max_output: DEFAULT_MAX_OUTPUT,
        }
    }
}

/// What a finished command produced.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub struct Output {
    /// Its standard output, lossily decoded as UTF-8.
    pub stdout: String,
    /// Its standard error, lossily decoded as UTF-8.
    pub stderr: String,
    /// Its exit status; `None` when it was ended by a signal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Whether either stream was cut at the output cap.
    pub truncated: bool,
}

impl Rendered {
    /// A command line for `sh -c`, shown as it is (the `shell` capability).
    pub fn shell(command: impl Into<String>) -> Self {
        let command = command.into();
        Self {
            invocation: Invocation::Shell(command.clone()),
            shown: command,
            arg_paths: Vec::new(),
        }
    }
}

/// Runs `command` in `cwd` and waits for it: its [`Invocation::Shell`]
/// line with `sh -c`, or its [`Invocation::Exec`] argv by `execve`.
///
/// The command runs confined (see [`confine`]): the workspace `cwd`, the
/// system directories, no network unless `settings` grants it, read-only
/// control paths, in its own PID namespace. The environment is cleared and
/// set to `PATH` ([`SAFE_PATH`]), `LANG=C.UTF-8`, and `HOME` and `TMPDIR`
/// pointing at a private empty directory made for this run and removed
/// after it; stdin is `/dev/null`. The command also gets its own process
/// group: when it exits, or the deadline passes, the group (and with it the
/// PID namespace) is killed, so no descendant outlives it. This checks no
/// grant: the caller runs [`ShellGrant::allows`] and the guard chain first.
///
/// # Errors
///
/// [`CapabilityError::Invalid`] for an empty command or one with a NUL byte;
/// [`CapabilityError::Denied`] when the policy requires a protection this
/// kernel lacks; [`CapabilityError::Timeout`] when the deadline passes;
/// [`CapabilityError::Failed`] when the program cannot be started.
pub async fn run(
    command: &Rendered,
    cwd: &Path,
    limits: &ShellLimits,
    settings: &confine::Settings,
    control: &crate::capability::fs::ControlPaths,
) -> Result<Output, CapabilityError> {
    let shown = command.shown.as_str();

    let words: Vec<&str> = match &command.invocation {
        Invocation::Shell(line) => vec!["sh", "-c", line],
        Invocation::Exec(argv) => argv.iter().map(String::as_str).collect(),
    };
    let Some((program, args)) = words.split_first() else {
        return Err(CapabilityError::Invalid("the command is empty".to_owned()));
    };
    if program.is_empty()
        || matches!(&command.invocation, Invocation::Shell(line) if line.trim().is_empty())
    {
        return Err(CapabilityError::Invalid("the command is empty".to_owned()));
    }
    if words.iter().any(|word| word.contains('\0')) {
        return Err(CapabilityError::Invalid(format!(
            "command `{}` contains a NUL byte",
            shown.escape_default()
        )));
    }
    refuse_arg_through_a_link(command, cwd)?;
    let home = tempfile::Builder::new()
        .prefix("zotbox-home-")
        .tempdir()
        .map_err(|err| {
            CapabilityError::Failed(format!("cannot make a private home for `{shown}`: {err}"))
        })?;
    // Every control path in the workspace, at any depth, before the command
    // can add one (rule 6 of `confine`); walking a large workspace is not
    // done on a thread that answers intercepts.
    let workspace = cwd.to_owned();
    // And the control paths named by the caller that are missing (a file
    // git's configuration includes when it exists): bound when there.
    let named: Vec<PathBuf> = control
        .paths()
        .iter()
        .filter(|path| !path.secret && !path.path.is_empty())
        .map(|path| PathBuf::from(&path.path))
        .collect();
    let records = settings.records.clone();
    let before = off_the_runtime(shown, move || {
        // What a command left when its zotbox died mid-call is taken back
        // first, or this census would count it as there before.
        if let Some(records) = &records {
            take_back_abandoned(records, &workspace);
        }
        let home = crate::home::user_home();
        confine::Census::take(&workspace)
            .map(|census| census.watching(named).with_configured(home.as_deref()))
    })
    .await?;
    // The workspace's own control paths (`$ZOT_HOME`, an extension's folder,
    // nested repositories) are read-only, and `$ZOT_HOME` in it (which the
    // jail refuses by name) is covered: a command reads nothing there.
    let jail = Jail {
        workspace: Some(cwd.to_owned()),
        write: vec![home.path().to_owned()],
        network: settings.shell_network,
        read_only: before.nested().collect(),
        ..Jail::default()
    }
    .guarding(control);
    let confinement = jail.prepare(settings).map_err(|err| match err {
        ConfineError::Unavailable { .. } | ConfineError::CannotHide => {
            CapabilityError::denied(Capability::Shell, shown, err.to_string())
        }
        ConfineError::Prepare(_) => CapabilityError::Failed(format!("`{shown}`: {err}")),
    })?;
    let mut child = tokio::process::Command::new(program);
    child
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", SAFE_PATH)
        .env("HOME", home.path())
        .env("TMPDIR", home.path())
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // Killed with zotbox (its `SIGKILL`, a crash, a Ctrl-C that ends it):
    // the command's namespace goes with the process zotbox started, so no
    // part of the command outlives the call (rule 4 of `confine`).
    confine::die_with_parent(child.as_std_mut());
    confinement.install(child.as_std_mut());
    if interrupt::stopping() {
        return Err(CapabilityError::Failed(format!(
            "`{shown}` was not started: zotbox is stopping"
        )));
    }
    // Counted until its take-back is done: a zotbox told to stop waits.
    let _running = interrupt::Running::start();
    // Written down until the take-back below is done: should zotbox die
    // first, the next command in this workspace does it.
    let recorded = settings.records.as_deref().and_then(|records| {
        before
            .recorded(records, limits.timeout)
            .map_err(|err| {
                tracing::warn!(
                    "cannot write down the census of `{shown}` in `{}`: {err}; should zotbox \
                     die before the command ends, what it leaves is not taken back",
                    records.display()
                );
            })
            .ok()
    });
    let mut child = match child.spawn() {
        Ok(child) => child,
        Err(err) => {
            if let Some(recorded) = recorded {
                recorded.done();
            }
            return Err(CapabilityError::Failed(format!(
                "cannot start `{program}` for `{shown}`: {}",
                confinement.explain(&err)
            )));
        }
    };
    drop(confinement);
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(nix::unistd::Pid::from_raw);
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let cap = limits.max_output;
    let run = tokio::time::timeout(limits.timeout, async {
        let wait = async {
            let status = child.wait().await;
            // The group's other members would keep the pipes open; end them.
            kill_group(group);
            status
        };
        tokio::join!(read_capped(stdout, cap), read_capped(stderr, cap), wait)
    });
    // Told to stop (a Ctrl-C): killed now, and taken back before zotbox
    // exits.
    let finished = tokio::select! {
        finished = run => Some(finished),
        () = interrupt::requested() => None,
    };
    if !matches!(finished, Some(Ok(_))) {
        kill_group(group);
        // Reap it; SIGKILL makes this quick.
        let _ = child.wait().await;
    }
    // Every descendant is dead now (the PID namespace went with the group):
    // nothing can recreate what is taken back.
    let taken_back = off_the_runtime(shown, move || before.take_back()).await;
    // A workspace too large to look at again keeps its record: the first
    // command once it is smaller takes back what this one left.
    if let (Some(recorded), Ok(_)) = (recorded, &taken_back) {
        recorded.done();
    }
    let left = taken_back.map_err(|err| match err {
        // The command made the workspace too large to look at again
        // (or unreadable): what it left where the look did not reach
        // was not set aside, and the user must know.
        CapabilityError::Denied {
            capability,
            subject,
            reason,
        } => CapabilityError::Denied {
            capability,
            subject,
            reason: format!(
                "{reason}; the command ran, and a control path it may have made (a `.git`, \
                 a `.zot`, a folder git takes for a repository) was not looked for \
                 afterwards: look for one before you run git or zot in the workspace"
            ),
        },
        other => other,
    })?;
    if !left.is_empty() {
        return Err(CapabilityError::denied(
            Capability::Shell,
            shown,
            left_behind(&left),
        ));
    }
    let Some(finished) = finished else {
        return Err(CapabilityError::Failed(format!(
            "`{shown}` was stopped: zotbox was told to stop"
        )));
    };
    match finished {
        Ok(((stdout, out_cut), (stderr, err_cut), status)) => {
            let status = status.map_err(|err| {
                CapabilityError::Failed(format!("cannot wait for `{shown}`: {err}"))
            })?;
            Ok(Output {
                stdout: String::from_utf8_lossy(&stdout).into_owned(),
                stderr: String::from_utf8_lossy(&stderr).into_owned(),
                exit_code: status.code(),
                truncated: out_cut || err_cut,
            })
        }
        Err(_) => Err(CapabilityError::Timeout {
            what: format!("command `{shown}`"),
            ms: u64::try_from(limits.timeout.as_millis()).unwrap_or(u64::MAX),
        }),
    }
}

/// `look` (a census of the workspace) on a blocking thread; a workspace
/// that cannot be checked refuses command `shown`.
async fn off_the_runtime<T: Send + 'static>(
    shown: &str,
    look: impl FnOnce() -> Result<T, confine::CensusError> + Send + 'static,
) -> Result<T, CapabilityError> {
    tokio::task::spawn_blocking(look)
        .await
        .map_err(|err| CapabilityError::Failed(format!("`{shown}`: {err}")))?
        .map_err(|err| CapabilityError::denied(Capability::Shell, shown, err.to_string()))
}

/// Takes back what the confined commands recorded in `records` whose
/// zotbox died left in `workspace` ([`confine::Census::take_back_abandoned`]),
/// with a warning for each.
pub fn take_back_abandoned(records: &Path, workspace: &Path) {
    for left in confine::Census::take_back_abandoned(records, workspace) {
        tracing::warn!(
            "an earlier command in `{}` ended with its zotbox and left {}: set aside now, \
             renamed with `{}` added",
            workspace.display(),
            left.created.join(", "),
            confine::SET_ASIDE
        );
    }
}

/// Rule 6 of [`template`], where the command runs: a path the argument
/// lands in that leads out of the workspace through a link in it
/// (`docs/etc` → `/etc`) is refused as an absolute one is.
fn refuse_arg_through_a_link(command: &Rendered, cwd: &Path) -> Result<(), CapabilityError> {
    let Ok(workspace) = cwd.canonicalize() else {
        return Ok(());
    };
    for path in &command.arg_paths {
        // The deepest part of it that exists, as the kernel would reach it.
        let joined = cwd.join(path);
        let Some(real) = joined.ancestors().find_map(|part| part.canonicalize().ok()) else {
            continue;
        };
        if !real.starts_with(&workspace) {
            return Err(CapabilityError::denied(
                Capability::Shell,
                &command.shown,
                format!(
                    "the argument makes `{}` a path that leads out of the workspace through a \
                     link (to `{}`); a tool's argument names only the workspace's files",
                    crate::text::shown(path),
                    crate::text::shown(&real.display().to_string())
                ),
            ));
        }
    }
    Ok(())
}

/// Why a command that left control paths behind is refused.
fn left_behind(left: &confine::Left) -> String {
    let mut reasons = Vec::new();
    if !left.created.is_empty() {
        reasons.push(format!(
            "it created the control path {} (which decides what runs); no command may write \
             it, so it was renamed with `{}` added, beside it",
            left.created.join(", "),
            confine::SET_ASIDE
        ));
    }
    if !left.reopened.is_empty() {
        reasons.push(format!(
            "it closed {} to you (git can still enter such a folder), which was opened again \
             for you to look in",
            left.reopened.join(", ")
        ));
    }
    if !left.unreadable.is_empty() {
        reasons.push(format!(
            "{} cannot be read, so it cannot be checked for control paths a command may have \
             created there; make it readable again, or remove it",
            left.unreadable.join(", ")
        ));
    }
    reasons.join("; ")
}

fn kill_group(group: Option<nix::unistd::Pid>) {
    if let Some(group) = group {
        // ESRCH (nobody left) is the normal case after a clean exit.
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    }
}

/// Reads a stream to its end, keeping at most `cap` bytes; returns whether
/// anything was dropped. Read errors end the stream.
async fn read_capped<R: AsyncRead + Unpin>(stream: Option<R>, cap: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut truncated = false;
    let Some(mut stream) = stream else {
        return (kept, truncated);
    };
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                let room = cap.saturating_sub(kept.len());
                let chunk = buffer.get(..read).unwrap_or_default();
                if chunk.len() > room {
                    truncated = true;
                }
                kept.extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
            }
        }
    }
    (kept, truncated)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn sh(command: &str) -> Rendered {
        Rendered::shell(command)
    }

    /// [`super::run`] under the default policy: confined, no network.
    async fn run(
        command: &Rendered,
        cwd: &Path,
        limits: &ShellLimits,
    ) -> Result<Output, CapabilityError> {
        let control = crate::capability::fs::ControlPaths::default();
        super::run(
            command,
            cwd,
            limits,
            &confine::Settings::default(),
            &control,
        )
        .await
    }

    fn grant(patterns: &[&str]) -> ShellGrant {
        ShellGrant::new(&patterns.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn grant_matching() {
        let grant = grant(&[
            "git status",
            "git diff **",
            "ls *",
            "cargo test **",
            "cat docs/*.md",
            "echo 'hello world'",
        ]);
        let cases = [
            // Exact pattern.
            ("git status", true),
            // Extra arguments need `*` or `**`.
            ("git status --short", false),
            // `**` takes any number of arguments, none included.
            ("git diff", true),
            ("git diff HEAD~1 -- src/main.rs", true),
            // `*` is exactly one argument.
            ("ls src", true),
            ("ls", false),
            ("ls src tests", false),
            // Quoted words are one argument each.
            ("ls 'my folder'", true),
            // Globs within one argument; `*` does not cross `/`.
            ("cat docs/guide.md", true),
            ("cat docs/guide.txt", false),
            ("cat docs/a/b.md", false),
            // Attack: a different program.
            ("rm -rf /", false),
            // Attack: a program path that only ends like a granted one.
            ("/tmp/evil/git status", false),
            // Quoting in the pattern is honoured.
            ("echo 'hello world'", true),
            ("echo hello world", false),
            // Attack: an environment assignment before the program.
            ("GIT_DIR=/etc git status", false),
        ];
        for (command, allowed) in cases {
            let result = grant.allows(command);
            assert_eq!(result.is_ok(), allowed, "{command}: {result:?}");
            if let Err(err) = result {
                assert!(
                    matches!(&err, CapabilityError::Denied { capability: Capability::Shell, reason, .. }
                        if reason.starts_with("it matches no granted command pattern (granted: git status, ")),
                    "{command}: {err}"
                );
            }
        }
    }

    #[test]
    fn shell_syntax_is_refused_unless_anything_is_granted() {
        let narrow = grant(&["git **", "ls *"]);
        let cases = [
            // Attack: command chaining.
            (
                "git status; rm -rf ~",
                "`;` outside quotes is a shell operator",
            ),
            (
                "git status && curl evil",
                "`&` outside quotes is a shell operator",
            ),
            ("git log | sh", "`|` outside quotes is a shell operator"),
            // Attack: redirections overwrite files.
            (
                "git log > ~/.bashrc",
                "`>` outside quotes is a shell operator",
            ),
            ("git apply < /etc/passwd", "`<` outside quotes"),
            // Attack: command substitution and variables.
            (
                "git log $(touch pwned)",
                "`$` outside quotes is an expansion",
            ),
            (
                "git log `touch pwned`",
                "a backtick outside quotes is an expansion",
            ),
            (
                "git log \"`touch pwned`\"",
                "a backtick inside double quotes is an expansion",
            ),
            (
                "git log \"$(touch pwned)\"",
                "`$` inside double quotes is an expansion",
            ),
            ("git log $HOME", "`$` outside quotes"),
            // Attack: a subshell.
            ("git log (rm -rf /)", "`(` outside quotes"),
            // Attack: a newline is a command separator.
            (
                "git status\nrm -rf /",
                "a newline outside quotes separates commands",
            ),
            // Attack: globbing turns one `*` word into many arguments.
            ("ls *", "`*` outside quotes would be expanded by the shell"),
            ("ls ?", "`?` outside quotes"),
            // Attack: tilde expansion and comments change the words.
            (
                "ls ~root",
                "`~` at the start of a word (or after `=` or `:`) is an expansion",
            ),
            ("ls --dir=~root/x", "`~` at the start of a word"),
            (
                "git status #--force",
                "`#` at the start of a word starts a comment",
            ),
        ];
        for (command, words) in cases {
            match narrow.allows(command) {
                Err(CapabilityError::Denied {
                    capability: Capability::Shell,
                    subject,
                    reason,
                }) => {
                    assert_eq!(subject, command);
                    assert!(
                        reason.contains(words),
                        "{command:?}: `{reason}` lacks `{words}`"
                    );
                    assert!(reason.contains("only a `**` pattern allows shell syntax"));
                }
                other => panic!("{command:?}: {other:?}"),
            }
            // A `**` pattern allows anything.
            assert!(grant(&["**"]).allows(command).is_ok(), "{command:?}");
        }
        // Inside single quotes all of it is literal.
        assert!(narrow.allows("ls '; rm -rf ~ $(x) `y` * #'").is_ok());
        assert!(narrow.allows(r"ls a\;b").is_ok());
        // Empty commands and broken quoting are malformed, not refused.
        assert!(matches!(
            narrow.allows("  "),
            Err(CapabilityError::Invalid(_))
        ));
        assert!(matches!(
            narrow.allows("ls 'open"),
            Err(CapabilityError::Invalid(_))
        ));
        // An empty grant allows nothing.
        assert!(ShellGrant::none().allows("ls x").is_err());
    }

    #[test]
    fn bad_patterns_are_invalid() {
        let cases = [
            ("", "is empty"),
            ("git 'status", "unbalanced quotes"),
            ("git ** status", "uses `**` before the last word"),
            ("g* status", "glob in the program name"),
        ];
        for (pattern, words) in cases {
            match ShellGrant::new(&[pattern.to_owned()]) {
                Err(CapabilityError::Invalid(message)) => {
                    assert!(message.contains(words), "{pattern}: `{message}`");
                }
                other => panic!("{pattern}: {other:?}"),
            }
        }
    }

    #[test]
    fn quote_makes_one_word() {
        assert_eq!(quote("abc"), "'abc'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("it's"), r"'it'\''s'");
        let shell = template::Template::parse("grep -n {arg} {arg}", true).unwrap();
        assert_eq!(
            shell.render(Some("a b")).unwrap().shown,
            "grep -n 'a b' 'a b'"
        );
        // A quoted argument passes a narrow grant as one word.
        let ls = template::Template::parse("ls {arg}", true).unwrap();
        assert_eq!(ls.render(None).unwrap().shown, "ls ''");
        let rendered = ls.render(Some("; rm -rf ~")).unwrap();
        assert!(grant(&["ls *"]).allows(&rendered.shown).is_ok());
    }

    #[tokio::test]
    async fn arguments_cannot_become_commands_in_either_kind_of_template() {
        let dir = tempfile::tempdir().unwrap();
        let attacks = [
            // Attack: a second command after `;`.
            "; rm -rf ~",
            // Attack: command substitution, both spellings.
            "$(touch pwned)",
            "`touch pwned`",
            // Attack: a newline separating commands.
            "x\ntouch pwned",
            // Attack: closing the quote from inside.
            "'; touch pwned; echo '",
            r"\'; touch pwned #",
            // Attack: double quotes and expansions inside them.
            "\"$(touch pwned)\"",
            // Attack: `{arg}` inside the argument is not expanded again.
            "{arg}; touch pwned",
            // Variables, globs and non-ASCII stay literal.
            "$HOME * ? ~ x",
            "ü 🙂 %s %n",
            "",
        ];
        for shell in [false, true] {
            let template = template::Template::parse("printf %s {arg}", shell).unwrap();
            for attack in attacks {
                let command = template.render(Some(attack)).unwrap();
                let output = run(&command, dir.path(), &ShellLimits::default())
                    .await
                    .unwrap();
                assert_eq!(output.stdout, attack, "{command:?}");
                assert_eq!(output.exit_code, Some(0), "{command:?}: {}", output.stderr);
                assert!(
                    !dir.path().join("pwned").exists(),
                    "{command:?} ran a command"
                );
            }
        }
    }

    #[tokio::test]
    async fn the_environment_is_scrubbed() {
        let dir = tempfile::tempdir().unwrap();
        let output = run(&sh("env"), dir.path(), &ShellLimits::default())
            .await
            .unwrap();
        let mut names: Vec<&str> = output
            .stdout
            .lines()
            .filter_map(|line| line.split_once('=').map(|(name, _)| name))
            .collect();
        names.sort_unstable();
        // `sh` itself adds PWD (and some shells SHLVL, `_`); nothing else appears.
        names.retain(|name| !matches!(*name, "PWD" | "OLDPWD" | "SHLVL" | "_"));
        assert_eq!(
            names,
            ["HOME", "LANG", "PATH", "TMPDIR"],
            "{}",
            output.stdout
        );
        assert!(output.stdout.contains(&format!("PATH={SAFE_PATH}\n")));
        // Every variable of this process (cargo sets many) stays out.
        for (name, _) in std::env::vars() {
            if !matches!(
                name.as_str(),
                "HOME" | "LANG" | "PATH" | "PWD" | "OLDPWD" | "SHLVL" | "_" | "TMPDIR"
            ) {
                let prefix = format!("{name}=");
                assert!(
                    !output.stdout.lines().any(|line| line.starts_with(&prefix)),
                    "{name} leaked"
                );
            }
        }
    }

    #[tokio::test]
    async fn home_and_tmpdir_are_a_private_empty_folder_removed_after_the_run() {
        let dir = tempfile::tempdir().unwrap();
        // Attack: a repository's tracked `.gitconfig` read as git's global config.
        std::fs::write(
            dir.path().join(".gitconfig"),
            "[core]\n\tfsmonitor = touch pwned\n",
        )
        .unwrap();
        let output = run(
            &sh("echo \"$HOME\"; echo \"$TMPDIR\"; ls -A \"$HOME\"; touch \"$HOME/x\""),
            dir.path(),
            &ShellLimits::default(),
        )
        .await
        .unwrap();
        let lines: Vec<&str> = output.stdout.lines().collect();
        assert_eq!(
            lines.len(),
            2,
            "the private home was not empty: {}",
            output.stdout
        );
        assert_eq!(lines[0], lines[1]);
        let home = Path::new(lines[0]);
        assert_ne!(home, dir.path());
        assert!(!home.starts_with(dir.path()), "{}", home.display());
        assert_eq!(output.exit_code, Some(0), "{}", output.stderr);
        assert!(!home.exists(), "the private home outlived the run");
    }

    #[tokio::test]
    async fn a_control_path_a_command_creates_is_taken_back_and_the_call_refused() {
        let cases = [
            // Attack: an extension zot itself would start, natively.
            (
                "mkdir -p .zot/extensions/x && echo '{}' > .zot/extensions/x/extension.json",
                "`.zot/`",
            ),
            // Attack: a gitfile pointing at a config the command wrote.
            (
                "mkdir evil && printf '[core]\\n\\tfsmonitor = touch pwned\\n' > evil/config \
                 && printf 'gitdir: evil\\n' > .git",
                "`.git`",
            ),
            // A link counts too, and is set aside as a link.
            ("ln -s /tmp .shiro", "`.shiro`"),
            // Attack: a repository below the root, whose `git status` (a
            // shell prompt's, zot's own `bash`) runs its fsmonitor line.
            (
                "git init -q sub/deep && git -C sub/deep config core.fsmonitor 'touch pwned'",
                "`sub/deep/.git/`",
            ),
            // Attack: an extension zot runs when started in `docs/`, and a
            // folder name that would move the cursor.
            (
                "mkdir -p docs/.zot/extensions/x \"$(printf 'a\\033[2Jb')/.SHIRO\"",
                "`a\\u{1b}[2Jb/.SHIRO/`, `docs/.zot/`",
            ),
        ];
        for (command, created) in cases {
            let dir = tempfile::tempdir().unwrap();
            let err = run(&sh(command), dir.path(), &ShellLimits::default())
                .await
                .err();
            assert_eq!(
                err,
                Some(CapabilityError::denied(
                    Capability::Shell,
                    command,
                    format!(
                        "it created the control path {created} (which decides what runs); no \
                         command may write it, so it was renamed with `.refused-by-zotbox` \
                         added, beside it"
                    ),
                )),
                "{command}"
            );
            for name in confine::CONTROL_PATHS {
                assert!(
                    std::fs::symlink_metadata(dir.path().join(name)).is_err(),
                    "{command}: `{name}` is still there"
                );
            }
            // What is left is set aside (a repository still, and so read-only
            // to later commands, under a name git does not look for).
            let census = confine::Census::take(dir.path()).unwrap();
            assert!(
                census
                    .nested()
                    .all(|path| path.to_string_lossy().ends_with(confine::SET_ASIDE)),
                "{command}: {census:?}"
            );
            // Set aside, not lost: it could have been the user's own.
            let first = created.split(", ").next().unwrap().trim_matches('`');
            let aside = format!("{}.refused-by-zotbox", first.trim_end_matches('/'));
            let aside = aside.replace("\\u{1b}", "\u{1b}");
            assert!(
                std::fs::symlink_metadata(dir.path().join(&aside)).is_ok(),
                "{command}: no `{aside}`"
            );
        }
        // A control path that existed before is left alone (and read-only).
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".zot")).unwrap();
        let output = run(&sh("ls -A"), dir.path(), &ShellLimits::default())
            .await
            .unwrap();
        assert_eq!(output.stdout, ".zot\n");
        assert!(dir.path().join(".zot").is_dir());
    }

    #[tokio::test]
    async fn a_repository_a_git_file_points_to_inside_the_workspace_is_read_only() {
        // `git init --separate-git-dir` and worktrees: `.git` is a file
        // naming the repository's folder, which git reads as it would
        // `.git/`. Attack: the fsmonitor line written there instead.
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        for (gitfile, pointer, store) in [
            (".git", "gitdir: store", "store"),
            ("sub/.git", "gitdir: ../deps/store2", "deps/store2"),
        ] {
            std::fs::create_dir_all(ws.join(store)).unwrap();
            std::fs::write(ws.join(store).join("config"), "[core]\n").unwrap();
            std::fs::create_dir_all(ws.join(gitfile).parent().unwrap()).unwrap();
            std::fs::write(ws.join(gitfile), format!("{pointer}\n")).unwrap();
        }
        // A linked worktree's folder (`HEAD` and a `commondir`) sends git
        // to its common folder for `config`.
        std::fs::create_dir_all(ws.join("common")).unwrap();
        std::fs::write(ws.join("common/config"), "[core]\n").unwrap();
        std::fs::create_dir_all(ws.join("linked")).unwrap();
        std::fs::write(ws.join("linked/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(ws.join("linked/commondir"), "../common\n").unwrap();
        let command = "for config in store/config deps/store2/config common/config; do \
                       printf '\\tfsmonitor = touch pwned\\n' >> $config; done; touch deps/ok";
        let output = run(&sh(command), ws, &ShellLimits::default())
            .await
            .unwrap();
        assert_eq!(
            output.stderr.matches("Read-only file system").count(),
            3,
            "{}",
            output.stderr
        );
        for store in ["store", "deps/store2", "common"] {
            assert_eq!(
                std::fs::read_to_string(ws.join(store).join("config")).unwrap(),
                "[core]\n"
            );
        }
        // Control: beside the repository, the workspace is writable.
        assert!(ws.join("deps/ok").exists());
    }

    #[tokio::test]
    async fn a_bare_repository_is_read_only_and_one_a_command_makes_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let made = std::process::Command::new("git")
            .args(["init", "-q", "--bare", "fixtures/remote.git"])
            .current_dir(ws)
            .status()
            .unwrap();
        assert!(made.success());
        // Attack: a hook git runs when the user pushes to it.
        let command = "printf 'touch pwned' > fixtures/remote.git/hooks/post-receive; echo done";
        let output = run(&sh(command), ws, &ShellLimits::default())
            .await
            .unwrap();
        assert!(
            output.stderr.contains("Read-only file system"),
            "{}",
            output.stderr
        );
        assert!(!ws.join("fixtures/remote.git/hooks/post-receive").exists());
        // Attack: a repository of its own, under any name.
        let command = "git init -q --bare made.git";
        let refused = run(&sh(command), ws, &ShellLimits::default()).await;
        assert_eq!(
            refused.err(),
            Some(CapabilityError::denied(
                Capability::Shell,
                command,
                "it created the control path `made.git/HEAD` (which decides what runs); no \
                 command may write it, so it was renamed with `.refused-by-zotbox` added, beside \
                 it"
            ))
        );
        // What made it a repository is set aside; the rest stays, inert.
        assert!(ws.join("made.git/HEAD.refused-by-zotbox").is_file());
        assert!(ws.join("made.git/config").is_file());
    }

    #[tokio::test]
    async fn a_nested_repository_is_read_only_and_a_command_that_hides_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::create_dir_all(ws.join("vendor/lib/.git")).unwrap();
        std::fs::write(ws.join("vendor/lib/.git/config"), "[core]\n").unwrap();
        std::fs::create_dir_all(ws.join("docs/.zot")).unwrap();
        // Attack: the fsmonitor line in a repository that was already there.
        let command = "printf '\\tfsmonitor = touch pwned\\n' >> vendor/lib/.git/config; \
                       touch docs/.zot/x; echo done";
        let output = run(&sh(command), ws, &ShellLimits::default())
            .await
            .unwrap();
        assert_eq!(output.stdout, "done\n");
        assert!(
            output.stderr.contains("Read-only file system"),
            "{}",
            output.stderr
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("vendor/lib/.git/config")).unwrap(),
            "[core]\n"
        );
        assert!(!ws.join("docs/.zot/x").exists());
        // Control: the rest of the nested project is the workspace's.
        run(&sh("touch vendor/lib/new"), ws, &ShellLimits::default())
            .await
            .unwrap();
        assert!(ws.join("vendor/lib/new").exists());
        // Attack: a repository hidden in a folder the census cannot read.
        let command = "mkdir -p hidden/.git && chmod 0 hidden";
        let refused = run(&sh(command), ws, &ShellLimits::default()).await;
        std::fs::set_permissions(
            ws.join("hidden"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        // As root the folder is read anyway, and the `.git` found in it.
        let why = if nix::unistd::geteuid().is_root() {
            "it created the control path `hidden/.git/` (which decides what runs); no command \
             may write it, so it was renamed with `.refused-by-zotbox` added, beside it"
        } else {
            "`hidden/` cannot be read, so it cannot be checked for control paths a command may \
             have created there; make it readable again, or remove it"
        };
        assert_eq!(
            refused.err(),
            Some(CapabilityError::denied(Capability::Shell, command, why))
        );
    }

    #[tokio::test]
    async fn what_git_s_configuration_names_is_read_only_and_set_aside_nested_repositories_too() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::create_dir_all(ws.join("vendor/lib/.git")).unwrap();
        std::fs::create_dir_all(ws.join("vendor/lib/.husky")).unwrap();
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::create_dir_all(ws.join(".githooks")).unwrap();
        // The workspace's own, read for each command (here no control
        // paths are given at all, as if it changed after they were found).
        std::fs::write(ws.join(".git/config"), "[core]\n\thooksPath = .githooks\n").unwrap();
        std::fs::write(
            ws.join("vendor/lib/.git/config"),
            "[core]\n\thooksPath = .husky\n[include]\n\tpath = ../extra.gitconfig\n",
        )
        .unwrap();
        // Attack: the hook `git commit` in `vendor/lib/` runs, and the
        // configuration it includes once it exists.
        let command = "echo pwned > .githooks/pre-commit; \
                       echo pwned > vendor/lib/.husky/pre-commit; \
                       printf '[core]\\n\\tfsmonitor = ./x\\n' > vendor/lib/extra.gitconfig; \
                       echo done";
        let refused = run(&sh(command), ws, &ShellLimits::default()).await;
        assert_eq!(
            refused.err(),
            Some(CapabilityError::denied(
                Capability::Shell,
                command,
                "it created the control path `vendor/lib/extra.gitconfig` (which decides what \
                 runs); no command may write it, so it was renamed with `.refused-by-zotbox` \
                 added, beside it"
            ))
        );
        assert!(!ws.join(".githooks/pre-commit").exists());
        assert!(!ws.join("vendor/lib/.husky/pre-commit").exists());
        assert!(!ws.join("vendor/lib/extra.gitconfig").exists());
        assert!(
            ws.join("vendor/lib/extra.gitconfig.refused-by-zotbox")
                .exists()
        );
        // Control: the rest of the nested working tree is the workspace's.
        run(&sh("touch vendor/lib/new"), ws, &ShellLimits::default())
            .await
            .unwrap();
        assert!(ws.join("vendor/lib/new").exists());
    }

    /// Runs in a child process with a secret in its environment (see below).
    #[tokio::test]
    #[ignore = "run by `a_secret_in_the_host_environment_does_not_leak` in a child process"]
    async fn secret_env_child() {
        let dir = tempfile::tempdir().unwrap();
        let output = run(
            &sh("env; echo \"[$ZOTBOX_TEST_SECRET]\""),
            dir.path(),
            &ShellLimits::default(),
        )
        .await
        .unwrap();
        assert!(!output.stdout.contains("hunter2"), "{}", output.stdout);
        assert!(output.stdout.contains("[]"), "{}", output.stdout);
    }

    #[test]
    fn a_secret_in_the_host_environment_does_not_leak() {
        // Attack: a token in the host's environment read by a command.
        // Setting variables in this process is unsafe under the 2024 edition,
        // so a child run of this test binary gets the secret.
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "capability::shell::tests::secret_env_child",
                "--ignored",
            ])
            .env("ZOTBOX_TEST_SECRET", "hunter2")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Whether a process is gone (or a zombie nobody reaped yet).
    fn is_dead(pid: &str) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        }
    }

    #[tokio::test]
    async fn the_timeout_kills_every_descendant_setsid_included() {
        let dir = tempfile::tempdir().unwrap();
        let limits = ShellLimits {
            timeout: Duration::from_millis(1000),
            ..ShellLimits::default()
        };
        // Attack: a command that never ends, with a background child in a
        // session of its own (`/proc` is the host's, so it names its host pid).
        let command = "setsid sh -c 'readlink /proc/self > bg.pid; exec sleep 30' & sleep 30";
        let started = Instant::now();
        let result = run(&sh(command), dir.path(), &limits).await;
        assert_eq!(
            result,
            Err(CapabilityError::Timeout {
                what: format!("command `{command}`"),
                ms: 1000
            })
        );
        assert!(started.elapsed() < Duration::from_secs(10));
        let pid = std::fs::read_to_string(dir.path().join("bg.pid")).unwrap();
        let pid = pid.trim();
        let deadline = Instant::now() + Duration::from_secs(3);
        while !is_dead(pid) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(is_dead(pid), "background child {pid} survived");
        // Background children also end when the command exits on its own,
        // instead of holding the output pipes open until the deadline, and
        // `setsid` does not save them.
        let started = Instant::now();
        let output = run(
            &sh("setsid sh -c 'sleep 1; touch pwned' & echo done"),
            dir.path(),
            &ShellLimits::default(),
        )
        .await
        .unwrap();
        assert_eq!(output.stdout, "done\n");
        assert!(started.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(
            !dir.path().join("pwned").exists(),
            "a detached child survived"
        );
    }

    #[tokio::test]
    async fn output_is_capped_and_exit_codes_reported() {
        let dir = tempfile::tempdir().unwrap();
        let limits = ShellLimits {
            max_output: 1000,
            ..ShellLimits::default()
        };
        // Attack: a flood of output on both streams; the command still finishes.
        let output = run(
            &sh("head -c 1000000 /dev/zero | tr '\\0' x; head -c 5000 /dev/zero >&2"),
            dir.path(),
            &limits,
        )
        .await
        .unwrap();
        assert_eq!(output.stdout, "x".repeat(1000));
        assert_eq!(output.stderr.len(), 1000);
        assert!(output.truncated);
        assert_eq!(output.exit_code, Some(0));
        // Within the cap nothing is marked.
        let output = run(&sh("echo hi; exit 3"), dir.path(), &limits)
            .await
            .unwrap();
        assert_eq!(
            (output.stdout.as_str(), output.exit_code, output.truncated),
            ("hi\n", Some(3), false)
        );
        // Killed by a signal: no exit code.
        let output = run(&sh("kill -9 $$"), dir.path(), &limits).await.unwrap();
        assert_eq!(output.exit_code, None);
        // Stdin is empty, not the host's.
        let output = run(&sh("cat"), dir.path(), &limits).await.unwrap();
        assert_eq!(output.stdout, "");
        // Malformed commands.
        assert!(matches!(
            run(&sh(" "), dir.path(), &limits).await,
            Err(CapabilityError::Invalid(_))
        ));
        assert!(matches!(
            run(&sh("echo a\0b"), dir.path(), &limits).await,
            Err(CapabilityError::Invalid(_))
        ));
    }
}
