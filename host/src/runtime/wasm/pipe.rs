//! In-memory pipes between the host and a guest's WASI stdio.
//!
//! Each pipe is a bounded byte buffer: the writer waits when it is full (back
//! pressure), so a guest flooding stdout, or a host writing to a guest that
//! never reads, cannot grow memory without bound. No OS pipe and no helper
//! task sits in between: a write wakes the reader directly.
//!
//! A reader of a guest's stdout may also take the guest's writes on the
//! guest's task ([`DirectOutput`]): the bridge does, so that a frame
//! reaches zot before the guest's task yields, with no task woken for it.
//! Only a write that finds the pipe empty goes that way (the guest is the
//! pipe's one writer, so nothing it wrote before is still unread), which
//! keeps the guest's bytes in the order it wrote them.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use wasmtime_wasi::cli::{IsTerminal, StdinStream, StdoutStream};
use wasmtime_wasi::p2::{InputStream, OutputStream, Pollable, StreamError, StreamResult};

use crate::runtime::{Direct, OutputSlot};

/// Bytes a pipe holds before its writer must wait.
pub(crate) const PIPE_CAPACITY: usize = 256 * 1024;

#[derive(Debug)]
struct State {
    buf: BytesMut,
    capacity: usize,
    writer_closed: bool,
    reader_closed: bool,
    read_waker: Option<Waker>,
    write_waker: Option<Waker>,
    // The reader is parked waiting for bytes (for a guest: idle on stdin).
    reader_parked: bool,
    // Times the reader has taken the last byte written so far (for a
    // guest: how it shows that it read its input, see `compute`).
    drained: u64,
}

struct Shared {
    state: Mutex<State>,
    /// Who takes a guest's whole writes on its task, once installed (only
    /// ever for a guest's stdout).
    direct: OutputSlot,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("state", &self.state)
            .field("direct", &self.direct.get().is_some())
            .finish()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn close_write(&self) {
        let mut state = self.lock();
        state.writer_closed = true;
        if let Some(waker) = state.read_waker.take() {
            waker.wake();
        }
    }

    fn close_read(&self) {
        let mut state = self.lock();
        state.reader_closed = true;
        state.buf.clear();
        if let Some(waker) = state.write_waker.take() {
            waker.wake();
        }
    }

    /// `AsyncRead::poll_read` for whichever end reads: no bytes at the end of
    /// stream. The bytes are copied straight into `buf`.
    fn poll_read(&self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut state = self.lock();
        match take_with(&mut state, buf.remaining(), |bytes| buf.put_slice(bytes)) {
            Took::Bytes(()) | Took::End => Poll::Ready(Ok(())),
            Took::Nothing => {
                state.reader_parked = true;
                state.read_waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// Takes up to `max` bytes (at least one), or waits for them: a
    /// blocking read in one poll, with no future of its own.
    fn poll_take(&self, cx: &mut Context<'_>, max: usize) -> Poll<StreamResult<Bytes>> {
        let mut state = self.lock();
        match take(&mut state, max) {
            Took::Bytes(bytes) => Poll::Ready(Ok(bytes)),
            Took::End => Poll::Ready(Err(StreamError::Closed)),
            Took::Nothing => {
                state.reader_parked = true;
                state.read_waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// Room for the writer, at least one byte, or a wait for it; `Err`
    /// once the reader is gone.
    fn poll_room(&self, cx: &mut Context<'_>) -> Poll<StreamResult<usize>> {
        let mut state = self.lock();
        if state.reader_closed {
            return Poll::Ready(Err(StreamError::Closed));
        }
        match state.capacity.saturating_sub(state.buf.len()) {
            0 => {
                state.write_waker = Some(cx.waker().clone());
                Poll::Pending
            }
            room => Poll::Ready(Ok(room)),
        }
    }

    /// Waits until the reader could take bytes or the stream ended.
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.lock();
        if !state.buf.is_empty() || state.writer_closed {
            state.reader_parked = false;
            return Poll::Ready(());
        }
        state.reader_parked = true;
        state.read_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Whether everything written so far has been read, and a reader is there.
    fn drained(&self) -> bool {
        let state = self.lock();
        state.buf.is_empty() && !state.reader_closed
    }

    /// Room for the writer: `Ok(n)` bytes now (maybe 0), `Err` once the reader is gone.
    fn room(&self) -> Result<usize, ()> {
        let state = self.lock();
        if state.reader_closed {
            return Err(());
        }
        Ok(state.capacity.saturating_sub(state.buf.len()))
    }

    /// Waits until the writer has room or the reader is gone.
    fn poll_writable(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.lock();
        if state.reader_closed || state.buf.len() < state.capacity {
            return Poll::Ready(());
        }
        state.write_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Appends bytes, at most the room there is; returns how many.
    fn put(&self, bytes: &[u8]) -> Result<usize, ()> {
        let mut state = self.lock();
        if state.reader_closed {
            return Err(());
        }
        Ok(put(&mut state, bytes))
    }

    fn poll_put(&self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        if bytes.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let mut state = self.lock();
        if state.reader_closed {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        match put(&mut state, bytes) {
            0 => {
                state.write_waker = Some(cx.waker().clone());
                Poll::Pending
            }
            n => Poll::Ready(Ok(n)),
        }
    }
}

/// What a reader found without waiting: the bytes (as the reader took
/// them), the end of the stream, or nothing yet.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Took<T = Bytes> {
    Bytes(T),
    End,
    Nothing,
}

/// Takes up to `max` bytes from a locked pipe as a [`Bytes`] of their own.
/// A copy, not a share of the pipe's buffer: the guest's read hands
/// wasmtime a `Vec`, which a sole `Bytes` becomes without a copy, and the
/// buffer keeps its allocation for the next write.
fn take(state: &mut State, max: usize) -> Took {
    take_with(state, max, Bytes::copy_from_slice)
}

/// Takes up to `max` bytes from a locked pipe, handing them to `copy` (the
/// buffer keeps its allocation), and wakes a waiting writer.
fn take_with<T>(state: &mut State, max: usize, copy: impl FnOnce(&[u8]) -> T) -> Took<T> {
    if !state.buf.is_empty() {
        let n = max.min(state.buf.len());
        let copied = copy(&state.buf[..n]);
        bytes::Buf::advance(&mut state.buf, n);
        if state.buf.is_empty() {
            state.drained = state.drained.wrapping_add(1);
        }
        state.reader_parked = false;
        if let Some(waker) = state.write_waker.take() {
            waker.wake();
        }
        return Took::Bytes(copied);
    }
    if state.writer_closed {
        state.reader_parked = false;
        return Took::End;
    }
    Took::Nothing
}

/// Appends as much of `bytes` as there is room for, waking a waiting reader.
fn put(state: &mut State, bytes: &[u8]) -> usize {
    let n = bytes
        .len()
        .min(state.capacity.saturating_sub(state.buf.len()));
    state.buf.extend_from_slice(&bytes[..n]);
    if n > 0
        && let Some(waker) = state.read_waker.take()
    {
        waker.wake();
    }
    n
}

/// A bounded in-memory pipe of `capacity` bytes.
fn shared(capacity: usize) -> Arc<Shared> {
    Arc::new(Shared {
        state: Mutex::new(State {
            buf: BytesMut::new(),
            capacity: capacity.max(1),
            writer_closed: false,
            reader_closed: false,
            read_waker: None,
            write_waker: None,
            reader_parked: false,
            drained: 0,
        }),
        direct: OutputSlot::default(),
    })
}

/// The guest's stdin: the host writes, the guest reads.
pub(crate) fn stdin_pipe(capacity: usize) -> (HostWriter, GuestStdin) {
    let pipe = shared(capacity);
    (HostWriter(pipe.clone()), GuestStdin(pipe))
}

/// The guest's stdout: the guest writes, the host reads.
pub(crate) fn stdout_pipe(capacity: usize) -> (GuestStdout, HostReader) {
    let pipe = shared(capacity);
    (GuestStdout(pipe.clone()), HostReader(pipe))
}

/// The host's end of a guest's stdin. Closing or dropping it is end of input.
#[derive(Debug)]
pub(crate) struct HostWriter(Arc<Shared>);

impl Drop for HostWriter {
    fn drop(&mut self) {
        self.0.close_write();
    }
}

impl AsyncWrite for HostWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.0.poll_put(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.close_write();
        Poll::Ready(Ok(()))
    }
}

/// The host's end of a guest's stdout. Dropping it makes guest writes fail.
#[derive(Debug)]
pub(crate) struct HostReader(Arc<Shared>);

impl Drop for HostReader {
    fn drop(&mut self) {
        self.0.close_read();
    }
}

impl AsyncRead for HostReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.0.poll_read(cx, buf)
    }
}

/// The guest's view of its stdin. Clones share one stream, as WASI requires.
#[derive(Debug, Clone)]
pub(crate) struct GuestStdin(Arc<Shared>);

impl GuestStdin {
    /// Whether the guest is parked waiting for input: idle, not computing.
    pub(crate) fn guest_is_idle(&self) -> bool {
        self.0.lock().reader_parked
    }

    /// Times the guest has read all its input so far: a change means it
    /// took the rest of what the host wrote it (a byte at a time or not).
    pub(crate) fn drained(&self) -> u64 {
        self.0.lock().drained
    }

    /// Marks the guest gone: host writes fail from now on.
    pub(crate) fn close(&self) {
        self.0.close_read();
    }

    /// Takes up to `max` bytes without waiting: a non-blocking read.
    pub(crate) fn try_take(&self, max: usize) -> Took {
        take(&mut self.0.lock(), max)
    }
}

impl IsTerminal for GuestStdin {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdinStream for GuestStdin {
    fn p2_stream(&self) -> Box<dyn InputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncRead + Send + Sync> {
        Box::new(GuestAsyncStdin(self.0.clone()))
    }
}

#[async_trait::async_trait]
impl InputStream for GuestStdin {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        match take(&mut self.0.lock(), size) {
            Took::Bytes(bytes) => Ok(bytes),
            Took::End => Err(StreamError::Closed),
            Took::Nothing => Ok(Bytes::new()),
        }
    }

    /// What the default does (wait until readable, then read), without its
    /// boxed `ready` future and second lock: the guest's every frame comes
    /// through here.
    async fn blocking_read(&mut self, size: usize) -> StreamResult<Bytes> {
        if size == 0 {
            self.ready().await;
            return self.read(0);
        }
        std::future::poll_fn(|cx| self.0.poll_take(cx, size)).await
    }
}

#[async_trait::async_trait]
impl Pollable for GuestStdin {
    async fn ready(&mut self) {
        std::future::poll_fn(|cx| self.0.poll_readable(cx)).await;
    }
}

// Only for WASI p3 hosts, which zotbox does not link; kept correct anyway.
struct GuestAsyncStdin(Arc<Shared>);

impl AsyncRead for GuestAsyncStdin {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.0.poll_read(cx, buf)
    }
}

/// The guest's view of its stdout. Clones share one stream.
#[derive(Debug, Clone)]
pub(crate) struct GuestStdout(Arc<Shared>);

impl GuestStdout {
    /// End of the guest's output: the host reads what is left, then EOF.
    pub(crate) fn close(&self) {
        self.0.close_write();
    }

    /// Where the host's reader may install a [`DirectOutput`].
    pub(crate) fn direct_slot(&self) -> OutputSlot {
        self.0.direct.clone()
    }
}

impl IsTerminal for GuestStdout {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestStdout {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(GuestAsyncStdout(self.0.clone()))
    }
}

impl GuestStdout {
    /// Hands `bytes` to the installed [`DirectOutput`](crate::runtime::DirectOutput)
    /// when nothing written before is unread; `None`: they go through the pipe.
    fn write_directly(&self, bytes: &[u8]) -> Option<StreamResult<()>> {
        let direct = self.0.direct.get()?;
        if !self.0.drained() {
            return None;
        }
        match direct.write(bytes) {
            Direct::Taken => Some(Ok(())),
            Direct::Closed => Some(Err(StreamError::Closed)),
            Direct::Later => None,
        }
    }

    /// Appends `bytes` to the pipe, which has room for them.
    fn write_to_pipe(&self, bytes: &[u8]) -> StreamResult<()> {
        match self.0.put(bytes) {
            Ok(n) if n == bytes.len() => Ok(()),
            Ok(_) => Err(StreamError::trap("write exceeded the permitted size")),
            Err(()) => Err(StreamError::Closed),
        }
    }
}

#[async_trait::async_trait]
impl OutputStream for GuestStdout {
    /// Straight to a direct reader when there is one and the pipe is
    /// empty, else into the pipe: WASI promises writes no larger than the
    /// last `check_write`, so all fit.
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.write_directly(&bytes)
            .unwrap_or_else(|| self.write_to_pipe(&bytes))
    }

    fn flush(&mut self) -> StreamResult<()> {
        // Bytes are visible to the host as soon as they are written.
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.0.room().map_err(|()| StreamError::Closed)
    }

    /// Straight to a direct reader when there is one and the pipe is
    /// empty. Else what the default does (wait for room, write, flush,
    /// wait for room again), without its four boxed futures: every write is
    /// visible to the host at once, so nothing is left to wait for once the
    /// last chunk is in, and a full pipe holds the next write back instead.
    async fn blocking_write_and_flush(&mut self, mut bytes: Bytes) -> StreamResult<()> {
        if let Some(result) = self.write_directly(&bytes) {
            return result;
        }
        loop {
            let room = std::future::poll_fn(|cx| self.0.poll_room(cx)).await?;
            let chunk = bytes.split_to(room.min(bytes.len()));
            self.write_to_pipe(&chunk)?;
            if bytes.is_empty() {
                return Ok(());
            }
        }
    }
}

#[async_trait::async_trait]
impl Pollable for GuestStdout {
    async fn ready(&mut self) {
        std::future::poll_fn(|cx| self.0.poll_writable(cx)).await;
    }
}

struct GuestAsyncStdout(Arc<Shared>);

impl AsyncWrite for GuestAsyncStdout {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.0.poll_put(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::runtime::DirectOutput;

    #[tokio::test]
    async fn bytes_flow_and_end_of_input_is_seen() {
        let (mut host, mut guest) = stdin_pipe(8);
        let writer =
            tokio::spawn(async move { host.write_all(b"0123456789abcdef").await.map(|()| host) });
        let mut got = Vec::new();
        while got.len() < 16 {
            guest.ready().await;
            match guest.read(100) {
                Ok(bytes) => got.extend_from_slice(&bytes),
                Err(err) => panic!("{err}"),
            }
        }
        assert_eq!(got, b"0123456789abcdef");
        drop(writer.await);
        guest.ready().await;
        assert!(matches!(guest.read(1), Err(StreamError::Closed)));
    }

    #[tokio::test]
    async fn a_full_pipe_pushes_back_and_a_closed_reader_fails_writes() {
        let (mut guest, mut host) = stdout_pipe(4);
        assert_eq!(guest.check_write().ok(), Some(4));
        assert!(guest.write(Bytes::from_static(b"abcd")).is_ok());
        assert_eq!(guest.check_write().ok(), Some(0));
        let mut buf = [0u8; 3];
        assert_eq!(host.read(&mut buf).await.ok(), Some(3));
        assert_eq!(guest.check_write().ok(), Some(3));
        drop(host);
        assert!(matches!(guest.check_write(), Err(StreamError::Closed)));
    }

    #[derive(Default)]
    struct Recorder(std::sync::Mutex<Vec<u8>>);

    impl Recorder {
        fn recorded(&self) -> MutexGuard<'_, Vec<u8>> {
            self.0.lock().unwrap_or_else(PoisonError::into_inner)
        }
    }

    impl DirectOutput for Recorder {
        fn write(&self, bytes: &[u8]) -> Direct {
            self.recorded().extend_from_slice(bytes);
            Direct::Taken
        }
    }

    #[tokio::test]
    async fn a_write_goes_direct_only_when_nothing_before_it_is_unread() {
        let (mut guest, mut host) = stdout_pipe(64);
        let recorder = Arc::new(Recorder::default());
        let direct: Arc<dyn DirectOutput> = recorder.clone();
        assert!(guest.direct_slot().set(direct).is_ok());
        let one = guest.blocking_write_and_flush(Bytes::from_static(b"one\n"));
        assert!(one.await.is_ok());
        assert_eq!(*recorder.recorded(), b"one\n");
        // So does a non-blocking write.
        assert!(guest.write(Bytes::from_static(b"one and a half\n")).is_ok());
        assert_eq!(*recorder.recorded(), b"one\none and a half\n");
        // Bytes in the pipe not read yet: the next whole write goes behind them.
        assert!(guest.write_to_pipe(b"two").is_ok());
        let three = guest.blocking_write_and_flush(Bytes::from_static(b"three\n"));
        assert!(three.await.is_ok());
        // And so does a non-blocking one.
        assert!(guest.write(Bytes::from_static(b"four\n")).is_ok());
        assert_eq!(*recorder.recorded(), b"one\none and a half\n");
        let mut buf = [0u8; 16];
        let n = host.read(&mut buf).await.unwrap_or_default();
        assert_eq!(&buf[..n], b"twothree\nfour\n");
    }

    #[tokio::test]
    async fn the_host_sees_eof_after_the_guest_closes() {
        let (mut guest, mut host) = stdout_pipe(16);
        assert!(guest.write(Bytes::from_static(b"hi\n")).is_ok());
        guest.close();
        let mut out = Vec::new();
        assert!(host.read_to_end(&mut out).await.is_ok());
        assert_eq!(out, b"hi\n");
    }
}
