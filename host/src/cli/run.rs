//! `zotbox run [DIR]`: host one extension and bridge it to zot's stdio.
//!
//! A wasm extension is handed to the shared per-user host (started on
//! demand) unless `--standalone` or `ZOTBOX_STANDALONE=1` says otherwise; a
//! native one, or one whose manifest does not load, runs in this process.

use std::path::PathBuf;

use anyhow::Result;

use super::{Context, EXIT_ERROR, print_error};
use zotbox::Exit;
use zotbox::bridge::{self, BridgeConfig};
use zotbox::shared::{self, Relayed};

/// Arguments of `zotbox run`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The extension's folder (zot starts its `exec` there).
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Host the extension in this process instead of the shared per-user
    /// host (also: ZOTBOX_STANDALONE=1). For debugging, and for systems
    /// without Unix sockets.
    #[arg(long)]
    standalone: bool,
    /// zot's `hello_ack`, when this run takes over an extension whose
    /// handshake is done (a relay whose shared host kept dying).
    #[arg(long, hide = true, value_name = "LINE")]
    resume_hello_ack: Option<String>,
}

/// zot's `hello_ack` a relay of this process brought back from a shared
/// host that kept dying: the extension hosted here resumes with it.
static RESUMED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

impl Args {
    /// Relays a wasm extension to the shared host: its exit status, or
    /// `None` to host it in this process.
    pub(crate) fn relay(&self, context: &Context) -> Option<u8> {
        if self.standalone {
            return None;
        }
        Self::relay_dir(&self.dir, context)
    }

    /// Relays the wasm extension in `dir`, unless the environment says
    /// standalone: its exit status, or `None` to host it in this process.
    pub(crate) fn relay_dir(dir: &std::path::Path, context: &Context) -> Option<u8> {
        if shared::standalone_from_env() {
            return None;
        }
        let home = context.home().ok()?;
        let exe = std::env::current_exe().ok()?;
        // The small relay beside this executable waits in place of this
        // process once the extension is handed over: a relay lives as long
        // as zot's session, so its size counts.
        let waiter = exe
            .parent()
            .map(|dir| dir.join("zotbox-relay"))
            .filter(|relay| relay.is_file());
        let build = shared::peer::build_id();
        match shared::launch(dir, &home, &exe, &build, waiter.as_deref()) {
            Relayed::Exit(exit) => Some(status_of(&exit)),
            Relayed::Standalone { why, resume } => {
                // zot reads this stderr into the extension's log.
                if let Some(why) = why {
                    eprintln!("{why}");
                }
                if let Some(hello_ack) = resume {
                    let _ = RESUMED.set(hello_ack);
                }
                None
            }
            Relayed::Failed(err) => {
                print_error(&anyhow::Error::new(err));
                Some(EXIT_ERROR)
            }
        }
    }

    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let home = context.home()?;
        // The extension's diagnostics, on stderr (zot's log of it), are held
        // to the budget the shared host holds each instance's to.
        let budget = std::sync::Arc::new(std::sync::Mutex::new(
            zotbox::instance_log::Stream::stderr_only(),
        ));
        let exit = zotbox::instance_log::scope(
            budget,
            bridge::run(
                &self.dir,
                home,
                BridgeConfig {
                    compiler: Some(super::this_zotbox()),
                    resume: self
                        .resume_hello_ack
                        .or_else(|| RESUMED.get().cloned())
                        .map(String::into_bytes),
                    ..BridgeConfig::default()
                },
                (bridge::stdio::stdin(), bridge::stdio::HangUp::of_stdin()),
                bridge::stdio::stdout(),
            ),
        )
        .await?;
        Ok(status_of(&exit))
    }
}

/// The exit status for zot; an exit other than a status is explained on
/// stderr, which zot reads into the extension's log.
fn status_of(exit: &Exit) -> u8 {
    let (status, line) = shared::status_for_zot(exit);
    if let Some(line) = line {
        eprintln!("{line}");
    }
    status
}
