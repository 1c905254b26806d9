//! The handshake: `hello`, `hello_ack`, registrations, `ready`.

use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};
use tokio::time::{Instant, timeout};
use zotbox_protocol::{
    ExtensionFrame, HelloAck, HostFrame, RegisterCommand, encode_to_vec, event_name,
};

use super::{Outgoing, RegisteredTool, Registration, SessionConfig, SessionError};
use crate::event::HostEvent;

pub(super) enum HandshakeFailure {
    Error(SessionError),
    Ended,
}

pub(super) async fn handshake(
    name: &Arc<str>,
    hello_ack: HelloAck,
    config: &SessionConfig,
    reader: &mut super::ExtensionReader,
    outgoing: &mpsc::Sender<Outgoing>,
    events: &broadcast::Sender<HostEvent>,
) -> Result<Registration, HandshakeFailure> {
    let started = Instant::now();
    let hello = loop {
        let remaining = config.hello_timeout.saturating_sub(started.elapsed());
        match timeout(remaining, reader.next()).await {
            Err(_) => {
                return Err(HandshakeFailure::Error(SessionError::NoHello {
                    name: name.to_string(),
                    after: config.hello_timeout,
                }));
            }
            Ok(None) => return Err(HandshakeFailure::Ended),
            Ok(Some(Ok(ExtensionFrame::Hello(hello)))) => break hello,
            Ok(Some(Ok(other))) => {
                return Err(HandshakeFailure::Error(SessionError::NotHello {
                    name: name.to_string(),
                    found: other.frame_type(),
                }));
            }
            // Stray output before hello is reported and skipped.
            Ok(Some(Err(err))) => tracing::warn!("extension `{name}`: {err}"),
        }
    };
    if let Ok(line) = encode_to_vec(&HostFrame::HelloAck(hello_ack)) {
        let _ = outgoing.send(Outgoing::Line(line)).await;
    }
    let mut registration = Registration {
        hello,
        ..Registration::default()
    };
    let registration_deadline = Instant::now() + config.hello_timeout;
    loop {
        let idle = Instant::now() + config.ready_idle;
        let frame =
            match tokio::time::timeout_at(idle.min(registration_deadline), reader.next()).await {
                // Silence: zot's idle watchdog treats this as ready.
                Err(_) if idle <= registration_deadline => break,
                // Frames kept coming until the deadline.
                Err(_) => {
                    return Err(HandshakeFailure::Error(SessionError::RegistrationTimeout {
                        name: name.to_string(),
                        after: config.hello_timeout,
                    }));
                }
                Ok(None) => return Err(HandshakeFailure::Ended),
                Ok(Some(Err(err))) => {
                    tracing::warn!("extension `{name}`: {err}");
                    continue;
                }
                Ok(Some(Ok(frame))) => frame,
            };
        match frame {
            ExtensionFrame::Ready(_) => {
                registration.sent_ready = true;
                break;
            }
            ExtensionFrame::RegisterCommand(command) => {
                register_command(name, &mut registration, command)
            }
            ExtensionFrame::RegisterTool(tool) => {
                if registration.tools.iter().any(|t| t.name == tool.name) {
                    refuse(
                        name,
                        &mut registration,
                        format!("tool `{}` registered twice", tool.name),
                    );
                    continue;
                }
                match tool.schema_object() {
                    Ok(schema) => registration.tools.push(RegisteredTool {
                        name: tool.name,
                        description: tool.description,
                        schema,
                    }),
                    Err(problem) => refuse(
                        name,
                        &mut registration,
                        format!("tool `{}` refused: {problem}", tool.name),
                    ),
                }
            }
            ExtensionFrame::Subscribe(subscribe) => {
                registration.events.extend(subscribe.events);
                for event in subscribe.intercept {
                    if event_name::INTERCEPTABLE.contains(&event.as_str()) {
                        registration.intercepts.insert(event);
                    } else {
                        refuse(
                            name,
                            &mut registration,
                            format!("`{event}` cannot be intercepted"),
                        );
                    }
                }
            }
            other => publish_unsolicited(name, other, events),
        }
    }
    Ok(registration)
}

fn register_command(name: &str, registration: &mut Registration, command: RegisterCommand) {
    if command.name.trim().is_empty() {
        refuse(
            name,
            registration,
            "a command with an empty name".to_owned(),
        );
    } else if registration.commands.iter().any(|c| c.name == command.name) {
        refuse(
            name,
            registration,
            format!("command `{}` registered twice", command.name),
        );
    } else {
        registration.commands.push(command);
    }
}

fn refuse(name: &str, registration: &mut Registration, why: String) {
    tracing::warn!("extension `{name}`: {why}");
    registration.refused.push(why);
}

/// Frames an extension may send at any time; anything else outside the
/// handshake is logged and dropped.
pub(super) fn publish_unsolicited(
    name: &Arc<str>,
    frame: ExtensionFrame,
    events: &broadcast::Sender<HostEvent>,
) {
    let event = match frame {
        ExtensionFrame::Notify(notify) => HostEvent::Notify {
            extension: name.clone(),
            level: notify.level,
            message: notify.message,
        },
        ExtensionFrame::ClearNotes(_) => HostEvent::ClearNotes {
            extension: name.clone(),
        },
        ExtensionFrame::PanelRender(panel) => HostEvent::PanelRender {
            extension: name.clone(),
            panel,
        },
        ExtensionFrame::PanelClose(close) => HostEvent::PanelClose {
            extension: name.clone(),
            panel_id: close.panel_id,
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
