//! Every frame type, in both directions, through the library.

use std::time::Duration;

use serde_json::json;
use zotbox::host::ExtensionState;
use zotbox::protocol::{
    CommandAction, CommandResponse, Content, Event, OpenPanel, PanelRender, ToolResult,
};
use zotbox::{HostError, HostEvent, SessionConfig, Verdict};

use crate::support::{Lab, bounded, ext, info, next_event, process_alive};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_ack_carries_the_host_context_and_registrations_are_listed() {
    let lab = Lab::new();
    let alpha = ext("alpha")
        .flags(&["--subscribe", "turn_start,turn_end"])
        .flags(&["--intercept", "allow", "--intercept-on", "tool_call"])
        .write_in(&lab.dev);
    let host = lab
        .builder()
        .zot_version("9.9.9")
        .provider("acme")
        .model("acme-1")
        .extension(&alpha.dir)
        .build()
        .await
        .expect("build");

    let ack = alpha.wait_for("hello_ack", 1).await;
    let dir = alpha.dir.display().to_string();
    assert_eq!(
        ack,
        vec![json!({
            "type": "hello_ack",
            "protocol_version": 1,
            "zot_version": "9.9.9",
            "provider": "acme",
            "model": "acme-1",
            "cwd": lab.workspace.display().to_string(),
            "extension_dir": dir,
            "data_dir": dir,
        })]
    );

    let entry = info(&host, "alpha");
    assert_eq!(entry.state, ExtensionState::Ready);
    assert_eq!(entry.version, "1.0.0");
    assert_eq!(entry.kind, "native");
    assert_eq!(entry.origin, "explicit");
    assert_eq!(entry.path, alpha.dir.join("extension.json"));
    assert_eq!(entry.commands, ["alpha"]);
    assert_eq!(entry.tools, ["alpha_tool"]);
    assert_eq!(entry.events, ["turn_end", "turn_start"]);
    assert_eq!(entry.intercepts, ["tool_call"]);
    assert!(entry.warnings.is_empty(), "{:?}", entry.warnings);
    assert_eq!(entry.reason, None);

    let commands = host.commands();
    assert_eq!(commands.len(), 1);
    assert_eq!(
        (
            commands[0].name.as_str(),
            commands[0].description.as_str(),
            commands[0].extension.as_str()
        ),
        ("alpha", "alpha's command", "alpha")
    );
    let tools = host.tools();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].name, "alpha_tool");
    assert_eq!(tools[0].description, "alpha's tool");
    assert_eq!(tools[0].extension, "alpha");
    assert_eq!(
        tools[0].schema,
        json!({"type": "object", "properties": {"mode": {"type": "string"}}})
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_without_ready_is_ready_after_the_idle_watchdog() {
    let lab = Lab::new();
    let quiet = ext("quiet").flags(&["--no-ready"]).write_in(&lab.dev);
    let host = lab
        .builder()
        .extension(&quiet.dir)
        .build()
        .await
        .expect("build");
    assert_eq!(info(&host, "quiet").state, ExtensionState::Ready);
    let result = host.call_tool("quiet_tool", json!({})).await.expect("call");
    assert_eq!(result.text(), "quiet got {}");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_answer_with_every_action() {
    let lab = Lab::new();
    let alpha = ext("alpha").write_in(&lab.dev);
    let host = lab
        .builder()
        .extension(&alpha.dir)
        .build()
        .await
        .expect("build");

    let cases: [(&str, CommandResponse); 7] = [
        // No arguments: the default prompt.
        (
            "",
            CommandResponse {
                action: CommandAction::Prompt,
                prompt: Some("hello from alpha".into()),
                ..CommandResponse::default()
            },
        ),
        (
            "prompt Tell me a joke",
            CommandResponse {
                action: CommandAction::Prompt,
                prompt: Some("Tell me a joke".into()),
                ..CommandResponse::default()
            },
        ),
        (
            "insert some text",
            CommandResponse {
                action: CommandAction::Insert,
                insert: Some("some text".into()),
                ..CommandResponse::default()
            },
        ),
        (
            "display a note",
            CommandResponse {
                action: CommandAction::Display,
                display: Some("a note".into()),
                ..CommandResponse::default()
            },
        ),
        (
            "noop",
            CommandResponse {
                action: CommandAction::Noop,
                ..CommandResponse::default()
            },
        ),
        // `error` comes whatever the action.
        (
            "error no such city",
            CommandResponse {
                action: CommandAction::Noop,
                error: Some("no such city".into()),
                ..CommandResponse::default()
            },
        ),
        (
            "panel",
            CommandResponse {
                action: CommandAction::OpenPanel,
                open_panel: Some(OpenPanel {
                    id: "panel-1".into(),
                    title: "alpha panel".into(),
                    lines: vec!["line one".into(), "line two".into()],
                    footer: Some("q closes".into()),
                }),
                ..CommandResponse::default()
            },
        ),
    ];
    for (args, expected) in cases {
        let response = host
            .invoke_command("alpha", args)
            .await
            .unwrap_or_else(|err| panic!("`/alpha {args}`: {err}"));
        assert_eq!(
            response,
            CommandResponse {
                id: response.id.clone(),
                ..expected
            },
            "`/alpha {args}`"
        );
        let invoked = alpha.recorded_of("command_invoked");
        assert_eq!(
            invoked.last(),
            Some(&json!({
                "type": "command_invoked",
                "id": response.id,
                "name": "alpha",
                "args": args,
            })),
            "`/alpha {args}`"
        );
    }
    let err = host
        .invoke_command("nope", "")
        .await
        .expect_err("unknown command");
    assert!(matches!(err, HostError::UnknownCommand { .. }), "{err:?}");
    assert_eq!(err.to_string(), "no command `nope` (known: alpha)");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_answer_results_and_errors() {
    let lab = Lab::new();
    let alpha = ext("alpha").write_in(&lab.dev);
    let host = lab
        .builder()
        .extension(&alpha.dir)
        .build()
        .await
        .expect("build");

    let result = host
        .call_tool("alpha_tool", json!({"city": "Berlin", "n": 2}))
        .await
        .expect("call");
    assert_eq!(
        result,
        ToolResult {
            id: result.id.clone(),
            content: vec![Content::text(r#"alpha got {"city":"Berlin","n":2}"#)],
            is_error: false,
        }
    );
    assert_eq!(
        alpha.recorded_of("tool_call"),
        [json!({
            "type": "tool_call",
            "id": result.id,
            "name": "alpha_tool",
            "args": {"city": "Berlin", "n": 2},
        })]
    );

    let failed = host
        .call_tool("alpha_tool", json!({"mode": "error"}))
        .await
        .expect("an is_error result is still a result");
    assert!(failed.is_error);
    assert_eq!(failed.text(), "alpha failed on purpose");

    let err = host
        .call_tool("nope", json!({}))
        .await
        .expect_err("unknown tool");
    assert_eq!(err.to_string(), "no tool `nope` (known: alpha_tool)");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_are_matched_to_their_answers() {
    let lab = Lab::new();
    let alpha = ext("alpha").write_in(&lab.dev);
    let host = lab
        .builder()
        .extension(&alpha.dir)
        .build()
        .await
        .expect("build");
    let slow_args = json!({"mode": "sleep", "seconds": 1, "tag": "slow"});
    let slow = tokio::spawn({
        let host = host.clone();
        let args = slow_args.clone();
        async move { host.call_tool("alpha_tool", args).await }
    });
    alpha.wait_for("tool_call", 1).await;
    let fast = host
        .call_tool("alpha_tool", json!({"tag": "fast"}))
        .await
        .expect("fast call");
    assert_eq!(fast.text(), r#"alpha got {"tag":"fast"}"#);
    // The fast answer overtook the slow one: calls are not serialised.
    assert!(!slow.is_finished());
    let slow = bounded("the slow call", slow)
        .await
        .expect("join")
        .expect("slow call");
    assert_eq!(
        slow.text(),
        r#"alpha got {"mode":"sleep","seconds":1,"tag":"slow"}"#
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_reach_their_subscribers_only() {
    let lab = Lab::new();
    let all = "session_start,turn_start,turn_end,tool_call,assistant_message";
    let tool = ext("tooly").write_in(&lab.dev);
    let listener = ext("listener")
        .flags(&["--subscribe", all])
        .write_in(&lab.dev);
    let picky = ext("picky")
        .flags(&["--subscribe", "turn_end"])
        .write_in(&lab.dev);
    let host = lab
        .builder()
        .extension(&tool.dir)
        .extension(&listener.dir)
        .extension(&picky.dir)
        .build()
        .await
        .expect("build");

    host.emit_event(&Event::session_start());
    host.emit_event(&Event::turn_start(1));
    host.emit_event(&Event::assistant_message("hi there"));
    // Calling a tool emits `tool_call` to subscribers before the call.
    host.call_tool("tooly_tool", json!({"q": 1}))
        .await
        .expect("call");
    host.emit_event(&Event::turn_end("end_turn", Some("boom".into())));

    let events = listener.wait_for("event", 5).await;
    let tool_id = events[3]["tool_id"].as_str().unwrap_or_default().to_owned();
    assert!(!tool_id.is_empty(), "{events:#?}");
    assert_eq!(
        events,
        [
            json!({"type": "event", "event": "session_start"}),
            json!({"type": "event", "event": "turn_start", "step": 1}),
            json!({"type": "event", "event": "assistant_message", "text": "hi there"}),
            json!({
                "type": "event",
                "event": "tool_call",
                "tool_id": tool_id,
                "tool_name": "tooly_tool",
                "tool_args": {"q": 1},
            }),
            json!({"type": "event", "event": "turn_end", "stop": "end_turn", "error": "boom"}),
        ]
    );

    // A round trip to each of the others: frames arrive in order, so any
    // event sent to them before would be recorded by now.
    host.invoke_command("picky", "noop").await.expect("picky");
    host.invoke_command("tooly", "noop").await.expect("tooly");
    assert_eq!(
        picky.recorded_of("event"),
        [json!({"type": "event", "event": "turn_end", "stop": "end_turn", "error": "boom"})]
    );
    assert_eq!(tool.recorded_of("event"), Vec::<serde_json::Value>::new());
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intercepts_block_rewrite_and_replace() {
    let lab = Lab::new();
    let alpha = ext("alpha").write_in(&lab.dev);
    // Blocks whatever mentions 13: step 13, arguments or text containing it.
    let guard = ext("guard")
        .flags(&["--intercept", "block", "--pattern", "13"])
        .flags(&["--intercept-on", "tool_call,turn_start,assistant_message"])
        .write_in(&lab.dev);
    // Rewrites every tool call and message it is asked about.
    let rewriter = ext("rewriter")
        .flags(&["--intercept", "rewrite"])
        .flags(&["--intercept-on", "tool_call,assistant_message"])
        .write_in(&lab.dev);
    let host = lab
        .builder()
        .extension(&alpha.dir)
        .extension(&guard.dir)
        .extension(&rewriter.dir)
        .build()
        .await
        .expect("build");
    let blocked = Verdict::Block {
        reason: "guard blocks '13'".into(),
    };

    let decision = host.intercept_turn_start(13).await;
    assert_eq!(decision.verdict, blocked);
    assert_eq!(decision.decided_by, ["guard"]);
    let decision = host.intercept_turn_start(1).await;
    assert_eq!(decision.verdict, Verdict::Allow);
    assert!(decision.decided_by.is_empty());

    let decision = host
        .intercept_tool_call("bash", json!({"command": "ls"}))
        .await;
    assert_eq!(
        decision.verdict,
        Verdict::Rewrite {
            args: json!({"command": "ls", "by": ["rewriter"]})
        }
    );
    assert_eq!(decision.decided_by, ["rewriter"]);
    let decision = host
        .intercept_tool_call("bash", json!({"command": "rm -rf /13"}))
        .await;
    assert_eq!(decision.verdict, blocked);
    assert_eq!(decision.decided_by, ["guard"]);

    let decision = host.intercept_assistant_message("hello").await;
    assert_eq!(
        decision.verdict,
        Verdict::Replace {
            text: "hello +rewriter".into()
        }
    );
    assert_eq!(decision.decided_by, ["rewriter"]);
    let decision = host.intercept_assistant_message("13 reasons").await;
    assert_eq!(decision.verdict, blocked);

    // The guard saw each request exactly as sent.
    let asked = guard.recorded_of("event_intercept");
    let without_ids: Vec<serde_json::Value> = asked
        .iter()
        .map(|frame| {
            let mut frame = frame.clone();
            frame.as_object_mut().map(|o| o.remove("id"));
            frame
        })
        .collect();
    assert_eq!(
        without_ids,
        [
            json!({"type": "event_intercept", "event": "turn_start", "step": 13}),
            json!({"type": "event_intercept", "event": "turn_start", "step": 1}),
            json!({"type": "event_intercept", "event": "tool_call",
                   "tool_name": "bash", "tool_args": {"command": "ls"}}),
            json!({"type": "event_intercept", "event": "tool_call",
                   "tool_name": "bash", "tool_args": {"command": "rm -rf /13"}}),
            json!({"type": "event_intercept", "event": "assistant_message", "text": "hello"}),
            json!({"type": "event_intercept", "event": "assistant_message",
                   "text": "13 reasons"}),
        ]
    );
    // After the guard blocked, the rewriter was not asked.
    assert_eq!(rewriter.recorded_of("event_intercept").len(), 2);

    // A real call runs the chain: rewritten arguments reach the tool...
    let result = host
        .call_tool("alpha_tool", json!({"x": 1}))
        .await
        .expect("call");
    assert_eq!(result.text(), r#"alpha got {"by":["rewriter"],"x":1}"#);
    // ...and a blocked call never reaches it.
    let err = host
        .call_tool("alpha_tool", json!({"x": 13}))
        .await
        .expect_err("blocked");
    assert!(
        matches!(&err, HostError::Blocked { tool, by, reason }
            if tool == "alpha_tool" && by == "guard" && reason == "guard blocks '13'"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "tool `alpha_tool` blocked by guard: guard blocks '13'"
    );
    assert_eq!(alpha.recorded_of("tool_call").len(), 1);
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notes_and_panels_go_both_ways() {
    let lab = Lab::new();
    let alpha = ext("alpha").write_in(&lab.dev);
    let host = lab
        .builder()
        .extension(&alpha.dir)
        .build()
        .await
        .expect("build");
    let mut events = host.subscribe();
    let render = |lines: &[&str]| HostEvent::PanelRender {
        extension: "alpha".into(),
        panel: PanelRender {
            panel_id: "panel-1".into(),
            title: Some("alpha panel".into()),
            lines: lines.iter().map(|l| (*l).to_owned()).collect(),
            footer: Some("q closes".into()),
        },
    };

    // notify and clear_notes, sent while answering a command.
    let response = host
        .invoke_command("alpha", "notify warn disk almost full")
        .await
        .expect("notify");
    assert_eq!(response.display.as_deref(), Some("notified"));
    let event = next_event(&mut events, "a note", |e| {
        matches!(e, HostEvent::Notify { .. })
    })
    .await;
    assert_eq!(
        event,
        HostEvent::Notify {
            extension: "alpha".into(),
            level: "warn".into(),
            message: "disk almost full".into(),
        }
    );
    host.invoke_command("alpha", "clear").await.expect("clear");
    let event = next_event(&mut events, "clear_notes", |e| {
        matches!(e, HostEvent::ClearNotes { .. })
    })
    .await;
    assert_eq!(
        event,
        HostEvent::ClearNotes {
            extension: "alpha".into()
        }
    );

    // open_panel, then the extension renders on its own.
    host.invoke_command("alpha", "panel").await.expect("panel");
    let is_render = |e: &HostEvent| matches!(e, HostEvent::PanelRender { .. });
    assert_eq!(
        next_event(&mut events, "a render", is_render).await,
        render(&["rendered"])
    );

    // Host → extension: resize and keys; each answered with a render.
    host.panel_resize("alpha", "panel-1", 80, 24)
        .expect("resize");
    assert_eq!(
        next_event(&mut events, "a render", is_render).await,
        render(&["size 80x24"])
    );
    host.panel_key("alpha", "panel-1", "x", Some("x"))
        .expect("key");
    assert_eq!(
        next_event(&mut events, "a render", is_render).await,
        render(&["key x text x"])
    );
    // `q` makes the extension close its panel.
    host.panel_key("alpha", "panel-1", "q", None).expect("key");
    let event = next_event(&mut events, "panel_close", |e| {
        matches!(e, HostEvent::PanelClose { .. })
    })
    .await;
    assert_eq!(
        event,
        HostEvent::PanelClose {
            extension: "alpha".into(),
            panel_id: "panel-1".into()
        }
    );
    // The user closes a panel: the extension is told.
    host.panel_close("alpha", "panel-1").expect("close");
    alpha.wait_for("panel_close", 1).await;

    assert_eq!(
        alpha.recorded_of("panel_resize"),
        [json!({"type": "panel_resize", "panel_id": "panel-1", "width": 80, "height": 24})]
    );
    assert_eq!(
        alpha.recorded_of("panel_key"),
        [
            json!({"type": "panel_key", "panel_id": "panel-1", "key": "x", "text": "x"}),
            json!({"type": "panel_key", "panel_id": "panel-1", "key": "q"}),
        ]
    );
    assert_eq!(
        alpha.recorded_of("panel_close"),
        [json!({"type": "panel_close", "panel_id": "panel-1"})]
    );

    let err = host
        .panel_key("nope", "panel-1", "x", None)
        .expect_err("no such extension");
    assert_eq!(err.to_string(), "no extension `nope`");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_acknowledged_without_signals() {
    let lab = Lab::new();
    let alpha = ext("alpha").write_in(&lab.dev);
    // Grace periods far longer than the test's bound: a shutdown that
    // finishes within the bound was ended by the extension itself.
    let slow_grace = SessionConfig {
        shutdown_grace: Duration::from_secs(30),
        kill_grace: Duration::from_secs(30),
        ..SessionConfig::default()
    };
    let host = lab
        .builder()
        .session_config(slow_grace)
        .extension(&alpha.dir)
        .build()
        .await
        .expect("build");
    let pid = alpha.pid();
    assert!(process_alive(pid));

    let started = std::time::Instant::now();
    bounded("shutdown", host.shutdown()).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(alpha.recorded_of("shutdown"), [json!({"type": "shutdown"})]);
    assert!(!process_alive(pid), "pid {pid} still running");
    assert_eq!(info(&host, "alpha").state, ExtensionState::Stopped);
    assert!(host.tools().is_empty());
    assert!(host.commands().is_empty());
}
