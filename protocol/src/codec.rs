//! The NDJSON codec: bytes in, frames out, with every fault reported and survived.
//!
//! The codec is sans-io: feed it whatever chunks the transport delivers with
//! [`Decoder::push`], then take items with [`Decoder::next_frame`] until it
//! returns `None`. It never holds more than the line limit of one partial
//! line, so a peer that writes an endless line cannot exhaust memory.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::frame::{ExtensionFrame, HostFrame};
use crate::peek::peek;
use crate::undecoded::Undecoded;

/// The longest line accepted by default: 4 MiB, as zot.
pub const DEFAULT_MAX_LINE: usize = 4 * 1024 * 1024;

/// A frame type the codec can decode: it knows its own `type` names so that
/// an unknown type can be told apart from a malformed frame, and can decode
/// a line straight into the struct of the variant a `type` names.
pub trait Frame: DeserializeOwned + Serialize {
    /// The `type` values this frame enum understands.
    const TYPES: &'static [&'static str];

    /// Decodes `line` as the variant whose `type` is `frame_type`, straight
    /// into that variant's struct (the `type` key itself is one it ignores);
    /// `None` when no variant has that `type`.
    fn decode_as(frame_type: &str, line: &[u8]) -> Option<serde_json::Result<Self>>;
}

/// Implements [`Frame`] and `frame_type` for a frame enum from its wire
/// types and variants: the one list of them.
macro_rules! frame_types {
    ($frame:ident { $($wire:literal => $variant:ident,)* }) => {
        impl $frame {
            /// The frame's wire `type`.
            pub fn frame_type(&self) -> &'static str {
                match self {
                    $(Self::$variant(_) => $wire,)*
                }
            }
        }

        impl Frame for $frame {
            const TYPES: &'static [&'static str] = &[$($wire),*];

            fn decode_as(frame_type: &str, line: &[u8]) -> Option<serde_json::Result<Self>> {
                Some(match frame_type {
                    $($wire => serde_json::from_slice(line).map(Self::$variant),)*
                    _ => return None,
                })
            }
        }
    };
}

frame_types!(ExtensionFrame {
    "hello" => Hello,
    "register_command" => RegisterCommand,
    "register_tool" => RegisterTool,
    "subscribe" => Subscribe,
    "ready" => Ready,
    "command_response" => CommandResponse,
    "tool_result" => ToolResult,
    "event_intercept_response" => EventInterceptResponse,
    "notify" => Notify,
    "clear_notes" => ClearNotes,
    "panel_render" => PanelRender,
    "panel_close" => PanelClose,
    "shutdown_ack" => ShutdownAck,
});

frame_types!(HostFrame {
    "hello_ack" => HelloAck,
    "command_invoked" => CommandInvoked,
    "tool_call" => ToolCall,
    "event" => Event,
    "event_intercept" => EventIntercept,
    "panel_key" => PanelKey,
    "panel_resize" => PanelResize,
    "panel_close" => PanelClose,
    "shutdown" => Shutdown,
});

/// Why one line did not yield a frame. The stream goes on after every one of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The line is not a JSON object.
    #[error("malformed frame: {error} (line starts `{excerpt}`)")]
    Malformed {
        /// What the JSON parser said.
        error: String,
        /// The first characters of the line, for the log.
        excerpt: String,
    },
    /// The line is a JSON object whose `type` this side does not know.
    #[error("unknown frame type `{frame_type}`")]
    UnknownType {
        /// The `type` value.
        frame_type: String,
    },
    /// The frame type is known but its fields are wrong.
    #[error("invalid `{frame_type}` frame: {error}")]
    Invalid {
        /// The `type` value.
        frame_type: String,
        /// What was wrong.
        error: String,
    },
    /// The line nests arrays and objects deeper than the limit
    /// ([`crate::MAX_DEPTH`]); it was not read.
    #[error("a frame nested deeper than {limit} levels was not read")]
    TooDeep {
        /// The limit in force.
        limit: usize,
    },
    /// The line was longer than the limit (the frame cap); its bytes were discarded.
    #[error("a line over the {limit}-byte frame cap was discarded ({len} bytes and counting)")]
    TooLong {
        /// Bytes of the line seen when it passed the limit (it may go on).
        len: usize,
        /// The limit in force.
        limit: usize,
    },
}

impl DecodeError {
    /// Why the line did not decode, as a phrase for an answer to the peer:
    /// what the parser said, never the line's own bytes.
    pub fn cause(&self) -> String {
        match self {
            Self::Malformed { error, .. } => error.clone(),
            Self::UnknownType { frame_type } => format!("unknown frame type `{frame_type}`"),
            Self::Invalid { frame_type, error } => format!("invalid `{frame_type}` frame: {error}"),
            Self::TooLong { limit, .. } => format!("a line over the {limit}-byte frame cap"),
            Self::TooDeep { limit } => format!("nested deeper than {limit} levels"),
        }
    }
}

/// Decodes one line (without its newline) into a frame.
///
/// # Errors
///
/// [`DecodeError::TooDeep`], [`DecodeError::Malformed`],
/// [`DecodeError::UnknownType`] or [`DecodeError::Invalid`], telling them
/// apart.
pub fn decode_line<F: Frame>(line: &[u8]) -> Result<F, DecodeError> {
    // Every writer of frames puts `type` first: such a line is decoded
    // straight into its variant's struct. The tagged enum's own decoding
    // (below) buffers the whole frame as generic content before it can
    // look at `type`, which made it the largest part of a guest's work per
    // request. Only a success is taken from here: a line that fails is
    // decoded again below, so every error reads as it always did.
    if let Some(frame_type) = leading_type(line)
        && let Some(Ok(frame)) = F::decode_as(frame_type, line)
    {
        return Ok(frame);
    }
    match serde_json::from_slice::<F>(line) {
        Ok(frame) => Ok(frame),
        Err(err) => Err(classify(line, &err)),
    }
}

// A line that decodes pays for one parse (two when `type` is not its first
// key); only a failure pays for another that finds out which kind of
// failure it was.
fn classify(line: &[u8], err: &serde_json::Error) -> DecodeError {
    // Said the same way by every reader: serde's own words name a column.
    if crate::nested_deeper_than(line, crate::MAX_DEPTH) {
        return DecodeError::TooDeep {
            limit: crate::MAX_DEPTH,
        };
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(_) => {
            return DecodeError::Malformed {
                error: err.to_string(),
                excerpt: excerpt(line),
            };
        }
    };
    let Some(object) = value.as_object() else {
        return DecodeError::Malformed {
            error: "a frame must be a JSON object".to_owned(),
            excerpt: excerpt(line),
        };
    };
    match object.get("type") {
        Some(Value::String(frame_type)) => DecodeError::Invalid {
            frame_type: frame_type.clone(),
            error: err.to_string(),
        },
        Some(_) => DecodeError::Malformed {
            error: "`type` must be a string".to_owned(),
            excerpt: excerpt(line),
        },
        None => DecodeError::Malformed {
            error: "missing `type`".to_owned(),
            excerpt: excerpt(line),
        },
    }
}

/// The value of `type` when it is the first key of the object on `line`
/// and a string without escapes; `None` otherwise (the slow path then
/// decides). A later duplicate `type` is ignored, as [`peek`] ignores it.
fn leading_type(line: &[u8]) -> Option<&str> {
    let rest = line
        .trim_ascii_start()
        .strip_prefix(b"{")?
        .trim_ascii_start();
    let rest = rest.strip_prefix(b"\"type\"")?.trim_ascii_start();
    let rest = rest.strip_prefix(b":")?.trim_ascii_start();
    let rest = rest.strip_prefix(b"\"")?;
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    if rest[end] != b'"' {
        return None;
    }
    std::str::from_utf8(&rest[..end]).ok()
}

fn decode_known<F: Frame>(line: &[u8]) -> Result<F, DecodeError> {
    decode_line::<F>(line).map_err(|err| match err {
        DecodeError::Invalid { frame_type, .. } if !F::TYPES.contains(&frame_type.as_str()) => {
            DecodeError::UnknownType { frame_type }
        }
        other => other,
    })
}

fn excerpt(line: &[u8]) -> String {
    const MAX: usize = 60;
    let text = String::from_utf8_lossy(&line[..line.len().min(MAX)]);
    text.chars().filter(|c| !c.is_control()).collect()
}

/// Encodes a frame as one line, newline included, appending to `out`.
///
/// JSON escapes control characters inside strings, so the encoding of any
/// frame is exactly one line.
///
/// # Errors
///
/// Only if a frame holds a value serde_json cannot encode (a map with
/// non-string keys), which the frame types here never do.
pub fn encode_frame<F: Serialize>(frame: &F, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    serde_json::to_writer(&mut *out, frame)?;
    out.push(b'\n');
    Ok(())
}

/// Encodes a frame as one line, newline included.
///
/// # Errors
///
/// As [`encode_frame`].
pub fn encode_to_vec<F: Serialize>(frame: &F) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(128);
    encode_frame(frame, &mut out)?;
    Ok(out)
}

/// How much of the start of a line over the cap [`LineSplitter`] hands back
/// with its report: enough for [`peek`] to find the `type` and `id` that a
/// peer writes first.
pub const TOO_LONG_HEAD: usize = 64 * 1024;

/// Splits a byte stream into lines, bounded by a maximum line length.
///
/// A line over the limit is reported once, as [`Line::TooLong`], **as soon as
/// it passes the limit** (a peer writing one endless line is caught at once,
/// not when it stops), with the first [`TOO_LONG_HEAD`] bytes of the line;
/// the rest of it is discarded up to its newline, and the lines after it come
/// through unharmed. The splitter never holds more than the limit plus the
/// last chunk pushed.
#[derive(Debug)]
pub struct LineSplitter {
    buf: Vec<u8>,
    // Bytes before `start` are consumed; bytes in `start..scanned` hold no newline.
    start: usize,
    scanned: usize,
    max_line: usize,
    // Inside an over-long line already reported: drop bytes up to its newline.
    discarding: bool,
}

/// One item out of a [`LineSplitter`].
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// A complete line without its `\n` (and without a trailing `\r`).
    Complete(&'a [u8]),
    /// A line passed the limit; the rest of it will be discarded.
    TooLong {
        /// Bytes of the line seen when it passed the limit (it may go on).
        len: usize,
        /// Its first bytes, at most [`TOO_LONG_HEAD`].
        head: &'a [u8],
    },
}

impl LineSplitter {
    /// A splitter that accepts lines up to `max_line` bytes.
    pub fn new(max_line: usize) -> Self {
        Self {
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            max_line: max_line.max(1),
            discarding: false,
        }
    }

    /// The limit in force.
    pub fn max_line(&self) -> usize {
        self.max_line
    }

    /// Appends bytes from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
            self.scanned = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next line, if a complete one (or a report of one over the limit)
    /// is available.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Line<'_>> {
        loop {
            if self.discarding {
                let pending = &self.buf[self.start..];
                match memchr::memchr(b'\n', pending) {
                    Some(offset) => {
                        self.start += offset + 1;
                        self.scanned = self.start;
                        self.discarding = false;
                        self.compact();
                        continue;
                    }
                    None => {
                        self.buf.clear();
                        self.start = 0;
                        self.scanned = 0;
                        return None;
                    }
                }
            }
            let pending = &self.buf[self.scanned..];
            match memchr::memchr(b'\n', pending) {
                Some(offset) => {
                    let end = self.scanned + offset;
                    let begin = self.start;
                    self.start = end + 1;
                    self.scanned = self.start;
                    if end - begin > self.max_line {
                        let head = begin + TOO_LONG_HEAD.min(end - begin);
                        return Some(Line::TooLong {
                            len: end - begin,
                            head: &self.buf[begin..head],
                        });
                    }
                    let end = if self.buf[begin..end].ends_with(b"\r") {
                        end - 1
                    } else {
                        end
                    };
                    if self.buf[begin..end].iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    return Some(Line::Complete(&self.buf[begin..end]));
                }
                None => {
                    self.scanned = self.buf.len();
                    let partial = self.buf.len() - self.start;
                    if partial > self.max_line {
                        // Report now; what follows of this line is dropped.
                        let begin = self.start;
                        self.start = self.buf.len();
                        self.discarding = true;
                        let head = begin + TOO_LONG_HEAD.min(partial);
                        return Some(Line::TooLong {
                            len: partial,
                            head: &self.buf[begin..head],
                        });
                    }
                    self.compact();
                    return None;
                }
            }
        }
    }

    /// The line begun and not ended yet: empty at a line boundary (and
    /// while the rest of an over-long line is being dropped).
    pub fn partial(&self) -> &[u8] {
        if self.discarding {
            return &[];
        }
        self.buf.get(self.start..).unwrap_or_default()
    }

    /// At end of stream: the last line if it had no newline.
    pub fn finish(&mut self) -> Option<Line<'_>> {
        if self.discarding {
            self.discarding = false;
            self.buf.clear();
            self.start = 0;
            self.scanned = 0;
            return None;
        }
        if self.start >= self.buf.len() {
            return None;
        }
        self.buf.push(b'\n');
        self.next()
    }

    // Moves the unconsumed tail to the front once the consumed head dominates,
    // so the buffer does not grow with the length of the stream.
    fn compact(&mut self) {
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.scanned -= self.start;
            self.start = 0;
        }
    }
}

/// Bytes in, frames out: a [`LineSplitter`] plus [`decode_line`].
///
/// Every line that yields no frame comes out as [`Undecoded`]: why, and the
/// `type` and `id` a lenient [`peek`] found in it, so that a request that
/// cannot be read can still be answered.
#[derive(Debug)]
pub struct Decoder {
    lines: LineSplitter,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_LINE)
    }
}

impl Decoder {
    /// A decoder that accepts lines up to `max_line` bytes.
    pub fn new(max_line: usize) -> Self {
        Self {
            lines: LineSplitter::new(max_line),
        }
    }

    /// Appends bytes from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.lines.push(bytes);
    }

    /// The next frame, or the fault of the next line; `None` when more bytes
    /// are needed.
    pub fn next_frame<F: Frame>(&mut self) -> Option<Result<F, Undecoded>> {
        let limit = self.lines.max_line();
        self.lines.next().map(|line| decode_item(line, limit))
    }

    /// At end of stream: the last frame if it lacked a newline.
    pub fn finish<F: Frame>(&mut self) -> Option<Result<F, Undecoded>> {
        let limit = self.lines.max_line();
        self.lines.finish().map(|line| decode_item(line, limit))
    }
}

fn decode_item<F: Frame>(line: Line<'_>, limit: usize) -> Result<F, Undecoded> {
    match line {
        Line::Complete(bytes) => decode_known(bytes).map_err(|error| Undecoded {
            error,
            peek: peek(bytes),
        }),
        Line::TooLong { len, head } => Err(Undecoded {
            error: DecodeError::TooLong { len, limit },
            peek: peek(head),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::*;

    fn decode_all(decoder: &mut Decoder) -> Vec<Result<ExtensionFrame, DecodeError>> {
        let mut out = Vec::new();
        while let Some(item) = decoder.next_frame() {
            out.push(item.map_err(|undecoded| undecoded.error));
        }
        out
    }

    #[test]
    fn malformed_and_unknown_lines_are_reported_and_skipped() {
        let mut decoder = Decoder::default();
        decoder.push(
            b"{\"type\":\"ready\"}\nnot json\n{\"type\":\"teleport\"}\n[1,2]\n{\"type\":7}\n\
              {\"type\":\"notify\",\"level\":3}\n{\"type\":\"clear_notes\",\"extra\":1}\n",
        );
        let items = decode_all(&mut decoder);
        assert_eq!(items.len(), 7);
        assert_eq!(items[0], Ok(ExtensionFrame::Ready(Ready {})));
        assert!(
            matches!(&items[1], Err(DecodeError::Malformed { excerpt, .. }) if excerpt == "not json")
        );
        assert_eq!(
            items[2],
            Err(DecodeError::UnknownType {
                frame_type: "teleport".to_owned()
            })
        );
        assert!(
            matches!(&items[3], Err(DecodeError::Malformed { error, .. }) if error.contains("JSON object"))
        );
        assert!(
            matches!(&items[4], Err(DecodeError::Malformed { error, .. }) if error.contains("`type`"))
        );
        assert!(
            matches!(&items[5], Err(DecodeError::Invalid { frame_type, .. }) if frame_type == "notify")
        );
        // Unknown fields are tolerated.
        assert_eq!(items[6], Ok(ExtensionFrame::ClearNotes(ClearNotes {})));
    }

    #[test]
    fn frames_split_across_chunks_are_reassembled() {
        let wire = b"{\"type\":\"hello\",\"name\":\"a\"}\r\n\n  \n{\"type\":\"ready\"}\n";
        for chunk in 1..wire.len() {
            let mut decoder = Decoder::default();
            let mut items = Vec::new();
            for piece in wire.chunks(chunk) {
                decoder.push(piece);
                items.extend(decode_all(&mut decoder));
            }
            assert_eq!(items.len(), 2, "chunk size {chunk}");
            assert!(matches!(&items[0], Ok(ExtensionFrame::Hello(h)) if h.name == "a"));
        }
    }

    #[test]
    fn an_over_long_line_is_reported_as_soon_as_it_passes_the_limit() {
        let mut decoder = Decoder::new(64);
        decoder.push(b"{\"type\":\"ready\"}\n");
        assert_eq!(
            decoder.next_frame::<ExtensionFrame>().map(|r| r.is_ok()),
            Some(true)
        );
        // A line that starts like a check, then never ends: reported once,
        // at the first push past the limit, with the head that names it.
        decoder.push(b"{\"type\":\"event_intercept\",\"id\":\"7\",\"text\":\"");
        assert!(decoder.next_frame::<ExtensionFrame>().is_none());
        decoder.push(&[b'x'; 100]);
        let reported = decoder.next_frame::<ExtensionFrame>();
        let Some(Err(Undecoded { error, peek })) = reported else {
            panic!("not reported at once: {reported:?}");
        };
        assert_eq!(
            error,
            DecodeError::TooLong {
                len: 143,
                limit: 64
            }
        );
        assert_eq!(
            (peek.frame_type.as_deref(), peek.id.as_deref()),
            (Some("event_intercept"), Some("7"))
        );
        // The rest of it is dropped, never reported again, never held.
        for _ in 0..100 {
            decoder.push(&[b'x'; 100]);
            assert!(decoder.next_frame::<ExtensionFrame>().is_none());
        }
        assert!(decoder.lines.buf.capacity() < 10_000);
        decoder.push(b"yy\n{\"type\":\"shutdown_ack\"}\n");
        assert_eq!(
            decode_all(&mut decoder),
            vec![Ok(ExtensionFrame::ShutdownAck(ShutdownAck {}))]
        );
    }

    #[test]
    fn an_over_long_line_in_one_push_is_reported_with_its_head_only() {
        let mut decoder = Decoder::new(64);
        let mut line = b"{\"type\":\"tool_call\",\"id\":\"9\",\"args\":\"".to_vec();
        line.extend_from_slice(&vec![b'y'; 2 * TOO_LONG_HEAD]);
        line.extend_from_slice(b"\"}\n{\"type\":\"ready\"}\n");
        let mut splitter = LineSplitter::new(64);
        splitter.push(&line);
        match splitter.next() {
            Some(Line::TooLong { len, head }) => {
                assert_eq!((len, head.len()), (line.len() - 18, TOO_LONG_HEAD));
                assert!(head.starts_with(b"{\"type\":\"tool_call\""));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            splitter.next(),
            Some(Line::Complete(b"{\"type\":\"ready\"}"))
        );
        decoder.push(&line);
        assert!(matches!(
            decoder.next_frame::<ExtensionFrame>(),
            Some(Err(Undecoded {
                error: DecodeError::TooLong { .. },
                ..
            }))
        ));
    }

    #[test]
    fn the_partial_line_is_what_follows_the_last_newline() {
        let mut splitter = LineSplitter::new(64);
        assert_eq!(splitter.partial(), b"");
        splitter.push(b"{\"type\":\"ready\"}\n{\"type\":\"tool_call\",\"id\":");
        assert_eq!(
            splitter.next(),
            Some(Line::Complete(b"{\"type\":\"ready\"}"))
        );
        assert_eq!(splitter.next(), None);
        assert_eq!(splitter.partial(), b"{\"type\":\"tool_call\",\"id\":");
        splitter.push(b"\"4\"}\n");
        assert!(matches!(splitter.next(), Some(Line::Complete(_))));
        assert_eq!(splitter.partial(), b"");
        // The rest of an over-long line is being dropped: nothing is partial.
        splitter.push(&[b'x'; 100]);
        assert!(matches!(splitter.next(), Some(Line::TooLong { .. })));
        splitter.push(b"yyy");
        assert_eq!(splitter.next(), None);
        assert_eq!(splitter.partial(), b"");
    }

    #[test]
    fn a_line_still_over_the_limit_at_end_of_stream_is_reported_once() {
        let mut decoder = Decoder::new(8);
        decoder.push(b"0123456789");
        assert!(matches!(
            decoder.next_frame::<ExtensionFrame>(),
            Some(Err(Undecoded {
                error: DecodeError::TooLong { len: 10, limit: 8 },
                ..
            }))
        ));
        decoder.push(b"more");
        assert!(decoder.next_frame::<ExtensionFrame>().is_none());
        assert!(decoder.finish::<ExtensionFrame>().is_none());
    }

    #[test]
    fn a_line_exactly_at_the_limit_is_accepted_and_one_over_is_not() {
        let frame = b"{\"type\":\"ready\"}";
        let mut decoder = Decoder::new(frame.len());
        decoder.push(frame);
        decoder.push(b"\n");
        assert!(matches!(
            decoder.next_frame::<ExtensionFrame>(),
            Some(Ok(_))
        ));
        let mut decoder = Decoder::new(frame.len() - 1);
        decoder.push(frame);
        decoder.push(b"\n");
        assert!(matches!(
            decoder.next_frame::<ExtensionFrame>(),
            Some(Err(Undecoded {
                error: DecodeError::TooLong { .. },
                ..
            }))
        ));
    }

    #[test]
    fn finish_yields_a_last_line_without_newline() {
        let mut decoder = Decoder::default();
        decoder.push(b"{\"type\":\"ready\"}");
        assert!(decoder.next_frame::<ExtensionFrame>().is_none());
        assert_eq!(
            decoder.finish::<ExtensionFrame>(),
            Some(Ok(ExtensionFrame::Ready(Ready {})))
        );
        // And an unreadable last line still shows what it was.
        decoder.push(b"{\"type\":\"event_intercept\",\"id\":\"3\"");
        match decoder.finish::<HostFrame>() {
            Some(Err(undecoded)) => assert!(undecoded.peek.is("event_intercept")),
            other => panic!("{other:?}"),
        }
        assert!(decoder.finish::<ExtensionFrame>().is_none());
    }

    #[test]
    fn encoding_is_always_one_line() {
        let frame = HostFrame::CommandInvoked(CommandInvoked {
            id: "1".to_owned(),
            name: "n".to_owned(),
            args: "a\nb\r\u{2028}".to_owned(),
        });
        let bytes = encode_to_vec(&frame).unwrap_or_default();
        assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 1);
        assert_eq!(bytes.last(), Some(&b'\n'));
    }

    #[test]
    fn a_leading_type_is_found_only_when_it_is_the_first_key_and_plain() {
        assert_eq!(leading_type(br#"{"type":"ready"}"#), Some("ready"));
        assert_eq!(
            leading_type(b" \t{ \"type\" :\t\"tool_call\" ,\"id\":\"1\"}"),
            Some("tool_call")
        );
        for line in [
            &br#"{"id":"1","type":"tool_call"}"#[..],
            br#"{"type":"tool\u005fcall"}"#,
            br#"{"type":7}"#,
            br#"{"type":"ready"#,
            br#"["type","ready"]"#,
            b"{\"type\":\"\xff\"}",
            b"",
        ] {
            assert_eq!(
                leading_type(line),
                None,
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn decoding_straight_into_the_variant_changes_no_outcome() {
        // `type` last or escaped: the tagged path, the same frame.
        let first: Result<HostFrame, _> =
            decode_line(br#"{"type":"command_invoked","id":"1","name":"n","args":""}"#);
        for line in [
            &br#"{"id":"1","name":"n","args":"","type":"command_invoked"}"#[..],
            br#"{"type":"command_\u0069nvoked","id":"1","name":"n","args":""}"#,
        ] {
            assert_eq!(decode_line::<HostFrame>(line), first);
        }
        assert!(matches!(first, Ok(HostFrame::CommandInvoked(_))));
        // A frame that fails reads exactly as the tagged path reports it.
        let line = br#"{"type":"tool_call","id":5}"#;
        let tagged = serde_json::from_slice::<HostFrame>(line)
            .err()
            .map(|err| classify(line, &err));
        assert_eq!(decode_line::<HostFrame>(line).err(), tagged);
        assert!(
            matches!(tagged, Some(DecodeError::Invalid { .. })),
            "{tagged:?}"
        );
        // An unknown type leading the line is still unknown.
        assert_eq!(
            decode_known::<HostFrame>(br#"{"type":"teleport"}"#),
            Err(DecodeError::UnknownType {
                frame_type: "teleport".to_owned()
            })
        );
        // A second `type` is ignored, as `peek` (and so the bridge) ignores it.
        assert_eq!(
            decode_line::<ExtensionFrame>(br#"{"type":"ready","type":"hello"}"#),
            Ok(ExtensionFrame::Ready(Ready {}))
        );
        assert!(peek(br#"{"type":"ready","type":"hello"}"#).is("ready"));
    }
}
