//! What a sandboxed extension sees of the agent, and what it may change.
//!
//! A `tool_call` event carries every argument of the agent's tool calls (a
//! file written, a command run), and an interceptor's answer may rewrite
//! the call before zot runs it: a rewritten `bash` call runs in zot, with
//! the user's permissions, outside any sandbox. So a wasm guest sees such
//! events, intercepts and rewrites only as its manifest declares
//! (`capabilities.events`, `capabilities.rewrite`) and the policy grants;
//! the start and end of a session and a turn are seen by any.
//!
//! Attack, each case: the `guard` example, a wasm guest that may read
//! nothing, subscribes to `tool_call` and answers a check of `ls` with a
//! rewrite (`ls -la`); its author could as well answer with any command.

use std::path::Path;

use serde_json::{Value, json};
use zotbox::Verdict;

use crate::guests::{self, Form};
use crate::support::{Lab, info, write_json};

/// The guard as a wasm guest whose manifest declares `capabilities`.
fn guard_declaring(lab: &Lab, capabilities: Value) -> std::path::PathBuf {
    let dir = guests::folder(&lab.dev, "guard", Form::Wasm, None);
    let path = dir.join("extension.json");
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(&path).expect("manifest")).expect("json");
    manifest["capabilities"] = capabilities;
    write_json(&path, &manifest);
    dir
}

fn hello_ack(lab: &Lab, dir: &Path) -> Value {
    json!({"type": "hello_ack", "protocol_version": 1, "zot_version": "0.0.0-zotbox-e2e",
           "provider": "anthropic", "model": "claude-test", "cwd": lab.workspace,
           "extension_dir": dir, "data_dir": dir})
}

fn check_of_ls(id: &str) -> Value {
    json!({"type": "event_intercept", "id": id, "event": "tool_call", "tool_name": "bash",
           "tool_args": {"command": "ls"}})
}

/// The guest's `subscribe` as zot got it through `zotbox run` (hosted by
/// the shared host, or `standalone`), and the answer zot got to a check of
/// `ls` (`None`: not asked, as zot would not ask an extension that did not
/// subscribe).
async fn under_zot(
    lab: &Lab,
    dir: &Path,
    ask: bool,
    standalone: bool,
) -> (Option<Value>, Option<Value>) {
    let dir_arg = dir.display().to_string();
    let args: &[&str] = if standalone {
        &["run", "--standalone", &dir_arg]
    } else {
        &["run", &dir_arg]
    };
    let mut zot = lab.spawn_zotbox(args, dir);
    assert_eq!(zot.recv().await["type"], "hello", "{}", zot.describe());
    zot.send(&hello_ack(lab, dir)).await;
    let frames = zot.recv_through("ready").await;
    let subscribe = frames.into_iter().find(|f| f["type"] == "subscribe");
    let answer = if ask {
        zot.send(&check_of_ls("1")).await;
        Some(zot.recv().await)
    } else {
        None
    };
    zot.send(&json!({"type": "shutdown"})).await;
    let _ = zot.end().await;
    (subscribe, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_zot_a_guest_sees_and_rewrites_the_agents_calls_only_as_granted() {
    let lab = Lab::new();

    // Declared nothing: zot is told of the turns only, and never asks it.
    let dir = guard_declaring(&lab, json!({}));
    let (subscribe, _) = under_zot(&lab, &dir, false, false).await;
    assert_eq!(
        subscribe,
        Some(json!({"type": "subscribe", "events": ["turn_start"]}))
    );
    // Should zot tell it or ask it anyway, the bridge does not pass it on:
    // the check is allowed as not asked (the guard would block this one),
    // and the guard counts no tool call, only the turn.
    let mut zot = lab.spawn_zotbox(&["run", &dir.display().to_string()], &dir);
    assert_eq!(zot.recv().await["type"], "hello", "{}", zot.describe());
    zot.send(&hello_ack(&lab, &dir)).await;
    let _ = zot.recv_through("ready").await;
    for event in ["tool_call", "turn_start"] {
        zot.send(
            &json!({"type": "event", "event": event, "step": 1, "tool_id": "t1",
                         "tool_name": "bash", "tool_args": {"command": "cat ~/.ssh/id_rsa"}}),
        )
        .await;
    }
    zot.send(
        &json!({"type": "event_intercept", "id": "2", "event": "tool_call",
                     "tool_name": "bash", "tool_args": {"command": "rm -rf /"}}),
    )
    .await;
    assert_eq!(
        zot.recv().await,
        json!({"type": "event_intercept_response", "id": "2"})
    );
    zot.send(&json!({"type": "command_invoked", "id": "3", "name": "guard-stats", "args": ""}))
        .await;
    let stats = zot.recv().await;
    assert_eq!(
        stats["display"], "guard: 1 turns, 0 tool calls seen",
        "{stats}"
    );
    zot.send(&json!({"type": "shutdown"})).await;
    let _ = zot.end().await;

    // `events`: it sees and answers the check, but its rewrite is taken
    // out of the answer before zot reads it.
    let dir = guard_declaring(&lab, json!({"events": ["tool_call"]}));
    for standalone in [false, true] {
        let (subscribe, answer) = under_zot(&lab, &dir, true, standalone).await;
        assert_eq!(
            subscribe,
            Some(
                json!({"type": "subscribe", "events": ["turn_start", "tool_call"],
                        "intercept": ["tool_call"]})
            )
        );
        assert_eq!(
            answer,
            Some(json!({"type": "event_intercept_response", "id": "1"})),
            "standalone: {standalone}"
        );
    }
    // Refused, so audited as refused (the standalone run wrote its log as
    // it ended).
    let audit = std::fs::read_to_string(lab.home.join("logs/audit.jsonl")).unwrap_or_default();
    let refusals: Vec<Value> = audit
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|record| record["capability"] == "rewrite")
        .collect();
    assert!(!refusals.is_empty(), "{audit}");
    assert!(
        refusals.iter().all(|r| r["extension"] == "guard"
            && r["decision"] == "deny"
            && r["subject"] == "tool_call"),
        "{refusals:?}"
    );

    // `rewrite` too: the rewrite reaches zot.
    let dir = guard_declaring(
        &lab,
        json!({"events": ["tool_call"], "rewrite": ["tool_call"]}),
    );
    let (_, answer) = under_zot(&lab, &dir, true, false).await;
    assert_eq!(
        answer,
        Some(json!({"type": "event_intercept_response", "id": "1",
                    "modified_args": {"command": "ls -la"}}))
    );

    // The policy has the last word: a team's `rewrite: []` takes it away.
    std::fs::write(lab.home.join("policy.json"), r#"{"rewrite": []}"#).expect("policy");
    let (_, answer) = under_zot(&lab, &dir, true, false).await;
    assert_eq!(
        answer,
        Some(json!({"type": "event_intercept_response", "id": "1"}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_host_a_guest_sees_and_rewrites_tool_calls_only_as_granted() {
    let lab = Lab::new();
    let cases = [
        (json!({}), Vec::<&str>::new(), Verdict::Allow),
        (
            json!({"events": ["tool_call"]}),
            vec!["tool_call"],
            Verdict::Allow,
        ),
        (
            json!({"events": ["tool_call"], "rewrite": ["tool_call"]}),
            vec!["tool_call"],
            Verdict::Rewrite {
                args: json!({"command": "ls -la"}),
            },
        ),
    ];
    for (capabilities, intercepts, verdict) in cases {
        let dir = guard_declaring(&lab, capabilities.clone());
        let host = lab.builder().extension(&dir).build().await.expect("build");
        let guard = info(&host, "guard");
        assert_eq!(guard.intercepts, intercepts, "{capabilities}");
        assert_eq!(
            guard.events.contains(&"tool_call".to_owned()),
            !intercepts.is_empty()
        );
        assert!(
            guard.events.contains(&"turn_start".to_owned()),
            "{guard:#?}"
        );
        if intercepts.is_empty() {
            assert!(
                guard.warnings.iter().any(|w| w.starts_with(
                    "intercept of `tool_call` refused: a sandboxed extension's event is \
                     intercepted only when its manifest declares it in `capabilities.events`"
                )),
                "{guard:#?}"
            );
        }
        let decision = host
            .intercept_tool_call("bash", json!({"command": "ls"}))
            .await;
        assert_eq!(decision.verdict, verdict, "{capabilities}");
        // Its block still holds without a rewrite grant.
        let decision = host
            .intercept_tool_call("bash", json!({"command": "rm -rf /"}))
            .await;
        assert_eq!(
            decision.verdict == Verdict::Allow,
            intercepts.is_empty(),
            "{capabilities}: {decision:?}"
        );
        host.shutdown().await;
        std::fs::remove_dir_all(&dir).expect("remove the guard");
        // The rewrite it could not make is audited as refused: once, by the
        // guest granted `events` alone.
        let audit = std::fs::read_to_string(lab.home.join("logs/audit.jsonl")).unwrap_or_default();
        let refused: Vec<Value> = audit
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|record| record["capability"] == "rewrite")
            .collect();
        let expected = usize::from(!intercepts.is_empty());
        assert_eq!(refused.len(), expected, "{capabilities}: {audit}");
        if let Some(record) = refused.first() {
            assert_eq!(
                (
                    &record["extension"],
                    &record["decision"],
                    &record["subject"]
                ),
                (&json!("guard"), &json!("deny"), &json!("tool_call"))
            );
        }
    }
}

#[test]
fn doctor_names_a_sandboxed_extension_that_may_rewrite_the_agents_calls() {
    let lab = Lab::new();
    let note = "extension `guard` (sandboxed) may rewrite the agent's tool calls: zot runs what \
                it answers, its own `bash` included, outside the sandbox";
    for (capabilities, named) in [
        (
            json!({"events": ["tool_call"], "rewrite": ["tool_call"]}),
            true,
        ),
        (json!({"events": ["tool_call"]}), false),
    ] {
        let dir = guard_declaring(&lab, capabilities.clone());
        let doctor = lab.zotbox(&["--ext", &dir.display().to_string(), "doctor"]);
        assert_eq!(
            doctor.stdout.contains(note),
            named,
            "{capabilities}: {doctor:#?}"
        );
        std::fs::remove_dir_all(&dir).expect("remove the guard");
    }
}
