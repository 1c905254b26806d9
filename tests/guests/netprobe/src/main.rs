//! A test guest that reaches for the network. Built for `wasm32-wasip2` it
//! imports `wasi:sockets`, which zotbox links and refuses: it loads, and each
//! tool reports the error the guest saw (its `std::io::ErrorKind` first).
//! Built natively it connects.

use std::net::ToSocketAddrs;

use serde::Deserialize;
use zotbox_guest::{Extension, ToolOutput, schema};

#[derive(Deserialize)]
struct AddrArg {
    addr: String,
}

#[derive(Deserialize)]
struct HostArg {
    host: String,
}

fn main() -> std::io::Result<()> {
    Extension::new("netprobe", "0.1.0")
        .tool(
            "connect",
            "Open a TCP connection.",
            schema::object(),
            |_ctx, args: AddrArg| match std::net::TcpStream::connect(&args.addr) {
                Ok(_) => ToolOutput::text(format!("connected to {}", args.addr)),
                Err(err) => ToolOutput::error(format!(
                    "cannot connect to {}: {:?}: {err}",
                    args.addr,
                    err.kind()
                )),
            },
        )
        .tool(
            "lookup",
            "Resolve a host name.",
            schema::object(),
            |_ctx, args: HostArg| match (args.host.as_str(), 80).to_socket_addrs() {
                Ok(found) => ToolOutput::text(format!("{} addresses", found.count())),
                Err(err) => ToolOutput::error(format!(
                    "cannot resolve {}: {:?}: {err}",
                    args.host,
                    err.kind()
                )),
            },
        )
        .tool(
            "udp",
            "Bind a UDP socket.",
            schema::object(),
            |_ctx, args: AddrArg| match std::net::UdpSocket::bind(&args.addr) {
                Ok(_) => ToolOutput::text(format!("bound {}", args.addr)),
                Err(err) => ToolOutput::error(format!(
                    "cannot bind {}: {:?}: {err}",
                    args.addr,
                    err.kind()
                )),
            },
        )
        .run()
}
