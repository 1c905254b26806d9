//! Reads frames from a byte stream, over the protocol crate's codec: an
//! extension's output for a session, zot's input for `zotbox serve`.

use std::marker::PhantomData;

use tokio::io::{AsyncRead, AsyncReadExt};
use zotbox_protocol::{DecodeError, Decoder, Frame, Undecoded};

/// Bytes asked of the transport per read.
const READ_CHUNK: usize = 64 * 1024;

/// A stream of frames of type `F`, read from `R`.
pub(crate) struct FrameReader<F, R> {
    source: R,
    decoder: Decoder,
    chunk: Box<[u8]>,
    ended: bool,
    // The cap, once a line over it ended the stream.
    cut: Option<usize>,
    // A line over the cap ends the stream (an extension's output) rather
    // than being skipped (zot's input, whose checks must still be answered).
    overlong_ends: bool,
    frames: PhantomData<fn() -> F>,
}

impl<F: Frame, R: AsyncRead + Unpin> FrameReader<F, R> {
    /// A reader that reports every bad line and reads on.
    pub(crate) fn new(source: R, max_line: usize) -> Self {
        Self {
            source,
            decoder: Decoder::new(max_line),
            chunk: vec![0; READ_CHUNK].into_boxed_slice(),
            ended: false,
            cut: None,
            overlong_ends: false,
            frames: PhantomData,
        }
    }

    /// A reader whose stream ends, and is read no further, once it has
    /// reported a line over the cap: for a peer that may not write one.
    pub(crate) fn ending_at_overlong_line(mut self) -> Self {
        self.overlong_ends = true;
        self
    }

    /// The next frame or line fault; `None` once the stream has ended.
    ///
    /// A line over the cap is reported as soon as it passes the cap, not
    /// when (if ever) it ends.
    ///
    /// Cancel-safe: bytes read are kept in the decoder, so dropping this
    /// future (in a `select!`) loses nothing.
    pub(crate) async fn next(&mut self) -> Option<Result<F, Undecoded>> {
        if self.cut.is_some() {
            return None;
        }
        loop {
            if let Some(item) = self.decoder.next_frame() {
                return Some(self.check(item));
            }
            if self.ended {
                return self.decoder.finish().map(|item| self.check(item));
            }
            match self.source.read(&mut self.chunk).await {
                Ok(0) => self.ended = true,
                Ok(n) => self.decoder.push(&self.chunk[..n]),
                Err(err) => {
                    tracing::debug!("reading frames failed: {err}");
                    self.ended = true;
                }
            }
        }
    }

    fn check(&mut self, item: Result<F, Undecoded>) -> Result<F, Undecoded> {
        if let Err(Undecoded {
            error: DecodeError::TooLong { limit, .. },
            ..
        }) = &item
            && self.overlong_ends
        {
            self.cut = Some(*limit);
        }
        item
    }

    /// The frame cap, when a line over it ended the stream.
    pub(crate) fn cut_at(&self) -> Option<usize> {
        self.cut
    }
}

#[cfg(test)]
mod tests {
    use zotbox_protocol::{ExtensionFrame, Ready};

    use super::*;

    /// Everything a reader over `wire` yields, as short labels.
    async fn read_all(mut reader: FrameReader<ExtensionFrame, &[u8]>) -> Vec<String> {
        let mut seen = Vec::new();
        while let Some(item) = reader.next().await {
            seen.push(match item {
                Ok(ExtensionFrame::Ready(Ready {})) => "ready".to_owned(),
                Ok(other) => other.frame_type().to_owned(),
                Err(undecoded) => format!("error: {undecoded}"),
            });
        }
        seen
    }

    #[tokio::test]
    async fn an_extensions_line_over_the_cap_ends_its_stream_and_zots_does_not() {
        let mut wire = b"{\"type\":\"ready\"}\n".to_vec();
        wire.extend_from_slice(&[b'x'; 100]);
        wire.extend_from_slice(b"\n{\"type\":\"clear_notes\"}\n");
        let over =
            "error: a line over the 64-byte frame cap was discarded (100 bytes and counting)";
        // An extension's output: nothing after the line over the cap is read.
        let reader = FrameReader::new(&wire[..], 64).ending_at_overlong_line();
        assert_eq!(read_all(reader).await, ["ready", over]);
        // zot's input: the line is reported, and the stream goes on.
        let reader = FrameReader::new(&wire[..], 64);
        assert_eq!(read_all(reader).await, ["ready", over, "clear_notes"]);
    }
}
