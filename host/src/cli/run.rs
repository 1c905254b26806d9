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
use zotbox::manifest::{MANIFEST_FILE, Manifest, Program};

/// Arguments of `zotbox run`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The extension's folder (zot starts its `exec` there) [default: .].
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Host the extension in this process instead of the shared per-user
    /// host (also: ZOTBOX_STANDALONE=1). For debugging, and for systems
    /// without Unix sockets.
    #[arg(long)]
    standalone: bool,
}

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
        if zotbox::shared::standalone_from_env() {
            return None;
        }
        let home = context.home().ok()?;
        // A manifest that does not load gets standalone's error.
        let manifest = Manifest::load(&dir.join(MANIFEST_FILE)).ok()?;
        if !matches!(manifest.program, Program::Wasm { .. }) {
            return None;
        }
        let exe = std::env::current_exe().ok()?;
        match zotbox::shared::relay(dir, manifest.name(), &home, &exe) {
            Ok(exit) => Some(status_of(exit)),
            Err(err) if err.falls_back() => {
                // zot reads this stderr into the extension's log.
                eprintln!(
                    "zotbox: {}; hosting the extension in this process",
                    zotbox::text::shown(&err.to_string())
                );
                None
            }
            Err(err) => {
                print_error(&anyhow::Error::new(err));
                Some(EXIT_ERROR)
            }
        }
    }

    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let home = context.home()?;
        let exit = bridge::run(
            &self.dir,
            home,
            BridgeConfig::default(),
            bridge::stdio::stdin(),
            bridge::stdio::stdout(),
        )
        .await?;
        Ok(status_of(exit))
    }
}

/// The exit status for zot; an exit other than a status is explained on
/// stderr, which zot reads into the extension's log.
fn status_of(exit: Exit) -> u8 {
    match exit {
        Exit::Code(code) => u8::try_from(code).unwrap_or(EXIT_ERROR),
        other => {
            eprintln!(
                "zotbox: the extension {}",
                zotbox::text::shown(&other.to_string())
            );
            EXIT_ERROR
        }
    }
}
