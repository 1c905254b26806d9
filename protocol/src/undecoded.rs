//! A line that yielded no frame, and the answer still owed for it.
//!
//! zot allows a tool call whose `event_intercept` is not answered within 5 s:
//! for a guard, silence is consent. So a peer that cannot decode a request
//! still answers it, by the `id` a lenient [`peek`](crate::peek()) found:
//!
//! - an `event_intercept` gets a **block** that says why;
//! - a `tool_call` gets an error result, a `command_invoked` an error
//!   response, so neither waits out its deadline;
//! - anything else (one-way frames, or a line without a string `id`) has no
//!   answer; the peer logs it and goes on.

use crate::codec::DecodeError;
use crate::frame::{CommandResponse, Content, ExtensionFrame, InterceptResponse, ToolResult};
use crate::peek::Peek;

/// A line that did not yield a frame: why, and what a lenient look at it found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error}")]
pub struct Undecoded {
    /// Why the line did not decode.
    pub error: DecodeError,
    /// Its top-level `type` and `id`, found without decoding it.
    pub peek: Peek,
}

impl Undecoded {
    /// The answer owed for this line when it was a request, written as from
    /// `reader` (`zotbox`, or ``extension `guard` ``): a block for a check,
    /// an error for a tool call or a command. `None` when the line is no
    /// request or carries no string `id` to answer.
    pub fn answer(&self, reader: &str) -> Option<ExtensionFrame> {
        let id = self.peek.id.clone()?;
        let cause = self.error.cause();
        let frame_type = self.peek.frame_type.as_deref()?;
        let why = match frame_type {
            "event_intercept" => {
                format!("{reader} could not read this check ({cause}); blocked to be safe")
            }
            "tool_call" => format!("{reader} could not read this tool call ({cause})"),
            "command_invoked" => format!("{reader} could not read this command ({cause})"),
            _ => return None,
        };
        failed_request(frame_type, id, why)
    }
}

/// The answer that ends request `id` of type `frame_type` when nobody else
/// will answer it: a block saying `why` for an `event_intercept` (for a
/// guard, silence is consent), an error saying `why` for a `tool_call` or a
/// `command_invoked`. `None` for any other type, which has no answer.
pub fn failed_request(frame_type: &str, id: String, why: String) -> Option<ExtensionFrame> {
    match frame_type {
        "event_intercept" => Some(ExtensionFrame::EventInterceptResponse(InterceptResponse {
            id,
            block: true,
            reason: Some(why),
            ..InterceptResponse::default()
        })),
        "tool_call" => Some(ExtensionFrame::ToolResult(ToolResult {
            id,
            content: vec![Content::text(why)],
            is_error: true,
        })),
        "command_invoked" => Some(ExtensionFrame::CommandResponse(CommandResponse {
            id,
            error: Some(why),
            ..CommandResponse::default()
        })),
        _ => None,
    }
}

/// The type of request a frame of `response_type` answers: `tool_call`
/// for a `tool_result`, `command_invoked` for a `command_response`,
/// `event_intercept` for an `event_intercept_response`; `None` for any
/// other type, which answers nothing (a `notify` carrying a request's `id`
/// does not end it).
pub fn request_answered_by(response_type: &str) -> Option<&'static str> {
    match response_type {
        "tool_result" => Some("tool_call"),
        "command_response" => Some("command_invoked"),
        "event_intercept_response" => Some("event_intercept"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::codec::{Decoder, encode_to_vec};
    use crate::frame::HostFrame;

    /// Decodes `line` as zot's frame and returns the answer owed, as JSON.
    fn answer_to(line: &[u8]) -> Option<Value> {
        let mut decoder = Decoder::new(1024);
        decoder.push(line);
        decoder.push(b"\n");
        let undecoded = match decoder.next_frame::<HostFrame>() {
            Some(Err(undecoded)) => undecoded,
            other => panic!("expected a line that does not decode, got {other:?}"),
        };
        let frame = undecoded.answer("zotbox")?;
        let line = encode_to_vec(&frame).unwrap_or_default();
        Some(serde_json::from_slice(&line).unwrap_or(Value::Null))
    }

    #[test]
    fn every_unreadable_request_is_answered_and_nothing_else_is() {
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let cases: Vec<(&str, Vec<u8>, Option<Value>)> = vec![
            (
                "a check nested past the recursion limit is blocked",
                format!(r#"{{"type":"event_intercept","id":"1","event":"tool_call","tool_name":"bash","tool_args":{{"command":{deep}}}}}"#)
                    .into_bytes(),
                Some(json!({"type":"event_intercept_response","id":"1","block":true,
                    "reason":"zotbox could not read this check (nested deeper than 127 levels); blocked to be safe"})),
            ),
            (
                "a check with a 0xFF byte is blocked",
                [
                    &br#"{"type":"event_intercept","id":"2","event":"tool_call","tool_name":"bash","tool_args":{"command":"rm "#[..],
                    &[0xFF],
                    br#""}}"#,
                ]
                .concat(),
                Some(json!({"type":"event_intercept_response","id":"2","block":true,
                    "reason":"zotbox could not read this check (invalid unicode code point at line 1 column 102); blocked to be safe"})),
            ),
            (
                "a check with a lone surrogate is blocked",
                br#"{"type":"event_intercept","id":"3","event":"tool_call","tool_name":"bash","tool_args":{"command":"\ud800"}}"#.to_vec(),
                Some(json!({"type":"event_intercept_response","id":"3","block":true,
                    "reason":"zotbox could not read this check (unexpected end of hex escape at line 1 column 105); blocked to be safe"})),
            ),
            (
                "a check over the frame cap is blocked",
                format!(r#"{{"type":"event_intercept","id":"4","text":"{}"}}"#, "x".repeat(2000))
                    .into_bytes(),
                Some(json!({"type":"event_intercept_response","id":"4","block":true,
                    "reason":"zotbox could not read this check (a line over the 1024-byte frame cap); blocked to be safe"})),
            ),
            (
                "a check missing its event is blocked",
                br#"{"type":"event_intercept","id":"5"}"#.to_vec(),
                Some(json!({"type":"event_intercept_response","id":"5","block":true,
                    "reason":"zotbox could not read this check (invalid `event_intercept` frame: missing field `event`); blocked to be safe"})),
            ),
            (
                "a tool call gets an error result",
                format!(r#"{{"type":"tool_call","id":"6","name":"t","args":{deep}}}"#).into_bytes(),
                Some(json!({"type":"tool_result","id":"6","is_error":true,"content":[{"type":"text",
                    "text":"zotbox could not read this tool call (nested deeper than 127 levels)"}]})),
            ),
            (
                "a command gets an error response",
                br#"{"type":"command_invoked","id":"7","name":7}"#.to_vec(),
                Some(json!({"type":"command_response","id":"7","action":"noop",
                    "error":"zotbox could not read this command (invalid `command_invoked` frame: invalid type: integer `7`, expected a string)"})),
            ),
            (
                "a check without a string id has nothing to answer",
                br#"{"type":"event_intercept","id":8,"event":"tool_call"}"#.to_vec(),
                None,
            ),
            (
                "a one-way frame has nothing to answer",
                format!(r#"{{"type":"event","id":"9","event":"tool_call","tool_args":{deep}}}"#)
                    .into_bytes(),
                None,
            ),
            ("not JSON has nothing to answer", b"{nope".to_vec(), None),
        ];
        for (what, line, expected) in cases {
            assert_eq!(answer_to(&line), expected, "{what}");
        }
    }
}
