//! Deny rules that match what will run, within a budget (issue 10).
//!
//! The issue's attacks hide a denied command from a `commandPattern` behind
//! quotes, escapes, a path to the program or another command before it.
//! Each is tried through both front ends of the shell — a data `shell` tool
//! called with the real `zotbox call`, and the `prober` wasm guest's
//! `shell.run` — with its exact refusal asserted and a victim folder that a
//! command that ran would have deleted. Then the issue's heavy plugins: a
//! workspace that drops them in gets them refused by the deny-rule budget,
//! reported by `list` and `doctor`, while the user's plugin keeps guarding.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use zotbox::Verdict;

use crate::attack::{
    answered, data_tool, plugin, prober, refused, run_cases, shell_tool, start, zotbox_with,
};
use crate::support::{Lab, bounded, rss_kib, write_json};

/// The refusal plugin of the issue: `git\s+push` and `rm\s+-rf` on `bash`,
/// the name every shell command is checked under; and an anchored rule on
/// the data tool `publish` itself, checked against the command it renders.
fn no_push() -> Value {
    json!({
        "name": "no-push",
        "description": "pushes and recursive deletes are for humans",
        "deny": [
            {"tools": ["bash"], "commandPattern": "git\\s+push", "reason": "pushes are reviewed"},
            {"tools": ["bash"], "commandPattern": "rm\\s+-rf", "reason": "deletes recursively"},
            {"tools": ["publish"], "commandPattern": "^git\\s+push\\b", "reason": "publishing is manual"}
        ]
    })
}

const PUSH: &str = "blocked by plugin `no-push` rule 1: pushes are reviewed";
const RM: &str = "blocked by plugin `no-push` rule 2: deletes recursively";
const OPTION: &str = "the argument begins with `-`, so the program would read it as an option; \
                      the template puts no `--` before `{arg}`";

/// `victim/keep.txt`: what an `rm -rf victim` that ran would delete.
fn victim(lab: &Lab) {
    std::fs::create_dir_all(lab.workspace.join("victim")).expect("victim folder");
    std::fs::write(lab.workspace.join("victim/keep.txt"), "still here").expect("victim file");
}

/// Asserts nothing deleted the victim.
fn assert_victim_intact(lab: &Lab) {
    let kept = std::fs::read_to_string(lab.workspace.join("victim/keep.txt"));
    assert_eq!(
        kept.ok().as_deref(),
        Some("still here"),
        "a denied `rm` ran"
    );
}

/// A data `shell` tool's template, whether it declares `"shell": true`,
/// its `arg`, the command it renders (its argv shown as shell words for an
/// `execve` template, the line with `{arg}` single-quoted for a shell one)
/// and so the rule it must meet.
const DATA_CASES: &[(&str, &str, bool, &str, &str, &str)] = &[
    // Quotes: the argument arrives quoted, as `git 'push'`.
    ("git-arg", "git {arg}", false, "push", "git 'push'", PUSH),
    // Split once at load, the quotes and the escape are gone before the
    // rules look: the argv is `git push origin`.
    (
        "git-split",
        "git pu''sh {arg}",
        false,
        "origin",
        "git push 'origin'",
        PUSH,
    ),
    (
        "git-escaped",
        "git pu\\sh {arg}",
        false,
        "origin",
        "git push 'origin'",
        PUSH,
    ),
    (
        "git-path",
        "/usr/local/bin/git {arg}",
        false,
        "push",
        "/usr/local/bin/git 'push'",
        PUSH,
    ),
    // An option smuggled in as the argument never reaches `rm` (nor the
    // rules): the template puts no `--` before it.
    (
        "rm-quoted",
        "rm {arg} victim",
        false,
        "-rf",
        "rm '-rf' victim",
        OPTION,
    ),
    // Another command first, through a shell: the line as `sh` gets it.
    (
        "rm-after",
        "true && /bin/rm -r''f {arg}",
        true,
        "victim",
        "true && /bin/rm -r''f 'victim'",
        RM,
    ),
    (
        "rm-inside",
        "echo $(/bin/rm -r\"\"f {arg})",
        true,
        "victim",
        "echo $(/bin/rm -r\"\"f 'victim')",
        RM,
    ),
];

#[test]
fn a_data_shell_tool_cannot_hide_a_denied_command_in_quotes_paths_or_other_commands() {
    let lab = Lab::new();
    victim(&lab);
    plugin(&lab, &no_push());
    for (name, template, shell, _, _, _) in DATA_CASES {
        let mut tool = shell_tool(name, template);
        tool["shell"] = json!(shell);
        data_tool(&lab, &tool);
    }
    data_tool(&lab, &shell_tool("touch-arg", "touch {arg}"));
    data_tool(&lab, &shell_tool("publish", "/usr/local/bin/git {arg}"));
    lab.trust_workspace();
    let call = |tool: &str, arg: &str| {
        let args = json!({ "arg": arg }).to_string();
        let run = zotbox_with(&lab, &[], &["call", tool, &args]);
        (run.code, run.stdout, run.stderr)
    };
    let mut failures = Vec::new();
    for (name, _, _, arg, rendered, blocked) in DATA_CASES {
        let expected = (
            Some(3),
            format!("command of `{rendered}` refused: {blocked}\n"),
            String::new(),
        );
        let got = call(name, arg);
        if got != expected {
            failures.push(format!("{name}: {got:?}\n    expected {expected:?}"));
        }
    }
    // A rule naming the data tool: the program's path does not hide it
    // from an anchored pattern, and the host refuses before running it.
    let expected = (
        Some(3),
        String::new(),
        "error: tool `publish` blocked by plugin `no-push` rule 3: publishing is manual\n"
            .to_owned(),
    );
    let got = call("publish", "push");
    if got != expected {
        failures.push(format!("publish: {got:?}\n    expected {expected:?}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_victim_intact(&lab);
    // Control: the same kind of tool, with nothing denied, runs.
    assert_eq!(
        call("touch-arg", "ran-ok"),
        (Some(0), "\n".to_owned(), String::new())
    );
    assert!(lab.workspace.join("ran-ok").exists());
}

/// With the issue's grant (`git **`, `rm **`), the grant sees the words
/// `git push`; the deny rules must see them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_granted_git_cannot_push_in_any_spelling() {
    let lab = Lab::new();
    victim(&lab);
    plugin(&lab, &no_push());
    let dir = prober(
        &lab,
        &json!({"shell": ["git **", "rm **", "echo **"]}),
        None,
    );
    let host = start(&lab, &[dir]).await;
    let run = |command: &str| json!({ "command": command });
    let refusal = |command: &str, blocked: &str| format!("shell `{command}` refused: {blocked}");
    let mut cases = vec![answered(
        "control: quoted words that are no push",
        "shell",
        run("echo 'git' status"),
        "exit=Some(0) stdout=git status\n stderr=",
    )];
    for (name, command, blocked) in [
        ("single quotes", "git 'push'", PUSH),
        ("empty quotes inside the word", "git pu''sh", PUSH),
        ("double quotes", "git \"push\"", PUSH),
        ("a backslash", "git pu\\sh", PUSH),
        ("a quoted option", "rm '-rf' victim", RM),
        ("empty quotes in the option", "rm -r''f victim", RM),
    ] {
        cases.push(refused(
            name,
            "shell",
            run(command),
            refusal(command, blocked),
        ));
    }
    run_cases(&host, cases).await;
    host.shutdown().await;
    assert_victim_intact(&lab);
}

/// With a grant of `**` (any command line), the deny rules are all that
/// stands between the guest and the command: paths, other commands and
/// substitutions do not hide it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_granted_any_command_cannot_slip_a_denied_one_past_the_rules() {
    let lab = Lab::new();
    victim(&lab);
    plugin(&lab, &no_push());
    let dir = prober(&lab, &json!({"shell": ["**"]}), None);
    let host = start(&lab, &[dir]).await;
    let run = |command: &str| json!({ "command": command });
    let refusal = |command: &str, blocked: &str| format!("shell `{command}` refused: {blocked}");
    let mut cases = vec![answered(
        "control: an ordinary line",
        "shell",
        run("echo fine && echo 'rm' -r"),
        "exit=Some(0) stdout=fine\nrm -r\n stderr=",
    )];
    for (name, command, blocked) in [
        ("a path to the program", "/usr/bin/git push", PUSH),
        ("after `;`", "x; git push", PUSH),
        ("after `&&`", "true && git push", PUSH),
        ("a substitution", "$(git push)", PUSH),
        ("backticks in double quotes", "echo \"`git 'push'`\"", PUSH),
        ("a path and quotes", "/bin/rm -r''f victim", RM),
        (
            "a subshell after a newline",
            "echo ok\n(cd . && /bin/rm '-rf' victim)",
            RM,
        ),
        ("an unclosed quote", "rm -r''f victim; echo \"unclosed", RM),
    ] {
        cases.push(refused(
            name,
            "shell",
            run(command),
            refusal(command, blocked),
        ));
    }
    run_cases(&host, cases).await;
    host.shutdown().await;
    assert_victim_intact(&lab);
}

// ---------------------------------------------------------------------------
// the budget

/// The issue's 12 KB plugin: 16 rules of distinct patterns that compile to
/// ≈ 0.5 MiB each, each rule naming 100 tools.
fn wide_plugin() -> Value {
    let tools: Vec<String> = (0..100).map(|t| format!("to{t:02}")).collect();
    let deny: Vec<Value> = (0..16)
        .map(|r| json!({"tools": tools, "commandPattern": format!("\\w{{30}}{r:02}"), "reason": "r"}))
        .collect();
    json!({"name": "wide", "description": "sixteen heavy rules", "deny": deny})
}

/// The issue's 69 KB plugin: 1 000 rules of distinct heavy patterns.
fn many_plugin() -> Value {
    let deny: Vec<Value> = (0..1000)
        .map(|r| json!({"tools": ["bash"], "commandPattern": format!("\\w{{30}}{r:04}"), "reason": "r"}))
        .collect();
    json!({"name": "many", "description": "a thousand heavy rules", "deny": deny})
}

/// The user's own plugin, in `$ZOT_HOME/plugins`.
fn users_plugin(lab: &Lab) -> PathBuf {
    let path = lab.home.join("plugins/keep.json");
    std::fs::create_dir_all(lab.home.join("plugins")).expect("plugins folder");
    write_json(
        &path,
        &json!({"name": "keep", "description": "the user's rule", "deny": [
            {"tools": ["bash"], "commandPattern": "rm\\s+-rf", "reason": "no recursive deletes"}
        ]}),
    );
    path
}

/// A workspace holding the two heavy plugins, and the user's plugin.
fn heavy_lab() -> (Lab, [PathBuf; 2]) {
    let lab = Lab::new();
    users_plugin(&lab);
    // Compact, as the issue's files were.
    let compact = |value: &Value| {
        let path = plugin(&lab, value);
        std::fs::write(&path, value.to_string()).expect("write the plugin");
        path
    };
    let wide = compact(&wide_plugin());
    let many = compact(&many_plugin());
    let size = |path: &Path| std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    assert!((11_000..13_000).contains(&size(&wide)), "{}", size(&wide));
    assert!((60_000..70_000).contains(&size(&many)), "{}", size(&many));
    (lab, [wide, many])
}

fn over_budget(path: &Path, name: &str) -> String {
    format!(
        "`{}`: plugin `{name}` refused: its rules exceed the deny-rule budget (the patterns of \
         all plugins together may compile to 2 MiB); simplify its patterns or drop rules",
        path.display()
    )
}

#[test]
fn list_and_doctor_report_plugins_over_the_deny_rule_budget_and_the_users_still_guards() {
    let (lab, [wide, many]) = heavy_lab();
    let problems = [over_budget(&many, "many"), over_budget(&wide, "wide")];
    let list = zotbox_with(&lab, &[], &["list"]);
    list.expect_code(0);
    let skipped: Vec<&str> = list
        .stdout
        .lines()
        .filter_map(|line| line.strip_prefix("skipped "))
        .collect();
    assert_eq!(skipped, problems, "{}", list.stdout);
    // Refused, so not listed as in force.
    let rows: Vec<&str> = list
        .stdout
        .lines()
        .filter(|line| line.contains("plugin"))
        .filter(|line| !line.starts_with("skipped"))
        .collect();
    assert_eq!(rows.len(), 1, "{}", list.stdout);
    assert!(rows[0].starts_with("keep "), "{}", list.stdout);
    let doctor = zotbox_with(&lab, &[], &["doctor"]);
    doctor.expect_code(1);
    for problem in &problems {
        let finding = format!("  data file skipped: {problem}");
        assert!(
            doctor.stdout.lines().any(|line| line == finding),
            "{finding}\n{}",
            doctor.stdout
        );
    }
    let check = |command: &str| {
        let args = json!({ "command": command }).to_string();
        let run = zotbox_with(&lab, &[], &["check", "bash", &args]);
        (run.code, run.stdout)
    };
    assert_eq!(
        check("rm -rf /"),
        (
            Some(3),
            "block by plugin `keep` rule 1: no recursive deletes\n".to_owned()
        )
    );
    assert_eq!(check(&"a".repeat(40)), (Some(0), "allow\n".to_owned()));
}

/// A host over the heavy workspace (as `serve` starts at zot's start-up)
/// grows by far less than the 1.2–1.9 GiB the issue measured, reports the
/// refusals and blocks with the user's rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_over_the_heavy_plugins_stays_small_and_keeps_the_users_rules() {
    let (lab, [wide, many]) = heavy_lab();
    let before = rss_kib();
    let host = bounded("starting the host", lab.builder().build())
        .await
        .expect("build the host");
    let grown = rss_kib().saturating_sub(before);
    // Generous: other tests share this process.
    assert!(grown < 100 * 1024, "RSS grew by {grown} KiB");
    let problems: Vec<String> = host
        .data_set()
        .problems
        .iter()
        .map(|p| p.error.clone())
        .collect();
    assert_eq!(
        problems,
        [over_budget(&many, "many"), over_budget(&wide, "wide")]
    );
    let decision = host
        .intercept_tool_call("bash", json!({"command": "cd x && /bin/rm '-rf' ."}))
        .await;
    assert_eq!(
        decision.verdict,
        Verdict::Block {
            reason: "no recursive deletes".to_owned()
        }
    );
    assert_eq!(decision.decided_by, ["plugin `keep` rule 1"]);
    host.shutdown().await;
}
