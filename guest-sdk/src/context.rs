//! What a handler may do besides answering: notes, panels, logs, host facts.

use std::fmt;
use std::io::{self, Write};

use zotbox_protocol::{
    ClearNotes, ExtensionFrame, HelloAck, Notify, PanelClose, PanelRender, encode_frame,
};

use crate::response::Panel;

/// How a [`Context::notify`] note is styled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Level {
    /// Neutral information.
    Info,
    /// Something the user should look at.
    Warn,
    /// Something failed.
    Error,
    /// Something worked.
    Success,
}

impl Level {
    /// The wire name of the level.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
            Self::Success => "success",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The handle every handler receives.
///
/// Frames sent through it (notes, panels) are written and flushed at once, in
/// order with the answers, so a note sent by a tool handler reaches the host
/// before the tool's result.
///
/// Its methods do not return errors: if the host has gone away, the first
/// failed write is remembered, later writes are skipped, and the run loop
/// returns that error as soon as the handler returns.
pub struct Context<'a> {
    name: String,
    writer: &'a mut dyn Write,
    log: &'a mut dyn Write,
    hello_ack: Option<HelloAck>,
    failed: Option<io::Error>,
    line: Vec<u8>,
}

impl fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("name", &self.name)
            .field("hello_ack", &self.hello_ack)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl<'a> Context<'a> {
    pub(crate) fn new(name: String, writer: &'a mut dyn Write, log: &'a mut dyn Write) -> Self {
        Self {
            name,
            writer,
            log,
            hello_ack: None,
            failed: None,
            line: Vec::with_capacity(256),
        }
    }

    /// The extension's name, as sent in `hello`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host's `hello_ack`: workspace (`cwd`), `extension_dir`,
    /// `data_dir`, `zot_version`, `provider` and `model`.
    ///
    /// `None` until the host has sent it. Hosts send it right after `hello`,
    /// before any request, so handlers normally see it.
    pub fn hello_ack(&self) -> Option<&HelloAck> {
        self.hello_ack.as_ref()
    }

    /// Shows a one-shot note to the user; it clears with the next prompt.
    pub fn notify(&mut self, level: Level, message: impl Into<String>) {
        self.send(&ExtensionFrame::Notify(Notify {
            level: level.as_str().to_owned(),
            message: message.into(),
        }));
    }

    /// Retracts every note this extension has shown.
    pub fn clear_notes(&mut self) {
        self.send(&ExtensionFrame::ClearNotes(ClearNotes {}));
    }

    /// Draws (or redraws) a panel this extension owns. An empty title is
    /// left out of the frame.
    pub fn render_panel(&mut self, panel: Panel) {
        let title = (!panel.title.is_empty()).then_some(panel.title);
        self.send(&ExtensionFrame::PanelRender(PanelRender {
            panel_id: panel.id,
            title,
            lines: panel.lines,
            footer: panel.footer,
        }));
    }

    /// Closes a panel this extension owns.
    pub fn close_panel(&mut self, id: impl Into<String>) {
        self.send(&ExtensionFrame::PanelClose(PanelClose {
            panel_id: id.into(),
        }));
    }

    /// Writes one line to the log (stderr unless
    /// [`Extension::log_to`](crate::Extension::log_to) says otherwise),
    /// prefixed with the extension's name. Never to stdout, which carries
    /// only frames.
    pub fn log(&mut self, message: impl fmt::Display) {
        // A log that cannot be written has nowhere to report that; the
        // protocol must go on regardless.
        let _ = writeln!(self.log, "{}: {message}", self.name);
        let _ = self.log.flush();
    }

    pub(crate) fn set_hello_ack(&mut self, ack: HelloAck) {
        if !ack.cwd.is_empty() {
            let mut workspace = WORKSPACE
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *workspace = Some(std::path::PathBuf::from(&ack.cwd));
        }
        self.hello_ack = Some(ack);
    }

    /// Encodes a frame and writes it as one line, then flushes.
    pub(crate) fn send(&mut self, frame: &ExtensionFrame) {
        if self.failed.is_some() {
            return;
        }
        self.line.clear();
        if let Err(err) = encode_frame(frame, &mut self.line) {
            // The frame types hold nothing serde_json cannot encode; should a
            // user value break that, the frame is dropped, not the session.
            self.log(format_args!(
                "dropped a `{}` frame that could not be encoded: {err}",
                frame.frame_type()
            ));
            return;
        }
        let written = self
            .writer
            .write_all(&self.line)
            .and_then(|()| self.writer.flush());
        if let Err(err) = written {
            self.failed = Some(err);
        }
    }

    /// The first write failure, if any; the run loop ends with it.
    pub(crate) fn check(&mut self) -> io::Result<()> {
        match self.failed.take() {
            Some(err) => Err(io::Error::new(
                err.kind(),
                format!("writing a frame to the host failed: {err}"),
            )),
            None => Ok(()),
        }
    }
}

/// The workspace from the last `hello_ack`, for the native capability calls,
/// which are free functions without a [`Context`].
static WORKSPACE: std::sync::Mutex<Option<std::path::PathBuf>> = std::sync::Mutex::new(None);

/// The workspace root zot named in `hello_ack`, once it has arrived.
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
pub(crate) fn workspace() -> Option<std::path::PathBuf> {
    WORKSPACE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}
