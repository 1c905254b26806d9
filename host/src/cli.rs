//! The `zotbox` command line: raw flags parsed by clap, one file per command.

mod approve;
mod call;
mod catalog;
mod check;
mod command;
mod completions;
mod demo;
mod doctor;
mod ext;
mod host;
mod list;
mod man;
mod new;
mod output;
mod policy;
mod publish;
mod run;
mod secret;
mod serve;
mod setup;
mod skills;
mod source;
mod trust;

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};

use zotbox::Host;
use zotbox::home::ZotHome;

/// Exit status: success.
pub const EXIT_OK: u8 = 0;
/// Exit status: an error (bad input, a failed load or call).
pub const EXIT_ERROR: u8 = 1;
/// Exit status: the request was refused (a tool answered `is_error`, a
/// command answered with `error`, the guard chain blocked).
pub const EXIT_REFUSED: u8 = 3;

const AFTER_HELP: &str = "\
Exit status:
  0  success
  1  error: bad input, an extension that failed to load, a failed call
  2  usage error (unknown flag or command)
  3  refused: the tool answered is_error, the command answered an error,
     or the guard chain blocked the call

Environment:
  ZOT_HOME        zot's home (default $XDG_STATE_HOME/zot, else ~/.local/state/zot)
  ZOTBOX_LOG      log filter for zotbox's own diagnostics on stderr (default `warn`)
  ZOTBOX_SYSTEM_POLICY
                  the system-wide policy file (default /etc/zotbox/policy.json)
  ZOTBOX_STANDALONE=1
                  `zotbox run` hosts its extension itself, not in the shared host
  ZOTBOX_HOST_IDLE
                  seconds the shared host stays up with no extension (default 60)

Files:
  $ZOT_HOME/policy.json          the user's policy (can only narrow the system one)
  $ZOT_HOME/trust.json           the workspaces you trusted (`zotbox trust`)
  $ZOT_HOME/zotbox.lock          what each install came from, checked at every start
  $ZOT_HOME/secrets.json         your secrets (`zotbox secret`), mode 0600
  $ZOT_HOME/logs/ext-<name>.log  each extension's stderr
  $ZOT_HOME/logs/audit.jsonl     every capability use and guard decision
  $ZOT_HOME/logs/zotbox-host.log the shared host's own diagnostics";

/// A sandboxed plugin host for zot extensions.
///
/// zotbox runs zot extensions — WebAssembly guests, native subprocesses and
/// data files — behind one capability layer. It reads the same folders as zot:
/// `--ext` paths first, then `<workspace>/.zot/extensions/`, then
/// `$ZOT_HOME/extensions/`.
#[derive(Debug, Parser)]
#[command(name = "zotbox", version, after_help = AFTER_HELP)]
pub struct Cli {
    /// The project root: where `.zot/` is searched and what extensions see as cwd.
    #[arg(long, global = true, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// zot's home folder [default: $ZOT_HOME, else $XDG_STATE_HOME/zot, else ~/.local/state/zot].
    #[arg(long, global = true, value_name = "DIR")]
    zot_home: Option<PathBuf>,
    /// Load the extension at PATH (a folder or its extension.json) before
    /// discovered ones. Repeatable.
    #[arg(long = "ext", short = 'e', global = true, value_name = "PATH")]
    ext: Vec<PathBuf>,
    /// Machine output: one JSON object per line.
    #[arg(long, global = true)]
    json: bool,
    /// More diagnostics on stderr (-v info, -vv debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// List extensions: state, commands, tools, subscriptions and load errors
    /// (exit status 1 when one failed to load or start).
    List(list::Args),
    /// Call a tool (through the guard chain) and print its result.
    Call(call::Args),
    /// Run a slash command and print its response.
    Command(command::Args),
    /// Ask the tool_call guard chain about a call without running it.
    Check(check::Args),
    /// Host the extension in DIR and bridge it to zot on stdio (zot's `exec`
    /// for a sandboxed extension).
    Run(run::Args),
    /// Serve data tools, refusal plugins and skills to zot as one extension.
    Serve(serve::Args),
    /// The shared host `zotbox run` relays to: status, stop, serve.
    #[command(subcommand)]
    Host(host::Command),
    /// Register `zotbox serve` in $ZOT_HOME/extensions/zotbox (or --remove it).
    Setup(setup::Args),
    /// Approve a data tool whose manifest says `autoApprove: false`.
    Approve(approve::Args),
    /// Review what the workspace brings (extensions, data tools, plugins,
    /// skills) and trust it as it is now, or --revoke, or --list.
    Trust(trust::Args),
    /// Set, list or remove the secrets extensions use without reading them.
    #[command(subcommand)]
    Secret(secret::Command),
    /// Show the policy in force, or explain one extension's grant.
    #[command(subcommand)]
    Policy(policy::Command),
    /// List the Markdown skills, or print one.
    #[command(subcommand)]
    Skills(skills::Command),
    /// Check everything at once: extensions, data files, policy, logs.
    Doctor(doctor::Args),
    /// Build the bundled examples for wasm and take a short tour of zotbox.
    Demo(demo::Args),
    /// Install, remove, enable, disable, build extensions, and read their logs.
    #[command(subcommand)]
    Ext(ext::Command),
    /// Write a minimal extension to start from: a manifest declaring no
    /// capabilities, a README, the build file and source with one command,
    /// one typed tool and one intercept.
    New(new::Args),
    // Its help is `KeygenArgs`' doc comment.
    Keygen(publish::KeygenArgs),
    /// Build and sign a registry's index from packed archives.
    #[command(subcommand)]
    Registry(publish::RegistryCommand),
    /// Print a completion script: `zotbox completions bash > /etc/bash_completion.d/zotbox`.
    Completions(completions::Args),
    /// Print the man page (roff): `zotbox man > zotbox.1`.
    Man(man::Args),
}

/// Shared state every command gets.
pub(crate) struct Context {
    workspace: Option<PathBuf>,
    zot_home: Option<PathBuf>,
    ext: Vec<PathBuf>,
    json: bool,
}

impl Context {
    /// zot's home as given or resolved from the environment.
    pub(crate) fn home(&self) -> Result<ZotHome> {
        match &self.zot_home {
            Some(path) => Ok(ZotHome::new(path)),
            None => ZotHome::from_env()
                .context("cannot find zot's home: set ZOT_HOME or HOME, or pass --zot-home"),
        }
    }

    /// The workspace as given, or the current directory.
    pub(crate) fn workspace(&self) -> Result<PathBuf> {
        match &self.workspace {
            // A missing one is the host's to report (it names the error).
            Some(path) if path.exists() && !path.is_dir() => anyhow::bail!(
                "--workspace `{}` is not a folder",
                zotbox::text::Shown(&path.display().to_string())
            ),
            Some(path) => Ok(path.clone()),
            None => std::env::current_dir().context("cannot read the current directory"),
        }
    }

    /// Starts a host over the configured folders.
    pub(crate) async fn host(&self) -> Result<Host> {
        let mut builder = Host::builder()
            .workspace(self.workspace()?)
            .zot_home(self.home()?.root())
            .compiler_process(this_zotbox());
        output::show_compiles(builder.subscribe());
        for path in &self.ext {
            builder = builder.extension(path);
        }
        Ok(builder.build().await?)
    }
}

/// This executable, for first compiles in a child process of it (under the
/// policy's memory cap): `/proc/self/exe` is the running file even once an
/// upgrade has replaced it at its path, so the child's engine is this one's.
pub(crate) fn this_zotbox() -> PathBuf {
    PathBuf::from("/proc/self/exe")
}

/// `zotbox run [DIR]` exactly as zot starts it, relayed to the shared host
/// without parsing the command line with clap: a relay starts once per
/// extension, and building every command's definition (and the log filter)
/// would cost each of them time and memory. `None`: any other command line,
/// or an extension this process must host itself.
pub fn quick_relay() -> Option<u8> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != "run" {
        return None;
    }
    let dir = match (args.next(), args.next()) {
        (None, _) => PathBuf::from("."),
        (Some(dir), None) if !dir.as_encoded_bytes().starts_with(b"-") => PathBuf::from(dir),
        _ => return None,
    };
    if std::env::var_os("ZOTBOX_LOG").is_some() {
        init_logging(0);
    }
    let context = Context {
        workspace: None,
        zot_home: None,
        ext: Vec::new(),
        json: false,
    };
    run::Args::relay_dir(&dir, &context)
}

impl Cli {
    /// Whether the command hosts one extension for zot (`run`): it is best
    /// served by one thread, where no frame's wake-up crosses threads.
    pub fn hosts_one_extension(&self) -> bool {
        matches!(self.action, Action::Run(_))
    }

    /// Whether the command handles `SIGTERM` itself: the shared host
    /// (`host serve`) writes its audit records and stops its commands
    /// before it exits.
    pub fn handles_its_own_signals(&self) -> bool {
        matches!(self.action, Action::Host(host::Command::Serve(_)))
    }

    /// `zotbox run` relayed to the shared host, when it is: the exit
    /// status. `None`: the command runs on an async runtime (every other
    /// command, and `run` hosting the extension in this process).
    pub fn relay(&self) -> Option<u8> {
        let Action::Run(args) = &self.action else {
            return None;
        };
        init_logging(self.verbose);
        let context = Context {
            workspace: self.workspace.clone(),
            zot_home: self.zot_home.clone(),
            ext: self.ext.clone(),
            json: self.json,
        };
        args.relay(&context)
    }

    /// Runs the parsed command line.
    ///
    /// # Errors
    ///
    /// Whatever the command failed with; `main` prints the chain.
    pub async fn run(self) -> Result<u8> {
        init_logging(self.verbose);
        let context = Context {
            workspace: self.workspace,
            zot_home: self.zot_home,
            ext: self.ext,
            json: self.json,
        };
        let status = match self.action {
            Action::List(args) => args.run(&context).await?,
            Action::Call(args) => args.run(&context).await?,
            Action::Command(args) => args.run(&context).await?,
            Action::Check(args) => args.run(&context).await?,
            Action::Ext(command) => command.run(&context).await?,
            Action::Demo(args) => args.run(&context).await?,
            Action::Approve(args) => args.run(&context).await?,
            Action::Trust(args) => args.run(&context).await?,
            Action::Run(args) => args.run(&context).await?,
            Action::Serve(args) => args.run(&context).await?,
            Action::Host(command) => command.run(&context).await?,
            Action::Setup(args) => args.run(&context).await?,
            Action::Policy(command) => command.run(&context).await?,
            Action::Secret(command) => command.run(&context).await?,
            Action::Skills(command) => command.run(&context).await?,
            Action::Keygen(args) => args.run(&context).await?,
            Action::Registry(command) => command.run(&context).await?,
            Action::Doctor(args) => args.run(&context).await?,
            Action::New(args) => args.run(&context).await?,
            Action::Completions(args) => args.run(&context).await?,
            Action::Man(args) => args.run(&context).await?,
        };
        Ok(status)
    }
}

/// Prints `err` and its causes on stderr as one line, with every character
/// an author could have put in it (a name, a path, a guest's message)
/// escaped.
pub fn print_error(err: &anyhow::Error) {
    eprintln!("error: {}", zotbox::text::shown(&format!("{err:#}")));
}

/// This process's stderr and, for a record an extension instance of the
/// shared host made, that instance's own stream too (zot's log of it).
struct Tee(Option<zotbox::instance_log::Sink>);

impl std::io::Write for Tee {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if let Some(sink) = &self.0
            && let Ok(mut stream) = sink.lock()
        {
            // Within the instance's budget of diagnostics, on both streams.
            let admitted = stream.admit(bytes.len(), std::time::Instant::now());
            for line in admitted.note.iter().map(String::as_bytes) {
                stream.write(line);
                std::io::stderr().write_all(line)?;
            }
            if !admitted.record {
                return Ok(bytes.len());
            }
            // Queued, never waited for: the relay's stderr is read by
            // whoever started it, or by no one.
            if stream.has_own() {
                stream.write(bytes);
                if host_log_is_full() {
                    return Ok(bytes.len());
                }
            }
        }
        std::io::stderr().write_all(bytes)?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// The size past which the shared host's log (its stderr, a file) takes
/// no more of its instances' records: each instance's stream still has
/// them, and the host's own lines still go in. Each instance is held to a
/// budget a minute, but a host lives for days.
const MAX_HOST_LOG_BYTES: i64 = 64 * 1024 * 1024;

/// Whether this process's stderr is a file past [`MAX_HOST_LOG_BYTES`].
fn host_log_is_full() -> bool {
    use std::os::fd::AsFd;
    nix::sys::stat::fstat(std::io::stderr().as_fd()).is_ok_and(|stat| {
        (stat.st_mode & nix::libc::S_IFMT) == nix::libc::S_IFREG
            && stat.st_size > MAX_HOST_LOG_BYTES
    })
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("ZOTBOX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // No colours: every control character in a record is escaped, since
    // records quote what authors wrote (names, paths, errors).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| zotbox::text::EscapedLines(Tee(zotbox::instance_log::current())))
        .with_target(false)
        .with_ansi(false)
        .without_time()
        .try_init();
}
