//! A lenient look at a line that may not decode: its top-level `type` and `id`.
//!
//! A peer that cannot decode a request must still answer it (zot allows a
//! tool call whose check goes unanswered), and the answer needs the
//! request's `id`. [`peek`] finds the string values of the top-level keys
//! `type` and `id` in the raw bytes of a line without building the value:
//!
//! - nested objects and arrays are skipped by bracket depth (strings and
//!   escapes respected), so nesting past any parser's recursion limit costs
//!   nothing and a `type` inside a nested object never counts;
//! - bytes that are not UTF-8 and escapes that name no character (a lone
//!   surrogate `\ud800`) are tolerated: they become U+FFFD in the value found
//!   and do not stop the scan;
//! - the first occurrence of a key wins (zot writes `type` and `id` first,
//!   and a line cut at the frame cap keeps only its start);
//! - the work is linear in the line (a byte is looked at once, twice in a
//!   string with escapes), with no recursion and no allocation
//!   beyond the two values found, whatever the line holds;
//! - a line cut short, or broken past some point, yields what was found
//!   before it.

use std::borrow::Cow;

/// What [`peek`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peek {
    /// The string value of the top-level `type`, if there is one.
    pub frame_type: Option<String>,
    /// The string value of the top-level `id`, if there is one.
    pub id: Option<String>,
}

impl Peek {
    /// Whether the top-level `type` is `frame_type`.
    pub fn is(&self, frame_type: &str) -> bool {
        self.frame_type.as_deref() == Some(frame_type)
    }
}

/// What [`peek_borrowed`] found: a value that is a plain string on the line
/// (no escape, valid UTF-8, as nearly every one is) is borrowed from it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeekRef<'a> {
    /// The string value of the top-level `type`, if there is one.
    pub frame_type: Option<Cow<'a, str>>,
    /// The string value of the top-level `id`, if there is one.
    pub id: Option<Cow<'a, str>>,
}

impl PeekRef<'_> {
    /// The same values, owned.
    pub fn into_owned(self) -> Peek {
        Peek {
            frame_type: self.frame_type.map(Cow::into_owned),
            id: self.id.map(Cow::into_owned),
        }
    }
}

/// Finds the top-level `type` and `id` of the JSON object on `line`, as
/// leniently as the module docs say. A line that is not an object yields
/// nothing.
pub fn peek(line: &[u8]) -> Peek {
    peek_borrowed(line).into_owned()
}

/// [`peek`], borrowing what it can from `line`: what a relay of every line
/// uses, so that looking at a frame allocates nothing.
pub fn peek_borrowed(line: &[u8]) -> PeekRef<'_> {
    if let Some((frame_type, id)) = common_shape(line) {
        return PeekRef {
            frame_type: Some(Cow::Borrowed(frame_type)),
            id: Some(Cow::Borrowed(id)),
        };
    }
    full_scan(line)
}

/// [`peek_borrowed`] by walking the object key by key.
fn full_scan(line: &[u8]) -> PeekRef<'_> {
    let mut scan = Scanner { bytes: line, at: 0 };
    let mut found = PeekRef::default();
    scan.whitespace();
    if !scan.eat(b'{') {
        return found;
    }
    loop {
        scan.whitespace();
        if scan.peek_byte() != Some(b'"') {
            // `}`, the end of the line, or something no object holds.
            return found;
        }
        let key = scan.key();
        scan.whitespace();
        if !scan.eat(b':') {
            return found;
        }
        scan.whitespace();
        let slot = match key {
            Key::Type if found.frame_type.is_none() => Some(&mut found.frame_type),
            Key::Id if found.id.is_none() => Some(&mut found.id),
            _ => None,
        };
        match slot {
            Some(slot) if scan.peek_byte() == Some(b'"') => *slot = scan.string(),
            _ => scan.skip_value(),
        }
        if found.frame_type.is_some() && found.id.is_some() {
            return found;
        }
        scan.whitespace();
        if !scan.eat(b',') {
            return found;
        }
    }
}

/// The `type` and `id` of a line that begins `{"type":"…","id":"…"`, both
/// plain strings: how every writer of frames begins a request and its
/// answer, so the relay of each frame finds them with two searches. Any
/// other line (`None`) takes the full scan, which finds the same values
/// on this one.
fn common_shape(line: &[u8]) -> Option<(&str, &str)> {
    let rest = line.strip_prefix(b"{\"type\":\"")?;
    let (frame_type, rest) = plain_prefix(rest)?;
    let rest = rest.strip_prefix(b",\"id\":\"")?;
    let (id, _) = plain_prefix(rest)?;
    Some((frame_type, id))
}

/// The text of a plain string (UTF-8, no escape) that `rest` begins after
/// its opening quote, and what follows its closing quote.
fn plain_prefix(rest: &[u8]) -> Option<(&str, &[u8])> {
    let end = memchr::memchr2(b'"', b'\\', rest)?;
    if rest[end] != b'"' {
        return None;
    }
    Some((std::str::from_utf8(&rest[..end]).ok()?, &rest[end + 1..]))
}

/// The keys that matter; every other key is `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Type,
    Id,
    Other,
}

impl Key {
    /// The key a decoded name is.
    fn named(name: &[u8]) -> Self {
        match name {
            b"type" => Self::Type,
            b"id" => Self::Id,
            _ => Self::Other,
        }
    }
}

struct Scanner<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn peek_byte(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        if self.peek_byte() == Some(byte) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn whitespace(&mut self) {
        while matches!(self.peek_byte(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// A key at the opening quote. Keys are compared decoded (`"\u0069d"` is
    /// `id`, as for a JSON parser), but only the first few bytes are kept.
    fn key(&mut self) -> Key {
        // Compared as bytes: the keys that matter are ASCII, so a run that
        // is not UTF-8 is simply some other key.
        if let Some((bytes, end)) = self.plain_run() {
            self.at = end;
            return Key::named(bytes);
        }
        const LONGEST: usize = 4;
        let mut decoded = [0u8; LONGEST + 1];
        let mut len = 0;
        self.string_with(|c| {
            let mut utf8 = [0u8; 4];
            for &b in c.encode_utf8(&mut utf8).as_bytes() {
                if len < decoded.len() {
                    decoded[len] = b;
                }
                len += 1;
            }
        });
        // Longer than any key that matters: only its first bytes were kept.
        if len > LONGEST {
            return Key::Other;
        }
        Key::named(&decoded[..len])
    }

    /// A string value at the opening quote, decoded; `None` when the line
    /// ends inside it (a value cut short is no value).
    fn string(&mut self) -> Option<Cow<'a, str>> {
        if let Some((text, end)) = self.plain_string() {
            self.at = end;
            return Some(Cow::Borrowed(text));
        }
        let mut out = Vec::new();
        let closed = self.string_with(|c| {
            let mut utf8 = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
        });
        closed.then(|| Cow::Owned(String::from_utf8_lossy(&out).into_owned()))
    }

    /// The string at the opening quote when it is plain, UTF-8 with no
    /// escape up to its closing quote (almost every key and value zot
    /// writes): its text and the position past that quote, found without
    /// decoding it character by character. `None` for any other string.
    fn plain_string(&self) -> Option<(&'a str, usize)> {
        let (bytes, end) = self.plain_run()?;
        Some((std::str::from_utf8(bytes).ok()?, end))
    }

    /// The bytes of the string at the opening quote when no escape comes
    /// before its closing quote, and the position past that quote.
    fn plain_run(&self) -> Option<(&'a [u8], usize)> {
        let bytes: &'a [u8] = self.bytes;
        let start = self.at + 1;
        let rest = bytes.get(start..)?;
        let run = memchr::memchr2(b'"', b'\\', rest)?;
        if rest[run] != b'"' {
            return None;
        }
        Some((&rest[..run], start + run + 1))
    }

    /// Moves past a string from its opening quote to past its closing one,
    /// or to the end of the line, exactly as [`Self::string_with`] does but
    /// without decoding: a backslash always consumes the byte after it, and
    /// no escape holds a quote or a backslash past that byte.
    fn skip_string(&mut self) {
        self.at += 1;
        while let Some(rest) = self.bytes.get(self.at..) {
            let Some(run) = memchr::memchr2(b'"', b'\\', rest) else {
                self.at = self.bytes.len();
                return;
            };
            self.at += run + 1;
            if rest[run] == b'"' {
                return;
            }
            self.at = (self.at + 1).min(self.bytes.len());
        }
    }

    /// Walks a string from its opening quote to past its closing one, handing
    /// each character to `each`; false when the line ends first. Raw bytes
    /// that are not UTF-8 are passed on as U+FFFD, as are escapes that name
    /// no character.
    fn string_with(&mut self, mut each: impl FnMut(char)) -> bool {
        self.at += 1;
        loop {
            let rest = &self.bytes[self.at.min(self.bytes.len())..];
            // The run of plain bytes up to the next quote or backslash.
            let run = memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
            for chunk in rest[..run].utf8_chunks() {
                chunk.valid().chars().for_each(&mut each);
                if !chunk.invalid().is_empty() {
                    each(char::REPLACEMENT_CHARACTER);
                }
            }
            self.at += run;
            match self.peek_byte() {
                None => return false,
                Some(b'"') => {
                    self.at += 1;
                    return true;
                }
                Some(_) => {
                    self.at += 1;
                    match self.escape() {
                        Some(c) => each(c),
                        None if self.at >= self.bytes.len() => return false,
                        None => each(char::REPLACEMENT_CHARACTER),
                    }
                }
            }
        }
    }

    /// The character of an escape, the backslash already consumed.
    fn escape(&mut self) -> Option<char> {
        let byte = self.peek_byte()?;
        self.at += 1;
        match byte {
            b'"' => Some('"'),
            b'\\' => Some('\\'),
            b'/' => Some('/'),
            b'b' => Some('\u{8}'),
            b'f' => Some('\u{c}'),
            b'n' => Some('\n'),
            b'r' => Some('\r'),
            b't' => Some('\t'),
            b'u' => {
                let high = self.hex4()?;
                if !(0xD800..0xDC00).contains(&high) {
                    return char::from_u32(high);
                }
                // A high surrogate counts only with a low one right after it.
                let save = self.at;
                if self.bytes.get(self.at..self.at + 2) == Some(&b"\\u"[..]) {
                    self.at += 2;
                    if let Some(low) = self.hex4()
                        && (0xDC00..0xE000).contains(&low)
                    {
                        return char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00));
                    }
                }
                self.at = save;
                None
            }
            _ => None,
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.bytes.get(self.at..self.at + 4)?;
        let text = std::str::from_utf8(digits).ok()?;
        let value = u32::from_str_radix(text, 16).ok()?;
        self.at += 4;
        Some(value)
    }

    /// Skips one value of any kind: a string, a nested object or array (by
    /// depth, strings respected), or a scalar up to the next delimiter.
    fn skip_value(&mut self) {
        let mut depth = 0usize;
        while let Some(byte) = self.peek_byte() {
            match byte {
                b'"' => {
                    self.skip_string();
                    if depth == 0 {
                        return;
                    }
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    if depth == 0 {
                        return;
                    }
                    depth -= 1;
                    if depth == 0 {
                        self.at += 1;
                        return;
                    }
                }
                b',' | b' ' | b'\t' | b'\n' | b'\r' if depth == 0 => return,
                _ => {}
            }
            self.at += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(frame_type: Option<&str>, id: Option<&str>) -> Peek {
        Peek {
            frame_type: frame_type.map(str::to_owned),
            id: id.map(str::to_owned),
        }
    }

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn plain_values_are_borrowed_and_escaped_ones_decoded() {
        let seen = peek_borrowed(br#"{"type":"tool_call","id":"a\u0062c"}"#);
        assert!(matches!(seen.frame_type, Some(Cow::Borrowed("tool_call"))));
        assert!(matches!(&seen.id, Some(Cow::Owned(id)) if id == "abc"));
        assert_eq!(seen.into_owned(), found(Some("tool_call"), Some("abc")));
    }

    #[test]
    fn the_common_shape_finds_what_the_full_scan_finds() {
        let lines: [&[u8]; 12] = [
            br#"{"type":"command_invoked","id":"7","name":"hello-noop","args":""}"#,
            br#"{"type":"command_response","id":"7","action":"noop"}"#,
            br#"{"type":"x","id":"""#,
            br#"{"type":"","id":"8"}"#,
            // Each of these leaves the shortcut for the full scan.
            br#"{"type":"x","id":"a\u0062c"}"#,
            br#"{"type":"x\n","id":"9"}"#,
            br#"{"type":"x","id":"2"#,
            br#"{"type":"x","id":9}"#,
            br#"{"type":"x", "id":"10"}"#,
            br#"{"type":"x","ids":"11","id":"12"}"#,
            b"{\"type\":\"x\",\"id\":\"\xff\"}",
            b"{\"type\":\"\xfe\",\"id\":\"13\"}",
        ];
        for line in lines {
            let shown = String::from_utf8_lossy(line);
            assert_eq!(peek_borrowed(line), full_scan(line), "{shown}");
        }
        let taken = common_shape(lines[0]);
        assert_eq!(taken, Some(("command_invoked", "7")));
        assert_eq!(
            common_shape(lines[4]),
            None,
            "an escape leaves the shortcut"
        );
    }

    #[test]
    fn finds_type_and_id_however_the_line_is_broken() {
        let deep = nested(200);
        let huge = nested(100_000);
        let cases: Vec<(&str, Vec<u8>, Peek)> = vec![
            (
                "a plain frame",
                br#"{"type":"event_intercept","id":"7","event":"tool_call"}"#.to_vec(),
                found(Some("event_intercept"), Some("7")),
            ),
            (
                "arguments nested 200 deep, past serde_json's recursion limit",
                format!(r#"{{"type":"event_intercept","id":"8","tool_args":{{"command":{deep}}}}}"#)
                    .into_bytes(),
                found(Some("event_intercept"), Some("8")),
            ),
            (
                "`id` after a huge nested value",
                format!(r#"{{"type":"tool_call","args":{huge},"id":"9"}}"#).into_bytes(),
                found(Some("tool_call"), Some("9")),
            ),
            (
                "a 0xFF byte in a string before the id",
                [
                    &br#"{"type":"event_intercept","tool_args":{"command":"rm "#[..],
                    &[0xFF, 0xFE],
                    br#""},"id":"10"}"#,
                ]
                .concat(),
                found(Some("event_intercept"), Some("10")),
            ),
            (
                "a lone surrogate before the id",
                br#"{"type":"event_intercept","tool_args":{"command":"\ud800"},"id":"11"}"#
                    .to_vec(),
                found(Some("event_intercept"), Some("11")),
            ),
            (
                "a lone surrogate inside the id itself",
                br#"{"type":"event_intercept","id":"a\ud800b"}"#.to_vec(),
                found(Some("event_intercept"), Some("a\u{FFFD}b")),
            ),
            (
                "a surrogate pair and escapes in the id",
                br#"{"id":"\ud83d\ude00\"\\\n","type":"x"}"#.to_vec(),
                found(Some("x"), Some("\u{1F600}\"\\\n")),
            ),
            (
                "keys in any order, spaces around everything",
                b" { \"id\" : \"12\" , \"event\" : \"tool_call\" , \"type\" : \"event_intercept\" } "
                    .to_vec(),
                found(Some("event_intercept"), Some("12")),
            ),
            (
                "a `type` inside a nested object does not count",
                br#"{"tool_args":{"type":"shutdown","id":"x"},"type":"event_intercept","id":"13"}"#
                    .to_vec(),
                found(Some("event_intercept"), Some("13")),
            ),
            (
                "a `type` inside an array does not count",
                br#"{"a":[{"type":"no"}],"id":"14"}"#.to_vec(),
                found(None, Some("14")),
            ),
            (
                "duplicate keys: the first wins",
                br#"{"type":"event_intercept","id":"15","id":"16","type":"tool_call"}"#.to_vec(),
                found(Some("event_intercept"), Some("15")),
            ),
            (
                "an escaped key is the key it spells",
                br#"{"\u0074ype":"event_intercept","\u0069d":"17"}"#.to_vec(),
                found(Some("event_intercept"), Some("17")),
            ),
            (
                "keys that only start like `type` or `id`",
                br#"{"types":"a","idx":"b","ty":"c","i":"d"}"#.to_vec(),
                found(None, None),
            ),
            (
                "a brace and a quote inside a skipped string",
                br#"{"text":"} \" {","type":"event_intercept","id":"18"}"#.to_vec(),
                found(Some("event_intercept"), Some("18")),
            ),
            (
                "an escaped backslash right before a skipped string's closing quote",
                br#"{"text":"a\\","path":"\\\"}\\","id":"23"}"#.to_vec(),
                found(None, Some("23")),
            ),
            (
                "escapes of every kind in a skipped string",
                br#"{"text":"\u00e9\ud83d\ude00\ud800\u12\q\/\b","type":"x","id":"24"}"#.to_vec(),
                found(Some("x"), Some("24")),
            ),
            (
                "a line ending in a backslash inside a skipped string",
                br#"{"type":"x","text":"abc\"#.to_vec(),
                found(Some("x"), None),
            ),
            (
                "scalars of every kind are skipped",
                br#"{"step":-1.5e3,"ok":true,"no":null,"id":"19"}"#.to_vec(),
                found(None, Some("19")),
            ),
            (
                "a numeric id is no string id",
                br#"{"type":"event_intercept","id":20}"#.to_vec(),
                found(Some("event_intercept"), None),
            ),
            (
                "a line cut short after the id (the head of a line over the cap)",
                br#"{"type":"event_intercept","id":"21","tool_args":{"command":"xxxxxx"#.to_vec(),
                found(Some("event_intercept"), Some("21")),
            ),
            (
                "a line cut inside the id",
                br#"{"type":"event_intercept","id":"2"#.to_vec(),
                found(Some("event_intercept"), None),
            ),
            (
                "garbage after what was found",
                br#"{"type":"event_intercept" ]]] "id":"22"}"#.to_vec(),
                found(Some("event_intercept"), None),
            ),
            ("not an object", br#"["type","id"]"#.to_vec(), found(None, None)),
            ("an empty line", Vec::new(), found(None, None)),
            ("invalid bytes only", vec![0xFF; 64], found(None, None)),
        ];
        for (what, line, expected) in cases {
            assert_eq!(peek(&line), expected, "{what}");
        }
    }

    #[test]
    fn an_unclosed_nesting_is_scanned_to_the_end_without_recursion() {
        // A million opening brackets: one pass, no stack, nothing found after.
        let line = format!(
            r#"{{"type":"event_intercept","a":{}"#,
            "[".repeat(1_000_000)
        );
        assert_eq!(peek(line.as_bytes()), found(Some("event_intercept"), None));
    }
}
