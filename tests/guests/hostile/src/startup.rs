//! Startup modes: attacks made in the handshake itself, and what the guest
//! registers beyond its tools, chosen by the name the host starts the guest
//! under (a wasm guest's `argv[0]` is its manifest name), so each test picks
//! one by naming the extension folder.
//!
//! - `hostile-register-<count>-<bytes>`: registers `count` tools, each with a
//!   description of `bytes` bytes, written from one reused buffer so that the
//!   guest itself stays within a small memory limit; then idles.
//! - `hostile-evil-names`: the usual tools, plus tools and a command whose
//!   names would clear the screen, set the terminal title or forge a row.
//! - `hostile-guard`: the usual tools, and a guard of every tool call that
//!   writes a check of `raw_lines` its `lines` by hand (as a guard writing
//!   its verdicts itself would), then allows it.

use std::io::{BufRead, Write};

/// Tool and command names that a terminal would act on.
pub const EVIL_NAMES: &[&str] = &["\u{1b}[2Jevil", "a\r\nb", "\u{1b}]0;pwned\u{7}"];

/// What the guest does at startup.
pub enum Startup {
    /// The ordinary tool set.
    Normal,
    /// The ordinary tool set plus [`EVIL_NAMES`].
    EvilNames,
    /// The ordinary tool set and a guard writing lines by hand.
    Guard,
    /// `count` tools with `bytes`-byte descriptions, raw frames.
    Register {
        /// How many tools.
        count: usize,
        /// Bytes per description.
        bytes: usize,
    },
}

impl Startup {
    /// The mode `argv[0]` names.
    pub fn from_args() -> Self {
        let name = std::env::args().next().unwrap_or_default();
        match name.as_str() {
            "hostile-evil-names" => return Self::EvilNames,
            "hostile-guard" => return Self::Guard,
            _ => {}
        }
        let Some(rest) = name.strip_prefix("hostile-register-") else {
            return Self::Normal;
        };
        let mut numbers = rest.split('-').map(str::parse::<usize>);
        match (numbers.next(), numbers.next()) {
            (Some(Ok(count)), Some(Ok(bytes))) => Self::Register { count, bytes },
            _ => Self::Normal,
        }
    }
}

/// Writes `hello`, `count` registrations and `ready` as raw frames, then
/// reads its input until `shutdown` or its end.
pub fn register_flood(count: usize, bytes: usize) -> std::io::Result<()> {
    let description = vec![b'x'; bytes];
    let mut out = std::io::stdout().lock();
    out.write_all(b"{\"type\":\"hello\",\"name\":\"hostile\",\"version\":\"0.1.0\"}\n")?;
    for index in 0..count {
        write!(
            out,
            "{{\"type\":\"register_tool\",\"name\":\"flood_{index}\",\"description\":\""
        )?;
        out.write_all(&description)?;
        out.write_all(b"\",\"schema\":{\"type\":\"object\"}}\n")?;
    }
    out.write_all(b"{\"type\":\"ready\"}\n")?;
    out.flush()?;
    drop(out);
    for line in std::io::stdin().lock().lines() {
        if line?.contains("\"shutdown\"") {
            let mut out = std::io::stdout().lock();
            out.write_all(b"{\"type\":\"shutdown_ack\"}\n")?;
            out.flush()?;
            break;
        }
    }
    Ok(())
}
