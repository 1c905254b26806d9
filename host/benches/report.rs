//! The benchmark report: every figure measured side by side in one run.
//!
//! `cargo bench -p zotbox --bench report` builds the test guest `hostile`
//! twice (for `wasm32-wasip2` and natively, in release mode, same source),
//! then measures and prints one Markdown table:
//!
//! - start to ready: a wasm guest from its prepared artifact vs a native
//!   subprocess; plus the first compile and a load from the disk cache;
//! - tool-call round trip through the session (`echo`), p50 and p99;
//! - aggregate throughput: 10 extensions called concurrently, frames/s;
//! - RSS per extra idle extension with 1, 10 and 100 loaded;
//! - the guard chain's cost per tool call with 0, 10 and 50 refusal
//!   plugins of 10 rules each;
//! - the deny check of a command read as shell words (vs a plain one), and
//!   loading the heavy plugins the deny-rule budget refuses;
//! - a data `read` tool on a 1 MiB file vs `std::fs::read`, and a data
//!   `http` tool against a loopback HTTPS server vs a direct reqwest call;
//! - a shell command run confined by the kernel (Landlock, user, mount, PID
//!   and network namespaces, private HOME) vs the same command spawned
//!   unconfined, by `execve` and with `sh -c`, and in a workspace of 5 000
//!   folders vs a one-folder one (the census of its control paths);
//! - per guest language (C, Go, Python, JavaScript), its example's first
//!   compile, start to ready, cached start (a load from the disk cache) and
//!   tool round trip p50, side by side with the Rust example `weather` (in
//!   the "native / direct" column); a language whose toolchain is missing
//!   is reported as skipped, with the command that installs it.
//!
//! Each figure is a median (or a percentile) over many runs, measured with
//! its own warm-up; the machine's load shows in absolutes, so read ratios.
//! Set `ZOTBOX_BENCH_QUICK=1` for a shorter run, `ZOTBOX_BENCH_WORKERS=N`
//! for another number of tokio workers (default 2), and
//! `ZOTBOX_BENCH_ROUND_TRIPS=1` for the round-trip rows alone,
//! `ZOTBOX_BENCH_ZOT=1` for the rows of the path zot users take alone,
//! `ZOTBOX_BENCH_SHELL=1` for the confined shell's rows alone,
//! `ZOTBOX_BENCH_GUARD=1` for the guard chain's and deny rules' alone,
//! `ZOTBOX_BENCH_FS=1` for the fs jail's rows alone,
//! `ZOTBOX_BENCH_LOADS=N` for N loads from the disk cache (a profiler's).
//! `ZOTBOX_BENCH_IDLE=1` for the idle-memory rows alone, with where the
//! memory of 100 extra wasm extensions lies (by kind of mapping).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::broadcast;
use zotbox::Host;
use zotbox::Launcher;
use zotbox::build::{
    CargoBuild, GUEST_TARGET, GoBuild, JsBuild, MakeBuild, PyBuild, ToolchainError, find_program,
};
use zotbox::home::ZotHome;
use zotbox::internals::{Session, SessionConfig, WasmRuntime};
use zotbox::manifest::Manifest;
use zotbox::protocol::HelloAck;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const GUEST: &str = "hostile";

/// How much of each measurement to do.
struct Scale {
    starts: usize,
    calls: usize,
    throughput: Duration,
    guard_calls: usize,
    data_calls: usize,
}

impl Scale {
    fn from_env() -> Self {
        if std::env::var_os("ZOTBOX_BENCH_QUICK").is_some() {
            Self {
                starts: 20,
                calls: 3_000,
                throughput: Duration::from_secs(1),
                guard_calls: 20_000,
                data_calls: 100,
            }
        } else {
            Self {
                starts: 60,
                calls: 20_000,
                throughput: Duration::from_secs(3),
                guard_calls: 200_000,
                data_calls: 400,
            }
        }
    }
}

struct Fixture {
    tmp: tempfile::TempDir,
    home: ZotHome,
    wasm: Manifest,
    native: Manifest,
    wasm_file: PathBuf,
    /// The example guest `hello`: its folder (manifest and wasm) and its
    /// native build.
    example_dir: PathBuf,
    example_native: PathBuf,
    /// The Rust example the other languages are compared with.
    rust_example: LanguageGuest,
}

/// One language's example, ready to run, and the tool call measured.
struct LanguageGuest {
    language: &'static str,
    manifest: Manifest,
    wasm: PathBuf,
    tool: &'static str,
    args: serde_json::Value,
}

/// The Rust example compared with the other languages: it has a tool with
/// one notify per call, as theirs (but C's) have.
const RUST_EXAMPLE: &str = "weather";

/// The example guest: what the path zot users take is measured with (it
/// imports nothing but WASI, so the wasmtime CLI runs it too).
const EXAMPLE: &str = "hello";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixture() -> Result<Fixture> {
    let root = workspace_root();
    let target_dir = root.join("target/bench-guests");
    let build = |target: Option<&str>| CargoBuild {
        manifest_path: root.join("Cargo.toml"),
        packages: vec![
            format!("zotbox-test-{GUEST}"),
            format!("zotbox-example-{EXAMPLE}"),
            format!("zotbox-example-{RUST_EXAMPLE}"),
        ],
        target: target.map(str::to_owned),
        target_dir: Some(target_dir.clone()),
        verbose: false,
    };
    eprintln!("building `{GUEST}` and `{EXAMPLE}` for {GUEST_TARGET} and natively…");
    let mut wasm_bins = build(Some(GUEST_TARGET)).run()?;
    let mut native_bins = build(None).run()?;
    let wasm_bin = wasm_bins.remove(GUEST).ok_or("no wasm artifact")?;
    let native_bin = native_bins.remove(GUEST).ok_or("no native artifact")?;
    let tmp = tempfile::tempdir()?;
    let wasm_dir = tmp.path().join("wasm");
    let native_dir = tmp.path().join("native");
    let example_dir = tmp.path().join(EXAMPLE);
    for dir in [&wasm_dir, &native_dir, &example_dir] {
        std::fs::create_dir_all(dir)?;
    }
    let wasm_file = wasm_dir.join(format!("{GUEST}.wasm"));
    std::fs::copy(&wasm_bin, &wasm_file)?;
    std::fs::write(
        wasm_dir.join("extension.json"),
        json!({"name": GUEST, "wasm": format!("./{GUEST}.wasm")}).to_string(),
    )?;
    std::fs::write(
        native_dir.join("extension.json"),
        json!({"name": GUEST, "exec": native_bin}).to_string(),
    )?;
    std::fs::copy(
        wasm_bins.remove(EXAMPLE).ok_or("no example wasm")?,
        example_dir.join(format!("{EXAMPLE}.wasm")),
    )?;
    std::fs::write(
        example_dir.join("extension.json"),
        json!({"name": EXAMPLE, "wasm": format!("./{EXAMPLE}.wasm")}).to_string(),
    )?;
    let rust_wasm = wasm_bins
        .remove(RUST_EXAMPLE)
        .ok_or("no wasm build of the Rust example")?;
    let rust_example = language_guest(
        tmp.path(),
        "Rust",
        RUST_EXAMPLE,
        &rust_wasm,
        "weather",
        json!({"city": "Berlin"}),
    )?;
    Ok(Fixture {
        rust_example,
        home: ZotHome::new(tmp.path().join("home")),
        wasm: Manifest::load(&wasm_dir.join("extension.json"))?,
        native: Manifest::load(&native_dir.join("extension.json"))?,
        wasm_file,
        example_dir,
        example_native: native_bins
            .remove(EXAMPLE)
            .ok_or("no example native build")?,
        tmp,
    })
}

async fn start(launcher: &Launcher, manifest: &Manifest) -> Result<Session> {
    let limits = zotbox::internals::GuestLimits::from_effective(
        &zotbox::policy::Policy::permissive().limits(
            &zotbox::manifest::Limits::default(),
            &zotbox::policy::LimitDefaults::default(),
        ),
    );
    let transport = launcher.start(manifest, limits, None).await?;
    let (events, _) = broadcast::channel(16);
    Ok(Session::start(
        manifest.name(),
        HelloAck::default(),
        SessionConfig::default(),
        transport,
        events,
    )
    .await?)
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort_unstable();
    let rank = ((p / 100.0) * (samples.len() - 1) as f64).round() as usize;
    samples[rank.min(samples.len() - 1)]
}

async fn start_to_ready(
    launcher: &Launcher,
    manifest: &Manifest,
    scale: &Scale,
) -> Result<Duration> {
    // One start outside the measurement: the wasm artifact gets prepared.
    start(launcher, manifest).await?.shutdown().await;
    let mut samples = Vec::with_capacity(scale.starts);
    for _ in 0..scale.starts {
        let begun = Instant::now();
        let session = start(launcher, manifest).await?;
        samples.push(begun.elapsed());
        session.kill();
        session.closed().await;
    }
    Ok(percentile(&mut samples, 50.0))
}

/// Round trips from a caller that is itself a task on the runtime, as a
/// host's callers usually are (a caller blocking a thread outside the
/// runtime pays an extra futex wake-up per call).
async fn round_trips(
    launcher: &Launcher,
    manifest: &Manifest,
    scale: &Scale,
) -> Result<(Duration, Duration)> {
    let session = start(launcher, manifest).await?;
    let calls = scale.calls;
    tokio::spawn(measure_round_trips(session, calls)).await?
}

async fn measure_round_trips(session: Session, calls: usize) -> Result<(Duration, Duration)> {
    measure_round_trips_of(session, "echo", json!({"text": "ping"}), calls, 1000).await
}

async fn measure_round_trips_of(
    session: Session,
    tool: &str,
    args: serde_json::Value,
    calls: usize,
    warm_up: usize,
) -> Result<(Duration, Duration)> {
    for _ in 0..warm_up {
        session.call_tool(tool, args.clone(), None).await?;
    }
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let begun = Instant::now();
        session.call_tool(tool, args.clone(), None).await?;
        samples.push(begun.elapsed());
    }
    session.shutdown().await;
    Ok((
        percentile(&mut samples, 50.0),
        percentile(&mut samples, 99.0),
    ))
}

/// Frames per second (a call is two frames) with 10 extensions called
/// concurrently, one caller each.
async fn throughput(launcher: &Launcher, manifest: &Manifest, scale: &Scale) -> Result<f64> {
    let mut sessions = Vec::new();
    for _ in 0..10 {
        sessions.push(start(launcher, manifest).await?);
    }
    let deadline = Instant::now() + scale.throughput;
    let begun = Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for session in &sessions {
        let session = session.clone();
        callers.spawn(async move {
            let args = json!({"text": "ping"});
            let mut calls = 0u64;
            while Instant::now() < deadline {
                if session.call_tool("echo", args.clone(), None).await.is_ok() {
                    calls += 1;
                }
            }
            calls
        });
    }
    let mut calls = 0;
    while let Some(done) = callers.join_next().await {
        calls += done?;
    }
    let elapsed = begun.elapsed().as_secs_f64();
    for session in sessions {
        session.kill();
        session.closed().await;
    }
    Ok(2.0 * calls as f64 / elapsed)
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The `/proc` folders of every thread of `pid` (none when it is gone).
fn threads(pid: u32) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|task| task.path())
}

/// Context switches so far of every thread of `pid` (each is a wake-up:
/// a sleeping thread that runs again switches in once).
fn context_switches(pid: u32) -> u64 {
    let mut total = 0;
    for thread in threads(pid) {
        let status = std::fs::read_to_string(thread.join("status")).unwrap_or_default();
        total += status
            .lines()
            .filter_map(|line| {
                line.strip_prefix("voluntary_ctxt_switches:")
                    .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            })
            .filter_map(|count| count.trim().parse::<u64>().ok())
            .sum::<u64>();
    }
    total
}

fn children_rss_kib() -> u64 {
    let mut total = 0;
    for thread in threads(std::process::id()) {
        let children = std::fs::read_to_string(thread.join("children")).unwrap_or_default();
        for pid in children.split_whitespace().filter_map(|p| p.parse().ok()) {
            total += rss_kib(pid);
        }
    }
    total
}

/// KiB of resident memory (this process and its children) each extra idle
/// extension costs, with `count` loaded beside one warm-up extension.
async fn idle_rss(launcher: &Launcher, manifest: &Manifest, count: usize) -> Result<u64> {
    let warm = start(launcher, manifest).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = rss_kib(std::process::id()) + children_rss_kib();
    let mut sessions = Vec::with_capacity(count);
    for _ in 0..count {
        sessions.push(start(launcher, manifest).await?);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = rss_kib(std::process::id()) + children_rss_kib();
    for session in sessions.into_iter().chain([warm]) {
        session.kill();
        session.closed().await;
    }
    Ok(after.saturating_sub(before) / count as u64)
}

/// Prints how the resident memory of `count` extra idle extensions is
/// spread over this process's mappings, grouped by permissions, size and
/// name (a linear memory's parts, a fiber stack and the heap each show as
/// one group), largest growth first.
async fn print_idle_mappings(launcher: &Launcher, manifest: &Manifest, count: usize) -> Result<()> {
    let warm = start(launcher, manifest).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = resident_by_mapping();
    let mut sessions = Vec::with_capacity(count);
    for _ in 0..count {
        sessions.push(start(launcher, manifest).await?);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut growth: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (sign, groups) in [(1, resident_by_mapping()), (-1, before)] {
        for (group, (mappings, kib)) in groups {
            let entry = growth.entry(group).or_default();
            entry.0 += sign * mappings;
            entry.1 += sign * kib;
        }
    }
    let mut growth: Vec<_> = growth
        .into_iter()
        .filter(|(_, (_, kib))| *kib != 0)
        .collect();
    growth.sort_by_key(|(_, (_, kib))| std::cmp::Reverse(*kib));
    println!("resident growth with {count} more, by mapping (KiB per extension, mappings added):");
    for (group, (mappings, kib)) in growth {
        println!(
            "  {:>7.1}  {mappings:>+5}  {group}",
            kib as f64 / count as f64
        );
    }
    for session in sessions.into_iter().chain([warm]) {
        session.kill();
        session.closed().await;
    }
    Ok(())
}

/// This process's resident KiB and count of mappings, by group
/// (`perms size name` of each mapping in `/proc/self/smaps`).
fn resident_by_mapping() -> BTreeMap<String, (i64, i64)> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut groups: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut group = String::new();
    for line in smaps.lines() {
        if let Some(kib) = line.strip_prefix("Rss:") {
            let kib: i64 = kib
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .unwrap_or(0);
            groups.entry(group.clone()).or_default().1 += kib;
            continue;
        }
        let mut fields = line.split_whitespace();
        let Some((start, end)) = fields.next().and_then(|range| range.split_once('-')) else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        else {
            continue;
        };
        let perms = fields.next().unwrap_or("");
        let name = fields.nth(3).unwrap_or("[anonymous]");
        let kib = (end - start) / 1024;
        let size = match kib {
            k if k >= 1 << 20 => format!("{}G", k >> 20),
            k if k >= 1 << 10 => format!("{}M", k >> 10),
            k => format!("{k}K"),
        };
        group = format!("{perms} {size:>5} {name}");
        groups.entry(group.clone()).or_default().0 += 1;
    }
    groups
}

/// A workspace holding `plugins` refusal plugins of 10 rules each, none of
/// which matches the benchmark's command (every rule is evaluated).
fn guard_workspace(base: &Path, plugins: usize) -> Result<PathBuf> {
    let workspace = base.join(format!("guard-{plugins}"));
    let dir = workspace.join(".zot/plugins");
    std::fs::create_dir_all(&dir)?;
    for p in 0..plugins {
        let deny: Vec<_> = (0..10)
            .map(|r| {
                if r % 2 == 0 {
                    json!({"tools": ["bash"], "commandPattern": format!("forbidden-{p}-{r}\\s+--now"), "reason": "no"})
                } else {
                    json!({"tools": ["write", "edit"], "pathPattern": format!("secret/{p}/{r}/.*\\.key$"), "reason": "no"})
                }
            })
            .collect();
        std::fs::write(
            dir.join(format!("p{p:02}.json")),
            json!({"name": format!("p{p:02}"), "description": "bench", "deny": deny}).to_string(),
        )?;
    }
    Ok(workspace)
}

/// Mean cost of one `tool_call` of `tool` with `args` through the guard
/// chain (deny rules, no intercepting extension, audit record included).
async fn guard_cost(
    base: &Path,
    plugins: usize,
    (tool, args): (&str, serde_json::Value),
    scale: &Scale,
) -> Result<Duration> {
    let workspace = guard_workspace(base, plugins)?;
    let host = Host::builder()
        .workspace(&workspace)
        .zot_home(base.join(format!("guard-home-{plugins}-{tool}")))
        .build()
        .await?;
    for _ in 0..1000 {
        host.intercept_tool_call(tool, args.clone()).await;
    }
    let begun = Instant::now();
    for _ in 0..scale.guard_calls {
        let decision = host.intercept_tool_call(tool, args.clone()).await;
        std::hint::black_box(decision);
    }
    let per_call = begun.elapsed() / u32::try_from(scale.guard_calls).unwrap_or(u32::MAX);
    host.shutdown().await;
    Ok(per_call)
}

/// The deny stage on its own, as rows of the report: one check of a
/// command with quotes and operators (read as shell words, every form
/// tried) against the same command plain, with 50 plugins × 10 rules; and
/// loading the issue's heavy plugins (12 KB: 16 rules × 100 tools; 69 KB:
/// 1 000 rules), which the chain's budget refuses.
fn deny_figures(base: &Path, scale: &Scale) -> Result<Vec<[String; 4]>> {
    use zotbox::data::DataSearch;
    use zotbox::internals::DenyRules;
    let load = |workspace: &Path| {
        let set = DataSearch::new(workspace, base.join("deny-home")).load();
        DenyRules::for_data(&set, workspace)
    };
    let mut rows = Vec::new();
    let rules = load(&guard_workspace(base, 50)?);
    let quoted =
        json!({"command": "cd 'sub dir' && \"cargo\" te''st --workspace; /usr/bin/git status"});
    let plain = json!({"command": "cargo test --workspace"});
    let per_check = |args: &serde_json::Value| {
        for _ in 0..1000 {
            std::hint::black_box(rules.check("bash", args));
        }
        let begun = Instant::now();
        for _ in 0..scale.guard_calls {
            std::hint::black_box(rules.check("bash", std::hint::black_box(args)));
        }
        begun.elapsed() / u32::try_from(scale.guard_calls).unwrap_or(u32::MAX)
    };
    let (normalised, raw) = (per_check(&quoted), per_check(&plain));
    rows.push([
        "deny check, quoted command normalised (vs plain), 50 × 10 rules".to_owned(),
        micros(normalised),
        micros(raw),
        dur_ratio(normalised, raw),
    ]);
    let heavy = [
        ("12 KB plugin, 16 rules × 100 tools", 16, 100),
        ("69 KB plugin, 1 000 rules", 1000, 1),
    ];
    for (name, count, tools) in heavy {
        let workspace = base.join(format!("deny-heavy-{count}"));
        let dir = workspace.join(".zot/plugins");
        std::fs::create_dir_all(&dir)?;
        let tools: Vec<String> = (0..tools).map(|t| format!("to{t:02}")).collect();
        let deny: Vec<_> = (0..count)
            .map(|r| json!({"tools": tools, "commandPattern": format!("\\w{{30}}{r:04}"), "reason": "r"}))
            .collect();
        std::fs::write(
            dir.join("heavy.json"),
            json!({"name": "heavy", "description": "bench", "deny": deny}).to_string(),
        )?;
        let rss_before = rss_kib(std::process::id());
        let mut samples = Vec::new();
        let mut outcome = String::new();
        for _ in 0..5 {
            let begun = Instant::now();
            let rules = load(&workspace);
            samples.push(begun.elapsed());
            outcome = format!(
                "{} refused, {} KiB compiled",
                rules.problems().len(),
                rules.compiled_bytes() / 1024
            );
        }
        let grown = rss_kib(std::process::id()).saturating_sub(rss_before);
        rows.push([
            format!("load the {name} (median)"),
            millis(percentile(&mut samples, 50.0)),
            format!("{outcome}, RSS +{grown} KiB"),
            "-".into(),
        ]);
    }
    Ok(rows)
}

/// Median of `runs` timings of `work`.
async fn median_of<F, Fut, T>(runs: usize, mut work: F) -> Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    work().await?;
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let begun = Instant::now();
        std::hint::black_box(work().await?);
        samples.push(begun.elapsed());
    }
    Ok(percentile(&mut samples, 50.0))
}

/// A loopback HTTPS server answering every request with `hello`, and the
/// PEM of its self-signed certificate.
async fn https_server() -> Result<(u16, Vec<u8>)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rcgen::CertifiedKey { cert, key_pair } =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?;
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(rustls::pki_types::PrivatePkcs8KeyDer::from(
        key_pair.serialize_der(),
    ));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(vec![cert.der().clone()], key)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                // Keep-alive: answer each request head on the connection.
                loop {
                    match tls.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                    while let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                        request.drain(..end + 4);
                        let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
                        if tls.write_all(reply).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    Ok((port, cert.pem().into_bytes()))
}

struct DataFigures {
    read_tool: Duration,
    read_direct: Duration,
    http_tool: Duration,
    http_direct: Duration,
}

async fn data_tools(base: &Path, scale: &Scale) -> Result<DataFigures> {
    let (port, pem) = https_server().await?;
    let workspace = base.join("data-ws");
    let home = base.join("data-home");
    std::fs::create_dir_all(workspace.join(".zot/tools"))?;
    std::fs::create_dir_all(&home)?;
    let big = workspace.join("big.txt");
    std::fs::write(&big, "x".repeat(1024 * 1024))?;
    std::fs::write(
        workspace.join(".zot/tools/read-big.json"),
        json!({"name": "read-big", "description": "bench", "kind": "read", "path": "big.txt"})
            .to_string(),
    )?;
    std::fs::write(
        workspace.join(".zot/tools/fetch.json"),
        json!({"name": "fetch", "description": "bench", "kind": "http", "url": format!("https://127.0.0.1:{port}/ok")})
            .to_string(),
    )?;
    let ca = base.join("ca.pem");
    std::fs::write(&ca, &pem)?;
    std::fs::write(
        home.join("policy.json"),
        json!({"extra_root_certificates": [ca]}).to_string(),
    )?;
    // What `zotbox trust --yes` records: a workspace's data tools run only
    // once it is trusted.
    zotbox::store::trust::trust_workspace(&ZotHome::new(&home), &workspace)?;
    let host = Host::builder()
        .workspace(&workspace)
        .zot_home(&home)
        .build()
        .await?;

    let read_tool = median_of(scale.data_calls, || {
        let host = host.clone();
        async move { Ok(host.call_tool("read-big", json!({})).await?) }
    })
    .await?;
    let read_direct = median_of(scale.data_calls, || {
        let big = big.clone();
        async move { Ok(tokio::task::spawn_blocking(move || std::fs::read(big)).await??) }
    })
    .await?;
    let http_tool = median_of(scale.data_calls, || {
        let host = host.clone();
        async move { Ok(host.call_tool("fetch", json!({})).await?) }
    })
    .await?;
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem)?)
        .build()?;
    let url = format!("https://127.0.0.1:{port}/ok");
    let http_direct = median_of(scale.data_calls, || {
        let (client, url) = (client.clone(), url.clone());
        async move { Ok(client.get(url).send().await?.bytes().await?) }
    })
    .await?;
    host.shutdown().await;
    Ok(DataFigures {
        read_tool,
        read_direct,
        http_tool,
        http_direct,
    })
}

/// The confined shell's rows: two commands against their unconfined runs,
/// and one in a workspace of [`BIG_WORKSPACE_FOLDERS`] folders (nested
/// repositories among them) against the same in a one-folder workspace:
/// what finding the control paths at every depth costs a call.
/// The guard chain's rows (per tool call, by plugin count; a `write` whose
/// path is resolved) and the deny stage's on its own.
async fn guard_rows(base: &Path, scale: &Scale) -> Result<Vec<[String; 4]>> {
    let mut rows = Vec::new();
    eprintln!("guard chain…");
    let bash = ("bash", json!({"command": "cargo test --workspace"}));
    for plugins in [0, 10, 50] {
        let cost = guard_cost(base, plugins, bash.clone(), scale).await?;
        rows.push([
            format!("guard chain per tool call, {plugins} plugins × 10 rules"),
            micros(cost),
            "-".into(),
            "-".into(),
        ]);
    }
    // A path rule resolves the path on the filesystem, on a blocking
    // thread held to the check's deadline.
    let write = ("write", json!({"path": "src/lib.rs", "content": "x"}));
    let cost = guard_cost(base, 50, write, scale).await?;
    rows.push([
        "guard chain per `write` call (path resolved), 50 plugins × 10 rules".into(),
        micros(cost),
        "-".into(),
        "-".into(),
    ]);
    eprintln!("deny rules…");
    rows.extend(deny_figures(base, scale)?);
    Ok(rows)
}

async fn shell_rows(base: &Path, scale: &Scale) -> Result<Vec<[String; 4]>> {
    let mut rows = Vec::new();
    let small = base.join("shell-ws");
    std::fs::create_dir_all(small.join(".git"))?;
    for (name, argv) in [
        ("`printf hi` by execve", &["printf", "hi"][..]),
        (
            // `\|`: a pipe inside a Markdown table cell.
            "`sh -c 'echo hi \\| wc -c'`",
            &["sh", "-c", "echo hi | wc -c"][..],
        ),
    ] {
        let (confined, unconfined) = shell_cost(&small, argv, scale).await?;
        rows.push([
            format!("shell {name}, confined (vs unconfined)"),
            millis(confined),
            millis(unconfined),
            dur_ratio(confined, unconfined),
        ]);
    }
    let big = base.join("shell-big-ws");
    for index in 0..BIG_WORKSPACE_FOLDERS {
        let folder = big.join(format!("d{}/f{index}", index / 100));
        std::fs::create_dir_all(&folder)?;
        std::fs::write(folder.join("file"), "x")?;
        if index % 250 == 0 {
            std::fs::create_dir_all(folder.join(".git"))?;
        }
    }
    // A folder that changed in the last few seconds is read again at every
    // call (its change time cannot be trusted yet): measure the settled
    // workspace a user has, not one just written.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let printf = &["printf", "hi"][..];
    let (in_big, _) = shell_cost(&big, printf, scale).await?;
    let (in_small, _) = shell_cost(&small, printf, scale).await?;
    rows.push([
        format!(
            "shell `printf hi` confined, workspace of {BIG_WORKSPACE_FOLDERS} folders (vs one)"
        ),
        millis(in_big),
        millis(in_small),
        dur_ratio(in_big, in_small),
    ]);
    Ok(rows)
}

/// The fs jail's rows: a write and a read three folders deep, against the
/// same through `std::fs`: what the lexical, grant, control-path and
/// repository checks and the no-follow walk cost a guest's file call.
async fn fs_rows(base: &Path, scale: &Scale) -> Result<Vec<[String; 4]>> {
    use zotbox::capability::fs::{FsGrant, FsLimits, Jail};
    let workspace = base.join("fs-ws");
    std::fs::create_dir_all(workspace.join("src/a/b"))?;
    let jail = Jail::open(&workspace)?;
    let grant = FsGrant::new(&["**".to_owned()], &["**".to_owned()])?;
    let limits = FsLimits::default();
    let (relative, contents) = ("src/a/b/file.txt", vec![b'x'; 1024]);
    let direct = workspace.join(relative);
    let runs = scale.calls;
    let write = median_of(runs, || async {
        jail.write(&grant, &limits, relative, &contents)?;
        Ok(())
    })
    .await?;
    let write_direct = median_of(runs, || async {
        std::fs::write(&direct, &contents)?;
        Ok(())
    })
    .await?;
    let read = median_of(runs, || async {
        jail.read(&grant, &limits, relative)?;
        Ok(())
    })
    .await?;
    let read_direct = median_of(runs, || async {
        std::fs::read(&direct)?;
        Ok(())
    })
    .await?;
    // The same write in a working tree whose git configuration names a
    // hooks folder (as husky sets it): the configuration's files are
    // looked at again for each write, read again only when they changed.
    let tree = base.join("fs-tree");
    std::fs::create_dir_all(tree.join("src/a/b"))?;
    std::fs::create_dir_all(tree.join(".git"))?;
    std::fs::write(tree.join(".git/config"), "[core]\n\thooksPath = .husky/_\n")?;
    let tree_jail = Jail::open(&tree)?;
    // A configuration changed within the last 2 s is read again at every
    // write (its stamp cannot tell a second change yet); measure the
    // usual case, one written long before.
    tree_jail.write(&grant, &limits, relative, &contents)?;
    tokio::time::sleep(Duration::from_millis(4_100)).await;
    let tree_write = median_of(runs, || async {
        tree_jail.write(&grant, &limits, relative, &contents)?;
        Ok(())
    })
    .await?;
    Ok(vec![
        [
            "fs write 1 KiB, 3 folders deep, through the jail (vs `std::fs::write`)".to_owned(),
            micros(write),
            micros(write_direct),
            dur_ratio(write, write_direct),
        ],
        [
            "fs write as above, in a git working tree with `core.hooksPath` (vs `std::fs::write`)"
                .to_owned(),
            micros(tree_write),
            micros(write_direct),
            dur_ratio(tree_write, write_direct),
        ],
        [
            "fs read 1 KiB, 3 folders deep, through the jail (vs `std::fs::read`)".to_owned(),
            micros(read),
            micros(read_direct),
            dur_ratio(read, read_direct),
        ],
    ])
}

/// The folders of the large workspace a confined shell call is measured in.
const BIG_WORKSPACE_FOLDERS: usize = 5_000;

/// The same command run confined (the capability layer's `shell::run`)
/// and spawned unconfined as before issue 10 (scrubbed environment, own
/// process group, piped output): `(confined, unconfined)` medians.
async fn shell_cost(
    workspace: &Path,
    argv: &[&str],
    scale: &Scale,
) -> Result<(Duration, Duration)> {
    use zotbox::capability::confine::Settings;
    use zotbox::capability::shell::{self, Invocation, Rendered, ShellLimits};
    let command = Rendered {
        shown: argv.join(" "),
        invocation: Invocation::Exec(argv.iter().map(|w| (*w).to_owned()).collect()),
        arg_paths: Vec::new(),
    };
    let confined = median_of(scale.data_calls, || {
        let (command, workspace) = (command.clone(), workspace.to_owned());
        async move {
            let output = shell::run(
                &command,
                &workspace,
                &ShellLimits::default(),
                &Settings::default(),
                &zotbox::capability::fs::ControlPaths::default(),
            )
            .await?;
            if output.exit_code != Some(0) {
                return Err(format!("`{}` failed: {}", command.shown, output.stderr).into());
            }
            Ok(output)
        }
    })
    .await?;
    let unconfined = median_of(scale.data_calls, || {
        let workspace = workspace.to_owned();
        let argv: Vec<String> = argv.iter().map(|w| (*w).to_owned()).collect();
        async move {
            let output = tokio::process::Command::new(&argv[0])
                .args(&argv[1..])
                .current_dir(&workspace)
                .env_clear()
                .env("PATH", shell::SAFE_PATH)
                .env("HOME", &workspace)
                .env("LANG", "C.UTF-8")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .process_group(0)
                .kill_on_drop(true)
                .output()
                .await?;
            Ok(output)
        }
    })
    .await?;
    Ok((confined, unconfined))
}

/// A process spawned as zot spawns an extension: in its folder, the
/// protocol on piped stdin/stdout, stderr discarded.
struct ZotChild {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::io::BufReader<std::process::ChildStdout>,
    line: String,
}

impl ZotChild {
    /// Spawns `program args` in `dir` and answers its handshake; returns it
    /// with the time from spawn to its `ready`.
    fn start(
        program: &Path,
        args: &[&str],
        dir: &Path,
        env: &[(&str, &Path)],
    ) -> Result<(Self, Duration)> {
        use std::process::{Command, Stdio};
        let begun = Instant::now();
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn()?;
        let (Some(input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("no pipes".into());
        };
        let mut spawned = Self {
            child,
            input,
            output: std::io::BufReader::new(output),
            line: String::new(),
        };
        loop {
            let frame = spawned.read_frame()?;
            match frame["type"].as_str() {
                Some("hello") => {
                    let ack = zotbox::protocol::encode_to_vec(
                        &zotbox::protocol::HostFrame::HelloAck(HelloAck::default()),
                    )?;
                    std::io::Write::write_all(&mut spawned.input, &ack)?;
                }
                Some("ready") => return Ok((spawned, begun.elapsed())),
                _ => {}
            }
        }
    }

    fn read_frame(&mut self) -> Result<serde_json::Value> {
        use std::io::BufRead;
        self.line.clear();
        if self.output.read_line(&mut self.line)? == 0 {
            return Err("the extension closed its output".into());
        }
        Ok(serde_json::from_str(&self.line)?)
    }

    /// p50 of `calls` round trips of the example's `hello-noop` command,
    /// after a warm-up.
    fn round_trips(&mut self, calls: usize) -> Result<Duration> {
        let mut samples = Vec::with_capacity(calls);
        for n in 0..calls + 200 {
            let id = n.to_string();
            let call = zotbox::protocol::encode_to_vec(
                &zotbox::protocol::HostFrame::CommandInvoked(zotbox::protocol::CommandInvoked {
                    id: id.clone(),
                    name: "hello-noop".into(),
                    args: String::new(),
                }),
            )?;
            let begun = Instant::now();
            std::io::Write::write_all(&mut self.input, &call)?;
            loop {
                let frame = self.read_frame()?;
                if frame["type"] == "command_response" && frame["id"] == id.as_str() {
                    break;
                }
            }
            if n >= 200 {
                samples.push(begun.elapsed());
            }
        }
        Ok(percentile(&mut samples, 50.0))
    }

    fn rss_kib(&self) -> u64 {
        rss_kib(self.child.id())
    }

    fn stop(mut self) {
        let _ = std::io::Write::write_all(&mut self.input, b"{\"type\":\"shutdown\"}\n");
        drop(self.input);
        let _ = self.child.wait();
    }
}

/// What zot sees of one way to run the guest: medians over `runs` spawns
/// of spawn → ready, idle RSS, and the p50 tool round trip.
struct ZotFigures {
    ready: Duration,
    rss_kib: u64,
    round_trip: Duration,
}

/// One way to run the example guest, as zot would start it.
struct Way<'a> {
    program: &'a Path,
    args: Vec<String>,
    env: Vec<(&'a str, &'a Path)>,
}

/// `program args…` with `env` added.
fn way<'a>(program: &'a Path, args: &[&str], env: &[(&'a str, &'a Path)]) -> Way<'a> {
    Way {
        program,
        args: args.iter().map(|arg| (*arg).to_owned()).collect(),
        env: env.to_vec(),
    }
}

/// Spawn → ready, idle RSS and round trips of every way, `runs` times each.
/// The ways take turns within each run, so that the machine's drift over
/// the minute the rows take falls on all of them alike, not on whichever
/// came last.
fn zot_paths(dir: &Path, ways: &[Way<'_>], runs: usize, calls: usize) -> Result<Vec<ZotFigures>> {
    let start = |way: &Way<'_>| {
        let args: Vec<&str> = way.args.iter().map(String::as_str).collect();
        ZotChild::start(way.program, &args, dir, &way.env)
    };
    // One start of each outside the measurement: caches and page cache warm.
    for way in ways {
        start(way)?.0.stop();
    }
    let mut samples = vec![(Vec::new(), Vec::new(), Vec::new()); ways.len()];
    for _ in 0..runs {
        for (way, (ready, rss, trips)) in ways.iter().zip(&mut samples) {
            let (mut child, took) = start(way)?;
            ready.push(took);
            std::thread::sleep(Duration::from_millis(300));
            rss.push(child.rss_kib());
            trips.push(child.round_trips(calls)?);
            child.stop();
        }
    }
    Ok(samples
        .into_iter()
        .map(|(mut ready, mut rss, mut trips)| {
            rss.sort_unstable();
            ZotFigures {
                ready: percentile(&mut ready, 50.0),
                rss_kib: rss[rss.len() / 2],
                round_trip: percentile(&mut trips, 50.0),
            }
        })
        .collect())
}

/// p50 of a line bounced off `cat` through two pipes: the least a round
/// trip between two processes costs on this machine.
fn pipe_ping_pong(calls: usize) -> Result<Duration> {
    use std::io::{BufRead, Write};
    use std::process::{Command, Stdio};
    let mut cat = Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let (Some(mut input), Some(output)) = (cat.stdin.take(), cat.stdout.take()) else {
        return Err("no pipes".into());
    };
    let mut output = std::io::BufReader::new(output);
    let mut line = String::new();
    let mut samples = Vec::with_capacity(calls);
    for n in 0..calls + 1000 {
        let begun = Instant::now();
        input.write_all(b"ping\n")?;
        line.clear();
        output.read_line(&mut line)?;
        if n >= 1000 {
            samples.push(begun.elapsed());
        }
    }
    drop(input);
    let _ = cat.wait();
    Ok(percentile(&mut samples, 50.0))
}

/// The `wasmtime` CLI on PATH, if any.
fn wasmtime_cli() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("wasmtime"))
        .find(|candidate| candidate.is_file())
}

/// The three rows of the path zot users take, for the example guest:
/// `zotbox run`, the native build and (when on PATH) `wasmtime run` of the
/// precompiled guest.
fn zot_rows(fixture: &Fixture, scale: &Scale) -> Result<Vec<[String; 4]>> {
    let runs = 7;
    let calls = scale.calls / 10;
    let zotbox = Path::new(env!("CARGO_BIN_EXE_zotbox"));
    let home = fixture.home.root();
    let dir = fixture.example_dir.as_path();
    let zot_home = [("ZOT_HOME", home)];
    // What an installed manifest makes zot start. The first start (outside
    // the measurement) starts the shared host; every measured one finds it
    // warm.
    let relay = Path::new(env!("CARGO_BIN_EXE_zotbox-relay"));
    let mut ways = vec![
        way(fixture.example_native.as_path(), &[], &[]),
        way(relay, &[], &zot_home),
        way(zotbox, &["run"], &zot_home),
        way(zotbox, &["run", "--standalone"], &zot_home),
    ];
    let mut names = vec![
        "`zotbox-relay` (installed launcher, shared host warm)",
        "`zotbox run` (hands over, then execs the relay)",
        "`zotbox run --standalone`",
    ];
    let cwasm = fixture.tmp.path().join(format!("{EXAMPLE}.cwasm"));
    let cwasm_arg = cwasm.to_string_lossy().into_owned();
    let cli = wasmtime_cli();
    match &cli {
        Some(cli) => {
            let compiled = std::process::Command::new(cli)
                .arg("compile")
                .arg(dir.join(format!("{EXAMPLE}.wasm")))
                .arg("-o")
                .arg(&cwasm)
                .status()?;
            if compiled.success() {
                ways.push(way(cli, &["run", "--allow-precompiled", &cwasm_arg], &[]));
                names.push("`wasmtime run` (precompiled)");
            } else {
                eprintln!("`wasmtime compile` failed; no `wasmtime run` rows");
            }
        }
        None => eprintln!("no `wasmtime` on PATH; no `wasmtime run` rows"),
    }
    let figures = zot_paths(dir, &ways, runs, calls)?;
    let (native, others) = figures.split_first().ok_or("no figures")?;
    let mut rows = Vec::new();
    for (who, figures) in names.iter().zip(others) {
        rows.push([
            format!("{who}: spawn → ready, `{EXAMPLE}` (median of {runs})"),
            millis(figures.ready),
            millis(native.ready),
            dur_ratio(figures.ready, native.ready),
        ]);
        rows.push([
            format!("{who}: idle RSS"),
            format!("{:.1} MiB", figures.rss_kib as f64 / 1024.0),
            format!("{:.1} MiB", native.rss_kib as f64 / 1024.0),
            ratio(figures.rss_kib as f64, native.rss_kib as f64),
        ]);
        rows.push([
            format!("{who}: command round trip p50"),
            micros(figures.round_trip),
            micros(native.round_trip),
            dur_ratio(figures.round_trip, native.round_trip),
        ]);
    }
    rows.extend(ten_rows(fixture)?);
    Ok(rows)
}

/// How long idle processes are watched for wake-ups.
const IDLE_WATCH: Duration = Duration::from_secs(3);

/// Ten copies of the example as zot holds them: the RSS of their processes,
/// ten relays and the shared host against ten native builds; and how often
/// they wake up while all of them wait for zot.
fn ten_rows(fixture: &Fixture) -> Result<Vec<[String; 4]>> {
    let zotbox = Path::new(env!("CARGO_BIN_EXE_zotbox"));
    let home = fixture.home.root();
    let dir = fixture.example_dir.as_path();
    let start_ten = |program: &Path, args: &[&str], env: &[(&str, &Path)]| {
        (0..10)
            .map(|_| ZotChild::start(program, args, dir, env).map(|(child, _)| child))
            .collect::<Result<Vec<_>>>()
    };
    let natives = start_ten(&fixture.example_native, &[], &[])?;
    let relay = Path::new(env!("CARGO_BIN_EXE_zotbox-relay"));
    let relays = start_ten(relay, &[], &[("ZOT_HOME", home)])?;
    std::thread::sleep(Duration::from_millis(300));
    let native_kib: u64 = natives.iter().map(ZotChild::rss_kib).sum();
    let relay_kib: u64 = relays.iter().map(ZotChild::rss_kib).sum();
    // Without it, its memory and wake-ups would read as none.
    let host = shared_host_pid(zotbox, home).ok_or("the ten relays have no shared host")?;
    let host_kib = rss_kib(host);
    // Wake-ups per second while all twenty (ten each way) wait for zot.
    let switches = |children: &[ZotChild]| -> u64 {
        children
            .iter()
            .map(|c| context_switches(c.child.id()))
            .sum()
    };
    let sample = || {
        (
            switches(&natives),
            switches(&relays) + context_switches(host),
        )
    };
    let before = sample();
    std::thread::sleep(IDLE_WATCH);
    let after = sample();
    let per_second = |from: u64, to: u64| to.saturating_sub(from) as f64 / IDLE_WATCH.as_secs_f64();
    let native_wakes = per_second(before.0, after.0);
    let zotbox_wakes = per_second(before.1, after.1);
    for child in natives.into_iter().chain(relays) {
        child.stop();
    }
    let mib = |kib: u64| kib as f64 / 1024.0;
    Ok(vec![
        [
            "ten idle extensions under zot: wake-ups per second (relays + shared host)".to_owned(),
            format!("{zotbox_wakes:.1}"),
            format!("{native_wakes:.1}"),
            ratio(zotbox_wakes, native_wakes),
        ],
        [
            "ten extensions under zot: RSS of their processes (relays + shared host)".to_owned(),
            format!(
                "{:.1} MiB ({:.1} + {:.1})",
                mib(relay_kib + host_kib),
                mib(relay_kib),
                mib(host_kib)
            ),
            format!("{:.1} MiB", mib(native_kib)),
            ratio((relay_kib + host_kib) as f64, native_kib as f64),
        ],
    ])
}

/// The pid of the shared host of `home`, from `zotbox host status`.
fn shared_host_pid(zotbox: &Path, home: &Path) -> Option<u32> {
    let output = std::process::Command::new(zotbox)
        .args(["host", "status", "--json"])
        .env("ZOT_HOME", home)
        .output()
        .ok()?;
    let line: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    line["host"]["pid"]
        .as_u64()
        .and_then(|pid| u32::try_from(pid).ok())
}

// ---------------------------------------------------------------------------
// Guest languages

/// Writes `<base>/<name>/` with a copy of `wasm` and a manifest naming it.
fn language_guest(
    base: &Path,
    language: &'static str,
    name: &str,
    wasm: &Path,
    tool: &'static str,
    args: serde_json::Value,
) -> Result<LanguageGuest> {
    let dir = base.join("languages").join(name);
    std::fs::create_dir_all(&dir)?;
    let file = dir.join(format!("{name}.wasm"));
    std::fs::copy(wasm, &file)?;
    std::fs::write(
        dir.join("extension.json"),
        json!({"name": name, "wasm": format!("./{name}.wasm")}).to_string(),
    )?;
    Ok(LanguageGuest {
        language,
        manifest: Manifest::load(&dir.join("extension.json"))?,
        wasm: file,
        tool,
        args,
    })
}

/// Builds the examples in C, Go, Python and JavaScript with the builders
/// `zotbox ext build` uses: each is ready, or skipped with the reason.
fn language_guests(base: &Path) -> Vec<std::result::Result<LanguageGuest, (&'static str, String)>> {
    let root = workspace_root();
    let examples = root.join("examples");
    let out = root.join("target/bench-guests/languages");
    let output = |name: &str| out.join(name).join(format!("{name}.wasm"));
    type Build = Box<dyn Fn() -> std::result::Result<PathBuf, ToolchainError>>;
    let builds: Vec<(
        &'static str,
        &'static str,
        &'static str,
        serde_json::Value,
        Build,
    )> = vec![
        (
            "C",
            "c-shout",
            "shout",
            json!({"text": "ping"}),
            Box::new({
                let mut build = MakeBuild::guest(&examples.join("c-shout"), "c-shout");
                build.output = output("c-shout");
                move || build.run()
            }),
        ),
        (
            "Go",
            "go-notes",
            "go_weather",
            json!({"city": "Berlin"}),
            Box::new({
                let mut build = GoBuild::guest(&examples.join("go-notes"), "go-notes");
                build.output = output("go-notes");
                move || build.run()
            }),
        ),
        (
            "Python",
            "py-hello",
            "py_greet",
            json!({"name": "Ada"}),
            Box::new({
                let mut build = PyBuild::guest(&examples.join("py-hello"), "py-hello");
                build.output = output("py-hello");
                move || build.run()
            }),
        ),
        (
            "JavaScript",
            "js-notes",
            "js_weather",
            json!({"city": "Oslo"}),
            Box::new({
                let mut build = JsBuild::guest(&examples.join("js-notes"), "js-notes");
                build.output = output("js-notes");
                // Where CI installs it, when it is not on PATH.
                let checkout = root.join("target/js-toolchain/node_modules/.bin/componentize-js");
                if find_program(&build.tool).is_none() && checkout.is_file() {
                    build.tool = checkout;
                }
                move || build.run()
            }),
        ),
    ];
    builds
        .into_iter()
        .map(|(language, name, tool, args, build)| {
            eprintln!("building the {language} example `{name}`…");
            let wasm = match build() {
                Ok(wasm) => wasm,
                Err(ToolchainError::Missing { tool, install, .. }) => {
                    return Err((language, format!("skipped: no `{tool}` (`{install}`)")));
                }
                Err(err) => return Err((language, format!("skipped: {err}"))),
            };
            language_guest(base, language, name, &wasm, tool, args)
                .map_err(|err| (language, format!("skipped: {err}")))
        })
        .collect()
}

/// What one language's example measures.
struct LanguageFigures {
    compile: Duration,
    start: Duration,
    cached: Duration,
    round_trip: Duration,
}

async fn language_figures(
    home: &ZotHome,
    guest: &LanguageGuest,
    scale: &Scale,
) -> Result<LanguageFigures> {
    let name = guest.manifest.name().to_owned();
    let cache = home.cache_dir();
    let begun = Instant::now();
    WasmRuntime::new(Some(cache.clone()))?.prepare(&name, &guest.wasm)?;
    let compile = begun.elapsed();
    let mut loads = Vec::new();
    for _ in 0..scale.starts.min(10) {
        let runtime = WasmRuntime::new(Some(cache.clone()))?;
        let begun = Instant::now();
        runtime.prepare(&name, &guest.wasm)?;
        loads.push(begun.elapsed());
    }
    let launcher = Launcher::new(home.clone());
    let ready = start_to_ready(&launcher, &guest.manifest, scale).await?;
    let session = start(&launcher, &guest.manifest).await?;
    let (tool, args, calls) = (guest.tool, guest.args.clone(), scale.calls / 3);
    let (round_trip, _) =
        tokio::spawn(async move { measure_round_trips_of(session, tool, args, calls, 200).await })
            .await??;
    Ok(LanguageFigures {
        compile,
        start: ready,
        cached: percentile(&mut loads, 50.0),
        round_trip,
    })
}

/// The rows of every language, the Rust example's figure beside each.
async fn language_rows(fixture: &Fixture, scale: &Scale) -> Result<Vec<[String; 4]>> {
    let home = ZotHome::new(fixture.tmp.path().join("languages-home"));
    let rust = language_figures(&home, &fixture.rust_example, scale).await?;
    let mut rows = Vec::new();
    for guest in language_guests(fixture.tmp.path()) {
        let guest = match guest {
            Ok(guest) => guest,
            Err((language, why)) => {
                rows.push([format!("{language} example"), why, "-".into(), "-".into()]);
                continue;
            }
        };
        eprintln!("the {} example…", guest.language);
        let figures = language_figures(&home, &guest, scale).await?;
        let label = format!(
            "{} (`{}`, {} KiB) vs Rust (`{RUST_EXAMPLE}`)",
            guest.language,
            guest.manifest.name(),
            std::fs::metadata(&guest.wasm)?.len() / 1024
        );
        for (what, figure, rust, unit) in [
            (
                "first compile (no cache)",
                figures.compile,
                rust.compile,
                "ms",
            ),
            ("start to ready (median)", figures.start, rust.start, "ms"),
            (
                "cached start: load from the disk cache (median)",
                figures.cached,
                rust.cached,
                "ms",
            ),
            (
                &format!("tool round trip p50 (`{}`)", guest.tool),
                figures.round_trip,
                rust.round_trip,
                "µs",
            ),
        ] {
            let show = if unit == "ms" { millis } else { micros };
            rows.push([
                format!("{label}: {what}"),
                show(figure),
                show(rust),
                dur_ratio(figure, rust),
            ]);
        }
    }
    Ok(rows)
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn millis(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn ratio(a: f64, b: f64) -> String {
    if b == 0.0 {
        "-".to_owned()
    } else {
        format!("{:.2}×", a / b)
    }
}

fn dur_ratio(a: Duration, b: Duration) -> String {
    ratio(a.as_secs_f64(), b.as_secs_f64())
}

fn main() -> Result<()> {
    let scale = Scale::from_env();
    let fixture = fixture()?;
    // Two workers, as on the machines this is written for; override to see
    // what cross-thread wake-ups cost (`ZOTBOX_BENCH_WORKERS=1`).
    let workers = std::env::var("ZOTBOX_BENCH_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(2);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?;
    // `ZOTBOX_BENCH_PROFILE=1`: only wasm round trips, long enough for a
    // profiler; `=native`, only the native transport's.
    if let Some(which) = std::env::var_os("ZOTBOX_BENCH_PROFILE") {
        let (name, extension) = if which == "native" {
            ("native", &fixture.native)
        } else {
            ("wasm", &fixture.wasm)
        };
        return runtime.block_on(async {
            let launcher = Launcher::new(fixture.home.clone());
            let long = Scale {
                calls: 200_000,
                ..Scale::from_env()
            };
            let (p50, p99) = round_trips(&launcher, extension, &long).await?;
            println!("{name} round trip p50 {} p99 {}", micros(p50), micros(p99));
            Ok(())
        });
    }
    // `ZOTBOX_BENCH_LOADS=N`: only N loads of the example from the disk
    // cache, each by a new runtime, for a profiler.
    if let Some(loads) = std::env::var("ZOTBOX_BENCH_LOADS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
    {
        println!(
            "load from the disk cache, `{EXAMPLE}`: median {}",
            millis(example_loads(&fixture, loads.max(1))?)
        );
        return Ok(());
    }
    // `ZOTBOX_BENCH_ZOT=1`: only the rows of the path zot users take, to
    // compare a change to the relay or the shared host in a few minutes.
    if std::env::var_os("ZOTBOX_BENCH_ZOT").is_some() {
        // The example in the disk cache, as the whole report's earlier rows
        // leave it: the shared host loads it rather than compiling it (a
        // compile would stay in the host's RSS).
        cached_example(&fixture)?;
        let mut rows = zot_rows_then_stop(&fixture, &scale)?;
        rows.push(binary_size_row()?);
        print_table(rows);
        return Ok(());
    }
    // `ZOTBOX_BENCH_IDLE=1`: only the idle-memory rows, then where the
    // memory of 100 extra wasm extensions lies.
    if std::env::var_os("ZOTBOX_BENCH_IDLE").is_some() {
        return runtime.block_on(async {
            let launcher = Launcher::new(fixture.home.clone());
            for count in [1, 10, 100] {
                let wasm = idle_rss(&launcher, &fixture.wasm, count).await?;
                println!("RSS per extra idle wasm extension, {count} loaded: {wasm} KiB");
            }
            print_idle_mappings(&launcher, &fixture.wasm, 100).await
        });
    }
    // `ZOTBOX_BENCH_FS=1`: only the fs jail's rows.
    if std::env::var_os("ZOTBOX_BENCH_FS").is_some() {
        let rows = runtime.block_on(fs_rows(fixture.tmp.path(), &scale))?;
        print_table(rows);
        return Ok(());
    }
    // `ZOTBOX_BENCH_SHELL=1`: only the confined shell's rows.
    if std::env::var_os("ZOTBOX_BENCH_SHELL").is_some() {
        let rows = runtime.block_on(shell_rows(fixture.tmp.path(), &scale))?;
        print_table(rows);
        return Ok(());
    }
    if std::env::var_os("ZOTBOX_BENCH_GUARD").is_some() {
        let rows = runtime.block_on(guard_rows(fixture.tmp.path(), &scale))?;
        print_table(rows);
        return Ok(());
    }
    let ping_pong = pipe_ping_pong(scale.calls)?;
    // `ZOTBOX_BENCH_ROUND_TRIPS=1`: only the round-trip rows, to compare a
    // change to the session path in a minute rather than a whole report.
    if std::env::var_os("ZOTBOX_BENCH_ROUND_TRIPS").is_some() {
        return runtime.block_on(async {
            let launcher = Launcher::new(fixture.home.clone());
            let (wasm, _) = round_trips(&launcher, &fixture.wasm, &scale).await?;
            let (native, _) = round_trips(&launcher, &fixture.native, &scale).await?;
            println!(
                "tool round trip p50: wasm {}, native {}; bare pipe {} (native {})",
                micros(wasm),
                micros(native),
                micros(ping_pong),
                dur_ratio(native, ping_pong)
            );
            Ok(())
        });
    }
    let mut rows = runtime.block_on(async {
        let mut rows: Vec<[String; 4]> = Vec::new();
        let mut row = |name: &str, wasm: String, native: String, ratio: String| {
            rows.push([name.to_owned(), wasm, native, ratio]);
        };
        // First compile, with an empty cache; then a load from the disk cache.
        let cache = fixture.home.cache_dir();
        let _ = std::fs::remove_dir_all(&cache);
        let fresh = WasmRuntime::new(Some(cache.clone()))?;
        let begun = Instant::now();
        fresh.prepare(GUEST, &fixture.wasm_file)?;
        let compile = begun.elapsed();
        let cached = WasmRuntime::new(Some(cache.clone()))?;
        let begun = Instant::now();
        cached.prepare(GUEST, &fixture.wasm_file)?;
        let disk_load = begun.elapsed();
        let example_load = example_loads(&fixture, scale.starts)?;

        let launcher = Launcher::new(fixture.home.clone());
        eprintln!("start to ready…");
        let wasm_start = start_to_ready(&launcher, &fixture.wasm, &scale).await?;
        let native_start = start_to_ready(&launcher, &fixture.native, &scale).await?;
        row(
            "start to ready (median)",
            millis(wasm_start),
            millis(native_start),
            dur_ratio(wasm_start, native_start),
        );
        row(
            "first compile (no cache)",
            millis(compile),
            "-".into(),
            "-".into(),
        );
        row(
            "load from the disk cache",
            millis(disk_load),
            "-".into(),
            "-".into(),
        );
        row(
            &format!("load from the disk cache, example `{EXAMPLE}` (median)"),
            millis(example_load),
            "-".into(),
            "-".into(),
        );

        eprintln!("round trips…");
        let (wasm_p50, wasm_p99) = round_trips(&launcher, &fixture.wasm, &scale).await?;
        let (native_p50, native_p99) = round_trips(&launcher, &fixture.native, &scale).await?;
        row(
            "tool round trip p50",
            micros(wasm_p50),
            micros(native_p50),
            dur_ratio(wasm_p50, native_p50),
        );
        row(
            "tool round trip p99",
            micros(wasm_p99),
            micros(native_p99),
            dur_ratio(wasm_p99, native_p99),
        );
        row(
            "bare pipe ping-pong, two processes (native p50 vs it)",
            "-".into(),
            micros(ping_pong),
            dur_ratio(native_p50, ping_pong),
        );

        eprintln!("throughput…");
        let wasm_fps = throughput(&launcher, &fixture.wasm, &scale).await?;
        let native_fps = throughput(&launcher, &fixture.native, &scale).await?;
        row(
            "10 extensions called concurrently",
            format!("{:.0} frames/s", wasm_fps),
            format!("{:.0} frames/s", native_fps),
            ratio(wasm_fps, native_fps),
        );

        eprintln!("idle memory…");
        for count in [1, 10, 100] {
            let wasm = idle_rss(&launcher, &fixture.wasm, count).await?;
            let native = idle_rss(&launcher, &fixture.native, count).await?;
            row(
                &format!("RSS per extra idle extension, {count} loaded"),
                format!("{wasm} KiB"),
                format!("{native} KiB"),
                ratio(wasm as f64, native as f64),
            );
        }

        let base = fixture.tmp.path();
        for [name, figure, other, ratio] in guard_rows(base, &scale).await? {
            row(&name, figure, other, ratio);
        }

        eprintln!("data tools…");
        let data = data_tools(base, &scale).await?;
        row(
            "data `read` tool, 1 MiB file (vs std::fs::read)",
            micros(data.read_tool),
            micros(data.read_direct),
            dur_ratio(data.read_tool, data.read_direct),
        );
        row(
            "data `http` tool, loopback HTTPS (vs reqwest)",
            micros(data.http_tool),
            micros(data.http_direct),
            dur_ratio(data.http_tool, data.http_direct),
        );

        eprintln!("fs jail…");
        rows.extend(fs_rows(base, &scale).await?);
        eprintln!("confined shell…");
        rows.extend(shell_rows(base, &scale).await?);
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(rows)
    })?;
    eprintln!("the path zot users take…");
    rows.extend(zot_rows_then_stop(&fixture, &scale)?);
    eprintln!("guest languages…");
    rows.extend(runtime.block_on(language_rows(&fixture, &scale))?);
    rows.push(binary_size_row()?);
    print_table(rows);
    Ok(())
}

/// The `zotbox` program as this report built it (the release profile:
/// stripped), against #11's ceiling of 30 MB.
fn binary_size_row() -> Result<[String; 4]> {
    let bytes = std::fs::metadata(env!("CARGO_BIN_EXE_zotbox"))?.len();
    Ok([
        "the `zotbox` program (release, stripped), against the 30 MB ceiling".to_owned(),
        format!("{:.2} MB ({bytes} bytes)", bytes as f64 / 1e6),
        "30 MB".to_owned(),
        ratio(bytes as f64, 30e6),
    ])
}

/// The example guest compiled into the disk cache (once); its wasm file.
fn cached_example(fixture: &Fixture) -> Result<PathBuf> {
    let wasm = fixture.example_dir.join(format!("{EXAMPLE}.wasm"));
    WasmRuntime::new(Some(fixture.home.cache_dir()))?.prepare(EXAMPLE, &wasm)?;
    Ok(wasm)
}

/// The median of `loads` loads of the example from the disk cache, each
/// by a new runtime (as each `zotbox run` is).
fn example_loads(fixture: &Fixture, loads: usize) -> Result<Duration> {
    let wasm = cached_example(fixture)?;
    let mut took = Vec::with_capacity(loads);
    for _ in 0..loads {
        let runtime = WasmRuntime::new(Some(fixture.home.cache_dir()))?;
        let begun = Instant::now();
        runtime.prepare(EXAMPLE, &wasm)?;
        took.push(begun.elapsed());
    }
    Ok(percentile(&mut took, 50.0))
}

fn print_table(rows: Vec<[String; 4]>) {
    println!("\n| measure | zotbox (wasm) | native / direct | ratio |\n|---|---:|---:|---:|");
    for [name, wasm, native, ratio] in rows {
        println!("| {name} | {wasm} | {native} | {ratio} |");
    }
}

/// [`zot_rows`], then the shared host they started is stopped.
fn zot_rows_then_stop(fixture: &Fixture, scale: &Scale) -> Result<Vec<[String; 4]>> {
    let rows = zot_rows(fixture, scale);
    let _ = std::process::Command::new(env!("CARGO_BIN_EXE_zotbox"))
        .args(["host", "stop"])
        .env("ZOT_HOME", fixture.home.root())
        .output();
    rows
}
