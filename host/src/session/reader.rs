//! Reads frames from an extension's output, over the protocol crate's codec.

use tokio::io::{AsyncRead, AsyncReadExt};
use zotbox_protocol::{DecodeError, Decoder, ExtensionFrame};

/// Bytes asked of the transport per read.
const READ_CHUNK: usize = 64 * 1024;

/// An extension's output, frame by frame.
pub(super) struct FrameReader {
    source: Box<dyn AsyncRead + Send + Unpin>,
    decoder: Decoder,
    chunk: Box<[u8]>,
    ended: bool,
}

impl FrameReader {
    pub(super) fn new(source: Box<dyn AsyncRead + Send + Unpin>, max_line: usize) -> Self {
        Self {
            source,
            decoder: Decoder::new(max_line),
            chunk: vec![0; READ_CHUNK].into_boxed_slice(),
            ended: false,
        }
    }

    /// The next frame or line fault; `None` once the stream has ended.
    ///
    /// Cancel-safe: bytes read are kept in the decoder, so dropping this
    /// future (in a `select!`) loses nothing.
    pub(super) async fn next(&mut self) -> Option<Result<ExtensionFrame, DecodeError>> {
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
                    tracing::debug!("reading extension output failed: {err}");
                    self.ended = true;
                }
            }
        }
    }
}
