//! `zotbox host`: the shared per-user host that `zotbox run` relays to.

use anyhow::{Context as _, Result};

use super::output::json_line;
use super::{Context, EXIT_OK};
use zotbox::shared::{self, HostStatus, Place, ServeOptions};
use zotbox::text::shown;

/// `zotbox host …`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Show the shared host of this zot home: pid, uptime, build and the
    /// extensions it runs.
    Status,
    /// Ask the shared host to stop: it accepts no new extension and exits
    /// when the ones it runs have ended.
    Stop,
    /// Run the shared host in the foreground. `zotbox run` starts it on
    /// demand; it exits after an idle period with no extensions.
    Serve(ServeArgs),
    /// Compile the wasm program on stdin into the disk cache (what the
    /// shared host runs for a first compile, so the compiler's memory does
    /// not stay in it).
    #[command(hide = true)]
    Compile(CompileArgs),
}

/// Arguments of `zotbox host compile`.
#[derive(Debug, clap::Args)]
pub(crate) struct CompileArgs {
    /// The disk cache to store the compiled program in.
    #[arg(long, value_name = "DIR")]
    cache: std::path::PathBuf,
    /// The most bytes the cache holds; the least recently used entries
    /// beyond it are evicted.
    #[arg(long, value_name = "BYTES")]
    cap: u64,
    /// The most data memory this process may use, MiB (`RLIMIT_DATA`, set
    /// before the program is read).
    #[arg(long, value_name = "MIB")]
    memory_mb: Option<u64>,
}

/// Arguments of `zotbox host serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// Exit after this many seconds with no extension [default:
    /// $ZOTBOX_HOST_IDLE, else 60].
    #[arg(long, value_name = "SECS")]
    idle: Option<f64>,
    /// Claim this build id instead of this binary's (tests of a version
    /// mismatch).
    #[arg(long, hide = true)]
    build: Option<String>,
}

impl Command {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        match self {
            Self::Status => status(context),
            Self::Stop => stop(context),
            Self::Serve(args) => serve(context, args).await,
            Self::Compile(args) => compile(args),
        }
    }
}

/// `zotbox host status`.
fn status(context: &Context) -> Result<u8> {
    let home = context.home()?;
    let status = shared::status(&home)?;
    if context.json {
        json_line(&serde_json::json!({ "host": status }))?;
    } else {
        match status {
            Some(status) => print_status(&status),
            None => println!(
                "no zotbox host is running for `{}` (`zotbox run` starts one on demand)",
                shown(&home.root().display().to_string())
            ),
        }
    }
    Ok(EXIT_OK)
}

/// `zotbox host stop`.
fn stop(context: &Context) -> Result<u8> {
    let stopped = shared::stop(&context.home()?)?;
    if context.json {
        json_line(&serde_json::json!({ "stopping": stopped }))?;
    } else if stopped {
        println!("the zotbox host accepts no new extension and exits when its extensions end");
    } else {
        println!("no zotbox host is running");
    }
    Ok(EXIT_OK)
}

/// `zotbox host serve`.
async fn serve(context: &Context, args: ServeArgs) -> Result<u8> {
    let home = context.home()?;
    let place = Place::for_home(&home)?;
    let idle = match args.idle {
        Some(secs) if secs.is_finite() && secs >= 0.0 => std::time::Duration::from_secs_f64(secs),
        Some(secs) => anyhow::bail!("`--idle {secs}` is not a number of seconds"),
        None => shared::idle_from_env(),
    };
    let options = ServeOptions {
        idle,
        build: args.build,
        compiler: super::this_zotbox(),
    };
    shared::serve(home, &place, options).await?;
    Ok(EXIT_OK)
}

/// `5s`, `3m 4s`, `2h 5m`.
pub(crate) fn duration(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m {}s", secs / 60, secs % 60),
        _ => format!("{}h {}m", secs / 3600, secs % 3600 / 60),
    }
}

/// The status as `zotbox host status` and `zotbox doctor` print it.
pub(crate) fn status_line(status: &HostStatus) -> String {
    format!(
        "zotbox host: pid {}, up {}, build {}, {} extension(s){}",
        status.pid,
        duration(status.uptime_secs),
        status.build,
        status.instances.len(),
        if status.retired {
            ", retired (exits when they end)"
        } else {
            ""
        }
    )
}

fn print_status(status: &HostStatus) {
    println!("{}", shown(&status_line(status)));
    for instance in &status.instances {
        let workspace = instance
            .workspace
            .as_ref()
            .map_or_else(|| "(not named yet)".to_owned(), |w| w.display().to_string());
        println!(
            "  {}  up {}  relay pid {}  workspace {}  folder {}",
            shown(&instance.name),
            duration(instance.uptime_secs),
            instance.relay_pid,
            shown(&workspace),
            shown(&instance.dir.display().to_string())
        );
    }
}

/// `zotbox host compile`: the program on stdin compiled into the cache.
fn compile(args: CompileArgs) -> Result<u8> {
    {
        // Past the soft limit the kernel ends it with SIGXCPU, which the
        // host reads as the refusal it is; past the hard one, SIGKILL.
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        let (soft, hard) = getrlimit(Resource::RLIMIT_CPU)?;
        let wanted = shared::COMPILE_CPU_SECS.min(soft);
        setrlimit(
            Resource::RLIMIT_CPU,
            wanted,
            hard.min(wanted.saturating_add(5)),
        )
        .context("cannot cap this process's CPU time")?;
    }
    if let Some(mib) = args.memory_mb {
        // The program's author chooses how much the compiler asks for: a
        // request past the cap fails here, and the host refuses the program.
        // A lower limit already in force stays.
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        let (_, hard) = getrlimit(Resource::RLIMIT_DATA)?;
        let bytes = mib.saturating_mul(1024 * 1024).min(hard);
        setrlimit(Resource::RLIMIT_DATA, bytes, bytes)
            .with_context(|| format!("cannot cap this process's memory at {mib} MiB"))?;
    }
    shared::compile_into_cache(
        args.cache,
        args.cap,
        std::io::stdin().lock(),
        std::io::stdout().lock(),
    )?;
    Ok(EXIT_OK)
}
