//! The wasm runtime end to end, over real guests built once per run
//! (`guests.rs`).
//!
//! Every example runs through the same assertions twice, as a wasm guest
//! and as a native subprocess. Then the sandbox: each attack or fault of
//! the `hostile` guest is named, and the exact refusal or failure asserted,
//! along with what happens next (a restart, the other extensions still
//! answering).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use zotbox::Closed;
use zotbox::Exit;
use zotbox::host::{ExtensionState, RestartPolicy};
use zotbox::protocol::{CommandAction, CommandResponse, Event, OpenPanel};
use zotbox::{CallError, Decision, Host, HostError, HostEvent, Verdict};

use crate::guests::{self, C_SHOUT, Form};
use crate::support::{
    Lab, assert_response, assert_result, bounded, cache_entries, command, entry_is_valid,
    host_over, info, next_event, rss_kib, settled, tool, tool_names, write_json,
};

/// Starts one example in `form` (the C one with clang's build; `None` when
/// clang is missing) and checks that it is ready and of the right kind.
async fn example_host(lab: &Lab, name: &str, form: Form) -> Option<Host> {
    let dir = if name == C_SHOUT {
        let shout = guests::c_shout()?;
        match form {
            Form::Wasm => guests::wasm_folder(&lab.dev, name, &shout.wasm, None),
            Form::Native => guests::native_folder(&lab.dev, name, &shout.native, None),
        }
    } else {
        guests::folder(&lab.dev, name, form, None)
    };
    let host = host_over(lab, &[dir], RestartPolicy::never()).await;
    let entry = info(&host, name);
    assert_eq!(entry.state, ExtensionState::Ready, "{entry:#?}");
    assert_eq!(entry.kind, form.kind(), "{entry:#?}");
    Some(host)
}

/// Runs one example's checks against its wasm and its native build.
macro_rules! twice {
    ($($module:ident: $example:expr => $check:ident;)*) => {$(
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn as_wasm() {
                let lab = Lab::new();
                if let Some(host) = example_host(&lab, $example, Form::Wasm).await {
                    $check(&host).await;
                    host.shutdown().await;
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn as_native() {
                let lab = Lab::new();
                if let Some(host) = example_host(&lab, $example, Form::Native).await {
                    $check(&host).await;
                    host.shutdown().await;
                }
            }
        }
    )*};
}

twice! {
    hello: "hello" => check_hello;
    weather: "weather" => check_weather;
    guard: "guard" => check_guard;
    scratchpad: "scratchpad" => check_scratchpad;
    c_shout: C_SHOUT => check_c_shout;
}

async fn check_hello(host: &Host) {
    let prompt = |text: &str| CommandResponse {
        action: CommandAction::Prompt,
        prompt: Some(text.to_owned()),
        ..CommandResponse::default()
    };
    assert_response(
        command(host, "hello", "Ada").await,
        prompt("Say hello to Ada in one short sentence."),
    );
    assert_response(
        command(host, "hello", "  ").await,
        prompt("Say hello to the user in one short sentence."),
    );
    assert_response(
        command(host, "hello-insert", "").await,
        CommandResponse {
            action: CommandAction::Insert,
            insert: Some("Hello from a sandboxed extension!".to_owned()),
            ..CommandResponse::default()
        },
    );
    for (args, shown) in [("", "hello, world"), ("Ada", "hello, Ada")] {
        assert_response(
            command(host, "hello-display", args).await,
            CommandResponse {
                action: CommandAction::Display,
                display: Some(shown.to_owned()),
                ..CommandResponse::default()
            },
        );
    }
    assert_response(
        command(host, "hello-noop", "anything").await,
        CommandResponse::default(),
    );
    assert_response(
        command(host, "hello-fail", "Bob").await,
        CommandResponse {
            error: Some("cannot greet `Bob`: no such person".to_owned()),
            ..CommandResponse::default()
        },
    );
}

async fn check_weather(host: &Host) {
    let mut events = host.subscribe();
    let berlin = tool(host, "weather", json!({"city": "Berlin"})).await;
    assert_result(&berlin, false, "Berlin: 1°C, light fog (fake)");
    let note = next_event(&mut events, "the weather's note", |e| {
        matches!(e, HostEvent::Notify { .. })
    })
    .await;
    assert_eq!(
        note,
        HostEvent::Notify {
            extension: "weather".into(),
            level: "info".into(),
            message: "looking up the weather in Berlin".into(),
        }
    );
    let fahrenheit = tool(
        host,
        "weather",
        json!({"city": "Berlin", "units": "fahrenheit"}),
    )
    .await;
    assert_result(&fahrenheit, false, "Berlin: 33°F, light fog (fake)");
    // Arguments of the wrong type: the SDK names the field.
    let wrong_type = tool(host, "weather", json!({"city": 3})).await;
    assert_result(
        &wrong_type,
        true,
        "invalid arguments for tool `weather`: city: invalid type: integer `3`, expected a string",
    );
    let missing = tool(host, "weather", json!({})).await;
    assert_result(
        &missing,
        true,
        "invalid arguments for tool `weather`: missing field `city`",
    );
    let kelvin = tool(host, "weather", json!({"city": "Oslo", "units": "kelvin"})).await;
    assert_result(
        &kelvin,
        true,
        "unknown units `kelvin`; use celsius or fahrenheit",
    );
    assert_response(
        command(host, "weather", " Paris ").await,
        CommandResponse {
            action: CommandAction::Prompt,
            prompt: Some("Use the weather tool for Paris and answer in one line.".to_owned()),
            ..CommandResponse::default()
        },
    );
}

async fn check_guard(host: &Host) {
    let entry = info(host, "guard");
    assert_eq!(entry.intercepts, ["tool_call"]);
    assert_eq!(entry.events, ["tool_call", "turn_start"]);
    let bash = |command: &str| host.intercept_tool_call("bash", json!({"command": command}));

    assert_eq!(
        bounded("rm -rf /", bash("rm -rf /")).await,
        Decision {
            verdict: Verdict::Block {
                reason: "refused: `rm -rf /` deletes the whole filesystem".to_owned()
            },
            decided_by: vec!["guard".to_owned()],
        }
    );
    assert_eq!(
        bounded("ls", bash("ls")).await,
        Decision {
            verdict: Verdict::Rewrite {
                args: json!({"command": "ls -la"})
            },
            decided_by: vec!["guard".to_owned()],
        }
    );
    assert_eq!(
        bounded("cargo test", bash("cargo test")).await,
        Decision {
            verdict: Verdict::Allow,
            decided_by: Vec::new(),
        }
    );

    // Events are queued ahead of the command, so the guard has seen them
    // all when it answers.
    host.emit_event(&Event::turn_start(1));
    host.emit_event(&Event::turn_start(2));
    host.emit_event(&Event::tool_call("call-x", "read", json!({"path": "a"})));
    assert_response(
        command(host, "guard-stats", "").await,
        CommandResponse {
            action: CommandAction::Display,
            display: Some("guard: 2 turns, 1 tool calls seen".to_owned()),
            ..CommandResponse::default()
        },
    );
}

async fn check_scratchpad(host: &Host) {
    let mut events = host.subscribe();
    let display = |text: &str| CommandResponse {
        action: CommandAction::Display,
        display: Some(text.to_owned()),
        ..CommandResponse::default()
    };
    assert_result(
        &tool(host, "read_notes", json!({})).await,
        false,
        "(no notes)",
    );
    assert_response(
        command(host, "note", "water the plants").await,
        display("noted: water the plants"),
    );
    let note = next_event(&mut events, "the scratchpad's note", |e| {
        matches!(e, HostEvent::Notify { .. })
    })
    .await;
    assert_eq!(
        note,
        HostEvent::Notify {
            extension: "scratchpad".into(),
            level: "success".into(),
            message: "noted (1 in total)".into(),
        }
    );
    assert_response(
        command(host, "note", "  ").await,
        CommandResponse {
            error: Some("nothing to note: `/note TEXT`".to_owned()),
            ..CommandResponse::default()
        },
    );
    assert_result(
        &tool(host, "add_note", json!({"text": "buy milk"})).await,
        false,
        "added; 2 notes",
    );
    assert_result(
        &tool(host, "read_notes", json!({})).await,
        false,
        "water the plants\nbuy milk",
    );
    assert_response(
        command(host, "notes", "").await,
        CommandResponse {
            action: CommandAction::OpenPanel,
            open_panel: Some(OpenPanel {
                id: "notes".to_owned(),
                title: "Scratchpad".to_owned(),
                lines: vec!["1. water the plants".to_owned(), "2. buy milk".to_owned()],
                footer: Some("esc to close".to_owned()),
            }),
            ..CommandResponse::default()
        },
    );
    assert_response(
        command(host, "clear-notes", "").await,
        display("cleared 2 notes"),
    );
    assert_result(
        &tool(host, "read_notes", json!({})).await,
        false,
        "(no notes)",
    );
}

async fn check_c_shout(host: &Host) {
    assert_result(
        &tool(host, "shout", json!({"text": "any WASI language"})).await,
        false,
        "ANY WASI LANGUAGE",
    );
    assert_result(
        &tool(host, "shout", json!({"words": "x"})).await,
        true,
        "missing `text`",
    );
    assert_response(
        command(host, "shout", "hi there").await,
        CommandResponse {
            action: CommandAction::Display,
            display: Some("HI THERE".to_owned()),
            ..CommandResponse::default()
        },
    );
}

// ---------------------------------------------------------------------------
// The sandbox and its limits, with the `hostile` guest.

/// The wasm `hostile` guest with manifest `limits`.
fn hostile(lab: &Lab, limits: Value) -> PathBuf {
    guests::folder(&lab.dev, "hostile", Form::Wasm, Some(limits))
}

/// A fast restart policy, otherwise the default.
fn quick_restarts() -> RestartPolicy {
    RestartPolicy {
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(50),
        ..RestartPolicy::default()
    }
}

/// Calls `hostile`'s `echo`, which must answer.
async fn assert_echoes(host: &Host) {
    let echo = tool(host, "echo", json!({"text": "still here"})).await;
    assert_result(&echo, false, "still here");
}

/// Waits for `hostile` to exit, be restarted and become ready again;
/// returns the exit's reason.
async fn restarted(events: &mut tokio::sync::broadcast::Receiver<HostEvent>) -> String {
    let exited = next_event(
        events,
        "hostile's exit",
        |e| matches!(e, HostEvent::Exited { extension, .. } if &**extension == "hostile"),
    )
    .await;
    let HostEvent::Exited { reason, .. } = exited else {
        unreachable!("matched above")
    };
    let restarting = next_event(events, "hostile's restart", |e| {
        matches!(e, HostEvent::Restarting { .. })
    })
    .await;
    assert_eq!(
        restarting,
        HostEvent::Restarting {
            extension: "hostile".into(),
            attempt: 1,
            delay_ms: 50
        }
    );
    next_event(
        events,
        "hostile ready again",
        |e| matches!(e, HostEvent::Ready { extension } if &**extension == "hostile"),
    )
    .await;
    reason
}

/// An infinite loop in a tool: the call times out naming the extension
/// and the tool, the busy guest is killed, restarted, and answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spinning_tool_times_out_and_the_guest_is_killed_and_restarted() {
    let lab = Lab::new();
    let dir = hostile(&lab, json!({"tool_timeout_ms": 300}));
    let host = host_over(&lab, &[dir], quick_restarts()).await;
    let mut events = host.subscribe();

    let err = bounded("spin", host.call_tool("spin", json!({})))
        .await
        .expect_err("spin never answers");
    assert!(
        matches!(&err, HostError::Call(CallError::Timeout { after, .. }) if *after == Duration::from_millis(300)),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "extension `hostile` 0.1.0: tool `spin` timed out after 300ms"
    );
    let reason = restarted(&mut events).await;
    assert_eq!(reason, "killed: still running after a request's deadline");
    assert_echoes(&host).await;
    let entry = info(&host, "hostile");
    assert_eq!(
        (entry.state, entry.restarts),
        (ExtensionState::Ready, 1),
        "{entry:#?}"
    );
    host.shutdown().await;
}

/// A guest spinning on one call does not stall another extension, nor the
/// host. One worker thread only: a guest that held its thread instead of
/// yielding at each epoch tick would stall everything here.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_spinning_guest_does_not_stall_the_others() {
    let lab = Lab::new();
    let spinner = hostile(&lab, json!({"tool_timeout_ms": 30_000}));
    let weather = guests::folder(&lab.dev, "weather", Form::Wasm, None);
    let host = host_over(&lab, &[spinner, weather], RestartPolicy::never()).await;

    let spin = tokio::spawn({
        let host = host.clone();
        async move { host.call_tool("spin", json!({})).await }
    });
    bounded("50 weather calls beside a spinning guest", async {
        for i in 0..50 {
            let city = format!("City{i}");
            let result = tool(&host, "weather", json!({"city": city})).await;
            assert!(!result.is_error, "{result:?}");
            assert!(
                result.text().starts_with(&format!("{city}: ")),
                "{result:?}"
            );
            let states: Vec<ExtensionState> = host.list().iter().map(|e| e.state).collect();
            assert_eq!(states, [ExtensionState::Ready, ExtensionState::Ready]);
        }
    })
    .await;
    assert!(!spin.is_finished(), "spin answered: {:?}", spin.await);
    host.shutdown().await;
    let err = bounded("the spin call", spin)
        .await
        .expect("the call's task")
        .expect_err("spin was shut down");
    assert_eq!(err.to_string(), "extension `hostile` 0.1.0: was shut down");
}

/// A memory bomb: the guest traps at its limit, the call fails at once
/// saying so, the log says so, and another extension keeps answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_bomb_hits_the_limit_and_only_that_guest_dies() {
    let lab = Lab::new();
    let bomb = hostile(&lab, json!({"memory_mb": 32, "tool_timeout_ms": 30_000}));
    let weather = guests::folder(&lab.dev, "weather", Form::Wasm, None);
    let host = host_over(&lab, &[bomb, weather], quick_restarts()).await;
    let mut events = host.subscribe();

    let started = Instant::now();
    let err = bounded("alloc", host.call_tool("alloc", json!({})))
        .await
        .expect_err("alloc cannot succeed");
    // Far sooner than the 30 s deadline: the trap failed the call.
    assert!(started.elapsed() < Duration::from_secs(10), "{err}");
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
    assert_eq!(
        err.to_string(),
        "extension `hostile` 0.1.0: ran out of memory (limit 32 MiB across all memories and tables)"
    );
    let log_path = lab.home.join("logs/ext-hostile.log");
    let log = std::fs::read_to_string(&log_path).expect("hostile's log");
    assert!(
        log.contains(
            "zotbox: guest ran out of memory (limit 32 MiB across all memories and tables)"
        ),
        "{log}"
    );

    let berlin = tool(&host, "weather", json!({"city": "Berlin"})).await;
    assert_result(&berlin, false, "Berlin: 1°C, light fog (fake)");
    assert_eq!(
        restarted(&mut events).await,
        "ran out of memory (limit 32 MiB across all memories and tables)"
    );
    assert_echoes(&host).await;
    host.shutdown().await;
}

/// What a guest writes to stderr reaches its log as text: `zot ext logs`
/// and `cat` print the file to a terminal, where an OSC 52 sequence would
/// put a command in the user's clipboard and a screen clear hide the lines
/// before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guests_stderr_reaches_its_log_as_text() {
    let lab = Lab::new();
    let dir = hostile(&lab, json!({}));
    let host = host_over(&lab, &[dir], quick_restarts()).await;
    let written = tool(&host, "stderr_evil", json!({})).await;
    assert_result(&written, false, "written");
    host.shutdown().await;
    let log = std::fs::read(lab.home.join("logs/ext-hostile.log")).expect("hostile's log");
    let log = String::from_utf8(log).expect("the log is UTF-8");
    assert!(
        log.contains("\\u{1b}]52;c;cm0gLXJmIH4=\\u{7}\\u{1b}[2Jhidden\u{20ac} \\x{ff}\n"),
        "{log}"
    );
    assert!(!log.contains('\u{1b}'), "{log}");
}

/// A stdout flood (one endless line): the guest is stopped as soon as the
/// line passes the frame cap, not at the call's deadline; the bounded pipe
/// and the cap keep the host's memory flat; the guest is restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdout_flood_neither_fills_host_memory_nor_outlives_its_deadline() {
    let lab = Lab::new();
    let dir = hostile(&lab, json!({"tool_timeout_ms": 30_000}));
    let host = host_over(&lab, &[dir], quick_restarts()).await;
    let mut events = host.subscribe();
    let before = rss_kib();

    let started = Instant::now();
    let err = bounded("flood", host.call_tool("flood", json!({})))
        .await
        .expect_err("flood never answers");
    assert_eq!(
        err.to_string(),
        "extension `hostile` 0.1.0: killed: wrote a line over the 4194304-byte frame cap"
    );
    // Long before the call's 30 s deadline.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let grown_mib = rss_kib().saturating_sub(before) / 1024;
    // Other tests share this process, so the bound is loose; an unbounded
    // pipe would hold gigabytes after a second of flooding.
    assert!(grown_mib < 200, "the host grew by {grown_mib} MiB");
    assert_eq!(
        restarted(&mut events).await,
        "killed: wrote a line over the 4194304-byte frame cap"
    );
    assert_echoes(&host).await;
    host.shutdown().await;
}

/// A megabyte each way through the guest SDK's own WASI stdio: the call
/// arrives over many reads, the answer leaves in many 4096-byte writes,
/// their edges falling inside multi-byte characters; both arrive whole and
/// in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_megabyte_frame_crosses_the_guest_stdio_both_ways_intact() {
    let lab = Lab::new();
    let dir = hostile(&lab, json!({}));
    let host = host_over(&lab, &[dir], quick_restarts()).await;
    // 1, 2, 3 and 4 bytes long in UTF-8; 4096 is no multiple of their 10.
    let text: String = "aé漢🦀".repeat(100_000);
    let echo = tool(&host, "echo", json!({ "text": text })).await;
    assert!(!echo.is_error, "{echo:?}");
    let got = echo.text();
    assert_eq!(got.len(), text.len());
    assert!(got == text, "the echo differs from what was sent");
    assert_echoes(&host).await;
    host.shutdown().await;
}

/// A panic mid-call traps the guest: the pending call fails at once with
/// the panic's message, and the guest is restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_mid_call_fails_the_call_at_once_with_the_panic_message() {
    let lab = Lab::new();
    let dir = hostile(&lab, json!({"tool_timeout_ms": 30_000}));
    let host = host_over(&lab, &[dir], quick_restarts()).await;
    let mut events = host.subscribe();

    let started = Instant::now();
    let err = bounded("panic", host.call_tool("panic", json!({})))
        .await
        .expect_err("the guest panicked");
    assert!(started.elapsed() < Duration::from_secs(10), "{err}");
    let HostError::Call(CallError::Closed {
        reason: Closed::Exited(Exit::Trap(trap)),
        ..
    }) = &err
    else {
        panic!("not a trap: {err:?}");
    };
    // The trap, then the panic's location and message from the guest's stderr.
    assert!(
        trap.starts_with(
            "wasm trap: wasm `unreachable` instruction executed \
             (panicked at tests/guests/hostile/src/main.rs:"
        ),
        "{trap}"
    );
    assert!(
        trap.ends_with(": the hostile guest panicked on purpose)"),
        "{trap}"
    );
    let message = err.to_string();
    assert!(
        message.starts_with("extension `hostile` 0.1.0: trapped: "),
        "{message}"
    );
    // The guest's log has the whole story: the trap, then the wasm
    // backtrace (the test guests are stripped: frames by index).
    let log = std::fs::read_to_string(lab.home.join("logs/ext-hostile.log")).expect("log");
    assert!(
        log.contains(
            "zotbox: guest failed: wasm trap: wasm `unreachable` instruction executed\n\
             wasm backtrace:\n    0: <unknown>!<wasm function "
        ),
        "{log}"
    );
    let reason = restarted(&mut events).await;
    assert_eq!(reason, format!("trapped: {trap}"));
    assert_echoes(&host).await;
    host.shutdown().await;
}

/// Reading `/etc/passwd`: the guest has no preopened directory, so it gets
/// a WASI error and keeps running. Natively the same tool reads the file:
/// the sandbox is what stops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_etc_passwd_is_refused_inside_the_sandbox_only() {
    let lab = Lab::new();
    let dir = hostile(&lab, json!({}));
    let host = host_over(&lab, &[dir], RestartPolicy::never()).await;
    let read = tool(&host, "read_file", json!({"path": "/etc/passwd"})).await;
    // No preopen holds the path, so WASI cannot even resolve it (ENOENT is 44 in WASI).
    assert_result(
        &read,
        true,
        "cannot read `/etc/passwd`: No such file or directory (os error 44)",
    );
    assert_echoes(&host).await;
    let entry = info(&host, "hostile");
    assert_eq!((entry.state, entry.restarts), (ExtensionState::Ready, 0));
    host.shutdown().await;

    let native_lab = Lab::new();
    let dir = guests::folder(&native_lab.dev, "hostile", Form::Native, None);
    let host = host_over(&native_lab, &[dir], RestartPolicy::never()).await;
    assert_eq!(info(&host, "hostile").kind, "native");
    let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    let read = tool(&host, "read_file", json!({"path": "/etc/passwd"})).await;
    assert_result(&read, false, &format!("read {} bytes", passwd.len()));
    host.shutdown().await;
}

/// The environment and argv: nothing of the host's leaks in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_sees_no_environment_and_only_its_name_as_argv() {
    let lab = Lab::new();
    let dir = hostile(&lab, json!({}));
    let host = host_over(&lab, &[dir], RestartPolicy::never()).await;
    assert_result(
        &tool(&host, "env", json!({"name": "HOME"})).await,
        true,
        "`HOME`: environment variable not found",
    );
    assert_result(&tool(&host, "env_count", json!({})).await, false, "0");
    assert_result(&tool(&host, "args", json!({})).await, false, "hostile");
    host.shutdown().await;
}

/// A first compile reaches whoever builds the host as two events (the CLI
/// shows them on a terminal); a start from the cache sends neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_compile_is_announced_as_host_events_and_a_cached_start_is_not() {
    let lab = Lab::new();
    let dir = hostile(&lab, json!({}));
    let builder = lab.builder().extension(&dir);
    let mut events = builder.subscribe();
    let host = bounded("starting the host", builder.build())
        .await
        .expect("build");
    host.shutdown().await;
    let mut compiles = Vec::new();
    while let Ok(event) = events.try_recv() {
        match event {
            HostEvent::Compiling { extension, bytes } => {
                compiles.push(format!("compiling {extension}"));
                let size = std::fs::metadata(dir.join("hostile.wasm"))
                    .expect("wasm")
                    .len();
                assert_eq!(bytes, size);
            }
            HostEvent::Compiled { extension, .. } => compiles.push(format!("compiled {extension}")),
            _ => {}
        }
    }
    assert_eq!(compiles, ["compiling hostile", "compiled hostile"]);

    let builder = lab.builder().extension(&dir);
    let mut events = builder.subscribe();
    let host = bounded("starting the host again", builder.build())
        .await
        .expect("build");
    assert_eq!(info(&host, "hostile").state, ExtensionState::Ready);
    host.shutdown().await;
    while let Ok(event) = events.try_recv() {
        assert!(
            !matches!(
                event,
                HostEvent::Compiling { .. } | HostEvent::Compiled { .. }
            ),
            "{event:?}"
        );
    }
}

/// A damaged compile-cache entry is detected and replaced, never loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_cache_entry_is_recompiled_and_rewritten() {
    let lab = Lab::new();
    let dir = hostile(&lab, json!({}));
    let host = host_over(&lab, std::slice::from_ref(&dir), RestartPolicy::never()).await;
    let entries = cache_entries(&lab.home);
    assert_echoes(&host).await;
    host.shutdown().await;
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = &entries[0];
    assert_eq!(
        entry.extension().and_then(|e| e.to_str()),
        Some("cwasm"),
        "{entry:?}"
    );
    let original = std::fs::read(entry).expect("the cache entry");
    assert!(entry_is_valid(&original));

    let mut flipped = original.clone();
    let middle = flipped.len() / 2;
    for byte in &mut flipped[middle..middle + 64] {
        *byte ^= 0xa5;
    }
    let truncated = original[..original.len() / 3].to_vec();
    for (damage, bytes) in [("flipped bytes", flipped), ("truncated", truncated)] {
        std::fs::write(entry, &bytes).expect("damage the entry");
        // A new host: a new engine with nothing compiled in memory.
        let host = host_over(&lab, std::slice::from_ref(&dir), RestartPolicy::never()).await;
        assert_eq!(
            info(&host, "hostile").state,
            ExtensionState::Ready,
            "{damage}"
        );
        assert_echoes(&host).await;
        host.shutdown().await;
        assert_eq!(cache_entries(&lab.home), entries, "{damage}");
        let rewritten = std::fs::read(entry).expect("the cache entry");
        assert_ne!(rewritten, bytes, "{damage}: the entry was not rewritten");
        assert!(entry_is_valid(&rewritten), "{damage}");
    }
}

/// A file that is not wasm at all fails to load, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_bytes_are_not_a_guest() {
    let lab = Lab::new();
    let dir = lab.dev.join("junk");
    std::fs::create_dir_all(&dir).expect("folder");
    // A fixed pseudo-random sequence (xorshift), not starting with `\0asm`.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let junk: Vec<u8> = (0..4096)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect();
    assert_ne!(&junk[..4], b"\0asm");
    std::fs::write(dir.join("junk.wasm"), &junk).expect("write junk");
    write_json(
        &dir.join("extension.json"),
        &json!({"name": "junk", "wasm": "./junk.wasm"}),
    );
    let host = host_over(&lab, std::slice::from_ref(&dir), RestartPolicy::never()).await;
    let entry = settled(&host, "junk").await;
    assert_eq!(entry.state, ExtensionState::Failed, "{entry:#?}");
    assert_eq!(entry.kind, "wasm");
    assert_eq!(
        entry.reason.as_deref(),
        Some(
            format!(
                "cannot start: `{}` is not a WebAssembly component or module",
                dir.join("junk.wasm").display()
            )
            .as_str()
        )
    );
    host.shutdown().await;
}

/// A wasm guest that traps on every call is given up on at the policy's limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_that_keeps_trapping_is_given_up_on() {
    let lab = Lab::new();
    let dir = hostile(&lab, json!({}));
    let once = RestartPolicy {
        max_restarts: 1,
        window: Duration::from_secs(60),
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(50),
    };
    let host = host_over(&lab, &[dir], once).await;
    let mut events = host.subscribe();

    let first = host
        .call_tool("panic", json!({}))
        .await
        .expect_err("first trap");
    next_event(&mut events, "the restart", |e| {
        matches!(e, HostEvent::Ready { .. })
    })
    .await;
    let second = host
        .call_tool("panic", json!({}))
        .await
        .expect_err("second trap");
    assert_eq!(first.to_string(), second.to_string());
    let failed = next_event(&mut events, "giving up", |e| {
        matches!(e, HostEvent::Failed { .. })
    })
    .await;
    let HostEvent::Failed { extension, reason } = failed else {
        unreachable!("matched above")
    };
    assert_eq!(&*extension, "hostile");
    assert!(reason.starts_with("trapped: "), "{reason}");
    assert!(
        reason.contains("the hostile guest panicked on purpose"),
        "{reason}"
    );
    assert!(
        reason.ends_with("; gave up after 1 restarts within 60s"),
        "{reason}"
    );
    let entry = info(&host, "hostile");
    assert_eq!(entry.state, ExtensionState::Failed);
    assert_eq!(entry.reason.as_deref(), Some(reason.as_str()));
    assert_eq!(entry.restarts, 1);
    assert!(tool_names(&host).is_empty());
    host.shutdown().await;
}

/// Attack: a guest answers, then spins with no request open. Killed once
/// it has computed twice its call timeout (1 s here), it is not restarted:
/// it would spin again, and with a budget past the restart window (the
/// default timeout's is 60 s) restarts would never run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_killed_for_spinning_is_not_restarted() {
    let lab = Lab::new();
    let dir = hostile(&lab, json!({"tool_timeout_ms": 500}));
    let host = host_over(&lab, &[dir], quick_restarts()).await;
    let mut events = host.subscribe();
    // The host's first request to it has id 1.
    let answered = tool(&host, "answer_then_spin", json!({"id": "1"})).await;
    assert_result(&answered, false, "spinning");
    let failed = next_event(&mut events, "the kill", |e| {
        matches!(e, HostEvent::Failed { .. })
    })
    .await;
    let HostEvent::Failed { extension, reason } = failed else {
        unreachable!("matched above")
    };
    assert_eq!(&*extension, "hostile");
    assert_eq!(
        reason,
        "killed: computed for 1 s without reading its input (twice the longest a tool call of \
         it may take); not restarted: it would do the same again"
    );
    let entry = info(&host, "hostile");
    assert_eq!(entry.state, ExtensionState::Failed);
    assert_eq!(entry.restarts, 0);
    assert!(tool_names(&host).is_empty());
    host.shutdown().await;
}

/// Several extensions sharing one wasm file compile it concurrently into
/// the same cache entry; every writer must land its entry without error.
#[test]
fn identical_guests_compiled_at_once_share_one_cache_entry_cleanly() {
    let lab = Lab::new();
    let copies: Vec<PathBuf> = (1..=4)
        .map(|i| {
            let name = format!("copy{i}");
            guests::wasm_folder(
                &lab.dev,
                &name,
                guests::guests().artifact("hostile", Form::Wasm),
                None,
            )
        })
        .collect();
    let mut args: Vec<String> = Vec::new();
    for dir in &copies {
        args.extend(["--ext".to_owned(), dir.display().to_string()]);
    }
    args.push("list".to_owned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // The writers race; three fresh starts make a lost one near certain.
    for round in 0..3 {
        let _ = std::fs::remove_dir_all(lab.home.join("cache"));
        let run = lab.zotbox(&args);
        run.expect_code(0);
        assert!(
            !run.stderr.contains("cannot write cache entry"),
            "round {round}: {}",
            run.stderr
        );
        let entries = cache_entries(&lab.home);
        assert_eq!(entries.len(), 1, "round {round}: {entries:?}");
        let bytes = std::fs::read(&entries[0]).expect("the cache entry");
        assert!(entry_is_valid(&bytes), "round {round}");
    }
}
