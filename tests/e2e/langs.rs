//! Guests in other languages and what mainstream toolchains link by default
//! (issue 13): `wasi:sockets` linked and refused, WASI preview 1's stdin as
//! a non-blocking pipe, and the Go example.

use std::net::TcpListener;
use std::path::PathBuf;

use serde_json::{Value, json};
use zotbox::Host;
use zotbox::host::{ExtensionState, RestartPolicy};
use zotbox::protocol::ToolResult;

use crate::attack::audit_lines;
use crate::guests::{self, Form};
use crate::support::{Lab, bounded, info, settled};

/// Starts a host over `folders` that never restarts, once each has settled.
async fn host_over(lab: &Lab, folders: &[PathBuf]) -> Host {
    let mut builder = lab.builder().restart_policy(RestartPolicy::never());
    for folder in folders {
        builder = builder.extension(folder);
    }
    bounded("starting the host", builder.build())
        .await
        .expect("build")
}

async fn tool(host: &Host, name: &str, args: Value) -> ToolResult {
    bounded(&format!("tool {name}"), host.call_tool(name, args.clone()))
        .await
        .unwrap_or_else(|e| panic!("tool {name} {args}: {e}"))
}

/// Asserts a tool result's text and error flag.
fn assert_result(got: &ToolResult, is_error: bool, text: &str) {
    assert_eq!(
        (got.is_error, got.text().as_str()),
        (is_error, text),
        "{got:?}"
    );
}

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
    let host = host_over(&lab, std::slice::from_ref(&dir)).await;
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
    let host = host_over(&native_lab, &[dir]).await;
    assert_eq!(info(&host, "netprobe").state, ExtensionState::Ready);
    let (listener, addr) = idle_listener();
    let connect = tool(&host, "connect", json!({"addr": addr})).await;
    assert_result(&connect, false, &format!("connected to {addr}"));
    listener.set_nonblocking(false).expect("blocking");
    assert!(listener.accept().is_ok(), "the native guest connected");
    host.shutdown().await;
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
    let host = host_over(&lab, &[dir]).await;
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
