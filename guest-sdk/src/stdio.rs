//! Where the run loop reads and writes its frames: the process's stdin and
//! stdout.
//!
//! Natively these are the standard library's. Built for `wasm32-wasip2`, the
//! standard library's stdio goes through wasi-libc, which makes three host
//! calls for every write (`check-write`, `write`, `blocking-flush`) and
//! keeps a descriptor table of its own in front of every read. The run loop
//! writes each frame whole and flushes it at once anyway, so here a frame is
//! one `blocking-write-and-flush` (per 4096 bytes, the most one call may
//! carry) and a read is one `blocking-read`: two crossings into the host
//! per request answered instead of four.

#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn stdin() -> impl std::io::Read {
    std::io::stdin().lock()
}

#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn stdout() -> impl std::io::Write {
    std::io::stdout().lock()
}

#[cfg(target_arch = "wasm32")]
pub(crate) fn stdin() -> impl std::io::Read {
    wasi::Stdin::default()
}

#[cfg(target_arch = "wasm32")]
pub(crate) fn stdout() -> impl std::io::Write {
    wasi::Stdout::default()
}

#[cfg(target_arch = "wasm32")]
mod wasi {
    use std::io;

    mod bindings {
        wit_bindgen::generate!({
            path: "wit/stdio.wit",
            world: "zotbox:guest-stdio/stdio",
            generate_all,
        });
    }

    use bindings::wasi::cli::stdin::get_stdin;
    use bindings::wasi::cli::stdout::get_stdout;
    use bindings::wasi::io::streams::{InputStream, OutputStream, StreamError};

    /// The most `blocking-write-and-flush` takes in one call (WASI 0.2).
    const MOST_PER_WRITE: usize = 4096;

    /// stdin as a WASI input stream, taken on the first read.
    #[derive(Default)]
    pub(super) struct Stdin {
        stream: Option<InputStream>,
    }

    impl io::Read for Stdin {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if buf.is_empty() {
                return Ok(0);
            }
            let stream = self.stream.get_or_insert_with(get_stdin);
            let asked = u64::try_from(buf.len()).unwrap_or(u64::MAX);
            // WASI: a blocking read returns at least one byte, or says the
            // stream is closed; nothing read is the end, as in wasi-libc.
            match stream.blocking_read(asked) {
                Ok(bytes) => {
                    // A host never gives more than asked; should one, the
                    // rest would not fit, so it counts as a failed read.
                    let into = buf.get_mut(..bytes.len()).ok_or_else(|| {
                        io::Error::other("stdin gave more bytes than were asked for")
                    })?;
                    into.copy_from_slice(&bytes);
                    Ok(bytes.len())
                }
                Err(StreamError::Closed) => Ok(0),
                Err(StreamError::LastOperationFailed(_)) => {
                    Err(io::Error::other("reading stdin failed"))
                }
            }
        }
    }

    /// stdout as a WASI output stream, taken on the first write.
    #[derive(Default)]
    pub(super) struct Stdout {
        stream: Option<OutputStream>,
    }

    impl io::Write for Stdout {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            let chunk = &bytes[..bytes.len().min(MOST_PER_WRITE)];
            if chunk.is_empty() {
                return Ok(0);
            }
            let stream = self.stream.get_or_insert_with(get_stdout);
            match stream.blocking_write_and_flush(chunk) {
                Ok(()) => Ok(chunk.len()),
                Err(StreamError::Closed) => Err(io::ErrorKind::BrokenPipe.into()),
                Err(StreamError::LastOperationFailed(_)) => {
                    Err(io::Error::other("writing to stdout failed"))
                }
            }
        }

        fn flush(&mut self) -> io::Result<()> {
            // Every write was flushed.
            Ok(())
        }
    }
}
