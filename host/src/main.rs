//! The `zotbox` binary: parse flags, run the command, print the error chain.

use std::process::ExitCode;

use clap::Parser;
use zotbox::cli::{Cli, EXIT_ERROR};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.run().await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}
