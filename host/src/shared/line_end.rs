//! zot's stdout as the shared host writes it, watched for a line cut short.
//!
//! The host writes each batch of whole lines with as many writes as zot's
//! pipe takes. Should it die between two of them, zot's stream ends inside
//! a line, and whatever the relay writes next (its answers to the requests
//! in flight, the `notify` that the extension restarted) would be glued to
//! that line and lost with it. [`LineEnds`] says when the stream comes to
//! stand inside a line and when it is back at a line's end, a change only:
//! a batch written in one go, as nearly every one is, says nothing. The
//! host passes each change on to the relay at once, which then begins on a
//! line of its own.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::AsyncWrite;
use tokio::sync::watch;

/// A writer that tells, through a watch channel, whether what it has
/// written so far ends inside a line.
pub(crate) struct LineEnds<W> {
    inner: W,
    inside: bool,
    tell: watch::Sender<bool>,
}

impl<W> LineEnds<W> {
    /// `inner`, starting at a line's end; `tell` hears every change.
    pub(crate) fn new(inner: W, tell: watch::Sender<bool>) -> Self {
        Self {
            inner,
            inside: false,
            tell,
        }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for LineEnds<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = ready!(Pin::new(&mut self.inner).poll_write(cx, bytes));
        if let Ok(n) = &written
            && let Some(&last) = n.checked_sub(1).and_then(|at| bytes.get(at))
        {
            let inside = last != b'\n';
            if inside != self.inside {
                self.inside = inside;
                self.tell.send_replace(inside);
            }
        }
        Poll::Ready(written)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt as _;

    use super::*;

    /// A writer that takes at most `step` bytes per write.
    struct Trickle {
        taken: Vec<u8>,
        step: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            bytes: &[u8],
        ) -> Poll<io::Result<usize>> {
            let n = bytes.len().min(self.step);
            self.taken.extend_from_slice(&bytes[..n]);
            Poll::Ready(Ok(n))
        }

        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn only_a_line_written_in_parts_is_told_and_its_end_too() {
        let (tell, mut heard) = watch::channel(false);
        let mut out = LineEnds::new(
            Trickle {
                taken: Vec::new(),
                step: 4,
            },
            tell,
        );
        // Whole lines in writes that each end one: nothing to tell.
        out.inner.step = 64;
        assert!(out.write_all(b"{\"a\":1}\n{\"b\":2}\n").await.is_ok());
        assert!(!heard.has_changed().unwrap_or(true));
        // A line that takes several writes: inside it, then at its end.
        out.inner.step = 4;
        let line = b"{\"long\":true}\n";
        assert_eq!(out.write(line).await.ok(), Some(4));
        assert!(heard.has_changed().unwrap_or(false));
        assert!(*heard.borrow_and_update());
        assert!(out.write_all(&line[4..]).await.is_ok());
        assert!(!*heard.borrow_and_update());
        assert_eq!(out.inner.taken, b"{\"a\":1}\n{\"b\":2}\n{\"long\":true}\n");
    }
}
