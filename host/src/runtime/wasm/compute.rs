//! How long a guest may compute without reading its input.
//!
//! A request's deadline bounds a guest's work on that request, but a guest
//! may also compute with no request open: after answering, or from the
//! start. In the shared host every guest shares two or so worker threads,
//! so a guest spinning there slows every other extension of every zot
//! session, without end. The rule:
//!
//! **A guest computes at most twice its call timeout between two reads of
//! its input** (the longest a tool call of it may take, which the policy
//! bounds; twice, so that a request's own deadline, which the session
//! keeps by the clock, always comes first and says what it says: a timeout
//! of that call). Computing is counted as the time its task is polled (wasm code
//! and the host calls it makes run only then; a guest waiting for input, a
//! timer or the network is not counted). Reading the rest of what the host
//! wrote it starts the count again: a guest reading one byte at a time
//! gets one budget per frame the host sends, not one per byte. Past the
//! limit the guest is killed, as at a missed deadline, and its exit says
//! why.
//!
//! The count is taken once per poll (two clock reads) and checked at the
//! epoch ticks a running guest yields at anyway, so a guest that computes
//! little pays nothing else.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::pipe::GuestStdin;
use crate::runtime::Exit;

/// Time a guest's task has been polled, in total.
#[derive(Debug, Default)]
pub(crate) struct ComputeClock {
    nanos: AtomicU64,
}

impl ComputeClock {
    /// Adds one poll's length.
    pub(crate) fn charge(&self, polled: Duration) {
        let nanos = u64::try_from(polled.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    fn total(&self) -> u64 {
        self.nanos.load(Ordering::Relaxed)
    }
}

/// The check made at each epoch tick of one guest.
#[derive(Debug)]
pub(crate) struct ComputeBudget {
    limit: Duration,
    clock: Arc<ComputeClock>,
    stdin: GuestStdin,
    /// Times the input was drained, when last checked.
    seen: u64,
    /// The clock when the guest last took input.
    since: u64,
}

impl ComputeBudget {
    /// A budget of `limit` per stretch between reads of `stdin`.
    pub(crate) fn new(limit: Duration, clock: Arc<ComputeClock>, stdin: GuestStdin) -> Self {
        Self {
            limit,
            clock,
            stdin,
            seen: 0,
            since: 0,
        }
    }

    /// Why the guest must stop, once it has computed past its limit since
    /// it last took input.
    pub(crate) fn exceeded(&mut self) -> Option<Exit> {
        let now = self.clock.total();
        let drained = self.stdin.drained();
        if drained != self.seen {
            self.seen = drained;
            self.since = now;
            return None;
        }
        let used = Duration::from_nanos(now.saturating_sub(self.since));
        (used > self.limit).then_some(Exit::OverCompute { limit: self.limit })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_count_starts_again_when_the_guest_takes_input() {
        use tokio::io::AsyncWriteExt as _;

        let (mut host, stdin) = super::super::pipe::stdin_pipe(64);
        let clock = Arc::new(ComputeClock::default());
        let mut budget =
            ComputeBudget::new(Duration::from_millis(100), clock.clone(), stdin.clone());
        clock.charge(Duration::from_millis(60));
        assert_eq!(budget.exceeded(), None);
        clock.charge(Duration::from_millis(60));
        let exit = budget.exceeded();
        assert_eq!(
            exit,
            Some(Exit::OverCompute {
                limit: Duration::from_millis(100)
            })
        );
        assert_eq!(
            exit.map(|exit| exit.to_string()).as_deref(),
            Some(
                "killed: computed for 0.1 s without reading its input (twice the longest a tool \
                 call of it may take)"
            )
        );
        // Attack: new input read a byte at a time: no new stretch until
        // the last byte written is taken.
        assert!(host.write_all(b"{}\n").await.is_ok());
        for _ in 0..2 {
            assert!(matches!(
                stdin.try_take(1),
                super::super::pipe::Took::Bytes(_)
            ));
            assert!(budget.exceeded().is_some());
        }
        assert!(matches!(
            stdin.try_take(1),
            super::super::pipe::Took::Bytes(_)
        ));
        assert_eq!(budget.exceeded(), None);
        clock.charge(Duration::from_millis(90));
        assert_eq!(budget.exceeded(), None);
        // Input written but not read does not count.
        assert!(host.write_all(b"{}\n").await.is_ok());
        clock.charge(Duration::from_millis(20));
        assert!(budget.exceeded().is_some());
    }
}
