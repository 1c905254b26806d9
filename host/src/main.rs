//! The `zotbox` binary: parse flags, run the command, print the error chain.

mod cli;

use clap::Parser;
use cli::{Cli, EXIT_ERROR, print_error};

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    // Run as a task on the runtime's workers rather than on this thread:
    // waking a thread parked outside the runtime costs a futex round trip
    // on every frame exchanged with an extension.
    let outcome = tokio::spawn(cli.run()).await;
    let code = match outcome {
        Ok(Ok(code)) => code,
        Ok(Err(err)) => {
            print_error(&err);
            EXIT_ERROR
        }
        Err(panicked) => {
            eprintln!("error: zotbox failed: {panicked}");
            EXIT_ERROR
        }
    };
    // Exit now rather than let the runtime wind down: a read of stdin (`run`,
    // `serve`) sits on a blocking thread that nothing can cancel, and zot
    // must see the process end as soon as the extension has.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    std::process::exit(i32::from(code))
}
