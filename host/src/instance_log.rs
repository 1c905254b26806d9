//! Diagnostics of one extension instance, routed to that instance's own
//! stream.
//!
//! zot keeps one log per extension: the stderr of the process it started.
//! In the shared host many extensions share one process, so the host runs
//! each instance inside [`scope`] with the relay's stderr, and the CLI's log
//! writer copies every record made within it there too ([`current`]). Tasks
//! an instance starts keep the route when started with `spawn`.

use std::future::Future;
use std::io::Write;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where one instance's diagnostics go.
pub type Sink = Arc<Mutex<Stream>>;

/// The bytes of diagnostics one instance may write per [`WINDOW`], to its
/// stream and the host's log alike. A guest can make a record per line it
/// writes (a second `hello`, a line zot could not read): unbounded, that
/// filled the disk at 12 MB/s through both logs.
pub const BYTES_PER_WINDOW: u64 = 256 * 1024;

/// The window of [`BYTES_PER_WINDOW`].
pub const WINDOW: Duration = Duration::from_secs(60);

/// Records queued for one instance's stream and not yet written. Past
/// this, a record is held back (and counted as suppressed): the stream is
/// the relay's stderr, which the host does not drain, and a launcher that
/// reads it slowly, or a terminal held with Ctrl-S, must cost that
/// instance its records, not the host a worker thread.
pub const QUEUED_RECORDS: usize = 256;

/// One instance's stream, with its budget of diagnostics.
#[derive(Debug)]
pub struct Stream {
    /// None: the instance's records go to this process's stderr only (a
    /// standalone `zotbox run`, whose stderr is zot's log of it).
    out: Option<Out>,
    window_began: Instant,
    written: u64,
    suppressed: u64,
}

/// Where a stream's records go.
#[derive(Debug)]
enum Out {
    /// Nothing written yet: most instances never write a record, so the
    /// writer thread starts with the first.
    Idle(std::fs::File),
    /// To the thread writing them, in order, and what says it is done.
    /// The thread holds the token weakly: once it is gone, the stream is
    /// closed, and a log that takes nothing is given up.
    Queue {
        queue: SyncSender<Vec<u8>>,
        finished: Finished,
        _open: Arc<()>,
    },
    /// The writer thread could not start, or ended: records are dropped.
    Gone,
}

/// What may be written of a record ([`Stream::admit`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Admitted {
    /// A line to write first, saying what the last window suppressed.
    pub note: Option<String>,
    /// Whether the record itself may be written.
    pub record: bool,
}

impl Stream {
    /// A stream writing to `file`, its window beginning now.
    pub fn new(file: std::fs::File) -> Self {
        Self::with(Some(Out::Idle(file)))
    }

    /// The budget alone, for the one instance of a process whose stderr is
    /// the instance's stream.
    pub fn stderr_only() -> Self {
        Self::with(None)
    }

    fn with(out: Option<Out>) -> Self {
        Self {
            out,
            window_began: Instant::now(),
            written: 0,
            suppressed: 0,
        }
    }

    /// What may be written of a record of `len` bytes made at `now`.
    pub fn admit(&mut self, len: usize, now: Instant) -> Admitted {
        let mut note = None;
        if now.saturating_duration_since(self.window_began) >= WINDOW {
            if self.suppressed > 0 {
                note = Some(format!(
                    "zotbox: {} diagnostic record(s) of this extension suppressed in the last \
                     {} s (past {} KiB a window, or while this log was not being read)\n",
                    self.suppressed,
                    WINDOW.as_secs(),
                    BYTES_PER_WINDOW / 1024
                ));
            }
            (self.window_began, self.written, self.suppressed) = (now, 0, 0);
        }
        let len = len as u64;
        let record = self.written.saturating_add(len) <= BYTES_PER_WINDOW;
        if record {
            self.written += len;
        } else {
            self.suppressed += 1;
        }
        Admitted { note, record }
    }

    /// Whether the instance has a stream of its own (not this process's
    /// stderr).
    pub fn has_own(&self) -> bool {
        self.out.is_some()
    }

    /// Queues `bytes` for the instance's own stream, never waiting for it:
    /// past [`QUEUED_RECORDS`] not yet written, the record is counted as
    /// suppressed instead.
    pub fn write(&mut self, bytes: &[u8]) {
        let Some(out) = &mut self.out else {
            return;
        };
        let sent = match out.queue() {
            Some(queue) => queue.try_send(bytes.to_vec()),
            None => {
                self.suppressed += 1;
                return;
            }
        };
        match sent {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.suppressed += 1,
            Err(TrySendError::Disconnected(_)) => {
                *out = Out::Gone;
                self.suppressed += 1;
            }
        }
    }

    /// Takes no more records; what says the thread writing those queued
    /// is done, if one runs, to wait for with [`written`].
    pub fn close(&mut self) -> Option<Finished> {
        match self.out.replace(Out::Gone)? {
            Out::Queue { finished, .. } => Some(finished),
            Out::Idle(_) | Out::Gone => None,
        }
    }
}

impl Out {
    /// The queue to the writer thread, started first if none runs yet.
    fn queue(&mut self) -> Option<&SyncSender<Vec<u8>>> {
        if let Out::Idle(_) = self
            && let Out::Idle(file) = std::mem::replace(self, Out::Gone)
            && let Some((queue, finished, open)) = start_writer(file)
        {
            *self = Out::Queue {
                queue,
                finished,
                _open: open,
            };
        }
        match self {
            Out::Queue { queue, .. } => Some(queue),
            Out::Idle(_) | Out::Gone => None,
        }
    }
}

/// Resolves when a stream's writer thread has written all it was given
/// (or given up on a file that refuses writes).
pub type Finished = tokio::sync::oneshot::Receiver<()>;

/// Waits up to `patience` for a closed stream's writer to write what was
/// queued: an instance's last records (why it ended) reach its log before
/// its relay's own last line, unless nobody reads that log. No thread waits
/// on a writer stuck on such a log.
pub async fn written(finished: Finished, patience: Duration) {
    let _ = tokio::time::timeout(patience, finished).await;
}

/// How long the writer of a closed stream keeps offering its last records
/// to a log that takes nothing before it lets the log go: zot stopped (or
/// held) without reading an extension's stderr must not keep a thread and
/// the pipe for every instance that ended meanwhile.
const GIVE_UP_AFTER: Duration = Duration::from_secs(5);

/// How often a writer waiting on a full pipe looks whether its stream was
/// closed. It wakes at once when the pipe takes bytes again.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// The thread writing one stream's records, ending when the stream is
/// dropped (or the file refuses a write: a relay gone). It holds no lock
/// while it waits on the file.
fn start_writer(file: std::fs::File) -> Option<(SyncSender<Vec<u8>>, Finished, Arc<()>)> {
    let (queue, records) = std::sync::mpsc::sync_channel::<Vec<u8>>(QUEUED_RECORDS);
    let (done, finished) = tokio::sync::oneshot::channel();
    let open = Arc::new(());
    let watched = Arc::downgrade(&open);
    // A pipe (zot's log of the extension) is written through a
    // description of its own that does not block, so the writer can look up
    // from a full one; anything else blocks as a file does.
    let mut out = match nonblocking_twin(&file) {
        Some(twin) => Log::Pipe(twin),
        None => Log::Blocking(file),
    };
    std::thread::Builder::new()
        .name("zotbox-instance-log".to_owned())
        .stack_size(64 * 1024)
        .spawn(move || {
            for record in records {
                if !out.write_all(&record, &watched) {
                    break;
                }
            }
            let _ = done.send(());
        })
        .ok()
        .map(|_| (queue, finished, open))
}

/// The file a writer thread writes to.
enum Log {
    /// A pipe, through a non-blocking description of its own.
    Pipe(std::fs::File),
    /// Anything else (a file, a terminal), written as it is.
    Blocking(std::fs::File),
}

impl Log {
    /// Writes all of `bytes`; false when the log refused them, or when the
    /// stream is closed (`open` gone) and the pipe took nothing for
    /// [`GIVE_UP_AFTER`].
    fn write_all(&mut self, mut bytes: &[u8], open: &std::sync::Weak<()>) -> bool {
        let pipe = match self {
            Log::Blocking(file) => return file.write_all(bytes).is_ok(),
            Log::Pipe(pipe) => pipe,
        };
        let mut stuck_since: Option<Instant> = None;
        while !bytes.is_empty() {
            match pipe.write(bytes) {
                Ok(0) => return false,
                Ok(written) => {
                    bytes = &bytes[written..];
                    stuck_since = None;
                }
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                    if open.strong_count() == 0 {
                        let since = *stuck_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= GIVE_UP_AFTER {
                            return false;
                        }
                    }
                    wait_for_room(pipe, LOOK_EVERY);
                }
                Err(_) => return false,
            }
        }
        true
    }
}

/// Waits up to `most` for `pipe` to take bytes again.
fn wait_for_room(pipe: &std::fs::File, most: Duration) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let timeout = PollTimeout::try_from(most).unwrap_or(PollTimeout::MAX);
    let mut fds = [PollFd::new(pipe.as_fd(), PollFlags::POLLOUT)];
    // An early wake only makes the next write try sooner; an error (none
    // is expected of a valid pipe) must not make the writer spin.
    if poll(&mut fds, timeout).is_err() {
        std::thread::sleep(most);
    }
}

/// A second, non-blocking description of the pipe `file` writes to, when
/// it is one. Setting `O_NONBLOCK` on `file` itself would change the
/// description the relay shares (its own stderr), whose writes would then
/// fail instead of waiting; opening the pipe again through `/proc` makes a
/// description of our own. None for anything else, or where that fails.
fn nonblocking_twin(file: &std::fs::File) -> Option<std::fs::File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    if !file.metadata().ok()?.file_type().is_fifo() {
        return None;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .ok()
}

tokio::task_local! {
    static SINK: Sink;
}

/// Runs `future` with its diagnostics routed to `sink`.
pub async fn scope<F: Future>(sink: Sink, future: F) -> F::Output {
    SINK.scope(sink, future).await
}

/// The sink of the instance running on this task, if any.
pub fn current() -> Option<Sink> {
    SINK.try_with(Clone::clone).ok()
}

/// `tokio::spawn`, keeping this task's route.
pub(crate) fn spawn<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match current() {
        Some(sink) => tokio::spawn(SINK.scope(sink, future)),
        None => tokio::spawn(future),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_writes_a_window_s_budget_then_says_what_it_held_back() {
        let file = tempfile::tempfile().unwrap_or_else(|e| panic!("{e}"));
        let mut stream = Stream::new(file);
        let start = stream.window_began;
        let record = 1000;
        let fits = (BYTES_PER_WINDOW / record as u64) as usize;
        // Attack: a guest making a record per line it writes.
        let admitted = (0..fits + 500)
            .filter(|_| stream.admit(record, start).record)
            .count();
        assert_eq!(admitted, fits);
        // The next window: the record, after a note of the 500 held back.
        let later = start + WINDOW;
        assert_eq!(
            stream.admit(record, later),
            Admitted {
                note: Some(
                    "zotbox: 500 diagnostic record(s) of this extension suppressed in the last \
                     60 s (past 256 KiB a window, or while this log was not being read)\n"
                        .to_owned()
                ),
                record: true
            }
        );
        // A window with nothing held back says nothing.
        assert_eq!(
            stream.admit(record, later + WINDOW),
            Admitted {
                note: None,
                record: true
            }
        );
    }

    #[test]
    fn a_stream_nobody_reads_holds_back_records_but_never_the_writer() {
        use std::io::Read;
        // Attack (or a user's Ctrl-S): the relay's stderr is a pipe nobody
        // drains. Writing to it on a worker thread stalled every other
        // extension of the shared host once its 64 KiB were full.
        let (mut reader, writer) = std::io::pipe().unwrap_or_else(|e| panic!("{e}"));
        let mut stream = Stream::new(std::fs::File::from(std::os::fd::OwnedFd::from(writer)));
        const RECORDS: usize = 1024;
        const RECORD: usize = 1024;
        let (done, written) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for at in 0..RECORDS {
                let mut record = format!("{at:07}\n").into_bytes();
                record.resize(RECORD, b'x');
                stream.write(&record);
            }
            let _ = done.send(stream);
        });
        // A minute: the writes return at once with the fix, and never
        // without it (the pipe is not read until they have).
        let Ok(stream) = written.recv_timeout(Duration::from_secs(60)) else {
            panic!("writing to a stream nobody reads waited for its reader");
        };
        // The pipe's buffer and the queue took some records; the rest were
        // counted, to be told of.
        let suppressed = usize::try_from(stream.suppressed).unwrap_or(usize::MAX);
        let kept = RECORDS - suppressed;
        assert!((QUEUED_RECORDS..RECORDS).contains(&kept), "{kept} kept");
        drop(stream);
        let mut out = Vec::new();
        reader
            .read_to_end(&mut out)
            .unwrap_or_else(|e| panic!("{e}"));
        // Every record kept arrives whole and in order.
        assert_eq!(out.len(), kept * RECORD);
        let numbers: Vec<usize> = out
            .chunks(RECORD)
            .map(|record| {
                String::from_utf8_lossy(&record[..7])
                    .parse()
                    .unwrap_or(usize::MAX)
            })
            .collect();
        assert!(
            numbers.windows(2).all(|pair| pair[0] < pair[1]) && numbers[kept - 1] < RECORDS,
            "records out of order or cut"
        );
    }

    /// Whether the pipe `reader` reads has no writer left.
    fn writers_gone(reader: &std::io::PipeReader) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::fd::AsFd;
        let mut fds = [PollFd::new(reader.as_fd(), PollFlags::POLLIN)];
        let _ = poll(&mut fds, PollTimeout::ZERO);
        fds[0]
            .revents()
            .is_some_and(|events| events.contains(PollFlags::POLLHUP))
    }

    #[test]
    fn a_closed_stream_lets_go_of_a_pipe_nobody_reads() {
        // Attack (or zot stopped with Ctrl-Z): instances end while their
        // log is a full pipe nobody reads. Each one's writer waited on the
        // pipe until its reader went, keeping a thread and the pipe.
        let (reader, writer) = std::io::pipe().unwrap_or_else(|e| panic!("{e}"));
        let mut stream = Stream::new(std::fs::File::from(std::os::fd::OwnedFd::from(writer)));
        // Four times what the pipe holds: it fills, the queue keeps the rest.
        for _ in 0..QUEUED_RECORDS {
            stream.write(&[b'x'; 1024]);
        }
        // While the stream is open, its writer waits for the reader however
        // long it takes (zot may be resumed).
        std::thread::sleep(GIVE_UP_AFTER + Duration::from_millis(500));
        assert!(!writers_gone(&reader), "an open stream's writer let go");
        assert!(stream.close().is_some(), "a writer thread ran");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !writers_gone(&reader) {
            assert!(
                Instant::now() < deadline,
                "a closed stream's writer still holds a pipe nobody reads"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    #[tokio::test]
    async fn a_closed_stream_has_written_every_record_queued_and_takes_no_more() {
        use std::io::{Read, Seek};
        let mut file = tempfile::tempfile().unwrap_or_else(|e| panic!("{e}"));
        let writing = file.try_clone().unwrap_or_else(|e| panic!("{e}"));
        let mut stream = Stream::new(writing);
        for at in 0..200 {
            stream.write(format!("record {at}\n").as_bytes());
        }
        let Some(finished) = stream.close() else {
            panic!("a writer thread ran");
        };
        written(finished, Duration::from_secs(60)).await;
        stream.write(b"too late\n");
        let mut text = String::new();
        file.rewind().unwrap_or_else(|e| panic!("{e}"));
        file.read_to_string(&mut text)
            .unwrap_or_else(|e| panic!("{e}"));
        let expected: String = (0..200).map(|at| format!("record {at}\n")).collect();
        assert_eq!(text, expected);
        assert_eq!(stream.suppressed, 1);
        assert!(stream.close().is_none());
    }

    #[tokio::test]
    async fn a_task_spawned_in_scope_keeps_the_route_and_others_have_none() {
        let file = tempfile::tempfile().unwrap_or_else(|e| panic!("{e}"));
        let sink: Sink = Arc::new(Mutex::new(Stream::new(file)));
        assert!(current().is_none());
        let inner = scope(sink.clone(), async {
            let here = current().is_some();
            let spawned = spawn(async { current().is_some() }).await.unwrap_or(false);
            let plain = tokio::spawn(async { current().is_some() })
                .await
                .unwrap_or(true);
            (here, spawned, plain)
        })
        .await;
        assert_eq!(inner, (true, true, false));
    }
}
