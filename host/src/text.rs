//! Strings written by an author, made safe to show on a terminal.
//!
//! A manifest, a data file or a guest can put any character in a name, a
//! glob, a template or a reason. Printed raw, a backspace hides the text
//! before it (`"\b\b\b\bdocs/**"` shows as `docs/**` while the grant is
//! `**`), an escape sequence clears the screen or rewrites a line, and a
//! `\r` or `\n` forges a row of a table. [`shown`] escapes every character
//! that moves the cursor, changes how text is drawn, or reorders it, so
//! what a person reads is what the string holds. JSON escapes only the C0
//! controls itself and passes the rest raw (a C1 CSI, a bidi override, a
//! tag character): [`json`] writes every unsafe character as a `\uXXXX`
//! escape instead, for the audit log and every `--json` line alike.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

/// Whether `c` must not reach a terminal raw: C0 and C1 controls, DEL,
/// the line and paragraph separators, and the invisible characters that
/// reorder or hide text: the format characters (bidi overrides and
/// isolates, zero-width characters, the byte-order mark, the soft hyphen,
/// the tag characters that can spell a whole hidden sentence), variation
/// selectors, and the fillers that draw nothing.
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{0600}'..='\u{0605}'
                | '\u{061C}'
                | '\u{06DD}'
                | '\u{070F}'
                | '\u{08E2}'
                | '\u{115F}'..='\u{1160}'
                | '\u{17B4}'..='\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{2800}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{110BD}'
                | '\u{110CD}'
                | '\u{13430}'..='\u{1343F}'
                | '\u{1BCA0}'..='\u{1BCA3}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0000}'..='\u{E007F}'
                | '\u{E0100}'..='\u{E01EF}'
        )
}

/// Whether `text` holds any character [`shown`] would escape.
pub fn has_unsafe(text: &str) -> bool {
    text.chars().any(is_unsafe)
}

/// `text` with every unsafe character written as `\u{..}`, borrowed when
/// there is nothing to escape.
///
/// Idempotent (`shown(shown(x)) == shown(x)`): a message may be escaped
/// where it is made (a registration warning naming a guest's tool) and
/// again where it is printed, and still read the same. The price is that an
/// author's literal `\u{1b}` text looks like an escaped ESC, which is
/// harmless: both are text.
pub fn shown(text: &str) -> Cow<'_, str> {
    if !has_unsafe(text) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// [`shown`] for a body of text meant to span lines (a tool's output, a
/// skill, a prompt): `\n` and `\t` stay as they are, every other unsafe
/// character is escaped. Never use it for a name, a cell or a one-line
/// message, where a newline forges a row.
pub fn shown_text(text: &str) -> Cow<'_, str> {
    let unsafe_here = |c: char| is_unsafe(c) && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_here) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_here(c) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A path as [`shown`] writes text, each byte of its name that is not
/// UTF-8 written as `\x{ff}`: a file named with such a byte and one named
/// with the replacement character `�` read differently, as they are.
pub fn shown_path(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    let mut out = String::new();
    for chunk in path.as_os_str().as_bytes().utf8_chunks() {
        out.push_str(&shown(chunk.valid()));
        for byte in chunk.invalid() {
            let _ = write!(out, "\\x{{{byte:x}}}");
        }
    }
    out
}

/// The first `max` characters of `text`, and `…` when there were more.
pub fn clipped(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// A [`fmt::Display`] of a string through [`shown`], for `format!` arguments.
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a>(pub &'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&shown(self.0))
    }
}

/// A writer for diagnostics on a terminal: every record written through it
/// is one line, with the unsafe characters of its text escaped (log lines
/// quote names, paths and errors an author wrote). A record's final `\n`
/// is kept.
pub struct EscapedLines<W>(pub W);

impl<W: std::io::Write> std::io::Write for EscapedLines<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let (body, end) = match text.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (&*text, ""),
        };
        let line = format!("{}{end}", shown(body));
        self.0.write_all(line.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Bytes an author wrote (an extension's stderr), shown as text one chunk
/// at a time: through [`shown_text`], so lines and tabs stay and every
/// other unsafe character is escaped, and each byte that is not UTF-8
/// written as `\x{ff}`. A character split between two chunks is held until
/// the next one (or [`ShownChunks::finish`]), so it shows whole.
#[derive(Debug, Default)]
pub struct ShownChunks {
    /// The start of a character the last chunk cut off (at most 3 bytes).
    pending: Vec<u8>,
}

impl ShownChunks {
    /// `bytes`, after what the last chunk left, as text; the start of a
    /// character cut off at their end is kept for the next chunk.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        let mut held = std::mem::take(&mut self.pending);
        held.extend_from_slice(bytes);
        let whole = held.len() - cut_off_at_end(&held);
        self.pending = held[whole..].to_vec();
        shown_bytes(&held[..whole])
    }

    /// What the last chunk left cut off, as bytes that are not UTF-8.
    pub fn finish(&mut self) -> String {
        shown_bytes(&std::mem::take(&mut self.pending))
    }
}

/// How many bytes at the end of `bytes` begin a character they do not
/// finish (0 to 3).
fn cut_off_at_end(bytes: &[u8]) -> usize {
    (1..=bytes.len().min(3))
        .rev()
        .find(|&len| {
            std::str::from_utf8(&bytes[bytes.len() - len..])
                .is_err_and(|err| err.valid_up_to() == 0 && err.error_len().is_none())
        })
        .unwrap_or(0)
}

/// `bytes` through [`shown_text`], each byte that is not UTF-8 as `\x{ff}`.
fn shown_bytes(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        text.push_str(&shown_text(chunk.valid()));
        for byte in chunk.invalid() {
            let _ = write!(text, "\\x{{{byte:x}}}");
        }
    }
    text
}

/// A writer showing what passes through it as [`ShownChunks`] does.
pub struct ShownStream<W> {
    out: W,
    chunks: ShownChunks,
}

impl<W: std::io::Write> ShownStream<W> {
    /// Writes what passes through to `out`.
    pub fn new(out: W) -> Self {
        Self {
            out,
            chunks: ShownChunks::default(),
        }
    }

    /// Writes what a last write left cut off and flushes.
    ///
    /// # Errors
    ///
    /// When `out` refuses the write.
    pub fn finish(&mut self) -> std::io::Result<()> {
        let rest = self.chunks.finish();
        self.out.write_all(rest.as_bytes())?;
        self.out.flush()
    }
}

impl<W: std::io::Write> std::io::Write for ShownStream<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = self.chunks.push(buf);
        self.out.write_all(text.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// `value` as one line of JSON, every character [`is_unsafe`] names
/// written as a `\uXXXX` escape (a surrogate pair past the BMP): the same
/// values for a JSON reader, but the line holds no C1 control, bidi
/// override, zero-width or tag character and no line separator that a
/// terminal (`tail -f`, `zotbox --json list`) would act on or a line
/// splitter break on. Such characters occur only inside strings, where the
/// escape means them.
///
/// # Errors
///
/// When `value` does not serialize (a map with keys that are not strings).
pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    let text = serde_json::to_string(value)?;
    // The usual line: kept as it is, not copied.
    if !has_unsafe(&text) {
        return Ok(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_unsafe(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// A cap or a limit for people: `100 MiB` when it is a whole number of
/// mebibytes, else `1024 bytes`.
pub fn limit_size(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// An error and its causes, `a: b: c`, as `zotbox` prints an error chain;
/// a cause whose text the previous one already holds is not repeated.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![error.to_string()];
    let mut source = error.source();
    while let Some(current) = source {
        let text = current.to_string();
        if parts.last().is_none_or(|last| !last.contains(&text)) {
            parts.push(text);
        }
        source = current.source();
    }
    parts.join(": ")
}

/// `bytes` as lowercase hexadecimal: how digests are written in zotbox's
/// files and messages.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes_what_serde_json_passes_raw_and_reads_back_the_same() {
        // Attack: an author's string with a C1 CSI, a right-to-left
        // override, a zero-width space, a left-to-right isolate and a tag
        // character; serde_json wrote all five raw into `--json` output.
        let text = "a\u{9b}2J\u{202e}\u{200b}\u{2066}\u{E0041}z\u{1b}é";
        let line = json(&serde_json::json!({"detail": text})).unwrap_or_default();
        assert_eq!(
            line,
            r#"{"detail":"a\u009b2J\u202e\u200b\u2066\udb40\udc41z\u001bé"}"#
        );
        let back: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        assert_eq!(back["detail"], text);
    }

    #[test]
    fn what_a_terminal_would_act_on_is_escaped() {
        let cases = [
            // Nothing to do: borrowed as is.
            ("docs/**", "docs/**"),
            ("café ünïcode", "café ünïcode"),
            // Backspaces that would hide `docs/` on screen.
            ("\u{8}\u{8}docs/**", "\\u{8}\\u{8}docs/**"),
            // Clear screen, and an OSC title change ended by BEL.
            ("\u{1b}[2Jx", "\\u{1b}[2Jx"),
            ("\u{1b}]0;pwned\u{7}", "\\u{1b}]0;pwned\\u{7}"),
            // Row forgery.
            ("a\r\nb", "a\\u{d}\\u{a}b"),
            // C1 control (single-byte CSI) and DEL.
            ("\u{9b}2J\u{7f}", "\\u{9b}2J\\u{7f}"),
            // A right-to-left override that reorders what follows.
            ("txt\u{202e}exe.sh", "txt\\u{202e}exe.sh"),
            // Zero-width and line separators.
            ("a\u{200b}b\u{2028}c", "a\\u{200b}b\\u{2028}c"),
            // Backslashes are text.
            ("C:\\dir", "C:\\dir"),
            // Attack: a description that shows as `lint` and holds a
            // sentence in tag characters, which the model reads too.
            (
                "lint\u{E0020}\u{E0061}\u{E006E}\u{E0064}",
                "lint\\u{e0020}\\u{e0061}\\u{e006e}\\u{e0064}",
            ),
            // Other characters that draw nothing: a soft hyphen, the
            // Mongolian vowel separator, a grapheme joiner, a variation
            // selector, a Hangul filler, the blank braille pattern.
            (
                "echo ok\u{AD}\u{180E}\u{34F}\u{FE0F}\u{3164}\u{2800}",
                "echo ok\\u{ad}\\u{180e}\\u{34f}\\u{fe0f}\\u{3164}\\u{2800}",
            ),
            // Letters of every script, and emoji without selectors, stay.
            ("日本語 ελληνικά 🙂", "日本語 ελληνικά 🙂"),
        ];
        for (raw, expected) in cases {
            assert_eq!(shown(raw), expected, "{raw:?}");
            assert_eq!(Shown(raw).to_string(), expected, "{raw:?}");
            assert!(!has_unsafe(&shown(raw)), "{raw:?}");
            // Escaping twice changes nothing.
            assert_eq!(shown(&shown(raw)), expected, "{raw:?}");
        }
        assert!(matches!(shown("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_path_shows_the_bytes_that_are_not_utf8() {
        use std::os::unix::ffi::OsStrExt as _;
        let raw = std::path::Path::new(std::ffi::OsStr::from_bytes(b"a/bad\xff\xfename\x1b"));
        assert_eq!(shown_path(raw), "a/bad\\x{ff}\\x{fe}name\\u{1b}");
        // The replacement character itself is text, and reads otherwise.
        assert_eq!(
            shown_path(std::path::Path::new("bad\u{fffd}")),
            "bad\u{fffd}"
        );
    }

    #[test]
    fn bodies_of_text_keep_their_lines_and_lose_their_escapes() {
        let cases = [
            ("line one\n\tline two\n", "line one\n\tline two\n"),
            ("red \u{1b}[31mtext\r", "red \\u{1b}[31mtext\\u{d}"),
            ("\u{202e}gnp.exe", "\\u{202e}gnp.exe"),
        ];
        for (raw, expected) in cases {
            assert_eq!(shown_text(raw), expected, "{raw:?}");
        }
    }

    #[test]
    fn a_stream_is_shown_whole_however_it_is_cut() {
        use std::io::Write as _;
        // An extension's stderr: a screen clear, a character of three
        // bytes, a byte that is not UTF-8, and one cut off at the end.
        let raw: &[u8] = b"ok\n\x1b[2J\xe2\x82\xac \xff\ttab\r\n\xe2\x82";
        let expected = "ok\n\\u{1b}[2J\u{20ac} \\x{ff}\ttab\\u{d}\n\\x{e2}\\x{82}";
        for size in 1..=raw.len() {
            let mut out = ShownStream::new(Vec::new());
            for chunk in raw.chunks(size) {
                out.write_all(chunk).unwrap_or_else(|e| panic!("{e}"));
            }
            out.finish().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(String::from_utf8_lossy(&out.out), expected, "{size}");
        }
    }

    #[test]
    fn log_records_stay_one_line_each() {
        use std::io::Write as _;
        let mut out = EscapedLines(Vec::new());
        out.write_all(b"WARN skipped `\x1b[2Jevil\nforged`\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            String::from_utf8_lossy(&out.0),
            "WARN skipped `\\u{1b}[2Jevil\\u{a}forged`\n"
        );
    }
}
