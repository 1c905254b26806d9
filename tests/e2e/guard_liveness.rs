//! THREATS rule 7, "the guard never sleeps and never stays silent", as an
//! attacker meets it: zot allows a tool call whose `event_intercept` is not
//! answered within 5 s, so every way of delaying or muting a check is a way
//! past the refusal plugins.
//!
//! - `zotbox serve` answers checks while a 10 s tool runs, blocks every check
//!   it cannot read (nested past the parser's limit, a 0xFF byte, a lone
//!   surrogate, a line over the 4 MiB frame cap), waits for a late
//!   `hello_ack` instead of falling back to its own directory, and bounds
//!   what it holds and runs;
//! - `zotbox run` (the bridge) blocks the checks its guard guest could not
//!   read, and ends a guest that writes an endless line at once;
//! - a hosted guest writing an endless line ends at once, naming the cap,
//!   with the host's memory flat.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;
use zotbox::host::{ExtensionState, RestartPolicy};
use zotbox::protocol::DEFAULT_MAX_LINE;

use crate::guests::{self, Form};
use crate::support::{
    Lab, PATIENCE, Peer, bounded, eventually, info, process_alive, rss_kib, write_json,
};

/// How soon a check must be answered here: generous (a loaded machine
/// cannot overturn it), and still half of zot's 5 s intercept deadline and
/// far below the 10 s tool it must not wait for.
const PROMPTLY: Duration = Duration::from_millis(2_500);

/// The refusal the workspace's plugin gives `rm -rf`.
const WIPE_REFUSED: &str = "deletes recursively (plugin `safety` rule 1)";

/// The workspace's refusal plugin: no `rm -rf` through `bash`.
fn safety_plugin(lab: &Lab) {
    let path = lab.workspace.join(".zot/plugins/safety.json");
    std::fs::create_dir_all(path.parent().expect("parent")).expect("plugins folder");
    write_json(
        &path,
        &json!({
            "name": "safety",
            "description": "no wipes",
            "deny": [{"tools": ["bash"], "commandPattern": "rm\\s+-rf", "reason": "deletes recursively"}],
        }),
    );
}

/// The user's data tool `slow`: a shell tool that sleeps 10 s.
fn slow_tool(lab: &Lab) {
    let path = lab.home.join("tools/slow.json");
    std::fs::create_dir_all(path.parent().expect("parent")).expect("tools folder");
    write_json(
        &path,
        &json!({"name": "slow", "description": "Take ten seconds", "kind": "shell",
                "command": "sleep 10"}),
    );
}

/// A folder of its own for `serve` to start in, with no data files: what
/// it would wrongly use if it fell back to its own directory.
fn elsewhere(lab: &Lab) -> PathBuf {
    let dir = lab.dev.join("serve-cwd");
    std::fs::create_dir_all(&dir).expect("serve's folder");
    dir
}

/// zot's `hello_ack` naming this lab's workspace.
fn hello_ack(lab: &Lab, dir: &Path) -> Value {
    json!({
        "type": "hello_ack",
        "protocol_version": 1,
        "zot_version": "0.0.0-zotbox-e2e",
        "provider": "anthropic",
        "model": "claude-test",
        "cwd": lab.workspace,
        "extension_dir": dir,
        "data_dir": dir,
    })
}

/// `zotbox serve` as zot runs it, through `ready`.
async fn start_serve(lab: &Lab) -> Peer {
    let dir = elsewhere(lab);
    let mut zot = lab.spawn_zotbox(&["serve"], &dir);
    assert_eq!(zot.recv().await["type"], "hello", "{}", zot.describe());
    zot.send(&hello_ack(lab, &dir)).await;
    zot.recv_through("ready").await;
    zot
}

/// `zotbox run DIR` as zot runs an installed launcher, through `ready`.
pub(crate) async fn start_run(lab: &Lab, dir: &Path) -> Peer {
    start_run_compiling(lab, dir, PATIENCE).await
}

/// [`start_run`], waiting up to `compiling` for the first frame: a large
/// component is compiled first (the Python example's takes 14 s alone on
/// two cores, and longer beside other tests).
pub(crate) async fn start_run_compiling(lab: &Lab, dir: &Path, compiling: Duration) -> Peer {
    let mut zot = lab.spawn_zotbox(&["run", &dir.display().to_string()], dir);
    let hello = match zot.recv_within(compiling).await {
        Ok(Some((_, frame))) => frame,
        _ => panic!("no first frame within {compiling:?}: {}", zot.describe()),
    };
    assert_eq!(hello["type"], "hello", "{}", zot.describe());
    zot.send(&hello_ack(lab, dir)).await;
    zot.recv_through("ready").await;
    zot
}

/// zot's check of a `bash` call whose `command` is the raw JSON `command`.
fn check(id: &str, command: &[u8]) -> Vec<u8> {
    [
        format!(
            r#"{{"type":"event_intercept","id":"{id}","event":"tool_call","tool_name":"bash","tool_args":{{"command":"#
        )
        .as_bytes(),
        command,
        b"}}\n",
    ]
    .concat()
}

/// The checks no parser reads, each with why, as serde_json says it. The
/// over-long one would be allowed by the plugin if it were read (`ls`); the
/// others would be refused (`rm -rf`): both must come back blocked.
fn unreadable_checks() -> Vec<(&'static str, Vec<u8>, String)> {
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    vec![
        (
            "1",
            check("1", deep.as_bytes()),
            "nested deeper than 127 levels".to_owned(),
        ),
        (
            "2",
            {
                let mut line = check("2", b"\"rm -rf /x?\"");
                if let Some(at) = line.iter().position(|&b| b == b'?') {
                    line[at] = 0xFF;
                }
                line
            },
            "invalid unicode code point at line 1 column 108".to_owned(),
        ),
        (
            "3",
            check("3", br#""\ud800""#),
            "unexpected end of hex escape at line 1 column 105".to_owned(),
        ),
        (
            "4",
            check(
                "4",
                format!("\"ls {}\"", " ".repeat(DEFAULT_MAX_LINE)).as_bytes(),
            ),
            format!("a line over the {DEFAULT_MAX_LINE}-byte frame cap"),
        ),
    ]
}

fn blocked(id: &str, reason: &str) -> Value {
    json!({"type": "event_intercept_response", "id": id, "block": true, "reason": reason})
}

fn unreadable_block(id: &str, why: &str) -> Value {
    blocked(
        id,
        &format!("zotbox could not read this check ({why}); blocked to be safe"),
    )
}

fn bash_check(id: &str, command: &str) -> Value {
    json!({"type": "event_intercept", "id": id, "event": "tool_call", "tool_name": "bash",
           "tool_args": {"command": command}})
}

// ---------------------------------------------------------------------------
// `zotbox serve`

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_checks_while_a_ten_second_tool_runs() {
    let lab = Lab::new();
    safety_plugin(&lab);
    slow_tool(&lab);
    let mut zot = start_serve(&lab).await;
    zot.send(&json!({"type": "tool_call", "id": "slow", "name": "slow", "args": {}}))
        .await;
    let asked = Instant::now();
    zot.send(&bash_check("wipe", "rm -rf /")).await;
    zot.send(&bash_check("list", "ls")).await;

    // Both checks, at once, before the tool's result.
    let Ok(Some((wipe_at, wipe))) = zot.recv_within(PATIENCE).await else {
        panic!("no answer: {}", zot.describe());
    };
    assert_eq!(wipe, blocked("wipe", WIPE_REFUSED));
    assert_eq!(
        zot.recv().await,
        json!({"type": "event_intercept_response", "id": "list"})
    );
    assert!(
        wipe_at.duration_since(asked) < PROMPTLY,
        "the check waited {:?}",
        wipe_at.duration_since(asked)
    );
    // Then the tool, which ran all along.
    let Ok(Some((_, result))) = zot.recv_within(Duration::from_secs(40)).await else {
        panic!("no tool result: {}", zot.describe());
    };
    assert_eq!(
        result,
        json!({"type": "tool_result", "id": "slow", "content": [{"type": "text", "text": ""}]})
    );
    zot.send(&json!({"type": "shutdown"})).await;
    assert_eq!(zot.recv().await, json!({"type": "shutdown_ack"}));
    let end = zot.end().await;
    assert_eq!(end.status.code(), Some(0), "{end:#?}");
}

/// Attack: a command of 100 000 simple commands (690 KB, well under the
/// frame cap). Read in every normal form, each compared with the forms
/// before it, it took 17 s: past zot's 5 s, and so allowed, with every
/// check behind it waiting. It is answered at once, blocked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_a_check_of_a_hundred_thousand_commands_promptly() {
    let lab = Lab::new();
    safety_plugin(&lab);
    let mut zot = start_serve(&lab).await;
    let many: Vec<String> = (0..100_000).map(|n| format!(":{n}")).collect();
    let command = format!("rm -rf important;{}", many.join(";"));
    let asked = Instant::now();
    zot.send(&bash_check("long", &command)).await;
    zot.send(&bash_check("list", "ls")).await;
    let Ok(Some((long_at, long))) = zot.recv_within(PATIENCE).await else {
        panic!("no answer: {}", zot.describe());
    };
    assert_eq!(long, blocked("long", WIPE_REFUSED));
    assert_eq!(
        zot.recv().await,
        json!({"type": "event_intercept_response", "id": "list"})
    );
    assert!(
        long_at.duration_since(asked) < PROMPTLY,
        "the check took {:?}",
        long_at.duration_since(asked)
    );
    zot.send(&json!({"type": "shutdown"})).await;
    assert_eq!(zot.recv().await, json!({"type": "shutdown_ack"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_blocks_every_check_it_cannot_read_and_answers_requests_it_cannot_read() {
    let lab = Lab::new();
    safety_plugin(&lab);
    let mut zot = start_serve(&lab).await;
    let checks = unreadable_checks();
    for (_, line, _) in &checks {
        zot.send_bytes(line).await;
    }
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    zot.send_bytes(
        format!("{{\"type\":\"tool_call\",\"id\":\"5\",\"name\":\"slow\",\"args\":{deep}}}\n")
            .as_bytes(),
    )
    .await;
    zot.send_bytes(
        &[
            &br#"{"type":"command_invoked","id":"6","name":"c","args":""#[..],
            &[0xFF],
            b"\"}\n",
        ]
        .concat(),
    )
    .await;
    zot.send_bytes(b"\n").await;
    // A readable check after them all is read by the plugin as usual.
    zot.send(&bash_check("7", "rm -rf /")).await;

    let mut expected: Vec<Value> = checks
        .iter()
        .map(|(id, _, why)| unreadable_block(id, why))
        .collect();
    expected.push(
        json!({"type": "tool_result", "id": "5", "is_error": true, "content": [{"type": "text",
        "text": "zotbox could not read this tool call (nested deeper than 127 levels)"}]}),
    );
    expected.push(json!({"type": "command_response", "id": "6", "action": "noop",
        "error": "zotbox could not read this command (invalid unicode code point at line 1 column 55)"}));
    expected.push(blocked("7", WIPE_REFUSED));
    let mut answers = Vec::new();
    for _ in &expected {
        answers.push(zot.recv().await);
    }
    assert_eq!(answers, expected);
    zot.send(&json!({"type": "shutdown"})).await;
    assert_eq!(zot.recv().await, json!({"type": "shutdown_ack"}));
    let end = zot.end().await;
    assert_eq!(end.status.code(), Some(0), "{end:#?}");
    assert!(end.last_lines.is_empty(), "{end:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_waits_for_a_late_hello_ack_and_checks_by_the_workspace_it_names() {
    let lab = Lab::new();
    safety_plugin(&lab);
    let dir = elsewhere(&lab);
    let mut zot = lab.spawn_zotbox(&["serve"], &dir);
    assert_eq!(zot.recv().await["type"], "hello");
    // A check before zot names the workspace: held, not answered by the
    // rules of serve's own folder (which has none, and would allow it).
    zot.send(&bash_check("early", "rm -rf /")).await;
    assert!(
        zot.recv_within(Duration::from_secs(3)).await.is_err(),
        "answered before `hello_ack`: {}",
        zot.describe()
    );
    zot.send(&hello_ack(&lab, &dir)).await;
    let frames = zot.recv_through("event_intercept_response").await;
    assert_eq!(
        frames[frames.len() - 3..],
        [
            json!({"type": "subscribe", "events": ["session_start"], "intercept": ["tool_call"]}),
            json!({"type": "ready"}),
            blocked("early", WIPE_REFUSED),
        ]
    );
    // And later checks by the same rules.
    zot.send(&bash_check("later", "rm -rf ~")).await;
    assert_eq!(zot.recv().await, blocked("later", WIPE_REFUSED));
    zot.send(&json!({"type": "shutdown"})).await;
    assert_eq!(zot.recv().await, json!({"type": "shutdown_ack"}));
    assert_eq!(zot.end().await.status.code(), Some(0));
}

/// Attack on rule 7 through a policy file that does not load (a misspelt
/// key, the user's own or a team's botched rollout): serve subscribes to
/// zot's checks before it reads any file, and exiting then would leave zot
/// no one to ask, which zot takes as consent to every call. It stays up
/// instead, says why in zot's notes, blocks every check and answers every
/// request with the error, and exits with it once zot shuts it down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_that_cannot_load_the_policy_blocks_every_check_until_shut_down() {
    let lab = Lab::new();
    safety_plugin(&lab);
    let policy = lab.home.join("policy.json");
    std::fs::write(&policy, r#"{"Shell": false}"#).expect("policy");
    let dir = elsewhere(&lab);
    let mut zot = lab.spawn_zotbox(&["serve"], &dir);
    assert_eq!(zot.recv().await["type"], "hello");
    // Held for the host, then blocked when it cannot be built.
    zot.send(&bash_check("early", "ls")).await;
    zot.send(&hello_ack(&lab, &dir)).await;
    let why = format!(
        "zotbox could not start: `{}`: field `Shell`: unknown field `Shell`, expected one of",
        policy.display()
    );
    let note = |frame: &Value| {
        frame["type"] == "notify"
            && frame["level"] == "error"
            && frame["message"].as_str().is_some_and(|m| {
                m.starts_with(&why)
                    && m.ends_with(
                        ". Every tool call is blocked until it can: fix this, then run /reload-ext.",
                    )
            })
    };
    let blocked_by = |frame: &Value, id: &str| {
        frame["type"] == "event_intercept_response"
            && frame["id"] == id
            && frame["block"] == true
            && frame["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with(&why) && r.ends_with("; blocked to be safe"))
    };
    let frames = zot.recv_through("ready").await;
    let [subscribe, early, notified, ready] = &frames[frames.len() - 4..] else {
        panic!("{}", zot.describe());
    };
    assert_eq!(
        *subscribe,
        json!({"type": "subscribe", "events": ["session_start"], "intercept": ["tool_call"]})
    );
    assert!(blocked_by(early, "early"), "{early}");
    assert!(note(notified), "{notified}");
    assert_eq!(*ready, json!({"type": "ready"}));

    // Long after: a check the plugin would allow and one it would refuse
    // are both blocked; requests get the error; each session is told.
    zot.send(&bash_check("allowed", "ls")).await;
    zot.send(&bash_check("refused", "rm -rf /")).await;
    zot.send(&json!({"type": "tool_call", "id": "t", "name": "slow", "args": {}}))
        .await;
    zot.send(&json!({"type": "command_invoked", "id": "c", "name": "skill", "args": ""}))
        .await;
    zot.send(&json!({"type": "event", "event": "session_start"}))
        .await;
    let allowed = zot.recv().await;
    assert!(blocked_by(&allowed, "allowed"), "{allowed}");
    let refused = zot.recv().await;
    assert!(blocked_by(&refused, "refused"), "{refused}");
    let result = zot.recv().await;
    assert_eq!(
        (&result["type"], &result["id"], &result["is_error"]),
        (&json!("tool_result"), &json!("t"), &json!(true))
    );
    assert!(
        result["content"][0]["text"]
            .as_str()
            .is_some_and(|text| text.starts_with(&why)),
        "{result}"
    );
    let response = zot.recv().await;
    assert_eq!(
        (&response["type"], &response["id"]),
        (&json!("command_response"), &json!("c"))
    );
    assert!(
        response["error"]
            .as_str()
            .is_some_and(|error| error.starts_with(&why)),
        "{response}"
    );
    let again = zot.recv().await;
    assert!(note(&again), "{again}");

    zot.send(&json!({"type": "shutdown"})).await;
    assert_eq!(zot.recv().await, json!({"type": "shutdown_ack"}));
    let end = zot.end().await;
    assert_eq!(end.status.code(), Some(1), "{end:#?}");
    assert!(end.stderr.contains("unknown field `Shell`"), "{end:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_blocks_checks_past_what_it_holds_before_hello_ack() {
    let lab = Lab::new();
    safety_plugin(&lab);
    let dir = elsewhere(&lab);
    let mut zot = lab.spawn_zotbox(&["serve"], &dir);
    assert_eq!(zot.recv().await["type"], "hello");
    let held = zotbox::serve::MAX_HELD;
    let mut burst = Vec::new();
    for n in 0..=held {
        burst.extend(serde_json::to_vec(&bash_check(&format!("h{n}"), "ls")).expect("json"));
        burst.push(b'\n');
    }
    zot.send_bytes(&burst).await;
    // The one past the cap: blocked at once, even though `ls` is allowed.
    assert_eq!(
        zot.recv().await,
        blocked(
            &format!("h{held}"),
            &format!(
                "zotbox already holds {held} frames while it waits for `hello_ack`; blocked to be safe"
            )
        )
    );
    zot.send(&hello_ack(&lab, &dir)).await;
    zot.recv_through("ready").await;
    for n in 0..held {
        assert_eq!(
            zot.recv().await,
            json!({"type": "event_intercept_response", "id": format!("h{n}")})
        );
    }
    zot.send(&json!({"type": "shutdown"})).await;
    assert_eq!(zot.recv().await, json!({"type": "shutdown_ack"}));
    assert_eq!(zot.end().await.status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_tool_calls_past_its_cap_and_still_answers_checks_at_once() {
    let lab = Lab::new();
    safety_plugin(&lab);
    slow_tool(&lab);
    let mut zot = start_serve(&lab).await;
    let admitted = zotbox::serve::MAX_ADMITTED;
    let mut burst = Vec::new();
    for n in 0..=admitted {
        let call = json!({"type": "tool_call", "id": format!("t{n}"), "name": "slow", "args": {}});
        burst.extend(serde_json::to_vec(&call).expect("json"));
        burst.push(b'\n');
    }
    zot.send_bytes(&burst).await;
    let asked = Instant::now();
    zot.send(&bash_check("wipe", "rm -rf /")).await;
    assert_eq!(
        zot.recv().await,
        json!({"type": "tool_result", "id": format!("t{admitted}"), "is_error": true,
               "content": [{"type": "text", "text": format!(
                   "zotbox is running {admitted} tool calls already; try again once one has finished")}]})
    );
    let Ok(Some((at, answer))) = zot.recv_within(PATIENCE).await else {
        panic!("no answer: {}", zot.describe());
    };
    assert_eq!(answer, blocked("wipe", WIPE_REFUSED));
    assert!(
        at.duration_since(asked) < PROMPTLY,
        "{:?}",
        at.duration_since(asked)
    );
    // zot leaves: the calls still running are dropped with it.
    zot.send(&json!({"type": "shutdown"})).await;
    assert_eq!(zot.recv().await, json!({"type": "shutdown_ack"}));
    let end = bounded("serve's exit", zot.end()).await;
    assert_eq!(end.status.code(), Some(0), "{end:#?}");
}

// ---------------------------------------------------------------------------
// `zotbox run`

/// zot's tools read their arguments as Go's `encoding/json` does: a key in
/// any case, the last of several winning. A guard that read `command` as
/// written let `{"Command":"rm -rf /"}` through to bash. Both guards now
/// read what bash runs: a guard guest through `zotbox run`, and `serve`'s
/// refusal plugins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_read_the_arguments_as_zots_own_tools_do() {
    let lab = Lab::new();
    safety_plugin(&lab);
    let attacks = [
        json!({"Command": "rm -rf /"}),
        json!({"command": "ls -1", "COMMAND": "rm -rf /"}),
    ];
    let check = |id: usize, args: &Value| {
        json!({"type": "event_intercept", "id": id.to_string(), "event": "tool_call",
               "tool_name": "bash", "tool_args": args})
    };
    let dir = guests::folder(&lab.dev, "guard", Form::Wasm, None);
    let mut run = start_run(&lab, &dir).await;
    let mut serve = start_serve(&lab).await;
    for (id, args) in attacks.iter().enumerate() {
        run.send(&check(id, args)).await;
        assert_eq!(
            run.recv().await,
            blocked(
                &id.to_string(),
                "refused: `rm -rf /` deletes the whole filesystem"
            ),
            "{args}"
        );
        serve.send(&check(id, args)).await;
        assert_eq!(
            serve.recv().await,
            blocked(&id.to_string(), WIPE_REFUSED),
            "{args}"
        );
    }
    // Control: bash would run the last spelling, `ls -1`, which the guard
    // guest is shown and allows. The refusal plugins read every spelling,
    // and a match on any blocks (as every normal form of a command does).
    let harmless = json!({"COMMAND": "rm -rf /", "command": "ls -1"});
    run.send(&check(9, &harmless)).await;
    assert_eq!(
        run.recv().await,
        json!({"type": "event_intercept_response", "id": "9"})
    );
    serve.send(&check(9, &harmless)).await;
    assert_eq!(serve.recv().await, blocked("9", WIPE_REFUSED));
    // Attack: a key written again after another spelling. A parser that
    // keeps a repeated key where it first stood puts `COMMAND` last and
    // shows the guard `ls -1`, while bash runs the last key written.
    let raw_check = |id: &str, args: &str| {
        format!(
            r#"{{"type":"event_intercept","id":"{id}","event":"tool_call","tool_name":"bash","tool_args":{args}}}
"#
        )
    };
    run.send_bytes(
        raw_check(
            "10",
            r#"{"command":"ls -1","COMMAND":"ls -1","command":"rm -rf /"}"#,
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(
        run.recv().await,
        blocked("10", "refused: `rm -rf /` deletes the whole filesystem")
    );
    // Attack: a `null` after the value, which Go ignores for a string.
    for (id, args) in [
        ("12", r#"{"command":"rm -rf /","command":null}"#),
        ("13", r#"{"command":"rm -rf /","COMMAND":null}"#),
    ] {
        run.send_bytes(raw_check(id, args).as_bytes()).await;
        assert_eq!(
            run.recv().await,
            blocked(id, "refused: `rm -rf /` deletes the whole filesystem"),
            "{args}"
        );
    }
    // Control, the other way round: bash runs `ls -1`.
    run.send_bytes(
        raw_check(
            "11",
            r#"{"command":"rm -rf /","COMMAND":"rm -rf /","command":"ls -1"}"#,
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(
        run.recv().await,
        json!({"type": "event_intercept_response", "id": "11"})
    );
    // The library's host asks its guard guest the same way (with the
    // plugin gone, the guest is the one that decides).
    std::fs::remove_file(lab.workspace.join(".zot/plugins/safety.json")).expect("remove");
    let host = lab.builder().extension(&dir).build().await.expect("build");
    for args in &attacks {
        let decision = host.intercept_tool_call("bash", args.clone()).await;
        assert_eq!(
            (decision.verdict, decision.decided_by),
            (
                zotbox::Verdict::block("refused: `rm -rf /` deletes the whole filesystem"),
                vec!["guard".to_owned()]
            ),
            "{args}"
        );
    }
    host.shutdown().await;
}

/// Arguments nested past what a guest reads (the model writes them; Go
/// reads 10 000 levels, a Python guest ran out of wasm stack past 1 000 and
/// trapped, taking its guard with it) are answered by zotbox, and never
/// reach the guest: through `zotbox run` a call gets an error, through the
/// library it is not made, and a check is blocked whatever the fail mode
/// (a value that deep also overflowed the library's stack as it was copied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_nested_past_what_a_guest_reads_are_answered_by_zotbox() {
    let lab = Lab::new();
    let depth = 5000;
    let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let dir = guests::folder(&lab.dev, "hostile", Form::Wasm, None);
    let mut run = start_run(&lab, &dir).await;
    run.send_bytes(
        format!(r#"{{"type":"tool_call","id":"1","name":"echo","args":{{"text":{deep}}}}}"#)
            .as_bytes(),
    )
    .await;
    run.send_bytes(b"\n").await;
    // An event of such a call, which has no answer: dropped.
    run.send_bytes(
        format!(
            r#"{{"type":"event","event":"tool_call","tool_id":"9","tool_name":"echo","tool_args":{{"text":{deep}}}}}"#
        )
        .as_bytes(),
    )
    .await;
    run.send_bytes(b"\n").await;
    run.send(
        &json!({"type": "tool_call", "id": "2", "name": "echo", "args": {"text": "still here"}}),
    )
    .await;
    let cannot = "zotbox could not read this tool call (nested deeper than 127 levels)";
    assert_eq!(
        run.recv().await,
        json!({"type": "tool_result", "id": "1", "content": [{"type": "text", "text": cannot}],
               "is_error": true})
    );
    assert_eq!(
        run.recv().await,
        json!({"type": "tool_result", "id": "2", "content": [{"type": "text", "text": "still here"}]})
    );
    run.send(&json!({"type": "shutdown"})).await;
    assert_eq!(run.recv().await, json!({"type": "shutdown_ack"}));
    let end = run.end().await;
    assert!(
        end.stderr.contains(
            "dropped a line from zot: a frame nested deeper than 127 levels was not read"
        ),
        "{end:#?}"
    );
    // Arguments `{key: [[[…]]]}` built in place: `json!` and `clone` would
    // copy each level through a recursion of their own.
    let nested = |key: &str| {
        let mut value = Value::Array(Vec::new());
        for _ in 0..depth {
            value = Value::Array(vec![value]);
        }
        Value::Object(serde_json::Map::from_iter([(key.to_owned(), value)]))
    };
    // The library's host, with a guard that intercepts and fails open:
    // neither the call nor its check is sent, and the check is blocked.
    let guard = guests::folder(&lab.dev, "guard", Form::Wasm, None);
    let host = lab
        .builder()
        .extension(&dir)
        .extension(&guard)
        .build()
        .await
        .expect("build");
    let refused = host.call_tool("echo", nested("text")).await;
    assert_eq!(
        refused.map_err(|err| err.to_string()).err().as_deref(),
        Some("tool `echo`: its arguments are nested deeper than 126 levels; not called")
    );
    let mut check = nested("x");
    check["command"] = json!("ls");
    let decision = host.intercept_tool_call("bash", check).await;
    assert_eq!(
        (decision.verdict, decision.decided_by),
        (
            zotbox::Verdict::block(
                "the arguments are nested deeper than 126 levels, which no guard reads; \
                 blocked to be safe"
            ),
            Vec::<String>::new()
        )
    );
    // The guard is still there, and asked about the next call.
    let decision = host
        .intercept_tool_call("bash", json!({"command": "rm -rf /"}))
        .await;
    assert_eq!(decision.decided_by, ["guard"], "{decision:?}");
    // An event carrying such arguments reaches no one (the guard counts
    // the `tool_call` events it reads), and one that can be read does.
    host.emit_event(&zotbox::protocol::Event::tool_call(
        "8",
        "bash",
        nested("command"),
    ));
    host.emit_event(&zotbox::protocol::Event::tool_call(
        "9",
        "bash",
        json!({"command": "ls"}),
    ));
    let mut seen = String::new();
    for _ in 0..100 {
        let stats = host
            .invoke_command("guard-stats", "")
            .await
            .expect("the guard's stats");
        seen = stats.display.unwrap_or_default();
        if seen != "guard: 0 turns, 0 tool calls seen" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen, "guard: 0 turns, 1 tool calls seen");
    host.shutdown().await;
    // Audited without writing the value out (which recurses as deep).
    let audited: Vec<(String, String)> = crate::attack::audit_lines(&lab)
        .into_iter()
        .filter(|line| line["capability"] == "guard" && line["decision"] == "deny")
        .map(|line| {
            let field = |key: &str| line[key].as_str().unwrap_or_default().to_owned();
            (field("subject"), field("reason"))
        })
        .collect();
    assert_eq!(
        audited.first(),
        Some(&(
            "bash <arguments nested too deep>".to_owned(),
            "the arguments are nested deeper than 126 levels, which no guard reads; \
             blocked to be safe"
                .to_owned()
        )),
        "{audited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zotbox_run_blocks_every_check_its_guard_could_not_read() {
    let lab = Lab::new();
    let dir = guests::folder(&lab.dev, "guard", Form::Wasm, None);
    let mut zot = start_run(&lab, &dir).await;
    let checks = unreadable_checks();
    for (_, line, _) in &checks {
        zot.send_bytes(line).await;
    }
    // A tool call over the cap, which the guest could never see.
    zot.send_bytes(
        format!(
            "{{\"type\":\"tool_call\",\"id\":\"6\",\"name\":\"x\",\"args\":\"{}\"}}\n",
            "y".repeat(DEFAULT_MAX_LINE)
        )
        .as_bytes(),
    )
    .await;
    // A readable check after them: the guard itself refuses it.
    zot.send(&bash_check("5", "rm -rf /")).await;
    let mut answers = Vec::new();
    for _ in 0..checks.len() + 2 {
        answers.push(zot.recv().await);
    }
    answers.sort_by_key(|answer| answer["id"].as_str().unwrap_or_default().to_owned());
    let mut expected: Vec<Value> = checks
        .iter()
        .map(|(id, _, why)| unreadable_block(id, why))
        .collect();
    expected.push(blocked(
        "5",
        "refused: `rm -rf /` deletes the whole filesystem",
    ));
    expected.push(json!({"type": "tool_result", "id": "6", "is_error": true,
        "content": [{"type": "text",
            "text": "zotbox could not read this tool call (a line over the 4194304-byte frame cap)"}]}));
    assert_eq!(answers, expected);
    // The guard never saw the unreadable ones: nothing more comes before
    // its `shutdown_ack` (it answers in order, so it would have by now).
    zot.send(&json!({"type": "shutdown"})).await;
    assert_eq!(zot.recv().await, json!({"type": "shutdown_ack"}));
    let end = zot.end().await;
    assert_eq!(end.status.code(), Some(0), "{end:#?}");
    assert!(end.last_lines.is_empty(), "{end:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_writing_an_endless_line_ends_zotbox_run_at_once_naming_the_cap() {
    for form in [Form::Wasm, Form::Native] {
        let lab = Lab::new();
        let dir = guests::folder(&lab.dev, "hostile", form, None);
        let mut zot = start_run(&lab, &dir).await;
        zot.send(&json!({"type": "tool_call", "id": "doomed", "name": "flood", "args": {}}))
            .await;
        let started = Instant::now();
        let end = zot.end().await;
        // Long before the call's 60 s deadline; nothing of the line reached zot.
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{form:?}: {:?}",
            started.elapsed()
        );
        assert!(end.last_lines.is_empty(), "{form:?}: {end:#?}");
        assert_eq!(end.status.code(), Some(1), "{form:?}: {end:#?}");
        assert!(
            end.stderr.ends_with(
                "zotbox: the extension killed: wrote a line over the 4194304-byte frame cap\n"
            ),
            "{form:?}: {end:#?}"
        );
        assert!(
            end.stderr.contains(
                "the extension wrote a line over the 4194304-byte frame cap; stopping it"
            ),
            "{form:?}: {end:#?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Hosted sessions

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosted_guest_writing_an_endless_line_ends_at_once_naming_the_cap() {
    let lab = Lab::new();
    let dir = guests::folder(
        &lab.dev,
        "hostile",
        Form::Wasm,
        Some(json!({"tool_timeout_ms": 60_000})),
    );
    let host = bounded(
        "starting the host",
        lab.builder()
            .restart_policy(RestartPolicy::never())
            .extension(&dir)
            .build(),
    )
    .await
    .expect("build");
    let before = rss_kib();
    let started = Instant::now();
    let err = bounded("flood", host.call_tool("flood", json!({})))
        .await
        .expect_err("flood never answers");
    assert_eq!(
        err.to_string(),
        "extension `hostile` 0.1.0: killed: wrote a line over the 4194304-byte frame cap"
    );
    // At once, not at the call's 60 s deadline.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let grown_mib = rss_kib().saturating_sub(before) / 1024;
    assert!(grown_mib < 64, "the host grew by {grown_mib} MiB");
    let entry = eventually("`hostile` to fail", || {
        let entry = info(&host, "hostile");
        (entry.state == ExtensionState::Failed).then_some(entry)
    })
    .await
    .unwrap_or_else(|| panic!("{:#?}", host.list()));
    assert_eq!(
        entry.reason.as_deref(),
        Some("killed: wrote a line over the 4194304-byte frame cap")
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_flooding_its_registration_is_stopped_at_once_naming_the_cap() {
    let lab = Lab::new();
    let dir = lab.dev.join("gush");
    std::fs::create_dir_all(&dir).expect("extension folder");
    let pid_file = dir.join("pid");
    // One process: `hello`, then 5 MB without a newline, then a long wait.
    let program = format!(
        "import os, sys, time\n\
         open({pid:?}, 'w').write(str(os.getpid()))\n\
         sys.stdout.write('{{\"type\":\"hello\",\"name\":\"gush\"}}\\n')\n\
         sys.stdout.flush()\n\
         sys.stdout.write('x' * 5000000)\n\
         sys.stdout.flush()\n\
         time.sleep(60)\n",
        pid = pid_file.display().to_string(),
    );
    write_json(
        &dir.join("extension.json"),
        &json!({"name": "gush", "exec": "python3", "args": ["-c", program]}),
    );
    let host = bounded(
        "starting the host",
        lab.builder()
            .restart_policy(RestartPolicy::never())
            .extension(&dir)
            .build(),
    )
    .await
    .expect("build");
    let entry = eventually("`gush` to fail", || {
        let entry = info(&host, "gush");
        (entry.state == ExtensionState::Failed).then_some(entry)
    })
    .await
    .unwrap_or_else(|| panic!("{:#?}", host.list()));
    assert_eq!(
        entry.reason.as_deref(),
        Some(
            "extension `gush` ended before it was ready: killed: wrote a line over the \
             4194304-byte frame cap"
        )
    );
    // Stopped, not taken as registered once the line went quiet: the
    // process is gone.
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    assert!(
        eventually("the process to be gone", || (!process_alive(pid))
            .then_some(()))
        .await
        .is_some(),
        "pid {pid} still runs"
    );
    host.shutdown().await;
}
