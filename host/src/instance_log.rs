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

/// Where one instance's diagnostics go.
pub type Sink = Arc<Mutex<std::fs::File>>;

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

    #[tokio::test]
    async fn a_task_spawned_in_scope_keeps_the_route_and_others_have_none() {
        let file = tempfile::tempfile().unwrap_or_else(|e| panic!("{e}"));
        let sink: Sink = Arc::new(Mutex::new(file));
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
