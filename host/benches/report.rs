//! The benchmark report: wasm vs native, same guest source, side by side in one run.
//!
//! `cargo bench -p zotbox --bench report` builds the test guest `hostile`
//! twice (for `wasm32-wasip2` and natively, in release mode), then measures
//! and prints one table:
//!
//! - start to ready: a wasm guest from its prepared artifact vs a native
//!   subprocess; plus the first compile, and a load from the disk cache;
//! - tool-call round trip through the session (`echo`), p50 and p99;
//! - RSS per extra idle extension with 100 loaded.
//!
//! Figures are medians of many runs; the machine's load shows in them, so
//! read ratios, not absolutes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::broadcast;
use zotbox::build::{CargoBuild, GUEST_TARGET};
use zotbox::home::ZotHome;
use zotbox::manifest::Manifest;
use zotbox::protocol::HelloAck;
use zotbox::runtime::Launcher;
use zotbox::runtime::wasm::WasmRuntime;
use zotbox::session::{Session, SessionConfig};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const GUEST: &str = "hostile";
const STARTS: usize = 60;
const CALLS: usize = 20_000;
const IDLE: usize = 100;

struct Fixture {
    _tmp: tempfile::TempDir,
    home: ZotHome,
    wasm: Manifest,
    native: Manifest,
    wasm_file: PathBuf,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixture() -> Result<Fixture> {
    let root = workspace_root();
    let target_dir = root.join("target/bench-guests");
    let build = |target: Option<&str>| CargoBuild {
        manifest_path: root.join("Cargo.toml"),
        packages: vec![format!("zotbox-test-{GUEST}")],
        target: target.map(str::to_owned),
        target_dir: Some(target_dir.clone()),
        verbose: false,
    };
    eprintln!("building `{GUEST}` for {GUEST_TARGET} and natively…");
    let wasm_bin = build(Some(GUEST_TARGET))
        .run()?
        .remove(GUEST)
        .ok_or("no wasm artifact")?;
    let native_bin = build(None)
        .run()?
        .remove(GUEST)
        .ok_or("no native artifact")?;
    let tmp = tempfile::tempdir()?;
    let wasm_dir = tmp.path().join("wasm");
    let native_dir = tmp.path().join("native");
    std::fs::create_dir_all(&wasm_dir)?;
    std::fs::create_dir_all(&native_dir)?;
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
    Ok(Fixture {
        home: ZotHome::new(tmp.path().join("home")),
        wasm: Manifest::load(&wasm_dir.join("extension.json"))?,
        native: Manifest::load(&native_dir.join("extension.json"))?,
        wasm_file,
        _tmp: tmp,
    })
}

async fn start(launcher: &Launcher, manifest: &Manifest) -> Result<Session> {
    let limits = zotbox::runtime::wasm::limits_for(None);
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

fn median(samples: &mut [Duration]) -> Duration {
    percentile(samples, 50.0)
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort_unstable();
    let rank = ((p / 100.0) * (samples.len() - 1) as f64).round() as usize;
    samples[rank.min(samples.len() - 1)]
}

async fn start_to_ready(launcher: &Launcher, manifest: &Manifest) -> Result<Duration> {
    // One start outside the measurement: the wasm artifact gets prepared.
    start(launcher, manifest).await?.shutdown().await;
    let mut samples = Vec::with_capacity(STARTS);
    for _ in 0..STARTS {
        let begun = Instant::now();
        let session = start(launcher, manifest).await?;
        samples.push(begun.elapsed());
        session.kill();
        session.closed().await;
    }
    Ok(median(&mut samples))
}

async fn round_trips(launcher: &Launcher, manifest: &Manifest) -> Result<(Duration, Duration)> {
    let session = start(launcher, manifest).await?;
    let args = json!({"text": "ping"});
    for _ in 0..1000 {
        session.call_tool("echo", args.clone(), None).await?;
    }
    let mut samples = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let begun = Instant::now();
        session.call_tool("echo", args.clone(), None).await?;
        samples.push(begun.elapsed());
    }
    session.shutdown().await;
    Ok((
        percentile(&mut samples, 50.0),
        percentile(&mut samples, 99.0),
    ))
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn children_rss_kib() -> u64 {
    let me = std::process::id();
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{me}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for pid in children.split_whitespace().filter_map(|p| p.parse().ok()) {
            total += rss_kib(pid);
        }
    }
    total
}

/// KiB of resident memory each extra idle extension costs, with `IDLE` loaded.
async fn idle_rss(launcher: &Launcher, manifest: &Manifest) -> Result<u64> {
    // Warm up allocator arenas and the prepared artifact.
    let warm = start(launcher, manifest).await?;
    let before = rss_kib(std::process::id()) + children_rss_kib();
    let mut sessions = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        sessions.push(start(launcher, manifest).await?);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = rss_kib(std::process::id()) + children_rss_kib();
    for session in sessions.into_iter().chain([warm]) {
        session.kill();
        session.closed().await;
    }
    Ok(after.saturating_sub(before) / IDLE as u64)
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

fn main() -> Result<()> {
    let fixture = fixture()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        // First compile, with an empty cache; then a load from the disk cache.
        let cache = fixture.home.cache_dir();
        let _ = std::fs::remove_dir_all(&cache);
        let fresh = WasmRuntime::new(Some(cache.clone()), false)?;
        let begun = Instant::now();
        fresh.prepare(GUEST, &fixture.wasm_file)?;
        let compile = begun.elapsed();
        let cached = WasmRuntime::new(Some(cache), false)?;
        let begun = Instant::now();
        cached.prepare(GUEST, &fixture.wasm_file)?;
        let disk_load = begun.elapsed();

        let launcher = Launcher::new(fixture.home.clone(), false);
        let wasm_start = start_to_ready(&launcher, &fixture.wasm).await?;
        let native_start = start_to_ready(&launcher, &fixture.native).await?;
        let (wasm_p50, wasm_p99) = round_trips(&launcher, &fixture.wasm).await?;
        let (native_p50, native_p99) = round_trips(&launcher, &fixture.native).await?;
        let wasm_rss = idle_rss(&launcher, &fixture.wasm).await?;
        let native_rss = idle_rss(&launcher, &fixture.native).await?;

        let rows = [
            (
                "start to ready (median)",
                millis(wasm_start),
                millis(native_start),
                ratio(wasm_start.as_secs_f64(), native_start.as_secs_f64()),
            ),
            (
                "first compile",
                millis(compile),
                "-".to_owned(),
                "-".to_owned(),
            ),
            (
                "load from disk cache",
                millis(disk_load),
                "-".to_owned(),
                "-".to_owned(),
            ),
            (
                "tool round trip p50",
                micros(wasm_p50),
                micros(native_p50),
                ratio(wasm_p50.as_secs_f64(), native_p50.as_secs_f64()),
            ),
            (
                "tool round trip p99",
                micros(wasm_p99),
                micros(native_p99),
                ratio(wasm_p99.as_secs_f64(), native_p99.as_secs_f64()),
            ),
            (
                "RSS per idle extension (100 loaded)",
                format!("{wasm_rss} KiB"),
                format!("{native_rss} KiB"),
                ratio(wasm_rss as f64, native_rss as f64),
            ),
        ];
        println!("\n| measure | wasm | native | wasm/native |\n|---|---:|---:|---:|");
        for (name, wasm, native, ratio) in rows {
            println!("| {name} | {wasm} | {native} | {ratio} |");
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    })?;
    Ok(())
}
