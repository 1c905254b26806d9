//! A guest's line as zot will read it, and the text in it zot prints.
//!
//! The bridge passes the guest's lines byte for byte and looks at them
//! quickly ([`zotbox_protocol::peek_borrowed`]: the first `type`, exact
//! keys). zot reads them with Go's `encoding/json`, which reads otherwise:
//! the last of two `type` keys wins, keys match in any case (`"Type"`,
//! `"meſſage"`), and a byte that is not UTF-8 becomes U+FFFD where serde
//! refuses the line. A guest could so show zot a frame the bridge never
//! saw (a `register_tool` that skipped the registration rules, a `notify`
//! that skipped escaping) and put on the user's terminal what clears it,
//! retitles the window or reads backwards. So:
//!
//! 1. **A quick test on every line** ([`suspect`]): a line of printable
//!    ASCII, with no escape but `\n`, `\t`, `\"`, `\\` and `\/`, holding one
//!    object whose own keys are lowercase, unescaped and each written once,
//!    is read the same by both and holds no character a terminal acts on.
//!    It passes as it came: every ordinary frame, at the cost of one pass
//!    over its bytes. (Else Go's last `NAME` would be a registration's
//!    name the registration rules never saw, and its last `id` not the
//!    bridge's first: an answer to one call would end another's deadline.)
//! 2. **Any other line is read as zot reads it** ([`canonical`]): bytes
//!    that are not UTF-8 replaced, the frame's keys folded as Go folds them
//!    (the last of a folded name wins), and written anew in that form, so
//!    the rest of the bridge, and zot, see the same frame. A line that
//!    does not parse (a lone surrogate, a number out of range, nesting past
//!    128) is dropped with a warning rather than passed unread.
//! 3. **What zot shows is escaped** ([`crate::text::shown_text`]: line
//!    breaks and tabs stay) in every string of such a frame, but for a
//!    `tool_result`, whose content is the model's data, passed as it is,
//!    and for registrations, which the registration rules check next
//!    (`registered`: a name with such a character is refused, not escaped).

use serde_json::{Map, Value};
use zotbox_protocol::zot_args::InReadOrder;

use crate::text::shown_text;

/// What becomes of one suspect line.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Canonical {
    /// zot skips it whatever it holds (not an object): it passes.
    AsIs,
    /// Passes as this line (without its newline).
    Rewritten(Vec<u8>),
    /// Does not reach zot, for this reason.
    Dropped(String),
}

/// Whether zot might read `line` otherwise than the bridge's quick look, or
/// find in it a character a terminal acts on (rule 1): one pass, minding
/// strings and depth. The frame's own keys are the ones the bridge decides
/// on (`type`, `id`, a registration's fields; deeper keys are data, a
/// schema's or a content block's), so a key of the frame is suspect when
/// Go might match it otherwise: written twice, with a capital or an escape.
/// So is anything after the frame on its line (a second value a streaming
/// reader would take as a frame of its own).
pub(crate) fn suspect(line: &[u8]) -> bool {
    /// Keys of a frame held for the repeat check; protocol frames have
    /// fewer, and a line with more is read the careful way.
    const MAX_KEYS: usize = 16;
    let mut keys: [&[u8]; MAX_KEYS] = [&[]; MAX_KEYS];
    let mut key_count = 0;
    let mut depth = 0usize;
    let mut string_start = None;
    // Whether the next string of the frame's own object is a key.
    let mut key_next = false;
    let mut frame_ended = false;
    let mut i = 0;
    while let Some(&byte) = line.get(i) {
        if !(0x20..0x80).contains(&byte) {
            return true;
        }
        match (string_start, byte) {
            (Some(_), b'\\') => {
                if depth == 1 && key_next {
                    return true;
                }
                if matches!(line.get(i + 1), Some(b'u' | b'r' | b'b' | b'f')) {
                    return true;
                }
                i += 1;
            }
            (Some(start), b'"') => {
                string_start = None;
                if depth == 1 && key_next {
                    key_next = false;
                    let key = &line[start + 1..i];
                    if key.iter().any(u8::is_ascii_uppercase)
                        || keys[..key_count].contains(&key)
                        || key_count == MAX_KEYS
                    {
                        return true;
                    }
                    keys[key_count] = key;
                    key_count += 1;
                }
            }
            (Some(_), _) => {}
            // Before and after the frame, only spaces: the frame is the
            // line's one value and an object.
            (None, _) if depth == 0 => match byte {
                b' ' => {}
                b'{' if !frame_ended => {
                    depth = 1;
                    key_next = true;
                }
                _ => return true,
            },
            (None, b'"') => string_start = Some(i),
            (None, b'{' | b'[') => depth += 1,
            (None, b'}' | b']') => {
                depth -= 1;
                frame_ended = depth == 0;
            }
            (None, b',') if depth == 1 => key_next = true,
            (None, _) => {}
        }
        i += 1;
    }
    false
}

/// `line` as zot reads it, with what it shows escaped (rules 2 and 3).
pub(crate) fn canonical(line: &[u8]) -> Canonical {
    let text = String::from_utf8_lossy(line);
    let frame = match serde_json::from_str::<InReadOrder>(&text) {
        Ok(InReadOrder(Value::Object(frame))) => frame,
        Ok(_) => return Canonical::AsIs,
        Err(err) => {
            return Canonical::Dropped(format!(
                "a line zot would read but zotbox cannot check ({err})"
            ));
        }
    };
    let mut folded = Map::with_capacity(frame.len());
    for (key, value) in frame {
        // As Go's decoder: the last key of a folded name wins.
        folded.insert(crate::guard::zot_args::folded(&key), value);
    }
    // A tool's result is data; registrations meet their own rules next
    // (`registered`), which refuse a name a plain escape would let by.
    let escaped = !matches!(
        folded.get("type").and_then(Value::as_str),
        Some("tool_result" | "hello" | "register_tool" | "register_command" | "subscribe")
    );
    if escaped {
        for value in folded.values_mut() {
            escape_strings(value);
        }
    }
    match serde_json::to_vec(&Value::Object(folded)) {
        Ok(line) => Canonical::Rewritten(line),
        Err(err) => Canonical::Dropped(format!("it cannot be written anew ({err})")),
    }
}

/// Escapes every string in `value`, at any depth (keys below the frame's
/// own stay as written: they are data, a schema's property names).
fn escape_strings(value: &mut Value) {
    match value {
        Value::String(text) => {
            if let std::borrow::Cow::Owned(safe) = shown_text(text) {
                *text = safe;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(escape_strings),
        Value::Object(map) => map.values_mut().for_each(escape_strings),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical_text(line: &[u8]) -> String {
        match canonical(line) {
            Canonical::Rewritten(line) => String::from_utf8_lossy(&line).into_owned(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ordinary_frames_pass_untouched() {
        for line in [
            r#"{"type":"tool_result","id":"1","content":[{"type":"text","text":"two\nlines \"quoted\" C:\\users"}]}"#,
            r#"{"type":"notify","level":"info","message":"done\tok"}"#,
            r#"{"type":"register_tool","name":"lint","schema":{"type":"object"}}"#,
        ] {
            assert!(!suspect(line.as_bytes()), "{line}");
        }
    }

    #[test]
    fn text_for_the_screen_is_escaped_and_every_other_field_kept() {
        // Attack: clear the screen, retitle the window, read backwards.
        let line = r#"{"type":"notify","level":"info\u001b[2J","message":"a\u001b]0;owned\u0007\r\u202ex\nb","extra":1}"#;
        assert!(suspect(line.as_bytes()));
        assert_eq!(
            canonical_text(line.as_bytes()),
            r#"{"type":"notify","level":"info\\u{1b}[2J","message":"a\\u{1b}]0;owned\\u{7}\\u{d}\\u{202e}x\nb","extra":1}"#
        );
        let line =
            r#"{"type":"command_response","id":"7","action":"display","display":"ok\u009b31m"}"#;
        assert_eq!(
            canonical_text(line.as_bytes()),
            r#"{"type":"command_response","id":"7","action":"display","display":"ok\\u{9b}31m"}"#
        );
        // Raw UTF-8 of a bidi override, and a C1 control.
        let line = "{\"type\":\"notify\",\"message\":\"\u{202e}x\u{9b}\"}";
        assert_eq!(
            canonical_text(line.as_bytes()),
            r#"{"type":"notify","message":"\\u{202e}x\\u{9b}"}"#
        );
    }

    /// Attack: frames zot reads otherwise than a quick look, each made to
    /// read as zot reads it.
    #[test]
    fn a_frame_is_read_as_zot_reads_it() {
        let cases: [(&[u8], &str); 6] = [
            // The last `type` wins in Go.
            (
                br#"{"type":"x","type":"notify","message":"\u001b[2J"}"#,
                r#"{"type":"notify","message":"\\u{1b}[2J"}"#,
            ),
            // The last as written: a key written again after another
            // spelling, not where it first stood.
            (
                br#"{"type":"x","TYPE":"y","type":"notify","message":"\u001b[2J"}"#,
                r#"{"type":"notify","message":"\\u{1b}[2J"}"#,
            ),
            // Keys match in any case, and fold as Unicode does.
            (
                br#"{"Type":"notify","Message":"\u001b[2J"}"#,
                r#"{"type":"notify","message":"\\u{1b}[2J"}"#,
            ),
            (
                "{\"type\":\"notify\",\"me\u{17f}\u{17f}age\":\"\\u001b[2J\"}".as_bytes(),
                r#"{"type":"notify","message":"\\u{1b}[2J"}"#,
            ),
            // A registration hidden from the bridge's registration rules:
            // now one they see (and refuse, for its name).
            (
                br#"{"type":"ready","TYPE":"register_tool","name":"\u001b[2J"}"#,
                r#"{"type":"register_tool","name":"\u001b[2J"}"#,
            ),
            // Bytes that are not UTF-8 read as U+FFFD, as Go reads them.
            (
                b"{\"type\":\"notify\",\"message\":\"\\u001b[2J\xff\"}",
                "{\"type\":\"notify\",\"message\":\"\\\\u{1b}[2J\u{fffd}\"}",
            ),
        ];
        for (line, expected) in cases {
            assert!(suspect(line), "{}", String::from_utf8_lossy(line));
            assert_eq!(canonical_text(line), expected);
        }
        // A line zot would read and serde cannot: dropped, not passed unread.
        let deep = format!(
            r#"{{"type":"notify","message":"\u001b","x":{}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        for line in [
            r#"{"type":"notify","message":"\u001b\ud800"}"#,
            r#"{"type":"notify","message":"\u001b","x":1e400}"#,
            deep.as_str(),
        ] {
            assert!(
                matches!(canonical(line.as_bytes()), Canonical::Dropped(_)),
                "{line:.80}"
            );
        }
    }

    /// Attack: plain ASCII frames a quick look reads otherwise than Go,
    /// each one suspect, so read as zot reads it. Without that, the
    /// bridge ends call `1`'s deadline (its first `id`) while zot gets an
    /// answer to `2`; and a registration's name is not the one the
    /// registration rules checked.
    #[test]
    fn the_frames_own_keys_are_read_as_go_reads_them() {
        let cases: [(&str, &str); 5] = [
            (
                r#"{"type":"tool_result","id":"1","id":"2","content":[]}"#,
                r#"{"type":"tool_result","id":"2","content":[]}"#,
            ),
            (
                r#"{"type":"tool_result","id":"1","ID":"2","content":[]}"#,
                r#"{"type":"tool_result","id":"2","content":[]}"#,
            ),
            (
                r#"{"type":"register_tool","name":"ok","Name":"other","schema":{}}"#,
                r#"{"type":"register_tool","name":"other","schema":{}}"#,
            ),
            // An escape that names no control character, in a key.
            (
                r#"{"type":"tool_result","id":"1","i\/d":"2"}"#,
                r#"{"type":"tool_result","id":"1","i/d":"2"}"#,
            ),
            // Keys deeper down are data: kept as written.
            (
                r#"{"type":"tool_result","id":"1","content":[{"Type":"text"}],"ID":"2"}"#,
                r#"{"type":"tool_result","id":"2","content":[{"Type":"text"}]}"#,
            ),
        ];
        for (line, expected) in cases {
            assert!(suspect(line.as_bytes()), "{line}");
            assert_eq!(canonical_text(line.as_bytes()), expected);
        }
        // A second value on the line, or a first that is no object: a
        // streaming reader would take the frame the bridge never looked at.
        for line in [
            r#"{"type":"notify","message":"a"}{"type":"register_tool","name":"x"}"#,
            r#"1{"type":"register_tool","name":"x"}"#,
            r#"[]{"type":"register_tool","name":"x"}"#,
        ] {
            assert!(suspect(line.as_bytes()), "{line}");
            assert!(
                matches!(canonical(line.as_bytes()), Canonical::Dropped(_)),
                "{line}"
            );
        }
        // What stays quick: nested keys, values that look like keys,
        // spaces around the frame, escapes in values.
        for line in [
            r#" {"type":"tool_result","id":"1","content":[{"type":"text","text":"type"}]} "#,
            r#"{"type":"register_tool","name":"a","schema":{"type":"object","properties":{"id":{},"ID":{}}}}"#,
            r#"{"type":"notify","message":"\"id\":\"2\" \\ \/"}"#,
        ] {
            assert!(!suspect(line.as_bytes()), "{line}");
        }
    }

    /// The keys of a JSON object, every one as written, in order.
    struct Keys(Vec<String>);

    impl<'de> serde::Deserialize<'de> for Keys {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct Visitor;
            impl<'de> serde::de::Visitor<'de> for Visitor {
                type Value = Keys;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Keys, A::Error> {
                    let mut keys = Vec::new();
                    while let Some((key, serde::de::IgnoredAny)) = map.next_entry::<String, _>()? {
                        keys.push(key);
                    }
                    Ok(Keys(keys))
                }
            }
            deserializer.deserialize_map(Visitor)
        }
    }

    /// Whatever line a guest writes, one that passes untouched reads the
    /// same to the bridge and to zot: the frame's own keys differ even when
    /// folded, so the bridge's `type` and `id` (its first) are Go's (its
    /// last), and no byte is one a terminal acts on. Lines are drawn from
    /// fragments that meet the edge cases (a deterministic generator: the
    /// same lines every run).
    #[test]
    fn a_line_that_passes_untouched_reads_the_same_to_bridge_and_zot() {
        const KEYS: &[&str] = &[
            "type",
            "type",
            "Type",
            "id",
            "id",
            "ID",
            "iD",
            "name",
            "NAME",
            "content",
            r"ty\u0070e",
            r"i\/d",
            "i/d",
            "me\u{17f}sage",
            "\u{212a}",
            "\\\"",
        ];
        const VALUES: &[&str] = &[
            r#""notify""#,
            r#""tool_result""#,
            r#""1""#,
            r#""2""#,
            "1",
            "true",
            "null",
            r#"{"type":"x","ID":1}"#,
            r#"["type",{"id":"3"}]"#,
            r#""a\nb""#,
            r#""\"id\":""#,
            r#""\u001b""#,
            "\"\t\"",
        ];
        const SPACES: &[&str] = &["", "", " ", "\t"];
        const TAILS: &[&str] = &["", "", "", " ", r#"{"type":"x"}"#, "1", "]"];
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |of: usize| {
            // xorshift64*: enough to mix the pieces.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % of
        };
        let mut passed = 0;
        for _ in 0..60_000 {
            let pairs: Vec<String> = (0..next(5))
                .map(|_| {
                    let space = SPACES[next(SPACES.len())];
                    let key = KEYS[next(KEYS.len())];
                    let value = VALUES[next(VALUES.len())];
                    format!("{space}\"{key}\"{space}:{space}{value}{space}")
                })
                .collect();
            let line = format!("{{{}}}{}", pairs.join(","), TAILS[next(TAILS.len())]);
            if suspect(line.as_bytes()) {
                continue;
            }
            assert!(line.bytes().all(|b| (0x20..0x80).contains(&b)), "{line}");
            let Ok(Value::Object(frame)) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            passed += 1;
            let Ok(Keys(keys)) = serde_json::from_str::<Keys>(&line) else {
                panic!("{line}");
            };
            let mut folded: Vec<String> = keys
                .iter()
                .map(|key| crate::guard::zot_args::folded(key))
                .collect();
            folded.sort();
            folded.dedup();
            assert_eq!(folded.len(), keys.len(), "{line}");
            let seen = zotbox_protocol::peek_borrowed(line.as_bytes());
            assert_eq!(
                seen.frame_type.as_deref(),
                frame.get("type").and_then(Value::as_str),
                "{line}"
            );
            if let Some(id) = frame.get("id").and_then(Value::as_str) {
                assert_eq!(seen.id.as_deref(), Some(id), "{line}");
            }
        }
        // The generator reaches lines that pass, not only suspect ones.
        assert!(passed > 1000, "{passed}");
    }

    /// A tool's result is the model's data: read as zot reads it, not escaped.
    #[test]
    fn a_tool_result_keeps_its_content() {
        let line =
            r#"{"type":"tool_result","id":"1","content":[{"type":"text","text":"a\r\nb\u001b"}]}"#;
        assert_eq!(canonical_text(line.as_bytes()), line);
        // Not a JSON object: zot skips it, so it passes.
        assert_eq!(canonical(b"[\"\\u001b\"]"), Canonical::AsIs);
    }
}
