//! Limits that hold in total (THREATS.md rule 6): no guest grows the host's
//! memory or disk with its call rate, however it spreads what it asks for.
//!
//! Each test is an attack as a hostile guest would make it, at the size it
//! was first reported at: many linear memories, a flood of refused calls
//! with huge subjects, a flood of huge registrations, and names a terminal
//! would act on. Each asserts the exact refusal and a bound on the host's
//! resident memory that the unbounded host broke by a factor of four or
//! more (the bounds leave room for the other tests running beside).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use wasm_encoder::{
    CodeSection, ExportKind, ExportSection, Function, FunctionSection, Instruction, MemoryType,
    Module, RefType, TableSection, TableType, TypeSection,
};
use zotbox::host::{ExtensionState, RestartPolicy};

use crate::guests::{self, Form};
use crate::support::{
    Lab, alone, bounded, host_over, info, peak_rss_growth_mib, settled, tool_names, write_json,
};

const MIB: u64 = 1024 * 1024;
/// Bytes in a wasm page.
const PAGE: u64 = 64 * 1024;

/// One linear memory of a hand-made core module: its initial size and how
/// far `_start` grows it, in pages. `_start` then writes every byte of it,
/// so whatever the host let it have is resident.
#[derive(Debug, Clone, Copy)]
struct Memory {
    initial: u64,
    grow: u32,
}

/// A WASI core module with `memories`, and a table of `table` elements
/// when given, whose `_start` grows each memory in turn (trapping when a
/// growth is refused) and fills it.
fn core_module(memories: &[Memory], table: Option<u64>) -> Vec<u8> {
    let mut types = TypeSection::new();
    types.ty().function([], []);
    let mut functions = FunctionSection::new();
    functions.function(0);
    let mut tables = TableSection::new();
    if let Some(elements) = table {
        tables.table(TableType {
            element_type: RefType::FUNCREF,
            table64: false,
            minimum: elements,
            maximum: None,
            shared: false,
        });
    }
    let mut memory_section = wasm_encoder::MemorySection::new();
    let mut body = Function::new([]);
    for (index, memory) in memories.iter().enumerate() {
        let index = u32::try_from(index).expect("index");
        memory_section.memory(MemoryType {
            minimum: memory.initial,
            maximum: None,
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
        if memory.grow > 0 {
            body.instruction(&Instruction::I32Const(memory.grow as i32))
                .instruction(&Instruction::MemoryGrow(index))
                .instruction(&Instruction::I32Const(-1))
                .instruction(&Instruction::I32Eq)
                .instruction(&Instruction::If(wasm_encoder::BlockType::Empty))
                .instruction(&Instruction::Unreachable)
                .instruction(&Instruction::End);
        }
        let bytes = (memory.initial + u64::from(memory.grow)) * PAGE;
        body.instruction(&Instruction::I32Const(0))
            .instruction(&Instruction::I32Const(1))
            .instruction(&Instruction::I32Const(i32::try_from(bytes).expect("size")))
            .instruction(&Instruction::MemoryFill(index));
    }
    body.instruction(&Instruction::End);
    let mut exports = ExportSection::new();
    exports.export("_start", ExportKind::Func, 0);
    let mut code = CodeSection::new();
    code.function(&body);
    let mut module = Module::new();
    module.section(&types).section(&functions);
    if table.is_some() {
        module.section(&tables);
    }
    module
        .section(&memory_section)
        .section(&exports)
        .section(&code);
    module.finish()
}

/// Writes `<lab.dev>/<name>/` holding `wasm` under `memory_mb: 64`.
fn module_folder(lab: &Lab, name: &str, wasm: &[u8]) -> PathBuf {
    let built = lab.dev.join(format!("{name}.built.wasm"));
    std::fs::write(&built, wasm).expect("write the module");
    guests::wasm_folder(&lab.dev, name, &built, Some(json!({"memory_mb": 64})))
}

/// The `wasm` file of an extension folder, as the host names it.
fn wasm_of(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.wasm"))
}

// ---------------------------------------------------------------------------
// Memory

/// The reported attack: 40 memories of 62.5 MiB each under `memory_mb: 64`
/// (2.6 GB resident when each memory had a limit of its own). Refused as it
/// loads, naming the cap, before any memory exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_with_forty_memories_is_refused_at_load_naming_the_cap() {
    if !alone("limits::a_module_with_forty_memories_is_refused_at_load_naming_the_cap") {
        return;
    }
    let lab = Lab::new();
    let wasm = core_module(
        &[Memory {
            initial: 1000,
            grow: 0,
        }; 40],
        None,
    );
    let dir = module_folder(&lab, "mem40", &wasm);
    let (entry, grown) = peak_rss_growth_mib(async {
        let host = host_over(&lab, std::slice::from_ref(&dir), RestartPolicy::never()).await;
        let entry = settled(&host, "mem40").await;
        host.shutdown().await;
        entry
    })
    .await;
    assert_eq!(entry.state, ExtensionState::Failed, "{entry:#?}");
    assert_eq!(
        entry.reason.as_deref(),
        Some(
            format!(
                "cannot start: cannot load `{}`: it defines 40 linear memories; \
                 a guest may have at most 16 (its `memory_mb` covers all of them together)",
                wasm_of(&dir, "mem40").display()
            )
            .as_str()
        )
    );
    eprintln!("the host grew by {grown} MiB");
    assert!(grown < 256, "the host grew by {grown} MiB");
}

/// Memories and tables spread so that each stays under the limit: the
/// total is what counts, and the guest's end names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memories_and_tables_are_held_to_one_limit_together() {
    if !alone("limits::memories_and_tables_are_held_to_one_limit_together") {
        return;
    }
    let out_of_memory = |name: &str| {
        format!(
            "extension `{name}` ended before it was ready: \
             ran out of memory (limit 64 MiB across all memories and tables)"
        )
    };
    let one_page = Memory {
        initial: 1,
        grow: 999,
    };
    // (name, module, why it ended, the most it may have grown the host, MiB)
    let cases: Vec<(&str, Vec<u8>, String, u64)> = vec![
        // 16 memories (the most a guest may have), each grown to 62.5 MiB in
        // turn and written: the second growth is refused (1 GB otherwise).
        (
            "grow16",
            core_module(&[one_page; 16], None),
            out_of_memory("grow16"),
            256,
        ),
        // Two memories of 40 MiB at instantiation: the second is refused.
        (
            "two40",
            core_module(
                &[Memory {
                    initial: 640,
                    grow: 0,
                }; 2],
                None,
            ),
            out_of_memory("two40"),
            256,
        ),
        // A table of ten million elements (80 MB) beside a small memory.
        (
            "table80",
            core_module(
                &[Memory {
                    initial: 16,
                    grow: 0,
                }],
                Some(10_000_000),
            ),
            out_of_memory("table80"),
            256,
        ),
        // Control: two memories of 20 MiB, written in full, fit in 64 MiB
        // (the module has no protocol: it just ends).
        (
            "two20",
            core_module(
                &[Memory {
                    initial: 1,
                    grow: 319,
                }; 2],
                None,
            ),
            "extension `two20` ended before it was ready: exited with status 0".to_owned(),
            256,
        ),
    ];
    for (name, wasm, expected, bound) in cases {
        let lab = Lab::new();
        let dir = module_folder(&lab, name, &wasm);
        let (entry, grown) = peak_rss_growth_mib(async {
            let host = host_over(&lab, &[dir], RestartPolicy::never()).await;
            let entry = settled(&host, name).await;
            host.shutdown().await;
            entry
        })
        .await;
        assert_eq!(entry.state, ExtensionState::Failed, "{name}: {entry:#?}");
        assert_eq!(entry.reason.as_deref(), Some(expected.as_str()), "{name}");
        eprintln!("{name}: the host grew by {grown} MiB");
        assert!(grown < bound, "{name}: the host grew by {grown} MiB");
    }
}

/// A manifest may ask for 4096 MiB; without a policy's `max_memory_mb`
/// the guest gets zotbox's built-in ceiling (1024 MiB): in the shared host
/// one guest's memory is every session's risk. The module grows its memory
/// to 1100 MiB and writes all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_asking_for_4_gib_gets_the_built_in_ceiling_without_a_policy() {
    if !alone("limits::a_manifest_asking_for_4_gib_gets_the_built_in_ceiling_without_a_policy") {
        return;
    }
    let lab = Lab::new();
    let built = lab.dev.join("big.built.wasm");
    let wasm = core_module(
        &[Memory {
            initial: 1,
            grow: 17_599,
        }],
        None,
    );
    std::fs::write(&built, wasm).expect("write the module");
    let dir = guests::wasm_folder(&lab.dev, "big", &built, Some(json!({"memory_mb": 4096})));
    let (entry, grown) = peak_rss_growth_mib(async {
        let host = host_over(&lab, &[dir], RestartPolicy::never()).await;
        let entry = settled(&host, "big").await;
        host.shutdown().await;
        entry
    })
    .await;
    assert_eq!(
        entry.reason.as_deref(),
        Some(
            "extension `big` ended before it was ready: \
             ran out of memory (limit 1024 MiB across all memories and tables)"
        ),
        "{entry:#?}"
    );
    eprintln!("the host grew by {grown} MiB");
    assert!(grown < 256, "the host grew by {grown} MiB");
}

// ---------------------------------------------------------------------------
// Audit

/// The reported attack: a guest with no capabilities stats a 1 MiB path
/// 3 000 times (a 3.1 GB audit log in 12 s, and 1 GB of queue). Every
/// refusal is still recorded, its subject cut to 1 KiB with the length it
/// had; the log stays a few MiB and the host's memory bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_thousand_refused_stats_of_a_1_mib_path_leave_a_small_audit_log() {
    if !alone("limits::three_thousand_refused_stats_of_a_1_mib_path_leave_a_small_audit_log") {
        return;
    }
    const CALLS: usize = 3000;
    let lab = Lab::new();
    let dir = guests::folder(
        &lab.dev,
        "hostile",
        Form::Wasm,
        Some(json!({"tool_timeout_ms": 300_000})),
    );
    let (answer, grown) = peak_rss_growth_mib(async {
        let host = host_over(&lab, &[dir], RestartPolicy::never()).await;
        let answer = tokio::time::timeout(
            Duration::from_secs(300),
            host.call_tool("stat_flood", json!({"count": CALLS, "len": MIB})),
        )
        .await
        .expect("the flood within 5 minutes")
        .expect("the flood's answer");
        host.shutdown().await;
        answer
    })
    .await;
    assert_eq!(answer.text(), format!("{CALLS} refused"));
    eprintln!("the host grew by {grown} MiB");
    assert!(grown < 256, "the host grew by {grown} MiB");

    let log = lab.home.join("logs/audit.jsonl");
    let size = std::fs::metadata(&log).expect("the audit log").len();
    assert!(size < 16 * MIB, "the audit log is {size} bytes");
    let text = std::fs::read_to_string(&log).expect("the audit log");
    let (mut recorded, mut dropped) = (0, 0);
    for line in text.lines() {
        let record: Value = serde_json::from_str(line).expect("a JSON line");
        match (record["extension"].as_str(), record["capability"].as_str()) {
            (Some("hostile"), Some("fs-read")) => {
                recorded += 1;
                assert_eq!(record["decision"], "deny", "{line:.300}");
                assert_eq!(record["subject_len"], MIB, "{line:.300}");
                let subject = record["subject"].as_str().unwrap_or_default();
                assert_eq!(subject, format!("{}…", "a".repeat(1024)));
            }
            (Some("hostile"), Some("audit")) => {
                // Dropped when the queue was full, suppressed past the
                // extension's share of the log (2 MiB in 30 s).
                let subject = record["subject"].as_str().unwrap_or_default();
                let count = subject
                    .strip_suffix(" records dropped")
                    .or_else(|| subject.strip_suffix(" records suppressed"))
                    .expect(subject);
                dropped += count.parse::<usize>().expect("a count");
            }
            _ => {}
        }
    }
    assert_eq!(
        recorded + dropped,
        CALLS,
        "{recorded} recorded, {dropped} dropped or suppressed"
    );
    assert!(size < 3 * MIB, "the audit log is {size} bytes");
}

// ---------------------------------------------------------------------------
// Registrations

/// A hostile guest folder that starts in registration mode `name`.
fn registering(lab: &Lab, name: &str) -> PathBuf {
    let artifact = guests::guests().artifact("hostile", Form::Wasm);
    guests::wasm_folder(&lab.dev, name, artifact, Some(json!({"memory_mb": 32})))
}

/// A host over `dir` whose registration window neither closes on a pause
/// between two frames of 1 MiB (a loaded machine) nor ends before a flood
/// of 1.2 GB has been read in a debug build. Twice the call timeout is the
/// guest's compute budget between two reads of its input too, and the
/// guest writes (and the host decodes, on the guest's task) the whole
/// flood before it first reads: that takes more than 10 s in a debug build.
async fn patient_host(lab: &Lab, dir: &Path) -> zotbox::Host {
    let session = zotbox::SessionConfig {
        hello_timeout: Duration::from_secs(120),
        ready_idle: Duration::from_secs(10),
        call_timeout: Duration::from_secs(120),
        ..zotbox::SessionConfig::default()
    };
    let builder = lab
        .builder()
        .session_config(session)
        .restart_policy(RestartPolicy::never())
        .extension(dir);
    tokio::time::timeout(Duration::from_secs(180), builder.build())
        .await
        .expect("the host within 3 minutes")
        .expect("build")
}

/// The reported attack: a guest limited to 32 MiB registers 1 200 tools
/// with 1 MiB descriptions (1.27 GB held for the host's life). Each is
/// refused for its description; 32 refusals are listed and the rest
/// counted; the guest runs on; the host's memory stays bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_hundred_tools_with_1_mib_descriptions_are_refused_and_not_held() {
    if !alone("limits::twelve_hundred_tools_with_1_mib_descriptions_are_refused_and_not_held") {
        return;
    }
    let lab = Lab::new();
    let name = "hostile-register-1200-1048576";
    let dir = registering(&lab, name);
    let ((entry, tools), grown) = peak_rss_growth_mib(async {
        let host = patient_host(&lab, &dir).await;
        let entry = info(&host, name);
        let tools = tool_names(&host);
        host.shutdown().await;
        (entry, tools)
    })
    .await;
    assert_eq!(entry.state, ExtensionState::Ready, "{entry:#?}");
    assert!(tools.iter().all(|t| !t.starts_with("flood_")), "{tools:?}");
    let mut expected: Vec<String> = (0..32)
        .map(|i| {
            format!(
                "tool `flood_{i}` refused: its description is 1048576 bytes, \
                 over the cap (`max_description_bytes` 4096)"
            )
        })
        .collect();
    expected.push("1168 more registrations refused (only the first 32 are listed)".to_owned());
    assert_eq!(entry.warnings, expected);
    eprintln!("the host grew by {grown} MiB");
    assert!(grown < 256, "the host grew by {grown} MiB");
}

/// Past the count cap (256, or lower where a policy says so), every further
/// registration is refused naming the cap, and the first ones stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_past_the_count_cap_are_refused_and_a_policy_lowers_the_cap() {
    // (user policy, tools kept, the first refusal)
    let cases = [
        (
            None,
            256,
            "tool `flood_256` refused: 256 tools and commands registered already, \
             the most an extension may (`max_registrations` 256)",
        ),
        (
            Some(json!({"max_registrations": 10, "max_description_bytes": 100000})),
            10,
            "tool `flood_10` refused: 10 tools and commands registered already, \
             the most an extension may (`max_registrations` 10)",
        ),
    ];
    for (policy, kept, first) in cases {
        let lab = Lab::new();
        if let Some(policy) = &policy {
            write_json(&lab.home.join("policy.json"), policy);
        }
        let name = "hostile-register-300-100";
        let dir = registering(&lab, name);
        let host = patient_host(&lab, &dir).await;
        let entry = info(&host, name);
        let tools = tool_names(&host);
        host.shutdown().await;
        assert_eq!(entry.state, ExtensionState::Ready, "{entry:#?}");
        let flood: Vec<&String> = tools.iter().filter(|t| t.starts_with("flood_")).collect();
        assert_eq!(flood.len(), kept, "{policy:?}");
        assert_eq!(entry.warnings.first().map(String::as_str), Some(first));
        let refused = 300 - kept;
        let unlisted = refused.saturating_sub(32);
        assert_eq!(
            entry.warnings.last().cloned(),
            Some(format!(
                "{unlisted} more registrations refused (only the first 32 are listed)"
            )),
            "{policy:?}"
        );
    }
}

/// Names that clear the screen, set the terminal title or forge a row are
/// refused at load; `zotbox list` (the real binary) shows them escaped in
/// its warnings and holds no escape character or carriage return, and the
/// guest's plain tools work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_a_terminal_would_act_on_are_refused_and_list_stays_plain() {
    let lab = Lab::new();
    let name = "hostile-evil-names";
    let artifact = guests::guests().artifact("hostile", Form::Wasm);
    guests::wasm_folder(&lab.user_dir(), name, artifact, None);

    let run = lab.zotbox(&["list"]);
    run.expect_code(0);
    for stream in [&run.stdout, &run.stderr] {
        assert!(
            !stream.contains(['\u{1b}', '\r', '\u{7}']),
            "a control character reached the terminal:\n{stream:?}"
        );
    }
    for (kind, shown) in [
        ("tool", "\\u{1b}[2Jevil"),
        ("tool", "a\\u{d}\\u{a}b"),
        ("tool", "\\u{1b}]0;pwned\\u{7}"),
        ("command", "\\u{1b}[2Jevil"),
        ("command", "a\\u{d}\\u{a}b"),
        ("command", "\\u{1b}]0;pwned\\u{7}"),
    ] {
        let warning = format!(
            "{name}: warning: {kind} `{shown}` refused: its name holds control or invisible characters"
        );
        assert!(
            run.stdout.lines().any(|line| line == warning),
            "no `{warning}` in:\n{}",
            run.stdout
        );
    }

    let host = host_over(&lab, &[lab.user_dir().join(name)], RestartPolicy::never()).await;
    let tools = tool_names(&host);
    assert!(tools.contains(&"echo".to_owned()), "{tools:?}");
    assert!(
        tools.iter().all(|t| !t.contains(char::is_control)),
        "{tools:?}"
    );
    let echo = bounded("echo", host.call_tool("echo", json!({"text": "plain"})))
        .await
        .expect("echo");
    assert_eq!(echo.text(), "plain");
    host.shutdown().await;
}

/// The compiler's memory is the program author's to ask for: a first
/// compile runs in a child process capped at the policy's
/// `max_compile_memory_mb`, and a program it cannot compile within that is
/// refused where it is compiled (never compiled uncapped instead), with
/// nothing left in the cache; an ordinary guest compiles under the same
/// cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compile_past_the_policys_memory_cap_is_refused() {
    let lab = Lab::new();
    write_json(
        &lab.home.join("policy.json"),
        &json!({"max_compile_memory_mb": 512}),
    );
    let squares = guests::squares_folder(&lab.dev);
    let cap = "without a verdict; it may use at most 512 MiB (policy `max_compile_memory_mb`)";
    let refused = |stderr: &str| {
        let line = stderr
            .lines()
            .find(|line| line.contains("cannot compile"))
            .unwrap_or_else(|| panic!("no refusal in: {stderr}"));
        assert!(line.contains("the compiler process "), "{line}");
        assert!(line.ends_with(cap), "{line}");
    };
    let path = squares.display().to_string();

    // `zotbox run --standalone` (the shared host's own compiles:
    // `shared_host::a_compile_cap_written_while_the_host_runs_holds_for_its_next_compile`).
    let run = crate::support::zotbox_bounded(&lab, &["run", "--standalone", &path]);
    run.expect_code(1);
    refused(&run.stderr);
    // The library's host, as `zotbox call` builds it.
    let call = crate::support::zotbox_bounded(&lab, &["--ext", &path, "call", "any", "{}"]);
    call.expect_code(1);
    refused(&call.stderr);
    assert_eq!(
        crate::support::cache_entries(&lab.home),
        Vec::<PathBuf>::new()
    );

    // The example guest compiles within the same cap, in the same child.
    let hello = guests::folder(&lab.dev, "hello", Form::Wasm, None);
    let run = crate::support::zotbox_bounded(
        &lab,
        &["run", "--standalone", &hello.display().to_string()],
    );
    assert!(!run.stderr.contains("cannot compile"), "{run:?}");
    assert_eq!(crate::support::cache_entries(&lab.home).len(), 1, "{run:?}");
}
