//! `zotbox demo`: build the bundled examples and take a short tour.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, Result};
use serde_json::json;

use super::ext::install_file;
use super::output::{cell, drain_events, table};
use super::{Context, EXIT_OK};
use zotbox::build::{CargoBuild, GUEST_TARGET};
use zotbox::{Host, Verdict};

/// The Rust examples, each `examples/<name>` holding package `zotbox-example-<name>`.
const RUST_EXAMPLES: &[&str] = &["hello", "weather", "guard", "scratchpad"];
/// The C example, built with clang for wasm32-wasip1 when clang is present.
const C_EXAMPLE: &str = "c-shout";

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
        if let Some(folder) = build_c_example(&examples)? {
            folders.push(folder);
        }

        println!("\n== starting {} sandboxed extensions", folders.len());
        let started = Instant::now();
        let mut builder = Host::builder()
            .workspace(context.workspace()?)
            .zot_home(context.home()?.root());
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

        if host.tools().iter().any(|t| t.name == "shout") {
            println!("\n== a C extension built for wasm32-wasip1, no SDK: shout");
            println!(
                "{}",
                host.call_tool("shout", json!({"text": "any WASI language"}))
                    .await?
                    .text()
            );
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

/// Builds the C example when clang and wasi-libc are installed; says how to
/// get them otherwise.
fn build_c_example(examples: &Path) -> Result<Option<PathBuf>> {
    let folder = examples.join(C_EXAMPLE);
    let status = std::process::Command::new("clang")
        .args([
            "--target=wasm32-wasi",
            "-I/usr/include/wasm32-wasi",
            "-L/usr/lib/wasm32-wasi",
            "-O2",
        ])
        .arg("-o")
        .arg(folder.join("shout.wasm"))
        .arg(folder.join("shout.c"))
        .status();
    match status {
        Ok(status) if status.success() => {
            println!("built {C_EXAMPLE} with clang for wasm32-wasip1");
            Ok(Some(folder))
        }
        _ => {
            println!(
                "skipping {C_EXAMPLE}: it needs clang and wasi-libc \
                 (Debian: apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32)"
            );
            Ok(None)
        }
    }
}
