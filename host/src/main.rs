//! The `zotbox` binary: parse flags, run the command, print the error chain.

mod cli;

use clap::Parser;
use cli::{Cli, EXIT_ERROR, print_error};

fn main() {
    quiet_when_the_reader_is_gone();
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

/// `zotbox list | head`: once the reader of stdout is gone, stop quietly
/// (status 0), as ripgrep and coreutils do, instead of panicking in
/// `println!`. Only the printing commands use `println!`: `run` and `host
/// serve` write zot's frames through their own handles, whose errors they
/// handle (SIGPIPE stays ignored, so those are errors, not signals).
fn quiet_when_the_reader_is_gone() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout")
            && message.ends_with(&format!("(os error {})", nix::libc::EPIPE))
        {
            std::process::exit(0);
        }
        default(info);
    }));
}

/// Exits with `code`, stdout flushed.
fn exit_now(code: u8) -> ! {
    let _ = std::io::Write::flush(&mut std::io::stdout());
    std::process::exit(i32::from(code))
}
