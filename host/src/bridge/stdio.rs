//! zot's end of `zotbox run`: stdin and stdout, read and written on the
//! runtime's own thread.
//!
//! tokio's `stdin()`/`stdout()` hand every read and write to a blocking
//! thread and wake the task when it is done: two thread hops per frame, which
//! dominated a round trip through `zotbox run`. When stdin/stdout are pipes or
//! sockets (as zot makes them), they are switched to non-blocking mode and
//! polled by the runtime's I/O driver instead, as a native extension's pipes
//! are. Anything else (a file, a terminal) keeps tokio's blocking path: epoll
//! cannot poll a file, and a terminal's mode is shared with the shell.
//!
//! stdout is left blocking when stderr is the same file (as `2>&1` makes
//! it): a non-blocking stderr would make a diagnostic fail with `EAGAIN`.
//! The original flags are restored when the stream is dropped.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::sys::stat::{SFlag, fstat};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// zot's stdin, polled by the runtime when it can be.
pub fn stdin() -> Box<dyn AsyncRead + Send + Unpin> {
    match Polled::new(io::stdin().as_fd(), false) {
        Some(polled) => Box::new(polled),
        None => Box::new(tokio::io::stdin()),
    }
}

/// zot's stdout, polled by the runtime when it can be.
pub fn stdout() -> Box<dyn AsyncWrite + Send + Unpin> {
    let shared_with_stderr = same_file(io::stdout().as_fd(), io::stderr().as_fd());
    match Polled::new(io::stdout().as_fd(), shared_with_stderr) {
        Some(polled) => Box::new(polled),
        None => Box::new(tokio::io::stdout()),
    }
}

/// zot's stdin, handed over by a relay: polled when it can be.
pub(crate) fn owned_input(fd: OwnedFd) -> Box<dyn AsyncRead + Send + Unpin> {
    match Polled::owning(fd, false) {
        Ok(polled) => Box::new(polled),
        Err(fd) => Box::new(tokio::fs::File::from_std(std::fs::File::from(fd))),
    }
}

/// zot's stdout, handed over by a relay (`shared`: the relay's stderr is
/// the same file): polled when it can be.
pub(crate) fn owned_output(fd: OwnedFd, shared: bool) -> Box<dyn AsyncWrite + Send + Unpin> {
    match Polled::owning(fd, shared) {
        Ok(polled) => Box::new(polled),
        Err(fd) => Box::new(tokio::fs::File::from_std(std::fs::File::from(fd))),
    }
}

/// A watch on zot's end of the input: ready once zot has closed it (a
/// pipe's writer gone, a socket's peer shut), whatever is still unread.
///
/// The bridge reads zot's input only as fast as the guest takes it. While
/// a guest does not read (it computes, or never reads at all), zot's
/// `shutdown` and its closing of the input wait unread behind it; the
/// watch sees the close all the same, so the guest's shutdown grace starts
/// then, not at its deadline.
pub struct HangUp(AsyncFd<OwnedFd>);

impl HangUp {
    /// A watch on `fd` (a duplicate of it is registered), when it is a pipe
    /// or a socket and a runtime with I/O is running.
    pub fn of(fd: BorrowedFd<'_>) -> Option<Self> {
        let kind = SFlag::from_bits_truncate(fstat(fd).ok()?.st_mode) & SFlag::S_IFMT;
        if kind != SFlag::S_IFIFO && kind != SFlag::S_IFSOCK {
            return None;
        }
        tokio::runtime::Handle::try_current().ok()?;
        let duplicate = fd.try_clone_to_owned().ok()?;
        // Readable interest: epoll reports a hang-up with it.
        // SAFETY: the `AsyncFd` owns the duplicate, so nothing else closes
        // or replaces that descriptor while it is registered.
        #[allow(unsafe_code)]
        let registered =
            unsafe { AsyncFd::register_with_interest(duplicate, tokio::io::Interest::READABLE) };
        registered.ok().map(Self)
    }

    /// A watch on this process's stdin.
    pub fn of_stdin() -> Option<Self> {
        Self::of(io::stdin().as_fd())
    }

    /// Waits until zot has closed its end. Never reads: every readiness
    /// that is not the close (more bytes arriving) is waited past.
    pub(crate) async fn hung_up(&self) {
        loop {
            match self.0.readable().await {
                Ok(guard) if guard.ready().is_read_closed() => return,
                Ok(mut guard) => guard.clear_ready(),
                // The watch itself failed: it can tell nothing more.
                Err(_) => std::future::pending::<()>().await,
            }
        }
    }
}

/// Whether stdout and stderr name the same file.
pub(crate) fn stdout_is_stderr() -> bool {
    same_file(io::stdout().as_fd(), io::stderr().as_fd())
}

/// Whether two descriptors name the same file (inode).
fn same_file(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> bool {
    match (fstat(a), fstat(b)) {
        (Ok(a), Ok(b)) => a.st_dev == b.st_dev && a.st_ino == b.st_ino,
        // Unknown: assume shared, the safe side.
        _ => true,
    }
}

/// A standard stream (fd 0 or 1; never closed here) in non-blocking mode,
/// registered with the runtime's I/O driver.
struct Polled {
    fd: AsyncFd<RawFd>,
    /// The file status flags before, restored on drop.
    flags: OFlag,
    /// The descriptor, when this stream owns it (closed after the flags
    /// are restored).
    owned: Option<OwnedFd>,
}

impl Polled {
    /// `fd` made non-blocking and registered, if it is a pipe or a socket,
    /// not `shared`, and a runtime with I/O is running.
    fn new(fd: BorrowedFd<'_>, shared: bool) -> Option<Self> {
        if shared {
            return None;
        }
        let kind = SFlag::from_bits_truncate(fstat(fd).ok()?.st_mode) & SFlag::S_IFMT;
        if kind != SFlag::S_IFIFO && kind != SFlag::S_IFSOCK {
            return None;
        }
        // Registering needs a runtime with I/O enabled.
        tokio::runtime::Handle::try_current().ok()?;
        let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL).ok()?);
        fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK)).ok()?;
        // SAFETY: `fd` is open (it is borrowed) and is the process's stdin or
        // stdout, or a descriptor this value will own (or, in tests, a pipe
        // that outlives this value): nothing closes or replaces it while the
        // `AsyncFd` lives.
        #[allow(unsafe_code)]
        let registered = unsafe { AsyncFd::register(fd.as_raw_fd()) };
        match registered {
            Ok(fd) => Some(Self {
                fd,
                flags,
                owned: None,
            }),
            Err(err) => {
                tracing::debug!("cannot poll a standard stream ({err}); using a thread");
                let _ = fcntl(fd, FcntlArg::F_SETFL(flags));
                None
            }
        }
    }

    /// Like [`Polled::new`], owning `fd`; `fd` back when it cannot be polled.
    fn owning(fd: OwnedFd, shared: bool) -> Result<Self, OwnedFd> {
        match Self::new(fd.as_fd(), shared) {
            Some(mut polled) => {
                polled.owned = Some(fd);
                Ok(polled)
            }
            None => Err(fd),
        }
    }

    fn borrowed(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor stays open while `self` lives (see `new`).
        #[allow(unsafe_code)]
        unsafe {
            BorrowedFd::borrow_raw(*self.fd.get_ref())
        }
    }
}

impl Drop for Polled {
    fn drop(&mut self) {
        let _ = fcntl(self.borrowed(), FcntlArg::F_SETFL(self.flags));
    }
}

impl AsyncRead for Polled {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let room = unfilled.len();
            let fd = self.borrowed();
            match guard.try_io(|_| nix::unistd::read(fd, unfilled).map_err(io::Error::from)) {
                Ok(Ok(n)) => {
                    // A pipe or a stream socket fills a read with all it
                    // holds: a short one drained it. Waiting for the driver
                    // now saves the read that would only say `EAGAIN`, one
                    // system call per frame (tokio's own streams do the same).
                    if n > 0 && n < room {
                        guard.clear_ready();
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(err)) if err.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(err)) => return Poll::Ready(Err(err)),
                // Not ready after all: readiness was cleared, wait again.
                Err(_would_block) => {}
            }
        }
    }
}

impl AsyncWrite for Polled {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.fd.poll_write_ready(cx))?;
            let fd = self.borrowed();
            match guard.try_io(|_| nix::unistd::write(fd, bytes).map_err(io::Error::from)) {
                Ok(Err(err)) if err.kind() == io::ErrorKind::Interrupted => {}
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => {}
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Every write went straight to the descriptor.
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

    /// A pipe: (read end, write end).
    fn pipe() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
        nix::unistd::pipe().unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_pipe_is_polled_and_its_flags_are_restored() {
        let (read, write) = pipe();
        let before = fcntl(&read, FcntlArg::F_GETFL).unwrap_or_else(|e| panic!("{e}"));
        {
            let polled = |fd| Polled::new(fd, false).unwrap_or_else(|| panic!("a pipe is polled"));
            let (mut reader, mut writer) = (polled(read.as_fd()), polled(write.as_fd()));
            let nonblocking = fcntl(&read, FcntlArg::F_GETFL).unwrap_or_else(|e| panic!("{e}"));
            assert_ne!(nonblocking & OFlag::O_NONBLOCK.bits(), 0);
            let echo = tokio::spawn(async move {
                let mut got = [0u8; 5];
                reader.read_exact(&mut got).await.map(|_| got)
            });
            let written = writer.write_all(b"hello").await;
            assert!(written.is_ok(), "{written:?}");
            assert!(matches!(echo.await, Ok(Ok(got)) if &got == b"hello"));
        }
        let after = fcntl(&read, FcntlArg::F_GETFL).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(after, before);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn after_a_short_read_the_next_write_is_still_seen() {
        use std::io::Write as _;
        let (read, write) = pipe();
        let mut reader = Polled::new(read.as_fd(), false).unwrap_or_else(|| panic!("polled"));
        // Written from another thread, at any moment against the reads.
        let writer = std::thread::spawn(move || {
            let mut write = std::fs::File::from(write);
            for round in 0..200u32 {
                write
                    .write_all(format!("{round:03}\n").as_bytes())
                    .unwrap_or_else(|e| panic!("{e}"));
                if round % 3 == 0 {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
            }
        });
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        while got.len() < 800 {
            let read =
                tokio::time::timeout(std::time::Duration::from_secs(10), reader.read(&mut buf))
                    .await;
            match read {
                Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
                other => panic!("after {} bytes: {other:?}", got.len()),
            }
        }
        let expected: Vec<u8> = (0..200u32)
            .flat_map(|round| format!("{round:03}\n").into_bytes())
            .collect();
        assert_eq!(got, expected);
        assert!(writer.join().is_ok());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_file_or_a_shared_stream_keeps_the_blocking_path() {
        let file = tempfile::tempfile().unwrap_or_else(|e| panic!("{e}"));
        assert!(Polled::new(file.as_fd(), false).is_none());
        let (read, _write) = pipe();
        assert!(Polled::new(read.as_fd(), true).is_none());
        let flags = fcntl(&read, FcntlArg::F_GETFL).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(flags & OFlag::O_NONBLOCK.bits(), 0);
        assert!(same_file(read.as_fd(), read.as_fd()));
        assert!(!same_file(read.as_fd(), file.as_fd()));
    }
}
