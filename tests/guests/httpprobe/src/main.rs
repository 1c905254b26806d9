//! A test guest that sends an HTTP request through `wasi:http`, as
//! componentize-js components can. zotbox links `wasi:http` and refuses
//! every request: the tool reports the error code the guest saw.

use serde::Deserialize;
use zotbox_guest::{Extension, ToolOutput, schema};

/// The `wasi:http` imports, generated.
#[allow(missing_docs, clippy::all, clippy::pedantic, unsafe_code)]
mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "probe",
        generate_all,
    });
}

use bindings::wasi::http::outgoing_handler;
use bindings::wasi::http::types::{Fields, OutgoingRequest, Scheme};

#[derive(Deserialize)]
struct FetchArg {
    authority: String,
    path: String,
}

/// Sends `GET https://{authority}{path}`; what came back, as text.
fn fetch(args: &FetchArg) -> Result<String, String> {
    let request = OutgoingRequest::new(Fields::new());
    request
        .set_scheme(Some(&Scheme::Https))
        .map_err(|()| "cannot set the scheme".to_owned())?;
    request
        .set_authority(Some(&args.authority))
        .map_err(|()| "cannot set the authority".to_owned())?;
    request
        .set_path_with_query(Some(&args.path))
        .map_err(|()| "cannot set the path".to_owned())?;
    let response = outgoing_handler::handle(request, None)
        .map_err(|code| format!("refused at once: {code:?}"))?;
    response.subscribe().block();
    match response.get() {
        Some(Ok(Ok(answer))) => Ok(format!("status {}", answer.status())),
        Some(Ok(Err(code))) => Err(format!("refused: {code:?}")),
        Some(Err(())) => Err("the response was already taken".to_owned()),
        None => Err("no response after waiting".to_owned()),
    }
}

fn main() -> std::io::Result<()> {
    Extension::new("httpprobe", "0.1.0")
        .tool(
            "fetch",
            "Send an HTTPS GET through wasi:http.",
            schema::object(),
            |_ctx, args: FetchArg| match fetch(&args) {
                Ok(text) => ToolOutput::text(text),
                Err(why) => ToolOutput::error(why),
            },
        )
        .run()
}
