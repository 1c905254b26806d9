//! `hello`: slash commands answering with each action zot knows.
//!
//! `/hello NAME` asks the model to greet; `/hello-insert` drops text into the
//! editor; `/hello-display` shows a note; `/hello-noop` does nothing visible;
//! `/hello-fail` answers with an error.

use zotbox_guest::{Extension, Response};

fn main() -> std::io::Result<()> {
    // Name and version as extension.json says, read at build time.
    Extension::from_manifest(zotbox_guest::manifest!())
        .command("hello", "ask the model to greet someone", |_ctx, args| {
            let who = if args.trim().is_empty() {
                "the user"
            } else {
                args.trim()
            };
            Response::prompt(format!("Say hello to {who} in one short sentence."))
        })
        .command(
            "hello-insert",
            "insert a greeting into the editor",
            |_ctx, _args| Response::insert("Hello from a sandboxed extension!"),
        )
        .command(
            "hello-display",
            "show a greeting as a note",
            |_ctx, args| {
                Response::display(format!(
                    "hello, {}",
                    if args.is_empty() { "world" } else { args }
                ))
            },
        )
        .command("hello-noop", "do nothing visible", |_ctx, _args| {
            Response::noop()
        })
        .command("hello-fail", "answer with an error", |_ctx, args| {
            Response::error(format!("cannot greet `{args}`: no such person"))
        })
        .run()
}
