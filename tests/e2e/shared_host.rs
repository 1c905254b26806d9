//! The shared host under zot: `zotbox run` is a relay to one per-user host,
//! started on demand, shared by every zot session, replaced when stale or of
//! another build, restarted under the relay when it dies, and gone when idle.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::guests::{self, Form};
use crate::support::{Lab, PATIENCE, Peer, alive, read_json, shared_hosts};

/// `<lab.dev>/<name>/`, the wasm guest `name` with its manifest.
fn guest(lab: &Lab, name: &str) -> PathBuf {
    let wasm = guests::guests().artifact(name, Form::Wasm);
    guests::wasm_folder(&lab.dev.join("src"), name, wasm, None)
}

/// The `prober` guest, its manifest declaring `capabilities`.
fn prober_with(lab: &Lab, capabilities: Value) -> PathBuf {
    let dir = guest(lab, "prober");
    let path = dir.join("extension.json");
    let mut manifest = read_json(&path);
    manifest["capabilities"] = capabilities;
    crate::support::write_json(&path, &manifest);
    dir
}

/// Starts `zotbox run DIR` as zot does, with `env` added, and completes the
/// handshake naming `workspace`.
async fn relay_env(lab: &Lab, dir: &Path, workspace: &Path, env: &[(&str, &str)]) -> Peer {
    let mut zot = spawn_relay(lab, dir, env);
    handshake(&mut zot, workspace).await;
    zot
}

/// The user's home folder of `lab`'s processes: part of what names the
/// host, so every command here runs with the same one.
fn user_home(lab: &Lab) -> PathBuf {
    let home = lab.dev.join("user-home");
    std::fs::create_dir_all(&home).expect("user home");
    home
}

/// Starts `zotbox run DIR` as zot does, with `env` added.
fn spawn_relay(lab: &Lab, dir: &Path, env: &[(&str, &str)]) -> Peer {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_zotbox"));
    command
        .args(["run", &dir.display().to_string()])
        .current_dir(dir)
        .env("ZOT_HOME", &lab.home)
        .env("HOME", user_home(lab))
        .env_remove("ZOTBOX_LOG")
        .env_remove("ZOTBOX_STANDALONE")
        .env_remove("XDG_STATE_HOME");
    for (name, value) in env {
        command.env(name, value);
    }
    Peer::spawn(command)
}

/// `zotbox ARGS` with `lab`'s homes.
fn zotbox(lab: &Lab, args: &[&str]) -> std::process::Command {
    let mut command = with_homes(lab, env!("CARGO_BIN_EXE_zotbox"));
    command.args(args);
    command
}

/// `program` with `lab`'s homes and no log or standalone switch of ours.
fn with_homes(lab: &Lab, program: &str) -> std::process::Command {
    let mut command = std::process::Command::new(program);
    command
        .env("ZOT_HOME", &lab.home)
        .env("HOME", user_home(lab))
        .env_remove("ZOTBOX_LOG")
        .env_remove("ZOTBOX_STANDALONE")
        .env_remove("XDG_STATE_HOME");
    command
}

/// zot's side of the handshake, naming `workspace`.
async fn handshake(zot: &mut Peer, workspace: &Path) {
    let hello = zot.recv().await;
    assert_eq!(hello["type"], "hello", "{}", zot.describe());
    zot.send(&json!({
        "type": "hello_ack", "protocol_version": 1, "zot_version": "test",
        "provider": "p", "model": "m", "cwd": workspace.display().to_string(),
    }))
    .await;
    zot.recv_through("ready").await;
}

async fn relay(lab: &Lab, dir: &Path) -> Peer {
    relay_env(lab, dir, &lab.workspace, &[]).await
}

/// Calls tool `name` and returns `(is_error, text)`, skipping other frames.
async fn call(zot: &mut Peer, id: &str, name: &str, args: Value) -> (bool, String) {
    zot.send(&json!({"type": "tool_call", "id": id, "name": name, "args": args}))
        .await;
    loop {
        let frame = zot.recv().await;
        if frame["type"] == "tool_result" && frame["id"] == id {
            return (
                frame["is_error"].as_bool().unwrap_or(false),
                frame["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
    }
}

/// Ends the session as zot does: `shutdown`, then stdin closed.
async fn finish(mut zot: Peer) -> crate::support::PeerEnd {
    zot.send(&json!({"type": "shutdown"})).await;
    zot.end().await
}

/// `zotbox host status --json` of `lab`: the host, or `Value::Null`.
fn status(lab: &Lab) -> Value {
    let out = zotbox(lab, &["host", "status", "--json"])
        .output()
        .expect("host status");
    assert!(out.status.success(), "{out:?}");
    let line: Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    line["host"].clone()
}

fn host_pid(lab: &Lab) -> i32 {
    let host = status(lab);
    i32::try_from(
        host["pid"]
            .as_u64()
            .unwrap_or_else(|| panic!("no host: {host}")),
    )
    .expect("a pid")
}

/// `kill -9` of the host `pid`.
fn kill_host(pid: i32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill -9 the host");
}

/// `kill -9` of the host `pid`, then what zot must see from the relay: the
/// request `id` failed, then the `notify` that the extension restarted
/// (both returned for a closer look).
async fn kill_host_expecting_failed(zot: &mut Peer, pid: i32, id: &str) -> (Value, Value) {
    kill_host(pid);
    let failed = zot.recv().await;
    assert_eq!(
        (&failed["type"], &failed["id"], &failed["is_error"]),
        (&json!("tool_result"), &json!(id), &json!(true)),
        "{}",
        zot.describe()
    );
    let note = zot.recv().await;
    assert_eq!(note["type"], "notify", "{note}");
    (failed, note)
}

/// zot's end of a relay of the `hostile` guest that has answered one call,
/// and the pid of the host running it.
async fn answering_hostile(lab: &Lab) -> (Peer, i32) {
    let dir = guest(lab, "hostile");
    let mut zot = relay(lab, &dir).await;
    assert_eq!(
        call(&mut zot, "e1", "echo", json!({"text": "before"})).await,
        (false, "before".to_owned())
    );
    (zot, host_pid(lab))
}

/// Waits (within [`PATIENCE`]) until `check` holds.
async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The socket files of `lab`'s home.
fn sockets(lab: &Lab) -> Vec<PathBuf> {
    std::fs::read_dir(lab.home.join("run"))
        .map(|dir| {
            dir.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "sock"))
                .collect()
        })
        .unwrap_or_default()
}

/// Attack: in the shared host, which keeps one audit log for every
/// instance, one guest floods it with refusals (3 000 stats of a 4 KiB
/// path of control characters, each line 6 KiB as written) to push its
/// neighbour's records out. Its share of the log (2 MiB in 30 s) holds: the
/// neighbour's records are all there, the file never rotates, and when the
/// host is stopped by `SIGTERM` (a logout) the count of what was suppressed
/// is written before it exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_flooding_the_audit_log_leaves_its_neighbours_records_and_is_counted() {
    let lab = Lab::new();
    let hostile = guest(&lab, "hostile");
    let prober = guest(&lab, "prober");
    let mut flood = relay(&lab, &hostile).await;
    let mut quiet = relay(&lab, &prober).await;
    let probe = |n: usize| json!({"path": format!("../quiet-{n}")});
    assert!(call(&mut quiet, "q0", "fs_read", probe(0)).await.0);
    let answer = call(
        &mut flood,
        "f",
        "stat_flood",
        json!({"count": 3000, "len": 4096, "control": true}),
    )
    .await;
    assert_eq!(answer, (false, "3000 refused".to_owned()));
    assert!(call(&mut quiet, "q1", "fs_read", probe(1)).await.0);
    let pid = host_pid(&lab);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM to the host");
    eventually("the host to exit", || !alive(pid)).await;
    let log = lab.home.join("logs/audit.jsonl");
    assert!(
        !lab.home.join("logs/audit.jsonl.1").exists(),
        "the flood rotated the log"
    );
    let text = std::fs::read_to_string(&log).expect("the audit log");
    let lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    let subjects = |extension: &str, capability: &str| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l["extension"] == extension && l["capability"] == capability)
            .map(|l| l["subject"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(subjects("prober", "fs-read"), ["../quiet-0", "../quiet-1"]);
    let written = subjects("hostile", "fs-read").len();
    let counted: usize = subjects("hostile", "audit")
        .iter()
        .map(|subject| {
            subject
                .strip_suffix(" records suppressed")
                .or_else(|| subject.strip_suffix(" records dropped"))
                .unwrap_or_else(|| panic!("{subject}"))
                .parse::<usize>()
                .expect("a count")
        })
        .sum();
    assert!(written < 400, "{written} lines of the flood written");
    assert_eq!(
        written + counted,
        3000,
        "{written} written, {counted} counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_relays_started_at_once_share_one_host() {
    let lab = Lab::new();
    let dir = guest(&lab, "prober");
    // All ten start (and look for a host) before any is answered.
    let mut zots: Vec<Peer> = (0..10).map(|_| spawn_relay(&lab, &dir, &[])).collect();
    for zot in &mut zots {
        handshake(zot, &lab.workspace).await;
    }
    for (n, zot) in zots.iter_mut().enumerate() {
        let answer = call(zot, &format!("p{n}"), "ping", json!({})).await;
        assert_eq!(answer, (false, "pong".to_owned()));
    }
    assert_eq!(shared_hosts(&lab.home).len(), 1, "exactly one host");
    let host = status(&lab);
    assert_eq!(
        host["instances"].as_array().map(Vec::len),
        Some(10),
        "{host}"
    );
    // Every relay is its own instance, named by its own pid.
    let mut relays: Vec<i64> = host["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["relay_pid"].as_i64())
        .collect();
    relays.sort_unstable();
    relays.dedup();
    assert_eq!(relays.len(), 10, "{host}");
    // Each `zotbox run` handed its extension over, then replaced itself
    // with the small relay program, waiting on the socket it left open.
    for pid in &relays {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("the relay's executable");
        assert_eq!(
            exe.file_name().and_then(|n| n.to_str()),
            Some("zotbox-relay"),
            "{exe:?}"
        );
        let argv = std::fs::read(format!("/proc/{pid}/cmdline")).expect("the relay's arguments");
        let argv: Vec<&[u8]> = argv.split(|&b| b == 0).collect();
        assert_eq!(argv.get(1), Some(&&b"--attached"[..]), "{argv:?}");
    }
    for zot in zots {
        let end = finish(zot).await;
        assert_eq!(end.status.code(), Some(0), "{end:#?}");
    }
    // The host lives on, with no instance left.
    eventually("the instances end", || {
        status(&lab)["instances"]
            .as_array()
            .is_some_and(Vec::is_empty)
    })
    .await;
}

/// A host killed while the relay cannot start another (here its folder
/// is gone, a file in its place): the relay hosts the extension itself,
/// resumed with zot's `hello_ack`, which zot does not send twice, so its
/// workspace is still the one zot named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_cannot_be_restarted_leaves_the_extension_in_its_relay_with_its_workspace() {
    let lab = Lab::new();
    let dir = prober_with(&lab, json!({"read": ["**"]}));
    std::fs::write(lab.workspace.join("who.txt"), "the workspace").expect("who.txt");
    let no_runtime_dir = [("XDG_RUNTIME_DIR", "")];
    let mut zot = relay_env(&lab, &dir, &lab.workspace, &no_runtime_dir).await;
    let read = json!({"path": "who.txt"});
    assert_eq!(
        call(&mut zot, "r0", "fs_read", read.clone()).await,
        (false, "the workspace".to_owned())
    );
    let out = zotbox(&lab, &["host", "status", "--json"])
        .env("XDG_RUNTIME_DIR", "")
        .output()
        .expect("host status");
    let line: Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    let pid = i32::try_from(line["host"]["pid"].as_u64().unwrap_or_default()).unwrap_or(0);
    assert!(pid > 0, "{line}");
    let run = lab.home.join("run");
    std::fs::rename(&run, lab.home.join("run.old")).expect("move the host's folder");
    std::fs::write(&run, b"").expect("a file in its place");
    // Past the 5 ms in which the host tells its relay of the calls in
    // flight (see the test below).
    tokio::time::sleep(Duration::from_millis(50)).await;
    kill_host(pid);
    assert_eq!(zot.recv().await["type"], "notify", "{}", zot.describe());
    assert_eq!(
        call(&mut zot, "r1", "fs_read", read).await,
        (false, "the workspace".to_owned()),
        "{}",
        zot.describe()
    );
    finish(zot).await;
}

/// A host killed five times within a minute: the relay hosts the extension
/// itself from then on, resumed with zot's `hello_ack` (which zot does not
/// send twice), so its workspace is still the one zot named. (Before, the
/// fallback started a fresh handshake: the guest waited for a `hello_ack`
/// that never came, and every capability was refused.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_keeps_dying_leaves_the_extension_in_its_relay_with_its_workspace() {
    let lab = Lab::new();
    let dir = prober_with(&lab, json!({"read": ["**"]}));
    std::fs::write(lab.workspace.join("who.txt"), "the workspace").expect("who.txt");
    let mut zot = relay(&lab, &dir).await;
    let read = |id: &str| (id.to_owned(), json!({"path": "who.txt"}));
    let (id, args) = read("r0");
    assert_eq!(
        call(&mut zot, &id, "fs_read", args).await,
        (false, "the workspace".to_owned())
    );
    for death in 1..=5 {
        // The host tells its relay of the calls in flight at most every
        // 5 ms: a host killed sooner after an answer has the relay answer
        // that call again (see README, "Not covered").
        tokio::time::sleep(Duration::from_millis(50)).await;
        let pid = host_pid(&lab);
        kill_host(pid);
        let note = zot.recv().await;
        assert_eq!(note["type"], "notify", "death {death}: {}", zot.describe());
        if death < 5 {
            // Back in a new host before the next death.
            let (id, args) = read(&format!("r{death}"));
            assert_eq!(
                call(&mut zot, &id, "fs_read", args).await,
                (false, "the workspace".to_owned()),
                "death {death}"
            );
        }
    }
    // Hosted in the relay's process now, its workspace zot's.
    let (id, args) = read("after");
    assert_eq!(
        call(&mut zot, &id, "fs_read", args).await,
        (false, "the workspace".to_owned()),
        "{}",
        zot.describe()
    );
    let hellos = zot
        .transcript
        .iter()
        .filter(|l| l.contains("\"type\":\"hello\""))
        .count();
    assert_eq!(hellos, 1, "a second hello reached zot: {}", zot.describe());
    let end = finish(zot).await;
    assert_eq!(end.status.code(), Some(0), "{end:#?}");
}

/// What a shell command run for an extension tries on the shared host:
/// read its token, then ask it something over its socket without it.
const SOCKET_PROBE: &str = r#"import json, socket, sys
sock, token = sys.argv[1], sys.argv[2]
try:
    open(token).read()
    print("token: read")
except OSError as e:
    print("token:", type(e).__name__)
try:
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    s.sendall(json.dumps({"op": "status", "token": "0" * 64}).encode() + b"\n")
    print("reply:", s.recv(4096).decode().strip())
except OSError as e:
    print("connect:", type(e).__name__)
"#;

/// The socket and token of `lab`'s shared host, in `$ZOT_HOME/run` (the
/// runtime folder left unset for it).
fn socket_and_token(lab: &Lab) -> (PathBuf, PathBuf) {
    let run = lab.home.join("run");
    let find = |suffix: &str| {
        std::fs::read_dir(&run)
            .expect("the host's folder")
            .flatten()
            .map(|entry| entry.path())
            .find(|path| path.to_string_lossy().ends_with(suffix))
            .unwrap_or_else(|| panic!("no `*{suffix}` in `{}`", run.display()))
    };
    (find(".sock"), find(".token"))
}

/// Attack: a shell command the kernel sandbox confines still runs as the
/// user, and Landlock checks no file access on connecting to a socket by
/// its path. Had it reached the shared host's socket, it would have been
/// taken for a relay, and could have asked for any extension with a
/// workspace (so a jail) of its choosing, the user's home say. The folder
/// of the socket is covered for it, and the token beside it unreadable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confined_command_cannot_reach_the_shared_host() {
    let lab = Lab::new();
    let dir = prober_with(&lab, json!({"shell": ["**"]}));
    let no_runtime_dir = [("XDG_RUNTIME_DIR", "")];
    let mut zot = relay_env(&lab, &dir, &lab.workspace, &no_runtime_dir).await;
    let (socket, token) = socket_and_token(&lab);
    std::fs::write(lab.workspace.join("probe.py"), SOCKET_PROBE).expect("the probe");
    let command = format!("python3 probe.py {} {}", socket.display(), token.display());
    let (failed, text) = call(&mut zot, "p", "shell", json!({"command": command})).await;
    assert!(!failed, "{text}");
    assert!(text.contains("token: FileNotFoundError"), "{text}");
    assert!(text.contains("connect: FileNotFoundError"), "{text}");
    finish(zot).await;
}

/// Where a process of the user's reaches the socket but cannot read the
/// token (a confined command on a kernel without user namespaces, where
/// nothing can cover the folder), its request is refused and audited; the
/// user's own `zotbox host status`, which reads the token, is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_the_hosts_token_is_refused() {
    use std::io::{BufRead as _, Write as _};
    let lab = Lab::new();
    let dir = prober_with(&lab, json!({}));
    let no_runtime_dir = [("XDG_RUNTIME_DIR", "")];
    let zot = relay_env(&lab, &dir, &lab.workspace, &no_runtime_dir).await;
    let (socket, _) = socket_and_token(&lab);
    for token in ["0".repeat(64), String::new()] {
        let mut stream = std::os::unix::net::UnixStream::connect(&socket).expect("connect");
        let request = json!({"op": "status", "token": token});
        stream
            .write_all(format!("{request}\n").as_bytes())
            .expect("send");
        let mut reply = String::new();
        std::io::BufReader::new(&stream)
            .read_line(&mut reply)
            .expect("reply");
        assert_eq!(
            serde_json::from_str::<Value>(&reply).ok(),
            Some(json!({"op": "failed",
                        "error": "zotbox host: refused: the request does not carry this host's token"})),
            "{reply}"
        );
    }
    // Refused, so audited as refused.
    let audit = lab.home.join("logs/audit.jsonl");
    let refused = crate::support::eventually("the refusals' audit lines", || {
        let text = std::fs::read_to_string(&audit).ok()?;
        let found: Vec<Value> = text
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|record| record["capability"] == "host")
            .collect();
        (found.len() == 2).then_some(found)
    })
    .await
    .unwrap_or_default();
    assert_eq!(refused.len(), 2, "{refused:?}");
    for record in &refused {
        assert_eq!(
            (&record["decision"], &record["reason"]),
            (&json!("deny"), &json!("it does not carry the host's token")),
            "{record}"
        );
    }
    let out = zotbox(&lab, &["host", "status", "--json"])
        .env("XDG_RUNTIME_DIR", "")
        .output()
        .expect("host status");
    let line: Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!(line["host"]["instances"][0]["name"], "prober", "{line}");
    finish(zot).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workspaces_served_by_one_host_never_cross() {
    let lab = Lab::new();
    let dir = prober_with(&lab, json!({"read": ["**"], "write": ["**"]}));
    let other = lab.dev.join("other-workspace");
    std::fs::create_dir_all(&other).expect("second workspace");
    let other = other.canonicalize().expect("canonical");
    let mut first = relay(&lab, &dir).await;
    let mut second = relay_env(&lab, &dir, &other, &[]).await;
    for (zot, who) in [(&mut first, "first"), (&mut second, "second")] {
        let wrote = call(
            zot,
            who,
            "fs_write",
            json!({"path": "who.txt", "text": who}),
        )
        .await;
        assert!(!wrote.0, "{wrote:?}");
    }
    assert_eq!(
        std::fs::read_to_string(lab.workspace.join("who.txt"))
            .ok()
            .as_deref(),
        Some("first")
    );
    assert_eq!(
        std::fs::read_to_string(other.join("who.txt"))
            .ok()
            .as_deref(),
        Some("second")
    );
    // Neither reaches the other's workspace, by path or by `..`.
    let escape = format!(
        "../{}/who.txt",
        lab.dev
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("dev")
    );
    let (refused, text) = call(
        &mut first,
        "x1",
        "fs_read",
        json!({"path": other.join("who.txt")}),
    )
    .await;
    assert!(refused, "{text}");
    let (refused, text) = call(&mut second, "x2", "fs_read", json!({"path": escape})).await;
    assert!(refused, "{text}");
    let host = status(&lab);
    let workspaces: Vec<&str> = host["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["workspace"].as_str())
        .collect();
    assert_eq!(workspaces.len(), 2, "{host}");
    assert!(
        workspaces.contains(&lab.workspace.to_str().unwrap_or_default()),
        "{host}"
    );
    assert!(
        workspaces.contains(&other.to_str().unwrap_or_default()),
        "{host}"
    );
    assert_eq!(shared_hosts(&lab.home).len(), 1);
    finish(first).await;
    finish(second).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relays_environment_not_the_hosts_feeds_the_env_grant() {
    let lab = Lab::new();
    let dir = prober_with(&lab, json!({"env": ["ZOTBOX_TEST_COLOUR"]}));
    let mut blue = relay_env(
        &lab,
        &dir,
        &lab.workspace,
        &[("ZOTBOX_TEST_COLOUR", "blue")],
    )
    .await;
    let mut green = relay_env(
        &lab,
        &dir,
        &lab.workspace,
        &[("ZOTBOX_TEST_COLOUR", "green")],
    )
    .await;
    assert_eq!(shared_hosts(&lab.home).len(), 1);
    let got = call(&mut blue, "b", "env", json!({"name": "ZOTBOX_TEST_COLOUR"})).await;
    assert_eq!(got, (false, "blue".to_owned()));
    let got = call(
        &mut green,
        "g",
        "env",
        json!({"name": "ZOTBOX_TEST_COLOUR"}),
    )
    .await;
    assert_eq!(got, (false, "green".to_owned()));
    finish(blue).await;
    finish(green).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_mid_call_fails_the_call_and_the_extension_comes_back() {
    let lab = Lab::new();
    let (mut zot, old) = answering_hostile(&lab).await;
    let seen = zot.transcript.len();
    zot.send(&json!({"type": "tool_call", "id": "doomed", "name": "spin", "args": {}}))
        .await;
    // The host reads the call (and, a lone call, tells the relay of it
    // before its guest has it); the guest spins.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (failed, note) = kill_host_expecting_failed(&mut zot, old, "doomed").await;
    assert_eq!(
        failed["content"][0]["text"],
        "the zotbox host running extension `hostile` ended before it answered; \
         the extension was restarted: try again"
    );
    assert_eq!(
        note,
        json!({"type": "notify", "level": "warn",
               "message": "zotbox: extension `hostile` restarted (its host ended)"})
    );
    // Back, in a new host, without a second `hello` or registrations.
    let back = tokio::time::Instant::now();
    assert_eq!(
        call(&mut zot, "e2", "echo", json!({"text": "after"})).await,
        (false, "after".to_owned())
    );
    assert!(back.elapsed() < PATIENCE);
    assert!(
        !zot.transcript[seen..]
            .iter()
            .any(|l| l.contains("\"hello\"") || l.contains("register_tool")),
        "{}",
        zot.describe()
    );
    let new = host_pid(&lab);
    assert_ne!(new, old);
    // `host status` names its workspace, which zot named before the restart.
    let instances = status(&lab)["instances"].clone();
    assert_eq!(
        instances[0]["workspace"].as_str(),
        lab.workspace.to_str(),
        "{instances}"
    );
    let end = finish(zot).await;
    assert_eq!(end.status.code(), Some(0), "{end:#?}");
}

/// The host dies the moment a lone call reaches its guest (here: as soon as
/// the guest says it has it): the relay knew of the call before the guest
/// did, so it answers it, instead of zot waiting on a call no one holds.
/// (Reports of the requests in flight were coalesced over 5 ms, and a host
/// killed within them lost the call: this test failed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_as_a_lone_call_reaches_its_guest_fails_that_call() {
    let lab = Lab::new();
    let (mut zot, old) = answering_hostile(&lab).await;
    // Quiet first: no report of the earlier call is still due.
    tokio::time::sleep(Duration::from_millis(50)).await;
    zot.send(&json!({"type": "tool_call", "id": "lone", "name": "hold", "args": {}}))
        .await;
    let holding = zot.recv().await;
    assert_eq!(
        (&holding["type"], &holding["message"]),
        (&json!("notify"), &json!("holding")),
        "{}",
        zot.describe()
    );
    kill_host_expecting_failed(&mut zot, old, "lone").await;
    assert_eq!(
        call(&mut zot, "e2", "echo", json!({"text": "after"})).await,
        (false, "after".to_owned())
    );
    let end = finish(zot).await;
    assert_eq!(end.status.code(), Some(0), "{end:#?}");
}

/// The host dies having read only the first part of a request's line: the
/// relay answers that request too, and the rest of the line, which the next
/// host reads first, reaches no guest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_inside_a_line_of_zots_fails_that_request_and_drops_its_rest() {
    let lab = Lab::new();
    let (mut zot, old) = answering_hostile(&lab).await;
    let line = json!({"type": "tool_call", "id": "cut", "name": "echo",
                      "args": {"text": "x".repeat(1000)}})
    .to_string()
        + "\n";
    let (head, rest) = line.split_at(200);
    zot.send_bytes(head.as_bytes()).await;
    // The host reads the head and tells the relay of the request in it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    kill_host_expecting_failed(&mut zot, old, "cut").await;
    let seen = zot.transcript.len();
    zot.send_bytes(rest.as_bytes()).await;
    assert_eq!(
        call(&mut zot, "e2", "echo", json!({"text": "after"})).await,
        (false, "after".to_owned())
    );
    assert!(
        !zot.transcript[seen..].iter().any(|l| l.contains("\"cut\"")),
        "answered twice: {}",
        zot.describe()
    );
    assert_ne!(host_pid(&lab), old);
    let end = finish(zot).await;
    assert_eq!(end.status.code(), Some(0), "{end:#?}");
    assert!(
        end.stderr
            .contains("dropped the rest of a line from zot that the host before this one"),
        "{end:#?}"
    );
}

/// The host dies while it writes one of the guest's lines to zot, zot's
/// pipe full: zot's stream ends inside that line, and the relay's own
/// lines (the `notify` that the extension restarted) begin on a line of
/// their own instead of being glued to it and lost with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_inside_one_of_its_lines_to_zot_leaves_the_relays_lines_whole() {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let lab = Lab::new();
    let dir = guest(&lab, "hostile");
    // zot's end, read only when the test says so (a `Peer` reads at once).
    let mut command = zotbox(&lab, &["run", &dir.display().to_string()]);
    command.current_dir(&dir);
    let mut relay = crate::support::spawn_piped(command.into());
    let mut input = relay.stdin.take().expect("stdin");
    let mut output = tokio::io::BufReader::new(relay.stdout.take().expect("stdout"));
    let read_line = async |output: &mut tokio::io::BufReader<_>| {
        let mut line = Vec::new();
        let read = tokio::time::timeout(PATIENCE, output.read_until(b'\n', &mut line)).await;
        assert!(matches!(read, Ok(Ok(n)) if n > 0), "{read:?}");
        line
    };
    let write = async |input: &mut tokio::process::ChildStdin, frame: Value| {
        let line = frame.to_string() + "\n";
        input
            .write_all(line.as_bytes())
            .await
            .expect("write to the relay");
    };
    loop {
        let frame: Value = serde_json::from_slice(&read_line(&mut output).await).expect("a frame");
        match frame["type"].as_str() {
            Some("hello") => {
                let ack = json!({"type": "hello_ack", "protocol_version": 1,
                                 "cwd": lab.workspace.display().to_string()});
                write(&mut input, ack).await;
            }
            Some("ready") => break,
            _ => {}
        }
    }
    // An answer of a megabyte: far more than zot's pipe holds, so the host
    // writes part of it and waits for zot, which does not read.
    let text = "x".repeat(1 << 20);
    write(
        &mut input,
        json!({"type": "tool_call", "id": "big", "name": "echo", "args": {"text": text}}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    kill_host(host_pid(&lab));
    let cut = read_line(&mut output).await;
    assert!(
        cut.starts_with(br#"{"type":"tool_result","id":"big""#) && cut.len() < text.len(),
        "{}",
        String::from_utf8_lossy(&cut[..cut.len().min(200)])
    );
    assert!(serde_json::from_slice::<Value>(&cut).is_err());
    assert!(
        !String::from_utf8_lossy(&cut).contains("\"notify\""),
        "the relay's notify was glued to the cut line"
    );
    let note: Value = serde_json::from_slice(&read_line(&mut output).await)
        .expect("the relay's notify, whole, on its own line");
    assert_eq!(note["type"], "notify", "{note}");
    // And the extension is back.
    write(
        &mut input,
        json!({"type": "tool_call", "id": "after", "name": "echo", "args": {"text": "after"}}),
    )
    .await;
    let answer: Value = loop {
        let frame: Value = serde_json::from_slice(&read_line(&mut output).await).expect("a frame");
        if frame["id"] == "after" {
            break frame;
        }
    };
    assert_eq!(answer["content"][0]["text"], "after", "{answer}");
    write(&mut input, json!({"type": "shutdown"})).await;
    drop(input);
    let status = tokio::time::timeout(PATIENCE, relay.wait()).await;
    assert!(
        matches!(status, Ok(Ok(status)) if status.success()),
        "{status:?}"
    );
}

/// The host lives long and compiles under the policy each extension
/// starts under: a compile cap written while it runs holds for its next
/// first compile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compile_cap_written_while_the_host_runs_holds_for_its_next_compile() {
    let lab = Lab::new();
    let (zot, host) = answering_hostile(&lab).await;
    crate::support::write_json(
        &lab.home.join("policy.json"),
        &json!({"max_compile_memory_mb": 512}),
    );
    let squares = guests::squares_folder(&lab.dev);
    let end = spawn_relay(&lab, &squares, &[]).end().await;
    assert_eq!(end.status.code(), Some(1), "{end:#?}");
    assert!(
        end.stderr.contains(
            "without a verdict; it may use at most 512 MiB (policy `max_compile_memory_mb`)"
        ),
        "{end:#?}"
    );
    // The compiler's own last words are in the host's log, not the relay's:
    // the host compiled it.
    let log = std::fs::read_to_string(lab.home.join("logs/zotbox-host.log")).unwrap_or_default();
    assert!(log.contains("memory allocation of"), "{log}");
    assert!(!end.stderr.contains("memory allocation of"), "{end:#?}");
    assert_eq!(host_pid(&lab), host, "the same host refused it");
    let end = finish(zot).await;
    assert_eq!(end.status.code(), Some(0), "{end:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_socket_is_replaced() {
    let lab = Lab::new();
    let dir = guest(&lab, "prober");
    // A host that died left its socket: bound once, nobody listening.
    let first = relay(&lab, &dir).await;
    let socket = sockets(&lab).pop().expect("a socket");
    finish(first).await;
    let old = host_pid(&lab);
    kill_host(old);
    // Its last thread gone, nobody listens; the socket file stays behind.
    eventually("the host dies", || {
        std::os::unix::net::UnixStream::connect(&socket).is_err()
    })
    .await;
    assert!(socket.exists(), "the dead host's socket stays behind");
    let mut zot = relay(&lab, &dir).await;
    assert_eq!(
        call(&mut zot, "p", "ping", json!({})).await,
        (false, "pong".to_owned())
    );
    assert_ne!(host_pid(&lab), old);
    finish(zot).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_of_another_build_retires_and_is_replaced() {
    let lab = Lab::new();
    let dir = guest(&lab, "prober");
    let mut old = zotbox(&lab, &["host", "serve", "--build", "0.0.1-old"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start an old host");
    eventually("the old host listens", || {
        status(&lab)["build"] == "0.0.1-old"
    })
    .await;
    let mut zot = relay(&lab, &dir).await;
    assert_eq!(
        call(&mut zot, "p", "ping", json!({})).await,
        (false, "pong".to_owned())
    );
    // The old host retired (it had no instance, so it is gone); the new one
    // is of this build.
    let exited = tokio::task::spawn_blocking(move || old.wait()).await;
    assert!(
        matches!(exited, Ok(Ok(status)) if status.success()),
        "{exited:?}"
    );
    let host = status(&lab);
    assert_ne!(host["build"], "0.0.1-old", "{host}");
    assert!(
        host["build"]
            .as_str()
            .is_some_and(|b| b.starts_with(env!("CARGO_PKG_VERSION")))
    );
    finish(zot).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_host_exits_and_removes_its_socket() {
    let lab = Lab::new();
    let dir = guest(&lab, "prober");
    let zot = relay_env(&lab, &dir, &lab.workspace, &[("ZOTBOX_HOST_IDLE", "0.5")]).await;
    let pid = host_pid(&lab);
    assert_eq!(sockets(&lab).len(), 1);
    // The folder and the socket are the user's alone.
    let mode = |path: &Path| {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o777)
            .ok()
    };
    assert_eq!(mode(&lab.home.join("run")), Some(0o700));
    assert_eq!(mode(&sockets(&lab)[0]), Some(0o600));
    // Busy: it stays while the instance runs, however long.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(alive(pid));
    finish(zot).await;
    eventually("the idle host exits", || !alive(pid)).await;
    assert_eq!(sockets(&lab), Vec::<PathBuf>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_whose_zot_goes_away_ends_its_instance() {
    let lab = Lab::new();
    let dir = guest(&lab, "hostile");
    let mut zot = relay(&lab, &dir).await;
    zot.send(&json!({"type": "tool_call", "id": "busy", "name": "spin", "args": {}}))
        .await;
    assert_eq!(status(&lab)["instances"].as_array().map(Vec::len), Some(1));
    // zot kills the extension's process (the relay): the guest goes too.
    drop(zot);
    eventually("the instance ends", || {
        status(&lab)["instances"]
            .as_array()
            .is_some_and(Vec::is_empty)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_hosts_in_the_relays_own_process() {
    let lab = Lab::new();
    let dir = guest(&lab, "prober");
    for env in [&[("ZOTBOX_STANDALONE", "1")][..]] {
        let mut zot = relay_env(&lab, &dir, &lab.workspace, env).await;
        assert_eq!(
            call(&mut zot, "p", "ping", json!({})).await,
            (false, "pong".to_owned())
        );
        assert_eq!(status(&lab), Value::Null);
        finish(zot).await;
    }
    assert!(shared_hosts(&lab.home).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_shows_the_host_and_its_instances() {
    let lab = Lab::new();
    let dir = guest(&lab, "prober");
    let zot = relay(&lab, &dir).await;
    let pid = host_pid(&lab);
    let out = zotbox(&lab, &["doctor"])
        .current_dir(&lab.workspace)
        .output()
        .expect("doctor");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("zotbox host: pid {pid}, up ")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "`prober` for workspace `{}`",
            lab.workspace.display()
        )),
        "{stdout}"
    );
    finish(zot).await;
}

/// Root only: a process of another uid cannot reach the socket's folder,
/// and with the folder opened up, the host refuses it by its credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_of_another_user_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::os::unix::process::CommandExt as _;
    if !nix::unistd::getuid().is_root() {
        eprintln!("skipped: needs root to connect as another uid");
        return;
    }
    // The system's Python: another user can run it (not one under /root).
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        eprintln!("skipped: needs /usr/bin/python3 to connect as another uid");
        return;
    }
    let lab = Lab::new();
    let dir = guest(&lab, "prober");
    let zot = relay(&lab, &dir).await;
    let socket = sockets(&lab).pop().expect("a socket");
    let nobody = 65534;
    let connect = |socket: &Path| {
        let script = "import socket,sys\n\
            s=socket.socket(socket.AF_UNIX)\n\
            try:\n  s.connect(sys.argv[1])\n\
            except OSError as e:\n  print('connect:', e.strerror); sys.exit(0)\n\
            f=s.makefile('rwb')\n\
            try:\n  s.sendall(b'{\"op\":\"status\"}\\n')\n\
            except OSError:\n  pass\n\
            print(f.readline().decode().strip())\n";
        let out = std::process::Command::new(python)
            .args(["-c", script, &socket.display().to_string()])
            .uid(nobody)
            .gid(nobody)
            .output()
            .expect("python3 as nobody");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    // Open every folder on the way but the socket's own: refused there.
    let mut open = Vec::new();
    let mut at = socket.parent().and_then(Path::parent);
    while let Some(dir) = at {
        if dir == Path::new("/tmp") || dir == Path::new("/") {
            break;
        }
        open.push(dir.to_owned());
        at = dir.parent();
    }
    for dir in &open {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    assert_eq!(connect(&socket), "connect: Permission denied");
    // With the folder and the socket opened up, the host refuses by uid.
    let run_dir = socket.parent().expect("run dir").to_owned();
    std::fs::set_permissions(&run_dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let reply: Value = serde_json::from_str(&connect(&socket)).expect("a JSON reply");
    assert_eq!(
        reply,
        json!({"op": "failed", "error": "zotbox host: the peer runs as uid 65534, not as uid 0; refused"})
    );
    // And a relay now refuses a folder others may enter.
    std::fs::set_permissions(&run_dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    finish(zot).await;
}

/// A workspace's extension folder that is a link to elsewhere is still that
/// workspace's: the relay hands the host the folder as zot spelled it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linked_extension_folder_of_an_untrusted_workspace_is_refused_through_the_relay() {
    let lab = Lab::new();
    let elsewhere = guest(&lab, "prober");
    std::fs::create_dir_all(lab.project_dir()).expect("project extensions");
    let link = lab.project_dir().join("prober");
    std::os::unix::fs::symlink(&elsewhere, &link).expect("link the folder");
    let out = zotbox(&lab, &["run"])
        .current_dir(&link)
        .env("PWD", &link)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("zotbox run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "error: extension `prober` comes from the workspace `{}`",
            lab.workspace.display()
        )),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_host_keeps_its_instances_and_the_next_relay_gets_a_new_one() {
    let lab = Lab::new();
    let dir = guest(&lab, "prober");
    let mut first = relay(&lab, &dir).await;
    let old = host_pid(&lab);
    let out = zotbox(&lab, &["host", "stop"]).output().expect("host stop");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "the zotbox host accepts no new extension and exits when its extensions end\n"
    );
    // Retired: its socket is gone, its instance still answers.
    assert_eq!(sockets(&lab), Vec::<PathBuf>::new());
    assert_eq!(
        call(&mut first, "a", "ping", json!({})).await,
        (false, "pong".to_owned())
    );
    let mut second = relay(&lab, &dir).await;
    let new = host_pid(&lab);
    assert_ne!(new, old);
    assert_eq!(
        call(&mut second, "b", "ping", json!({})).await,
        (false, "pong".to_owned())
    );
    assert!(alive(old));
    finish(first).await;
    eventually("the retired host exits with its last instance", || {
        !alive(old)
    })
    .await;
    assert!(alive(new));
    finish(second).await;
}

/// `zotbox-relay --attached FD DIR` takes over only an open socket: any
/// other number is refused with exit status 1, and the extension is not
/// hosted in its place (the host may hold it already: two would read zot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_takes_over_only_an_open_socket_and_hosts_nothing_else() {
    let lab = Lab::new();
    let dir = guest(&lab, "prober");
    for (fd, opened, why) in [
        ("x", "", "not a descriptor number"),
        ("1", "", "not an open socket"),
        ("7", "", "not an open socket"),
        ("5", "5<extension.json", "not an open socket"),
    ] {
        let out = with_homes(&lab, "sh")
            .arg("-c")
            .arg(format!("exec \"$0\" --attached {fd} \"$1\" {opened}"))
            .arg(env!("CARGO_BIN_EXE_zotbox-relay"))
            .arg(&dir)
            .current_dir(&dir)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("zotbox-relay --attached");
        assert_eq!(out.status.code(), Some(1), "{fd}: {out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("error: --attached `{fd}`: {why}\n"),
            "{fd}"
        );
        assert!(out.stdout.is_empty(), "{fd}: hosted after all: {out:?}");
    }
    assert!(shared_hosts(&lab.home).is_empty(), "no host was started");
}

/// The shared host compiles a program it has not seen in a child process
/// (`zotbox host compile`), so the compiler's memory never stays in it, and
/// loads what the child stored in the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_host_compiles_in_a_child_process_and_loads_the_cache() {
    let lab = Lab::new();
    let dir = guest(&lab, "prober");
    assert!(crate::support::cache_entries(&lab.home).is_empty());
    let mut zot = relay(&lab, &dir).await;
    assert_eq!(
        call(&mut zot, "p1", "ping", json!({})).await,
        (false, "pong".to_owned())
    );
    let entries = crate::support::cache_entries(&lab.home);
    assert_eq!(entries.len(), 1, "{entries:?}");
    let log = std::fs::read_to_string(lab.home.join("logs/zotbox-host.log")).expect("host log");
    assert!(
        log.contains("compiled `prober` in a child process in"),
        "{log}"
    );
    assert!(!log.contains("compiling here"), "{log}");
    let end = finish(zot).await;
    assert_eq!(end.status.code(), Some(0), "{end:#?}");
}

/// The host holds every instance's pipes, logs and connections, so it does
/// not keep the open files limit of the zot that happened to start it
/// (1 024 on most desktops, 256 here): it raises its own, to the hard limit
/// or 65 536.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_raises_its_open_files_limit_past_the_one_it_was_started_with() {
    let lab = Lab::new();
    let dir = guest(&lab, "prober");
    let mut command = tokio::process::Command::new("sh");
    command
        .args(["-c", "ulimit -Sn 256 && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_zotbox"))
        .args(["run", &dir.display().to_string()])
        .current_dir(&dir)
        .env("ZOT_HOME", &lab.home)
        .env("HOME", user_home(&lab))
        .env_remove("ZOTBOX_LOG")
        .env_remove("ZOTBOX_STANDALONE")
        .env_remove("XDG_STATE_HOME");
    let mut zot = Peer::spawn(command);
    handshake(&mut zot, &lab.workspace).await;
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", host_pid(&lab)))
        .expect("the host's limits");
    let open_files: Vec<u64> = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .map(|line| {
            line.split_whitespace()
                .filter_map(|word| word.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let [soft, hard] = open_files[..] else {
        panic!("no open files limit in {limits}");
    };
    assert_eq!(soft, hard.min(65_536), "{limits}");
    let end = finish(zot).await;
    assert_eq!(end.status.code(), Some(0), "{end:#?}");
}

/// The compiler process caps its own CPU time, as it caps its memory,
/// before it reads the program: one made to compile for hours is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compiler_process_caps_its_cpu_time_before_it_reads_the_program() {
    let lab = Lab::new();
    let cache = lab.dev.join("cache");
    let mut child = zotbox(
        &lab,
        &[
            "host",
            "compile",
            "--cache",
            &cache.display().to_string(),
            "--cap",
            "1000000",
            "--memory-mb",
            "64",
        ],
    )
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped())
    .spawn()
    .expect("zotbox host compile");
    let limits = format!("/proc/{}/limits", child.id());
    let cpu_limit = || {
        std::fs::read_to_string(&limits)
            .unwrap_or_default()
            .lines()
            .find(|line| line.starts_with("Max cpu time"))
            .and_then(|line| line.split_whitespace().nth(3).map(str::to_owned))
    };
    eventually("the compiler caps its CPU time", || {
        cpu_limit().as_deref() == Some(zotbox::shared::COMPILE_CPU_SECS.to_string().as_str())
    })
    .await;
    drop(child.stdin.take());
    let status = child.wait().expect("wait");
    assert!(!status.success(), "an empty program is no wasm");
}

/// A program that does not compile is refused with the compiler's reason,
/// as standalone would refuse it, without a second compile in the host;
/// the host lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_does_not_compile_is_refused_without_compiling_in_the_host() {
    let lab = Lab::new();
    let dir = guest(&lab, "prober");
    let manifest = read_json(&dir.join("extension.json"));
    let wasm = dir.join(manifest["wasm"].as_str().expect("a wasm path"));
    // A core module whose type section says 5 bytes follow, then ends.
    std::fs::write(&wasm, b"\0asm\x01\0\0\0\x01\x05\x01").expect("write the program");
    let zot = spawn_relay(&lab, &dir, &[]);
    let end = zot.end().await;
    assert_eq!(end.status.code(), Some(1), "{end:#?}");
    assert!(
        end.stderr.contains("cannot compile `") && end.stderr.contains("prober.wasm`: "),
        "{end:#?}"
    );
    let log = std::fs::read_to_string(lab.home.join("logs/zotbox-host.log")).expect("host log");
    assert!(!log.contains("compiling here"), "{log}");
    assert_eq!(shared_hosts(&lab.home).len(), 1, "the host lives on");
    assert!(crate::support::cache_entries(&lab.home).is_empty());
}

/// A guest that writes 64 MiB of complete lines to a zot that has stopped
/// reading: the guest waits once the pipes are full, and neither the relay
/// nor the host (nor standalone, the two in one process) holds what it has
/// not yet written; when zot reads again, every line arrives, whole and in
/// order, then the answer. A bridge that kept a guest's lines until zot took
/// them would grow by the whole flood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_flooding_lines_while_zot_reads_nothing_waits_and_nothing_piles_up() {
    const NOTES: usize = 2048;
    const NOTE_LEN: usize = 32 * 1024;
    // Well below the flood's 64 MiB, well above a pipe or a socket buffer.
    const MOST_GROWN_KIB: u64 = 24 * 1024;
    let lab = Lab::new();
    let dir = guest(&lab, "hostile");
    for standalone in [true, false] {
        let env: &[(&str, &str)] = if standalone {
            &[("ZOTBOX_STANDALONE", "1")]
        } else {
            &[]
        };
        let mut zot = relay_env(&lab, &dir, &lab.workspace, env).await;
        assert_eq!(
            call(&mut zot, "e", "echo", json!({"text": "warm"})).await,
            (false, "warm".to_owned())
        );
        let mut pids = vec![zot.pid().expect("the relay runs")];
        if !standalone {
            pids.push(u32::try_from(host_pid(&lab)).expect("a pid"));
        }
        let rss = || {
            pids.iter()
                .map(|&pid| crate::support::proc_status_kib(pid, "VmRSS"))
                .sum::<u64>()
        };
        let before = rss();
        zot.stop_reading();
        zot.send(
            &json!({"type": "tool_call", "id": "flood", "name": "notify_flood",
                         "args": {"count": NOTES, "len": NOTE_LEN}}),
        )
        .await;
        // Long enough for an unbounded bridge to take the whole flood (the
        // guest writes it in well under a second); the peak is what counts.
        let mut peak = before;
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            peak = peak.max(rss());
        }
        zot.resume_reading();
        for n in 0..NOTES {
            let note = zot.recv().await;
            let message = note["message"].as_str().unwrap_or_default();
            assert!(
                note["type"] == "notify"
                    && message.len() == NOTE_LEN
                    && message.bytes().all(|b| b == b'x'),
                "note {n} (standalone: {standalone}): {:.200}",
                note.to_string()
            );
        }
        let answer = zot.recv().await;
        assert_eq!(
            (
                &answer["type"],
                &answer["id"],
                &answer["content"][0]["text"]
            ),
            (
                &json!("tool_result"),
                &json!("flood"),
                &json!(format!("sent {NOTES}"))
            ),
            "standalone: {standalone}"
        );
        let grown = peak.saturating_sub(before);
        assert!(
            grown < MOST_GROWN_KIB,
            "standalone: {standalone}: grew by {grown} KiB ({before} KiB before) while zot read nothing"
        );
        let end = finish(zot).await;
        assert_eq!(end.status.code(), Some(0), "{end:#?}");
    }
}
