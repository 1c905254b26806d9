//! What zot prints on the user's terminal from a guest's frame: a
//! `notify`'s `level` and `message`, a `command_response`'s `display`.
//!
//! The bridge passes frames byte for byte, but these two carry text a guest
//! wrote for the screen, where an escape sequence clears it, retitles the
//! window or forges a line from zotbox, and a bidi override makes text
//! read backwards. They are escaped as the library escapes what it shows
//! ([`crate::text`]): the message and the display keep their line breaks
//! and tabs (a body of text), the level keeps nothing (one word). A frame
//! with nothing to escape, or one that is not a JSON object (zot skips
//! it), passes as it came; otherwise it is written anew with every other
//! field as it was.

use std::borrow::Cow;

use serde_json::Value;

use crate::text::{shown, shown_text};

/// Whether a frame of `frame_type` is looked at here.
pub(crate) fn looks_at(frame_type: &str) -> bool {
    matches!(frame_type, "notify" | "command_response")
}

/// `line` with its shown text escaped, when anything needed it.
pub(crate) fn escaped(line: &[u8]) -> Option<Vec<u8>> {
    let Ok(Value::Object(mut frame)) = serde_json::from_slice::<Value>(line) else {
        return None;
    };
    let mut changed = false;
    for (field, body) in [("message", true), ("display", true), ("level", false)] {
        let Some(Value::String(text)) = frame.get_mut(field) else {
            continue;
        };
        let safe = if body { shown_text(text) } else { shown(text) };
        if let Cow::Owned(safe) = safe {
            *text = safe;
            changed = true;
        }
    }
    if !changed {
        return None;
    }
    serde_json::to_vec(&frame).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped_text(line: &str) -> Option<String> {
        escaped(line.as_bytes()).map(|line| String::from_utf8_lossy(&line).into_owned())
    }

    #[test]
    fn text_for_the_screen_is_escaped_and_every_other_field_kept() {
        // Attack: clear the screen, retitle the window, read backwards.
        assert_eq!(
            escaped_text(
                r#"{"type":"notify","level":"info\u001b[2J","message":"a\u001b]0;owned\u0007\r\u202ex\nb\tc","extra":"\u001b"}"#
            )
            .as_deref(),
            Some(
                r#"{"type":"notify","level":"info\\u{1b}[2J","message":"a\\u{1b}]0;owned\\u{7}\\u{d}\\u{202e}x\nb\tc","extra":"\u001b"}"#
            )
        );
        assert_eq!(
            escaped_text(
                r#"{"type":"command_response","id":"7","action":"display","display":"ok\u009b31m"}"#
            )
            .as_deref(),
            Some(
                r#"{"type":"command_response","id":"7","action":"display","display":"ok\\u{9b}31m"}"#
            )
        );
        // Control: plain text, line breaks included, and what zot skips
        // anyway pass as they came.
        for line in [
            r#"{"type":"notify","level":"info","message":"two\nlines, °C"}"#,
            r#"{"type":"command_response","id":"7","action":"prompt","prompt":"\u001b"}"#,
            r#"{"type":"notify","message":"#,
            r#"["notify"]"#,
        ] {
            assert_eq!(escaped_text(line), None, "{line}");
        }
    }
}
