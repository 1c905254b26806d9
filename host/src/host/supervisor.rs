//! One task per extension: start it, watch it, restart it within the policy.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use super::Host;
use super::launch::LaunchError;
use super::registry::{ExtensionState, SlotHandle};
use crate::event::HostEvent;
use crate::runtime::Exit;
use crate::session::{Closed, Session};
use crate::store::trust::Assessment;

/// When an extension that stopped unexpectedly is started again.
///
/// Defaults: at most 3 restarts within 60 s, the first after 200 ms, each
/// next back-off doubled up to 5 s. Past that the extension stays failed
/// until the host reloads. A wasm guest killed for computing past its
/// budget without reading its input ([`Exit::OverCompute`]) is not
/// restarted whatever the policy: it would spin again, and one that spins
/// longer than the window would be restarted for good.
#[derive(Debug, Clone)]
pub struct RestartPolicy {
    /// Restarts allowed within `window`; 0 never restarts.
    pub max_restarts: u32,
    /// The sliding window restarts are counted in.
    pub window: Duration,
    /// The back-off before the first restart.
    pub initial_backoff: Duration,
    /// The longest back-off.
    pub max_backoff: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self {
            max_restarts: 3,
            window: Duration::from_secs(60),
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
        }
    }
}

impl RestartPolicy {
    /// A policy that never restarts.
    pub fn never() -> Self {
        Self {
            max_restarts: 0,
            ..Self::default()
        }
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }
}

/// Why one start attempt failed.
enum StartFailure {
    /// Retrying cannot help (the program does not exist).
    Permanent(String),
    /// It may work next time (it crashed during the handshake).
    Transient(String),
    /// It is its workspace's, and not the content trust hashed.
    Untrusted(String),
    /// The host stopped while it was starting; it was killed.
    Stopped,
}

pub(super) async fn supervise(
    host: Host,
    slot: SlotHandle,
    mut stop: watch::Receiver<bool>,
    started: oneshot::Sender<()>,
) {
    let name = slot.manifest.name().to_owned();
    let policy = host.inner.settings.restart.clone();
    let mut started = Some(started);
    let mut recent: VecDeque<Instant> = VecDeque::new();
    let mut first = true;
    loop {
        if *stop.borrow() {
            break;
        }
        // A workspace's extension starts only as the content its trust
        // hashed: the first start as the host's start found it; a restart
        // runs the files as they are now, so it checks again (an edit since
        // revokes trust).
        let trust = if !slot.workspace {
            None
        } else if std::mem::take(&mut first) {
            Some(host.workspace_assessment())
        } else {
            let now = host.workspace_assessment_now();
            if let Some(reason) = now.refusal() {
                untrusted(&host, &slot, &name, "restarted", reason);
                break;
            }
            Some(Arc::new(now))
        };
        let attempt = start_once(&host, &slot, &stop, trust.as_deref()).await;
        let reason = match attempt {
            Ok(session) => {
                if !host.registry().install(slot.id, session.clone()) {
                    // The host is stopping or reloaded meanwhile.
                    session.shutdown().await;
                    break;
                }
                let _ = host.inner.events.send(HostEvent::Ready {
                    extension: session.name().clone(),
                });
                if let Some(started) = started.take() {
                    let _ = started.send(());
                }
                let closed = tokio::select! {
                    closed = session.closed() => closed,
                    _ = stop.wait_for(|stopping| *stopping) => break,
                };
                if closed == Closed::ShutDown {
                    break;
                }
                let reason = closed.to_string();
                tracing::warn!("{}: {reason}", session.label());
                host.registry().withdraw(slot.id, reason.clone());
                let _ = host.inner.events.send(HostEvent::Exited {
                    extension: session.name().clone(),
                    reason: reason.clone(),
                });
                // Restarted, it would compute as long again: a restart
                // window shorter than its budget would never fill, and it
                // would take a core for good.
                if matches!(closed, Closed::Exited(Exit::OverCompute { .. })) {
                    fail(
                        &host,
                        &slot,
                        &name,
                        format!("{reason}; not restarted: it would do the same again"),
                    );
                    break;
                }
                reason
            }
            Err(StartFailure::Stopped) => break,
            Err(StartFailure::Untrusted(reason)) => {
                untrusted(&host, &slot, &name, "started", reason);
                break;
            }
            Err(StartFailure::Permanent(reason)) => {
                fail(&host, &slot, &name, reason);
                break;
            }
            Err(StartFailure::Transient(reason)) => {
                tracing::warn!("{reason}");
                reason
            }
        };
        let now = Instant::now();
        while recent
            .front()
            .is_some_and(|at| now.duration_since(*at) > policy.window)
        {
            recent.pop_front();
        }
        if recent.len() >= policy.max_restarts as usize {
            let reason = if policy.max_restarts == 0 {
                reason
            } else {
                format!(
                    "{reason}; gave up after {} restarts within {}s",
                    policy.max_restarts,
                    policy.window.as_secs()
                )
            };
            fail(&host, &slot, &name, reason);
            break;
        }
        recent.push_back(now);
        let attempt = u32::try_from(recent.len()).unwrap_or(u32::MAX);
        let delay = policy.backoff(attempt);
        if !host
            .registry()
            .set_state(slot.id, ExtensionState::Restarting, Some(reason))
        {
            break;
        }
        host.registry().count_restart(slot.id);
        // The first attempt's outcome is recorded: `build` may return now.
        if let Some(started) = started.take() {
            let _ = started.send(());
        }
        let _ = host.inner.events.send(HostEvent::Restarting {
            extension: name.as_str().into(),
            attempt,
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        });
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = stop.wait_for(|stopping| *stopping) => break,
        }
    }
    if let Some(started) = started.take() {
        let _ = started.send(());
    }
}

/// Holds a workspace's extension its trust does not cover (any more).
fn untrusted(host: &Host, slot: &SlotHandle, name: &str, not: &str, reason: String) {
    tracing::warn!("extension `{name}` not {not}: it {reason}");
    host.registry()
        .set_state(slot.id, ExtensionState::Untrusted, Some(reason));
}

fn fail(host: &Host, slot: &SlotHandle, name: &str, reason: String) {
    tracing::warn!("extension `{name}` failed: {reason}");
    if host
        .registry()
        .set_state(slot.id, ExtensionState::Failed, Some(reason.clone()))
    {
        let _ = host.inner.events.send(HostEvent::Failed {
            extension: name.into(),
            reason,
        });
    }
}

async fn start_once(
    host: &Host,
    slot: &SlotHandle,
    stop: &watch::Receiver<bool>,
    trust: Option<&Assessment>,
) -> Result<Session, StartFailure> {
    let manifest = &slot.manifest;
    // The launch step `zotbox run` takes too: trusted, built, locked, allowed.
    let admitted = host.admit(manifest, trust).map_err(|err| match err {
        LaunchError::Untrusted(err) => StartFailure::Untrusted(err.to_string()),
        err => StartFailure::Permanent(err.to_string()),
    })?;
    let transport = host
        .inner
        .launcher
        .start_expecting(
            manifest,
            admitted.guest,
            admitted.sandbox,
            admitted.wasm_sha256,
        )
        .await
        .map_err(|err| StartFailure::Permanent(format!("cannot start: {err}")))?;
    let control = transport.control.clone();
    let mut config = host.session_config(manifest);
    config.registrations.events = admitted.events;
    let handshake = Session::start(
        manifest.name(),
        host.hello_ack(manifest),
        config,
        transport,
        host.inner.events.clone(),
    );
    // A shutdown must not wait out a handshake, nor leave its process behind.
    let mut stop = stop.clone();
    tokio::select! {
        started = handshake => started.map_err(|err| {
            // A cold `cargo run` misses the deadline: say so.
            let hint = match &err {
                crate::session::SessionError::NoHello { .. } => manifest.hello_hint(),
                _ => None,
            };
            StartFailure::Transient(match hint {
                Some(hint) => format!("{err}; {hint}"),
                None => err.to_string(),
            })
        }),
        _ = stop.wait_for(|stopping| *stopping) => {
            control.kill();
            Err(StartFailure::Stopped)
        }
    }
}
