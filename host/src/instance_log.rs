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
    Queue(SyncSender<Vec<u8>>, Finished),
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
            Out::Queue(_, finished) => Some(finished),
            Out::Idle(_) | Out::Gone => None,
        }
    }
}

impl Out {
    /// The queue to the writer thread, started first if none runs yet.
    fn queue(&mut self) -> Option<&SyncSender<Vec<u8>>> {
        if let Out::Idle(_) = self
            && let Out::Idle(file) = std::mem::replace(self, Out::Gone)
            && let Some((queue, finished)) = start_writer(file)
        {
            *self = Out::Queue(queue, finished);
        }
        match self {
            Out::Queue(queue, _) => Some(queue),
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

/// The thread writing one stream's records, ending when the stream is
/// dropped (or the file refuses a write: a relay gone). It holds no lock
/// while it waits on the file.
fn start_writer(mut file: std::fs::File) -> Option<(SyncSender<Vec<u8>>, Finished)> {
    let (queue, records) = std::sync::mpsc::sync_channel::<Vec<u8>>(QUEUED_RECORDS);
    let (done, finished) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("zotbox-instance-log".to_owned())
        .stack_size(64 * 1024)
        .spawn(move || {
            for record in records {
                if file.write_all(&record).is_err() {
                    break;
                }
            }
            let _ = done.send(());
        })
        .ok()
        .map(|_| (queue, finished))
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
