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

/// Asserts that neither a guest with `write: ["**"]` nor its confined
/// command can write `hook` in the folder `hooks` (relative to the
/// workspace, ending in `/`) that git's configuration names; returns the
/// script they tried, which makes `marker`.
async fn assert_hook_unwritable(
    host: &zotbox::Host,
    hooks: &str,
    hook: &str,
    marker: &Path,
) -> String {
    let planted = format!("#!/bin/sh\ntouch {}\n", marker.display());
    let path = format!("{hooks}{hook}");
    assert_eq!(
        answer(host, "fs_write", json!({"path": path, "text": planted})).await,
        (
            true,
            format!(
                "fs-write `{path}` refused: `{hooks}` is a control path (the folder git runs \
                 hooks from (`core.hooksPath`): it decides what runs); no grant reaches it"
            )
        ),
    );
    let command = format!("echo 'touch {}' > {path}", marker.display());
    let (_, text) = answer(host, "shell", json!({ "command": command })).await;
    assert_eq!(
        text,
        format!("exit=Some(2) stdout= stderr=sh: 1: cannot create {path}: Read-only file system\n")
    );
    planted
}

/// Plants `script` as the executable `hook` a test's guest was refused,
/// and asserts that a commit in the repository at `worktree` runs it (it
/// makes `marker`): the refusal stood between the guest and code that runs
/// unsandboxed.
#[track_caller]
fn assert_hook_runs(hook: &Path, script: &str, worktree: &Path, marker: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(hook, script).expect("plant the hook");
    std::fs::set_permissions(hook, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    git(
        worktree,
        &["commit", "-q", "--allow-empty", "-m", "planted"],
    );
    assert!(marker.exists(), "the hook did not run");
}

/// Runs `git args…` in `dir`, quietly, with a fixed identity.
fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t.invalid"])
        .args(args)
        .current_dir(dir)
        // Never the workspace's own `.gitconfig` (it holds an attack).
        .env("HOME", "/nonexistent")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
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

/// Attack on rule 4 ("never a path outside the workspace"): the model's
/// argument to `cat -- {arg}` named `/etc/hostname` (as root `/etc/shadow`),
/// a file above the workspace, or one through a link the workspace holds
/// (`docs/etc` → `/etc`); the sandbox lets a command read the system
/// folders, so each was read. Refused and audited; a file of the
/// workspace is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argument_naming_a_path_outside_the_workspace_is_refused() {
    let lab = Lab::new();
    let outside = outside(&lab);
    std::fs::write(outside.join("secret"), "top secret\n").expect("secret");
    std::fs::create_dir_all(lab.workspace.join("docs")).expect("docs");
    std::fs::write(lab.workspace.join("docs/ok.md"), "fine\n").expect("ok.md");
    std::os::unix::fs::symlink("/etc", lab.workspace.join("docs/etc")).expect("symlink");
    data_tool(&lab, &shell_tool("show", "cat -- {arg}"));
    let host = start(&lab, &[]).await;
    let climbing = format!(
        "{}/secret",
        std::iter::repeat_n("..", lab.workspace.components().count())
            .collect::<Vec<_>>()
            .join("/")
    );
    let outside_reason = |path: &str| {
        format!(
            "command of `cat -- '{path}'` refused: the argument makes `{path}` a path outside \
             the workspace; a tool's argument names only the workspace's files"
        )
    };
    for arg in ["/etc/hostname", "../outside/secret", climbing.as_str()] {
        assert_eq!(
            answer(&host, "show", json!({ "arg": arg })).await,
            (true, outside_reason(arg)),
            "{arg}"
        );
    }
    assert_eq!(
        answer(&host, "show", json!({ "arg": "docs/etc/hostname" })).await,
        (
            true,
            "command of `cat -- 'docs/etc/hostname'` refused: the argument makes \
             `docs/etc/hostname` a path that leads out of the workspace through a link (to \
             `/etc/hostname`); a tool's argument names only the workspace's files"
                .to_owned()
        )
    );
    // Control: the workspace's own file.
    assert_eq!(
        answer(&host, "show", json!({ "arg": "docs/ok.md" })).await,
        (false, "fine\n".to_owned())
    );
    host.shutdown().await;
    let denied = audit_lines(&lab)
        .iter()
        .filter(|line| line["decision"] == "deny" && line["extension"] == "data:show")
        .count();
    assert_eq!(denied, 4);
}

// ---------------------------------------------------------------------------
// A shell grant is jailed by the kernel

/// The issue's workspace: a git repository with `docs/ok.md`, a symlink
/// `docs/evil.md -> <outside>/secret`, and a tracked `.gitconfig` whose
/// `core.fsmonitor` would run `touch MARKER` if git read it as the global
/// config. Returns the outside folder.
fn jail_workspace(lab: &Lab) -> PathBuf {
    let outside = outside(lab);
    std::fs::write(outside.join("secret"), "top secret\n").expect("secret");
    std::fs::create_dir_all(lab.workspace.join("docs")).expect("docs");
    std::fs::write(lab.workspace.join("docs/ok.md"), "fine\n").expect("ok.md");
    std::os::unix::fs::symlink(outside.join("secret"), lab.workspace.join("docs/evil.md"))
        .expect("symlink");
    std::fs::write(
        lab.workspace.join(".gitconfig"),
        format!(
            "[core]\n\tfsmonitor = touch {}\n",
            lab.workspace.join(MARKER).display()
        ),
    )
    .expect(".gitconfig");
    git_workspace(lab);
    git(&lab.workspace, &["add", ".gitconfig", "docs/ok.md"]);
    git(&lab.workspace, &["commit", "-q", "-m", "docs"]);
    outside
}

/// The prober with the README's grants, `git diff **` and `cat docs/*.md`.
fn jailed_prober(lab: &Lab) -> PathBuf {
    crate::attack::prober(
        lab,
        &json!({"shell": ["git diff **", "git status", "cat docs/*.md"]}),
        None,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_matched_command_still_cannot_touch_anything_outside_the_workspace() {
    let lab = Lab::new();
    let outside = jail_workspace(&lab);
    let secret = outside.join("secret");
    let written = outside.join("written");
    data_tool(&lab, &shell_tool("status", "git status --short"));
    let host = start(&lab, &[jailed_prober(&lab)]).await;
    let run = |command: String| json!({ "command": command });
    // Control: what the grant is for still works.
    assert_eq!(
        answer(&host, "shell", run("cat docs/ok.md".to_owned())).await,
        (false, "exit=Some(0) stdout=fine\n stderr=".to_owned())
    );
    // Attack: the symlink the fs capability refuses is refused by the kernel too.
    assert_eq!(
        answer(&host, "shell", run("cat docs/evil.md".to_owned())).await,
        (
            false,
            "exit=Some(1) stdout= stderr=cat: docs/evil.md: No such file or directory\n".to_owned()
        )
    );
    // Attack: `git diff --no-index` reads any file the user can.
    let (_, text) = answer(
        &host,
        "shell",
        run(format!(
            "git diff --no-index {} /dev/null",
            secret.display()
        )),
    )
    .await;
    assert_eq!(
        text,
        format!(
            "exit=Some(1) stdout= stderr=error: Could not access '{0}'\n",
            secret.display()
        )
    );
    // Attack: `git diff --output` writes anywhere the user can.
    let (_, text) = answer(
        &host,
        "shell",
        run(format!("git diff --output={} HEAD", written.display())),
    )
    .await;
    assert_eq!(
        text,
        format!(
            "exit=Some(128) stdout= stderr=fatal: could not open '{}' for writing: No such \
             file or directory\n",
            written.display()
        )
    );
    assert!(!written.exists(), "git wrote outside the workspace");
    // Attack: the tracked `.gitconfig` as git's global config (HOME was the
    // workspace): `git status` on both front ends runs no fsmonitor.
    let (_, text) = answer(&host, "shell", run("git status".to_owned())).await;
    assert!(text.starts_with("exit=Some(0)"), "{text}");
    let (is_error, text) = answer(&host, "status", json!({})).await;
    assert!(!is_error, "{text}");
    host.shutdown().await;
    assert_no_marker(&[&lab.workspace, &outside]);
    assert_eq!(
        std::fs::read_dir(&outside).expect("outside").count(),
        1,
        "something appeared outside"
    );
    // Control: the attack is live. Run as before (HOME at the workspace),
    // the same `git status` runs the fsmonitor line.
    Command::new("git")
        .arg("status")
        .current_dir(&lab.workspace)
        .env("HOME", &lab.workspace)
        .output()
        .expect("git status");
    assert!(
        lab.workspace.join(MARKER).exists(),
        "the fsmonitor line is not live"
    );
}

/// A workspace unpacked from an archive (git never checks a `.git` out)
/// may hold a `.git` file naming any folder, and the jail gives commands
/// the repository a worktree's `.git` file names outside the workspace.
/// Only one git made, which names the workspace back, is given: naming
/// `~/.ssh` opens nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_git_file_in_the_workspace_opens_nothing_outside_it_to_commands() {
    let lab = Lab::new();
    let outside = outside(&lab);
    let secret = outside.join("secret");
    std::fs::write(&secret, "top secret\n").expect("secret");
    std::fs::write(
        lab.workspace.join(".git"),
        format!("gitdir: {}\n", outside.display()),
    )
    .expect(".git file");
    let reader = crate::attack::prober(&lab, &json!({"shell": ["cat **"]}), None);
    let host = start(&lab, &[reader]).await;
    let (_, text) = answer(
        &host,
        "shell",
        json!({"command": format!("cat {}", secret.display())}),
    )
    .await;
    host.shutdown().await;
    // The lab lies in `/tmp`, which the jail covers: the file is not there.
    assert_eq!(
        text,
        format!(
            "exit=Some(1) stdout= stderr=cat: {}: No such file or directory\n",
            secret.display()
        )
    );
}

/// git's configuration may move a repository's hooks into the working
/// tree (`core.hooksPath = .githooks`, as husky sets `.husky`), read more
/// configuration from a file there (`include.path`) and run a program
/// there (a filter's): each decides what runs, unsandboxed, at the user's
/// next commit, `git status` or checkout, so neither a guest's write nor a
/// confined command reaches them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hooks_and_the_config_git_s_config_names_in_the_workspace_are_control_paths() {
    use std::os::unix::fs::PermissionsExt;
    let lab = Lab::new();
    git_workspace(&lab);
    let ws = lab.workspace.clone();
    let hook = ws.join(".githooks/pre-commit");
    std::fs::create_dir_all(ws.join(".githooks")).expect("hooks");
    std::fs::write(&hook, "#!/bin/sh\nexit 0\n").expect("hook");
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::write(ws.join("shared.gitconfig"), "[user]\n\tname = shared\n").expect("shared");
    git(&ws, &["config", "core.hooksPath", ".githooks"]);
    git(&ws, &["config", "include.path", "../shared.gitconfig"]);
    // A file read when it is there, as projects let each clone add its own.
    git(
        &ws,
        &["config", "--add", "include.path", "../.gitconfig.local"],
    );
    // A program it runs by path, at every checkout of a file it filters.
    std::fs::create_dir_all(ws.join("scripts")).expect("scripts");
    git(
        &ws,
        &["config", "filter.crypt.smudge", "./scripts/decrypt.sh %f"],
    );
    let capabilities = json!({"read": ["**"], "write": ["**"], "shell": ["**"]});
    let host = start(&lab, &[crate::attack::prober(&lab, &capabilities, None)]).await;
    let marker = ws.join(MARKER);
    let hooks = "the folder git runs hooks from (`core.hooksPath`)";
    let include = "a file git reads as its config (`include.path`)";
    let program = "a program git's configuration runs (`filter.<name>.smudge`)";
    // Attack: a guest's write, of the hook, the included config, the filter.
    let planted = format!("#!/bin/sh\ntouch {}\n", marker.display());
    for (path, shown, what) in [
        (".githooks/pre-commit", "`.githooks/`", hooks),
        ("shared.gitconfig", "`shared.gitconfig`", include),
        ("scripts/decrypt.sh", "`scripts/decrypt.sh`", program),
    ] {
        assert_eq!(
            answer(&host, "fs_write", json!({"path": path, "text": planted})).await,
            (
                true,
                format!(
                    "fs-write `{path}` refused: {shown} is a control path ({what}: it decides \
                     what runs); no grant reaches it"
                )
            ),
        );
    }
    // Attack: a confined command's.
    for path in [".githooks/pre-commit", "shared.gitconfig"] {
        let (_, text) = answer(
            &host,
            "shell",
            json!({"command": format!("echo 'touch {}' >> {path}", marker.display())}),
        )
        .await;
        assert_eq!(
            text,
            format!(
                "exit=Some(2) stdout= stderr=sh: 1: cannot create {path}: Read-only file system\n"
            )
        );
    }
    // Attack: a command creates the included file that was not there: it
    // cannot be bound before it exists, so it is set aside after.
    let (is_error, text) = answer(
        &host,
        "shell",
        json!({"command": "printf '[user]\\n\\tname = planted\\n' > .gitconfig.local"}),
    )
    .await;
    assert!(is_error, "{text}");
    assert!(
        text.ends_with(
            "it created the control path `.gitconfig.local` (which decides what runs); no \
             command may write it, so it was renamed with `.refused-by-zotbox` added, beside it"
        ),
        "{text}"
    );
    assert!(!ws.join(".gitconfig.local").exists());
    assert!(ws.join(".gitconfig.local.refused-by-zotbox").is_file());
    // Control: the project's other files are the guest's to write.
    assert_eq!(
        answer(&host, "fs_write", json!({"path": "notes.txt", "text": "x"})).await,
        (false, "written".to_owned())
    );
    host.shutdown().await;
    // Control: the attack is live: git runs the hook at a commit, and
    // reads the included file as config.
    assert_hook_runs(&hook, &planted, &ws, &marker);
    let name = Command::new("git")
        .args(["config", "user.name"])
        .current_dir(&ws)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git config");
    assert_eq!(String::from_utf8_lossy(&name.stdout), "shared\n");
}

/// A hook written by hand runs a script of the project, and a hook
/// manager's hook reads the project's configuration of it (pre-commit's
/// `.pre-commit-config.yaml`, whose `local` hooks run any command): each
/// decides what runs at the next commit, unsandboxed, as the hook does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_files_a_repository_s_hooks_run_are_control_paths() {
    use std::os::unix::fs::PermissionsExt;
    let lab = Lab::new();
    git_workspace(&lab);
    let ws = lab.workspace.clone();
    let hooks = ws.join(".git/hooks");
    std::fs::create_dir_all(ws.join("scripts")).expect("scripts");
    let check = ws.join("scripts/check.sh");
    std::fs::write(&check, "#!/bin/sh\nexit 0\n").expect("check");
    std::fs::write(ws.join(".pre-commit-config.yaml"), "repos: []\n").expect("config");
    for (hook, text) in [
        ("pre-commit", "#!/bin/sh\nexec ./scripts/check.sh\n"),
        (
            "pre-push",
            "#!/usr/bin/env bash\n# File generated by pre-commit\n\
             ARGS=(hook-impl --config=.pre-commit-config.yaml --hook-type=pre-push)\n",
        ),
    ] {
        std::fs::write(hooks.join(hook), text).expect("hook");
    }
    for file in [hooks.join("pre-commit"), check.clone()] {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let capabilities = json!({"read": ["**"], "write": ["**"], "shell": ["**"]});
    let host = start(&lab, &[crate::attack::prober(&lab, &capabilities, None)]).await;
    let marker = ws.join(MARKER);
    let planted = format!("#!/bin/sh\ntouch {}\n", marker.display());
    // Attack: a guest's write of what each hook runs or reads.
    for (path, hook) in [
        ("scripts/check.sh", "pre-commit"),
        (".pre-commit-config.yaml", "pre-push"),
    ] {
        assert_eq!(
            answer(&host, "fs_write", json!({"path": path, "text": planted})).await,
            (
                true,
                format!(
                    "fs-write `{path}` refused: `{path}` is a control path (a file git's \
                     `{hook}` hook runs or reads: it decides what runs); no grant reaches it"
                )
            ),
        );
    }
    // Attack: a confined command's.
    let (_, text) = answer(
        &host,
        "shell",
        json!({"command": format!("echo 'touch {}' >> scripts/check.sh", marker.display())}),
    )
    .await;
    assert_eq!(
        text,
        "exit=Some(2) stdout= stderr=sh: 1: cannot create scripts/check.sh: Read-only file \
         system\n"
    );
    // Control: the project's other scripts are the guest's to write.
    assert_eq!(
        answer(
            &host,
            "fs_write",
            json!({"path": "scripts/build.sh", "text": "x"})
        )
        .await,
        (false, "written".to_owned())
    );
    host.shutdown().await;
    // Control: the attack is live: the hook runs the script at a commit.
    std::fs::write(&check, &planted).expect("plant the script");
    git(&ws, &["commit", "-q", "--allow-empty", "-m", "second"]);
    assert!(marker.exists(), "the hook did not run the script");
}

/// git's configuration may change while zot runs: `npm install` runs
/// husky's `prepare` script, which sets `core.hooksPath`. The hooks folder
/// it names is a control path from the next call on, not from the next
/// session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hooks_folder_configured_while_the_host_runs_is_a_control_path_at_once() {
    let lab = Lab::new();
    git_workspace(&lab);
    let ws = lab.workspace.clone();
    std::fs::create_dir_all(ws.join(".husky/_")).expect("hooks");
    let capabilities = json!({"read": ["**"], "write": ["**"], "shell": ["**"]});
    let host = start(&lab, &[crate::attack::prober(&lab, &capabilities, None)]).await;
    let write = json!({"path": ".husky/_/pre-commit", "text": "exit 0\n"});
    // Control: nothing names the folder yet.
    assert_eq!(
        answer(&host, "fs_write", write.clone()).await,
        (false, "written".to_owned())
    );
    git(&ws, &["config", "core.hooksPath", ".husky/_"]);
    // Attack: a guest's write and a confined command's, after the change.
    assert_eq!(
        answer(&host, "fs_write", write).await,
        (
            true,
            "fs-write `.husky/_/pre-commit` refused: `.husky/` is a control path (the folder \
             git runs hooks from (`core.hooksPath`): it decides what runs); no grant reaches it"
                .to_owned()
        )
    );
    let (_, text) = answer(
        &host,
        "shell",
        json!({"command": "echo 'touch pwned' >> .husky/_/pre-commit"}),
    )
    .await;
    assert_eq!(
        text,
        "exit=Some(2) stdout= stderr=sh: 1: cannot create .husky/_/pre-commit: Read-only file \
         system\n"
    );
    host.shutdown().await;
    assert_eq!(
        std::fs::read_to_string(ws.join(".husky/_/pre-commit")).expect("hook"),
        "exit 0\n"
    );
}

/// A repository nested in the workspace (a submodule here; a clone in
/// `vendor/` alike) has a configuration of its own, and what it names in
/// its working tree decides what runs as the workspace's own does: husky
/// in the submodule sets `core.hooksPath = .husky/_`, and `git commit`
/// there runs `.husky/_/pre-commit`, unsandboxed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hooks_a_nested_repository_s_config_names_are_control_paths() {
    let lab = Lab::new();
    git_workspace(&lab);
    let ws = lab.workspace.clone();
    let upstream = outside(&lab).join("theme");
    std::fs::create_dir_all(&upstream).expect("upstream");
    std::fs::write(upstream.join("style.css"), "body {}\n").expect("style");
    git(&upstream, &["init", "-q"]);
    git(&upstream, &["add", "style.css"]);
    git(&upstream, &["commit", "-q", "-m", "first"]);
    let source = upstream.to_str().expect("a UTF-8 path");
    git(
        &ws,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            source,
            "theme",
        ],
    );
    let theme = ws.join("theme");
    let hook = theme.join(".husky/_/pre-commit");
    std::fs::create_dir_all(theme.join(".husky/_")).expect("hooks");
    git(&theme, &["config", "core.hooksPath", ".husky/_"]);
    let capabilities = json!({"read": ["**"], "write": ["**"], "shell": ["**"]});
    let host = start(&lab, &[crate::attack::prober(&lab, &capabilities, None)]).await;
    let marker = ws.join(MARKER);
    let planted = format!("#!/bin/sh\ntouch {}\n", marker.display());
    // Attack: a guest's write of the submodule's hook, and of the
    // project's hook husky's runs.
    for path in ["theme/.husky/_/pre-commit", "theme/.husky/pre-commit"] {
        assert_eq!(
            answer(&host, "fs_write", json!({"path": path, "text": planted})).await,
            (
                true,
                format!(
                    "fs-write `{path}` refused: `theme/.husky/` is a control path (the folder \
                     git runs hooks from (`core.hooksPath`): it decides what runs); no grant \
                     reaches it"
                )
            ),
        );
    }
    // Attack: a confined command's.
    let (_, text) = answer(
        &host,
        "shell",
        json!({"command": format!("echo 'touch {}' > theme/.husky/_/pre-commit", marker.display())}),
    )
    .await;
    assert_eq!(
        text,
        "exit=Some(2) stdout= stderr=sh: 1: cannot create theme/.husky/_/pre-commit: \
         Read-only file system\n"
    );
    assert!(!hook.exists());
    // Control: the submodule's other files are the guest's to write.
    assert_eq!(
        answer(
            &host,
            "fs_write",
            json!({"path": "theme/notes.txt", "text": "x"})
        )
        .await,
        (false, "written".to_owned())
    );
    host.shutdown().await;
    // Control: the attack is live: git runs the hook at a commit there.
    assert_hook_runs(&hook, &planted, &theme, &marker);
}

/// A repository nested in the workspace whose configuration names a hooks
/// folder outside its own working tree (a monorepo's package sharing the
/// project's hooks): a guest's write reaches that folder without passing
/// through the nested repository, and is refused all the same; so is a
/// confined command's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_a_nested_repository_names_outside_its_working_tree_are_control_paths() {
    let lab = Lab::new();
    git_workspace(&lab);
    let ws = lab.workspace.clone();
    let package = ws.join("packages/app");
    std::fs::create_dir_all(&package).expect("packages/app");
    std::fs::create_dir_all(ws.join("tools/hooks")).expect("tools/hooks");
    git(&package, &["init", "-q"]);
    git(&package, &["config", "core.hooksPath", "../../tools/hooks"]);
    let capabilities = json!({"read": ["**"], "write": ["**"], "shell": ["**"]});
    let host = start(&lab, &[crate::attack::prober(&lab, &capabilities, None)]).await;
    let marker = ws.join(MARKER);
    // Attack: a guest's and a confined command's writes of the hook `git
    // commit` in `packages/app/` runs.
    let planted = assert_hook_unwritable(&host, "tools/hooks/", "pre-commit", &marker).await;
    let hook = ws.join("tools/hooks/pre-commit");
    assert!(!hook.exists());
    // Control: the rest of `tools/` is the guest's to write.
    assert_eq!(
        answer(
            &host,
            "fs_write",
            json!({"path": "tools/notes.txt", "text": "x"})
        )
        .await,
        (false, "written".to_owned())
    );
    host.shutdown().await;
    // Control: the attack is live: git runs the hook at a commit there.
    assert_hook_runs(&hook, &planted, &package, &marker);
}

/// Attack: a command makes a folder of the project (`src/`) a repository
/// git uses from every folder below, with three files (`HEAD`, and
/// `objects` and `refs` made executable, which pass git's test as folders
/// do) and a `config` whose pager the user's next `git branch` runs; and
/// the same of the workspace's root, which is no checkout. Neither was
/// seen (and `git branch` on a terminal ran the pager, unsandboxed); what
/// makes each a repository is set aside, the folders stay, and git finds
/// no repository there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_made_a_repository_by_what_it_holds_loses_its_head() {
    let lab = Lab::new();
    let ws = &lab.workspace;
    std::fs::create_dir_all(ws.join("src")).expect("src");
    std::fs::write(ws.join("src/main.rs"), "fn main() {}\n").expect("main.rs");
    let pager = format!("touch {}", ws.join(MARKER).display());
    std::fs::write(
        ws.join("make.sh"),
        format!(
            "for d in src .; do printf 'ref: refs/heads/main\\n' > $d/HEAD; \
             printf '[core]\\n\\tpager = {pager}\\n' > $d/config; \
             : > $d/objects; : > $d/refs; chmod +x $d/objects $d/refs; done"
        ),
    )
    .expect("script");
    let prober = crate::attack::prober(&lab, &json!({"shell": ["sh make.sh"]}), None);
    let host = start(&lab, &[prober]).await;
    let (is_error, text) = answer(&host, "shell", json!({"command": "sh make.sh"})).await;
    host.shutdown().await;
    assert!(is_error, "{text}");
    assert!(
        text.ends_with(
            "it created the control path `HEAD`, `src/HEAD` (which decides what runs); no \
             command may write it, so it was renamed with `.refused-by-zotbox` added, beside it"
        ),
        "{text}"
    );
    assert!(ws.join("src/main.rs").is_file());
    assert!(ws.join("src/HEAD.refused-by-zotbox").is_file());
    for dir in [ws.join("src"), ws.to_owned()] {
        let branch = Command::new("git")
            .args(["-c", "core.pager=cat", "branch"])
            .env("GIT_CEILING_DIRECTORIES", ws.parent().expect("parent"))
            .env_remove("GIT_DIR")
            .current_dir(&dir)
            .output()
            .expect("git");
        assert!(
            !branch.status.success(),
            "git took `{}` for a repository",
            dir.display()
        );
    }
}

/// A bare repository in the workspace (a fixture the project's tests push
/// to) whose configuration takes its hooks from the project's `ci/hooks/`:
/// a push runs them, unsandboxed, so neither a guest's write nor a
/// confined command reaches that folder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_a_bare_repository_in_the_workspace_names_are_control_paths() {
    let lab = Lab::new();
    git_workspace(&lab);
    let ws = lab.workspace.clone();
    let remote = ws.join("fixtures/remote.git");
    std::fs::create_dir_all(&remote).expect("fixtures/remote.git");
    std::fs::create_dir_all(ws.join("ci/hooks")).expect("ci/hooks");
    git(&remote, &["init", "-q", "--bare"]);
    git(&remote, &["config", "core.hooksPath", "../../ci/hooks"]);
    let capabilities = json!({"read": ["**"], "write": ["**"], "shell": ["**"]});
    let host = start(&lab, &[crate::attack::prober(&lab, &capabilities, None)]).await;
    let marker = ws.join(MARKER);
    // Attack: a guest's and a confined command's writes of the hook a push
    // runs.
    let planted = assert_hook_unwritable(&host, "ci/hooks/", "post-receive", &marker).await;
    let hook = ws.join("ci/hooks/post-receive");
    assert!(!hook.exists());
    host.shutdown().await;
    // Control: the attack is live: a push to the fixture runs the hook.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(&hook, &planted).expect("plant the hook");
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let remote_url = remote.to_str().expect("a UTF-8 path");
    git(&ws, &["push", "-q", remote_url, "HEAD:refs/heads/main"]);
    assert!(marker.exists(), "the hook did not run");
}

/// An extension granted `git **` (a git helper, as a user would grant it)
/// against a workspace holding a nested repository: its commands may run
/// git anywhere in the workspace, but the repository's config stays as it
/// was, and a repository it creates below the root is taken back, so no
/// later `git status` there (the user's, their prompt's, zot's own `bash`,
/// none of them sandboxed) runs its fsmonitor line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cannot_plant_a_nested_repository_that_runs_code_later() {
    let lab = Lab::new();
    git_workspace(&lab);
    let nested = lab.workspace.join("vendor/lib");
    std::fs::create_dir_all(&nested).expect("vendor/lib");
    git(&nested, &["init", "-q"]);
    let config = std::fs::read_to_string(nested.join(".git/config")).expect("config");
    let prober = crate::attack::prober(&lab, &json!({"shell": ["git **"]}), None);
    let host = start(&lab, &[prober]).await;
    let fsmonitor = format!(
        "core.fsmonitor \"touch {}\"",
        lab.workspace.join(MARKER).display()
    );
    let run = |command: String| json!({ "command": command });
    // Attack: the fsmonitor line in the repository that was there.
    let (_, text) = answer(
        &host,
        "shell",
        run(format!("git -C vendor/lib config {fsmonitor}")),
    )
    .await;
    assert_eq!(
        text,
        "exit=Some(255) stdout= stderr=error: could not lock config file .git/config: \
         Read-only file system\n"
    );
    // Attack: a repository of its own, in a folder it creates, with the line.
    let (is_error, text) = answer(&host, "shell", run("git init -q docs/fresh".to_owned())).await;
    assert!(is_error, "{text}");
    assert!(
        text.ends_with(
            "it created the control path `docs/fresh/.git/` (which decides what runs); no \
             command may write it, so it was renamed with `.refused-by-zotbox` added, beside it"
        ),
        "{text}"
    );
    // Control: the rest of the nested project is the workspace's.
    let (is_error, text) = answer(
        &host,
        "shell",
        run("git -C vendor/lib status --short".to_owned()),
    )
    .await;
    assert!(!is_error && text.starts_with("exit=Some(0)"), "{text}");
    host.shutdown().await;
    assert_eq!(
        std::fs::read_to_string(nested.join(".git/config")).expect("config"),
        config
    );
    assert!(!lab.workspace.join("docs/fresh/.git").exists());
    assert!(
        lab.workspace
            .join("docs/fresh/.git.refused-by-zotbox/config")
            .is_file()
    );
    for dir in [&nested, &lab.workspace.join("docs/fresh")] {
        let _ = Command::new("git").arg("status").current_dir(dir).output();
    }
    assert_no_marker(&[&lab.workspace]);
    // The refusal is audited as one.
    assert!(
        audit_lines(&lab)
            .iter()
            .any(|line| line["capability"] == "shell"
                && line["decision"] == "deny"
                && line["subject"] == "git init -q docs/fresh"),
        "{:#?}",
        audit_lines(&lab)
    );
}

/// Whether a process whose command line holds `token` is still alive.
fn survivor(token: &str) -> Option<String> {
    let entries = std::fs::read_dir("/proc").ok()?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).contains(token)
            && crate::support::process_alive(pid.parse().unwrap_or(0))
        {
            return Some(format!("{pid}: {}", String::from_utf8_lossy(&cmdline)));
        }
    }
    None
}

/// The issue's `setsid sh -c 'sleep 120; touch MARKER' &`: before, it
/// outlived the call and the process-group kill. Now nothing it started is
/// left once the call has answered, on both front ends and at the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setsid_does_not_outlive_the_call() {
    let lab = Lab::new();
    // A token unique to this test finds its processes in `/proc`.
    let token = format!("sleep 120; touch {MARKER} # {}", lab.workspace.display());
    let escape = format!("setsid sh -c '{token}' & echo started");
    data_tool(&lab, &shell_syntax_tool("escape", &escape));
    let guest = crate::attack::prober(&lab, &json!({"shell": ["**"]}), None);
    let host = start(&lab, &[guest]).await;
    assert_eq!(
        answer(&host, "escape", json!({})).await,
        (false, "started\n".to_owned())
    );
    assert_eq!(
        answer(&host, "shell", json!({ "command": escape })).await,
        (false, "exit=Some(0) stdout=started\n stderr=".to_owned())
    );
    let left = crate::support::eventually("the detached children to die", || {
        survivor(&token).is_none().then_some(())
    })
    .await;
    assert!(
        left.is_some(),
        "a detached child survived: {:?}",
        survivor(&token)
    );
    host.shutdown().await;
    assert_no_marker(&[&lab.workspace]);
}

/// With `"shell_network": false` (the default) a shell command cannot
/// connect to a server on this machine; a policy that grants it can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_network_is_closed_unless_the_policy_grants_it() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = listener.local_addr().expect("port").port();
    listener.set_nonblocking(true).expect("non-blocking");
    let connect = format!(
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2); \
         print(\"connected\")'"
    );
    for granted in [false, true] {
        let lab = Lab::new();
        if granted {
            crate::attack::user_policy(&lab, &json!({"shell_network": true}));
        }
        data_tool(&lab, &shell_tool("connect", &connect));
        let host = start(&lab, &[]).await;
        let (is_error, text) = answer(&host, "connect", json!({})).await;
        host.shutdown().await;
        if granted {
            assert_eq!((is_error, text.as_str()), (false, "connected\n"));
            assert!(listener.accept().is_ok(), "no connection arrived");
        } else {
            assert!(is_error && !text.contains("connected\n"), "{text}");
            assert!(listener.accept().is_err(), "a connection arrived");
        }
    }
}

/// `require_confinement: true` on a kernel that offers everything: shell
/// commands run as before, confined. (The refusal where a protection is
/// missing is pinned by the unit tests of `capability::confine`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_confinement_runs_where_the_kernel_offers_every_protection() {
    let lab = Lab::new();
    crate::attack::user_policy(&lab, &json!({"require_confinement": true}));
    data_tool(&lab, &shell_tool("say", "printf %s {arg}"));
    let host = start(&lab, &[]).await;
    assert_eq!(
        answer(&host, "say", json!({"arg": "hi"})).await,
        (false, "hi".to_owned())
    );
    host.shutdown().await;
}

// ---------------------------------------------------------------------------
// Native extensions under `confine_native`

/// A native extension whose one tool, `run`, runs `sh -c <script>` and
/// answers `exit=<code> out=<stdout> err=<stderr>`.
const NATIVE_PROBE: &str = r#"
import json, subprocess, sys

def send(frame):
    sys.stdout.write(json.dumps(frame) + "\n")
    sys.stdout.flush()

send({"type": "hello", "name": "natprobe", "version": "1.0.0", "capabilities": ["tools"]})
send({"type": "register_tool", "name": "run", "description": "runs sh -c",
      "schema": {"type": "object", "properties": {"sh": {"type": "string"}}}})
send({"type": "ready"})
for line in sys.stdin:
    frame = json.loads(line)
    if frame.get("type") == "tool_call":
        done = subprocess.run(["sh", "-c", frame["args"]["sh"]], capture_output=True, text=True)
        text = f"exit={done.returncode} out={done.stdout} err={done.stderr}"
        send({"type": "tool_result", "id": frame["id"], "content": [{"type": "text", "text": text}]})
    elif frame.get("type") == "shutdown":
        send({"type": "shutdown_ack"})
        break
"#;

/// Writes `<lab.dev>/natprobe/` running [`NATIVE_PROBE`] with the system's
/// Python (a shim under the user's home would not be reachable confined).
fn native_probe(lab: &Lab) -> PathBuf {
    native_probe_in(&lab.dev.join("natprobe"))
}

/// [`native_probe`] written to `dir`.
fn native_probe_in(dir: &Path) -> PathBuf {
    let dir = dir.to_owned();
    std::fs::create_dir_all(&dir).expect("natprobe folder");
    std::fs::write(dir.join("probe.py"), NATIVE_PROBE).expect("probe.py");
    crate::support::write_json(
        &dir.join("extension.json"),
        &json!({"name": "natprobe", "version": "1.0.0", "exec": "/usr/bin/python3",
                "args": ["probe.py"], "description": "runs sh -c"}),
    );
    dir
}

/// The one data dir made under the lab's `$ZOT_HOME/data/`, checked to be
/// keyed by its extension's folder: `natprobe@` and 16 hex digits.
fn only_data_dir(lab: &Lab) -> PathBuf {
    let made: Vec<PathBuf> = std::fs::read_dir(lab.home.join("data"))
        .expect("data dirs")
        .map(|entry| entry.expect("entry").path())
        .collect();
    let [data] = made.as_slice() else {
        panic!("one data dir expected: {made:?}");
    };
    let name = data
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let key = name.strip_prefix("natprobe@").unwrap_or_default();
    assert!(
        key.len() == 16 && key.chars().all(|c| c.is_ascii_hexdigit()),
        "{name}"
    );
    data.clone()
}

/// A workspace's extension named as one the user installed shadows it
/// (zot prefers the workspace's), and with the user's trust it runs; but a
/// name is its author's to choose, so it does not open the installed one's
/// data dir, where that one keeps what it saved (a token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confined_native_extension_named_as_an_installed_one_gets_its_own_data() {
    let lab = Lab::new();
    crate::attack::user_policy(&lab, &json!({"confine_native": true}));
    native_probe_in(&lab.user_dir().join("natprobe"));
    let saved = lab.home.join("data/natprobe/token");
    std::fs::create_dir_all(lab.home.join("data/natprobe")).expect("data dir");
    std::fs::write(&saved, "the installed one's token\n").expect("token");
    let read = json!({"sh": format!("cat {}", saved.display())});
    // Control: the installed one reads what it saved.
    let host = start(&lab, &[]).await;
    assert_eq!(
        answer(&host, "run", read.clone()).await,
        (
            false,
            "exit=0 out=the installed one's token\n err=".to_owned()
        )
    );
    host.shutdown().await;
    // Attack: the workspace's namesake, trusted, reads it.
    native_probe_in(&lab.project_dir().join("natprobe"));
    let host = start(&lab, &[]).await;
    let (is_error, text) = answer(&host, "run", read).await;
    host.shutdown().await;
    assert!(!is_error, "{text}");
    // (`/tmp`, where the lab lies, is covered: only its own data dir is there.)
    assert_eq!(
        text,
        format!(
            "exit=1 out= err=cat: {}: No such file or directory\n",
            saved.display()
        )
    );
    let own: Vec<String> = std::fs::read_dir(lab.home.join("data"))
        .expect("data dirs")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(own.len(), 2, "{own:?}");
    assert!(
        own.iter().any(|name| name.starts_with("natprobe@")),
        "{own:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confined_native_extension_reaches_its_folder_its_data_and_the_workspace_only() {
    let lab = Lab::new();
    let outside = outside(&lab);
    std::fs::write(outside.join("secret"), "top secret\n").expect("secret");
    // The root's repository, a nested one (whose hooks husky moved into
    // its working tree) and a bare one of any name.
    let husky = "[core]\n\thooksPath = .husky\n";
    for (repository, config) in [
        (".git", "[core]\n"),
        ("vendor/lib/.git", husky),
        ("fixtures/remote.git", "[core]\n"),
    ] {
        std::fs::create_dir_all(lab.workspace.join(repository)).expect("repository");
        std::fs::write(lab.workspace.join(repository).join("config"), config).expect("config");
    }
    std::fs::create_dir_all(lab.workspace.join("vendor/lib/.husky")).expect("hooks");
    git(
        &lab.workspace,
        &["init", "-q", "--bare", "fixtures/remote.git"],
    );
    crate::attack::user_policy(&lab, &json!({"confine_native": true}));
    let dir = native_probe(&lab);
    let host = start(&lab, std::slice::from_ref(&dir)).await;
    // Given by path, not installed: its data dir is keyed by its folder.
    let data = only_data_dir(&lab);
    let run = |script: String| {
        let host = &host;
        async move {
            let (is_error, text) = answer(host, "run", json!({ "sh": script })).await;
            assert!(!is_error, "{text}");
            text
        }
    };
    let ws = lab.workspace.display();
    let denied =
        |what: &str| format!("exit=2 out= err=sh: 1: cannot create {what}: Permission denied\n");
    // Its folder: readable, not writable.
    assert_eq!(
        run("head -c 7 probe.py".to_owned()).await,
        "exit=0 out=\nimport err="
    );
    assert_eq!(
        run("echo x > probe.py".to_owned()).await,
        denied("probe.py")
    );
    // Its data dir and the workspace: writable.
    assert_eq!(
        run(format!("echo d > {0}/f && cat {0}/f", data.display())).await,
        "exit=0 out=d\n err="
    );
    assert_eq!(
        run(format!("echo w > {ws}/w.txt && cat {ws}/w.txt")).await,
        "exit=0 out=w\n err="
    );
    // Attack: read outside, write outside, read the user's zot home.
    assert_eq!(
        run(format!("cat {}/secret", outside.display())).await,
        format!(
            "exit=1 out= err=cat: {}/secret: No such file or directory\n",
            outside.display()
        )
    );
    // (`/tmp`, where the lab lies, is covered: its folders are not there.)
    let written = outside.join("written");
    assert_eq!(
        run(format!("echo x > {}", written.display())).await,
        format!(
            "exit=2 out= err=sh: 1: cannot create {}: Directory nonexistent\n",
            written.display()
        )
    );
    let policy = lab.home.join("policy.json");
    assert_eq!(
        run(format!("cat {}", policy.display())).await,
        format!(
            "exit=1 out= err=cat: {}: No such file or directory\n",
            policy.display()
        )
    );
    // Attack: the workspace's control paths, the root's and those below
    // it (`git status` in `vendor/lib/` runs its fsmonitor line, `git
    // commit` there its hook; a push to the fixture runs its hooks).
    for config in [
        ".git/config",
        "vendor/lib/.git/config",
        "vendor/lib/.husky/pre-commit",
        "fixtures/remote.git/config",
    ] {
        assert_eq!(
            run(format!("echo x >> {ws}/{config}")).await,
            format!("exit=2 out= err=sh: 1: cannot create {ws}/{config}: Read-only file system\n")
        );
    }
    // HOME is private, not the user's.
    let home = run("printf %s \"$HOME\"".to_owned()).await;
    assert!(home.contains("zotbox-home-"), "{home}");
    // Attack: a detached child meant to outlive the extension.
    let token = format!("sleep 120 # {}", lab.workspace.display());
    run(format!("setsid sh -c '{token}' > /dev/null 2>&1 &")).await;
    host.shutdown().await;
    let left = crate::support::eventually("the detached child to die", || {
        survivor(&token).is_none().then_some(())
    })
    .await;
    assert!(
        left.is_some(),
        "a detached child survived: {:?}",
        survivor(&token)
    );
    assert!(!written.exists());
    assert_eq!(
        std::fs::read_to_string(dir.join("probe.py")).expect("probe"),
        NATIVE_PROBE
    );
    for (config, was) in [
        (".git/config", "[core]\n"),
        ("vendor/lib/.git/config", husky),
    ] {
        assert_eq!(
            std::fs::read_to_string(lab.workspace.join(config)).expect("config"),
            was
        );
    }
    assert!(!lab.workspace.join("vendor/lib/.husky/pre-commit").exists());
    let bare =
        std::fs::read_to_string(lab.workspace.join("fixtures/remote.git/config")).expect("config");
    assert!(!bare.ends_with("x\n"), "{bare}");

    // Control: without `confine_native`, a native extension runs as zot
    // runs it, and reads the secret.
    crate::attack::user_policy(&lab, &json!({}));
    let host = start(&lab, &[dir]).await;
    assert_eq!(
        answer(
            &host,
            "run",
            json!({"sh": format!("cat {}/secret", outside.display())})
        )
        .await,
        (false, "exit=0 out=top secret\n err=".to_owned())
    );
    host.shutdown().await;
}

/// `$ZOT_HOME` inside the workspace (a user working in their home folder):
/// a confined native extension may write the workspace, yet it reads
/// nothing of `$ZOT_HOME` (the user's secrets and keys, zot's credentials)
/// and writes nothing there (the policy that confines it included), while
/// its own data dir there stays writable. Shell commands get the same
/// mounts (`control_paths::a_shell_tool_reads_no_secret_…`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confined_native_extension_reads_no_secret_and_writes_nothing_of_zot_home_in_the_workspace()
 {
    let lab = Lab::new();
    let home = lab.workspace.join("zh");
    let policy_file = home.join("policy.json");
    crate::support::write_json(&policy_file, &json!({"confine_native": true}));
    std::fs::write(home.join("secrets.json"), "hunter2-in-the-file").expect("secrets");
    std::fs::write(home.join("auth.json"), "sk-zot-credential").expect("auth");
    std::fs::create_dir_all(home.join("keys")).expect("keys");
    std::fs::write(home.join("keys/zotbox.key"), "untrusted comment: k").expect("key");
    // Installed for the user, in `$ZOT_HOME/extensions`: its own folder
    // lies under the cover, and is moved back into it.
    native_probe_in(&home.join("extensions/natprobe"));
    let policy = zotbox::policy::Policy::load(&home.join("no-system-policy.json"), &policy_file)
        .expect("policy");
    let host = lab
        .builder()
        .zot_home(&home)
        .policy(policy)
        .build()
        .await
        .expect("build the host");
    let run = |script: &str| {
        let host = &host;
        let script = script.to_owned();
        async move {
            let (is_error, text) = answer(host, "run", json!({ "sh": script })).await;
            assert!(!is_error, "{text}");
            text
        }
    };
    let ws = lab.workspace.display();
    // Attack: the secrets, the signing key and zot's credentials: the
    // folder is an empty cover, but for the way to the data dir.
    assert_eq!(
        run(&format!(
            "cat {ws}/zh/secrets.json {ws}/zh/auth.json {ws}/zh/keys/zotbox.key; ls -A {ws}/zh \
             {ws}/zh/extensions"
        ))
        .await,
        format!(
            "exit=0 out={ws}/zh:\ndata\nextensions\n\n{ws}/zh/extensions:\nnatprobe\n \
             err=cat: {ws}/zh/secrets.json: No such file or directory\n\
             cat: {ws}/zh/auth.json: No such file or directory\n\
             cat: {ws}/zh/keys/zotbox.key: No such file or directory\n"
        )
    );
    // Attack: the policy that confines it, rewritten for the next start.
    assert_eq!(
        run(&format!("echo {{}} > {ws}/zh/policy.json")).await,
        format!(
            "exit=2 out= err=sh: 1: cannot create {ws}/zh/policy.json: Read-only file system\n"
        )
    );
    // Attack: its own folder, rewritten for the next start.
    assert_eq!(
        run(&format!("echo x >> {ws}/zh/extensions/natprobe/probe.py")).await,
        format!(
            "exit=2 out= err=sh: 1: cannot create {ws}/zh/extensions/natprobe/probe.py: \
             Read-only file system\n"
        )
    );
    // Control: the workspace and its own data dir are writable.
    assert_eq!(
        run(&format!(
            "echo w > {ws}/w.txt && echo d > {ws}/zh/data/natprobe/d.txt && cat {ws}/w.txt {ws}/zh/data/natprobe/d.txt"
        ))
        .await,
        "exit=0 out=w\nd\n err="
    );
    host.shutdown().await;
    assert_eq!(
        std::fs::read_to_string(&policy_file).expect("policy"),
        "{\n  \"confine_native\": true\n}\n"
    );
    assert_eq!(
        std::fs::read_to_string(home.join("data/natprobe/d.txt")).expect("data"),
        "d\n"
    );
}

/// As zot: running in the workspace, it starts `zotbox run` for the
/// extension in `dir` in that folder (the subshell), and waits for it.
fn zot_in_the_workspace(lab: &Lab, dir: &Path) -> crate::support::Peer {
    let home = lab.dev.join("user-home");
    std::fs::create_dir_all(&home).expect("user home");
    zot_in_the_workspace_with_home(lab, dir, &home)
}

/// [`zot_in_the_workspace`], with `$HOME` at `home`.
fn zot_in_the_workspace_with_home(lab: &Lab, dir: &Path, home: &Path) -> crate::support::Peer {
    let mut command = tokio::process::Command::new("sh");
    command
        .args([
            "-c",
            r#"(cd "$1" && exec "$0" run "$1")"#,
            env!("CARGO_BIN_EXE_zotbox"),
        ])
        .arg(dir)
        .current_dir(&lab.workspace)
        .env("ZOT_HOME", &lab.home)
        .env("HOME", home)
        .env_remove("ZOTBOX_LOG");
    crate::support::Peer::spawn(command)
}

/// Waits for the native probe to be ready and answers it as zot running
/// in `ws` does.
async fn greet_as_zot(zot: &mut crate::support::Peer, ws: &str) {
    zot.recv_through("ready").await;
    zot.send(
        &json!({"type": "hello_ack", "protocol_version": 1, "zot_version": "x",
                     "provider": "p", "model": "m", "cwd": ws}),
    )
    .await;
}

/// What the native probe answers when zot asks it to run `script`.
async fn probe_runs(zot: &mut crate::support::Peer, script: String) -> String {
    zot.send(&json!({"type": "tool_call", "id": "1", "name": "run", "args": {"sh": script}}))
        .await;
    let answer = zot.recv_through("tool_result").await;
    answer.last().expect("an answer")["content"][0]["text"]
        .as_str()
        .expect("text")
        .to_owned()
}

/// Under zot (`zotbox run`, started in the extension's folder by a zot
/// running in the workspace), a confined native extension reaches the
/// workspace zot runs in, with the same mounts as under the library: its
/// `$ZOT_HOME` there read-only, the secrets covered. Before, it started with
/// no workspace at all: nothing of the project was readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_zotbox_run_a_confined_native_extension_reaches_the_workspace_zot_runs_in() {
    let lab = Lab::new();
    let ws = lab.workspace.display().to_string();
    crate::attack::user_policy(&lab, &json!({"confine_native": true}));
    let dir = native_probe(&lab);
    std::fs::write(lab.workspace.join("notes.txt"), "the project's\n").expect("notes");
    let mut zot = zot_in_the_workspace(&lab, &dir);
    greet_as_zot(&mut zot, &ws).await;
    let mut run = async |script: String| probe_runs(&mut zot, script).await;
    assert_eq!(
        run(format!(
            "cat {ws}/notes.txt && echo w > {ws}/w.txt && cat {ws}/w.txt"
        ))
        .await,
        "exit=0 out=the project's\nw\n err="
    );
    // Attack: the user's zot home (here outside the workspace) and its policy.
    let policy = lab.home.join("policy.json").display().to_string();
    assert_eq!(
        run(format!("cat {policy}")).await,
        format!("exit=1 out= err=cat: {policy}: No such file or directory\n")
    );
    zot.send(&json!({"type": "shutdown"})).await;
    let ended = zot.end().await;
    assert!(ended.status.success(), "{ended:#?}");
    assert!(
        !ended.stderr.contains("zot names the workspace"),
        "{ended:#?}"
    );
}

/// zot run where a new terminal opens: the workspace is the home folder,
/// and a confined native extension gets none of it (a guest gets nothing of
/// it either, `control_paths::a_guest_gets_nothing_of_a_workspace_that_is_the_home_folder`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confined_native_extension_gets_nothing_of_a_workspace_that_is_the_home_folder() {
    let lab = Lab::new();
    let ws = lab.workspace.display().to_string();
    crate::attack::user_policy(&lab, &json!({"confine_native": true}));
    let dir = native_probe(&lab);
    std::fs::create_dir_all(lab.workspace.join(".ssh")).expect(".ssh");
    std::fs::write(lab.workspace.join(".ssh/id_ed25519"), "PRIVATE KEY").expect("key");
    let mut zot = zot_in_the_workspace_with_home(&lab, &dir, &lab.workspace);
    greet_as_zot(&mut zot, &ws).await;
    let mut run = async |script: String| probe_runs(&mut zot, script).await;
    // Attack: the user's key, and the file their shell runs at login.
    assert_eq!(
        run(format!("cat {ws}/.ssh/id_ed25519; echo x >> {ws}/.bashrc")).await,
        format!(
            "exit=2 out= err=cat: {ws}/.ssh/id_ed25519: No such file or directory\nsh: 1: \
             cannot create {ws}/.bashrc: Directory nonexistent\n"
        )
    );
    zot.send(&json!({"type": "shutdown"})).await;
    let ended = zot.end().await;
    assert!(ended.status.success(), "{ended:#?}");
    assert!(!lab.workspace.join(".bashrc").exists());
}

/// Should zot name a workspace other than the folder it runs in, which a
/// confined native extension was jailed to as it started, zot's log of the
/// extension says so: its user otherwise finds the project unreadable with
/// no word why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_zotbox_run_a_workspace_other_than_zots_folder_is_named_in_its_log() {
    let lab = Lab::new();
    crate::attack::user_policy(&lab, &json!({"confine_native": true}));
    let dir = native_probe(&lab);
    let elsewhere = lab.dev.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("elsewhere");
    let mut zot = zot_in_the_workspace(&lab, &dir);
    zot.recv_through("ready").await;
    zot.send(
        &json!({"type": "hello_ack", "protocol_version": 1, "zot_version": "x",
                     "provider": "p", "model": "m", "cwd": elsewhere.display().to_string()}),
    )
    .await;
    zot.send(&json!({"type": "shutdown"})).await;
    let ended = zot.end().await;
    assert!(ended.status.success(), "{ended:#?}");
    let workspace = std::fs::canonicalize(&lab.workspace).expect("workspace");
    assert!(
        ended.stderr.contains(&format!(
            "zot names the workspace `{}`, but the extension was confined to the folder zot \
             runs in, `{}`: it reaches that folder's files, not the named one's",
            elsewhere.display(),
            workspace.display()
        )),
        "{ended:#?}"
    );
}

// ---------------------------------------------------------------------------
// doctor

/// `doctor` lists what the kernel offers; on this project's machines that
/// is everything, so confinement adds no problem.
#[test]
fn doctor_lists_the_kernel_protections() {
    let lab = Lab::new();
    let run = zotbox_with(&lab, &[], &["doctor"]);
    run.expect_code(0);
    // The ABI number is the kernel's (7 on the machines this was written on).
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("kernel confinement: Landlock ABI ")
                && l.ends_with(
                    "; Landlock, Landlock network, Landlock scopes, user namespaces, mount \
                 namespaces, PID namespaces, network namespaces"
                )),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("this kernel: lacks"), "{}", run.stdout);
}

/// `zotbox call slow` started, a `slow` tool of the user's running
/// `script` in the workspace, once the script has made `started`.
fn zotbox_in_a_slow_command(lab: &Lab, script: &str) -> std::process::Child {
    let tools = lab.home.join("tools");
    std::fs::create_dir_all(&tools).expect("tools");
    std::fs::write(
        tools.join("slow.json"),
        r#"{"name":"slow","description":"d","kind":"shell","command":"sh ./slow.sh"}"#,
    )
    .expect("tool");
    std::fs::write(lab.workspace.join("slow.sh"), script).expect("script");
    let started = lab.workspace.join("started");
    let zotbox = lab
        .command(&["call", "slow"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("zotbox");
    let deadline = std::time::Instant::now() + crate::support::PATIENCE;
    while !started.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    zotbox
}

/// A command that makes `lib/.git` (with a pager in its config), then
/// sleeps 3 s and touches `outlived`, its `zotbox call` killed with
/// `SIGKILL` once it started. Returns the `outlived` marker.
fn zotbox_killed_mid_command(lab: &Lab) -> PathBuf {
    let mut zotbox = zotbox_in_a_slow_command(
        lab,
        "mkdir -p lib/.git; printf '[core]\\n\\tpager = touch pwned\\n' > lib/.git/config; \
         touch started; sleep 3; touch outlived\n",
    );
    zotbox.kill().expect("kill");
    let _ = zotbox.wait();
    lab.workspace.join("outlived")
}

/// Attack on rule 5 ("no process that outlives the call"): zotbox killed
/// while a confined command runs (`SIGKILL`, or a Ctrl-C that ends it) left
/// the command running on its own, past its timeout. The process zotbox
/// starts now dies with zotbox, and the command's PID namespace with it.
/// And on rule 3: the census after the command never ran, so a `.git` it
/// made first stayed, and the next command took it for one that was there
/// before. The next command in the workspace now takes it back.
#[test]
fn a_command_dies_with_the_zotbox_that_started_it_and_the_next_takes_back() {
    let lab = Lab::new();
    let outlived = zotbox_killed_mid_command(&lab);
    std::fs::write(
        lab.home.join("tools/quick.json"),
        r#"{"name":"quick","description":"d","kind":"shell","command":"true"}"#,
    )
    .expect("tool");
    std::thread::sleep(std::time::Duration::from_secs(5));
    assert!(!outlived.exists(), "the command outlived zotbox");
    assert!(lab.workspace.join("lib/.git/config").is_file());
    let next = crate::support::zotbox_bounded(&lab, &["call", "quick"]);
    next.expect_code(0);
    assert!(
        next.stderr.contains(&format!(
            "an earlier command in `{}` ended with its zotbox and left `lib/.git/`: set aside \
             now, renamed with `.refused-by-zotbox` added",
            lab.workspace.display()
        )),
        "{next:#?}"
    );
    assert!(!lab.workspace.join("lib/.git").exists());
    assert!(
        lab.workspace
            .join("lib/.git.refused-by-zotbox/config")
            .is_file()
    );
}

/// What a killed zotbox's command left is taken back as soon as a host
/// starts in the workspace again (zot started again), before any command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_killed_zotbox_left_is_taken_back_when_the_next_host_starts() {
    let lab = Lab::new();
    zotbox_killed_mid_command(&lab);
    // Its command is gone with it (the namespace went with its process).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(lab.workspace.join("lib/.git/config").is_file());
    let host = start(&lab, &[]).await;
    let aside = lab.workspace.join("lib/.git.refused-by-zotbox/config");
    crate::support::eventually("the `.git` set aside", || {
        (!lab.workspace.join("lib/.git").exists() && aside.is_file()).then_some(())
    })
    .await
    .expect("the `.git` the killed command made, set aside");
    host.shutdown().await;
}

/// Attack: a Ctrl-C on `zotbox call` (or zot's `SIGTERM` to `serve`) while
/// a confined command runs ended zotbox at once; the command died with it,
/// but what it made first (`lib/.git`, whose configuration the user's next
/// `git status` runs) stayed until the next command in the workspace.
/// zotbox now stops the command, takes back what it left, then exits as
/// the signal would have it (130, 143, 129 for a closed terminal's
/// `SIGHUP`), also when Ctrl-C is pressed twice.
#[test]
fn a_command_stopped_by_a_signal_is_taken_back_before_zotbox_exits() {
    use nix::sys::signal::Signal;
    for (signals, code) in [
        (&[Signal::SIGINT][..], 130),
        (&[Signal::SIGTERM], 143),
        (&[Signal::SIGINT, Signal::SIGINT], 130),
        (&[Signal::SIGHUP], 129),
    ] {
        let signal = format!("{signals:?}");
        let lab = Lab::new();
        let zotbox = zotbox_in_a_slow_command(
            &lab,
            "mkdir -p lib/.git; printf '[core]\\n\\tfsmonitor = touch pwned\\n' > \
             lib/.git/config; touch started; sleep 30\n",
        );
        let pid = i32::try_from(zotbox.id()).expect("pid");
        for &signal in signals {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).expect("signal");
        }
        let output = zotbox.wait_with_output().expect("zotbox");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{signal}: {stderr}");
        assert!(
            stderr.contains("zotbox: stopping the commands running and taking back what they left"),
            "{signal}: {stderr}"
        );
        assert!(
            !lab.workspace.join("lib/.git").exists(),
            "{signal}: {stderr}"
        );
        assert!(
            lab.workspace
                .join("lib/.git.refused-by-zotbox/config")
                .is_file()
        );
        // Its record is gone: nothing is left for the next command.
        let records = lab.home.join("run/census");
        assert_eq!(
            std::fs::read_dir(&records).map_or(0, |entries| entries.count()),
            0,
            "{signal}"
        );
    }
}
