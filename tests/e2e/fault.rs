//! Faults under traffic: one extension breaks while calls to the others
//! are in flight.
//!
//! Every test runs the broken extension beside two healthy bystanders,
//! `steady` (a native Python extension) and `hello` (a wasm guest), which
//! are called continuously from the start of the test to its end, with one
//! slow `steady` call in flight across the fault. Each asserts the same
//! three things: the bystanders' calls all succeed; the broken extension's
//! pending calls fail at once, naming it and the cause; and it is restarted
//! or marked failed with the reason, as the restart policy says.
//! `wasm.rs` and `failure.rs` test each fault alone; this is the combination.
//!
//! The last tests are regressions for the bugs this suite found: a reload
//! racing a shutdown or another reload, a shutdown racing a restart, and a
//! rebuilt guest's old code kept in memory.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio::task::{JoinHandle, JoinSet};
use zotbox::Closed;
use zotbox::Exit;
use zotbox::host::{ExtensionState, RestartPolicy};
use zotbox::protocol::ToolResult;
use zotbox::{CallError, Host, HostBuilder, HostError, HostEvent, Verdict};

use crate::guests::{self, Form};
use crate::support::{
    Ext, Lab, bounded, cache_entries, entry_is_valid, eventually, ext, info, next_event,
    process_alive, status_kib, tool_names, with_valid_trailer,
};

/// A call to a broken extension must fail well within this, against a
/// deadline of a minute: the fault, not the deadline, ended it.
const AT_ONCE: Duration = Duration::from_secs(5);

/// The deadline of calls that should never reach it.
const MINUTE_MS: u64 = 60_000;

/// Pause between one bystander call and the next: steady traffic that
/// leaves the two cores to the fault.
const PACE: Duration = Duration::from_millis(5);

/// The `steady` bystander's answer to `args`, as the fixture writes it.
fn steady_text(args: &Value) -> String {
    format!("steady got {args}")
}

/// Continuous calls to the two bystanders: `steady_tool` and `/hello`.
struct Traffic {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicUsize>,
    workers: JoinSet<Vec<Mishap>>,
}

/// A bystander call that did not come back as it should.
#[derive(Debug)]
enum Mishap {
    /// The call failed.
    Failed(String, HostError),
    /// It answered, but not what was asked.
    Wrong(String),
}

impl std::fmt::Display for Mishap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Failed(call, err) => write!(f, "{call}: failed: {err}"),
            Self::Wrong(what) => f.write_str(what),
        }
    }
}

/// One mishap a line, for a failed assertion.
fn lines(mishaps: &[Mishap]) -> String {
    mishaps.iter().map(|m| format!("\n  {m}")).collect()
}

impl Traffic {
    fn start(host: &Host) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicUsize::new(0));
        let mut workers = JoinSet::new();
        for command in [false, true] {
            let (host, stop, answered) = (host.clone(), stop.clone(), answered.clone());
            workers.spawn(async move {
                let mut mishaps = Vec::new();
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let (what, outcome, expected) = if command {
                        let who = format!("caller-{n}");
                        let outcome = host
                            .invoke_command("hello", &who)
                            .await
                            .map(|r| r.prompt.unwrap_or_default());
                        let expected = format!("Say hello to {who} in one short sentence.");
                        (format!("/hello {who}"), outcome, expected)
                    } else {
                        let args = json!({ "n": n });
                        let outcome = host
                            .call_tool("steady_tool", args.clone())
                            .await
                            .map(|r| r.text());
                        (format!("steady_tool {args}"), outcome, steady_text(&args))
                    };
                    match outcome {
                        Ok(got) if got == expected => {
                            answered.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok(got) => mishaps.push(Mishap::Wrong(format!("{what}: answered `{got}`"))),
                        Err(err) => mishaps.push(Mishap::Failed(what, err)),
                    }
                    tokio::time::sleep(PACE).await;
                }
                mishaps
            });
        }
        Self {
            stop,
            answered,
            workers,
        }
    }

    /// Bystander calls answered so far.
    fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }

    /// Waits until more than `count` bystander calls were answered: the
    /// host still serves them after the fault.
    async fn beyond(&self, count: usize) {
        eventually(
            &format!("more than {count} bystander calls answered"),
            || (self.answered() > count).then_some(()),
        )
        .await
        .unwrap_or_else(|| panic!("bystanders stuck at {} answers", self.answered()));
    }

    /// Stops the calls; returns how many were answered and what went wrong.
    async fn stop(mut self) -> (usize, Vec<Mishap>) {
        self.stop.store(true, Ordering::SeqCst);
        let mut mishaps = Vec::new();
        bounded("the bystander calls to stop", async {
            while let Some(worker) = self.workers.join_next().await {
                mishaps.extend(worker.expect("a bystander worker"));
            }
        })
        .await;
        (self.answered(), mishaps)
    }
}

/// A host with the broken extension(s) and both bystanders, bystander
/// traffic running.
struct Scene {
    host: Host,
    steady: Ext,
    traffic: Traffic,
    /// Bystander calls answered when the fault was injected.
    at_fault: usize,
}

impl Scene {
    /// Adds the bystanders to `builder`, starts the host, checks the
    /// bystanders are ready and starts calling them.
    async fn start(lab: &Lab, builder: HostBuilder) -> Self {
        let steady = ext("steady").direct().write_in(&lab.dev);
        let hello = guests::folder(&lab.dev, "hello", Form::Wasm, None);
        let host = bounded(
            "starting the host",
            builder.extension(&steady.dir).extension(&hello).build(),
        )
        .await
        .expect("build");
        for name in ["steady", "hello"] {
            let entry = info(&host, name);
            assert_eq!(entry.state, ExtensionState::Ready, "{entry:#?}");
        }
        let traffic = Traffic::start(&host);
        traffic.beyond(10).await;
        Self {
            host,
            steady,
            traffic,
            at_fault: 0,
        }
    }

    /// Starts a `steady` call that sleeps 3 s, returns once `steady` has
    /// received it, and marks the moment of the fault: the call is in
    /// flight across whatever happens next.
    async fn fault_begins(&mut self) -> JoinHandle<Result<ToolResult, HostError>> {
        let call = tokio::spawn({
            let host = self.host.clone();
            async move { host.call_tool("steady_tool", slow_args()).await }
        });
        eventually("`steady` to receive the slow call", || {
            self.steady
                .recorded_of("tool_call")
                .iter()
                .any(|frame| frame["args"]["slow"] == true)
                .then_some(())
        })
        .await
        .expect("the slow call never reached `steady`");
        self.at_fault = self.traffic.answered();
        call
    }

    /// The end of every test: the slow call answered, bystander calls
    /// answered past the fault, and none of them failed.
    async fn finish(self, slow: JoinHandle<Result<ToolResult, HostError>>) {
        let result = bounded("the slow bystander call", slow)
            .await
            .expect("the slow call's task")
            .unwrap_or_else(|e| panic!("the slow bystander call failed: {e}"));
        assert_eq!(result.text(), steady_text(&slow_args()));
        self.traffic.beyond(self.at_fault + 10).await;
        let (answered, mishaps) = self.traffic.stop().await;
        assert!(
            mishaps.is_empty(),
            "{} of the bystander calls went wrong:{}",
            mishaps.len(),
            lines(&mishaps)
        );
        eprintln!("{answered} bystander calls answered");
        bounded("shutdown", self.host.shutdown()).await;
    }
}

fn slow_args() -> Value {
    json!({"mode": "sleep", "seconds": 3, "slow": true})
}

/// The wasm `hostile` guest with manifest `limits`.
fn hostile(lab: &Lab, limits: Value) -> PathBuf {
    guests::folder(&lab.dev, "hostile", Form::Wasm, Some(limits))
}

/// What a call came to: its answer or its error.
type Outcome = Result<ToolResult, HostError>;

/// Calls `tool` on `hostile` with two `echo` calls queued right behind it
/// (sent in this order, so that they are pending when the fault hits; see
/// [`assert_follower`]); returns how long the first took and the three
/// outcomes.
async fn with_followers(host: &Host, tool: &str) -> (Duration, Outcome, [Outcome; 2]) {
    let started = Instant::now();
    let (first, second, third) = bounded(&format!("`{tool}` and its followers"), async {
        tokio::join!(
            biased;
            async {
                let outcome = host.call_tool(tool, json!({})).await;
                (started.elapsed(), outcome)
            },
            host.call_tool("echo", json!({"text": "follower 1"})),
            host.call_tool("echo", json!({"text": "follower 2"})),
        )
    })
    .await;
    (first.0, first.1, [second, third])
}

/// Waits for `name` to exit, be restarted (restart `attempt`, after the
/// default back-off) and become ready again; returns the exit's reason.
async fn restarted(
    events: &mut broadcast::Receiver<HostEvent>,
    name: &str,
    attempt: u32,
) -> String {
    let exited = next_event(
        events,
        &format!("{name}'s exit"),
        |e| matches!(e, HostEvent::Exited { extension, .. } if &**extension == name),
    )
    .await;
    let HostEvent::Exited { reason, .. } = exited else {
        unreachable!("matched above")
    };
    let restarting = next_event(
        events,
        &format!("{name}'s restart"),
        |e| matches!(e, HostEvent::Restarting { extension, .. } if &**extension == name),
    )
    .await;
    let backoff = RestartPolicy::default().initial_backoff.as_millis() as u64;
    assert_eq!(
        restarting,
        HostEvent::Restarting {
            extension: name.into(),
            attempt,
            delay_ms: backoff << (attempt - 1),
        }
    );
    next_event(
        events,
        &format!("{name} ready again"),
        |e| matches!(e, HostEvent::Ready { extension } if &**extension == name),
    )
    .await;
    reason
}

/// `hostile` answers `echo` again.
async fn echoes(host: &Host) {
    let echo = bounded(
        "echo",
        host.call_tool("echo", json!({"text": "back again"})),
    )
    .await
    .unwrap_or_else(|e| panic!("echo after the fault: {e}"));
    assert_eq!(echo.text(), "back again");
}

/// Checks a call queued right behind the fault. In flight, it failed with
/// one of `in_flight` (the fault's own error, or its own deadline). But the
/// two `echo` calls are looked up a moment after the faulty call is sent,
/// and a descheduled test thread can make that moment long enough for the
/// fault to strike first: then the call found `echo` withdrawn, or was even
/// answered by the restarted guest; it was never in flight.
fn assert_follower(outcome: Outcome, in_flight: &[&str]) {
    match outcome {
        Ok(result) => assert!(result.text().starts_with("follower "), "{result:?}"),
        Err(HostError::UnknownTool { name, .. }) => assert_eq!(name, "echo"),
        Err(err) => {
            let err = err.to_string();
            assert!(in_flight.contains(&err.as_str()), "{err}");
        }
    }
}

fn assert_at_once(took: Duration, what: &str) {
    assert!(took < AT_ONCE, "{what} took {took:?}");
}

// ---------------------------------------------------------------------------

/// A guest traps (a panic mid-call): its pending calls fail at once with
/// the panic's message; it is restarted and answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_trap_fails_its_pending_calls_at_once_while_the_others_keep_answering() {
    let lab = Lab::new();
    let broken = hostile(&lab, json!({"tool_timeout_ms": MINUTE_MS}));
    let builder = lab
        .builder()
        .restart_policy(RestartPolicy::default())
        .extension(&broken);
    let mut scene = Scene::start(&lab, builder).await;
    let mut events = scene.host.subscribe();
    let slow = scene.fault_begins().await;

    let (took, panicked, followers) = with_followers(&scene.host, "panic").await;
    assert_at_once(took, "the panicking call");
    let err = panicked.expect_err("the guest panicked");
    let HostError::Call(CallError::Closed {
        extension,
        reason: Closed::Exited(Exit::Trap(trap)),
    }) = &err
    else {
        panic!("not a trap: {err:?}");
    };
    assert_eq!(extension, "extension `hostile` 0.1.0");
    assert!(
        trap.ends_with(": the hostile guest panicked on purpose)"),
        "{trap}"
    );
    for follower in followers {
        assert_follower(follower, &[&err.to_string()]);
    }
    assert!(!slow.is_finished(), "the slow call ended with the fault");

    let reason = restarted(&mut events, "hostile", 1).await;
    assert_eq!(reason, format!("trapped: {trap}"));
    echoes(&scene.host).await;
    assert_eq!(info(&scene.host, "hostile").restarts, 1);
    scene.finish(slow).await;
}

/// A guest spins forever: the call times out at the manifest's deadline
/// naming the extension and the tool, the calls queued behind it fail with
/// it, and the guest is killed and restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spinning_guest_is_killed_at_its_deadline_while_the_others_keep_answering() {
    let lab = Lab::new();
    let broken = hostile(&lab, json!({"tool_timeout_ms": 300}));
    let builder = lab
        .builder()
        .restart_policy(RestartPolicy::default())
        .extension(&broken);
    let mut scene = Scene::start(&lab, builder).await;
    let mut events = scene.host.subscribe();
    let slow = scene.fault_begins().await;

    let (took, spun, followers) = with_followers(&scene.host, "spin").await;
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert_at_once(took, "the spinning call");
    let err = spun.expect_err("spin never answers");
    assert!(
        matches!(&err, HostError::Call(CallError::Timeout { after, .. }) if *after == Duration::from_millis(300)),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "extension `hostile` 0.1.0: tool `spin` timed out after 300ms"
    );
    // Queued behind the spin, each follower either reaches its own deadline
    // (sent a moment later, it expires a moment later) or goes down with
    // the killed guest.
    for follower in followers {
        assert_follower(
            follower,
            &[
                "extension `hostile` 0.1.0: tool `echo` timed out after 300ms",
                "extension `hostile` 0.1.0: killed: still running after a request's deadline",
            ],
        );
    }
    assert!(!slow.is_finished(), "the slow call ended with the fault");

    let reason = restarted(&mut events, "hostile", 1).await;
    assert_eq!(reason, "killed: still running after a request's deadline");
    echoes(&scene.host).await;
    scene.finish(slow).await;
}

/// A guest allocates without bound: it traps at its 32 MiB limit, its
/// pending calls fail at once saying so, and with no restarts allowed it
/// stays failed with the reason in `list()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_bomb_fails_for_good_while_the_others_keep_answering() {
    let lab = Lab::new();
    let broken = hostile(&lab, json!({"memory_mb": 32, "tool_timeout_ms": MINUTE_MS}));
    let builder = lab
        .builder()
        .restart_policy(RestartPolicy::never())
        .extension(&broken);
    let mut scene = Scene::start(&lab, builder).await;
    let mut events = scene.host.subscribe();
    let slow = scene.fault_begins().await;

    let (took, bombed, followers) = with_followers(&scene.host, "alloc").await;
    assert_at_once(took, "the allocating call");
    let err = bombed.expect_err("alloc cannot succeed");
    assert!(
        matches!(
            &err,
            HostError::Call(CallError::Closed {
                reason: Closed::Exited(Exit::OutOfMemory { limit_mb: 32 }),
                ..
            })
        ),
        "{err:?}"
    );
    let message = "extension `hostile` 0.1.0: ran out of memory (limit 32 MiB across all memories and tables)";
    assert_eq!(err.to_string(), message);
    for follower in followers {
        assert_follower(follower, &[message]);
    }
    assert!(!slow.is_finished(), "the slow call ended with the fault");

    let reason = "ran out of memory (limit 32 MiB across all memories and tables)";
    let failed = next_event(&mut events, "hostile's failure", |e| {
        matches!(e, HostEvent::Failed { .. })
    })
    .await;
    assert_eq!(
        failed,
        HostEvent::Failed {
            extension: "hostile".into(),
            reason: reason.into()
        }
    );
    let entry = info(&scene.host, "hostile");
    assert_eq!(
        (entry.state, entry.reason.as_deref(), entry.restarts),
        (ExtensionState::Failed, Some(reason), 0)
    );
    assert!(entry.tools.is_empty(), "{entry:#?}");
    let gone = scene
        .host
        .call_tool("echo", json!({"text": "anyone?"}))
        .await
        .expect_err("withdrawn");
    assert!(matches!(gone, HostError::UnknownTool { .. }), "{gone:?}");
    scene.finish(slow).await;
}

/// A guest floods stdout with one endless line: it is stopped as soon as
/// the line passes the frame cap, long before the call's deadline; its
/// calls fail at once naming the cap; it is restarted, and the bystanders
/// never notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdout_flood_is_cut_off_at_the_frame_cap_while_the_others_keep_answering() {
    let lab = Lab::new();
    let broken = hostile(&lab, json!({"tool_timeout_ms": MINUTE_MS}));
    let builder = lab
        .builder()
        .restart_policy(RestartPolicy::default())
        .extension(&broken);
    let mut scene = Scene::start(&lab, builder).await;
    let mut events = scene.host.subscribe();
    let slow = scene.fault_begins().await;

    let (took, flooded, followers) = with_followers(&scene.host, "flood").await;
    assert_at_once(took, "the flooding call");
    let cut = "extension `hostile` 0.1.0: killed: wrote a line over the 4194304-byte frame cap";
    assert_eq!(flooded.expect_err("flood never answers").to_string(), cut);
    for follower in followers {
        assert_follower(follower, &[cut]);
    }
    assert!(!slow.is_finished(), "the slow call ended with the fault");

    let reason = restarted(&mut events, "hostile", 1).await;
    assert_eq!(
        reason,
        "killed: wrote a line over the 4194304-byte frame cap"
    );
    echoes(&scene.host).await;
    scene.finish(slow).await;
}

/// A native extension is killed with SIGKILL while three calls to it are
/// in flight: all three fail at once naming the signal; it is restarted
/// as a new process and answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_extension_killed_mid_call_is_restarted_while_the_others_keep_answering() {
    let lab = Lab::new();
    let victim = ext("victim").direct().write_in(&lab.dev);
    victim.edit_manifest(|m| m["limits"] = json!({"tool_timeout_ms": MINUTE_MS}));
    let builder = lab
        .builder()
        .restart_policy(RestartPolicy::default())
        .extension(&victim.dir);
    let mut scene = Scene::start(&lab, builder).await;
    let mut events = scene.host.subscribe();
    let slow = scene.fault_begins().await;

    let mut calls = JoinSet::new();
    for k in 0..3 {
        let host = scene.host.clone();
        calls.spawn(async move {
            let args = json!({"mode": "sleep", "seconds": 30, "k": k});
            host.call_tool("victim_tool", args).await
        });
    }
    victim.wait_for("tool_call", 3).await;
    let first_pid = victim.pid();
    let started = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first_pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL");
    let outcomes = bounded("the victim's calls", calls.join_all()).await;
    assert_at_once(started.elapsed(), "the killed extension's calls");
    for outcome in outcomes {
        assert_eq!(
            outcome.expect_err("killed").to_string(),
            "extension `victim` 1.0.0: killed by signal 9 (SIGKILL)"
        );
    }
    assert!(!slow.is_finished(), "the slow call ended with the fault");

    let reason = restarted(&mut events, "victim", 1).await;
    assert_eq!(reason, "killed by signal 9 (SIGKILL)");
    let again = bounded(
        "victim_tool",
        scene.host.call_tool("victim_tool", json!({"again": true})),
    )
    .await
    .expect("answers after the restart");
    assert_eq!(again.text(), r#"victim got {"again":true}"#);
    assert_ne!(victim.pid(), first_pid, "a new process");
    assert!(!process_alive(first_pid));
    let entry = info(&scene.host, "victim");
    assert_eq!((entry.state, entry.restarts), (ExtensionState::Ready, 1));
    scene.finish(slow).await;
}

/// An extension never says hello: each start is abandoned at the hello
/// deadline (its process killed), restarted once as the policy allows,
/// then marked failed with the reason, while the bystanders keep answering
/// and a call to its tool fails at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_that_never_says_hello_ends_failed_while_the_others_keep_answering() {
    let lab = Lab::new();
    let mute = ext("mute")
        .direct()
        .flags(&["--no-hello"])
        .write_in(&lab.dev);
    let once = RestartPolicy {
        max_restarts: 1,
        ..RestartPolicy::default()
    };
    // Long enough that the second attempt is still under way when the
    // test looks, however loaded the machine; a bystander's own hello
    // comes well within it.
    let builder = lab
        .builder()
        .hello_timeout(Duration::from_secs(5))
        .restart_policy(once)
        .extension(&mute.dir);
    let mut scene = Scene::start(&lab, builder).await;
    let mut events = scene.host.subscribe();
    // The first start has failed; the second is under way now.
    let entry = info(&scene.host, "mute");
    assert_eq!(
        (entry.state, entry.reason.as_deref(), entry.restarts),
        (
            ExtensionState::Restarting,
            Some("extension `mute` sent no `hello` within 5s"),
            1
        ),
        "{entry:#?}"
    );
    let slow = scene.fault_begins().await;
    let started = Instant::now();
    let err = scene
        .host
        .call_tool("mute_tool", json!({}))
        .await
        .expect_err("mute registered nothing");
    assert_at_once(started.elapsed(), "a call to the mute extension's tool");
    assert!(
        matches!(&err, HostError::UnknownTool { name, .. } if name == "mute_tool"),
        "{err:?}"
    );

    let reason = "extension `mute` sent no `hello` within 5s; gave up after 1 restarts within 60s";
    let failed = next_event(&mut events, "mute's failure", |e| {
        matches!(e, HostEvent::Failed { .. })
    })
    .await;
    assert_eq!(
        failed,
        HostEvent::Failed {
            extension: "mute".into(),
            reason: reason.into()
        }
    );
    let entry = info(&scene.host, "mute");
    assert_eq!(
        (entry.state, entry.reason.as_deref(), entry.restarts),
        (ExtensionState::Failed, Some(reason), 1)
    );
    // Both silent processes were killed, not left behind.
    assert_eq!(pids(&mute).len(), 2, "{:?}", pids(&mute));
    all_gone(&mute).await;
    scene.finish(slow).await;
}

/// An interceptor never answers: every tool call it guards proceeds once
/// its 300 ms deadline passes (failing open), commands (which it does not
/// guard) are not held up meanwhile, and the interceptor itself is left
/// running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interceptor_that_never_answers_only_delays_the_calls_it_guards() {
    let lab = Lab::new();
    let sentry = ext("sentry")
        .direct()
        .flags(&["--intercept", "block", "--slow-intercept", "30"])
        .write_in(&lab.dev);
    sentry.edit_manifest(|m| m["limits"] = json!({"intercept_timeout_ms": 300}));
    let builder = lab
        .builder()
        .restart_policy(RestartPolicy::default())
        .extension(&sentry.dir);
    let mut scene = Scene::start(&lab, builder).await;
    let slow = scene.fault_begins().await;

    let started = Instant::now();
    let mut guarded = JoinSet::new();
    for k in 0..4 {
        let host = scene.host.clone();
        guarded.spawn(async move {
            let args = json!({ "guarded": k });
            let outcome = host.call_tool("steady_tool", args.clone()).await;
            (args, outcome, Instant::now())
        });
    }
    // Not guarded: answered while the guarded calls wait on the sentry.
    let hello = bounded("/hello", scene.host.invoke_command("hello", "unguarded"))
        .await
        .expect("/hello");
    let hello_done = Instant::now();
    assert_eq!(
        hello.prompt.as_deref(),
        Some("Say hello to unguarded in one short sentence.")
    );
    for (args, outcome, done) in bounded("the guarded calls", guarded.join_all()).await {
        let result = outcome.unwrap_or_else(|e| panic!("guarded call {args}: {e}"));
        assert_eq!(result.text(), steady_text(&args));
        let took = done - started;
        assert!(took >= Duration::from_millis(300), "{args}: {took:?}");
        assert_at_once(took, "a guarded call");
        assert!(hello_done < done, "/hello waited for the sentry");
    }
    // Every verdict fails open: the sentry would have blocked (`--intercept
    // block` with an empty pattern) had it answered.
    let decision = bounded(
        "a verdict",
        scene
            .host
            .intercept_tool_call("bash", json!({"command": "ls"})),
    )
    .await;
    assert_eq!(decision.verdict, Verdict::Allow);
    assert!(decision.decided_by.is_empty(), "{decision:?}");

    let entry = info(&scene.host, "sentry");
    assert_eq!((entry.state, entry.restarts), (ExtensionState::Ready, 0));
    let asked = sentry.recorded_of("event_intercept").len();
    assert!(asked >= 5, "the sentry was asked {asked} times");
    scene.finish(slow).await;
}

/// `$ZOT_HOME/logs` is a file, not a folder: no extension log, no audit
/// log, and still every extension starts and answers; a guest that traps
/// is still explained (its panic message kept in memory) and restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_log_folder_stops_no_extension() {
    let lab = Lab::new();
    let logs = lab.home.join("logs");
    std::fs::write(&logs, "not a folder\n").expect("write $ZOT_HOME/logs");
    let broken = hostile(&lab, json!({"tool_timeout_ms": MINUTE_MS}));
    let builder = lab
        .builder()
        .restart_policy(RestartPolicy::default())
        .extension(&broken);
    let mut scene = Scene::start(&lab, builder).await;
    let mut events = scene.host.subscribe();
    assert_eq!(scene.host.audit_log(), None);
    for entry in scene.host.list() {
        assert_eq!(entry.state, ExtensionState::Ready, "{entry:#?}");
    }
    echoes(&scene.host).await;
    let slow = scene.fault_begins().await;

    let (took, panicked, _) = with_followers(&scene.host, "panic").await;
    assert_at_once(took, "the panicking call");
    let err = panicked.expect_err("the guest panicked").to_string();
    assert!(
        err.starts_with("extension `hostile` 0.1.0: trapped: "),
        "{err}"
    );
    assert!(
        err.ends_with(": the hostile guest panicked on purpose)"),
        "{err}"
    );
    let reason = restarted(&mut events, "hostile", 1).await;
    assert!(reason.starts_with("trapped: "), "{reason}");
    echoes(&scene.host).await;
    assert_eq!(
        std::fs::read_to_string(&logs).expect("the logs file"),
        "not a folder\n"
    );
    scene.finish(slow).await;
}

/// 64 KiB of fixed pseudo-random bytes (xorshift).
fn garbage() -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    (0..64 * 1024)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// The compile cache holds a corrupt artifact when a guest is restarted
/// (its wasm file touched meanwhile, so the restart loads it afresh): the
/// entry is rejected, the guest recompiled while the bystanders keep
/// answering, and the entry rewritten. Twice: plain garbage, then garbage
/// under a valid checksum, which only wasmtime's own checks can refuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_cache_entry_is_recompiled_on_restart_while_the_others_keep_answering() {
    let lab = Lab::new();
    let broken = hostile(&lab, json!({"tool_timeout_ms": MINUTE_MS}));
    // A host of `hostile` alone first, to tell its cache entry apart.
    let alone = bounded(
        "starting hostile alone",
        lab.builder().extension(&broken).build(),
    )
    .await
    .expect("build");
    echoes(&alone).await;
    alone.shutdown().await;
    let entries = cache_entries(&lab.home);
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = entries[0].clone();

    let builder = lab
        .builder()
        .restart_policy(RestartPolicy::default())
        .extension(&broken);
    let mut scene = Scene::start(&lab, builder).await;
    let mut events = scene.host.subscribe();
    let slow = scene.fault_begins().await;

    let forged = with_valid_trailer(garbage());
    assert!(entry_is_valid(&forged));
    let wasm = broken.join("hostile.wasm");
    for (attempt, (damage, bytes)) in [("garbage", garbage()), ("forged checksum", forged)]
        .into_iter()
        .enumerate()
    {
        let attempt = u32::try_from(attempt + 1).expect("small");
        std::fs::write(&entry, &bytes).expect("corrupt the entry");
        // A new modification time: the restart reads the file and the cache
        // again instead of reusing what it prepared in memory.
        let touched = SystemTime::now() + Duration::from_secs(u64::from(attempt) * 10);
        std::fs::File::options()
            .write(true)
            .open(&wasm)
            .and_then(|file| file.set_modified(touched))
            .expect("touch the wasm file");

        let (took, panicked, _) = with_followers(&scene.host, "panic").await;
        assert_at_once(took, "the panicking call");
        let err = panicked.expect_err("the guest panicked").to_string();
        assert!(
            err.starts_with("extension `hostile` 0.1.0: trapped: "),
            "{damage}: {err}"
        );
        if attempt == 1 {
            assert!(!slow.is_finished(), "the slow call ended with the fault");
        }
        let reason = restarted(&mut events, "hostile", attempt).await;
        assert!(reason.starts_with("trapped: "), "{damage}: {reason}");
        echoes(&scene.host).await;
        let rewritten = std::fs::read(&entry).expect("the cache entry");
        assert_ne!(rewritten, bytes, "{damage}: the entry was not rewritten");
        assert!(entry_is_valid(&rewritten), "{damage}");
    }
    let entry = info(&scene.host, "hostile");
    assert_eq!((entry.state, entry.restarts), (ExtensionState::Ready, 2));
    scene.finish(slow).await;
}

/// A manifest is replaced and the host reloaded while calls are in flight.
///
/// `reload` stops every extension and starts what it finds again, so every
/// call in flight then fails at once with "was shut down", naming its
/// extension; bystander calls issued during the reload find no owner for a
/// moment and fail at once; none hangs. Afterwards the replaced extension
/// exposes its new tool and version, and the bystanders answer again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_with_a_replaced_manifest_fails_calls_in_flight_cleanly() {
    let lab = Lab::new();
    let morph = ext("morph")
        .direct()
        .flags(&["--tool", "morph_old"])
        .write_in(&lab.dev);
    morph.edit_manifest(|m| m["limits"] = json!({"tool_timeout_ms": MINUTE_MS}));
    let builder = lab
        .builder()
        .restart_policy(RestartPolicy::default())
        .extension(&morph.dir);
    let mut scene = Scene::start(&lab, builder).await;
    let slow = scene.fault_begins().await;
    let mut calls = JoinSet::new();
    for k in 0..2 {
        let host = scene.host.clone();
        calls.spawn(async move {
            let args = json!({"mode": "sleep", "seconds": 30, "k": k});
            host.call_tool("morph_old", args).await
        });
    }
    morph.wait_for("tool_call", 2).await;

    morph.edit_manifest(|m| {
        m["version"] = json!("2.0.0");
        let args = m["args"].as_array_mut().expect("args");
        for arg in args.iter_mut() {
            if arg == "morph_old" {
                *arg = json!("morph_new");
            }
        }
        args.extend([json!("--version"), json!("2.0.0")]);
    });
    let started = Instant::now();
    bounded("the reload", scene.host.reload()).await;
    let reloaded = started.elapsed();

    for outcome in bounded("the calls to morph", calls.join_all()).await {
        assert_eq!(
            outcome.expect_err("shut down by the reload").to_string(),
            "extension `morph` 1.0.0: was shut down"
        );
    }
    assert_at_once(started.elapsed(), "the calls in flight to morph");
    let slow_err = bounded("the slow bystander call", slow)
        .await
        .expect("the slow call's task")
        .expect_err("shut down by the reload");
    assert!(
        matches!(
            &slow_err,
            HostError::Call(CallError::Closed {
                reason: Closed::ShutDown,
                ..
            })
        ),
        "{slow_err:?}"
    );
    assert_eq!(
        slow_err.to_string(),
        "extension `steady` 1.0.0: was shut down"
    );

    let entry = info(&scene.host, "morph");
    assert_eq!(
        (entry.state, entry.version.as_str(), entry.tools.as_slice()),
        (
            ExtensionState::Ready,
            "2.0.0",
            ["morph_new".to_owned()].as_slice()
        ),
        "{entry:#?}"
    );
    assert!(!tool_names(&scene.host).contains(&"morph_old".to_owned()));
    let new = bounded(
        "morph_new",
        scene.host.call_tool("morph_new", json!({"n": 1})),
    )
    .await
    .expect("the new tool answers");
    assert_eq!(new.text(), r#"morph got {"n":1}"#);
    let old = scene
        .host
        .call_tool("morph_old", json!({}))
        .await
        .expect_err("the old tool is gone");
    assert!(matches!(old, HostError::UnknownTool { .. }), "{old:?}");

    scene.traffic.beyond(scene.at_fault + 10).await;
    let (answered, mishaps) = scene.traffic.stop().await;
    // What a bystander call may meet during a reload: its session shut
    // down under it, or no owner until the new session registers.
    let mut during_reload = 0;
    for mishap in &mishaps {
        let clean = match mishap {
            Mishap::Failed(_, HostError::Call(CallError::Closed { extension, reason })) => {
                *reason == Closed::ShutDown
                    && ["extension `steady` 1.0.0", "extension `hello` 1.0.0"]
                        .contains(&extension.as_str())
            }
            Mishap::Failed(_, HostError::UnknownTool { name, .. }) => name == "steady_tool",
            Mishap::Failed(_, HostError::UnknownCommand { name, .. }) => name == "hello",
            _ => false,
        };
        assert!(clean, "not a clean failure during a reload: {mishap}");
        during_reload += 1;
    }
    eprintln!(
        "reload took {reloaded:?}; {answered} bystander calls answered, \
         {during_reload} failed cleanly during the reload"
    );
    bounded("shutdown", scene.host.shutdown()).await;
}

// ---------------------------------------------------------------------------
// Regressions for the host bugs this suite found.

/// A host over `stubborn`, a native extension that ignores `shutdown`, so
/// that stopping it takes the whole 1 s grace (then SIGTERM ends it): a
/// window in which a reload is surely still stopping it.
async fn stubborn_host(lab: &Lab) -> (Host, Ext) {
    let stubborn = ext("stubborn")
        .direct()
        .flags(&["--ignore-shutdown"])
        .write_in(&lab.dev);
    let host = lab
        .builder()
        .session_config(zotbox::SessionConfig {
            shutdown_grace: Duration::from_secs(1),
            kill_grace: Duration::from_millis(500),
            ..zotbox::SessionConfig::default()
        })
        .extension(&stubborn.dir)
        .build();
    let host = bounded("starting the host", host).await.expect("build");
    (host, stubborn)
}

/// Every process `ext` was started as.
fn pids(ext: &Ext) -> Vec<i32> {
    ext.recorded_of("_started")
        .iter()
        .filter_map(|started| i32::try_from(started["pid"].as_i64()?).ok())
        .collect()
}

/// Waits until none of `ext`'s processes is running; panics naming the
/// survivors.
async fn all_gone(ext: &Ext) {
    let survivors = || -> Vec<i32> {
        pids(ext)
            .into_iter()
            .filter(|pid| process_alive(*pid))
            .collect()
    };
    eventually("every process to be gone", || {
        survivors().is_empty().then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("still running: {:?} of {:?}", survivors(), pids(ext)));
}

/// `shutdown` while a reload is still stopping the extensions: once both
/// have returned, nothing may run. The reload's second half must not start
/// the extensions again behind the back of a shutdown that already
/// returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_during_a_reload_leaves_nothing_running() {
    let lab = Lab::new();
    let (host, stubborn) = stubborn_host(&lab).await;
    let reload = tokio::spawn({
        let host = host.clone();
        async move { host.reload().await }
    });
    // The reload is stopping it now, for a second.
    stubborn.wait_for("shutdown", 1).await;
    bounded("the shutdown", host.shutdown()).await;
    bounded("the reload", reload)
        .await
        .expect("the reload's task");

    let state = info(&host, "stubborn").state;
    // Stop anything the reload started, whatever the outcome.
    bounded("the second shutdown", host.shutdown()).await;
    assert_eq!(
        state,
        ExtensionState::Stopped,
        "after shutdown() returned, the reload started `stubborn` again (pids {:?})",
        pids(&stubborn)
    );
    all_gone(&stubborn).await;
}

/// Two reloads overlapping: the second runs to its end while the first is
/// still stopping the extensions, then the first starts them again. Each
/// session either of them started must end up in the registry or shut
/// down; none may run on unseen, out of reach of `shutdown`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_reloads_leave_no_session_running_unseen() {
    let lab = Lab::new();
    let (host, stubborn) = stubborn_host(&lab).await;
    let first = tokio::spawn({
        let host = host.clone();
        async move { host.reload().await }
    });
    stubborn.wait_for("shutdown", 1).await;
    bounded("the second reload", host.reload()).await;
    bounded("the first reload", first)
        .await
        .expect("the first reload's task");
    assert_eq!(info(&host, "stubborn").state, ExtensionState::Ready);
    bounded("the shutdown", host.shutdown()).await;
    all_gone(&stubborn).await;
}

/// `shutdown` while an extension is being restarted (its new process up,
/// its `hello` not sent yet): the new process must stop with the rest,
/// and `list()` must not go on calling it restarting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_during_a_restart_stops_the_extension_being_started() {
    let lab = Lab::new();
    // Each start takes 2 s before `hello`.
    let slow = ext("slowstart")
        .direct()
        .flags(&["--hello-delay", "2"])
        .write_in(&lab.dev);
    let host = bounded(
        "starting the host",
        lab.builder().extension(&slow.dir).build(),
    )
    .await
    .expect("build");
    let mut events = host.subscribe();
    host.call_tool("slowstart_tool", json!({"mode": "crash"}))
        .await
        .expect_err("crashed");
    next_event(&mut events, "the restart", |e| {
        matches!(e, HostEvent::Restarting { .. })
    })
    .await;
    eventually("the second start", || {
        (pids(&slow).len() == 2).then_some(())
    })
    .await
    .expect("no second start");
    bounded("the shutdown", host.shutdown()).await;
    let state = info(&host, "slowstart").state;
    let second = pids(&slow)[1];
    // Well before its `hello` would come.
    let gone = tokio::time::timeout(Duration::from_secs(1), async {
        while process_alive(second) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .is_ok();
    assert_eq!(state, ExtensionState::Stopped, "after shutdown() returned");
    assert!(
        gone,
        "pid {second} still running 1 s after shutdown() returned"
    );
}

/// Executable anonymous mappings of this process: wasmtime maps each
/// compiled module's code as one.
fn code_mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .expect("/proc/self/maps")
        .lines()
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // Anonymous mappings have no sixth field (the path).
            fields.len() == 5 && fields[1].contains('x')
        })
        .count()
}

/// A guest rebuilt and reloaded again and again (as in an edit–build–reload
/// loop) must not leave a compiled copy behind per build: only the current
/// build can ever run again. It counts the code mappings of this process:
/// other tests' hosts map code of their own, so the bound it checks leaves
/// room for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_rebuilt_and_reloaded_keeps_no_old_compiled_code() {
    const REBUILDS: u64 = 20;
    let lab = Lab::new();
    let dir = hostile(&lab, json!({}));
    let host = bounded("starting the host", lab.builder().extension(&dir).build())
        .await
        .expect("build");
    echoes(&host).await;
    let wasm = dir.join("hostile.wasm");
    let bytes = std::fs::read(&wasm).expect("the wasm file");
    let (maps_before, rss_before) = (code_mappings(), status_kib("VmRSS"));
    for build in 1..=REBUILDS {
        // What a rebuild leaves: the same path, a new modification time.
        std::fs::write(&wasm, &bytes).expect("rewrite the wasm file");
        let rebuilt = SystemTime::now() + Duration::from_secs(build);
        std::fs::File::options()
            .write(true)
            .open(&wasm)
            .and_then(|file| file.set_modified(rebuilt))
            .expect("date the rebuild");
        bounded("the reload", host.reload()).await;
        echoes(&host).await;
    }
    let kept = code_mappings().saturating_sub(maps_before);
    let grown_mib = status_kib("VmRSS").saturating_sub(rss_before) / 1024;
    host.shutdown().await;
    // Kept code grows by one mapping per rebuild; half that is the margin
    // for what concurrent tests map meanwhile.
    assert!(
        (kept as u64) < REBUILDS / 2,
        "{REBUILDS} rebuilds left {kept} more code mappings and {grown_mib} MiB more resident"
    );
}
