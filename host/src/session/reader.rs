//! Reads frames from a byte stream, over the protocol crate's codec: an
//! extension's output for a session, zot's input for `zotbox serve`.

use std::marker::PhantomData;

use tokio::io::{AsyncRead, AsyncReadExt};
use zotbox_protocol::{DecodeError, Decoder, Frame};

/// Bytes asked of the transport per read.
const READ_CHUNK: usize = 64 * 1024;

/// A stream of frames of type `F`, read from `R`.
pub(crate) struct FrameReader<F, R> {
    source: R,
    decoder: Decoder,
    chunk: Box<[u8]>,
    ended: bool,
    frames: PhantomData<fn() -> F>,
}

impl<F: Frame, R: AsyncRead + Unpin> FrameReader<F, R> {
    pub(crate) fn new(source: R, max_line: usize) -> Self {
        Self {
            source,
            decoder: Decoder::new(max_line),
            chunk: vec![0; READ_CHUNK].into_boxed_slice(),
            ended: false,
            frames: PhantomData,
        }
    }

    /// The next frame or line fault; `None` once the stream has ended.
    ///
    /// Cancel-safe: bytes read are kept in the decoder, so dropping this
    /// future (in a `select!`) loses nothing.
    pub(crate) async fn next(&mut self) -> Option<Result<F, DecodeError>> {
        loop {
            if let Some(item) = self.decoder.next_frame() {
                return Some(item);
            }
            if self.ended {
                return self.decoder.finish();
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
}
