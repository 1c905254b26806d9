//! The real `zotbox` binary, in a fresh temp dir per test.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::{Ext, Lab, ext, fixture, make_executable};

/// A lab with one installed (user) extension `weather` that intercepts
/// `tool_call`s mentioning `rm -rf` and subscribes to `turn_start`.
fn weather_lab() -> (Lab, Ext) {
    let lab = Lab::new();
    let weather = ext("weather")
        .flags(&["--subscribe", "turn_start"])
        .flags(&["--intercept", "block", "--pattern", "rm -rf"])
        .write_in(&lab.user_dir());
    (lab, weather)
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("`{line}`: {e}")))
        .collect()
}

#[test]
fn list_prints_an_aligned_table_and_json_lines() {
    let (lab, weather) = weather_lab();
    let broken = lab.project_dir().join("x");
    std::fs::create_dir_all(&broken).expect("folder");
    std::fs::write(broken.join("extension.json"), "{").expect("write");

    // An invalid manifest among them: exit status 1, as `--help` says.
    let run = lab.zotbox(&["list"]);
    run.expect_code(1);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        lines[0],
        "NAME     VERSION  KIND    ORIGIN   STATE    COMMANDS  TOOLS         EVENTS      INTERCEPTS",
        "{}",
        run.stdout
    );
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        row,
        [
            "weather",
            "1.0.0",
            "native",
            "user",
            "ready",
            "weather",
            "weather_tool",
            "turn_start",
            "tool_call"
        ]
    );
    // Columns line up under their headers.
    assert_eq!(lines[1].find("ready"), lines[0].find("STATE"));
    assert_eq!(lines[2].find("invalid"), lines[0].find("STATE"));
    assert!(lines[2].starts_with("x "), "{}", run.stdout);
    let manifest = broken.join("extension.json");
    assert!(
        lines[3].starts_with(&format!("x: `{}`: ", manifest.display())),
        "{}",
        run.stdout
    );
    assert!(lines[3].contains("EOF while parsing"), "{}", run.stdout);

    let run = lab.zotbox(&["list", "--json"]);
    run.expect_code(1);
    let entries = json_lines(&run.stdout);
    assert_eq!(entries.len(), 2, "{}", run.stdout);
    assert_eq!(
        entries[0],
        json!({
            "name": "weather",
            "version": "1.0.0",
            "kind": "native",
            "origin": "user",
            "path": weather.dir.join("extension.json"),
            "state": "ready",
            "commands": ["weather"],
            "tools": ["weather_tool"],
            "events": ["turn_start"],
            "intercepts": ["tool_call"],
            "restarts": 0,
        })
    );
    assert_eq!(entries[1]["name"], "x");
    assert_eq!(entries[1]["state"], "invalid");
    assert_eq!(entries[1]["origin"], "project");
    assert!(
        entries[1]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("EOF while parsing"),
        "{}",
        entries[1]
    );
}

#[test]
fn list_says_so_when_there_is_nothing() {
    let lab = Lab::new();
    let run = lab.zotbox(&["list"]);
    run.expect_code(0);
    assert_eq!(run.stdout, "no extensions found\n");
}

/// Without a policy file a manifest still gets no more than zotbox's
/// built-in ceilings, and the screens that speak of the policy say so
/// (they said "no ceilings").
#[test]
fn without_a_policy_the_built_in_ceilings_are_named() {
    let lab = Lab::new();
    let run = lab.zotbox(&["policy", "show"]);
    run.expect_code(0);
    assert!(
        run.stdout.ends_with(
            "no policy file exists: a sandboxed extension gets what its manifest asks, within \
             zotbox's built-in ceilings (1024 MiB of memory, 600 s a call)\n"
        ),
        "{run:#?}"
    );
    let run = lab.zotbox(&["doctor"]);
    assert!(
        run.stdout.contains(
            "\npolicy: none (a sandboxed extension gets what its manifest asks, within \
             zotbox's built-in ceilings: 1024 MiB of memory, 600 s a call)\n"
        ),
        "{run:#?}"
    );
}

/// `doctor` run where zot would name the home folder as its workspace says
/// that no extension or tool may use it, and why.
#[test]
fn doctor_says_a_workspace_that_is_the_home_folder_is_no_project() {
    let lab = Lab::new();
    let run = lab.zotbox(&["doctor"]);
    assert!(!run.stdout.contains("not a project"), "{run:#?}");
    let output = lab
        .command(&["doctor"])
        .env("HOME", &lab.workspace)
        .output()
        .expect("run zotbox");
    let run = crate::support::Run::from(output);
    run.expect_code(1);
    assert!(
        run.stdout.contains(&format!(
            "\n  workspace: the workspace `{}` is your home folder, not a project: it holds your \
             keys, credentials and the files your shell runs at login, so no extension or tool \
             may use it; start zot in a project's folder\n",
            lab.workspace.display()
        )),
        "{run:#?}"
    );
}

#[test]
fn call_prints_the_result_and_exits_by_outcome() {
    let (lab, _weather) = weather_lab();

    let run = lab.zotbox(&["call", "weather_tool", r#"{"city":"Berlin"}"#]);
    run.expect_code(0);
    assert_eq!(run.stdout, "weather got {\"city\":\"Berlin\"}\n");

    // `is_error` is a refusal.
    let run = lab.zotbox(&["call", "weather_tool", r#"{"mode":"error"}"#]);
    run.expect_code(3);
    assert_eq!(run.stdout, "weather failed on purpose\n");

    // So is a block by the guard chain.
    let run = lab.zotbox(&["call", "weather_tool", r#"{"cmd":"rm -rf /"}"#]);
    run.expect_code(3);
    assert_eq!(
        run.stderr,
        "error: tool `weather_tool` blocked by weather: weather blocks 'rm -rf'\n"
    );
    assert_eq!(run.stdout, "");

    let run = lab.zotbox(&["call", "nope", "{}"]);
    run.expect_code(1);
    assert_eq!(run.stderr, "error: no tool `nope` (known: weather_tool)\n");

    let run = lab.zotbox(&["call", "weather_tool", "{oops"]);
    run.expect_code(1);
    assert!(
        run.stderr
            .starts_with("error: arguments `{oops` are not JSON: "),
        "{}",
        run.stderr
    );
    let run = lab.zotbox(&["call", "weather_tool", "[1, 2]"]);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        "error: arguments `[1, 2]` must be a JSON object\n"
    );
    // From stdin: at most a frame's worth is read, and an error quotes only
    // the start of what was given.
    let huge = "x".repeat(5 * 1024 * 1024);
    let run = lab.zotbox_in_with(&lab.workspace, &["call", "weather_tool", "-"], &huge);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        "error: the arguments on stdin are over 4194304 bytes, a frame's cap\n"
    );
    let run = lab.zotbox_in_with(
        &lab.workspace,
        &["call", "weather_tool", "-"],
        &huge[..5000],
    );
    run.expect_code(1);
    assert!(
        run.stderr.starts_with(&format!(
            "error: arguments `{}…` are not JSON: ",
            &huge[..200]
        )),
        "{}",
        run.stderr
    );
    assert!(run.stderr.len() < 400, "{}", run.stderr.len());

    let run = lab.zotbox(&["--json", "call", "weather_tool", r#"{"n":1}"#]);
    run.expect_code(0);
    let lines = json_lines(&run.stdout);
    assert_eq!(lines.len(), 1, "{}", run.stdout);
    assert_eq!(
        lines[0]["content"],
        json!([{"type": "text", "text": "weather got {\"n\":1}"}])
    );
}

#[test]
fn command_prints_the_action_and_its_text() {
    let (lab, _weather) = weather_lab();

    let run = lab.zotbox(&["command", "weather", "prompt", "Show", "the", "weather"]);
    run.expect_code(0);
    assert_eq!(run.stdout, "prompt: Show the weather\n");

    // A leading slash is allowed, as typed in zot.
    let run = lab.zotbox(&["command", "/weather"]);
    run.expect_code(0);
    assert_eq!(run.stdout, "prompt: hello from weather\n");

    let run = lab.zotbox(&["command", "weather", "insert", "--flag-like", "text"]);
    run.expect_code(0);
    assert_eq!(run.stdout, "insert: --flag-like text\n");

    let run = lab.zotbox(&["command", "weather", "error", "no", "such", "city"]);
    run.expect_code(3);
    // An error is printed as an error, with no `noop` on stdout.
    assert_eq!(run.stdout, "");
    assert_eq!(run.stderr, "error: no such city\n");

    // Notes are printed on stderr, the response on stdout.
    let run = lab.zotbox(&["command", "weather", "notify", "warn", "rain", "ahead"]);
    run.expect_code(0);
    assert_eq!(run.stdout, "display: notified\n");
    assert_eq!(run.stderr, "[weather] warn: rain ahead\n");

    let run = lab.zotbox(&["command", "nope"]);
    run.expect_code(1);
    assert_eq!(run.stderr, "error: no command `nope` (known: weather)\n");
}

#[test]
fn check_asks_the_guard_chain() {
    let (lab, _weather) = weather_lab();

    let run = lab.zotbox(&["check", "bash", r#"{"command":"rm -rf /"}"#]);
    run.expect_code(3);
    assert_eq!(run.stdout, "block by weather: weather blocks 'rm -rf'\n");

    let run = lab.zotbox(&["check", "bash", r#"{"command":"ls"}"#]);
    run.expect_code(0);
    assert_eq!(run.stdout, "allow\n");

    let run = lab.zotbox(&["--json", "check", "bash", r#"{"command":"rm -rf /"}"#]);
    run.expect_code(3);
    assert_eq!(
        json_lines(&run.stdout),
        [
            json!({"verdict": "block", "reason": "weather blocks 'rm -rf'", "decided_by": ["weather"]})
        ]
    );
}

/// The arguments an interceptor rewrote are its author's: `check` shows
/// them with a bidi override or a C1 control escaped, so the command read
/// is the command that would run.
#[test]
fn check_shows_rewritten_arguments_as_they_read() {
    let lab = Lab::new();
    ext("rewriter")
        .flags(&["--intercept", "rewrite", "--pattern", "ls"])
        .write_in(&lab.user_dir());
    // `ls <U+202E> fr- mr` shows as `ls rm -rf` on a terminal that honours
    // the override.
    let run = lab.zotbox(&[
        "check",
        "bash",
        r#"{"command":"ls \u202e fr- mr \u009b2J"}"#,
    ]);
    run.expect_code(0);
    assert_eq!(
        run.stdout,
        "rewrite by rewriter: {\"command\":\"ls \\u202e fr- mr \\u009b2J\",\"by\":[\"rewriter\"]}\n"
    );
}

fn read_manifest(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("extension.json")).expect("manifest");
    serde_json::from_str(&text).expect("manifest json")
}

fn list_json(lab: &Lab) -> Vec<Value> {
    let run = lab.zotbox(&["--json", "list"]);
    run.expect_code(0);
    json_lines(&run.stdout)
}

#[test]
fn ext_install_enable_disable_logs_and_remove() {
    let lab = Lab::new();
    let source = ext("installme").copied().write_in(&lab.dev);
    let installed = lab.user_dir().join("installme");

    // A native extension runs with the user's permissions: shown, and asked
    // about (without a terminal, only `--yes` accepts).
    let run = lab.zotbox(&["ext", "install", &source.dir.display().to_string()]);
    run.expect_code(1);
    assert!(
        run.stdout
            .contains("native: it runs unsandboxed, with the user's permissions"),
        "{}",
        run.stdout
    );
    assert_eq!(
        run.stderr,
        "error: not installing `installme` without confirmation: stdin is not a terminal; pass \
         --yes to accept the capabilities shown above\n"
    );
    assert!(!installed.exists());
    let run = lab.zotbox(&["ext", "install", "--yes", &source.dir.display().to_string()]);
    run.expect_code(0);
    assert!(
        run.stdout.ends_with(&format!(
            "installed `installme` at {}\n",
            installed.display()
        )),
        "{}",
        run.stdout
    );
    assert_eq!(read_manifest(&installed), read_manifest(&source.dir));
    assert_eq!(
        std::fs::read(installed.join("ext.py")).expect("copied script"),
        std::fs::read(source.dir.join("ext.py")).expect("source script")
    );
    // The copy runs from its new folder (a relative `exec`).
    let run = lab.zotbox(&["call", "installme_tool", "{}"]);
    run.expect_code(0);
    assert_eq!(run.stdout, "installme got {}\n");
    let entries = list_json(&lab);
    assert_eq!(entries.len(), 1);
    assert_eq!(
        (
            &entries[0]["name"],
            &entries[0]["origin"],
            &entries[0]["state"]
        ),
        (&json!("installme"), &json!("user"), &json!("ready"))
    );

    let run = lab.zotbox(&["ext", "disable", "installme"]);
    run.expect_code(0);
    assert_eq!(
        run.stdout,
        format!(
            "disabled `installme` at {}\n",
            installed.join("extension.json").display()
        )
    );
    // Only `enabled` changed.
    let mut expected = read_manifest(&source.dir);
    expected["enabled"] = json!(false);
    assert_eq!(read_manifest(&installed), expected);
    assert_eq!(list_json(&lab)[0]["state"], "disabled");
    let run = lab.zotbox(&["call", "installme_tool", "{}"]);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        "error: no tool `installme_tool`; no extension registered any\n"
    );

    let run = lab.zotbox(&["ext", "enable", "installme"]);
    run.expect_code(0);
    assert_eq!(read_manifest(&installed)["enabled"], true);
    assert_eq!(list_json(&lab)[0]["state"], "ready");

    // What it wrote to stderr, across every run above.
    let run = lab.zotbox(&["ext", "logs", "installme"]);
    run.expect_code(0);
    assert!(
        run.stdout.contains("[installme] started as pid "),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("[installme] shut down"),
        "{}",
        run.stdout
    );
    let log = lab.home.join("logs/ext-installme.log");
    assert_eq!(
        run.stdout,
        std::fs::read_to_string(&log).expect("the log file")
    );

    let run = lab.zotbox(&["ext", "remove", "installme"]);
    run.expect_code(0);
    assert_eq!(
        run.stdout,
        format!("removed `installme` at {}\n", installed.display())
    );
    assert!(!installed.exists());
    assert!(list_json(&lab).is_empty());
    let run = lab.zotbox(&["ext", "remove", "installme"]);
    run.expect_code(1);
    assert!(
        run.stderr
            .starts_with("error: no installed extension `installme` in "),
        "{}",
        run.stderr
    );
}

#[test]
fn ext_install_of_an_invalid_manifest_leaves_nothing_behind() {
    let lab = Lab::new();
    let source = lab.dev.join("bad");
    std::fs::create_dir_all(&source).expect("folder");
    std::fs::write(
        source.join("extension.json"),
        r#"{"name": "bad name", "exec": "./x"}"#,
    )
    .expect("write");

    let run = lab.zotbox(&["ext", "install", &source.display().to_string()]);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        format!(
            "error: `{}`: field `name` `bad name` contains ` `; use letters, digits, `-`, `_` and `.`\n",
            source.join("extension.json").display()
        )
    );
    let left: Vec<_> = std::fs::read_dir(lab.user_dir())
        .map(|dir| dir.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");

    let run = lab.zotbox(&["ext", "install", "/no/such/folder"]);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        "error: `/no/such/folder` is not an extension folder\n"
    );
}

#[test]
fn ext_logs_refuses_a_name_that_walks_out_of_the_logs_folder() {
    let lab = Lab::new();
    // Attack: `ext logs ../../etc/passwd` to print any file.
    let run = lab.zotbox(&["ext", "logs", "../../etc/passwd"]);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        "error: extension name `../../etc/passwd` must not start with a dot\n"
    );
    assert_eq!(run.stdout, "");
    let run = lab.zotbox(&["ext", "logs", "a/../../x"]);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        "error: extension name `a/../../x` contains `/`; use letters, digits, `-`, `_` and `.`\n"
    );
}

#[test]
fn a_missing_workspace_is_reported_once() {
    let lab = Lab::new();
    // `zotbox --workspace WORKSPACE list`, whatever WORKSPACE is.
    let list_in = |workspace: &Path| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_zotbox"))
            .arg("--zot-home")
            .arg(&lab.home)
            .arg("--workspace")
            .arg(workspace)
            .arg("list")
            .output()
            .expect("run zotbox");
        crate::support::Run::from(output)
    };
    let missing = lab.dev.join("no-such-workspace");
    let run = list_in(&missing);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        format!(
            "error: workspace `{}`: No such file or directory (os error 2)\n",
            missing.display()
        )
    );
    // A file given as the workspace: said at once, rather than a dozen
    // skipped-folder warnings and success.
    let file = lab.dev.join("a-file");
    std::fs::write(&file, "x").expect("file");
    let run = list_in(&file);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        format!("error: --workspace `{}` is not a folder\n", file.display())
    );
}

#[test]
fn installing_a_folder_without_a_manifest_says_so_once() {
    let lab = Lab::new();
    let empty = lab.dev.join("empty");
    std::fs::create_dir_all(&empty).expect("folder");
    let run = lab.zotbox(&["ext", "install", &empty.display().to_string()]);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        format!(
            "error: cannot read `{}`: No such file or directory (os error 2)\n",
            empty.join("extension.json").display()
        )
    );
}

#[test]
fn a_missing_ext_path_is_listed_under_its_own_name() {
    let lab = Lab::new();
    let typo = lab.dev.join("weathr");
    let run = lab.zotbox(&["--ext", &typo.display().to_string(), "--json", "list"]);
    run.expect_code(1);
    let entries = json_lines(&run.stdout);
    assert_eq!(entries.len(), 1, "{}", run.stdout);
    assert_eq!(
        (
            &entries[0]["name"],
            &entries[0]["origin"],
            &entries[0]["state"]
        ),
        (&json!("weathr"), &json!("explicit"), &json!("invalid")),
        "{}",
        entries[0]
    );
}

#[test]
fn policy_explain_of_an_extension_that_does_not_load_says_why() {
    // `list` shows it as `invalid` under its folder's name; explain used to
    // say there was no such extension at all.
    let lab = Lab::new();
    let dir = lab.dev.join("broken");
    std::fs::create_dir_all(&dir).expect("folder");
    std::fs::write(
        dir.join("extension.json"),
        r#"{"name":"broken","wasm":"b.wasm","capabilities":{"secrets":{"K":{"http":["http://a.dev"]}}}}"#,
    )
    .expect("manifest");
    let ext = dir.display().to_string();
    let run = lab.zotbox(&["--ext", &ext, "policy", "explain", "broken"]);
    run.expect_code(1);
    assert_eq!(
        run.stderr.lines().last(),
        Some(
            format!(
                "error: extension `broken` does not load, so it is granted nothing: `{}`: field \
                 `capabilities.secrets.K.http[0]` is `http://a.dev`, which must start with \
                 `https://`; only https is allowed",
                dir.join("extension.json").display()
            )
            .as_str()
        )
    );
    let missing = lab.zotbox(&["--ext", &ext, "policy", "explain", "other"]);
    missing.expect_code(1);
    assert_eq!(
        missing.stderr.lines().last(),
        Some("error: no extension `other` (see `zotbox list`)")
    );
}

/// What an extension writes to stderr is its author's, and `zot ext logs`,
/// `zotbox ext logs` and `cat` print its log on a terminal: raw, an OSC 52
/// sequence would have put a command in the user's clipboard, and a screen
/// clear hidden the lines before it. The log gets it as text; `ext logs`
/// shows as text what reached the file otherwise (an unconfined native
/// extension runs as the user and may write there itself).
#[test]
fn ext_logs_shows_what_the_extension_wrote_as_text() {
    let lab = Lab::new();
    // ESC ] 52 ; c ; base64("rm -rf ~") BEL, a screen clear, a byte that
    // is not UTF-8.
    let said = b"\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2Jhidden\xff\n";
    let shown = "\\u{1b}]52;c;cm0gLXJmIH4=\\u{7}\\u{1b}[2Jhidden\\x{ff}\n";
    let hex: String = said.iter().map(|byte| format!("{byte:02x}")).collect();
    ext("inky")
        .flags(&["--say", &hex])
        .write_in(&lab.user_dir());
    lab.zotbox(&["list"]).expect_code(0);
    let path = lab.home.join("logs/ext-inky.log");
    let log = std::fs::read_to_string(&path).expect("the log, as text");
    assert!(log.contains(shown), "{log}");
    assert!(!log.contains('\u{1b}'), "{log}");

    let mut raw = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .expect("the log");
    std::io::Write::write_all(&mut raw, b"by hand: \x1b[31mred\x1b[0m\n").expect("append");
    let run = lab.zotbox(&["ext", "logs", "inky"]);
    run.expect_code(0);
    assert!(run.stdout.contains(shown), "{}", run.stdout);
    assert!(
        run.stdout.ends_with("by hand: \\u{1b}[31mred\\u{1b}[0m\n"),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains('\u{1b}'), "{}", run.stdout);
}

/// A native extension's stderr is capped per run as a wasm guest's is: an
/// extension writing without end (a confined one has no other way to the
/// disk) fills 8 MiB of its log, not the disk, and keeps running.
#[test]
fn a_native_extensions_log_is_cut_off_at_its_cap() {
    let lab = Lab::new();
    ext("loud")
        .flags(&["--stderr-flood", &(12 << 20).to_string()])
        .write_in(&lab.user_dir());
    let run = lab.zotbox(&["call", "loud_tool", "{}"]);
    run.expect_code(0);
    let log = std::fs::read_to_string(lab.home.join("logs/ext-loud.log")).expect("the log");
    let cut_off = "\n[zotbox: log cut off at 8 MiB for this run]\n";
    assert!(
        log.ends_with(cut_off),
        "{}",
        &log[log.len().saturating_sub(200)..]
    );
    assert_eq!(log.len(), (8 << 20) + cut_off.len());
}

/// `ext logs -f` follows the log at its path as `tail -F` does: a log
/// removed and written anew (a user's clean-up), or cut short, is followed
/// from its top, and the command does not end with an error. A character
/// cut at the end of one log is shown as bytes, not glued to the next.
#[test]
fn ext_logs_follows_a_log_removed_or_cut_short() {
    use std::io::Write as _;
    let lab = Lab::new();
    let logs = lab.home.join("logs");
    std::fs::create_dir_all(&logs).expect("logs folder");
    let path = logs.join("ext-tailed.log");
    std::fs::write(&path, "one\n").expect("the log");
    let mut child = lab
        .command(&["ext", "logs", "tailed", "-f"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("zotbox ext logs -f");
    let stdout = crate::support::Collected::from(child.stdout.take().expect("stdout"));
    let mut until_seen = |expected: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while stdout.text() != expected {
            if std::time::Instant::now() >= deadline || matches!(child.try_wait(), Ok(Some(_))) {
                panic!("followed {:?}, not {expected:?}", stdout.text());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let append = |bytes: &[u8]| {
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("the log");
        log.write_all(bytes).expect("append");
    };
    // Removed, then written anew after a while.
    let replace = |bytes: &[u8]| {
        std::fs::remove_file(&path).expect("remove the log");
        std::thread::sleep(std::time::Duration::from_millis(500));
        std::fs::write(&path, bytes).expect("a new log");
    };
    until_seen("one\n");
    append(b"two\n");
    until_seen("one\ntwo\n");
    // Removed: followed again once written anew.
    replace(b"three and more\n");
    until_seen("one\ntwo\nthree and more\n");
    // Cut short: followed from its top.
    std::fs::write(&path, "four\n").expect("the log cut short");
    until_seen("one\ntwo\nthree and more\nfour\n");
    // A log that ends inside a character, replaced by one that starts
    // with the character's rest: two logs' bytes are not one character.
    append(b"five \xc3");
    until_seen("one\ntwo\nthree and more\nfour\nfive ");
    replace(b"\xa9six\n");
    until_seen("one\ntwo\nthree and more\nfour\nfive \\x{c3}\\x{a9}six\n");
    let _ = child.kill();
    let _ = child.wait();
    stdout.join();
}

#[test]
fn ext_logs_of_an_extension_that_never_ran() {
    let lab = Lab::new();
    let run = lab.zotbox(&["ext", "logs", "ghost"]);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        format!(
            "error: no log for `ghost` at `{}` (it has not run yet)\n",
            lab.home.join("logs/ext-ghost.log").display()
        )
    );
}

#[test]
fn help_documents_the_exit_codes() {
    let lab = Lab::new();
    let run = lab.zotbox(&["--help"]);
    run.expect_code(0);
    for expected in [
        "Exit status:",
        "0  success",
        "1  error",
        "2  usage error",
        "3  refused",
    ] {
        assert!(
            run.stdout.contains(expected),
            "no `{expected}` in:\n{}",
            run.stdout
        );
    }
    let run = lab.zotbox(&["frobnicate"]);
    run.expect_code(2);
}

#[test]
fn the_reference_python_example_runs_unmodified() {
    let lab = Lab::new();
    let installed = lab.user_dir().join("hello-py");
    std::fs::create_dir_all(&installed).expect("folder");
    for file in ["extension.json", "hello.py"] {
        std::fs::copy(fixture("hello-py").join(file), installed.join(file)).expect("copy");
    }
    // The reference says `chmod +x hello.py`; a checkout may not keep the bit.
    make_executable(&installed.join("hello.py"));

    let run = lab.zotbox(&["command", "hellopy"]);
    run.expect_code(0);
    assert_eq!(run.stdout, "prompt: Say hi briefly.\n");

    let entries = list_json(&lab);
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["name"], "hello-py");
    assert_eq!(entries[0]["state"], "ready");
    assert_eq!(entries[0]["commands"], json!(["hellopy"]));
}

#[test]
fn an_explicit_ext_wins_over_an_installed_one() {
    let (lab, _weather) = weather_lab();
    let dev = ext("weather")
        .flags(&["--tool", "dev_tool"])
        .write_in(&lab.dev);
    let run = lab.zotbox(&["--ext", &dev.dir.display().to_string(), "call", "dev_tool"]);
    run.expect_code(0);
    assert_eq!(run.stdout, "weather got {}\n");
    // The manifest's own path works as well as its folder.
    let manifest = dev.dir.join("extension.json");
    let run = lab.zotbox(&["-e", &manifest.display().to_string(), "--json", "list"]);
    run.expect_code(0);
    let entries = json_lines(&run.stdout);
    assert_eq!(entries.len(), 2, "{}", run.stdout);
    assert_eq!(
        (
            &entries[0]["origin"],
            &entries[0]["state"],
            &entries[0]["tools"]
        ),
        (&json!("explicit"), &json!("ready"), &json!(["dev_tool"]))
    );
    assert_eq!(
        (&entries[1]["origin"], &entries[1]["state"]),
        (&json!("user"), &json!("shadowed"))
    );
}

/// `zotbox list | head -0`: a reader that is gone before anything is
/// printed ends the command quietly, with no panic or error on stderr,
/// whether it prints with `println!`, JSON Lines or one write (the
/// completion script and the man page said "error: cannot write …: Broken
/// pipe").
#[test]
fn a_closed_stdout_ends_a_listing_quietly() {
    let (lab, _weather) = weather_lab();
    for args in [
        &["list"][..],
        &["list", "--json"],
        &["completions", "bash"],
        &["man"],
    ] {
        // A pipe whose read end is closed before zotbox starts: every
        // write to it fails with EPIPE, whatever the timing.
        let (read, write) = nix::unistd::pipe().expect("pipe");
        drop(read);
        let output = lab
            .command(args)
            .env("HOME", lab.home.join("user-home"))
            .stdout(std::process::Stdio::from(write))
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("run zotbox");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}");
    }
}
