//! The handshake: `hello`, `hello_ack`, registrations, `ready`; and the
//! frames an extension may send at any time, bounded before they reach the
//! host's event bus.

mod registrar;

use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};
use tokio::time::{Instant, timeout};
use zotbox_protocol::{ExtensionFrame, HelloAck, HostFrame, PanelRender, encode_to_vec};

use super::{Outgoing, Registration, SessionConfig, SessionError};
use crate::event::HostEvent;
pub(crate) use registrar::Registrar;
pub use registrar::RegistrationLimits;

/// The longest note (`notify` message) passed on, bytes.
pub const MAX_NOTE_BYTES: usize = 4096;
/// The most text one `panel_render` passes on (title, lines, footer), bytes.
pub const MAX_PANEL_BYTES: usize = 64 * 1024;
/// The most lines one `panel_render` passes on.
const MAX_PANEL_LINES: usize = 500;
/// The longest panel line, title, footer or id passed on, bytes.
const MAX_PANEL_LINE_BYTES: usize = 1024;
/// The longest note level passed on, bytes.
const MAX_LEVEL_BYTES: usize = 16;

pub(super) enum HandshakeFailure {
    Error(SessionError),
    Ended,
}

pub(super) async fn handshake(
    name: &Arc<str>,
    hello_ack: HelloAck,
    config: &SessionConfig,
    reader: &mut super::ExtensionReader,
    unreadable: &mut super::UnreadableLines,
    outgoing: &mpsc::Sender<Outgoing>,
    events: &broadcast::Sender<HostEvent>,
) -> Result<Registration, HandshakeFailure> {
    let started = Instant::now();
    let no_hello = || {
        HandshakeFailure::Error(SessionError::NoHello {
            name: name.to_string(),
            after: config.hello_timeout,
        })
    };
    let hello = loop {
        let remaining = config.hello_timeout.saturating_sub(started.elapsed());
        // A reader that always has a line ready is polled before the
        // timer: a deadline passed is checked here, or an extension that
        // writes lines without end would never be timed out.
        if remaining.is_zero() {
            return Err(no_hello());
        }
        match timeout(remaining, reader.next()).await {
            Err(_) => return Err(no_hello()),
            Ok(None) => return Err(HandshakeFailure::Ended),
            Ok(Some(Ok(ExtensionFrame::Hello(hello)))) => break hello,
            Ok(Some(Ok(other))) => {
                return Err(HandshakeFailure::Error(SessionError::NotHello {
                    name: name.to_string(),
                    found: other.frame_type(),
                }));
            }
            // Stray output before hello is reported and skipped.
            Ok(Some(Err(err))) => unreadable.report(name, &err),
        }
    };
    if let Ok(line) = encode_to_vec(&HostFrame::HelloAck(hello_ack)) {
        let _ = outgoing.send(Outgoing::Line(line)).await;
    }
    let mut registrar = Registrar::new(name, &config.registrations, hello);
    let registration_deadline = Instant::now() + config.hello_timeout;
    let registration_timeout = || {
        HandshakeFailure::Error(SessionError::RegistrationTimeout {
            name: name.to_string(),
            after: config.hello_timeout,
        })
    };
    loop {
        let now = Instant::now();
        // As above: lines that keep coming must not outlast the deadline.
        if now >= registration_deadline {
            return Err(registration_timeout());
        }
        let idle = now + config.ready_idle;
        let frame =
            match tokio::time::timeout_at(idle.min(registration_deadline), reader.next()).await {
                // Silence: zot's idle watchdog treats this as ready.
                Err(_) if idle <= registration_deadline => break,
                // Frames kept coming until the deadline.
                Err(_) => return Err(registration_timeout()),
                Ok(None) => return Err(HandshakeFailure::Ended),
                Ok(Some(Err(err))) => {
                    unreadable.report(name, &err);
                    continue;
                }
                Ok(Some(Ok(frame))) => frame,
            };
        match frame {
            ExtensionFrame::Ready(_) => {
                registrar.ready();
                break;
            }
            ExtensionFrame::RegisterCommand(command) => {
                registrar.command(command);
            }
            ExtensionFrame::RegisterTool(tool) => {
                registrar.tool(tool);
            }
            ExtensionFrame::Subscribe(subscribe) => {
                registrar.subscribe(subscribe);
            }
            other => publish_unsolicited(name, other, events),
        }
    }
    Ok(registrar.finish())
}

/// Frames an extension may send at any time; anything else outside the
/// handshake is logged and dropped. What is published is cut to a bounded
/// size ([`MAX_NOTE_BYTES`], [`MAX_PANEL_BYTES`]): the event bus keeps a
/// backlog of events for slow subscribers, and a guest must not fill it
/// with frames of 4 MiB each.
pub(super) fn publish_unsolicited(
    name: &Arc<str>,
    frame: ExtensionFrame,
    events: &broadcast::Sender<HostEvent>,
) {
    let event = match frame {
        ExtensionFrame::Notify(notify) => HostEvent::Notify {
            extension: name.clone(),
            level: cut(notify.level, MAX_LEVEL_BYTES),
            message: cut(notify.message, MAX_NOTE_BYTES),
        },
        ExtensionFrame::ClearNotes(_) => HostEvent::ClearNotes {
            extension: name.clone(),
        },
        ExtensionFrame::PanelRender(panel) => HostEvent::PanelRender {
            extension: name.clone(),
            panel: bounded_panel(panel),
        },
        ExtensionFrame::PanelClose(close) => HostEvent::PanelClose {
            extension: name.clone(),
            panel_id: cut(close.panel_id, MAX_PANEL_LINE_BYTES),
        },
        ExtensionFrame::ShutdownAck(_) => return,
        other => {
            tracing::warn!(
                "extension `{name}`: unexpected `{}` ignored",
                other.frame_type()
            );
            return;
        }
    };
    // No subscriber is fine: events are advisory.
    let _ = events.send(event);
}

/// A panel cut to [`MAX_PANEL_LINES`] lines and [`MAX_PANEL_BYTES`] of text,
/// each line to [`MAX_PANEL_LINE_BYTES`]; a last line says what was left out.
fn bounded_panel(panel: PanelRender) -> PanelRender {
    let panel_id = cut(panel.panel_id, MAX_PANEL_LINE_BYTES);
    let title = panel.title.map(|t| cut(t, MAX_PANEL_LINE_BYTES));
    let footer = panel.footer.map(|f| cut(f, MAX_PANEL_LINE_BYTES));
    let mut budget = MAX_PANEL_BYTES
        .saturating_sub(title.as_ref().map_or(0, String::len))
        .saturating_sub(footer.as_ref().map_or(0, String::len));
    let total = panel.lines.len();
    let mut lines = Vec::with_capacity(total.min(MAX_PANEL_LINES));
    for line in panel.lines {
        let line = cut(line, MAX_PANEL_LINE_BYTES);
        if lines.len() >= MAX_PANEL_LINES || line.len() > budget {
            break;
        }
        budget -= line.len();
        lines.push(line);
    }
    if lines.len() < total {
        lines.push(format!("[{} more lines not shown]", total - lines.len()));
    }
    PanelRender {
        panel_id,
        title,
        lines,
        footer,
    }
}

/// `text` cut to at most `max` bytes at a character boundary, ending in `…`
/// when it was cut.
fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_and_panels_reach_the_event_bus_cut_to_size() {
        let (events, mut seen) = broadcast::channel(8);
        let name: Arc<str> = Arc::from("hostile");
        let huge = "x".repeat(4 * 1024 * 1024);
        publish_unsolicited(
            &name,
            ExtensionFrame::Notify(zotbox_protocol::Notify {
                level: huge.clone(),
                message: huge.clone(),
            }),
            &events,
        );
        publish_unsolicited(
            &name,
            ExtensionFrame::PanelRender(PanelRender {
                panel_id: "p".to_owned(),
                title: Some(huge.clone()),
                lines: vec!["y".repeat(2000); 10_000],
                footer: None,
            }),
            &events,
        );
        let Ok(HostEvent::Notify { level, message, .. }) = seen.try_recv() else {
            panic!("no note");
        };
        assert_eq!(level, format!("{}…", "x".repeat(MAX_LEVEL_BYTES)));
        assert_eq!(message, format!("{}…", "x".repeat(MAX_NOTE_BYTES)));
        let Ok(HostEvent::PanelRender { panel, .. }) = seen.try_recv() else {
            panic!("no panel");
        };
        let text: usize = panel.lines.iter().map(String::len).sum::<usize>()
            + panel.title.as_ref().map_or(0, String::len);
        // The budget, plus the line that says what was left out.
        assert!(text <= MAX_PANEL_BYTES + 64, "{text} bytes");
        assert_eq!(
            panel.lines.last().map(String::as_str),
            Some("[9938 more lines not shown]")
        );
        assert_eq!(
            panel.lines[0],
            format!("{}…", "y".repeat(MAX_PANEL_LINE_BYTES))
        );
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        // (text, max bytes, what is kept)
        let cases = [
            ("short", 16, "short"),
            ("ééé", 3, "é…"),
            ("ééé", 4, "éé…"),
            ("abc", 0, "…"),
        ];
        for (text, max, expected) in cases {
            assert_eq!(cut(text.to_owned(), max), expected, "{text} {max}");
        }
    }
}
