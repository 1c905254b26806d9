//! The network, linked and refused: `wasi:sockets` for components and the
//! `sock_*` calls of WASI preview 1.
//!
//! Mainstream toolchains (Rust's `std::net`, componentize-py,
//! componentize-js) import `wasi:sockets` whether or not the program uses
//! it. A refusal is an answer at use, not a load failure, so every socket
//! interface is linked and every operation that could reach the network
//! fails with `access-denied`.
//!
//! Rules:
//!
//! - **No socket exists.** `create-tcp-socket` and `create-udp-socket`
//!   refuse before an OS socket is made, so no later call (bind, connect,
//!   listen, send) has anything to act on; the guest is refused before it
//!   names an address, and the refusal names the socket kind it asked for.
//! - **No name is resolved.** `resolve-addresses` refuses with the host name
//!   the guest gave as the subject, before any resolver is asked.
//! - **Defence in depth.** The WASI context also says `allow_tcp(false)`,
//!   `allow_udp(false)`, `allow_ip_name_lookup(false)` and an address check
//!   that refuses every address, so wasmtime's own socket code refuses too
//!   should a path around the two functions above ever appear.
//! - **No HTTP request leaves.** `wasi:http/outgoing-handler` and
//!   `wasi:http/types` (componentize-js imports them) are wasmtime-wasi-http's,
//!   with [`RefusedHttp`] as the only way out: every request the guest
//!   sends fails with `HTTP-request-denied`, its URL as the subject, before
//!   any connection is made. zotbox links no HTTP client for it.
//! - **Preview 1** has no way to make a socket; its `sock_accept`,
//!   `sock_recv`, `sock_send` and `sock_shutdown` refuse with `EACCES`
//!   whatever fd they name.
//! - **Every attempt is a `deny` line** in the audit log (capability `net`,
//!   the subject escaped, [`RULE`] as the reason), when the guest has a
//!   sandbox to audit through.

use std::future::Future;
use std::sync::Arc;

use wasmtime::component::{Linker as ComponentLinker, Val};
use wasmtime::{Caller, Linker as ModuleLinker};
use wasmtime_wasi::sockets::WasiSockets;
use wasmtime_wasi::sockets::WasiSocketsView as _;

use super::guest::{ComponentState, ModuleState};
use crate::audit::{AuditRecord, Decision};
use crate::sandbox::Sandbox;

/// The capability a socket use is audited as.
pub(crate) const CAPABILITY: &str = "net";

/// Why every socket use is refused: the rule, and where to go instead.
pub(crate) const RULE: &str = "wasm guests get no network (`wasi:sockets` is linked and refused); \
     use the `zot:host/http` import with an `http` grant instead";

/// The version of `wasi:sockets` wasmtime-wasi links; a guest importing an
/// older 0.2 version is matched to it.
const SOCKETS: &str = "0.2.12";

/// `errno::acces` of WASI preview 1.
const P1_EACCES: i32 = 2;

/// Records a refused socket use of `sandbox`'s guest.
fn audit(sandbox: Option<&Arc<Sandbox>>, subject: &str) {
    match sandbox {
        Some(sandbox) => sandbox.record(AuditRecord::now(
            sandbox.who(),
            CAPABILITY,
            crate::text::shown(subject),
            Decision::Deny,
            RULE,
        )),
        None => tracing::debug!(
            subject = %crate::text::Shown(subject),
            "socket use refused (no sandbox to audit through)"
        ),
    }
}

/// `result<_, error-code>` holding `access-denied`.
fn access_denied() -> Val {
    Val::Result(Err(Some(Box::new(Val::Enum("access-denied".to_owned())))))
}

/// The address family a guest asked for (`ipv4`/`ipv6`), as it gave it.
fn family(params: &[Val]) -> &str {
    match params.first() {
        Some(Val::Enum(family)) => family,
        _ => "unknown family",
    }
}

/// Links every `wasi:sockets` interface; the three that create something
/// refuse (see the module rules), the rest are wasmtime's with a context
/// that allows nothing.
pub(crate) fn add_to_component_linker(
    linker: &mut ComponentLinker<ComponentState>,
) -> wasmtime::Result<()> {
    use wasmtime_wasi::p2::bindings::sockets;

    let l = &mut *linker;
    sockets::network::add_to_linker::<_, WasiSockets>(
        l,
        &sockets::network::LinkOptions::default(),
        ComponentState::sockets,
    )?;
    sockets::instance_network::add_to_linker::<_, WasiSockets>(l, ComponentState::sockets)?;
    sockets::tcp::add_to_linker::<_, WasiSockets>(l, ComponentState::sockets)?;
    sockets::udp::add_to_linker::<_, WasiSockets>(l, ComponentState::sockets)?;
    sockets::ip_name_lookup::add_to_linker::<_, WasiSockets>(l, ComponentState::sockets)?;

    for (interface, function, kind) in [
        ("tcp-create-socket", "create-tcp-socket", "tcp"),
        ("udp-create-socket", "create-udp-socket", "udp"),
    ] {
        linker
            .instance(&format!("wasi:sockets/{interface}@{SOCKETS}"))?
            .func_new(function, move |store, _ty, params, results| {
                let subject = format!("a {kind} socket ({})", family(params));
                audit(store.data().sandbox.as_ref(), &subject);
                if let Some(result) = results.first_mut() {
                    *result = access_denied();
                }
                Ok(())
            })?;
    }

    // wasmtime's `resolve-addresses` gives way to one that refuses; the
    // rest of the interface (its stream resource) stays wasmtime's.
    linker.allow_shadowing(true);
    let defined = linker
        .instance(&format!("wasi:sockets/ip-name-lookup@{SOCKETS}"))?
        .func_new_async("resolve-addresses", |mut store, _ty, params, results| {
            Box::new(async move {
                let name = match params.get(1) {
                    Some(Val::String(name)) => name.as_str(),
                    _ => "",
                };
                audit(store.data().sandbox.as_ref(), name);
                // The network handle is borrowed for the call: end the borrow.
                if let Some(Val::Resource(network)) = params.first() {
                    network.resource_drop_async(&mut store).await?;
                }
                if let Some(result) = results.first_mut() {
                    *result = access_denied();
                }
                Ok(())
            })
        });
    linker.allow_shadowing(false);
    defined
}

/// The `wasi:http` hooks of a guest: every outgoing request is refused.
pub(crate) struct RefusedHttp {
    sandbox: Option<Arc<Sandbox>>,
}

impl RefusedHttp {
    /// Refusals audited through `sandbox`, when there is one.
    pub(crate) fn new(sandbox: Option<Arc<Sandbox>>) -> Self {
        Self { sandbox }
    }
}

/// What `send_request` answers: a response and its I/O driver, or an error.
type SendResult = wasmtime_wasi_http::Result<(
    http::Response<wasmtime_wasi_http::WasiBody>,
    Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
)>;

impl wasmtime_wasi_http::WasiHttpHooks for RefusedHttp {
    fn send_request(
        &mut self,
        request: http::Request<wasmtime_wasi_http::WasiBody>,
        _options: Option<wasmtime_wasi_http::RequestOptions>,
        _fut: Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        audit(self.sandbox.as_ref(), &request.uri().to_string());
        Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) })
    }
}

/// Links `wasi:http/outgoing-handler` and `wasi:http/types`, refused by
/// [`RefusedHttp`].
pub(crate) fn add_http_to_component_linker(
    linker: &mut ComponentLinker<ComponentState>,
) -> wasmtime::Result<()> {
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)
}

/// Replaces WASI preview 1's `sock_*` calls with ones that refuse.
pub(crate) fn add_to_module_linker(linker: &mut ModuleLinker<ModuleState>) -> wasmtime::Result<()> {
    const P1: &str = "wasi_snapshot_preview1";
    fn refuse(caller: &Caller<'_, ModuleState>, call: &str, fd: i32) -> i32 {
        audit(
            caller.data().sandbox.as_ref(),
            &format!("{call} on fd {fd}"),
        );
        P1_EACCES
    }
    linker.allow_shadowing(true);
    let defined = (|| -> wasmtime::Result<()> {
        linker.func_wrap(
            P1,
            "sock_accept",
            |caller: Caller<'_, ModuleState>, fd: i32, _flags: i32, _out: i32| {
                refuse(&caller, "sock_accept", fd)
            },
        )?;
        linker.func_wrap(
            P1,
            "sock_recv",
            |caller: Caller<'_, ModuleState>,
             fd: i32,
             _iovs: i32,
             _iovs_len: i32,
             _flags: i32,
             _out_len: i32,
             _out_flags: i32| { refuse(&caller, "sock_recv", fd) },
        )?;
        linker.func_wrap(
            P1,
            "sock_send",
            |caller: Caller<'_, ModuleState>,
             fd: i32,
             _iovs: i32,
             _iovs_len: i32,
             _flags: i32,
             _out_len: i32| { refuse(&caller, "sock_send", fd) },
        )?;
        linker.func_wrap(
            P1,
            "sock_shutdown",
            |caller: Caller<'_, ModuleState>, fd: i32, _how: i32| {
                refuse(&caller, "sock_shutdown", fd)
            },
        )?;
        Ok(())
    })();
    linker.allow_shadowing(false);
    defined
}
