//! Reads frames from a byte stream, over the protocol crate's codec: an
//! extension's output for a session, zot's input for `zotbox serve`.

use std::marker::PhantomData;

use tokio::io::{AsyncRead, AsyncReadExt as _};
use zotbox_protocol::{DecodeError, Decoder, Frame, Undecoded};

/// The most bytes asked of a stream per read.
const READ_CHUNK: usize = 64 * 1024;
/// The bytes asked of a stream per read at first.
const FIRST_CHUNK: usize = 4 * 1024;

/// A read buffer that starts at [`FIRST_CHUNK`] and doubles, up to
/// [`READ_CHUNK`], each time a read fills it.
///
/// Every idle extension keeps one per stream: a buffer of the largest size
/// from the start, zeroed, was a third of what an idle wasm extension costs
/// the host. Frames are small until one is not; a stream that carries large
/// ones soon reads in large chunks.
#[derive(Debug)]
pub(crate) struct ReadChunk {
    buf: Vec<u8>,
    filled: bool,
}

impl Default for ReadChunk {
    fn default() -> Self {
        Self {
            buf: vec![0; FIRST_CHUNK],
            filled: false,
        }
    }
}

impl ReadChunk {
    /// The next bytes of `source`; empty at its end. Cancel-safe, as
    /// `AsyncReadExt::read` is.
    pub(crate) async fn read<R: AsyncRead + Unpin + ?Sized>(
        &mut self,
        source: &mut R,
    ) -> std::io::Result<&[u8]> {
        let n = source.read(self.room()).await?;
        Ok(self.got(n))
    }

    /// Where the next read goes (for a reader [`ReadChunk::read`] cannot
    /// drive): the chunk, doubled first if the last read filled it. Pass
    /// what the read got to [`ReadChunk::got`].
    pub(crate) fn room(&mut self) -> &mut [u8] {
        if self.filled && self.buf.len() < READ_CHUNK {
            let grown = (self.buf.len() * 2).min(READ_CHUNK);
            self.buf.resize(grown, 0);
        }
        &mut self.buf
    }

    /// The `n` bytes a read into [`ReadChunk::room`] got.
    pub(crate) fn got(&mut self, n: usize) -> &[u8] {
        self.filled = n == self.buf.len();
        &self.buf[..n]
    }

    /// How many bytes the last read asked for (the next may ask twice as many).
    #[cfg(test)]
    fn size(&self) -> usize {
        self.buf.len()
    }
}

/// A stream of frames of type `F`, read from `R`.
pub(crate) struct FrameReader<F, R> {
    source: R,
    decoder: Decoder,
    chunk: ReadChunk,
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
            chunk: ReadChunk::default(),
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
            match self.chunk.read(&mut self.source).await {
                Ok([]) => self.ended = true,
                Ok(bytes) => self.decoder.push(bytes),
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

    #[tokio::test]
    async fn a_read_chunk_grows_while_reads_fill_it_and_loses_nothing() {
        let wire: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut source = &wire[..];
        let mut chunk = ReadChunk::default();
        assert_eq!(chunk.size(), FIRST_CHUNK);
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        loop {
            let bytes = chunk
                .read(&mut source)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            if bytes.is_empty() {
                break;
            }
            got.extend_from_slice(bytes);
            // The size this read asked for.
            sizes.push(chunk.size());
        }
        assert_eq!(got, wire);
        assert_eq!(
            sizes[..6],
            [
                FIRST_CHUNK,
                2 * FIRST_CHUNK,
                4 * FIRST_CHUNK,
                8 * FIRST_CHUNK,
                READ_CHUNK,
                READ_CHUNK
            ]
        );
        // A short read does not grow it.
        let mut chunk = ReadChunk::default();
        let mut short = &b"{\"type\":\"ready\"}\n"[..];
        let _ = chunk.read(&mut short).await;
        let _ = chunk.read(&mut short).await;
        assert_eq!(chunk.size(), FIRST_CHUNK);
    }
}
