//! Authoring, as a new author does it (issue 14): `zotbox new`, then
//! `ext build`, `ext install` and a call, with the real binary and cargo;
//! the errors met on the way name the next step; a build writes only
//! inside the extension's folder.

use std::ffi::OsStr;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::{Lab, tree, write_json};

/// The workspace root (for its `Cargo.lock` and the guests' target folder).
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the repository")
}

/// What `ext build` needs to reuse the test guests' build: their target
/// folder (the dependencies are compiled already) and no network.
fn build_env() -> Vec<(&'static str, PathBuf)> {
    vec![
        ("CARGO_TARGET_DIR", repository().join("target/wasm-guests")),
        ("CARGO_NET_OFFLINE", PathBuf::from("true")),
    ]
}

fn zotbox_building(lab: &Lab, args: &[&str]) -> crate::support::Run {
    let env = build_env();
    let env: Vec<(&str, &OsStr)> = env.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
    lab.zotbox_env(args, &env)
}

#[test]
fn a_new_extension_builds_installs_and_answers_with_only_its_files_installed() {
    // The guests share the target folder: build them first, so this build
    // waits on no one and reuses their dependencies.
    let _ = crate::guests::guests();
    let lab = Lab::new();
    let dir = lab.dev.join("wordcount");
    let shown = dir.display().to_string();
    let run = lab.zotbox(&["new", "wordcount", "--path", &shown]);
    run.expect_code(0);
    assert_eq!(
        run.stdout,
        format!(
            "created `wordcount` (rust) in {shown}: Cargo.toml, extension.json, README.md, \
             .gitignore, src/main.rs\nnext:\nzotbox ext build {shown} && zotbox ext install \
             {shown}\nzotbox call count_words '{{\"text\": \"one two three\"}}'\n"
        )
    );
    // The manifest declares the events of its guard, nothing else.
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join("extension.json")).expect("manifest"))
            .expect("json");
    assert_eq!(manifest["capabilities"], json!({"events": ["tool_call"]}));
    assert_eq!(manifest["wasm"], "./wordcount.wasm");
    // A second `new` never writes over it.
    let again = lab.zotbox(&["new", "wordcount", "--path", &shown]);
    again.expect_code(1);
    assert_eq!(
        again.stderr,
        format!(
            "error: `{shown}` already exists and is not empty; choose another name or pass --path\n"
        )
    );

    // Before the build: each error says what to run.
    let not_built = format!("`wordcount.wasm` is not built yet: run `zotbox ext build {shown}`");
    let run = lab.zotbox(&["ext", "install", &shown, "--yes"]);
    run.expect_code(1);
    assert_eq!(run.stderr, format!("error: {not_built}\n"));
    assert_eq!(run.stdout, "", "nothing shown before the refusal");
    let run = lab.zotbox(&["--ext", &shown, "call", "count_words", "{}"]);
    run.expect_code(1);
    assert!(
        run.stderr.ends_with(&format!(
            "error: no tool `count_words`; `--ext {shown}`: failed to start ({not_built})\n"
        )),
        "{run:#?}"
    );

    // The same lock as the repository: the dependencies resolve offline.
    std::fs::copy(repository().join("Cargo.lock"), dir.join("Cargo.lock")).expect("lock");
    // Attack: the folder the user stands in (a cloned repository) names a
    // `rustc-wrapper` in its `.cargo/config.toml`; cargo, started there,
    // ran it for the user's own crate built from there.
    let wrapper = lab.workspace.join("tools/wrap.sh");
    let marker = lab.workspace.join("wrapper-ran");
    std::fs::create_dir_all(wrapper.parent().expect("tools")).expect("tools");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\ntouch '{}'\nexec \"$@\"\n", marker.display()),
    )
    .expect("wrapper");
    crate::support::make_executable(&wrapper);
    std::fs::create_dir_all(lab.workspace.join(".cargo")).expect(".cargo");
    std::fs::write(
        lab.workspace.join(".cargo/config.toml"),
        format!("[build]\nrustc-wrapper = '{}'\n", wrapper.display()),
    )
    .expect("config");
    let run = zotbox_building(&lab, &["ext", "build", &shown]);
    run.expect_code(0);
    assert!(
        !marker.exists(),
        "the standing folder's wrapper ran: {run:#?}"
    );
    assert!(!run.stderr.contains("cargo also reads"), "{run:#?}");
    assert!(
        run.stdout.starts_with(&format!(
            "built `wordcount` → {}/wordcount.wasm (",
            dir.display()
        )),
        "{run:#?}"
    );
    // Once per folder: building runs the crate's code with the user's permissions.
    let notice = "runs its build scripts and proc macros, and those of its dependencies, with \
                  your permissions (not in the sandbox); build only code you trust";
    assert!(run.stderr.contains(notice), "{run:#?}");
    // Piped: no progress from cargo.
    assert!(!run.stderr.contains("Compiling"), "{run:#?}");

    // What an author's folder also holds: build output, VCS, sources.
    std::fs::create_dir_all(dir.join("target/release")).expect("target");
    std::fs::write(dir.join("target/release/big"), vec![0u8; 4096]).expect("junk");
    std::fs::create_dir_all(dir.join(".git")).expect(".git");
    std::fs::write(dir.join(".git/config"), "[core]").expect("git config");
    let run = lab.zotbox(&["ext", "install", &shown, "--yes"]);
    run.expect_code(0);
    let installed = lab.user_dir().join("wordcount");
    assert_eq!(
        tree(&installed).into_keys().collect::<Vec<_>>(),
        ["extension.json", "wordcount.wasm"]
    );
    let run = lab.zotbox(&["call", "count_words", r#"{"text": "one two three"}"#]);
    run.expect_code(0);
    assert_eq!(run.stdout, "3\n");
    let run = lab.zotbox(&["command", "wordcount", "Ada"]);
    run.expect_code(0);
    assert_eq!(run.stdout, "display: hello, Ada, from wordcount\n");
    // The schema came from the argument type; the same type refuses.
    let run = lab.zotbox(&["call", "count_words", "{}"]);
    run.expect_code(3);
    assert_eq!(
        run.stdout,
        "invalid arguments for tool `count_words`: missing field `text`\n"
    );
    // Name and version have one source: doctor finds no mismatch.
    let run = lab.zotbox(&["doctor"]);
    assert!(!run.stdout.contains("its `hello` says"), "{run:#?}");
    let run = lab.zotbox(&["check", "bash", r#"{"command": "rm -rf /"}"#]);
    assert!(
        run.stdout.contains("wordcount: `rm -rf /` is not run here"),
        "{run:#?}"
    );

    // A `wasm` path in a folder that does not exist: the build makes it,
    // and says so; the notice is not repeated.
    let mut manifest = manifest;
    manifest["wasm"] = json!("dist/wordcount.wasm");
    write_json(&dir.join("extension.json"), &manifest);
    let run = zotbox_building(&lab, &["ext", "build", &shown]);
    run.expect_code(0);
    assert!(
        run.stderr
            .contains("created the folder `dist` for the component"),
        "{run:#?}"
    );
    assert!(!run.stderr.contains(notice), "{run:#?}");
    assert!(dir.join("dist/wordcount.wasm").is_file());

    // On a terminal, cargo's own progress shows (here, warm: its summary).
    let env = build_env();
    let env: Vec<(&str, &OsStr)> = env.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
    match lab.zotbox_on_terminal(&["ext", "build", &shown], &env) {
        Some(run) => {
            run.expect_code(0);
            assert!(run.stdout.contains("Finished"), "{run:#?}");
            assert!(run.stdout.contains("built `wordcount`"), "{run:#?}");
        }
        None => eprintln!("note: skipping the terminal build: `script` is not installed"),
    }
}

/// The Go template, as a new author would use it: `new --lang go`, build
/// (offline, for wasip1), install (the manifest and the module only), a
/// typed tool, a command and the guard. Skipped without Go, unless
/// `ZOTBOX_REQUIRE_GO=1`.
#[test]
fn a_new_go_extension_builds_installs_and_answers() {
    if crate::guests::go_notes().is_none() {
        return;
    }
    let lab = Lab::new();
    // As the author follows what `new` prints: the folder relative to where
    // they stand (a relative folder once sent go's output to
    // `gocount/gocount/target/…`, and the build failed).
    let run = lab.zotbox(&["new", "gocount", "--lang", "go"]);
    run.expect_code(0);
    assert!(
        run.stdout.starts_with(
            "created `gocount` (go) in gocount: go.mod, extension.json, README.md, .gitignore, \
             main.go\nnext:\nzotbox ext build ./gocount && zotbox ext install ./gocount\n"
        ),
        "{run:#?}"
    );
    let run = lab.zotbox(&["ext", "build", "gocount"]);
    run.expect_code(0);
    assert!(
        run.stdout
            .starts_with("built `gocount` → gocount/gocount.wasm ("),
        "{run:#?}"
    );
    assert!(!lab.workspace.join("gocount/gocount").exists());
    // No author code runs to build Go: no notice.
    assert!(!run.stderr.contains("proc macros"), "{run:#?}");
    crate::support::assert_template_installs_and_answers(
        &lab,
        "./gocount",
        "gocount",
        "`text` must be a string",
    );
}

/// The C template, as a new author would use it: `new --lang c`, build with
/// the Makefile (offline, for wasip1), install, and the same answers as every
/// template; then what its JSON reader must get right, since C has no
/// `encoding/json` to lean on: a `text` nested in another field's value is not
/// the field, and escapes are decoded before words are counted. Skipped
/// without clang and wasi-libc, unless `ZOTBOX_REQUIRE_CLANG=1`.
#[test]
fn a_new_c_extension_builds_installs_and_answers() {
    if crate::guests::c_shout().is_none() {
        return;
    }
    let lab = Lab::new();
    let run = lab.zotbox(&["new", "ccount", "--lang", "c"]);
    run.expect_code(0);
    assert!(
        run.stdout.starts_with(
            "created `ccount` (c) in ccount: Makefile, extension.json, README.md, .gitignore, \
             main.c\nnext:\nzotbox ext build ./ccount && zotbox ext install ./ccount\n"
        ),
        "{run:#?}"
    );
    let run = lab.zotbox(&["ext", "build", "ccount"]);
    run.expect_code(0);
    assert!(
        run.stdout
            .starts_with("built `ccount` → ccount/ccount.wasm ("),
        "{run:#?}"
    );
    // make runs the author's Makefile outside the sandbox: it says so.
    assert!(
        run.stderr.contains("runs the commands of its Makefile"),
        "{run:#?}"
    );
    crate::support::assert_template_installs_and_answers(
        &lab,
        "./ccount",
        "ccount",
        "`text` is required",
    );
    for (args, answer) in [
        (r#"{"note": {"text": "x"}, "text": "one two"}"#, "2\n"),
        (
            r#"{"text": "one\u0020two\tthree\nfour \ud83d\ude00"}"#,
            "5\n",
        ),
        (r#"{"text": "\"quoted\" words"}"#, "2\n"),
    ] {
        let run = lab.zotbox(&["call", "count_words", args]);
        run.expect_code(0);
        assert_eq!(run.stdout, answer, "{args}");
    }
    let run = lab.zotbox(&["call", "count_words", r#"{"note": {"text": "x"}}"#]);
    run.expect_code(3);
    assert_eq!(
        run.stdout,
        "invalid arguments for tool `count_words`: `text` is required\n"
    );
}

/// The C template's frame reader is C that authors copy and build natively
/// too, where a slip is a memory error in a process with the user's rights.
/// Built natively under AddressSanitizer and UBSan, it reads 60 000 lines
/// mangled from real frames (cut, spliced, stray quotes, escapes and
/// brackets; a fixed seed), brackets nested 100 000 deep and a 1 MB string,
/// with no sanitizer report; every line it writes is JSON, and frames next
/// to the mangled ones are still answered. Skipped without clang's
/// sanitizer runtimes, unless `ZOTBOX_REQUIRE_CLANG=1`.
#[test]
fn the_c_templates_frame_reader_survives_mangled_frames_under_sanitizers() {
    let lab = Lab::new();
    let dir = lab.dev.join("fz");
    let shown = dir.display().to_string();
    lab.zotbox(&["new", "fz", "--lang", "c", "--path", &shown])
        .expect_code(0);
    let bin = dir.join("fz-sanitized");
    if crate::guests::sanitized_c(&dir.join("main.c"), &bin, "C template").is_none() {
        return;
    }

    let seeds = [
        r#"{"type":"command_invoked","id":"1","name":"fz","args":"  Ada \u00e9\"x "}"#,
        r#"{"type":"tool_call","id":"2","name":"count_words","args":{"n":{"text":[1,{"a":"b"}]},"text":"one\ttwo"}}"#,
        r#"{"type":"event_intercept","id":"3","event":"tool_call","tool_name":"bash","tool_args":{"command":"rm -rf /"}}"#,
        r#"{"type":"tool_call","id":"4","name":"count_words","args":{"text":"\ud83d\ude00 \u0000 \udc00 \ud800"}}"#,
        r#"{"type":"hello_ack","cwd":"/w","n":-1.5e10,"t":true,"f":false,"z":null}"#,
    ];
    let stray: Vec<char> = "{}[]\":,\\u0123456789abcdefABCDEF \t\u{1}\u{7f}é"
        .chars()
        .collect();
    // xorshift64: the same lines on every run.
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = |bound: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        usize::try_from(state % bound.max(1) as u64).unwrap_or(0)
    };
    let mut input = String::new();
    for _ in 0..60_000 {
        let mut line: Vec<char> = seeds[next(seeds.len())].chars().collect();
        for _ in 0..=next(6) {
            let at = next(line.len() + 1);
            match next(10) {
                0..4 if !line.is_empty() => {
                    line.remove(at.min(line.len() - 1));
                }
                0..8 => line.insert(at, stray[next(stray.len())]),
                _ => {
                    let from = next(line.len());
                    let piece: Vec<char> =
                        line[from..].iter().take(1 + next(20)).copied().collect();
                    line.splice(at..at, piece);
                }
            }
        }
        input.extend(line);
        input.push('\n');
    }
    input.push_str(&"[".repeat(100_000));
    input.push_str(&"]".repeat(100_000));
    input.push('\n');
    input.push_str(&format!(
        "{{\"type\":\"tool_call\",\"id\":\"big\",\"name\":\"count_words\",\"args\":{{\"text\":\"{}\"}}}}\n",
        "w ".repeat(500_000)
    ));
    input.push_str(seeds[1]);
    input.push('\n');

    let stdout = crate::guests::run_sanitized(&bin, input);
    let frames: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert!(frames.len() > 5_000, "{} frames", frames.len());
    let answer = |id: &str| {
        frames
            .iter()
            .rfind(|f| f["id"] == id && f["type"] == "tool_result")
            .map(|f| f["content"][0]["text"].clone())
    };
    assert_eq!(answer("big"), Some(json!("500000")));
    assert_eq!(answer("2"), Some(json!("2")));
}

/// The C template's guard, built natively (where zot sends it the model's
/// arguments as they are): it reads `command` as zot's bash does (Go's
/// `encoding/json`: any case, the last key winning), and a check it cannot
/// read whole (nested past its depth) is blocked, not left unanswered for
/// zot to allow after 5 s. Built under the sanitizers, and skipped without
/// them, unless `ZOTBOX_REQUIRE_CLANG=1`.
#[test]
fn the_c_templates_guard_reads_what_bash_runs_and_blocks_what_it_cannot_read() {
    let lab = Lab::new();
    let dir = lab.dev.join("gd");
    let shown = dir.display().to_string();
    lab.zotbox(&["new", "gd", "--lang", "c", "--path", &shown])
        .expect_code(0);
    let bin = dir.join("gd-sanitized");
    if crate::guests::sanitized_c(&dir.join("main.c"), &bin, "C template").is_none() {
        return;
    }
    let check = |id: &str, args: &str| {
        format!(
            r#"{{"type":"event_intercept","id":"{id}","event":"tool_call","tool_name":"bash","tool_args":{args}}}"#
        )
    };
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let lines = [
        check("case", r#"{"Command":"rm -rf /"}"#),
        check("last", r#"{"command":"echo hi","COMMAND":"rm -rf /"}"#),
        check("twice", r#"{"command":"echo hi","command":"rm -rf /"}"#),
        // Go leaves a string as it was for a later `null`.
        check("null", r#"{"command":"rm -rf /","COMMAND":null}"#),
        check("deep", &format!(r#"{{"command":"rm -rf /","x":{deep}}}"#)),
        format!(
            r#"{{"type":"tool_call","id":"deep-call","name":"count_words","args":{{"x":{deep}}}}}"#
        ),
        // Control: bash runs the last spelling, which is harmless.
        check("harmless", r#"{"COMMAND":"rm -rf /","command":"echo hi"}"#),
    ];
    let stdout = crate::guests::run_sanitized(&bin, lines.join("\n") + "\n");
    let answers: Vec<Value> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|frame| frame["id"].is_string())
        .collect();
    let block = |id: &str, reason: &str| json!({"type": "event_intercept_response", "id": id, "block": true, "reason": reason});
    let refused = "gd: `rm -rf /` is not run here";
    let unreadable = "gd could not read this request";
    assert_eq!(
        answers,
        [
            block("case", refused),
            block("last", refused),
            block("twice", refused),
            block("null", refused),
            block("deep", unreadable),
            json!({"type": "tool_result", "id": "deep-call", "is_error": true,
                   "content": [{"type": "text", "text": unreadable}]}),
            json!({"type": "event_intercept_response", "id": "harmless", "block": false}),
        ]
    );
}

#[test]
fn ext_build_never_writes_outside_the_extension_folder() {
    let lab = Lab::new();
    let dir = lab.dev.join("evil");
    std::fs::create_dir_all(&dir).expect("folder");
    std::fs::write(dir.join("Cargo.toml"), "[package]\nname = \"evil\"\n").expect("Cargo.toml");
    let profile = lab.dev.join("profile");
    std::fs::write(&profile, "export PATH=/usr/bin\n").expect("profile");
    let shown = dir.display().to_string();
    // Attack: the manifest points the component at the user's profile.
    write_json(
        &dir.join("extension.json"),
        &json!({"name": "evil", "wasm": "../profile"}),
    );
    let run = lab.zotbox(&["ext", "build", &shown]);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        format!(
            "error: `{shown}/extension.json`: field `wasm` `../profile` contains `..`; name a \
             file inside the extension's folder\n"
        )
    );
    // Attack: a folder of the path is a symlink leading out.
    let outside = lab.dev.join("outside");
    std::fs::create_dir_all(&outside).expect("outside");
    symlink(&outside, dir.join("out")).expect("symlink");
    write_json(
        &dir.join("extension.json"),
        &json!({"name": "evil", "wasm": "out/evil.wasm"}),
    );
    let run = lab.zotbox(&["ext", "build", &shown]);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        format!(
            "error: build of `{shown}` refused: `out` in the `wasm` path is a symlink; the \
             component is written only inside the extension's folder (make it a real folder)\n"
        )
    );
    // Nothing ran, nothing was written.
    assert_eq!(
        std::fs::read_to_string(&profile).expect("profile"),
        "export PATH=/usr/bin\n"
    );
    assert!(tree(&outside).is_empty());
    assert!(!dir.join("target").exists(), "cargo never ran");
}

#[test]
fn zotbox_new_refuses_names_that_are_not_a_crate_and_an_extension() {
    let lab = Lab::new();
    // (name, the refusal)
    let cases = [
        (
            "../up",
            "extension name `../up` must not start with a dot".to_owned(),
        ),
        (
            "a.b",
            "extension name `a.b` contains `.`; use letters, digits, `-` and `_` (it names a \
             crate and a binary)"
                .to_owned(),
        ),
        // Not the manifest's rule, which allows `.`: the one `new` keeps.
        (
            "a b",
            "extension name `a b` contains ` `; use letters, digits, `-` and `_` (it names a \
             crate and a binary)"
                .to_owned(),
        ),
        (
            "caf\u{e9}",
            "extension name `caf\u{e9}` contains `\u{e9}`; use letters, digits, `-` and `_` (it \
             names a crate and a binary)"
                .to_owned(),
        ),
        (
            "1st",
            "extension name `1st` must start with a letter (it names a crate and a binary)"
                .to_owned(),
        ),
        // `ext install` refuses it: the template would build, then fail to
        // install after the hint `new` prints said it would.
        (
            "zotbox",
            "the name `zotbox` is zotbox's own (`zotbox setup` installs its `serve` launcher \
             under it); rename the extension"
                .to_owned(),
        ),
    ];
    for (name, refusal) in cases {
        let run = lab.zotbox(&["new", name]);
        run.expect_code(1);
        assert_eq!(run.stderr, format!("error: {refusal}\n"), "{name}");
    }
    assert!(tree(&lab.workspace).is_empty());
}

#[test]
fn zotbox_new_refuses_a_target_that_is_a_link() {
    // Attack: a cloned repository ships `wordcount -> <an empty folder
    // outside it>`, the README's own example name. `zotbox new wordcount`
    // found the folder empty through the link and wrote the template there.
    let lab = Lab::new();
    let outside = lab.dev.join("outside");
    std::fs::create_dir_all(&outside).expect("outside folder");
    symlink(&outside, lab.workspace.join("wordcount")).expect("link");
    // A link to nothing at all is refused the same way.
    symlink(lab.dev.join("missing"), lab.workspace.join("dangling")).expect("dangling link");
    for name in ["wordcount", "dangling"] {
        let run = lab.zotbox(&["new", name]);
        run.expect_code(1);
        assert_eq!(
            run.stderr,
            format!(
                "error: `{name}` is a symbolic link; `zotbox new` writes only into a folder of \
                 its own: choose another name or pass --path\n"
            )
        );
    }
    assert!(tree(&outside).is_empty());
    assert!(!lab.dev.join("missing").exists());
}

#[test]
fn a_native_extension_built_as_it_starts_misses_hello_with_a_hint() {
    let lab = Lab::new();
    let dir = lab.dev.join("slow");
    std::fs::create_dir_all(&dir).expect("folder");
    // `cargo run` on a cold crate: compiling, silent, past the deadline.
    let cargo = dir.join("cargo");
    std::fs::write(&cargo, "#!/bin/sh\nexec sleep 30\n").expect("script");
    std::fs::set_permissions(&cargo, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    write_json(
        &dir.join("extension.json"),
        &json!({"name": "slow", "exec": "./cargo", "args": ["run", "--release"]}),
    );
    let run = lab.zotbox(&["--ext", &dir.display().to_string(), "--json", "list"]);
    run.expect_code(0);
    let entry: Value =
        serde_json::from_str(run.stdout.lines().next().unwrap_or("{}")).expect("a list line");
    assert_eq!(
        entry["reason"],
        format!(
            "extension `slow` sent no `hello` within 10s; it is started with `./cargo run \
             --release`, which builds it first: build it before (`cargo build --release` in \
             `{}`) and make `exec` the built binary",
            dir.display()
        ),
        "{run:#?}"
    );
}

#[test]
fn completions_and_the_man_page_cover_every_command() {
    let lab = Lab::new();
    let run = lab.zotbox(&["completions", "bash"]);
    run.expect_code(0);
    assert!(run.stdout.starts_with("_zotbox() {"), "{run:#?}");
    for command in ["new", "ext", "completions", "man", "doctor"] {
        assert!(run.stdout.contains(command), "{command}");
    }
    let run = lab.zotbox(&["completions", "tcsh"]);
    run.expect_code(2);
    let run = lab.zotbox(&["man"]);
    run.expect_code(0);
    assert!(run.stdout.contains(".TH zotbox 1"), "{run:#?}");
    assert!(run.stdout.contains("Exit status:"), "{run:#?}");
}

#[test]
fn list_exits_1_when_an_extension_failed_as_its_help_says() {
    let lab = Lab::new();
    let help = lab.zotbox(&["list", "--help"]);
    let words: Vec<&str> = help.stdout.split_whitespace().collect();
    assert!(
        words
            .join(" ")
            .contains("(exit status 1 when one failed to load or start)"),
        "{help:#?}"
    );
    let dir = lab.dev.join("broken");
    std::fs::create_dir_all(&dir).expect("folder");
    std::fs::write(dir.join("broken.wasm"), "not wasm").expect("junk");
    write_json(
        &dir.join("extension.json"),
        &json!({"name": "broken", "wasm": "./broken.wasm"}),
    );
    let shown = dir.display().to_string();
    for args in [
        vec!["--ext", &shown, "list"],
        vec!["--ext", &shown, "--json", "list"],
    ] {
        let run = lab.zotbox(&args);
        run.expect_code(1);
        assert!(run.stdout.contains("failed"), "{run:#?}");
    }
    lab.zotbox(&["list"]).expect_code(0);
}

#[test]
fn doctor_reports_a_launcher_whose_zotbox_is_gone_or_another() {
    let lab = Lab::new();
    let me = std::fs::canonicalize(env!("CARGO_BIN_EXE_zotbox")).expect("zotbox");
    let other = lab.dev.join("old/zotbox");
    std::fs::create_dir_all(other.parent().expect("parent")).expect("folder");
    std::fs::write(&other, "#!/bin/sh\n").expect("old zotbox");
    std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let wasm = crate::guests::guests().artifact("prober", crate::guests::Form::Wasm);
    // (folder, launcher, the problem doctor names)
    let gone = lab.dev.join("gone/zotbox");
    let cases = [
        (
            "moved",
            gone.clone(),
            format!(
                "zot starts it with `{}`, which no longer exists",
                gone.display()
            ),
        ),
        (
            "upgraded",
            other.clone(),
            format!(
                "zot starts it with `{}`, which is not this zotbox (`{}`)",
                other.display(),
                me.display()
            ),
        ),
        ("current", me.clone(), String::new()),
    ];
    for (name, launcher, _) in &cases {
        let dir = lab.user_dir().join(name);
        std::fs::create_dir_all(&dir).expect("folder");
        std::fs::copy(wasm, dir.join("prober.wasm")).expect("wasm");
        write_json(
            &dir.join("extension.json"),
            &json!({"name": name, "wasm": "./prober.wasm", "exec": launcher, "args": ["run"]}),
        );
    }
    let run = lab.zotbox(&["doctor"]);
    for (name, _, problem) in &cases {
        let line = run
            .stdout
            .lines()
            .find(|line| line.contains(&format!("extension `{name}`: zot starts it")));
        if problem.is_empty() {
            assert_eq!(line, None, "{run:#?}");
        } else {
            let line = line.unwrap_or_else(|| panic!("no finding for `{name}`: {run:#?}"));
            assert!(
                line.contains(problem.as_str())
                    && line.ends_with(&format!(
                        "; run `zotbox ext install` on its source again (or set `exec` in `{}` \
                         to `zotbox`)",
                        lab.user_dir().join(name).join("extension.json").display()
                    )),
                "{line}"
            );
        }
    }
    // The guest calls itself `prober` 0.1.0; its manifest says `current`.
    assert!(
        run.stdout.contains(
            "extension `current`: its `hello` says `prober` 0.1.0, its manifest `current`; keep \
             one source (a Rust guest: \
             `zotbox_guest::Extension::from_manifest(zotbox_guest::manifest!())`)"
        ),
        "{run:#?}"
    );
    run.expect_code(1);
}

#[test]
fn a_javascript_build_says_it_runs_the_folders_own_componentize_js() {
    // Attack: `ext build` prefers the folder's `node_modules/.bin/componentize-js`
    // (a file a cloned repository may ship) and said nothing, as if only
    // the sandboxed toolchain ran.
    let lab = Lab::new();
    let dir = lab.dev.join("notes");
    let bin = dir.join("node_modules/.bin");
    std::fs::create_dir_all(&bin).expect("node_modules");
    std::fs::create_dir_all(dir.join("wit")).expect("wit");
    write_json(
        &dir.join("extension.json"),
        &json!({"name": "notes", "version": "1.0.0", "wasm": "./notes.wasm"}),
    );
    write_json(&dir.join("package.json"), &json!({"name": "notes"}));
    std::fs::write(dir.join("app.js"), "export const run = {};\n").expect("app.js");
    let tool = bin.join("componentize-js");
    let marker = lab.dev.join("ran");
    std::fs::write(
        &tool,
        format!("#!/bin/sh\ntouch '{}'\nexit 1\n", marker.display()),
    )
    .expect("tool");
    crate::support::make_executable(&tool);
    let run = lab.zotbox(&["ext", "build", &dir.display().to_string()]);
    run.expect_code(1);
    assert!(
        marker.exists(),
        "the folder's own tool is what runs: {run:#?}"
    );
    assert!(
        run.stderr.contains(&format!(
            "note: building `{}` runs the folder's own `node_modules/.bin/componentize-js` with \
             your permissions (not in the sandbox)",
            dir.display()
        )),
        "{run:#?}"
    );
}
