//! Host events: what extensions say on their own, and what happens to them.

use std::sync::Arc;

use serde::Serialize;
use zotbox_protocol::PanelRender;

/// Something a caller of the host may want to show or react to.
///
/// Subscribe with [`Host::subscribe`](crate::Host::subscribe). Delivery never
/// blocks an extension: a subscriber that falls behind loses the oldest events.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum HostEvent {
    /// An extension pushed a one-shot note.
    Notify {
        /// The extension.
        extension: Arc<str>,
        /// `info`, `warn`, `error` or `success`.
        level: String,
        /// The note.
        message: String,
    },
    /// An extension retracted its notes.
    ClearNotes {
        /// The extension.
        extension: Arc<str>,
    },
    /// An extension drew a panel.
    PanelRender {
        /// The extension.
        extension: Arc<str>,
        /// The panel's contents.
        panel: PanelRender,
    },
    /// An extension closed a panel.
    PanelClose {
        /// The extension.
        extension: Arc<str>,
        /// Which panel.
        panel_id: String,
    },
    /// An extension finished registration (at start or after a restart).
    Ready {
        /// The extension.
        extension: Arc<str>,
    },
    /// An extension's session ended; its commands and tools are withdrawn.
    Exited {
        /// The extension.
        extension: Arc<str>,
        /// Why it ended.
        reason: String,
    },
    /// An extension will be restarted after a delay.
    Restarting {
        /// The extension.
        extension: Arc<str>,
        /// Restarts so far in the current window, this one included.
        attempt: u32,
        /// The back-off before the restart, in ms.
        delay_ms: u64,
    },
    /// A wasm program is being compiled for the first time (it is cached
    /// after that). Compiling can take seconds; a caller may say so.
    Compiling {
        /// The extension.
        extension: Arc<str>,
        /// Size of the wasm program, bytes.
        bytes: u64,
    },
    /// A first compile finished (successfully or not: a failure follows as
    /// the start's error).
    Compiled {
        /// The extension.
        extension: Arc<str>,
        /// How long it took, ms.
        took_ms: u64,
    },
    /// An extension failed for good and stays stopped until reload.
    Failed {
        /// The extension.
        extension: Arc<str>,
        /// Why.
        reason: String,
    },
}
