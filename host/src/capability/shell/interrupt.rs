//! Stopping the confined commands in flight when zotbox is told to stop (a
//! Ctrl-C on `zotbox call`, zot's `SIGTERM` to `serve`): each is killed
//! and what it left in the workspace is taken back before zotbox exits,
//! instead of waiting for the next command there (a `.git` made before
//! the Ctrl-C would be the user's next `git status`'s, unsandboxed).

use std::sync::LazyLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;

/// Whether zotbox was told to stop.
static STOP: LazyLock<watch::Sender<bool>> = LazyLock::new(|| watch::channel(false).0);

/// How many confined commands are between their start and their take-back.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Tells every confined command in flight, and every one that starts
/// after, to stop; returns how many were in flight.
pub fn interrupt() -> usize {
    STOP.send_replace(true);
    RUNNING.load(Ordering::SeqCst)
}

/// Waits until every confined command in flight has been taken back, for
/// `patience` at the most; returns whether they all were.
pub async fn settled(patience: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + patience;
    while RUNNING.load(Ordering::SeqCst) > 0 {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// Whether zotbox was told to stop: no command starts then.
pub(super) fn stopping() -> bool {
    *STOP.borrow()
}

/// Resolves once zotbox is told to stop.
pub(super) async fn requested() {
    let mut stop = STOP.subscribe();
    // The sender lives in a static: `wait_for` cannot fail.
    let _ = stop.wait_for(|stop| *stop).await;
}

/// One confined command in flight, from its start to its take-back.
pub(super) struct Running(());

impl Running {
    pub(super) fn start() -> Self {
        RUNNING.fetch_add(1, Ordering::SeqCst);
        Self(())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}
