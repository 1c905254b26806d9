//! `zotbox demo`: build the bundled examples and take a short tour.
//!
//! The Rust examples always; then the example of every other language whose
//! toolchain is present (C, Go, Python, JavaScript), each built as `zotbox
//! ext build` would. A language whose toolchain is missing is skipped with
//! the one command that installs it. An example whose component is newer
//! than its sources is not built again, and the host's compile cache keeps
//! the second start of the large Python and JavaScript components short:
//! only the first demo with those toolchains pays for them.

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use anyhow::{Context as _, Result};
use serde_json::json;

use super::ext::install_file;
use super::output::{cell, drain_events, table};
use super::{Context, EXIT_OK};
use zotbox::build::{CargoBuild, GUEST_TARGET, JsBuild, Language, ToolchainError, build_guest};
use zotbox::manifest::{MANIFEST_FILE, Manifest, Program};
use zotbox::{Host, Verdict};

/// The Rust examples, each `examples/<name>` holding package `zotbox-example-<name>`.
const RUST_EXAMPLES: &[&str] = &["hello", "weather", "guard", "scratchpad"];

/// The examples in other languages: their folder, their language's name,
/// and the tool call the tour makes to each.
const OTHER_EXAMPLES: &[(&str, &str, &str, &str)] = &[
    ("c-shout", "C", "shout", r#"{"text": "any WASI language"}"#),
    ("go-notes", "Go", "go_weather", r#"{"city": "Berlin"}"#),
    ("py-hello", "Python", "py_greet", r#"{"name": "Ada"}"#),
    (
        "js-notes",
        "JavaScript",
        "js_weather",
        r#"{"city": "Oslo"}"#,
    ),
];

/// Arguments of `zotbox demo`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The examples folder [default: the one zotbox was built from].
    #[arg(long, value_name = "DIR")]
    examples: Option<PathBuf>,
}

impl Args {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let examples = match self.examples {
            Some(dir) => dir,
            None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples"),
        };
        let examples = std::fs::canonicalize(&examples).with_context(|| {
            format!(
                "cannot find the examples in `{}`; pass --examples DIR",
                examples.display()
            )
        })?;
        let mut folders = build_rust_examples(&examples)?;
        let mut others = Vec::new();
        for &(folder, language, tool, args) in OTHER_EXAMPLES {
            if let Some(built) = build_example(&examples, folder, language)? {
                folders.push(built);
                others.push((language, tool, args));
            }
        }

        println!("\n== starting {} sandboxed extensions", folders.len());
        let started = Instant::now();
        let mut builder = Host::builder()
            .workspace(context.workspace()?)
            .zot_home(context.home()?.root())
            .compiler_process(super::this_zotbox());
        super::output::show_compiles(builder.subscribe());
        for folder in &folders {
            builder = builder.extension(folder);
        }
        let host = builder.build().await?;
        println!(
            "ready in {:.1} ms\n",
            started.elapsed().as_secs_f64() * 1000.0
        );
        let rows: Vec<Vec<String>> = host
            .list()
            .iter()
            .map(|info| {
                vec![
                    info.name.clone(),
                    info.kind.to_owned(),
                    info.state.as_str().to_owned(),
                    cell(&info.commands),
                    cell(&info.tools),
                    cell(&info.intercepts),
                ]
            })
            .collect();
        print!(
            "{}",
            table(
                &["NAME", "KIND", "STATE", "COMMANDS", "TOOLS", "INTERCEPTS"],
                &rows
            )
        );

        let mut events = host.subscribe();
        println!("\n== a slash command in a wasm extension: /hello Ada");
        let response = host.invoke_command("hello", "Ada").await?;
        println!(
            "{}: {}",
            response.action.as_str(),
            response.prompt.unwrap_or_default()
        );

        println!("\n== a tool with typed arguments: weather {{\"city\":\"Berlin\"}}");
        let result = host.call_tool("weather", json!({"city": "Berlin"})).await?;
        drain_events(&mut events, false)?;
        println!("{}", result.text());

        println!("\n== state kept inside the sandbox: /note, then the read_notes tool");
        let noted = host.invoke_command("note", "water the plants").await?;
        drain_events(&mut events, false)?;
        println!("{}", noted.display.unwrap_or_default());
        println!("{}", host.call_tool("read_notes", json!({})).await?.text());

        for command in ["rm -rf /", "ls", "cargo test"] {
            println!("\n== the guard intercepts zot's bash tool: {command}");
            let decision = host
                .intercept_tool_call("bash", json!({ "command": command }))
                .await;
            let by = decision.decided_by.join(", ");
            match decision.verdict {
                Verdict::Block { reason } => println!("block by {by}: {reason}"),
                Verdict::Rewrite { args } => println!("rewrite by {by}: {args}"),
                _ => println!("allow"),
            }
        }

        for (language, tool, args) in others {
            println!("\n== a tool of the {language} example: {tool} {args}");
            let args: serde_json::Value = serde_json::from_str(args)?;
            let result = host.call_tool(tool, args).await?;
            drain_events(&mut events, false)?;
            println!("{}", result.text());
        }
        if host.tools().iter().any(|t| t.name == "js_read_file") {
            println!("\n== a capability the manifest did not ask for: js_read_file README.md");
            let result = host
                .call_tool("js_read_file", json!({"path": "README.md"}))
                .await?;
            println!("{}", result.text());
        }
        host.shutdown().await;
        println!("\nextension logs: {}", context.home()?.logs_dir().display());
        Ok(EXIT_OK)
    }
}

fn build_rust_examples(examples: &Path) -> Result<Vec<PathBuf>> {
    println!("== building the examples for {GUEST_TARGET}");
    let build = CargoBuild {
        manifest_path: examples.join("../Cargo.toml"),
        packages: RUST_EXAMPLES
            .iter()
            .map(|name| format!("zotbox-example-{name}"))
            .collect(),
        target: Some(GUEST_TARGET.to_owned()),
        target_dir: None,
        verbose: true,
    };
    let artifacts = build.run()?;
    let mut folders = Vec::new();
    for name in RUST_EXAMPLES {
        let built = artifacts
            .get(*name)
            .with_context(|| format!("cargo built no `{name}.wasm`"))?;
        let folder = examples.join(name);
        install_file(built, &folder.join(format!("{name}.wasm")))?;
        folders.push(folder);
    }
    Ok(folders)
}

/// Builds the example in `examples/<folder>` as `zotbox ext build` would
/// (unless its component is newer than every source file), and returns its
/// folder; `None` after naming the install command when its toolchain is
/// missing.
fn build_example(examples: &Path, folder: &str, language: &str) -> Result<Option<PathBuf>> {
    let dir = examples.join(folder);
    let manifest = Manifest::load(&dir.join(MANIFEST_FILE))?;
    let Program::Wasm { path } = &manifest.program else {
        anyhow::bail!("the {language} example `{folder}` has no `wasm` field");
    };
    let declared = manifest.raw.language.as_deref();
    let missing = missing_toolchain(examples, &dir, declared);
    if is_fresh(&dir, path) {
        match missing {
            None => println!("{folder} ({language}) is up to date"),
            Some((tool, install)) => println!(
                "{folder} ({language}) is kept as built before: `{tool}` is not installed; \
                 install it with `{install}` to rebuild it"
            ),
        }
        return Ok(Some(dir));
    }
    if let Some((tool, install)) = missing {
        println!(
            "skipping {folder} ({language}): `{tool}` is not installed; install it with \
             `{install}`"
        );
        return Ok(None);
    }
    println!("== building {folder} ({language})");
    let started = Instant::now();
    let built = if Language::detect(&dir, declared) == Some(Language::JavaScript) {
        js_build(examples, &dir, folder).map(|built| [(folder.to_owned(), built)].into())
    } else {
        build_guest(&dir, declared, folder, false)
    };
    match built {
        Ok(artifacts) => {
            let built = artifacts
                .values()
                .next()
                .with_context(|| format!("the {language} build wrote nothing"))?;
            install_file(built, path)?;
            println!("built {folder} in {:.1} s", started.elapsed().as_secs_f64());
            Ok(Some(dir))
        }
        Err(ToolchainError::Missing { tool, install, .. }) => {
            println!(
                "skipping {folder} ({language}): `{tool}` is not installed; install it with \
                 `{install}`"
            );
            Ok(None)
        }
        Err(ToolchainError::Make { .. }) => {
            println!(
                "skipping {folder} ({language}): its build failed (above); it needs clang and \
                 a wasm32-wasi sysroot: `{}`",
                zotbox::build::C_INSTALL
            );
            Ok(None)
        }
        Err(err) => Err(err.into()),
    }
}

/// The program a language's build needs that is not installed, with the
/// command that installs it; `None` when everything is there.
fn missing_toolchain(
    examples: &Path,
    dir: &Path,
    declared: Option<&str>,
) -> Option<(String, &'static str)> {
    use zotbox::build::{C_INSTALL, GO_INSTALL, JS_INSTALL, PYTHON_INSTALL, find_program};
    let needs: Vec<(PathBuf, &'static str)> = match Language::detect(dir, declared)? {
        Language::Rust => Vec::new(),
        Language::C => vec![("make".into(), C_INSTALL), ("clang".into(), C_INSTALL)],
        Language::Go => vec![("go".into(), GO_INSTALL)],
        Language::Python => vec![("componentize-py".into(), PYTHON_INSTALL)],
        Language::JavaScript => vec![
            (js_tool(examples, dir), JS_INSTALL),
            ("node".into(), JS_INSTALL),
        ],
    };
    needs
        .into_iter()
        .find(|(program, _)| find_program(program).is_none())
        .map(|(program, install)| (program.display().to_string(), install))
}

/// componentize-js: the folder's `node_modules`, `PATH`, or the checkout's
/// `target/js-toolchain` (where CI installs it).
fn js_tool(examples: &Path, dir: &Path) -> PathBuf {
    let tool = JsBuild::guest(dir, "x").tool;
    let checkout = examples.join("../target/js-toolchain/node_modules/.bin/componentize-js");
    if zotbox::build::find_program(&tool).is_none() && checkout.is_file() {
        checkout
    } else {
        tool
    }
}

/// The JavaScript example's build, with [`js_tool`].
fn js_build(examples: &Path, dir: &Path, name: &str) -> Result<PathBuf, ToolchainError> {
    let mut build = JsBuild::guest(dir, name);
    build.tool = js_tool(examples, dir);
    build.run()
}

/// Whether `wasm` is newer than every file of `dir` (outside `target/`,
/// `node_modules/` and other `.wasm` files): then building again would
/// write the same component.
fn is_fresh(dir: &Path, wasm: &Path) -> bool {
    let Ok(built) = std::fs::metadata(wasm).and_then(|m| m.modified()) else {
        return false;
    };
    newest_source(dir, 0).is_some_and(|newest| newest <= built)
}

fn newest_source(dir: &Path, depth: usize) -> Option<SystemTime> {
    let mut newest = SystemTime::UNIX_EPOCH;
    for entry in std::fs::read_dir(dir).ok()? {
        let entry = entry.ok()?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let kind = entry.file_type().ok()?;
        if kind.is_dir() {
            if depth < 4 && !matches!(&*name, "target" | "node_modules" | "__pycache__") {
                newest = newest.max(newest_source(&entry.path(), depth + 1)?);
            }
        } else if !name.ends_with(".wasm") {
            newest = newest.max(entry.metadata().ok()?.modified().ok()?);
        }
    }
    Some(newest)
}
