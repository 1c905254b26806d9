//! `zotbox-relay [DIR]`: `zotbox run` as zot starts it, in a process as
//! small as a native extension's.
//!
//! An installed manifest makes zot start this program; `zotbox run DIR`
//! hands the extension over itself and then replaces itself with
//! `zotbox-relay --attached FD DIR` to wait on the socket `FD`, when this
//! program lies beside `zotbox`. It only hands
//! zot's stdio to the shared host and waits: the wasm engine, the command
//! line and the rest of zotbox are not linked into it, so ten extensions
//! under zot cost ten small processes and one host. When the extension is
//! to run in this process instead (`ZOTBOX_STANDALONE=1`, a native
//! extension, a manifest that does not load, no usable host), it replaces
//! itself with `zotbox run --standalone DIR`.

use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;

use zotbox::home::ZotHome;
use zotbox::shared::{self, Relayed};
use zotbox::text::shown;

fn main() {
    let mut args = std::env::args_os().skip(1).peekable();
    // `--attached FD DIR`: `zotbox run` handed the extension over on `FD`.
    let attached = if args.peek().is_some_and(|arg| arg == "--attached") {
        args.next();
        match args.next().map(|fd| fd.into_string()) {
            Some(Ok(fd)) => Some(fd),
            _ => fail("--attached needs a descriptor number"),
        }
    } else {
        None
    };
    let dir = args
        .next()
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    let Some(zotbox) = std::env::current_exe()
        .ok()
        .and_then(|me| Some(me.parent()?.join("zotbox")))
    else {
        fail("cannot find the `zotbox` executable beside `zotbox-relay`")
    };
    let Some(home) = ZotHome::from_env() else {
        fail("cannot find zot's home: set ZOT_HOME or HOME")
    };
    let build = shared::peer::build_id_of(&zotbox);
    let relayed = match attached {
        Some(fd) => shared::resume(&fd, &dir, &home, &zotbox, &build),
        None => shared::launch(&dir, &home, &zotbox, &build, None),
    };
    match relayed {
        Relayed::Exit(exit) => {
            let (status, line) = shared::status_for_zot(&exit);
            if let Some(line) = line {
                eprintln!("{line}");
            }
            std::process::exit(i32::from(status))
        }
        Relayed::Standalone { why, resume } => {
            // zot reads this stderr into the extension's log.
            if let Some(why) = why {
                eprintln!("{why}");
            }
            let mut command = std::process::Command::new(&zotbox);
            command.args(["run", "--standalone"]);
            if let Some(hello_ack) = resume {
                command.arg("--resume-hello-ack").arg(hello_ack);
            }
            let err = command.arg("--").arg(&dir).exec();
            fail(&format!("cannot start `{}`: {err}", zotbox.display()))
        }
        Relayed::Failed(err) => fail(&err.to_string()),
    }
}

fn fail(why: &str) -> ! {
    eprintln!("error: {}", shown(why));
    std::process::exit(1)
}
