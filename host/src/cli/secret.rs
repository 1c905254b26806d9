//! `zotbox secret set|list|remove`: the user's secrets, which extensions use
//! through a placeholder and never read.
//!
//! A value is read from the terminal with echo off, or from stdin when it is
//! not a terminal (`pass show key | zotbox secret set KEY`); it is never an
//! argument (argv is visible to every process) and never printed.

use std::io::{BufRead as _, IsTerminal as _, Read as _, Write as _};

use anyhow::{Context as _, Result, bail};

use super::output::{json_line, table};
use super::{Context, EXIT_ERROR, EXIT_OK};
use zotbox::discovery::SearchPath;
use zotbox::policy::Policy;
use zotbox::store::secret::SecretStore;
use zotbox::text::{Shown, shown};

/// `zotbox secret` subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Set (or replace) a secret; the value is read from the terminal
    /// without echo, or from stdin when it is not a terminal.
    Set {
        /// The secret's name, as extensions declare it (`WEATHER_KEY`).
        name: String,
        /// Only this extension (or `data:TOOL`, a data tool) may use it
        /// (repeatable). Default: any extension whose grant holds it.
        #[arg(long = "extension", value_name = "EXT")]
        extensions: Vec<String>,
    },
    /// List the secrets: names, who may use them, where they may go; never values.
    List,
    /// Remove a secret.
    Remove {
        /// The secret's name.
        name: String,
    },
}

impl Command {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let store = SecretStore::new(&context.home()?);
        match self {
            Self::Set { name, extensions } => {
                let value = read_value(&name)?;
                store.set(&name, &value, &extensions)?;
                if context.json {
                    json_line(&serde_json::json!({"set": name, "extensions": extensions}))?;
                } else {
                    println!(
                        "secret `{}` set in {}",
                        Shown(&name),
                        shown(&store.path().display().to_string())
                    );
                }
                Ok(EXIT_OK)
            }
            Self::Remove { name } => {
                if !store.remove(&name)? {
                    eprintln!("no secret `{}` (see `zotbox secret list`)", Shown(&name));
                    return Ok(EXIT_ERROR);
                }
                if context.json {
                    json_line(&serde_json::json!({"removed": name}))?;
                } else {
                    println!("secret `{}` removed", Shown(&name));
                }
                Ok(EXIT_OK)
            }
            Self::List => list(context, &store),
        }
    }
}

/// Every secret with who may use it and, for the extensions found, where
/// their grant lets it go.
fn list(context: &Context, store: &SecretStore) -> Result<u8> {
    let secrets = store.list()?;
    let policy = Policy::load_for(&context.home()?)?;
    let search = SearchPath {
        explicit: context.ext.clone(),
        workspace: context.workspace()?,
        home: context.home()?,
    };
    // Inspection only: manifests are read, nothing runs.
    let found = search.discover().found;
    let uses = |name: &str| -> Vec<(String, String)> {
        found
            .iter()
            .filter_map(|found| {
                let grant = policy.grant(&found.manifest.raw.capabilities);
                let spec = grant.secrets.get(name)?;
                Some((found.manifest.name().to_owned(), spec.destinations()))
            })
            .collect()
    };
    if context.json {
        for secret in &secrets {
            let granted: Vec<serde_json::Value> = uses(&secret.name)
                .into_iter()
                .map(|(extension, to)| serde_json::json!({"extension": extension, "to": to}))
                .collect();
            json_line(&serde_json::json!({
                "name": secret.name,
                "extensions": secret.extensions,
                "granted_to": granted,
            }))?;
        }
        return Ok(EXIT_OK);
    }
    if secrets.is_empty() {
        println!("no secrets (set one with `zotbox secret set NAME`)");
        return Ok(EXIT_OK);
    }
    let rows: Vec<Vec<String>> = secrets
        .iter()
        .map(|secret| {
            let set_for = if secret.extensions.is_empty() {
                "any extension granted it".to_owned()
            } else {
                shown(&secret.extensions.join(", ")).into_owned()
            };
            let granted: Vec<String> = uses(&secret.name)
                .into_iter()
                .map(|(extension, to)| format!("{} → {}", Shown(&extension), Shown(&to)))
                .collect();
            vec![
                shown(&secret.name).into_owned(),
                set_for,
                if granted.is_empty() {
                    "-".to_owned()
                } else {
                    granted.join("; ")
                },
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["NAME", "SET FOR", "GRANTED TO (WHERE IT MAY GO)"], &rows)
    );
    Ok(EXIT_OK)
}

/// The value: from the terminal with echo off, else all of stdin.
fn read_value(name: &str) -> Result<String> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        let mut value = String::new();
        stdin
            .lock()
            .read_to_string(&mut value)
            .context("cannot read the value from stdin")?;
        return Ok(value);
    }
    let value = {
        // Echo off before the prompt: nothing typed after it is ever shown.
        let _quiet = EchoOff::new(&stdin)?;
        eprint!("value of secret `{}` (not shown): ", Shown(name));
        std::io::stderr().flush().ok();
        let mut line = String::new();
        stdin
            .lock()
            .read_line(&mut line)
            .context("cannot read the value from the terminal")?;
        line
    };
    eprintln!();
    if value.trim().is_empty() {
        bail!("no value given; secret `{}` is unchanged", Shown(name));
    }
    Ok(value)
}

/// Terminal echo off until dropped (then the old settings are back).
struct EchoOff<'a> {
    fd: std::os::fd::BorrowedFd<'a>,
    saved: nix::sys::termios::Termios,
}

impl<'a> EchoOff<'a> {
    fn new(stdin: &'a std::io::Stdin) -> Result<Self> {
        use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
        use std::os::fd::AsFd as _;
        let fd = stdin.as_fd();
        let saved = tcgetattr(fd).context("cannot read the terminal settings")?;
        let mut quiet = saved.clone();
        quiet.local_flags.remove(LocalFlags::ECHO);
        tcsetattr(fd, SetArg::TCSANOW, &quiet).context("cannot turn the terminal echo off")?;
        Ok(Self { fd, saved })
    }
}

impl Drop for EchoOff<'_> {
    fn drop(&mut self) {
        let _ =
            nix::sys::termios::tcsetattr(self.fd, nix::sys::termios::SetArg::TCSANOW, &self.saved);
    }
}
