//! Extensions that misbehave: crash, stay silent, say the wrong thing, flood,
//! stall, or refuse to stop. The host must survive each and say why.

use std::time::{Duration, Instant};

use serde_json::json;
use zotbox::Closed;
use zotbox::Exit;
use zotbox::host::{ExtensionState, RestartPolicy};
use zotbox::{CallError, FailMode, HostError, HostEvent, SessionConfig, Verdict};

use crate::support::{
    Lab, bounded, eventually, ext, info, next_event, process_alive, settled, tool_names, write_json,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_call_fails_the_call_at_once_and_withdraws_the_tools() {
    let lab = Lab::new();
    let crashy = ext("crashy").flags(&["--crash-on-call"]).write_in(&lab.dev);
    let host = lab
        .builder()
        .tool_timeout(Duration::from_secs(60))
        .restart_policy(RestartPolicy::never())
        .extension(&crashy.dir)
        .build()
        .await
        .expect("build");
    let mut events = host.subscribe();
    assert_eq!(tool_names(&host), ["crashy_tool"]);

    let started = Instant::now();
    let err = bounded("the call", host.call_tool("crashy_tool", json!({})))
        .await
        .expect_err("the extension crashed");
    // Far sooner than the 60 s call timeout: the exit failed the call.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(
            &err,
            HostError::Call(CallError::Closed {
                reason: Closed::Exited(Exit::Code(3)),
                ..
            })
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "extension `crashy` 1.0.0: exited with status 3"
    );

    let exited = next_event(&mut events, "the exit", |e| {
        matches!(e, HostEvent::Exited { .. })
    })
    .await;
    assert_eq!(
        exited,
        HostEvent::Exited {
            extension: "crashy".into(),
            reason: "exited with status 3".into()
        }
    );
    let failed = next_event(&mut events, "the failure", |e| {
        matches!(e, HostEvent::Failed { .. })
    })
    .await;
    assert_eq!(
        failed,
        HostEvent::Failed {
            extension: "crashy".into(),
            reason: "exited with status 3".into()
        }
    );

    assert!(host.tools().is_empty(), "{:?}", host.tools());
    assert!(host.commands().is_empty());
    let entry = info(&host, "crashy");
    assert_eq!(entry.state, ExtensionState::Failed);
    assert_eq!(entry.reason.as_deref(), Some("exited with status 3"));
    assert!(entry.tools.is_empty());
    assert_eq!(entry.restarts, 0);
    let err = host
        .call_tool("crashy_tool", json!({}))
        .await
        .expect_err("withdrawn");
    assert_eq!(
        err.to_string(),
        "no tool `crashy_tool`; no extension registered any"
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_extension_is_restarted_and_answers_again() {
    let lab = Lab::new();
    let crashy = ext("crashy").write_in(&lab.dev);
    let host = lab
        .builder()
        .extension(&crashy.dir)
        .build()
        .await
        .expect("build");
    let mut events = host.subscribe();
    let first_pid = crashy.pid();

    let err = host
        .call_tool("crashy_tool", json!({"mode": "crash"}))
        .await
        .expect_err("crashed");
    assert_eq!(
        err.to_string(),
        "extension `crashy` 1.0.0: exited with status 3"
    );
    let restarting = next_event(&mut events, "the restart", |e| {
        matches!(e, HostEvent::Restarting { .. })
    })
    .await;
    assert_eq!(
        restarting,
        HostEvent::Restarting {
            extension: "crashy".into(),
            attempt: 1,
            delay_ms: 200
        }
    );
    next_event(
        &mut events,
        "ready again",
        |e| matches!(e, HostEvent::Ready { extension } if &**extension == "crashy"),
    )
    .await;

    let result = host
        .call_tool("crashy_tool", json!({"again": true}))
        .await
        .expect("answers after the restart");
    assert_eq!(result.text(), r#"crashy got {"again":true}"#);
    assert_ne!(crashy.pid(), first_pid, "a new process");
    let entry = info(&host, "crashy");
    assert_eq!(entry.state, ExtensionState::Ready);
    assert_eq!(entry.restarts, 1);
    assert_eq!(entry.reason, None);
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_hello_within_the_deadline_fails_the_extension() {
    let lab = Lab::new();
    // `sh` records its pid within the 300 ms however loaded the machine
    // (a Python start may not), then waits without a word.
    let dir = lab.dev.join("mute");
    let pid_file = lab.dev.join("mute.pid");
    write_json(
        &dir.join("extension.json"),
        &json!({"name": "mute", "exec": "sh",
                "args": ["-c", format!("echo $$ > '{}'; exec sleep 60", pid_file.display())]}),
    );
    let host = lab
        .builder()
        .hello_timeout(Duration::from_millis(300))
        .restart_policy(RestartPolicy::never())
        .extension(&dir)
        .build()
        .await
        .expect("build");
    let entry = settled(&host, "mute").await;
    assert_eq!(entry.state, ExtensionState::Failed);
    assert_eq!(
        entry.reason.as_deref(),
        Some("extension `mute` sent no `hello` within 300ms")
    );
    assert!(host.tools().is_empty(), "{:?}", host.tools());
    // The silent process is not left behind.
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .expect("the extension recorded its pid")
        .trim()
        .parse()
        .expect("a pid");
    eventually("the silent extension to be killed", || {
        (!process_alive(pid)).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("pid {pid} still running"));
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_frames_spread_over_time_all_count() {
    let lab = Lab::new();
    // Gaps shorter than the idle watchdog do not end registration early.
    let steady = ext("steady")
        .flags(&[
            "--register-gap",
            "0.15",
            "--bad-schema",
            "--subscribe",
            "turn_start",
        ])
        .write_in(&lab.dev);
    let host = lab
        .builder()
        .extension(&steady.dir)
        .build()
        .await
        .expect("build");
    let entry = info(&host, "steady");
    assert_eq!(entry.state, ExtensionState::Ready, "{entry:#?}");
    assert_eq!(entry.events, ["turn_start"]);
    assert_eq!(entry.warnings.len(), 1, "{:?}", entry.warnings);
    assert_eq!(tool_names(&host), ["steady_tool"]);
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_that_ends_within_the_deadline_succeeds() {
    let lab = Lab::new();
    // After hello: four registration frames 400 ms apart (each gap well under
    // a 1 s idle watchdog), then `ready` at once: registration is done about
    // 1.6 s after hello, inside a 2.2 s deadline, with its last frames
    // arriving less than one idle period before the deadline (the case the
    // deadline once mishandled). The margins are wide so that a loaded
    // machine does not turn the timings over.
    let steady = ext("steady")
        .flags(&[
            "--register-gap",
            "0.4",
            "--bad-schema",
            "--subscribe",
            "turn_start",
        ])
        .write_in(&lab.dev);
    let host = lab
        .builder()
        .session_config(zotbox::SessionConfig {
            hello_timeout: Duration::from_millis(2200),
            ready_idle: Duration::from_secs(1),
            ..zotbox::SessionConfig::default()
        })
        .restart_policy(RestartPolicy::never())
        .extension(&steady.dir)
        .build()
        .await
        .expect("build");
    let entry = info(&host, "steady");
    assert_eq!(entry.state, ExtensionState::Ready, "{entry:#?}");
    assert_eq!(entry.events, ["turn_start"]);
    assert_eq!(tool_names(&host), ["steady_tool"]);
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_first_frame_fails_the_extension() {
    let lab = Lab::new();
    let rude = ext("rude")
        .flags(&["--first-frame", "register_tool"])
        .write_in(&lab.dev);
    let host = lab
        .builder()
        .restart_policy(RestartPolicy::never())
        .extension(&rude.dir)
        .build()
        .await
        .expect("build");
    let entry = settled(&host, "rude").await;
    assert_eq!(entry.state, ExtensionState::Failed);
    assert_eq!(
        entry.reason.as_deref(),
        Some(
            "extension `rude` sent `register_tool` before `hello`; the first frame must be `hello`"
        )
    );
    assert!(host.tools().is_empty(), "{:?}", host.tools());
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_mib_line_ends_the_extension_at_once_naming_the_frame_cap() {
    let lab = Lab::new();
    let flood = ext("flood")
        .flags(&["--flood-line", &(10 * 1024 * 1024).to_string()])
        .write_in(&lab.dev);
    let host = lab
        .builder()
        .restart_policy(RestartPolicy::never())
        .extension(&flood.dir)
        .build()
        .await
        .expect("build");
    let pid = flood.pid();
    let err = bounded("the call", host.call_tool("flood_tool", json!({"n": 1})))
        .await
        .expect_err("no result after a line over the cap");
    assert_eq!(
        err.to_string(),
        "extension `flood` 1.0.0: killed: wrote a line over the 4194304-byte frame cap"
    );
    let entry = eventually("`flood` to fail", || {
        let entry = info(&host, "flood");
        (entry.state == ExtensionState::Failed).then_some(entry)
    })
    .await
    .unwrap_or_else(|| panic!("{:#?}", host.list()));
    assert_eq!(
        entry.reason.as_deref(),
        Some("killed: wrote a line over the 4194304-byte frame cap")
    );
    assert!(
        eventually("the process to be gone", || (!process_alive(pid))
            .then_some(()))
        .await
        .is_some(),
        "pid {pid} still runs"
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_lines_and_unknown_frames_are_skipped() {
    let lab = Lab::new();
    let noisy = ext("noisy")
        .flags(&["--garbage-between", "--subscribe", "turn_start"])
        .flags(&["--intercept", "block", "--pattern", "danger"])
        .write_in(&lab.dev);
    let host = lab
        .builder()
        .extension(&noisy.dir)
        .build()
        .await
        .expect("build");
    let mut events = host.subscribe();

    // Every registration between the garbage counted, and nothing was refused.
    let entry = info(&host, "noisy");
    assert_eq!(entry.state, ExtensionState::Ready);
    assert_eq!(entry.version, "1.0.0");
    assert_eq!(entry.commands, ["noisy"]);
    assert_eq!(entry.tools, ["noisy_tool"]);
    assert_eq!(entry.events, ["turn_start"]);
    assert_eq!(entry.intercepts, ["tool_call"]);
    assert!(entry.warnings.is_empty(), "{:?}", entry.warnings);

    // Answers preceded by garbage still arrive.
    let result = host
        .call_tool("noisy_tool", json!({"a": 1}))
        .await
        .expect("call");
    assert_eq!(result.text(), r#"noisy got {"a":1}"#);
    let response = host
        .invoke_command("noisy", "notify info still here")
        .await
        .expect("command");
    assert_eq!(response.display.as_deref(), Some("notified"));
    let note = next_event(&mut events, "the note", |e| {
        matches!(e, HostEvent::Notify { .. })
    })
    .await;
    assert_eq!(
        note,
        HostEvent::Notify {
            extension: "noisy".into(),
            level: "info".into(),
            message: "still here".into()
        }
    );
    let decision = host
        .intercept_tool_call("bash", json!({"command": "danger"}))
        .await;
    assert!(decision.is_block(), "{decision:?}");
    assert_eq!(decision.decided_by, ["noisy"]);
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_outlives_its_deadline_times_out_and_the_extension_lives_on() {
    let lab = Lab::new();
    let sleepy = ext("sleepy").write_in(&lab.dev);
    let host = lab
        .builder()
        .tool_timeout(Duration::from_millis(300))
        .extension(&sleepy.dir)
        .build()
        .await
        .expect("build");
    let err = host
        .call_tool("sleepy_tool", json!({"mode": "sleep", "seconds": 2}))
        .await
        .expect_err("too slow");
    assert!(
        matches!(&err, HostError::Call(CallError::Timeout { after, .. })
            if *after == Duration::from_millis(300)),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "extension `sleepy` 1.0.0: tool `sleepy_tool` timed out after 300ms"
    );
    // The extension still answers; the late answer is ignored.
    let result = host
        .call_tool("sleepy_tool", json!({"n": 2}))
        .await
        .expect("next call");
    assert_eq!(result.text(), r#"sleepy got {"n":2}"#);
    assert_eq!(info(&host, "sleepy").state, ExtensionState::Ready);
    host.shutdown().await;
}

fn quick_shutdown() -> SessionConfig {
    SessionConfig {
        shutdown_grace: Duration::from_millis(500),
        kill_grace: Duration::from_millis(500),
        ..SessionConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_ignoring_shutdown_is_terminated() {
    let lab = Lab::new();
    let stubborn = ext("stubborn")
        .flags(&["--ignore-shutdown"])
        .write_in(&lab.dev);
    let host = lab
        .builder()
        .session_config(quick_shutdown())
        .extension(&stubborn.dir)
        .build()
        .await
        .expect("build");
    let pid = stubborn.pid();
    bounded("shutdown", host.shutdown()).await;
    assert_eq!(stubborn.recorded_of("shutdown").len(), 1);
    // It saw its input close and kept running: only a signal ended it.
    assert_eq!(stubborn.recorded_of("_stdin_closed").len(), 1);
    assert!(!process_alive(pid), "pid {pid} still running");
    assert_eq!(info(&host, "stubborn").state, ExtensionState::Stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_ignoring_shutdown_and_sigterm_is_killed() {
    let lab = Lab::new();
    let immortal = ext("immortal")
        .flags(&["--ignore-shutdown", "--ignore-sigterm"])
        .write_in(&lab.dev);
    let host = lab
        .builder()
        .session_config(quick_shutdown())
        .extension(&immortal.dir)
        .build()
        .await
        .expect("build");
    let pid = immortal.pid();
    let started = Instant::now();
    bounded("shutdown", host.shutdown()).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(immortal.recorded_of("shutdown").len(), 1);
    // It got SIGTERM, survived it, and still is gone: SIGKILL.
    assert_eq!(immortal.recorded_of("_sigterm").len(), 1);
    assert!(!process_alive(pid), "pid {pid} still running");
    assert_eq!(info(&host, "immortal").state, ExtensionState::Stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_stop_at_the_policy_limit() {
    let lab = Lab::new();
    let crashy = ext("crashy").write_in(&lab.dev);
    let once = RestartPolicy {
        max_restarts: 1,
        window: Duration::from_secs(60),
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(50),
    };
    let host = lab
        .builder()
        .restart_policy(once)
        .extension(&crashy.dir)
        .build()
        .await
        .expect("build");
    let mut events = host.subscribe();
    let crash = json!({"mode": "crash"});

    host.call_tool("crashy_tool", crash.clone())
        .await
        .expect_err("first crash");
    next_event(&mut events, "the restart", |e| {
        matches!(e, HostEvent::Ready { .. })
    })
    .await;
    host.call_tool("crashy_tool", crash)
        .await
        .expect_err("second crash");
    let failed = next_event(&mut events, "giving up", |e| {
        matches!(e, HostEvent::Failed { .. })
    })
    .await;
    let reason = "exited with status 3; gave up after 1 restarts within 60s";
    assert_eq!(
        failed,
        HostEvent::Failed {
            extension: "crashy".into(),
            reason: reason.into()
        }
    );
    let entry = info(&host, "crashy");
    assert_eq!(entry.state, ExtensionState::Failed);
    assert_eq!(entry.reason.as_deref(), Some(reason));
    assert_eq!(entry.restarts, 1);
    assert_eq!(crashy.recorded_of("_started").len(), 2);
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_that_cannot_start_says_why() {
    let lab = Lab::new();
    let manifest = |name: &str, exec: &str, args: &[&str]| {
        let dir = lab.dev.join(name);
        std::fs::create_dir_all(&dir).expect("folder");
        write_json(
            &dir.join("extension.json"),
            &json!({"name": name, "exec": exec, "args": args}),
        );
        dir
    };
    let missing = manifest("missing", "./no-such-file", &[]);
    let nowhere = manifest("nowhere", "no-such-program-zotbox-e2e", &[]);
    let quitter = manifest(
        "quitter",
        "python3",
        &[
            "-c",
            "import sys; sys.stderr.write('no thanks\\n'); sys.exit(1)",
        ],
    );
    let host = lab
        .builder()
        .restart_policy(RestartPolicy::never())
        .extension(&missing)
        .extension(&nowhere)
        .extension(&quitter)
        .build()
        .await
        .expect("build");

    for name in ["missing", "nowhere", "quitter"] {
        settled(&host, name).await;
    }
    let entry = info(&host, "missing");
    assert_eq!(entry.state, ExtensionState::Failed);
    let reason = entry.reason.unwrap_or_default();
    assert!(
        reason.starts_with(&format!(
            "cannot start: cannot start `{}",
            missing.display()
        )),
        "{reason}"
    );
    assert!(reason.contains("No such file or directory"), "{reason}");
    assert_eq!(
        info(&host, "nowhere").reason.as_deref(),
        Some("cannot start: `no-such-program-zotbox-e2e` was not found on PATH")
    );
    assert_eq!(
        info(&host, "quitter").reason.as_deref(),
        Some("extension `quitter` ended before it was ready: exited with status 1")
    );
    let log = std::fs::read_to_string(lab.home.join("logs/ext-quitter.log")).expect("log");
    assert_eq!(log, "no thanks\n");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interceptor_that_crashes_fails_open_or_closed_at_once() {
    for (mode, expected) in [
        (FailMode::Open, Verdict::Allow),
        (
            FailMode::Closed,
            Verdict::Block {
                reason: "extension `fragile` 1.0.0: exited with status 3; \
                         blocking (intercepts fail closed)"
                    .into(),
            },
        ),
    ] {
        let lab = Lab::new();
        let fragile = ext("fragile")
            .flags(&["--intercept", "block", "--crash-on-intercept"])
            .write_in(&lab.dev);
        let host = lab
            .builder()
            .intercept_timeout(Duration::from_secs(60))
            .intercept_failure(mode)
            .restart_policy(RestartPolicy::never())
            .extension(&fragile.dir)
            .build()
            .await
            .expect("build");
        let started = Instant::now();
        let decision = bounded(
            "the intercept",
            host.intercept_tool_call("bash", json!({"command": "ls"})),
        )
        .await;
        // Far sooner than the 60 s intercept deadline.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(decision.verdict, expected, "{mode:?}");
        host.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_limit_overrides_the_host_tool_timeout() {
    let lab = Lab::new();
    let sleepy = ext("sleepy").write_in(&lab.dev);
    sleepy.edit_manifest(|m| m["limits"] = json!({"tool_timeout_ms": 200}));
    let host = lab
        .builder()
        .tool_timeout(Duration::from_secs(30))
        .extension(&sleepy.dir)
        .build()
        .await
        .expect("build");
    let err = host
        .call_tool("sleepy_tool", json!({"mode": "sleep", "seconds": 2}))
        .await
        .expect_err("too slow");
    assert_eq!(
        err.to_string(),
        "extension `sleepy` 1.0.0: tool `sleepy_tool` timed out after 200ms"
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_that_closes_its_output_is_not_left_running() {
    let lab = Lab::new();
    let hollow = ext("hollow")
        .flags(&["--close-stdout-on-call"])
        .write_in(&lab.dev);
    let host = lab
        .builder()
        .restart_policy(RestartPolicy::never())
        .extension(&hollow.dir)
        .build()
        .await
        .expect("build");
    let pid = hollow.pid();
    let err = bounded("the call", host.call_tool("hollow_tool", json!({})))
        .await
        .expect_err("no answer can come");
    assert_eq!(
        err.to_string(),
        "extension `hollow` 1.0.0: closed its output"
    );
    // The supervisor records the end just after the call fails.
    let entry = eventually("`hollow` to be marked failed", || {
        let entry = info(&host, "hollow");
        (entry.state == ExtensionState::Failed).then_some(entry)
    })
    .await
    .unwrap_or_else(|| panic!("not failed: {:#?}", host.list()));
    assert_eq!(entry.reason.as_deref(), Some("closed its output"));
    // The session is over: the process must not outlive it, and certainly
    // not the host's shutdown.
    host.shutdown().await;
    eventually("the process to be stopped", || {
        (!process_alive(pid)).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("pid {pid} still running after its session ended"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_killed_from_outside_fails_its_call_with_the_signal() {
    let lab = Lab::new();
    let victim = ext("victim").write_in(&lab.dev);
    let host = lab
        .builder()
        .tool_timeout(Duration::from_secs(60))
        .restart_policy(RestartPolicy::never())
        .extension(&victim.dir)
        .build()
        .await
        .expect("build");
    let call = tokio::spawn({
        let host = host.clone();
        async move {
            host.call_tool("victim_tool", json!({"mode": "sleep", "seconds": 30}))
                .await
        }
    });
    let mut events = host.subscribe();
    victim.wait_for("tool_call", 1).await;
    let pid = nix::unistd::Pid::from_raw(victim.pid());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).expect("kill");
    let err = bounded("the call", call)
        .await
        .expect("join")
        .expect_err("killed");
    assert_eq!(
        err.to_string(),
        "extension `victim` 1.0.0: killed by signal 9 (SIGKILL)"
    );
    next_event(&mut events, "the failure", |e| {
        matches!(e, HostEvent::Failed { .. })
    })
    .await;
    let entry = info(&host, "victim");
    assert_eq!(
        (entry.state, entry.reason.as_deref()),
        (ExtensionState::Failed, Some("killed by signal 9 (SIGKILL)"))
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_fails_pending_calls_and_does_not_wait_for_a_restart() {
    let lab = Lab::new();
    let busy = ext("busy").write_in(&lab.dev);
    let crashy = ext("crashy").write_in(&lab.dev);
    // A back-off far longer than the test: shutdown must cut it short.
    let patient = RestartPolicy {
        initial_backoff: Duration::from_secs(60),
        max_backoff: Duration::from_secs(60),
        ..RestartPolicy::default()
    };
    let host = lab
        .builder()
        .tool_timeout(Duration::from_secs(60))
        .restart_policy(patient)
        .extension(&busy.dir)
        .extension(&crashy.dir)
        .build()
        .await
        .expect("build");
    let mut events = host.subscribe();
    host.call_tool("crashy_tool", json!({"mode": "crash"}))
        .await
        .expect_err("crashed");
    next_event(&mut events, "the restart", |e| {
        matches!(e, HostEvent::Restarting { .. })
    })
    .await;
    let entry = info(&host, "crashy");
    assert_eq!(entry.state, ExtensionState::Restarting);
    assert_eq!(entry.reason.as_deref(), Some("exited with status 3"));
    assert_eq!(entry.restarts, 1);

    let call = tokio::spawn({
        let host = host.clone();
        async move {
            host.call_tool("busy_tool", json!({"mode": "sleep", "seconds": 30}))
                .await
        }
    });
    busy.wait_for("tool_call", 1).await;
    let started = Instant::now();
    bounded("shutdown", host.shutdown()).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let err = bounded("the call", call)
        .await
        .expect("join")
        .expect_err("shut down");
    assert!(
        matches!(
            &err,
            HostError::Call(CallError::Closed {
                reason: Closed::ShutDown,
                ..
            })
        ),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "extension `busy` 1.0.0: was shut down");
    assert_eq!(crashy.recorded_of("_started").len(), 1, "never restarted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_returns_only_once_a_failed_start_is_recorded() {
    let lab = Lab::new();
    let rude = ext("rude")
        .flags(&["--first-frame", "register_tool"])
        .write_in(&lab.dev);
    // Busy cores widen the window between the supervisor's "started" signal
    // and its recording of the failure.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let mut early = Vec::new();
    for _ in 0..100 {
        let host = lab
            .builder()
            .restart_policy(RestartPolicy::never())
            .extension(&rude.dir)
            .build()
            .await
            .expect("build");
        let entry = info(&host, "rude");
        if entry.state != ExtensionState::Failed {
            early.push((entry.state, entry.reason));
        }
        host.shutdown().await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for spinner in spinners {
        spinner.join().expect("spinner");
    }
    assert!(early.is_empty(), "right after build(): {early:?}");
}

/// An extension that writes lines that are not frames without end, before
/// its `hello` or after it: a reader that always has a line ready was
/// polled before the deadline's timer, so the host waited for it forever
/// (`zotbox list`, `check` and `call` never answered, and a check a user
/// rule refuses was never refused). Both deadlines hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_garbage_before_or_after_hello_meets_the_deadlines() {
    let lab = Lab::new();
    let hello = r#"{"type":"hello","name":"flood","version":"1.0.0"}"#;
    for (script, reason) in [
        (
            "exec yes garbage".to_owned(),
            "extension `flood` sent no `hello` within 300ms",
        ),
        (
            format!("echo '{hello}'; exec yes garbage"),
            "extension `flood` did not finish registering within 300ms",
        ),
    ] {
        let dir = lab.dev.join("flood");
        write_json(
            &dir.join("extension.json"),
            &json!({"name": "flood", "exec": "sh", "args": ["-c", script]}),
        );
        let host = bounded(
            "a host over an extension writing garbage",
            lab.builder()
                .hello_timeout(Duration::from_millis(300))
                .restart_policy(RestartPolicy::never())
                .extension(&dir)
                .build(),
        )
        .await
        .expect("build");
        let entry = settled(&host, "flood").await;
        assert_eq!(entry.state, ExtensionState::Failed, "{script}");
        assert_eq!(entry.reason.as_deref(), Some(reason), "{script}");
        host.shutdown().await;
    }
}

/// What an extension writes must not grow zotbox's log without bound
/// (rule 6): lines that are not frames are logged a few at a time, then
/// counted. Here an endless stream of them after `ready` wrote hundreds of
/// thousands of warnings a second to the terminal.
#[test]
fn lines_that_are_not_frames_are_logged_a_few_then_counted() {
    let lab = Lab::new();
    let dir = lab.dev.join("flood");
    let frames = r#"{"type":"hello","name":"flood","version":"1.0.0"}
{"type":"ready"}"#;
    write_json(
        &dir.join("extension.json"),
        &json!({"name": "flood", "exec": "sh",
                "args": ["-c", format!("echo '{frames}'; exec yes garbage")]}),
    );
    let dir = dir.display().to_string();
    let run = crate::support::zotbox_bounded(&lab, &["-e", &dir, "list"]);
    run.expect_code(0);
    let warnings: Vec<&str> = run
        .stderr
        .lines()
        .filter(|line| line.contains("extension `flood`"))
        .collect();
    // Sixteen, the line that says the rest are counted, and the count.
    assert!(
        warnings.len() <= 18,
        "{} lines about the extension:\n{}",
        warnings.len(),
        run.stderr
    );
    assert!(
        warnings
            .iter()
            .any(|line| line.contains("16 lines were not frames; more are counted, not logged")),
        "{}",
        run.stderr
    );
}
