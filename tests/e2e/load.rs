//! The host under load: 20 extensions in one host, 12 wasm guests and 8
//! native subprocesses, answering 10 000 tool calls issued all at once.
//! Every answer is matched to its request, and the host's memory must come
//! back near where it started.
//!
//! The host routes a tool call by tool name, first come first served, so 12
//! byte-identical copies of one guest would leave one owner of `echo` and 11
//! shadowed copies that never see a call. Each extension therefore runs its
//! own variant of the `hostile` test guest whose `echo` tool is renamed in
//! place (the name is a 4-byte literal in the data segment; the variant
//! keeps every offset). Variants differ in their bytes, so each wasm one is
//! compiled (and cached) on its own: about half a second of CPU apiece.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::task::JoinSet;
use zotbox::host::{ExtensionState, RestartPolicy};
use zotbox::protocol::ToolResult;
use zotbox::{CallError, Host, HostError};

use crate::guests::{self, Form};
use crate::support::{Lab, bounded, make_executable, status_kib};

const WASM_EXTENSIONS: usize = 12;
const NATIVE_EXTENSIONS: usize = 8;
/// Calls of the measured run, all issued before the first answer is awaited.
const CALLS: usize = 10_000;
/// Calls of the warm-up run: as many, so that the baseline already holds
/// the working set of 10 000 calls in flight.
const WARM_UP_CALLS: usize = CALLS;
/// A call's deadline. Generous: under this load a call waits behind up to
/// 500 others to its extension, and a wasm guest that misses a deadline
/// while busy is killed (failing its other calls), which is not what this
/// suite measures.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// How much the resident set may grow across the measured run, MiB.
///
/// The baseline is taken after a warm-up run of the same shape, so it
/// already holds the compiled guests, every guest's grown linear memory
/// (which never shrinks), the session queues at their deepest and the
/// allocator's arenas at the size 10 000 calls in flight need (about
/// 20 MiB above the idle host; glibc keeps most of it after the calls
/// end). A second identical run should then grow nothing: measured, it
/// grows by 0–2 MiB, and further runs stay flat. The slack is that wide
/// because other tests may run in the same process (this one is meant to
/// be run alone: `cargo test -p zotbox --test e2e load::`); it still fails
/// a host that keeps ~7 KiB per call (the request, its answer and its task)
/// after the call has ended, or that never frees a run's in-flight state.
const RSS_SLACK_MIB: u64 = 64;

/// One extension under load and the tool only it owns.
#[derive(Debug, Clone)]
struct Target {
    extension: String,
    tool: String,
}

/// Writes `artifact` to `dest` with its one `echo` literal replaced by
/// `tool` (4 bytes, so nothing moves).
fn rename_echo(artifact: &Path, tool: &str, dest: &Path) {
    assert_eq!(tool.len(), 4, "`{tool}` must be as long as `echo`");
    let mut bytes = std::fs::read(artifact)
        .unwrap_or_else(|e| panic!("cannot read `{}`: {e}", artifact.display()));
    let found: Vec<usize> = bytes
        .windows(4)
        .enumerate()
        .filter(|(_, w)| *w == b"echo")
        .map(|(at, _)| at)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "`{}` holds `echo` {} times, not once: the hostile guest changed; \
         rework how the load suite names its tools",
        artifact.display(),
        found.len()
    );
    bytes[found[0]..found[0] + 4].copy_from_slice(tool.as_bytes());
    std::fs::write(dest, &bytes)
        .unwrap_or_else(|e| panic!("cannot write `{}`: {e}", dest.display()));
}

/// Writes the 20 extension folders: `load-w00`… (wasm, tools `ew00`…) and
/// `load-n00`… (native, tools `en00`…).
fn write_extensions(lab: &Lab) -> (Vec<PathBuf>, Vec<Target>) {
    let variants = lab.dev.join("variants");
    std::fs::create_dir_all(&variants).expect("variants folder");
    let mut folders = Vec::new();
    let mut targets = Vec::new();
    let forms = [
        (Form::Wasm, "w", WASM_EXTENSIONS),
        (Form::Native, "n", NATIVE_EXTENSIONS),
    ];
    for (form, letter, count) in forms {
        let artifact = guests::guests().artifact("hostile", form);
        for i in 0..count {
            let extension = format!("load-{letter}{i:02}");
            let tool = format!("e{letter}{i:02}");
            let variant = variants.join(&extension);
            rename_echo(artifact, &tool, &variant);
            let folder = match form {
                Form::Wasm => guests::wasm_folder(&lab.dev, &extension, &variant, None),
                Form::Native => {
                    make_executable(&variant);
                    guests::native_folder(&lab.dev, &extension, &variant, None)
                }
            };
            folders.push(folder);
            targets.push(Target { extension, tool });
        }
    }
    (folders, targets)
}

/// What a run of calls came to.
#[derive(Debug, Default)]
struct Tally {
    answered: usize,
    timed_out: usize,
    /// Anything else: wrong answers, unclean errors, lost or doubled calls.
    wrong: Vec<String>,
}

/// Checks one call's outcome against its request.
fn check(tally: &mut Tally, target: &Target, text: &str, outcome: Result<ToolResult, HostError>) {
    match outcome {
        Ok(result) if !result.is_error && result.text() == text => tally.answered += 1,
        Ok(result) => tally
            .wrong
            .push(format!("`{text}` answered with {result:?}")),
        Err(HostError::Call(CallError::Timeout {
            extension,
            what,
            after,
        })) if extension == format!("extension `{}` 0.1.0", target.extension)
            && what == format!("tool `{}`", target.tool)
            && after == CALL_TIMEOUT =>
        {
            tally.timed_out += 1;
        }
        Err(err) => tally.wrong.push(format!("`{text}` failed: {err}")),
    }
}

/// Issues `calls` calls round-robin over `targets`, all at once, each with
/// a payload of its own (`<round>:<extension>-<n>`), and checks that every
/// call comes back exactly once, with its own text or a clean timeout.
async fn run(host: &Host, targets: &[Target], calls: usize, round: &str) -> Tally {
    let mut set = JoinSet::new();
    for k in 0..calls {
        let target = &targets[k % targets.len()];
        let text = format!("{round}:{}-{}", target.extension, k / targets.len());
        let (host, tool) = (host.clone(), target.tool.clone());
        set.spawn(async move {
            let outcome = host.call_tool(&tool, json!({ "text": text })).await;
            (k, text, outcome)
        });
    }
    let mut tally = Tally::default();
    let mut seen = vec![false; calls];
    let mut texts = HashSet::with_capacity(calls);
    while let Some(joined) = set.join_next().await {
        let (k, text, outcome) = match joined {
            Ok(done) => done,
            Err(err) => {
                tally.wrong.push(format!("a call's task failed: {err}"));
                continue;
            }
        };
        if std::mem::replace(&mut seen[k], true) {
            tally.wrong.push(format!("call {k} came back twice"));
        }
        if !texts.insert(text.clone()) {
            tally.wrong.push(format!("`{text}` came back twice"));
        }
        check(&mut tally, &targets[k % targets.len()], &text, outcome);
    }
    let lost = seen.iter().filter(|seen| !**seen).count();
    if lost > 0 {
        tally.wrong.push(format!("{lost} calls never came back"));
    }
    tally
}

/// 20 extensions, 10 000 concurrent calls: every one answered with its own
/// text (or a clean timeout naming its extension and tool), none lost,
/// none doubled, none crossed; all 20 still ready and never restarted; and
/// the resident set back within [`RSS_SLACK_MIB`] of the warmed-up baseline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_concurrent_calls_over_twenty_extensions_all_come_back_matched() {
    let lab = Lab::new();
    let (folders, targets) = write_extensions(&lab);
    let mut builder = lab
        .builder()
        .tool_timeout(CALL_TIMEOUT)
        .restart_policy(RestartPolicy::never());
    for folder in &folders {
        builder = builder.extension(folder);
    }
    let started = Instant::now();
    // The first start compiles 12 variants: more than the usual patience.
    let host = tokio::time::timeout(Duration::from_secs(120), builder.build())
        .await
        .expect("20 extensions did not start within 120 s")
        .expect("build");
    let start_took = started.elapsed();
    let tools = host.tools();
    for target in &targets {
        let owner = tools.iter().find(|t| t.name == target.tool);
        assert_eq!(
            owner.map(|t| t.extension.as_str()),
            Some(target.extension.as_str()),
            "{target:?}: {:#?}",
            host.list()
        );
    }

    let rss_idle = status_kib("VmRSS");
    let warm = bounded("the warm-up", run(&host, &targets, WARM_UP_CALLS, "warm")).await;
    assert!(warm.wrong.is_empty(), "warm-up: {:#?}", warm.wrong);
    let rss_before = status_kib("VmRSS");

    let started = Instant::now();
    let tally = tokio::time::timeout(CALL_TIMEOUT * 2, run(&host, &targets, CALLS, "load"))
        .await
        .expect("10 000 calls did not all come back");
    let took = started.elapsed();
    let rss_after = status_kib("VmRSS");
    let peak = status_kib("VmHWM");
    eprintln!(
        "load: started 20 extensions in {:.1}s; {CALLS} calls in {:.2}s ({:.0} calls/s): \
         {} answered, {} timed out; VmRSS {} MiB idle, {} MiB warmed up, {} MiB after \
         (peak {} MiB)",
        start_took.as_secs_f64(),
        took.as_secs_f64(),
        CALLS as f64 / took.as_secs_f64(),
        tally.answered,
        tally.timed_out,
        rss_idle / 1024,
        rss_before / 1024,
        rss_after / 1024,
        peak / 1024,
    );
    assert!(
        tally.wrong.is_empty(),
        "{} of {CALLS} calls went wrong, first ones: {:#?}",
        tally.wrong.len(),
        &tally.wrong[..tally.wrong.len().min(20)]
    );
    assert_eq!(tally.answered + tally.timed_out, CALLS);

    for entry in host.list() {
        assert_eq!(
            (entry.state, entry.restarts),
            (ExtensionState::Ready, 0),
            "{entry:#?}"
        );
    }
    let grown_mib = rss_after.saturating_sub(rss_before) / 1024;
    assert!(
        grown_mib <= RSS_SLACK_MIB,
        "the host grew by {grown_mib} MiB over {CALLS} calls \
         ({} MiB before, {} MiB after)",
        rss_before / 1024,
        rss_after / 1024
    );
    bounded("shutdown", host.shutdown()).await;
}
