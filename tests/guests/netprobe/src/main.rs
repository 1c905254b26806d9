//! A test guest that opens a TCP socket. Built for `wasm32-wasip2` it imports
//! `wasi:sockets`, which zotbox does not link, so it must fail to load.

use serde::Deserialize;
use zotbox_guest::{Extension, ToolOutput, schema};

#[derive(Deserialize)]
struct AddrArg {
    addr: String,
}

fn main() -> std::io::Result<()> {
    Extension::new("netprobe", "0.1.0")
        .tool(
            "connect",
            "Open a TCP connection.",
            schema::object(),
            |_ctx, args: AddrArg| match std::net::TcpStream::connect(&args.addr) {
                Ok(_) => ToolOutput::text(format!("connected to {}", args.addr)),
                Err(err) => ToolOutput::error(format!("cannot connect to {}: {err}", args.addr)),
            },
        )
        .run()
}
