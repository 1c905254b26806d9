//! `scratchpad`: notes kept in memory, as commands and a tool.
//!
//! `/note TEXT` appends a note, `/notes` shows them in a panel, `/clear-notes`
//! empties the pad; the model reads them with the `read_notes` tool and
//! adds one with `add_note`.

use std::cell::RefCell;
use std::rc::Rc;

use serde::Deserialize;
use zotbox_guest::{Extension, JsonSchema, Level, Panel, Response, ToolOutput, schema};

/// `add_note`'s arguments: the tool's schema is derived from this type.
#[derive(Debug, Deserialize, JsonSchema)]
struct AddNote {
    /// the note
    text: String,
}

fn main() -> std::io::Result<()> {
    let notes: Rc<RefCell<Vec<String>>> = Rc::default();
    let (n1, n2, n3, n4, n5) = (
        notes.clone(),
        notes.clone(),
        notes.clone(),
        notes.clone(),
        notes,
    );
    Extension::new("scratchpad", "1.0.0")
        .command("note", "append a note", move |ctx, args| {
            let text = args.trim();
            if text.is_empty() {
                return Response::error("nothing to note: `/note TEXT`");
            }
            n1.borrow_mut().push(text.to_owned());
            ctx.notify(
                Level::Success,
                format!("noted ({} in total)", n1.borrow().len()),
            );
            Response::display(format!("noted: {text}"))
        })
        .command("notes", "show the notes in a panel", move |_ctx, _args| {
            let lines: Vec<String> = n2
                .borrow()
                .iter()
                .enumerate()
                .map(|(i, note)| format!("{}. {note}", i + 1))
                .collect();
            Response::open_panel(
                Panel::new("notes", "Scratchpad")
                    .with_lines(lines)
                    .with_footer("esc to close"),
            )
        })
        .command("clear-notes", "empty the scratchpad", move |_ctx, _args| {
            let count = n3.borrow().len();
            n3.borrow_mut().clear();
            Response::display(format!("cleared {count} notes"))
        })
        .tool(
            "read_notes",
            "Read the user's scratchpad notes.",
            schema::object(),
            move |_ctx, _args: serde::de::IgnoredAny| {
                let notes = n4.borrow();
                if notes.is_empty() {
                    ToolOutput::text("(no notes)")
                } else {
                    ToolOutput::text(notes.join("\n"))
                }
            },
        )
        .typed_tool(
            "add_note",
            "Add a note to the user's scratchpad.",
            move |_ctx, args: AddNote| {
                n5.borrow_mut().push(args.text);
                ToolOutput::text(format!("added; {} notes", n5.borrow().len()))
            },
        )
        .run()
}
