//! The capability attack suite: every way out of the sandbox we could think
//! of, tried through both front ends of the capability layer.
//!
//! The *guest* front end is the `prober` wasm guest (`tests/guests/prober`),
//! whose tools use one capability each and answer with the result or the
//! SDK's rendering of the typed error (`fs-read `x` refused: …`). The
//! *data* front end is a declarative tool in `<workspace>/.zot/tools/`,
//! which the host runs itself and whose refusals read ``read of `x`
//! refused: …``. Each attack is named, its exact refusal asserted, and after
//! each one the guest must still answer `ping` with `pong`: a refusal is an
//! answer, never a crash.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use zotbox::Host;
use zotbox::host::RestartPolicy;
use zotbox::policy::Policy;

use crate::guests::{self, Form};
use crate::https::{BODY_CAP, TestServer};
use crate::support::{Lab, Run, bounded, write_json, zotbox_bounded};

// ---------------------------------------------------------------------------
// The arena: a lab with the prober, data tools, plugins and policy files.

/// The system policy layer of a lab (absent unless a test writes it), so a
/// real `/etc/zotbox/policy.json` never leaks into a test.
pub fn system_policy_path(lab: &Lab) -> PathBuf {
    lab.home.join("system-policy.json")
}

/// The user policy layer, `$ZOT_HOME/policy.json`.
pub fn user_policy_path(lab: &Lab) -> PathBuf {
    lab.home.join("policy.json")
}

/// Writes the user policy.
pub fn user_policy(lab: &Lab, policy: &Value) -> PathBuf {
    let path = user_policy_path(lab);
    write_json(&path, policy);
    path
}

/// Writes the system policy.
pub fn system_policy(lab: &Lab, policy: &Value) -> PathBuf {
    let path = system_policy_path(lab);
    write_json(&path, policy);
    path
}

/// Writes the data tool `<workspace>/.zot/tools/<name>.json`.
pub fn data_tool(lab: &Lab, tool: &Value) -> PathBuf {
    data_file(lab, "tools", tool)
}

/// Writes the refusal plugin `<workspace>/.zot/plugins/<name>.json`.
pub fn plugin(lab: &Lab, plugin: &Value) -> PathBuf {
    data_file(lab, "plugins", plugin)
}

fn data_file(lab: &Lab, folder: &str, value: &Value) -> PathBuf {
    let dir = lab.workspace.join(".zot").join(folder);
    std::fs::create_dir_all(&dir).expect("data folder");
    let name = value["name"].as_str().expect("a data file needs a name");
    let path = dir.join(format!("{name}.json"));
    write_json(&path, value);
    path
}

/// A shell data tool.
pub fn shell_tool(name: &str, command: &str) -> Value {
    json!({"name": name, "description": format!("runs {command}"), "kind": "shell", "command": command})
}

/// Writes `<lab.dev>/prober/` with the prober's wasm and a manifest
/// declaring `capabilities` (and `limits` when given).
pub fn prober(lab: &Lab, capabilities: &Value, limits: Option<Value>) -> PathBuf {
    let dir = lab.dev.join("prober");
    std::fs::create_dir_all(&dir).expect("prober folder");
    let wasm = guests::guests().artifact("prober", Form::Wasm);
    std::fs::copy(wasm, dir.join("prober.wasm")).expect("copy prober.wasm");
    let mut manifest = json!({
        "name": "prober",
        "version": "0.1.0",
        "wasm": "./prober.wasm",
        "capabilities": capabilities,
    });
    if let Some(limits) = limits {
        manifest["limits"] = limits;
    }
    write_json(&dir.join("extension.json"), &manifest);
    dir
}

/// The policy a lab's files set, loaded as the CLI would.
pub fn lab_policy(lab: &Lab) -> Policy {
    Policy::load(&system_policy_path(lab), &user_policy_path(lab)).expect("the lab's policy")
}

/// Starts a host over `extensions` with the lab's policy files, no restarts.
pub async fn start(lab: &Lab, extensions: &[PathBuf]) -> Host {
    start_with(lab, extensions, lab_policy(lab), RestartPolicy::never()).await
}

/// Starts a host over `extensions` with `policy`.
pub async fn start_with(
    lab: &Lab,
    extensions: &[PathBuf],
    policy: Policy,
    restart: RestartPolicy,
) -> Host {
    // The arena's workspace files are the attacks on the mechanisms, not on
    // trust (that is `trust.rs`): trust them as they stand.
    lab.trust_workspace();
    let mut builder = lab.builder().policy(policy).restart_policy(restart);
    for dir in extensions {
        builder = builder.extension(dir);
    }
    bounded("starting the host", builder.build())
        .await
        .expect("build the host")
}

/// Runs the real binary in the lab with `env` set for this child only. The
/// system policy is the lab's (see [`system_policy_path`]), and so is
/// `HOME`, so the user's own `~/.shiro-neko` never joins in.
pub fn zotbox_with(lab: &Lab, env: &[(&str, &str)], args: &[&str]) -> Run {
    // As in `start_with`: the workspace is trusted as it stands.
    lab.trust_workspace();
    let mut command = lab.command(args);
    command
        .env("ZOTBOX_SYSTEM_POLICY", system_policy_path(lab))
        .env("HOME", lab.home.join("user-home"));
    for (name, value) in env {
        command.env(name, value);
    }
    Run::from(command.output().expect("run zotbox"))
}

/// What a tool call answered: `(is_error, text)`, or the host's error as text.
pub async fn answer(host: &Host, tool: &str, args: Value) -> (bool, String) {
    match bounded(&format!("tool `{tool}`"), host.call_tool(tool, args)).await {
        Ok(result) => (result.is_error, result.text()),
        Err(err) => (true, format!("host error: {err}")),
    }
}

/// Asserts the guest still runs.
pub async fn assert_pong(host: &Host) {
    assert_eq!(
        answer(host, "ping", json!({})).await,
        (false, "pong".to_owned())
    );
}

/// What a case expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// This exact answer: `(is_error, text)`.
    Exact(bool, String),
    /// An error answer holding each of these key words (for refusals whose
    /// exact wording is pinned by an `#[ignore]`d bug test).
    ErrorWith(Vec<String>),
}

impl Expect {
    fn admits(&self, got: &(bool, String)) -> bool {
        match self {
            Self::Exact(is_error, text) => got.0 == *is_error && got.1 == *text,
            Self::ErrorWith(words) => got.0 && words.iter().all(|w| got.1.contains(w.as_str())),
        }
    }
}

/// One attack (or control) and the answer expected.
pub struct Case {
    /// What the attack is.
    pub name: &'static str,
    /// The tool called.
    pub tool: &'static str,
    /// Its arguments.
    pub args: Value,
    /// The answer expected.
    pub expected: Expect,
}

/// A refusal (an error answer) with this exact text.
pub fn refused(
    name: &'static str,
    tool: &'static str,
    args: Value,
    text: impl Into<String>,
) -> Case {
    Case {
        name,
        tool,
        args,
        expected: Expect::Exact(true, text.into()),
    }
}

/// A refusal (an error answer) holding each of `words`.
pub fn refused_with(name: &'static str, tool: &'static str, args: Value, words: &[&str]) -> Case {
    Case {
        name,
        tool,
        args,
        expected: Expect::ErrorWith(words.iter().map(|w| (*w).to_owned()).collect()),
    }
}

/// A successful answer with this exact text.
pub fn answered(
    name: &'static str,
    tool: &'static str,
    args: Value,
    text: impl Into<String>,
) -> Case {
    Case {
        name,
        tool,
        args,
        expected: Expect::Exact(false, text.into()),
    }
}

/// Runs every case, checking after each that the guest still answers
/// `ping`, and fails once with every mismatch.
pub async fn run_cases(host: &Host, cases: Vec<Case>) {
    let total = cases.len();
    let mut failures = Vec::new();
    for case in cases {
        let got = answer(host, case.tool, case.args.clone()).await;
        if !case.expected.admits(&got) {
            failures.push(format!(
                "{}: {} {}\n    expected {:?}\n    got      {:?}",
                case.name, case.tool, case.args, case.expected, got
            ));
        }
        let pong = answer(host, "ping", json!({})).await;
        if pong != (false, "pong".to_owned()) {
            failures.push(format!(
                "{}: the guest stopped answering: {pong:?}",
                case.name
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {total} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------
// fs

/// The workspace every fs attack runs in:
///
/// ```text
/// docs/guide.md        "the guide"
/// docs/big.bin         11 MiB (sparse): over the 10 MiB read cap
/// docs/fifo            a FIFO (made with `mkfifo`)
/// docs/sock            a Unix socket
/// docs/link-secret  -> ../secret.txt     (inside the workspace, outside the grant)
/// docs/etc          -> /etc
/// docs/passwd       -> /etc/passwd
/// docs/root         -> /proc/self/root
/// docs/zero         -> /dev/zero
/// docs/fifo-link    -> fifo
/// docs/loop         -> loop
/// out/                 writable
/// out/link          -> ../secret.txt
/// out/fifo             a FIFO
/// secret.txt           "top secret"
/// ```
fn fs_workspace(root: &Path) {
    for dir in ["docs", "out"] {
        std::fs::create_dir_all(root.join(dir)).expect("folder");
    }
    std::fs::write(root.join("docs/guide.md"), "the guide").expect("guide");
    std::fs::write(root.join("secret.txt"), "top secret").expect("secret");
    let big = std::fs::File::create(root.join("docs/big.bin")).expect("big file");
    big.set_len(11 * 1024 * 1024).expect("size the big file");
    for (link, target) in [
        ("docs/link-secret", "../secret.txt"),
        ("docs/etc", "/etc"),
        ("docs/passwd", "/etc/passwd"),
        ("docs/root", "/proc/self/root"),
        ("docs/zero", "/dev/zero"),
        ("docs/fifo-link", "fifo"),
        ("docs/loop", "loop"),
        ("out/link", "../secret.txt"),
    ] {
        symlink(target, root.join(link)).expect("symlink");
    }
    // The socket file stays after the listener is gone.
    std::os::unix::net::UnixListener::bind(root.join("docs/sock")).expect("bind a socket");
    for fifo in ["docs/fifo", "out/fifo"] {
        let status = Command::new("mkfifo")
            .arg(root.join(fifo))
            .status()
            .expect("run mkfifo");
        assert!(status.success(), "mkfifo {fifo}");
    }
}

/// The prober's grant in the fs attacks.
fn fs_capabilities() -> Value {
    json!({"read": ["docs/**"], "write": ["out/**"]})
}

/// The guest's and the data tool's refusal of a read of `path`, when both
/// give the same `reason`.
fn read_refused_twice(cases: &mut Vec<Case>, name: &'static str, path: &str, reason: &str) {
    cases.push(refused(
        name,
        "fs_read",
        json!({ "path": path }),
        format!("fs-read `{path}` refused: {reason}"),
    ));
    cases.push(refused(
        name,
        "peek",
        json!({ "arg": path }),
        format!("read of `{path}` refused: {reason}"),
    ));
}

/// The guest's exact refusal of a read of `path`; the data tool refuses
/// too, with `data_words` in its answer. Its exact wording is pinned by
/// [`a_data_read_tool_refuses_escapes_as_denials_and_audits_them`].
fn read_refused_data_in_other_words(
    cases: &mut Vec<Case>,
    name: &'static str,
    path: &str,
    reason: &str,
    data_words: &[&str],
) {
    cases.push(refused(
        name,
        "fs_read",
        json!({ "path": path }),
        format!("fs-read `{path}` refused: {reason}"),
    ));
    let mut words = vec![format!("`{path}`")];
    words.extend(data_words.iter().map(|w| (*w).to_owned()));
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    cases.push(refused_with(name, "peek", json!({ "arg": path }), &words));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fs_escapes_are_refused_on_both_front_ends() {
    let lab = Lab::new();
    fs_workspace(&lab.workspace);
    data_tool(
        &lab,
        &json!({"name": "peek", "description": "read a workspace file", "kind": "read", "path": "{arg}"}),
    );
    // A read tool fixing its folder may follow symlinks only within it.
    data_tool(
        &lab,
        &json!({"name": "peek-docs", "description": "read a doc", "kind": "read", "path": "docs/{arg}"}),
    );
    let dir = prober(&lab, &fs_capabilities(), None);
    lab.trust_workspace();
    let host = start(&lab, &[dir]).await;

    let mut cases = vec![
        // Controls: what is granted works, through both front ends.
        answered(
            "control: granted read",
            "fs_read",
            json!({"path": "docs/guide.md"}),
            "the guide",
        ),
        answered(
            "control: data read",
            "peek",
            json!({"arg": "docs/guide.md"}),
            "the guide",
        ),
    ];
    let dots = "`..` may not leave the workspace";
    let absolute = "absolute paths are not allowed; use a path relative to the workspace root";
    // Attack: climb out with `..`.
    for (name, path) in [
        ("`../` chain", "../etc/passwd"),
        ("`../` to a sibling of the workspace", "../secret"),
        ("`..` after a granted folder", "docs/../../etc/passwd"),
    ] {
        read_refused_data_in_other_words(&mut cases, name, path, dots, &["`..`"]);
    }
    // Attack: `..` to a workspace file the grant does not cover: it does
    // not leave the workspace, and the grant refuses it in its own words.
    read_refused_data_in_other_words(
        &mut cases,
        "`..` to a workspace file",
        "docs/../secret.txt",
        "not within the granted read paths (granted: docs/**)",
        &["`..`"],
    );
    // Attack: an absolute path, plain and through procfs.
    for (name, path) in [
        ("absolute path", "/etc/passwd"),
        ("/proc/self/root", "/proc/self/root/etc/passwd"),
    ] {
        read_refused_data_in_other_words(&mut cases, name, path, absolute, &["absolute"]);
    }
    // Attack: symlinks inside a granted folder that lead out of the workspace.
    read_refused_twice(
        &mut cases,
        "symlink to /etc",
        "docs/etc/passwd",
        "symlink `docs/etc` points outside the workspace (`/etc`)",
    );
    read_refused_twice(
        &mut cases,
        "symlink to /etc/passwd",
        "docs/passwd",
        "symlink `docs/passwd` points outside the workspace (`/etc/passwd`)",
    );
    read_refused_twice(
        &mut cases,
        "symlink to /proc/self/root",
        "docs/root/etc/passwd",
        "symlink `docs/root` points outside the workspace (`/proc/self/root`)",
    );
    // Attack: a device, through a symlink.
    read_refused_twice(
        &mut cases,
        "symlink to /dev/zero",
        "docs/zero",
        "symlink `docs/zero` points outside the workspace (`/dev/zero`)",
    );
    // Attack: a FIFO, which would block a reader forever.
    read_refused_twice(
        &mut cases,
        "FIFO",
        "docs/fifo",
        "it is a FIFO; only regular files can be read or written",
    );
    read_refused_twice(
        &mut cases,
        "Unix socket",
        "docs/sock",
        "it is a socket; only regular files can be read or written",
    );
    cases.push(refused(
        "symlink to a FIFO",
        "fs_read",
        json!({"path": "docs/fifo-link"}),
        "fs-read `docs/fifo-link` refused: it is a FIFO; only regular files can be read or written",
    ));
    cases.extend([
        // Attack: a symlink in a granted folder to an ungranted file inside
        // the workspace (what a check-then-swap would aim for).
        refused(
            "symlink to an ungranted workspace file",
            "fs_read",
            json!({"path": "docs/link-secret"}),
            "fs-read `docs/link-secret` refused: it resolves to `secret.txt` through a symlink, \
             which is not within the granted read paths (granted: docs/**)",
        ),
        refused(
            "symlink to an ungranted workspace file (data)",
            "peek-docs",
            json!({"arg": "link-secret"}),
            "read of `docs/link-secret` refused: it resolves to `secret.txt` through a symlink, \
             which is not within the granted read paths (granted: docs/**)",
        ),
        // Attack: a file over the read cap (memory exhaustion of the host).
        refused(
            "11 MiB read",
            "fs_read",
            json!({"path": "docs/big.bin"}),
            "larger than the 10485760-byte cap",
        ),
        refused(
            "11 MiB read (data)",
            "peek",
            json!({"arg": "docs/big.bin"}),
            "read of `docs/big.bin` exceeds the 10485760-byte cap",
        ),
        // Attack: a workspace file outside the read globs.
        refused(
            "symlink loop",
            "fs_read",
            json!({"path": "docs/loop"}),
            "cannot resolve `docs/loop`: more than 40 symlinks on the way (a symlink loop?)",
        ),
        // Attack: `\\` separators, for a jail that only splits on `/`.
        refused(
            "backslash traversal",
            "fs_read",
            json!({"path": "docs\\..\\..\\etc\\passwd"}),
            "invalid request: path `docs\\..\\..\\etc\\passwd` contains `\\`; separate \
             components with `/`",
        ),
        // Attack: a NUL byte, to cut the path short in a C library.
        refused(
            "NUL byte",
            "fs_read",
            json!({"path": "docs/guide.md\u{0}../../etc/passwd"}),
            "invalid request: path `docs/guide.md\\u{0}../../etc/passwd` contains a NUL byte",
        ),
        refused(
            "read outside the read globs",
            "fs_read",
            json!({"path": "secret.txt"}),
            "fs-read `secret.txt` refused: not within the granted read paths (granted: docs/**)",
        ),
        refused(
            "list the workspace root",
            "fs_list",
            json!({"path": "."}),
            "fs-read `.` refused: not within the granted read paths (granted: docs/**)",
        ),
        refused(
            "list through a symlink to /etc",
            "fs_list",
            json!({"path": "docs/etc"}),
            "fs-read `docs/etc` refused: symlink `docs/etc` points outside the workspace (`/etc`)",
        ),
        refused(
            "stat with `..`",
            "fs_stat",
            json!({"path": "docs/../secret.txt"}),
            "fs-read `docs/../secret.txt` refused: not within the granted read paths (granted: docs/**)",
        ),
        // Writes: outside the write globs, out of the workspace, through
        // a symlink, into a FIFO.
        refused(
            "write outside the write globs",
            "fs_write",
            json!({"path": "secret.txt", "text": "pwned"}),
            "fs-write `secret.txt` refused: not within the granted write paths (granted: out/**)",
        ),
        refused(
            "write to a readable, unwritable file",
            "fs_write",
            json!({"path": "docs/guide.md", "text": "pwned"}),
            "fs-write `docs/guide.md` refused: not within the granted write paths (granted: out/**)",
        ),
        refused(
            "write with `..`",
            "fs_write",
            json!({"path": "out/../../escape.txt", "text": "pwned"}),
            "fs-write `out/../../escape.txt` refused: `..` may not leave the workspace",
        ),
        refused(
            "write to an absolute path",
            "fs_write",
            json!({"path": "/tmp/zotbox-escape.txt", "text": "pwned"}),
            format!("fs-write `/tmp/zotbox-escape.txt` refused: {absolute}"),
        ),
        refused(
            "write through a symlink in a writable folder",
            "fs_write",
            json!({"path": "out/link", "text": "pwned"}),
            "fs-write `out/link` refused: it is a symlink; writes never follow a final symlink \
             (remove the link first)",
        ),
        refused(
            "write into a FIFO",
            "fs_write",
            json!({"path": "out/fifo", "text": "pwned"}),
            "fs-write `out/fifo` refused: it is a FIFO; only regular files can be read or written",
        ),
        answered(
            "control: granted write",
            "fs_write",
            json!({"path": "out/new.txt", "text": "fine"}),
            "written",
        ),
    ]);
    run_cases(&host, cases).await;

    // Nothing was written where it should not have been.
    let read = |p: &str| std::fs::read_to_string(lab.workspace.join(p)).expect("read back");
    assert_eq!(read("secret.txt"), "top secret");
    assert_eq!(read("docs/guide.md"), "the guide");
    assert_eq!(read("out/new.txt"), "fine");
    assert!(
        !lab.workspace
            .parent()
            .expect("parent")
            .join("escape.txt")
            .exists()
    );
    assert!(!Path::new("/tmp/zotbox-escape.txt").exists());
    host.shutdown().await;
}

/// The data read tool builds its grant from the rendered path, so a `..`
/// or absolute `{arg}` is refused while the grant is built: as an invalid
/// glob the user never wrote, and without an audit line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_read_tool_refuses_escapes_as_denials_and_audits_them() {
    let lab = Lab::new();
    fs_workspace(&lab.workspace);
    data_tool(
        &lab,
        &json!({"name": "peek", "description": "read a workspace file", "kind": "read", "path": "{arg}"}),
    );
    lab.trust_workspace();
    let host = start(&lab, &[]).await;
    let cases = [
        ("../etc/passwd", "`..` may not leave the workspace"),
        (
            "/etc/passwd",
            "absolute paths are not allowed; use a path relative to the workspace root",
        ),
    ];
    for (path, reason) in cases {
        assert_eq!(
            answer(&host, "peek", json!({ "arg": path })).await,
            (true, format!("read of `{path}` refused: {reason}"))
        );
    }
    host.shutdown().await;
    let audit = audit_lines(&lab);
    for (path, reason) in cases {
        assert!(
            audit.iter().any(|line| line["extension"] == "data:peek"
                && line["capability"] == "fs-read"
                && line["subject"] == path
                && line["decision"] == "deny"
                && line["reason"] == reason),
            "no audit line for `{path}`: {audit:#?}"
        );
    }
}

/// The data read tool's grant is exactly the rendered path, and the jail
/// checks the grant again on the resolved path: so a symlink that stays
/// inside the workspace is refused too, naming a grant the user never wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_read_tool_follows_a_symlink_that_stays_inside_the_workspace() {
    let lab = Lab::new();
    fs_workspace(&lab.workspace);
    symlink("guide.md", lab.workspace.join("docs/alias.md")).expect("symlink");
    data_tool(
        &lab,
        &json!({"name": "peek", "description": "read a workspace file", "kind": "read", "path": "{arg}"}),
    );
    lab.trust_workspace();
    let host = start(&lab, &[]).await;
    assert_eq!(
        answer(&host, "peek", json!({"arg": "docs/alias.md"})).await,
        (false, "the guide".to_owned())
    );
    // And then the FIFO behind a symlink is refused for being a FIFO.
    assert_eq!(
        answer(&host, "peek", json!({"arg": "docs/fifo-link"})).await,
        (
            true,
            "read of `docs/fifo-link` refused: it is a FIFO; only regular files can be read or \
             written"
                .to_owned()
        )
    );
    host.shutdown().await;
}

/// Every line of `$ZOT_HOME/logs/audit.jsonl` (after `host.shutdown()`).
pub fn audit_lines(lab: &Lab) -> Vec<Value> {
    let path = lab.home.join("logs/audit.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("`{line}`: {e}")))
        .collect()
}

// ---------------------------------------------------------------------------
// http

/// Writes the user policy: `server`'s certificate trusted, plus `more` keys.
fn trusting_policy(lab: &Lab, server: &TestServer, more: &Value) -> PathBuf {
    let ca = server.write_ca(&lab.home);
    let mut policy = json!({ "extra_root_certificates": [ca] });
    if let (Some(policy), Some(more)) = (policy.as_object_mut(), more.as_object()) {
        policy.extend(more.clone());
    }
    user_policy(lab, &policy)
}

/// The data tool `fetch`: `https://127.0.0.1:PORT/{arg}`.
fn fetch_tool(server: &TestServer) -> Value {
    json!({
        "name": "fetch",
        "description": "fetch from the test server",
        "kind": "http",
        "url": server.url("/{arg}"),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_attacks_are_refused_on_both_front_ends() {
    let lab = Lab::new();
    let server = TestServer::start().await;
    trusting_policy(&lab, &server, &json!({}));
    data_tool(&lab, &fetch_tool(&server));
    let dir = prober(&lab, &json!({ "http": [server.origin()] }), None);
    lab.trust_workspace();
    let host = start(&lab, &[dir]).await;
    let port = server.port;
    let granted = format!("(granted: 127.0.0.1:{port})");
    let get = |url: &str| json!({ "url": url });
    let arg = |arg: &str| json!({ "arg": arg });

    let to_http = format!(
        "`http://127.0.0.1:{port}/ok` refused: only https URLs are allowed; a redirect may not \
         downgrade https to http (redirected from `{}`)",
        server.url("/redirect-http")
    );
    let to_other = format!(
        "`https://localhost:{port}/ok` refused: host `localhost` is not granted {granted} \
         (redirected from `{}`)",
        server.url("/redirect-other")
    );
    let big = |path: &str| {
        format!(
            "response body of `{}` exceeds the 10485760-byte cap",
            server.url(path)
        )
    };
    let no_route = |path: &str| format!("HTTP 404 from `{}`\nno route {path}", server.url(path));
    let only_named = |host: &str, class: &str, origin: &str| {
        format!(
            "`{host}` is {class} address; only an origin naming it (`{origin}`) allows it {granted}"
        )
    };
    let cases = vec![
        // Controls: the granted origin answers, also after a same-origin redirect.
        answered(
            "control: granted fetch",
            "http_get",
            get(&server.url("/ok")),
            "200 hello",
        ),
        answered("control: data fetch", "fetch", arg("ok"), "hello"),
        answered(
            "control: same-origin redirect",
            "http_get",
            get(&server.url("/redirect-ok")),
            "200 hello",
        ),
        answered(
            "control: same-origin redirect (data)",
            "fetch",
            arg("redirect-ok"),
            "hello",
        ),
        // Attack: plain http to the granted address.
        refused(
            "http:// URL",
            "http_get",
            get(&format!("http://127.0.0.1:{port}/ok")),
            format!("http `http://127.0.0.1:{port}/ok` refused: only https URLs are allowed"),
        ),
        // Attack: a granted server redirects to http.
        refused(
            "redirect https→http",
            "http_get",
            get(&server.url("/redirect-http")),
            format!("http {to_http}"),
        ),
        refused(
            "redirect https→http (data)",
            "fetch",
            arg("redirect-http"),
            format!("fetch of {to_http}"),
        ),
        // Attack: a granted server redirects to a host that is not granted.
        refused(
            "redirect to another host",
            "http_get",
            get(&server.url("/redirect-other")),
            format!("http {to_other}"),
        ),
        refused(
            "redirect to another host (data)",
            "fetch",
            arg("redirect-other"),
            format!("fetch of {to_other}"),
        ),
        // Attack: `allowed@evil`: the granted address as user info.
        refused(
            "user info",
            "http_get",
            get(&format!("https://127.0.0.1:{port}@evil.example/ok")),
            format!(
                "http `https://127.0.0.1:{port}@evil.example/ok` refused: URLs with user info \
                 (`user@`) are not allowed; send credentials in a header"
            ),
        ),
        // Attack: a host that is not granted.
        refused(
            "host not granted",
            "http_get",
            get("https://example.com/"),
            format!(
                "http `https://example.com/` refused: host `example.com` is not granted {granted}"
            ),
        ),
        // Attack: the granted host on another port.
        refused(
            "another port of the granted host",
            "http_get",
            get("https://127.0.0.1:1/ok"),
            format!(
                "http `https://127.0.0.1:1/ok` refused: port 1 of `127.0.0.1` is not granted {granted}"
            ),
        ),
        // Attack: the cloud metadata service, a private and a loopback address.
        refused(
            "cloud metadata IP",
            "http_get",
            get("https://169.254.169.254/latest"),
            format!(
                "http `https://169.254.169.254/latest` refused: {}",
                only_named(
                    "169.254.169.254",
                    "a cloud metadata",
                    "https://169.254.169.254:443"
                )
            ),
        ),
        refused(
            "private IP",
            "http_get",
            get("https://10.0.0.1/"),
            format!(
                "http `https://10.0.0.1/` refused: {}",
                only_named("10.0.0.1", "a private", "https://10.0.0.1:443")
            ),
        ),
        refused(
            "IPv6 loopback",
            "http_get",
            get(&format!("https://[::1]:{port}/ok")),
            format!(
                "http `https://[::1]:{port}/ok` refused: {}",
                only_named("[::1]", "a loopback", &format!("https://[::1]:{port}"))
            ),
        ),
        refused(
            "IPv4-mapped IPv6 loopback",
            "http_get",
            get(&format!("https://[::ffff:127.0.0.1]:{port}/ok")),
            format!(
                "http `https://[::ffff:7f00:1]:{port}/ok` refused: {}",
                only_named(
                    "[::ffff:127.0.0.1]",
                    "a loopback",
                    &format!("https://[::ffff:127.0.0.1]:{port}")
                )
            ),
        ),
        // Attack: a body over the cap, announced and streamed.
        refused(
            "oversized body",
            "http_get",
            get(&server.url("/big")),
            "larger than the 10485760-byte cap",
        ),
        refused("oversized body (data)", "fetch", arg("big"), big("/big")),
        refused(
            "oversized streamed body",
            "http_get",
            get(&server.url("/big-stream")),
            "larger than the 10485760-byte cap",
        ),
        refused(
            "oversized streamed body (data)",
            "fetch",
            arg("big-stream"),
            big("/big-stream"),
        ),
        // Attack: a data tool's `{arg}` tries to change the host; it is
        // percent-encoded into the path, so the request stays on the server.
        refused(
            "`{arg}` = `@evil.com`",
            "fetch",
            arg("@evil.com"),
            no_route("/%40evil.com"),
        ),
        refused(
            "`{arg}` = `/../`",
            "fetch",
            arg("/../secret"),
            no_route("/%2F..%2Fsecret"),
        ),
        refused(
            "`{arg}` = `%2F`",
            "fetch",
            arg("%2Fetc"),
            no_route("/%252Fetc"),
        ),
        refused(
            "`{arg}` = `evil.com:443/x`",
            "fetch",
            arg("evil.com:443/x"),
            no_route("/evil.com%3A443%2Fx"),
        ),
        refused(
            "`{arg}` = `\\\\evil.com`",
            "fetch",
            arg("\\\\evil.com"),
            no_route("/%5C%5Cevil.com"),
        ),
        refused(
            "`{arg}` = `..`",
            "fetch",
            arg(".."),
            "tool `fetch`: `arg` may not be a `.` or `..` path segment",
        ),
        refused(
            "`{arg}` = `%2e%2e`",
            "fetch",
            arg("%2e%2e"),
            "tool `fetch`: `arg` may not be a `.` or `..` path segment",
        ),
    ];
    run_cases(&host, cases).await;
    host.shutdown().await;
}

/// `localhost` is granted by name, but it resolves to a loopback address:
/// a name may only reach public addresses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_to_loopback_is_refused() {
    let lab = Lab::new();
    let server = TestServer::start().await;
    trusting_policy(&lab, &server, &json!({}));
    let origin = format!("https://localhost:{}", server.port);
    data_tool(
        &lab,
        &json!({"name": "fetch-local", "description": "d", "kind": "http", "url": format!("{origin}/{{arg}}")}),
    );
    let dir = prober(&lab, &json!({ "http": [origin] }), None);
    lab.trust_workspace();
    let host = start(&lab, &[dir]).await;
    // The resolver refuses the first non-public address of the answer.
    let address = tokio::net::lookup_host(("localhost", 0))
        .await
        .expect("resolve localhost")
        .map(|a| a.ip())
        .find(|ip| zotbox::capability::http::address_class(*ip).is_some())
        .expect("localhost resolves to loopback");
    let shown = match address {
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
        v4 => v4.to_string(),
    };
    let url = server.localhost("/ok");
    // The origin to grant keeps the URL's port: without it, 443.
    let port = server.port;
    let reason = format!(
        "`{url}` refused: host `localhost` resolves to `{address}`, a loopback address; names may \
         only reach public addresses (grant the address itself, as `https://{shown}:{port}`, and \
         use it in the URL to allow it)"
    );
    run_cases(
        &host,
        vec![
            refused(
                "name resolving to loopback",
                "http_get",
                json!({ "url": url }),
                format!("http {reason}"),
            ),
            refused(
                "name resolving to loopback (data)",
                "fetch-local",
                json!({"arg": "ok"}),
                format!("fetch of {reason}"),
            ),
        ],
    )
    .await;
    host.shutdown().await;
}

/// A guest may pass a string as long as its memory to any host call, and
/// the host's checks of it (parsing, the patterns, the guard chain, the
/// refusal's text) run on the threads every extension of the shared host
/// shares: two guests with 90 MiB URLs held them long enough that a third
/// extension's guard answered past zot's 5 s deadline. Each argument is
/// refused by its length first, and audited with its head and its length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_urls_headers_commands_and_paths_are_refused_by_length_first() {
    use zotbox::capability::{MAX_COMMAND_BYTES, MAX_HEADER_BYTES, MAX_PATH_BYTES, MAX_URL_BYTES};
    let lab = Lab::new();
    let origin = "https://127.0.0.1:9";
    let dir = prober(
        &lab,
        &json!({"http": [origin], "shell": ["echo **"], "read": ["**"]}),
        Some(json!({"memory_mb": 64})),
    );
    let host = start(&lab, &[dir]).await;
    let url = format!("{origin}/{}", "a".repeat(MAX_URL_BYTES));
    let header = "v".repeat(MAX_HEADER_BYTES);
    let command = format!("echo {}", "a".repeat(MAX_COMMAND_BYTES));
    let path = "a/".repeat(MAX_PATH_BYTES / 2 + 1);
    let too_long = |what: &str, len: usize, max: usize| {
        format!("invalid request: {what} is {len} bytes; the most is {max}")
    };
    let cases = vec![
        refused(
            "URL",
            "http_get",
            json!({ "url": url }),
            too_long("the URL", url.len(), MAX_URL_BYTES),
        ),
        refused(
            "headers",
            "http",
            json!({"url": format!("{origin}/"), "headers": [["X-Big", header]]}),
            too_long(
                "the request's header block",
                header.len() + "X-Big".len(),
                MAX_HEADER_BYTES,
            ),
        ),
        refused(
            "command line",
            "shell",
            json!({ "command": command }),
            too_long("the command line", command.len(), MAX_COMMAND_BYTES),
        ),
        refused(
            "path",
            "fs_read",
            json!({ "path": path }),
            too_long("the path", path.len(), MAX_PATH_BYTES),
        ),
        // Control: an argument within the bounds is checked as before.
        answered(
            "short command",
            "shell",
            json!({"command": "echo hi"}),
            "exit=Some(0) stdout=hi\n stderr=",
        ),
    ];
    run_cases(&host, cases).await;
    host.shutdown().await;
    let audit = audit_lines(&lab);
    for (capability, len) in [
        ("http", url.len()),
        ("shell", command.len()),
        ("fs-read", path.len()),
    ] {
        assert!(
            audit.iter().any(|line| line["capability"] == capability
                && line["decision"] == "deny"
                && line["subject_len"] == len
                && line["subject"]
                    .as_str()
                    .is_some_and(|s| s.len() <= 1024 + 3)),
            "no `{capability}` deny line of a {len}-byte subject: {audit:#?}"
        );
    }
}

/// The policy's `http` list is a ceiling: a declared origin it does not
/// cover is not granted, and the refusal names the policy file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_http_ceiling_narrows_a_declared_origin() {
    let lab = Lab::new();
    let server = TestServer::start().await;
    let policy = trusting_policy(&lab, &server, &json!({"http": ["https://api.example.com"]}));
    data_tool(&lab, &fetch_tool(&server));
    let dir = prober(&lab, &json!({ "http": [server.origin()] }), None);
    lab.trust_workspace();
    let host = start(&lab, &[dir]).await;
    let reason = format!(
        "`{}` refused: declared by the extension but refused by policy: not among the `http` \
         origins of `{}`",
        server.url("/ok"),
        policy.display()
    );
    run_cases(
        &host,
        vec![
            refused(
                "policy http ceiling",
                "http_get",
                json!({"url": server.url("/ok")}),
                format!("http {reason}"),
            ),
            refused(
                "policy http ceiling (data)",
                "fetch",
                json!({"arg": "ok"}),
                format!("fetch of {reason}"),
            ),
        ],
    )
    .await;
    host.shutdown().await;
}

/// A body that trickles in past the deadline. The host offers no knob for
/// the 20 s fetch deadline end to end, so this one drives the capability's
/// client directly, with the same server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_body_times_out() {
    use zotbox::capability::http::{HttpClient, HttpConfig, HttpGrant, Request};
    let server = TestServer::start().await;
    let client = HttpClient::new(HttpConfig {
        max_body: BODY_CAP,
        timeout: Duration::from_millis(300),
        extra_roots: vec![server.ca_pem.clone().into_bytes()],
    })
    .expect("client");
    let grant = HttpGrant::new(&[server.origin()]).expect("grant");
    let started = Instant::now();
    let err = client
        .fetch(&grant, Request::get(server.url("/slow")))
        .await
        .expect_err("the body takes 5 s");
    assert_eq!(
        err.to_string(),
        format!("fetch of `{}` timed out after 300 ms", server.url("/slow"))
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // The client still works.
    let ok = client
        .fetch(&grant, Request::get(server.url("/ok")))
        .await
        .expect("fetch /ok");
    assert_eq!((ok.status, ok.body.as_slice()), (200, &b"hello"[..]));
}

/// End to end, the guest's tool deadline still holds while it waits in a
/// slow host call: the call fails at its deadline, the guest is restarted,
/// and it answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_stuck_in_a_slow_fetch_is_cut_off_at_its_tool_deadline() {
    let lab = Lab::new();
    let server = TestServer::start().await;
    trusting_policy(&lab, &server, &json!({}));
    let dir = prober(
        &lab,
        &json!({ "http": [server.origin()] }),
        Some(json!({"tool_timeout_ms": 500})),
    );
    let host = start_with(&lab, &[dir], lab_policy(&lab), quick_restarts()).await;
    let mut events = host.subscribe();
    let started = Instant::now();
    let (is_error, text) = answer(&host, "http_get", json!({"url": server.url("/slow")})).await;
    assert_eq!(
        (is_error, text.as_str()),
        (
            true,
            "host error: extension `prober` 0.1.0: tool `http_get` timed out after 500ms"
        )
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    crate::support::next_event(
        &mut events,
        "prober ready again",
        |e| matches!(e, zotbox::HostEvent::Ready { extension } if &**extension == "prober"),
    )
    .await;
    assert_pong(&host).await;
    host.shutdown().await;
}

fn quick_restarts() -> RestartPolicy {
    RestartPolicy {
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(50),
        ..RestartPolicy::default()
    }
}

// ---------------------------------------------------------------------------
// shell

/// The data tool `say`: `printf %s {arg}`, which prints its argument as is.
fn say_tool() -> Value {
    shell_tool("say", "printf %s {arg}")
}

/// A refusal plugin with one `bash` rule: `kubectl\s+apply`.
fn no_kubectl() -> Value {
    json!({
        "name": "no-kubectl",
        "description": "no deploys from the agent",
        "deny": [
            {"tools": ["bash"], "commandPattern": "kubectl\\s+apply", "reason": "deploys to the cluster"}
        ]
    })
}

/// A small workspace for the shell attacks: `secret.txt` and `docs/guide.md`.
fn shell_workspace(root: &Path) {
    std::fs::create_dir_all(root.join("docs")).expect("docs");
    std::fs::write(root.join("docs/guide.md"), "the guide").expect("guide");
    std::fs::write(root.join("secret.txt"), "top secret").expect("secret");
}

/// Asserts that no injected command ran: no `pwned` file anywhere in the
/// workspace, and its files are intact.
fn assert_not_pwned(lab: &Lab) {
    let mut stack = vec![lab.workspace.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read the workspace") {
            let path = entry.expect("entry").path();
            assert!(
                !path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().contains("pwned")),
                "an injected command ran: `{}` exists",
                path.display()
            );
            if path.is_dir() && !path.is_symlink() {
                stack.push(path);
            }
        }
    }
    let read = |p: &str| std::fs::read_to_string(lab.workspace.join(p)).expect("read back");
    assert_eq!(read("secret.txt"), "top secret");
    assert_eq!(read("docs/guide.md"), "the guide");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_attacks_are_refused_on_both_front_ends() {
    let lab = Lab::new();
    shell_workspace(&lab.workspace);
    data_tool(&lab, &say_tool());
    plugin(&lab, &no_kubectl());
    let dir = prober(&lab, &json!({"shell": ["echo **", "ls *"]}), None);
    lab.trust_workspace();
    let host = start(&lab, &[dir]).await;
    let run = |command: &str| json!({ "command": command });
    let say = |arg: &str| json!({ "arg": arg });
    let syntax =
        "only a `**` pattern allows shell syntax (quote the word if it is meant literally)";
    let guest_refusal =
        |command: &str, reason: &str| format!("shell `{command}` refused: {reason}");
    let mut cases = vec![
        // Controls: a granted command runs, quoted operators are just text.
        answered(
            "control: granted command",
            "shell",
            run("echo hello"),
            "exit=Some(0) stdout=hello\n stderr=",
        ),
        answered(
            "control: quoted operators",
            "shell",
            run("echo '; touch pwned'"),
            "exit=Some(0) stdout=; touch pwned\n stderr=",
        ),
        answered("control: data shell tool", "say", say("hello"), "hello"),
        // Attack: a command outside the granted patterns.
        refused(
            "command outside the patterns",
            "shell",
            run("cat secret.txt"),
            guest_refusal(
                "cat secret.txt",
                "it matches no granted command pattern (granted: echo **, ls *)",
            ),
        ),
        refused(
            "a second shell",
            "shell",
            run("sh -c 'cat secret.txt'"),
            guest_refusal(
                "sh -c 'cat secret.txt'",
                "it matches no granted command pattern (granted: echo **, ls *)",
            ),
        ),
    ];
    // Attack: shell syntax that would run more than the pattern saw.
    for (name, command, reason) in [
        (
            "`;`",
            "echo a; cat secret.txt",
            "`;` outside quotes is a shell operator",
        ),
        (
            "`&&`",
            "echo a && cat secret.txt",
            "`&` outside quotes is a shell operator",
        ),
        (
            "`|`",
            "echo a | sh",
            "`|` outside quotes is a shell operator",
        ),
        (
            "`>`",
            "echo pwned > pwned",
            "`>` outside quotes is a shell operator",
        ),
        (
            "`$(…)`",
            "echo $(cat secret.txt)",
            "`$` outside quotes is an expansion",
        ),
        (
            "backticks",
            "echo `cat secret.txt`",
            "a backtick outside quotes is an expansion",
        ),
        (
            "`$(…)` in double quotes",
            "echo \"$(cat secret.txt)\"",
            "`$` inside double quotes is an expansion",
        ),
        (
            "newline",
            "echo a\ncat secret.txt",
            "a newline outside quotes separates commands",
        ),
        (
            "glob",
            "ls *",
            "`*` outside quotes would be expanded by the shell",
        ),
        (
            "`~`",
            "echo ~/secret.txt",
            "`~` at the start of a word (or after `=` or `:`) is an expansion",
        ),
    ] {
        cases.push(refused(
            name,
            "shell",
            run(command),
            guest_refusal(command, &format!("{reason}; {syntax}")),
        ));
    }
    // Attack: `{arg}` injections through a data shell tool; each comes out
    // as one word, printed as is.
    for (name, injection) in [
        ("`;` injection", "; rm -rf ~"),
        ("`$(…)` injection", "$(touch pwned)"),
        ("backtick injection", "`touch pwned`"),
        ("newline injection", "x\ntouch pwned"),
        ("quote breakout", "' ; touch pwned; '"),
        ("double-quote breakout", "\"; touch pwned; \""),
        ("escaped quote breakout", "\\'; touch pwned; #"),
    ] {
        cases.push(answered(name, "say", say(injection), injection));
    }
    // Attack: a deny rule's command, also in another case.
    let blocked = "blocked by plugin `no-kubectl` rule 1: deploys to the cluster";
    for command in ["echo kubectl apply -f x", "echo KUBECTL   APPLY -f x"] {
        cases.push(refused(
            "deny rule on a guest command",
            "shell",
            run(command),
            guest_refusal(command, blocked),
        ));
    }
    for arg in ["kubectl apply -f x", "KUBECTL Apply -f x"] {
        cases.push(refused(
            "deny rule on a data shell tool",
            "say",
            say(arg),
            format!("command of `printf %s '{arg}'` refused: {blocked}"),
        ));
    }
    run_cases(&host, cases).await;
    host.shutdown().await;
    assert_not_pwned(&lab);
}

/// An intercepting extension (the `guard` example, as a wasm guest) is
/// asked about the commands other extensions and data tools run, as zot's
/// `bash` tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interceptor_blocks_a_command_the_guest_or_a_data_tool_runs() {
    let lab = Lab::new();
    shell_workspace(&lab.workspace);
    data_tool(&lab, &say_tool());
    let guard = guests::folder(&lab.dev, "guard", Form::Wasm, None);
    let dir = prober(&lab, &json!({"shell": ["echo **"]}), None);
    lab.trust_workspace();
    let host = start(&lab, &[dir, guard]).await;
    let blocked = "blocked by guard: refused: `rm -rf /` deletes the whole filesystem";
    run_cases(
        &host,
        vec![
            answered(
                "control: the guard lets harmless commands pass",
                "shell",
                json!({"command": "echo fine"}),
                "exit=Some(0) stdout=fine\n stderr=",
            ),
            refused(
                "interceptor blocks a guest command",
                "shell",
                json!({"command": "echo rm -rf /"}),
                format!("shell `echo rm -rf /` refused: {blocked}"),
            ),
            refused(
                "interceptor blocks a data shell tool",
                "say",
                json!({"arg": "rm -rf /"}),
                format!("command of `printf %s 'rm -rf /'` refused: {blocked}"),
            ),
        ],
    )
    .await;
    // The guard itself is still there and counted the calls it saw.
    let stats = bounded("/guard-stats", host.invoke_command("guard-stats", ""))
        .await
        .expect("guard-stats");
    assert!(stats.display.is_some(), "{stats:?}");
    host.shutdown().await;
}

/// A data tool named in a deny rule's `tools` is blocked by the guard chain
/// before it runs. The tool's arguments are `{"arg": …}`, so the rule's
/// `commandPattern` has to be matched against the command the tool would run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_rule_naming_a_data_tool_blocks_it_before_it_runs() {
    let lab = Lab::new();
    data_tool(&lab, &shell_tool("deploy", "touch deployed-{arg}"));
    plugin(
        &lab,
        &json!({
            "name": "no-prod",
            "description": "no deploys to production",
            "deny": [{"tools": ["deploy"], "commandPattern": "prod", "reason": "production is deployed by hand"}]
        }),
    );
    lab.trust_workspace();
    let host = start(&lab, &[]).await;
    let err = bounded("deploy", host.call_tool("deploy", json!({"arg": "prod"})))
        .await
        .expect_err("the rule blocks it");
    assert_eq!(
        err.to_string(),
        "tool `deploy` blocked by plugin `no-prod` rule 1: production is deployed by hand"
    );
    assert!(!lab.workspace.join("deployed-prod").exists());
    host.shutdown().await;
}

/// The same rule as seen by the guard chain when the call does carry the
/// argument the rule reads: blocked before the tool runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_rule_naming_a_data_tool_blocks_a_call_carrying_its_field() {
    let lab = Lab::new();
    data_tool(&lab, &shell_tool("deploy", "touch deployed-{arg}"));
    plugin(
        &lab,
        &json!({
            "name": "no-prod",
            "description": "no deploys to production",
            "deny": [{"tools": ["deploy"], "commandPattern": "prod", "reason": "production is deployed by hand"}]
        }),
    );
    lab.trust_workspace();
    let host = start(&lab, &[]).await;
    let err = bounded(
        "deploy",
        host.call_tool("deploy", json!({"arg": "prod", "command": "deploy prod"})),
    )
    .await
    .expect_err("the rule blocks it");
    assert_eq!(
        err.to_string(),
        "tool `deploy` blocked by plugin `no-prod` rule 1: production is deployed by hand"
    );
    assert!(!lab.workspace.join("deployed-prod").exists());
    // Another call of the same tool still runs.
    let ok = bounded(
        "deploy",
        host.call_tool("deploy", json!({"arg": "staging"})),
    )
    .await
    .expect("deploy staging");
    assert!(!ok.is_error, "{ok:?}");
    assert!(lab.workspace.join("deployed-staging").exists());
    host.shutdown().await;
}

/// `shell: false` and `fs_write: false` in the policy: the declared
/// capability is refused, and the refusal names the policy file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_switches_refuse_declared_capabilities_naming_the_file() {
    let lab = Lab::new();
    shell_workspace(&lab.workspace);
    std::fs::create_dir_all(lab.workspace.join("out")).expect("out");
    let policy = user_policy(&lab, &json!({"shell": false, "fs_write": false}));
    data_tool(&lab, &say_tool());
    let dir = prober(
        &lab,
        &json!({"read": ["docs/**"], "write": ["out/**"], "shell": ["echo **"]}),
        None,
    );
    lab.trust_workspace();
    let host = start(&lab, &[dir]).await;
    let by_policy = |key: &str| {
        format!(
            "declared by the extension but refused by policy: `{key}: false` in `{}`",
            policy.display()
        )
    };
    run_cases(
        &host,
        vec![
            answered(
                "control: reads are still granted",
                "fs_read",
                json!({"path": "docs/guide.md"}),
                "the guide",
            ),
            refused(
                "policy `fs_write: false`",
                "fs_write",
                json!({"path": "out/x.txt", "text": "x"}),
                format!("fs-write `out/x.txt` refused: {}", by_policy("fs_write")),
            ),
            refused(
                "policy `shell: false`",
                "shell",
                json!({"command": "echo hi"}),
                format!("shell `echo hi` refused: {}", by_policy("shell")),
            ),
            refused(
                "policy `shell: false` (data)",
                "say",
                json!({"arg": "hi"}),
                format!(
                    "command of `printf %s 'hi'` refused: {}",
                    by_policy("shell")
                ),
            ),
        ],
    )
    .await;
    assert!(!lab.workspace.join("out/x.txt").exists());
    host.shutdown().await;
}

// ---------------------------------------------------------------------------
// env (through the real binary: environment variables are process-wide, so
// each test sets them on its own `zotbox` child only)

/// A secret in the host's environment that nothing is granted.
const SECRET: (&str, &str) = ("ZOTBOX_TEST_SECRET", "hunter2-secret");
/// A variable the prober is granted.
const VISIBLE: (&str, &str) = ("ZOTBOX_TEST_VISIBLE", "seen");

/// Calls `tool` with `args` through `zotbox --ext PROBER call`, with the
/// secret, the visible variable and `LANG` in the child's environment.
fn call_with_env(lab: &Lab, prober: &Path, tool: &str, args: &Value) -> Run {
    let prober = prober.to_str().expect("utf-8 path");
    zotbox_with(
        lab,
        &[SECRET, VISIBLE, ("LANG", "C.UTF-8")],
        &["--ext", prober, "call", tool, &args.to_string()],
    )
}

/// `(exit status, stdout)` of a run.
fn outcome(run: &Run) -> (Option<i32>, &str) {
    (run.code, run.stdout.as_str())
}

#[test]
fn the_guest_sees_only_granted_variables() {
    let lab = Lab::new();
    let dir = prober(&lab, &json!({"env": ["LANG", "ZOTBOX_TEST_VISIBLE"]}), None);
    let env = |name: &str| call_with_env(&lab, &dir, "env", &json!({ "name": name }));
    let not_found = |name: &str| format!("`{name}`: environment variable not found\n");
    // Granted and set: visible.
    assert_eq!(outcome(&env("ZOTBOX_TEST_VISIBLE")), (Some(0), "seen\n"));
    assert_eq!(outcome(&env("LANG")), (Some(0), "C.UTF-8\n"));
    // Attack: read the host's secrets, home and path.
    for name in ["ZOTBOX_TEST_SECRET", "HOME", "PATH"] {
        assert_eq!(
            outcome(&env(name)),
            (Some(3), not_found(name).as_str()),
            "{name}"
        );
    }
}

#[test]
fn a_policy_env_ceiling_removes_a_declared_variable() {
    let lab = Lab::new();
    user_policy(&lab, &json!({"env": ["LANG"]}));
    let dir = prober(&lab, &json!({"env": ["LANG", "ZOTBOX_TEST_VISIBLE"]}), None);
    let env = |name: &str| call_with_env(&lab, &dir, "env", &json!({ "name": name }));
    assert_eq!(outcome(&env("LANG")), (Some(0), "C.UTF-8\n"));
    assert_eq!(
        outcome(&env("ZOTBOX_TEST_VISIBLE")),
        (
            Some(3),
            "`ZOTBOX_TEST_VISIBLE`: environment variable not found\n"
        )
    );
}

/// Shell commands run with a scrubbed environment: `PATH`, `LANG`, and
/// `HOME` and `TMPDIR` (a private folder, never the workspace), plus what
/// `sh` sets itself; never the host's.
#[test]
fn shell_commands_run_in_a_scrubbed_environment() {
    let lab = Lab::new();
    data_tool(&lab, &shell_tool("envdump", "env"));
    let dir = prober(&lab, &json!({"shell": ["env"]}), None);
    lab.trust_workspace();
    let guest = call_with_env(&lab, &dir, "shell", &json!({"command": "env"}));
    let data = call_with_env(&lab, &dir, "envdump", &json!({}));
    for (front, run) in [("guest", &guest), ("data", &data)] {
        assert_eq!(run.code, Some(0), "{front}: {run:#?}");
        let stdout = run
            .stdout
            .strip_prefix("exit=Some(0) stdout=")
            .unwrap_or(&run.stdout);
        let mut names: Vec<&str> = stdout
            .lines()
            .filter_map(|line| line.split_once('=').map(|(name, _)| name))
            .filter(|name| {
                !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_')
            })
            .collect();
        names.sort_unstable();
        let extra: Vec<&&str> = names
            .iter()
            .filter(|name| {
                ![
                    "HOME", "LANG", "PATH", "PWD", "SHLVL", "_", "OLDPWD", "TMPDIR",
                ]
                .contains(name)
            })
            .collect();
        assert!(
            extra.is_empty(),
            "{front}: unexpected variables {extra:?} in {stdout}"
        );
        for secret in [SECRET.1, VISIBLE.1] {
            assert!(
                !run.stdout.contains(secret),
                "{front}: `{secret}` leaked: {stdout}"
            );
        }
        let home = stdout
            .lines()
            .find_map(|l| l.strip_prefix("HOME="))
            .unwrap_or_else(|| panic!("{front}: no HOME in {stdout}"));
        assert!(
            !std::path::Path::new(home).starts_with(&lab.workspace),
            "{front}: HOME is in the workspace: {home}"
        );
        assert!(
            stdout.lines().any(|l| l == format!("TMPDIR={home}")),
            "{front}: TMPDIR is not the private HOME in {stdout}"
        );
        for line in ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"] {
            assert!(
                stdout.lines().any(|l| l == line),
                "{front}: no `{line}` in {stdout}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// guard: refusal plugins through the CLI

#[test]
fn zotbox_check_reports_a_deny_rule_hit_also_in_another_case() {
    let lab = Lab::new();
    plugin(&lab, &no_kubectl());
    let check = |command: &str| {
        let args = json!({ "command": command }).to_string();
        zotbox_with(&lab, &[], &["check", "bash", &args])
    };
    let blocked = "block by plugin `no-kubectl` rule 1: deploys to the cluster\n";
    // Attack: the rule's command, as written and in other cases and spacing.
    for command in [
        "kubectl apply -f x",
        "KUBECTL APPLY -f x",
        "Kubectl\tApply -f x",
    ] {
        assert_eq!(outcome(&check(command)), (Some(3), blocked), "{command:?}");
    }
    // Control: other commands pass.
    assert_eq!(outcome(&check("kubectl get pods")), (Some(0), "allow\n"));
}

/// A plugin whose pattern is not a regex is reported and skipped; the other
/// plugins still guard.
#[test]
fn an_invalid_regex_is_reported_and_the_other_plugins_still_guard() {
    let lab = Lab::new();
    plugin(&lab, &no_kubectl());
    let broken = plugin(
        &lab,
        &json!({
            "name": "broken",
            "description": "a pattern that does not compile",
            "deny": [{"tools": ["bash"], "commandPattern": "rm (-rf", "reason": "never loads"}]
        }),
    );
    let problem = format!(
        "`{}`: field `deny[0].commandPattern` (rule 1) is not a valid regex: ",
        broken.display()
    );
    let list = zotbox_with(&lab, &[], &["list"]);
    list.expect_code(0);
    let skipped = format!("skipped {problem}");
    assert!(
        list.stdout.lines().any(|l| l.starts_with(&skipped)),
        "{}",
        list.stdout
    );
    let doctor = zotbox_with(&lab, &[], &["doctor"]);
    doctor.expect_code(1);
    let finding = format!("  data file skipped: {problem}");
    assert!(
        doctor.stdout.lines().any(|l| l.starts_with(&finding)),
        "{}",
        doctor.stdout
    );
    let args = json!({"command": "kubectl apply -f x"}).to_string();
    assert_eq!(
        outcome(&zotbox_with(&lab, &[], &["check", "bash", &args])),
        (
            Some(3),
            "block by plugin `no-kubectl` rule 1: deploys to the cluster\n"
        )
    );
    let args = json!({"command": "rm (-rf"}).to_string();
    assert_eq!(
        outcome(&zotbox_with(&lab, &[], &["check", "bash", &args])),
        (Some(0), "allow\n")
    );
}

// ---------------------------------------------------------------------------
// policy

#[test]
fn a_native_extension_is_refused_by_native_extensions_false() {
    let lab = Lab::new();
    let policy = user_policy(&lab, &json!({"native_extensions": false}));
    crate::support::ext("native").write_in(&lab.user_dir());
    let dir = prober(&lab, &json!({}), None);
    let list = zotbox_with(&lab, &[], &["--ext", dir.to_str().expect("utf-8"), "list"]);
    // A refused extension failed to start: `list` exits 1, as its help says.
    list.expect_code(1);
    let row = |name: &str| {
        list.stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_else(|| panic!("no `{name}` row: {}", list.stdout))
    };
    // NAME VERSION KIND ORIGIN STATE …
    assert_eq!(
        row("native")[..5],
        ["native", "1.0.0", "native", "user", "failed"]
    );
    // The sandboxed guest is unaffected.
    assert_eq!(
        row("prober")[..5],
        ["prober", "0.1.0", "wasm", "explicit", "ready"]
    );
    let reason = format!(
        "native: native extensions are refused by policy `{}` (`native_extensions: false`)",
        policy.display()
    );
    assert!(list.stdout.lines().any(|l| l == reason), "{}", list.stdout);
}

/// A guest that declares far more memory than the policy's ceiling gets the
/// ceiling, and dies at it; the host and the other guests keep running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_memory_ceiling_lowers_a_guests_memory() {
    let lab = Lab::new();
    user_policy(&lab, &json!({"max_memory_mb": 32}));
    let hostile = guests::folder(
        &lab.dev,
        "hostile",
        Form::Wasm,
        Some(json!({"memory_mb": 1024, "tool_timeout_ms": 30_000})),
    );
    let dir = prober(&lab, &json!({}), None);
    let host = start(&lab, &[hostile, dir]).await;
    let started = Instant::now();
    assert_eq!(
        answer(&host, "alloc", json!({})).await,
        (
            true,
            "host error: extension `hostile` 0.1.0: ran out of memory (limit 32 MiB across all memories and tables)".to_owned()
        )
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_pong(&host).await;
    host.shutdown().await;
}

/// An interceptor that misses its deadline blocks when the policy says
/// `intercept_failure: closed` (and its deadline is the policy's ceiling);
/// without that policy the same miss lets the call through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intercept_failure_closed_blocks_on_a_missed_intercept() {
    for closed in [true, false] {
        let lab = Lab::new();
        let mut policy = json!({"max_intercept_timeout_ms": 300});
        if closed {
            policy["intercept_failure"] = json!("closed");
        }
        user_policy(&lab, &policy);
        crate::support::ext("slowpoke")
            .flags(&["--intercept", "allow", "--slow-intercept", "2"])
            .write_in(&lab.user_dir());
        let dir = prober(&lab, &json!({}), None);
        let host = start(&lab, &[dir]).await;
        let expected = if closed {
            (
                true,
                "host error: tool `ping` blocked by slowpoke: extension `slowpoke` 1.0.0: \
                 intercept of `tool_call` timed out after 300ms; blocking (intercepts fail closed)"
                    .to_owned(),
            )
        } else {
            (false, "pong".to_owned())
        };
        assert_eq!(
            answer(&host, "ping", json!({})).await,
            expected,
            "closed: {closed}"
        );
        host.shutdown().await;
    }
}

/// `require_approval: true`: even a tool that says `autoApprove: true` (the
/// default) waits for `zotbox approve`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_approval_makes_an_auto_approved_tool_wait_for_approval() {
    let lab = Lab::new();
    user_policy(&lab, &json!({"require_approval": true}));
    data_tool(&lab, &say_tool());
    lab.trust_workspace();
    let host = start(&lab, &[]).await;
    assert_eq!(
        answer(&host, "say", json!({"arg": "hi"})).await,
        (
            true,
            "tool `say` needs approval before it runs: run `zotbox approve say`".to_owned()
        )
    );
    zotbox_with(&lab, &[], &["approve", "say"]).expect_code(0);
    assert_eq!(
        answer(&host, "say", json!({"arg": "hi"})).await,
        (false, "hi".to_owned())
    );
    host.shutdown().await;
}

/// A user policy can only narrow the system one: what the system layer
/// refuses stays refused, and the refusal names the system file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_policy_cannot_widen_the_system_policy() {
    use zotbox::policy::{Layer, PolicyFile, Scope};
    let lab = Lab::new();
    let server = TestServer::start().await;
    let system = lab.home.join("system/policy.json");
    let system_layer = Layer {
        scope: Scope::System,
        path: system.clone(),
        file: PolicyFile {
            http: Some(vec!["https://api.example.com".to_owned()]),
            shell: Some(false),
            env: Some(Vec::new()),
            ..PolicyFile::default()
        },
    };
    let user_layer = Layer {
        scope: Scope::User,
        path: user_policy_path(&lab),
        file: PolicyFile {
            http: Some(vec![server.origin()]),
            shell: Some(true),
            env: Some(vec!["LANG".to_owned()]),
            extra_root_certificates: vec![server.write_ca(&lab.home)],
            ..PolicyFile::default()
        },
    };
    data_tool(&lab, &fetch_tool(&server));
    let dir = prober(
        &lab,
        &json!({"http": [server.origin()], "shell": ["echo **"], "env": ["LANG"]}),
        None,
    );
    let policy = Policy::from_layers(vec![system_layer, user_layer]);
    lab.trust_workspace();
    let host = start_with(&lab, &[dir], policy, RestartPolicy::never()).await;
    let url = server.url("/ok");
    let by_system = |rule: &str| format!("declared by the extension but refused by policy: {rule}");
    let http_rule = format!("not among the `http` origins of `{}`", system.display());
    let shell_rule = format!("`shell: false` in `{}`", system.display());
    run_cases(
        &host,
        vec![
            refused(
                "user policy widens http",
                "http_get",
                json!({ "url": url }),
                format!("http `{url}` refused: {}", by_system(&http_rule)),
            ),
            refused(
                "user policy widens http (data)",
                "fetch",
                json!({"arg": "ok"}),
                format!("fetch of `{url}` refused: {}", by_system(&http_rule)),
            ),
            refused(
                "user policy widens shell",
                "shell",
                json!({"command": "echo hi"}),
                format!("shell `echo hi` refused: {}", by_system(&shell_rule)),
            ),
            refused(
                "user policy widens env",
                "env",
                json!({"name": "LANG"}),
                "`LANG`: environment variable not found",
            ),
        ],
    )
    .await;
    host.shutdown().await;
}

/// The cells of a `policy explain` table, by header: each column runs from
/// its header's offset to the next one's.
fn table_cells(table: &str) -> Vec<Vec<String>> {
    let mut lines = table.lines();
    let header = lines.next().expect("a header line");
    let starts: Vec<usize> = [
        "CAPABILITY",
        "DECLARED",
        "POLICY ALLOWS",
        "GRANTED",
        "DECIDED BY",
    ]
    .iter()
    .map(|h| {
        header
            .find(h)
            .unwrap_or_else(|| panic!("no `{h}` in `{header}`"))
    })
    .collect();
    lines
        .map(|line| {
            (0..starts.len())
                .map(|i| {
                    let end = starts
                        .get(i + 1)
                        .copied()
                        .unwrap_or(line.len())
                        .min(line.len());
                    line.get(starts[i]..end).unwrap_or("").trim().to_owned()
                })
                .collect()
        })
        .collect()
}

#[test]
fn policy_explain_shows_the_narrowing_row_by_row() {
    let lab = Lab::new();
    let system = system_policy(
        &lab,
        &json!({"http": ["https://*.example.com"], "rewrite": []}),
    );
    let user = user_policy(
        &lab,
        &json!({"env": ["LANG"], "shell": false, "max_memory_mb": 32, "events": ["tool_call"]}),
    );
    let dir = prober(
        &lab,
        &json!({
            "http": ["https://api.example.com", "https://evil.dev"],
            "read": ["docs/**"],
            "write": ["out/**"],
            "shell": ["echo **"],
            "env": ["LANG", "ZOTBOX_TEST_VISIBLE"],
            "events": ["tool_call", "assistant_message"],
            "rewrite": ["tool_call"],
        }),
        Some(json!({"memory_mb": 256})),
    );
    let run = zotbox_with(
        &lab,
        &[],
        &[
            "--ext",
            dir.to_str().expect("utf-8"),
            "policy",
            "explain",
            "prober",
        ],
    );
    run.expect_code(0);
    let mut lines = run.stdout.lines();
    assert_eq!(
        lines.next(),
        Some(
            format!(
                "extension `prober` (wasm, {})",
                dir.join("extension.json").display()
            )
            .as_str()
        )
    );
    let rest: Vec<&str> = lines.collect();
    let table_end = rest
        .iter()
        .position(|l| l.starts_with("memory:"))
        .expect("memory line");
    let cells = table_cells(&rest[..table_end].join("\n"));
    let row = |cells: &[&str]| cells.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>();
    let (system, user) = (system.display(), user.display());
    assert_eq!(
        cells,
        vec![
            row(&[
                "http",
                "https://api.example.com, https://evil.dev",
                &format!("https://*.example.com (`{system}`)"),
                "https://api.example.com",
                &format!("`https://evil.dev` refused: not among the `http` origins of `{system}`"),
            ]),
            row(&[
                "fs-read",
                "docs/**",
                "anything declared",
                "docs/**",
                "declared, allowed"
            ]),
            row(&[
                "fs-write",
                "out/**",
                "anything declared",
                "out/**",
                "declared, allowed"
            ]),
            row(&[
                "shell",
                "echo **",
                &format!("nothing: `shell: false` in `{user}`"),
                "-",
                &format!("`echo **` refused: `shell: false` in `{user}`"),
            ]),
            row(&[
                "env",
                "LANG, ZOTBOX_TEST_VISIBLE",
                &format!("LANG (`{user}`)"),
                "LANG",
                &format!("`ZOTBOX_TEST_VISIBLE` refused: not among the `env` names of `{user}`"),
            ]),
            row(&[
                "events",
                "tool_call, assistant_message",
                &format!("tool_call (`{user}`)"),
                "tool_call",
                &format!("`assistant_message` refused: not among the `events` names of `{user}`"),
            ]),
            row(&[
                "rewrite",
                "tool_call",
                &format!("none (`{system}`)"),
                "-",
                &format!("`tool_call` refused: not among the `rewrite` names of `{system}`"),
            ]),
            row(&["secrets", "-", "anything declared", "-", "not declared"]),
        ],
        "{}",
        run.stdout
    );
    // The control paths follow (see `control_paths.rs`).
    // Each limit names the rule that decided it.
    assert_eq!(
        rest[table_end..table_end + 4],
        [
            format!("memory: 32 MiB (the ceiling of policy `{user}`)").as_str(),
            "tool timeout: 60000 ms (the default)",
            "intercept timeout: 5000 ms (the default)",
            "the extension declared more than the policy allows; it runs with the smaller grant",
        ]
    );
    // What a granted event reaches, in words; nothing of a refused one.
    assert_eq!(
        rest[table_end + 4..table_end + 6],
        [
            "events tool_call: it sees every tool call of the agent with its arguments (the \
             files written, the commands run), and may block any",
            "in short, granted: http 1 (`https://api.example.com`); fs-read 1 (`docs/**`); \
             fs-write 1 (`out/**`); env 1 (`LANG`); events 1 (`tool_call`)",
        ]
    );
}

/// A policy that does not parse stops the host, naming the file and the
/// field: running without the ceilings a team set would fail open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_policy_stops_the_host_naming_the_file_and_field() {
    let lab = Lab::new();
    let user = user_policy(&lab, &json!({"fs_write": "no"}));
    let dir = prober(&lab, &json!({}), None);
    // One error for every file people write: the path names the policy.
    let expected = format!(
        "`{}`: field `fs_write`: invalid type: string \"no\", expected a boolean \
         at line 2 column 18",
        user.display()
    );
    let err = Policy::load(&system_policy_path(&lab), &user).expect_err("the policy is malformed");
    assert_eq!(err.to_string(), expected);
    // The binary refuses to start anything, whatever the command.
    for args in [vec!["list"], vec!["call", "ping"]] {
        let mut args = args;
        args.splice(0..0, ["--ext", dir.to_str().expect("utf-8")]);
        let run = zotbox_with(&lab, &[], &args);
        assert_eq!(
            (run.code, run.stderr.as_str()),
            (Some(1), format!("error: {expected}\n").as_str()),
            "{args:?}"
        );
    }
    // A malformed system policy stops it too.
    std::fs::remove_file(&user).expect("remove the user policy");
    let system = system_policy(&lab, &json!({"intercept_failure": "ajar"}));
    let run = zotbox_with(&lab, &[], &["list"]);
    assert_eq!(run.code, Some(1), "{run:#?}");
    assert!(
        run.stderr.starts_with(&format!(
            "error: `{}`: field `intercept_failure`: unknown variant `ajar`",
            system.display()
        )),
        "{}",
        run.stderr
    );
}

// ---------------------------------------------------------------------------
// approval

#[test]
fn an_unapproved_tool_waits_for_zotbox_approve_and_an_edit_revokes_it() {
    let lab = Lab::new();
    let deploy = |command: &str| {
        json!({"name": "deploy", "description": "deploys", "kind": "shell",
               "command": command, "autoApprove": false})
    };
    let path = data_tool(&lab, &deploy("printf deployed-{arg}"));
    lab.trust_workspace();
    let call = || zotbox_with(&lab, &[], &["call", "deploy", r#"{"arg":"x"}"#]);
    // Attack: run a tool that asks for approval without it.
    assert_eq!(
        outcome(&call()),
        (
            Some(3),
            "tool `deploy` needs approval before it runs: run `zotbox approve deploy`\n"
        )
    );
    let approve = zotbox_with(&lab, &[], &["approve", "deploy"]);
    assert_eq!(
        outcome(&approve),
        (
            Some(0),
            "approved `deploy`: shell `printf deployed-{arg}`; editing its manifest revokes the \
             approval\n"
        )
    );
    assert_eq!(outcome(&call()), (Some(0), "deployed-x\n"));
    // Attack: swap the approved template for another command.
    write_json(&path, &deploy("printf changed-{arg}"));
    // Even once the user trusts the workspace as it now is, the approval
    // still binds the template.
    lab.trust_workspace();
    assert_eq!(
        outcome(&call()),
        (
            Some(3),
            "tool `deploy` changed since it was approved: run `zotbox approve deploy` to approve \
             this version\n"
        )
    );
    // Control: a description-only edit keeps the approval of the operation.
    zotbox_with(&lab, &[], &["approve", "deploy"]).expect_code(0);
    let mut described = deploy("printf changed-{arg}");
    described["description"] = json!("deploys, described better");
    write_json(&path, &described);
    lab.trust_workspace();
    assert_eq!(outcome(&call()), (Some(0), "changed-x\n"));
}

// ---------------------------------------------------------------------------
// audit

/// `(extension, capability, subject, decision, reason)` of an audit line.
fn audit_row(line: &Value) -> (String, String, String, String, String) {
    let field = |key: &str| line[key].as_str().unwrap_or("").to_owned();
    (
        field("extension"),
        field("capability"),
        field("subject"),
        field("decision"),
        field("reason"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_has_one_line_per_use_and_every_guard_decision() {
    let lab = Lab::new();
    shell_workspace(&lab.workspace);
    data_tool(&lab, &say_tool());
    plugin(&lab, &no_kubectl());
    let dir = prober(
        &lab,
        &json!({"read": ["docs/**"], "shell": ["echo **"]}),
        None,
    );
    lab.trust_workspace();
    let host = start(&lab, &[dir]).await;
    let calls = [
        ("fs_read", json!({"path": "docs/guide.md"})),
        ("fs_read", json!({"path": "secret.txt"})),
        ("fs_write", json!({"path": "out/x", "text": "x"})),
        ("http_get", json!({"url": "https://example.com/"})),
        ("shell", json!({"command": "echo hi"})),
        ("shell", json!({"command": "cat secret.txt"})),
        ("shell", json!({"command": "echo kubectl apply"})),
        ("say", json!({"arg": "hi"})),
    ];
    for (tool, args) in &calls {
        answer(&host, tool, args.clone()).await;
    }
    host.shutdown().await;
    let lines = audit_lines(&lab);
    for line in &lines {
        let time = line["time"].as_str().unwrap_or("");
        assert!(
            time.len() >= 20 && time.ends_with('Z'),
            "bad time in {line}"
        );
    }
    let row = |e: &str, c: &str, s: &str, d: &str, r: &str| {
        (
            e.to_owned(),
            c.to_owned(),
            s.to_owned(),
            d.to_owned(),
            r.to_owned(),
        )
    };
    let uses: Vec<_> = lines
        .iter()
        .map(audit_row)
        .filter(|(_, capability, ..)| capability != "guard")
        .collect();
    let blocked = "blocked by plugin `no-kubectl` rule 1: deploys to the cluster";
    assert_eq!(
        uses,
        vec![
            row("prober", "fs-read", "docs/guide.md", "allow", ""),
            row(
                "prober",
                "fs-read",
                "secret.txt",
                "deny",
                "not within the granted read paths (granted: docs/**)"
            ),
            row(
                "prober",
                "fs-write",
                "out/x",
                "deny",
                "not within the granted write paths (granted: none)"
            ),
            row(
                "prober",
                "http",
                "https://example.com/",
                "deny",
                "host `example.com` is not granted (granted: none)"
            ),
            row("prober", "shell", "echo hi", "allow", ""),
            row(
                "prober",
                "shell",
                "cat secret.txt",
                "deny",
                "it matches no granted command pattern (granted: echo **)"
            ),
            row("prober", "shell", "echo kubectl apply", "deny", blocked),
            row("data:say", "shell", "printf %s 'hi'", "allow", ""),
        ],
        "{lines:#?}"
    );
    // The guard chain: every tool call, then every command a shell use asks
    // about as `bash`, in order; the deny rule's hit names the rule.
    let guard: Vec<_> = lines
        .iter()
        .map(audit_row)
        .filter(|(_, capability, ..)| capability == "guard")
        .collect();
    let mut expected = Vec::new();
    for (tool, args) in &calls {
        expected.push(row(
            "guard",
            "guard",
            &format!("{tool} {args}"),
            "allow",
            "",
        ));
        let command = match *tool {
            "shell" if args["command"] != "cat secret.txt" => args["command"].as_str(),
            "say" => Some("printf %s 'hi'"),
            _ => None,
        };
        if let Some(command) = command {
            let subject = format!("bash {}", json!({ "command": command }));
            expected.push(if command.contains("kubectl") {
                row(
                    "plugin `no-kubectl` rule 1",
                    "guard",
                    &subject,
                    "deny",
                    "deploys to the cluster",
                )
            } else {
                row("guard", "guard", &subject, "allow", "")
            });
        }
    }
    assert_eq!(guard, expected, "{lines:#?}");
}

// ---------------------------------------------------------------------------
// Manifests a cloned repository holds: read capped, never from a FIFO.

/// An extension manifest of 64 MiB (sparse: no disk), extension manifests
/// that are a FIFO or a link to `/dev/zero`, and a data package whose
/// manifest is a FIFO, in the workspace: `zotbox list` refuses each at
/// once, naming it, instead of reading 64 MiB into memory (or, linked to
/// `/proc/self/pagemap`, without end) or waiting forever for a writer. The
/// FIFO and the device are named, not skipped: zot, which reads them as
/// they are, hangs on them.
#[test]
fn a_workspace_manifest_that_is_huge_or_a_fifo_is_refused_at_once() {
    let lab = Lab::new();
    let piped = lab.workspace.join(".zot/extensions/piped/extension.json");
    std::fs::create_dir_all(piped.parent().expect("a folder")).expect("mkdir");
    nix::unistd::mkfifo(&piped, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let zero = lab.workspace.join(".zot/extensions/zero/extension.json");
    std::fs::create_dir_all(zero.parent().expect("a folder")).expect("mkdir");
    symlink("/dev/zero", &zero).expect("a link to /dev/zero");
    let huge = lab.workspace.join(".zot/extensions/huge/extension.json");
    std::fs::create_dir_all(huge.parent().expect("a folder")).expect("mkdir");
    std::fs::File::create(&huge)
        .and_then(|file| file.set_len(64 * 1024 * 1024))
        .expect("a sparse manifest");
    let fifo = lab.workspace.join(".zot/packages/pipe/extension.json");
    std::fs::create_dir_all(fifo.parent().expect("a folder")).expect("mkdir");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");

    let run = zotbox_bounded(&lab, &["list"]);
    run.expect_code(1);
    assert!(
        run.stdout.contains(&format!(
            "huge: `{}`: file is larger than 1048576 bytes\n",
            huge.display()
        )),
        "{run:?}"
    );
    for (name, path) in [("piped", &piped), ("zero", &zero)] {
        assert!(
            run.stdout.contains(&format!(
                "{name}: cannot read `{}`: not a regular file\n",
                path.display()
            )),
            "{run:?}"
        );
    }
    assert!(
        run.stdout.contains(&format!(
            "skipped cannot read `{}`: not a regular file\n",
            fifo.display()
        )),
        "{run:?}"
    );
    let run = zotbox_bounded(&lab, &["doctor"]);
    run.expect_code(1);
    assert!(
        run.stdout.contains(&format!(
            "extension `zero`: invalid: cannot read `{}`: not a regular file\n",
            zero.display()
        )),
        "{run:?}"
    );
    // Warned of once, however often doctor looks.
    assert_eq!(
        run.stderr.matches("zero/extension.json").count(),
        1,
        "{}",
        run.stderr
    );
    // Data packages are read for skills too.
    let run = zotbox_bounded(&lab, &["skills", "list"]);
    run.expect_code(0);
    assert!(
        run.stderr.contains(&format!(
            "cannot read `{}`: not a regular file\n",
            fifo.display()
        )),
        "{run:?}"
    );
}

/// A wasm extension whose `wasm` is a FIFO (in a trusted workspace: trust
/// records it as it is) or a sparse file over the 256 MiB a guest may be (a
/// folder loaded with `--ext`; trust refuses a workspace that large): each
/// fails to start at once, named, instead of blocking or filling memory.
#[test]
fn a_wasm_path_that_is_a_fifo_or_oversized_fails_to_start_at_once() {
    let lab = Lab::new();
    let extension = |dir: &Path, name: &str| {
        std::fs::create_dir_all(dir).expect("mkdir");
        write_json(
            &dir.join("extension.json"),
            &json!({"name": name, "version": "0.1.0", "wasm": "guest.wasm"}),
        );
        dir.join("guest.wasm")
    };
    let fifo = extension(&lab.workspace.join(".zot/extensions/piped"), "piped");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    lab.trust_workspace();
    let huge_dir = lab.dev.join("huge");
    let huge = extension(&huge_dir, "huge");
    std::fs::File::create(&huge)
        .and_then(|file| file.set_len(300 * 1024 * 1024))
        .expect("a sparse wasm file");

    let run = zotbox_bounded(&lab, &["--ext", &huge_dir.display().to_string(), "list"]);
    run.expect_code(1);
    assert!(
        run.stdout.contains(&format!(
            "piped: cannot start: cannot read `{}`: not a regular file\n",
            fifo.display()
        )),
        "{run:?}"
    );
    assert!(
        run.stdout.contains(&format!(
            "huge: cannot start: cannot load `{}`: it is larger than the 256 MiB a guest may be\n",
            huge.display()
        )),
        "{run:?}"
    );
}

#[test]
fn the_install_question_comes_after_zotbox_s_own_count_of_the_grant() {
    // Attack: 400 harmless read globs made one cell of 7 000 characters,
    // every row of the grant table was padded to it, and the rows that
    // mattered (an outbound origin, `write **`) lay hundreds of wrapped
    // lines above "install with the grant above? [y/N]".
    let lab = Lab::new();
    let mut read: Vec<String> = vec!["docs/**".to_owned()];
    read.extend((0..400).map(|n| format!("docs/page{n:04}.md")));
    let dir = crate::support::prober_in(
        &lab.dev,
        &json!({"http": ["https://exfil.example"], "read": read, "write": ["**"]}),
    );
    let install = lab.zotbox(&["ext", "install", &dir.display().to_string()]);
    install.expect_code(1);
    let lines: Vec<&str> = install.stdout.lines().collect();
    assert_eq!(
        lines.last().copied(),
        Some(
            "in short, granted: http 1 (`https://exfil.example`); fs-read 401 (`docs/**`, \
             `docs/page0000.md`, `docs/page0001.md`, and 398 more); fs-write 1 (`**`)"
        ),
        "{install:#?}"
    );
    let rows: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("http ") || l.starts_with("fs-write "))
        .collect();
    assert_eq!(rows.len(), 2, "{install:#?}");
    for row in rows {
        assert!(
            row.chars().count() < 2600,
            "a row padded to the longest cell: {row}"
        );
    }
    assert!(
        install
            .stdout
            .contains("more characters; --json shows all)"),
        "{install:#?}"
    );
}
