//! `zotbox run [DIR]`: host one extension and bridge it to zot's stdio.

use std::path::PathBuf;

use anyhow::Result;

use super::{Context, EXIT_ERROR};
use zotbox::Exit;
use zotbox::bridge::{self, BridgeConfig};

/// Arguments of `zotbox run`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The extension's folder (zot starts its `exec` there) [default: .].
    #[arg(default_value = ".")]
    dir: PathBuf,
}

impl Args {
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
        // zot reads this stderr into the extension's log.
        Ok(match exit {
            Exit::Code(code) => u8::try_from(code).unwrap_or(EXIT_ERROR),
            other => {
                eprintln!(
                    "zotbox: the extension {}",
                    zotbox::text::shown(&other.to_string())
                );
                EXIT_ERROR
            }
        })
    }
}
