//! Diagnostics of one extension instance, routed to that instance's own
//! stream.
//!
//! zot keeps one log per extension: the stderr of the process it started.
//! In the shared host many extensions share one process, so the host runs
//! each instance inside [`scope`] with the relay's stderr, and the CLI's log
//! writer copies every record made within it there too ([`current`]). Tasks
//! an instance starts keep the route when started with `spawn`.

use std::future::Future;
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

/// One instance's stream, with its budget of diagnostics.
#[derive(Debug)]
pub struct Stream {
    /// None: the instance's records go to this process's stderr only (a
    /// standalone `zotbox run`, whose stderr is zot's log of it).
    file: Option<std::fs::File>,
    window_began: Instant,
    written: u64,
    suppressed: u64,
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
        Self::with(Some(file))
    }

    /// The budget alone, for the one instance of a process whose stderr is
    /// the instance's stream.
    pub fn stderr_only() -> Self {
        Self::with(None)
    }

    fn with(file: Option<std::fs::File>) -> Self {
        Self {
            file,
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
                     {} s (at most {} KiB a window)\n",
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

    /// The instance's stream, when it is not this process's stderr.
    pub fn file(&mut self) -> Option<&mut std::fs::File> {
        self.file.as_mut()
    }
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
                     60 s (at most 256 KiB a window)\n"
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
