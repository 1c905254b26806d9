//! `zotbox man`: the man page, in roff, on stdout.

use anyhow::{Context as _, Result};
use clap::CommandFactory as _;

use super::{Cli, Context, EXIT_OK};

/// Arguments of `zotbox man`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

impl Args {
    pub(crate) async fn run(self, _context: &Context) -> Result<u8> {
        let page = clap_mangen::Man::new(Cli::command());
        let mut out = Vec::new();
        page.render(&mut out)
            .context("cannot render the man page")?;
        super::output::quiet_if_gone(std::io::Write::write_all(&mut std::io::stdout(), &out))
            .context("cannot write the man page")?;
        Ok(EXIT_OK)
    }
}
