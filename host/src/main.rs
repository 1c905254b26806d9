//! The `zotbox` binary: parse flags, run the command, print the error chain.

mod cli;

use clap::Parser;
use cli::{Cli, EXIT_ERROR, print_error};

fn main() {
    if let Some(code) = cli::quick_relay() {
        exit_now(code);
    }
    let cli = Cli::parse();
    // `zotbox run` relayed to the shared host needs no async runtime.
    if let Some(code) = cli.relay() {
        exit_now(code);
    }
    let runtime = if cli.hosts_one_extension() {
        // `zotbox run`: one extension, one thread. The guest, the bridge and
        // zot's stdio all run here, so a frame never wakes another thread,
        // and no worker threads are started (or kept resident).
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            std::process::exit(i32::from(EXIT_ERROR));
        }
    };
    // Run as a task rather than on this thread: on a multi-thread runtime,
    // waking a thread parked outside it costs a futex round trip on every
    // frame exchanged with an extension (on one thread, it costs nothing).
    let outcome = runtime.block_on(async { tokio::spawn(cli.run()).await });
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
    // Exit now rather than let the runtime wind down (it is never dropped):
    // a read of stdin (`run`, `serve`) may sit on a blocking thread that
    // nothing can cancel, and zot must see the process end as soon as the
    // extension has.
    exit_now(code)
}

/// Exits with `code`, stdout flushed.
fn exit_now(code: u8) -> ! {
    let _ = std::io::Write::flush(&mut std::io::stdout());
    std::process::exit(i32::from(code))
}
