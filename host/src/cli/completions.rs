//! `zotbox completions SHELL`: a completion script for the shell.

use anyhow::{Context as _, Result};
use clap::CommandFactory as _;

use super::{Cli, Context, EXIT_OK};

/// Arguments of `zotbox completions`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The shell: bash, elvish, fish, powershell or zsh.
    shell: clap_complete::Shell,
}

impl Args {
    pub(crate) async fn run(self, _context: &Context) -> Result<u8> {
        let mut command = Cli::command();
        // Into memory first: `generate` panics when its writer fails (a
        // closed pipe, say); a failed write here is an error.
        let mut script = Vec::new();
        clap_complete::generate(self.shell, &mut command, "zotbox", &mut script);
        super::output::quiet_if_gone(std::io::Write::write_all(&mut std::io::stdout(), &script))
            .context("cannot write the completion script")?;
        Ok(EXIT_OK)
    }
}
