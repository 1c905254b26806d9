//! The epoch ticker: advances an engine's epoch every [`EPOCH_TICK`] while
//! any guest runs wasm code, and sleeps while none does.
//!
//! Every store yields at each new epoch (see `guest::new_store`), which is
//! how a spinning guest shares its worker thread and how an abort or a
//! deadline reaches it. A guest waiting for input is not running wasm (it
//! sits in a host call), so a host whose guests all wait needs no ticks:
//! before this, an idle shared host woke 200 times a second for nothing.
//!
//! Rules:
//!
//! 1. **Counted while polled.** A guest's task counts as running for as
//!    long as the executor polls it: wasm code runs only inside a poll,
//!    and a guest waiting for input (or anything else) has returned
//!    `Pending`. An epoch yield returns `Pending` too, so a spinning guest
//!    counts again as soon as it is polled again. A task dropped while
//!    counted (aborted, or panicked mid-poll) stops counting when it is
//!    dropped. (A call hook on each store would count the same at every
//!    crossing between wasm and the host, six or more per frame; a poll
//!    is one per frame.)
//! 2. **Never late to wake.** The ticker parks only after
//!    [`IDLE_TICKS_BEFORE_PARK`] ticks with nothing running, and only after
//!    announcing it; a guest entering wasm when nothing else runs wakes it.
//!    The announcement and the count are sequentially consistent, so one of
//!    the two always sees the other: the ticker never sleeps through a
//!    running guest.
//! 3. **Gone with its engine, asleep until then.** While the runtime that
//!    started it lives, a parked ticker sleeps until a guest wakes it (an
//!    idle host makes no wake-ups at all). Once the runtime is dropped
//!    ([`Ticker::owner_gone`]), stores it made may still run (each holds
//!    the engine), so the ticker lives on, and a parked one wakes every
//!    [`PARKED_CHECK`] to notice that the engine is gone too.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::thread::Thread;
use std::time::{Duration, Instant};

use wasmtime::Engine;

use super::compute::ComputeClock;

/// How often the epoch advances while a guest runs.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(5);
/// Ticks with no guest running before the ticker parks (≈ 100 ms): a
/// burst of calls does not pay a wake-up for each one.
const IDLE_TICKS_BEFORE_PARK: u32 = 20;
/// How long a parked ticker whose runtime is gone sleeps before looking at
/// its engine again.
const PARKED_CHECK: Duration = Duration::from_secs(1);

/// What the ticker and the stores of one engine share.
#[derive(Debug, Default)]
pub(crate) struct Ticker {
    /// Stores running wasm code now.
    running: AtomicUsize,
    /// The ticker announced it is about to park (or is parked).
    parked: AtomicBool,
    /// The runtime that started it is gone (rule 3).
    owner_gone: AtomicBool,
    /// Ticks made so far (for tests and diagnostics).
    ticks: AtomicU64,
    /// Times a parked ticker woke up (for tests and diagnostics).
    wakes: AtomicU64,
    thread: std::sync::OnceLock<Thread>,
}

impl Ticker {
    /// Starts the ticker of `engine` on a thread of its own, so that
    /// deadlines hold even when every tokio worker is busy running guests.
    pub(crate) fn start(engine: &Engine) -> Owned {
        Owned(Self::start_thread(engine))
    }

    fn start_thread(engine: &Engine) -> Arc<Self> {
        let ticker = Arc::new(Self::default());
        let weak = engine.weak();
        let shared = ticker.clone();
        let spawned = std::thread::Builder::new()
            .name("zotbox-epoch".to_owned())
            .spawn(move || shared.run(&weak));
        match spawned {
            Ok(handle) => {
                let _ = ticker.thread.set(handle.thread().clone());
            }
            Err(err) => tracing::error!(
                "cannot start the epoch thread ({err}); spinning guests cannot be interrupted"
            ),
        }
        ticker
    }

    fn run(&self, engine: &wasmtime::EngineWeak) {
        let mut idle = 0;
        loop {
            if idle >= IDLE_TICKS_BEFORE_PARK {
                // Rule 2: announce, then look again before sleeping.
                self.parked.store(true, Ordering::SeqCst);
                if self.running.load(Ordering::SeqCst) == 0 {
                    if self.owner_gone.load(Ordering::SeqCst) {
                        std::thread::park_timeout(PARKED_CHECK);
                    } else {
                        // Rule 3: `owner_gone` unparks it.
                        std::thread::park();
                    }
                }
                self.parked.store(false, Ordering::SeqCst);
                self.wakes.fetch_add(1, Ordering::Relaxed);
                if engine.upgrade().is_none() {
                    return;
                }
                if self.running.load(Ordering::SeqCst) == 0 {
                    // Woken by the timeout (or spuriously): back to sleep.
                    continue;
                }
                // A guest woke us: it is ticked at once.
                idle = 0;
            }
            let Some(strong) = engine.upgrade() else {
                return;
            };
            strong.increment_epoch();
            drop(strong);
            self.ticks.fetch_add(1, Ordering::Relaxed);
            idle = if self.running.load(Ordering::SeqCst) == 0 {
                idle + 1
            } else {
                0
            };
            std::thread::sleep(EPOCH_TICK);
        }
    }

    fn enter(&self) {
        if self.running.fetch_add(1, Ordering::SeqCst) == 0
            && self.parked.load(Ordering::SeqCst)
            && let Some(thread) = self.thread.get()
        {
            thread.unpark();
        }
    }

    fn leave(&self) {
        self.running.fetch_sub(1, Ordering::SeqCst);
    }

    /// The runtime that started the ticker is gone (rule 3): from now on a
    /// parked ticker looks now and then whether the engine is gone too.
    fn owner_gone(&self) {
        self.owner_gone.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }

    /// A guest's task, counted as running while it is polled (rule 1), each
    /// poll's length charged to `clock` (see [`super::compute`]).
    pub(crate) fn count_while_polled<F: Future>(
        self: &Arc<Self>,
        task: F,
        clock: Arc<ComputeClock>,
    ) -> WhilePolled<F> {
        WhilePolled {
            task: Box::pin(task),
            counted: Counted {
                ticker: self.clone(),
                running: false,
            },
            clock,
        }
    }

    /// Whether the ticker is parked (or about to park).
    #[cfg(test)]
    fn is_parked(&self) -> bool {
        self.parked.load(Ordering::SeqCst)
    }
}

/// The runtime's hold on its ticker: dropped with the runtime, it tells the
/// ticker its owner is gone (rule 3).
#[derive(Debug)]
pub(crate) struct Owned(Arc<Ticker>);

impl std::ops::Deref for Owned {
    type Target = Arc<Ticker>;

    fn deref(&self) -> &Arc<Ticker> {
        &self.0
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        self.0.owner_gone();
    }
}

/// A guest's task with its place in the count (see
/// [`Ticker::count_while_polled`]).
pub(crate) struct WhilePolled<F> {
    task: Pin<Box<F>>,
    counted: Counted,
    clock: Arc<ComputeClock>,
}

impl<F: Future> Future for WhilePolled<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let started = Instant::now();
        this.counted.set(true);
        let polled = this.task.as_mut().poll(cx);
        this.counted.set(false);
        this.clock.charge(started.elapsed());
        polled
    }
}

/// One task's place in the count; dropped with its task.
struct Counted {
    ticker: Arc<Ticker>,
    running: bool,
}

impl Counted {
    fn set(&mut self, running: bool) {
        if running != self.running {
            self.running = running;
            if running {
                self.ticker.enter();
            } else {
                self.ticker.leave();
            }
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.set(false);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Waits (up to 30 s, so a loaded machine cannot fail it) for `what`.
    fn eventually(what: impl Fn() -> bool) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if what() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    fn epoch_engine() -> Engine {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        Engine::new(&config).unwrap()
    }

    #[test]
    fn the_ticker_sleeps_while_no_guest_runs_and_wakes_for_one() {
        let engine = epoch_engine();
        let ticker = Ticker::start(&engine);
        assert!(eventually(|| ticker.is_parked()), "an idle ticker parks");
        let parked_at = ticker.ticks.load(Ordering::Relaxed);
        // A store entering wasm wakes it, and it ticks while the store runs.
        let mut counted = Counted {
            ticker: ticker.clone(),
            running: false,
        };
        counted.set(true);
        assert!(
            eventually(|| ticker.ticks.load(Ordering::Relaxed) >= parked_at + 3),
            "a running guest is ticked"
        );
        assert!(!ticker.is_parked());
        // Dropped while running (an aborted task): no longer counted.
        drop(counted);
        assert_eq!(ticker.running.load(Ordering::SeqCst), 0);
        assert!(eventually(|| ticker.is_parked()), "idle again, it parks");
    }

    #[test]
    fn a_parked_ticker_sleeps_until_woken_and_ends_after_its_engine() {
        let engine = epoch_engine();
        let owned = Ticker::start(&engine);
        let ticker = Arc::clone(&owned);
        assert!(eventually(|| ticker.is_parked()), "an idle ticker parks");
        // Longer than a parked check: its runtime lives, so it sleeps on.
        std::thread::sleep(PARKED_CHECK + PARKED_CHECK / 2);
        assert_eq!(ticker.wakes.load(Ordering::Relaxed), 0, "no idle wake-ups");
        // Its runtime gone, it looks at the engine again, and ends with it.
        drop(owned);
        assert!(eventually(|| ticker.wakes.load(Ordering::Relaxed) >= 1));
        assert_eq!(
            Arc::strong_count(&ticker),
            2,
            "the engine lives: so does it"
        );
        drop(engine);
        assert!(
            eventually(|| Arc::strong_count(&ticker) == 1),
            "its thread ends with the engine"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_task_counts_while_polled_and_not_once_dropped() {
        let ticker = Arc::new(Ticker::default());
        let running = {
            let ticker = ticker.clone();
            move || ticker.running.load(Ordering::SeqCst)
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let seen_inside = Arc::new(AtomicUsize::new(usize::MAX));
        let task = ticker.count_while_polled(
            {
                let running = running.clone();
                let seen_inside = seen_inside.clone();
                async move {
                    seen_inside.store(running(), Ordering::SeqCst);
                    // Waiting (as a guest waits for input) is not running.
                    let _ = rx.await;
                    seen_inside.store(running(), Ordering::SeqCst);
                }
            },
            Arc::default(),
        );
        let handle = tokio::spawn(task);
        tokio::task::yield_now().await;
        assert_eq!(
            seen_inside.load(Ordering::SeqCst),
            1,
            "counted inside its poll"
        );
        assert_eq!(running(), 0, "not counted while it waits");
        let _ = tx.send(());
        assert!(handle.await.is_ok());
        assert_eq!(seen_inside.load(Ordering::SeqCst), 1);
        assert_eq!(running(), 0);
        // Dropped without ever finishing (an aborted task): not counted.
        let never = ticker.count_while_polled(std::future::pending::<()>(), Arc::default());
        let handle = tokio::spawn(never);
        tokio::task::yield_now().await;
        handle.abort();
        let _ = handle.await;
        assert_eq!(running(), 0);
    }
}
