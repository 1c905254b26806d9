//! Issue 10: arguments that stay arguments, and a shell inside a kernel
//! sandbox. Each attack from the issue runs against the real host (data
//! tools, the prober's `shell.run`, native extensions) and the real binary,
//! and asserts the exact refusal and that no marker appeared and nothing
//! outside the workspace changed.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::attack::{answer, audit_lines, data_tool, shell_tool, start, zotbox_with};
use crate::support::Lab;

/// The file an injected command would create.
const MARKER: &str = "MARKER";

/// Arguments that would run `touch MARKER` if a shell ever read them as code.
const INJECTIONS: &[&str] = &[
    "$(touch MARKER)",
    "x; touch MARKER",
    "`touch MARKER`",
    "x\ntouch MARKER",
    "'; touch MARKER; '",
    "\"; touch MARKER; \"",
    "x && touch MARKER #",
];

/// Panics if a `MARKER` exists anywhere under `roots`.
fn assert_no_marker(roots: &[&Path]) {
    for root in roots {
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                assert!(
                    path.file_name().is_none_or(|n| n != MARKER),
                    "an injected command ran: `{}` exists",
                    path.display()
                );
                if path.is_dir() && !path.is_symlink() {
                    stack.push(path);
                }
            }
        }
    }
}

/// A shell data tool with `"shell": true`.
fn shell_syntax_tool(name: &str, command: &str) -> Value {
    let mut tool = shell_tool(name, command);
    tool["shell"] = json!(true);
    tool
}

/// Runs `git args…` in `dir`, quietly, with a fixed identity.
fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t.invalid"])
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run git");
    assert!(status.success(), "git {args:?} failed");
}

/// Makes the workspace a git repository with one commit of `README.md`.
fn git_workspace(lab: &Lab) {
    std::fs::write(lab.workspace.join("README.md"), "readme\n").expect("readme");
    git(&lab.workspace, &["init", "-q"]);
    git(&lab.workspace, &["add", "README.md"]);
    git(&lab.workspace, &["commit", "-q", "-m", "first"]);
}

/// A folder beside the workspace, standing for everything outside it.
fn outside(lab: &Lab) -> PathBuf {
    let dir = lab.home.parent().expect("lab root").join("outside");
    std::fs::create_dir_all(&dir).expect("outside folder");
    dir
}

// ---------------------------------------------------------------------------
// `{arg}` is one argv element wherever the template puts it

/// Every placement a template can give `{arg}`. Without `"shell": true`
/// each runs by `execve` and the argument arrives as one literal element;
/// with it, all but the bare ones are refused at load.
/// (name, template, what `printf` prints with `@` for the argument, the
/// refusal with `"shell": true`)
const PLACEMENTS: &[(&str, &str, &str, Option<&str>)] = &[
    ("bare", "printf %s {arg}", "@", None),
    (
        "single-quoted",
        "printf %s '{arg}'",
        "@",
        Some("puts `{arg}` inside single quotes"),
    ),
    (
        "double-quoted",
        "printf %s \"{arg}\"",
        "@",
        Some("puts `{arg}` inside double quotes"),
    ),
    (
        "glued after",
        "printf %s --grep={arg}",
        "--grep=@",
        Some("glues `{arg}` to other characters"),
    ),
    (
        "glued and quoted",
        "printf %s --grep=\"{arg}\"",
        "--grep=@",
        Some("puts `{arg}` inside double quotes"),
    ),
    (
        "glued before",
        "printf %s {arg}.md",
        "@.md",
        Some("glues `{arg}` to other characters"),
    ),
    (
        "inside a quoted phrase",
        "printf %s 'wc -l {arg}'",
        "wc -l @",
        Some("puts `{arg}` inside single quotes"),
    ),
    (
        "twice in one word",
        "printf %s {arg}/{arg}",
        "@/@",
        Some("glues `{arg}` to other characters"),
    ),
    ("after `--`", "printf %s -- {arg}", "--@", None),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quoted_and_glued_arguments_never_run_in_any_placement() {
    let lab = Lab::new();
    git_workspace(&lab);
    for (i, (_, template, _, _)) in PLACEMENTS.iter().enumerate() {
        data_tool(&lab, &shell_tool(&format!("p{i}"), template));
    }
    // The issue's own templates, which ran the argument before.
    data_tool(&lab, &shell_tool("grepq", "grep -rn '{arg}' ."));
    data_tool(&lab, &shell_tool("logq", "git log --grep=\"{arg}\""));
    let host = start(&lab, &[]).await;
    for injection in INJECTIONS {
        for (i, (name, _, prints, _)) in PLACEMENTS.iter().enumerate() {
            let got = answer(&host, &format!("p{i}"), json!({ "arg": injection })).await;
            assert_eq!(
                got,
                (false, prints.replace('@', injection)),
                "{name} with {injection:?}"
            );
        }
        // The pattern is searched for (a newline makes two patterns) and
        // the commit messages are grepped; neither runs anything.
        for tool in ["grepq", "logq"] {
            let (_, text) = answer(&host, tool, json!({ "arg": injection })).await;
            assert!(
                !text.contains("killed"),
                "{tool} with {injection:?}: {text}"
            );
        }
    }
    host.shutdown().await;
    assert_no_marker(&[&lab.workspace, &lab.home]);
}

/// With `"shell": true`, a quoted or glued `{arg}` is refused at load, for
/// every placement; `list` and `doctor` report each file and the rule, and
/// the tool never runs.
#[test]
fn a_shell_template_with_a_quoted_or_glued_arg_is_reported_and_skipped() {
    let lab = Lab::new();
    let bare = "in a shell template `{arg}` must be a bare word, which is quoted for you";
    let mut expected = Vec::new();
    let mut refuse = |name: &str, template: &str, reason: String| {
        let path = data_tool(&lab, &shell_syntax_tool(name, template));
        expected.push(format!(
            "data file skipped: `{}`: field `command` `{template}` is refused: {reason}",
            path.display()
        ));
    };
    for (i, (_, template, _, refusal)) in PLACEMENTS.iter().enumerate() {
        match refusal {
            Some(how) => refuse(&format!("p{i}"), template, format!("{how}; {bare}")),
            None => {
                data_tool(&lab, &shell_syntax_tool(&format!("p{i}"), template));
            }
        }
    }
    // The issue's three templates.
    refuse(
        "grepq",
        "grep -rn '{arg}' .",
        format!("puts `{{arg}}` inside single quotes; {bare}"),
    );
    refuse(
        "logq",
        "git log --grep=\"{arg}\"",
        format!("puts `{{arg}}` inside double quotes; {bare}"),
    );
    refuse(
        "wcq",
        "sh -c 'wc -l {arg}'",
        format!("puts `{{arg}}` inside single quotes; {bare}"),
    );
    // Without `"shell": true`, the script of `sh -c` is refused too.
    let path = data_tool(&lab, &shell_tool("wcx", "sh -c 'wc -l {arg}'"));
    expected.push(format!(
        "data file skipped: `{}`: field `command` `sh -c 'wc -l {{arg}}'` is refused: puts \
         `{{arg}}` in the code `sh` runs, where the argument would run as code; pass it as a word \
         of its own (`sh -c '… \"$1\"' sh {{arg}}`)",
        path.display()
    ));
    // And shell syntax that was not declared.
    let path = data_tool(&lab, &shell_tool("piped", "git log {arg} | head"));
    expected.push(format!(
        "data file skipped: `{}`: field `command` `git log {{arg}} | head` is refused: `|` is a \
         shell operator, which only a shell understands; add `\"shell\": true` to run it with \
         `sh`, or quote it",
        path.display()
    ));
    let doctor = zotbox_with(&lab, &[], &["doctor"]);
    for line in &expected {
        assert!(
            doctor.stdout.lines().any(|l| l.trim_start() == line),
            "no `{line}` in\n{}",
            doctor.stdout
        );
    }
    let list = zotbox_with(&lab, &[], &["list"]);
    for line in &expected {
        let skipped = line.replacen("data file skipped: ", "skipped ", 1);
        assert!(
            list.stdout.lines().any(|l| l == skipped),
            "no `{skipped}` in\n{}",
            list.stdout
        );
    }
    // Attack: call a skipped tool anyway.
    let call = zotbox_with(&lab, &[], &["call", "wcq", r#"{"arg":"$(touch MARKER)"}"#]);
    assert_ne!(call.code, Some(0), "{call:#?}");
    assert!(call.stderr.contains("no tool `wcq`"), "{call:#?}");
    assert_no_marker(&[&lab.workspace]);
}

/// The issue's option injection: `git show --stat {arg}` with
/// `--output=<outside file>` would write outside the workspace. Refused,
/// audited as a denial, and nothing is written; after `--` the same text is
/// a revision name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argument_that_is_an_option_is_refused_unless_the_template_ends_options() {
    let lab = Lab::new();
    git_workspace(&lab);
    let outside = outside(&lab);
    let target = outside.join("written");
    data_tool(&lab, &shell_tool("show", "git show --stat {arg}"));
    data_tool(&lab, &shell_tool("showsafe", "git show --stat -- {arg}"));
    let host = start(&lab, &[]).await;
    let arg = format!("--output={}", target.display());
    let reason = "the argument begins with `-`, so the program would read it as an option; the \
                  template puts no `--` before `{arg}`";
    assert_eq!(
        answer(&host, "show", json!({ "arg": arg })).await,
        (
            true,
            format!("command of `git show --stat '{arg}'` refused: {reason}")
        )
    );
    // After `--` it is a path that matches nothing: HEAD's commit, no files.
    let (is_error, text) = answer(&host, "showsafe", json!({ "arg": arg })).await;
    assert!(!is_error && !text.contains("README.md"), "{text}");
    // Control: a revision still works.
    let (is_error, text) = answer(&host, "show", json!({ "arg": "HEAD" })).await;
    assert!(!is_error && text.contains("README.md"), "{text}");
    host.shutdown().await;
    assert!(!target.exists(), "git wrote outside the workspace");
    let lines = audit_lines(&lab);
    let denied: Vec<&Value> = lines
        .iter()
        .filter(|line| line["decision"] == "deny" && line["extension"] == "data:show")
        .collect();
    assert_eq!(denied.len(), 1, "{denied:#?}");
    assert_eq!(denied[0]["capability"], "shell");
    assert_eq!(denied[0]["reason"], reason);
}
