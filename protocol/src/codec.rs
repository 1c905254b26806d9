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

/// The longest line accepted by default: 4 MiB, as zot.
pub const DEFAULT_MAX_LINE: usize = 4 * 1024 * 1024;

/// A frame type the codec can decode: it knows its own `type` names so that
/// an unknown type can be told apart from a malformed frame.
pub trait Frame: DeserializeOwned + Serialize {
    /// The `type` values this frame enum understands.
    const TYPES: &'static [&'static str];
}

impl Frame for ExtensionFrame {
    const TYPES: &'static [&'static str] = &[
        "hello",
        "register_command",
        "register_tool",
        "subscribe",
        "ready",
        "command_response",
        "tool_result",
        "event_intercept_response",
        "notify",
        "clear_notes",
        "panel_render",
        "panel_close",
        "shutdown_ack",
    ];
}

impl Frame for HostFrame {
    const TYPES: &'static [&'static str] = &[
        "hello_ack",
        "command_invoked",
        "tool_call",
        "event",
        "event_intercept",
        "panel_key",
        "panel_resize",
        "panel_close",
        "shutdown",
    ];
}

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
    /// The line was longer than the limit; its bytes were discarded.
    #[error("line of {len} bytes exceeds the {limit}-byte limit and was discarded")]
    TooLong {
        /// Bytes discarded (at least; the line may go on past end of stream).
        len: usize,
        /// The limit in force.
        limit: usize,
    },
}

/// Decodes one line (without its newline) into a frame.
///
/// # Errors
///
/// [`DecodeError::Malformed`], [`DecodeError::UnknownType`] or
/// [`DecodeError::Invalid`], telling the three apart.
pub fn decode_line<F: Frame>(line: &[u8]) -> Result<F, DecodeError> {
    match serde_json::from_slice::<F>(line) {
        Ok(frame) => Ok(frame),
        Err(err) => Err(classify(line, &err)),
    }
}

// The fast path above parses once; only a failure pays for a second parse
// that finds out which kind of failure it was.
fn classify(line: &[u8], err: &serde_json::Error) -> DecodeError {
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

/// Splits a byte stream into lines, bounded by a maximum line length.
///
/// A line over the limit is discarded up to its newline and reported once as
/// [`DecodeError::TooLong`]; the lines after it come through unharmed.
#[derive(Debug)]
pub struct LineSplitter {
    buf: Vec<u8>,
    // Bytes before `start` are consumed; bytes in `start..scanned` hold no newline.
    start: usize,
    scanned: usize,
    max_line: usize,
    // Some(n): inside an over-long line, n bytes discarded so far.
    discarding: Option<usize>,
}

/// One item out of a [`LineSplitter`].
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// A complete line without its `\n` (and without a trailing `\r`).
    Complete(&'a [u8]),
    /// An over-long line was discarded.
    TooLong {
        /// Bytes discarded.
        len: usize,
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
            discarding: None,
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

    /// The next line, if a complete one (or a discard report) is available.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Line<'_>> {
        loop {
            let pending = &self.buf[self.scanned..];
            match pending.iter().position(|&b| b == b'\n') {
                Some(offset) => {
                    let end = self.scanned + offset;
                    let begin = self.start;
                    self.start = end + 1;
                    self.scanned = self.start;
                    if let Some(discarded) = self.discarding.take() {
                        let len = discarded + (end - begin);
                        self.compact();
                        return Some(Line::TooLong { len });
                    }
                    if end - begin > self.max_line {
                        return Some(Line::TooLong { len: end - begin });
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
                        // Drop what we hold of the over-long line; remember how much.
                        *self.discarding.get_or_insert(0) += partial;
                        self.buf.clear();
                        self.start = 0;
                        self.scanned = 0;
                    } else {
                        self.compact();
                    }
                    return None;
                }
            }
        }
    }

    /// At end of stream: the last line if it had no newline, or a discard report.
    pub fn finish(&mut self) -> Option<Line<'_>> {
        if let Some(discarded) = self.discarding.take() {
            let len = discarded + (self.buf.len() - self.start);
            self.buf.clear();
            self.start = 0;
            self.scanned = 0;
            return Some(Line::TooLong { len });
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
    pub fn next_frame<F: Frame>(&mut self) -> Option<Result<F, DecodeError>> {
        let limit = self.lines.max_line();
        match self.lines.next()? {
            Line::Complete(line) => Some(decode_known(line)),
            Line::TooLong { len } => Some(Err(DecodeError::TooLong { len, limit })),
        }
    }

    /// At end of stream: the last frame if it lacked a newline.
    pub fn finish<F: Frame>(&mut self) -> Option<Result<F, DecodeError>> {
        let limit = self.lines.max_line();
        match self.lines.finish()? {
            Line::Complete(line) => Some(decode_known(line)),
            Line::TooLong { len } => Some(Err(DecodeError::TooLong { len, limit })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::*;

    fn decode_all(decoder: &mut Decoder) -> Vec<Result<ExtensionFrame, DecodeError>> {
        let mut out = Vec::new();
        while let Some(item) = decoder.next_frame() {
            out.push(item);
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
    fn an_over_long_line_is_discarded_and_the_stream_goes_on() {
        let mut decoder = Decoder::new(64);
        decoder.push(b"{\"type\":\"ready\"}\n");
        // 10 000 bytes without a newline, pushed in pieces, then the rest of the stream.
        for _ in 0..100 {
            decoder.push(&[b'x'; 100]);
            assert!(
                decoder
                    .next_frame::<ExtensionFrame>()
                    .map(|r| r.is_ok())
                    .unwrap_or(true)
            );
        }
        decoder.push(b"yy\n{\"type\":\"shutdown_ack\"}\n");
        let items = decode_all(&mut decoder);
        assert_eq!(
            items,
            vec![
                Err(DecodeError::TooLong {
                    len: 10_002,
                    limit: 64
                }),
                Ok(ExtensionFrame::ShutdownAck(ShutdownAck {})),
            ]
        );
        // The buffer never held the whole line.
        assert!(decoder.lines.buf.capacity() < 10_000);
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
            Some(Err(DecodeError::TooLong { .. }))
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
}
