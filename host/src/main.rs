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
    let own_signals = cli.handles_its_own_signals();
    let outcome = runtime.block_on(async {
        if !own_signals {
            tokio::spawn(stop_on_signal());
        }
        tokio::spawn(cli.run()).await
    });
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
    // Stopped by a signal: its status, whatever the command made of the
    // stop (a refusal naming what was taken back).
    let code = match SIGNALLED.load(std::sync::atomic::Ordering::SeqCst) {
        0 => code,
        signalled => signalled,
    };
    // Exit now rather than let the runtime wind down (it is never dropped):
    // a read of stdin (`run`, `serve`) may sit on a blocking thread that
    // nothing can cancel, and zot must see the process end as soon as the
    // extension has.
    exit_now(code)
}

/// The exit status a signal asked for ([`stop_on_signal`]); 0 for none.
static SIGNALLED: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// On `SIGINT` (a Ctrl-C), `SIGTERM` (zot stopping `serve`) or `SIGHUP`
/// (the terminal closed): exits with 128 and the signal's number, as the
/// default action would, once the confined commands in flight are killed
/// and what each left in its workspace is taken back (10 s at the most).
/// A second signal (a Ctrl-C pressed twice) says it is still taking back;
/// a third leaves it to the next command in that workspace. Without
/// commands in flight, at once.
async fn stop_on_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    use zotbox::capability::shell::interrupt;
    let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        // The default actions stay.
        return;
    };
    let mut next = async || {
        tokio::select! {
            _ = int.recv() => 128 + nix::libc::SIGINT,
            _ = term.recv() => 128 + nix::libc::SIGTERM,
            _ = hup.recv() => 128 + nix::libc::SIGHUP,
        }
    };
    let code = u8::try_from(next().await).unwrap_or(EXIT_ERROR);
    SIGNALLED.store(code, std::sync::atomic::Ordering::SeqCst);
    if interrupt::interrupt() > 0 {
        eprintln!("zotbox: stopping the commands running and taking back what they left");
        let settled = interrupt::settled(std::time::Duration::from_secs(10));
        tokio::pin!(settled);
        for signals in 1.. {
            tokio::select! {
                _ = &mut settled => break,
                _ = next() => {}
            }
            if signals >= 2 {
                break;
            }
            eprintln!(
                "zotbox: still taking back what the commands left (a third signal leaves it to \
                 the next command in the workspace)"
            );
        }
    }
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
