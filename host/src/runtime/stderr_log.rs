//! An extension's stderr on its way to `$ZOT_HOME/logs/ext-<name>.log`,
//! wasm guest and native program alike.
//!
//! Its author wrote those bytes, and `zot ext logs`, `zotbox ext logs` and
//! `cat` hand the file to a terminal: a control sequence (a screen clear,
//! OSC 52 writing the clipboard) goes in as text ([`ShownChunks`]). And one
//! run writes at most [`LOG_CAP`], so an extension cannot fill the disk by
//! writing to stderr (`THREATS.md` rule 6).

use std::io::Write;

use crate::text::ShownChunks;

/// What one run of an extension may write to its log, escapes included.
pub(crate) const LOG_CAP: u64 = 8 * 1024 * 1024;

/// The line that ends a run's log at [`LOG_CAP`].
const CUT_OFF: &str = "\n[zotbox: log cut off at 8 MiB for this run]\n";

/// One run's stderr, written to its log as text, up to [`LOG_CAP`].
pub(crate) struct StderrLog {
    file: std::fs::File,
    /// Bytes of the extension's written this run, escapes included (and
    /// those past the cap, counted).
    written: u64,
    /// Whether [`CUT_OFF`] was written: once, and only when something was
    /// left out.
    cut_off: bool,
    shown: ShownChunks,
}

impl StderrLog {
    /// A run's log, appending to `file`.
    pub(crate) fn new(file: std::fs::File) -> Self {
        Self {
            file,
            written: 0,
            cut_off: false,
            shown: ShownChunks::default(),
        }
    }

    /// Appends what the extension wrote, as text, while the run is under
    /// the cap; the first text left out is replaced by [`CUT_OFF`] (a write
    /// that ends exactly at the cap leaves nothing out yet).
    ///
    /// # Errors
    ///
    /// When the file refuses the write.
    pub(crate) fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        // Past the cut-off nothing more is written: nothing to escape.
        if self.cut_off {
            return Ok(());
        }
        let text = self.shown.push(bytes);
        let before = self.written;
        self.written = before.saturating_add(text.len() as u64);
        let mut keep = usize::try_from(LOG_CAP.saturating_sub(before))
            .unwrap_or(usize::MAX)
            .min(text.len());
        // An escape may be cut; a character may not.
        while !text.is_char_boundary(keep) {
            keep -= 1;
        }
        self.file.write_all(&text.as_bytes()[..keep])?;
        if keep < text.len() && !self.cut_off {
            self.cut_off = true;
            self.file.write_all(CUT_OFF.as_bytes())?;
        }
        Ok(())
    }

    /// Writes a character the extension left unfinished (as bytes that are
    /// not UTF-8), then `line` of zotbox's own, whatever the cap. The line
    /// is shown as text too: it quotes the author (a panic's message, the
    /// function names of a wasm backtrace).
    pub(crate) fn note(&mut self, line: &str) {
        self.finish();
        let _ = writeln!(self.file, "{}", crate::text::shown_text(line));
    }

    /// Writes a character the extension left unfinished, as bytes that are
    /// not UTF-8: what ends the run's log.
    pub(crate) fn finish(&mut self) {
        let rest = self.shown.finish();
        if self.written < LOG_CAP {
            let _ = self.file.write_all(rest.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(file: &mut std::fs::File) -> String {
        use std::io::{Read, Seek};
        let mut text = String::new();
        file.rewind().unwrap_or_else(|e| panic!("{e}"));
        file.read_to_string(&mut text)
            .unwrap_or_else(|e| panic!("{e}"));
        text
    }

    #[test]
    fn a_run_writes_at_most_the_cap_escapes_included_then_only_notes() {
        let mut file = tempfile::tempfile().unwrap_or_else(|e| panic!("{e}"));
        let writing = file.try_clone().unwrap_or_else(|e| panic!("{e}"));
        let mut log = StderrLog::new(writing);
        // Attack: an extension writing 3 MiB of ESC, each 7 bytes once
        // escaped, then more; a cap on the bytes written rather than the
        // text would let it write seven times the cap.
        let flood = vec![0x1b_u8; 64 * 1024];
        for _ in 0..48 {
            log.append(&flood).unwrap_or_else(|e| panic!("{e}"));
        }
        log.append(b"after the cap\n")
            .unwrap_or_else(|e| panic!("{e}"));
        log.note("zotbox: guest exited with status 1");
        let text = contents(&mut file);
        let cap = usize::try_from(LOG_CAP).unwrap_or(usize::MAX);
        assert_eq!(
            text.len(),
            cap + CUT_OFF.len() + "zotbox: guest exited with status 1\n".len()
        );
        assert!(text.starts_with("\\u{1b}\\u{1b}"));
        assert!(!text.contains('\u{1b}'));
        assert!(!text.contains("after the cap"));
        assert!(text.ends_with(&format!("{CUT_OFF}zotbox: guest exited with status 1\n")));
    }

    #[test]
    fn a_run_that_ends_a_write_exactly_at_the_cap_is_cut_off_at_its_next() {
        // Reads of 8 KiB from a pipe end exactly at 8 MiB: the cut-off was
        // written only by a write that crossed the cap, so such a run's log
        // ended without saying it was cut.
        let mut file = tempfile::tempfile().unwrap_or_else(|e| panic!("{e}"));
        let writing = file.try_clone().unwrap_or_else(|e| panic!("{e}"));
        let mut log = StderrLog::new(writing);
        let chunk = vec![b'x'; 8192];
        let cap = usize::try_from(LOG_CAP).unwrap_or(usize::MAX);
        for _ in 0..cap / chunk.len() {
            log.append(&chunk).unwrap_or_else(|e| panic!("{e}"));
        }
        // Exactly the cap, nothing left out: no cut-off yet.
        assert_eq!(contents(&mut file).len(), cap);
        log.append(b"").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(contents(&mut file).len(), cap);
        for _ in 0..3 {
            log.append(&chunk).unwrap_or_else(|e| panic!("{e}"));
        }
        let text = contents(&mut file);
        assert_eq!(text.len(), cap + CUT_OFF.len());
        assert!(text.ends_with(CUT_OFF));
    }

    #[test]
    fn a_note_follows_an_unfinished_character_and_is_shown_as_text() {
        let mut file = tempfile::tempfile().unwrap_or_else(|e| panic!("{e}"));
        let writing = file.try_clone().unwrap_or_else(|e| panic!("{e}"));
        let mut log = StderrLog::new(writing);
        log.append(b"price: \xe2\x82")
            .unwrap_or_else(|e| panic!("{e}"));
        log.note("zotbox: guest trapped");
        log.append(b"\xac\n").unwrap_or_else(|e| panic!("{e}"));
        // A note quoting the author: its lines stay, its escapes do not.
        log.note("zotbox: guest failed (panicked at x: \u{1b}]52;c;cm0=\u{7})\n  0: f\tg");
        assert_eq!(
            contents(&mut file),
            "price: \\x{e2}\\x{82}zotbox: guest trapped\n\\x{ac}\n\
             zotbox: guest failed (panicked at x: \\u{1b}]52;c;cm0=\\u{7})\n  0: f\tg\n"
        );
    }
    /// Attack: an extension started again and again, each run writing its
    /// cap: every run appended another 8 MiB to one file. A log that has
    /// reached the cap is moved to `.1` (replacing it) before a run opens it.
    #[test]
    fn a_full_log_is_moved_aside_before_the_next_run() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("logs/ext-flood.log");
        let older = dir.path().join("logs/ext-flood.log.1");
        for run in 0..4u8 {
            let mut log =
                StderrLog::new(crate::runtime::open_log(&path).unwrap_or_else(|| panic!("no log")));
            let flood = vec![b'a' + run; 1024 * 1024];
            for _ in 0..9 {
                log.append(&flood).unwrap_or_else(|e| panic!("{e}"));
            }
            log.finish();
        }
        let size = |path: &std::path::Path| {
            std::fs::metadata(path)
                .unwrap_or_else(|e| panic!("{e}"))
                .len()
        };
        // Each file holds one run (the cap and the line that says so).
        let run = LOG_CAP + CUT_OFF.len() as u64;
        assert_eq!((size(&path), size(&older)), (run, run));
        let last = std::fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(last.first(), Some(&b'd'));
    }
}
