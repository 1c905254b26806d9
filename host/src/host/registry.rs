//! The registry: every extension slot, its state, and who owns which name.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use super::HostError;
use crate::discovery::{Discovery, Held, Origin, ZotLaunch, is_serve_launcher, zot_launch};
use crate::manifest::Manifest;
use crate::session::Session;

/// Where an extension stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExtensionState {
    /// Being started.
    Starting,
    /// Registered and answering.
    Ready,
    /// Stopped unexpectedly; will be started again after a back-off.
    Restarting,
    /// Stopped for good (until reload); `reason` says why.
    Failed,
    /// `enabled: false` in its manifest.
    Disabled,
    /// Shut down by the host.
    Stopped,
    /// Its manifest could not be loaded.
    Invalid,
    /// Another manifest of the same name took precedence.
    Shadowed,
    /// It comes from a workspace the user has not trusted (or from where
    /// trust does not reach); `reason` says which and what to run.
    Untrusted,
}

impl ExtensionState {
    /// The state as shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Ready => "ready",
            Self::Restarting => "restarting",
            Self::Failed => "failed",
            Self::Disabled => "disabled",
            Self::Stopped => "stopped",
            Self::Invalid => "invalid",
            Self::Shadowed => "shadowed",
            Self::Untrusted => "untrusted",
        }
    }
}

/// One extension as `list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ExtensionInfo {
    /// Its name (for an invalid manifest, the folder name).
    pub name: String,
    /// Its version, from `hello` or the manifest.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// `native`, `wasm`, or empty when unknown.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub kind: &'static str,
    /// `explicit`, `project` or `user`.
    pub origin: &'static str,
    /// The manifest's path.
    pub path: PathBuf,
    /// Where it stands.
    pub state: ExtensionState,
    /// Why it is failed, invalid, restarting or shadowed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Commands it owns.
    pub commands: Vec<String>,
    /// Tools it owns.
    pub tools: Vec<String>,
    /// Events it subscribed to.
    pub events: Vec<String>,
    /// Events it intercepts.
    pub intercepts: Vec<String>,
    /// Its commands and tools that another extension took first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shadowed: Vec<String>,
    /// Registrations refused and manifest warnings.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Restarts since it was loaded.
    pub restarts: u32,
    /// What zot itself starts for this manifest outside any sandbox (its
    /// `exec` and `args`), for the cases a reader could miss: a wasm
    /// extension whose `exec` is not `zotbox run` (zotbox sandboxes it, zot
    /// does not), and any workspace extension zot runs natively.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zot_runs_natively: Option<String>,
    /// When its `hello` names it or its version differently from its
    /// manifest: both, and how to keep one source (`doctor` reports it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hello_mismatch: Option<String>,
}

/// A live command.
#[derive(Debug, Clone, Serialize)]
pub struct CommandInfo {
    /// The command name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// The extension that owns it.
    pub extension: String,
}

/// A live tool.
#[derive(Debug, Clone, Serialize)]
pub struct ToolInfo {
    /// The tool name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// Its JSON Schema.
    pub schema: Value,
    /// The extension that owns it.
    pub extension: String,
}

/// Identifies a slot across reloads: a stale supervisor's updates are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlotId {
    generation: u64,
    index: usize,
}

/// What a supervisor needs to run one slot.
#[derive(Debug, Clone)]
pub(crate) struct SlotHandle {
    pub(crate) id: SlotId,
    pub(crate) manifest: Manifest,
    /// Workspace content: each restart checks the workspace is still trusted.
    pub(crate) workspace: bool,
}

struct Slot {
    manifest: Manifest,
    origin: Origin,
    workspace: bool,
    state: ExtensionState,
    reason: Option<String>,
    session: Option<Session>,
    restarts: u32,
    shadowed_names: Vec<String>,
}

#[derive(Default)]
pub(crate) struct Registry {
    generation: u64,
    stopped: bool,
    slots: Vec<Slot>,
    // Invalid and shadowed manifests, shown after the slots.
    others: Vec<ExtensionInfo>,
    // name → slot index
    commands: BTreeMap<String, usize>,
    tools: BTreeMap<String, usize>,
    calls: u64,
}

impl Registry {
    /// Replaces everything with a fresh discovery; returns the slots to
    /// start. Held manifests become `untrusted` slots, never started;
    /// `workspace_refusal` says why for the workspace's.
    pub(crate) fn reset(
        &mut self,
        discovery: Discovery,
        workspace_refusal: &str,
    ) -> Vec<SlotHandle> {
        self.generation += 1;
        self.stopped = false;
        self.commands.clear();
        self.tools.clear();
        let held = discovery.held.into_iter().map(|(found, held)| Slot {
            state: ExtensionState::Untrusted,
            reason: Some(match held {
                Held::Workspace => workspace_refusal.to_owned(),
                Held::Uncovered => Held::UNCOVERED.to_owned(),
            }),
            manifest: found.manifest,
            origin: found.origin,
            workspace: found.workspace,
            session: None,
            restarts: 0,
            shadowed_names: Vec::new(),
        });
        self.slots = discovery
            .found
            .into_iter()
            .map(|found| Slot {
                // zotbox's own `serve` launcher is for zot: a standalone host
                // serves data tools, plugins and skills itself, and starting
                // it too would register every data tool twice.
                state: if !found.manifest.raw.enabled || is_serve_launcher(&found.manifest) {
                    ExtensionState::Disabled
                } else {
                    ExtensionState::Starting
                },
                reason: is_serve_launcher(&found.manifest).then(|| {
                    "zotbox's own `serve` launcher (for zot); this host serves the data side itself".to_owned()
                }),
                manifest: found.manifest,
                origin: found.origin,
                workspace: found.workspace,
                session: None,
                restarts: 0,
                shadowed_names: Vec::new(),
            })
            .chain(held)
            .collect();
        self.others = discovery
            .failures
            .into_iter()
            .map(|failure| {
                info_without_slot(
                    failure.name(),
                    failure.origin,
                    failure.path,
                    ExtensionState::Invalid,
                    failure.error.to_string(),
                )
            })
            .chain(discovery.shadowed.into_iter().map(|shadowed| {
                let manifest = Manifest::load(&shadowed.path).ok();
                let name = manifest
                    .as_ref()
                    .map(|m| m.raw.name.clone())
                    .unwrap_or_default();
                let reason = format!("shadowed by `{}`", shadowed.by.display());
                let mut info = info_without_slot(
                    name,
                    shadowed.origin,
                    shadowed.path,
                    ExtensionState::Shadowed,
                    reason,
                );
                info.zot_runs_natively = manifest
                    .as_ref()
                    .and_then(|manifest| natively(manifest, shadowed.origin));
                info
            }))
            .collect();
        let generation = self.generation;
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.state == ExtensionState::Starting)
            .map(|(index, slot)| SlotHandle {
                id: SlotId { generation, index },
                manifest: slot.manifest.clone(),
                workspace: slot.workspace,
            })
            .collect()
    }

    fn slot_mut(&mut self, id: SlotId) -> Option<&mut Slot> {
        if id.generation != self.generation || self.stopped {
            return None;
        }
        self.slots.get_mut(id.index)
    }

    /// Records a state change; false when the slot is stale.
    pub(crate) fn set_state(
        &mut self,
        id: SlotId,
        state: ExtensionState,
        reason: Option<String>,
    ) -> bool {
        match self.slot_mut(id) {
            Some(slot) => {
                slot.state = state;
                slot.reason = reason;
                true
            }
            None => false,
        }
    }

    /// Counts a restart.
    pub(crate) fn count_restart(&mut self, id: SlotId) {
        if let Some(slot) = self.slot_mut(id) {
            slot.restarts += 1;
        }
    }

    /// Makes a started session live; false (and nothing changes) when the
    /// slot is stale or the host is stopping.
    pub(crate) fn install(&mut self, id: SlotId, session: Session) -> bool {
        let Some(slot) = self.slot_mut(id) else {
            return false;
        };
        slot.session = Some(session);
        slot.state = ExtensionState::Ready;
        slot.reason = None;
        self.rebuild_names();
        true
    }

    /// Removes a session that ended; its names are withdrawn.
    pub(crate) fn withdraw(&mut self, id: SlotId, reason: String) {
        if let Some(slot) = self.slot_mut(id) {
            slot.session = None;
            slot.reason = Some(reason);
            self.rebuild_names();
        }
    }

    /// Takes every live session out for shutdown; the registry stops
    /// accepting new ones until the next reset.
    pub(crate) fn take_sessions(&mut self) -> Vec<Session> {
        self.stopped = true;
        let mut sessions = Vec::new();
        for slot in &mut self.slots {
            if let Some(session) = slot.session.take() {
                sessions.push(session);
            }
            // Also the ones starting or waiting to restart: their
            // supervisors see the stop and give up.
            if matches!(
                slot.state,
                ExtensionState::Ready | ExtensionState::Starting | ExtensionState::Restarting
            ) {
                slot.state = ExtensionState::Stopped;
            }
        }
        self.commands.clear();
        self.tools.clear();
        sessions
    }

    /// Live sessions in precedence order.
    pub(crate) fn sessions(&self) -> Vec<Session> {
        self.slots
            .iter()
            .filter_map(|slot| slot.session.clone())
            .collect()
    }

    pub(crate) fn command_owner(&self, name: &str) -> Result<Session, HostError> {
        self.commands
            .get(name)
            .and_then(|&index| self.slots[index].session.clone())
            .ok_or_else(|| HostError::UnknownCommand {
                name: name.to_owned(),
                known: self.commands.keys().cloned().collect(),
            })
    }

    pub(crate) fn tool_owner(&self, name: &str) -> Result<Session, HostError> {
        self.tools
            .get(name)
            .and_then(|&index| self.slots[index].session.clone())
            .ok_or_else(|| HostError::UnknownTool {
                name: name.to_owned(),
                known: self.tools.keys().cloned().collect(),
            })
    }

    /// A fresh id for a `tool_call` event.
    pub(crate) fn next_call_id(&mut self) -> String {
        self.calls += 1;
        format!("call-{}", self.calls)
    }

    /// Recomputes name ownership: first come (in precedence order), first served.
    fn rebuild_names(&mut self) {
        let mut commands: BTreeMap<String, usize> = BTreeMap::new();
        let mut tools: BTreeMap<String, usize> = BTreeMap::new();
        for index in 0..self.slots.len() {
            let mut shadowed = Vec::new();
            if let Some(session) = &self.slots[index].session {
                let registration = session.registration();
                for command in &registration.commands {
                    if let Some(&owner) = commands.get(&command.name) {
                        shadowed.push(format!(
                            "command `{}` (owned by `{}`)",
                            command.name,
                            self.slots[owner].manifest.name()
                        ));
                    } else {
                        commands.insert(command.name.clone(), index);
                    }
                }
                for tool in &registration.tools {
                    if let Some(&owner) = tools.get(&tool.name) {
                        shadowed.push(format!(
                            "tool `{}` (owned by `{}`)",
                            tool.name,
                            self.slots[owner].manifest.name()
                        ));
                    } else {
                        tools.insert(tool.name.clone(), index);
                    }
                }
            }
            let slot = &mut self.slots[index];
            for entry in shadowed.iter().filter(|e| !slot.shadowed_names.contains(e)) {
                tracing::warn!("extension `{}`: {entry} is shadowed", slot.manifest.name());
            }
            slot.shadowed_names = shadowed;
        }
        self.commands = commands;
        self.tools = tools;
    }

    pub(crate) fn list(&self) -> Vec<ExtensionInfo> {
        let mut infos: Vec<ExtensionInfo> = self
            .slots
            .iter()
            .enumerate()
            .map(|(index, slot)| {
                let mut info = info_without_slot(
                    slot.manifest.name().to_owned(),
                    slot.origin,
                    slot.manifest.path.clone(),
                    slot.state,
                    slot.reason.clone().unwrap_or_default(),
                );
                info.kind = slot.manifest.kind();
                info.version = slot.manifest.raw.version.clone();
                info.zot_runs_natively = natively(&slot.manifest, slot.origin);
                info.restarts = slot.restarts;
                info.shadowed = slot.shadowed_names.clone();
                info.warnings = slot
                    .manifest
                    .unknown_keys
                    .iter()
                    .map(|key| format!("unknown key `{key}` ignored"))
                    .collect();
                if let Some(session) = &slot.session {
                    let registration = session.registration();
                    if !registration.hello.version.is_empty() {
                        info.version = registration.hello.version.clone();
                    }
                    info.commands = owned(&self.commands, index);
                    info.tools = owned(&self.tools, index);
                    info.events = registration.events.iter().cloned().collect();
                    info.intercepts = registration.intercepts.iter().cloned().collect();
                    info.warnings.extend(registration.refused.iter().cloned());
                    info.hello_mismatch = hello_mismatch(&slot.manifest, &registration.hello);
                }
                info
            })
            .collect();
        infos.extend(self.others.iter().cloned());
        infos
    }

    pub(crate) fn commands(&self) -> Vec<CommandInfo> {
        self.commands
            .iter()
            .filter_map(|(name, &index)| {
                let slot = &self.slots[index];
                let command = slot
                    .session
                    .as_ref()?
                    .registration()
                    .commands
                    .iter()
                    .find(|c| &c.name == name)?;
                Some(CommandInfo {
                    name: name.clone(),
                    description: command.description.clone(),
                    extension: slot.manifest.name().to_owned(),
                })
            })
            .collect()
    }

    pub(crate) fn tools(&self) -> Vec<ToolInfo> {
        self.tools
            .iter()
            .filter_map(|(name, &index)| {
                let slot = &self.slots[index];
                let tool = slot
                    .session
                    .as_ref()?
                    .registration()
                    .tools
                    .iter()
                    .find(|t| &t.name == name)?;
                Some(ToolInfo {
                    name: name.clone(),
                    description: tool.description.clone(),
                    schema: tool.schema.clone(),
                    extension: slot.manifest.name().to_owned(),
                })
            })
            .collect()
    }
}

/// What zot runs natively for `manifest`, where `list` must say so: a
/// wasm manifest (whose kind reads as sandboxed) or a workspace's.
fn natively(manifest: &Manifest, origin: Origin) -> Option<String> {
    if manifest.kind() != "wasm" && origin != Origin::Project {
        return None;
    }
    match zot_launch(manifest) {
        ZotLaunch::Native(command) => Some(command),
        ZotLaunch::Sandboxed | ZotLaunch::Nothing => None,
    }
}

fn owned(names: &BTreeMap<String, usize>, index: usize) -> Vec<String> {
    names
        .iter()
        .filter(|&(_, &owner)| owner == index)
        .map(|(name, _)| name.clone())
        .collect()
}

fn info_without_slot(
    name: String,
    origin: Origin,
    path: PathBuf,
    state: ExtensionState,
    reason: String,
) -> ExtensionInfo {
    ExtensionInfo {
        name,
        version: String::new(),
        kind: "",
        origin: origin.as_str(),
        path,
        state,
        reason: (!reason.is_empty()).then_some(reason),
        commands: Vec::new(),
        tools: Vec::new(),
        events: Vec::new(),
        intercepts: Vec::new(),
        shadowed: Vec::new(),
        warnings: Vec::new(),
        restarts: 0,
        zot_runs_natively: None,
        hello_mismatch: None,
    }
}

/// When what the extension says in `hello` (name, version) is not what its
/// manifest says: both, and how to keep them one.
fn hello_mismatch(
    manifest: &crate::manifest::Manifest,
    hello: &zotbox_protocol::Hello,
) -> Option<String> {
    let raw = &manifest.raw;
    let version_differs =
        !hello.version.is_empty() && !raw.version.is_empty() && hello.version != raw.version;
    if hello.name == raw.name && !version_differs {
        return None;
    }
    let says = |name: &str, version: &str| {
        if version.is_empty() {
            format!("`{name}`")
        } else {
            format!("`{name}` {version}")
        }
    };
    Some(format!(
        "its `hello` says {}, its manifest {}; keep one source (a Rust guest: \
         `zotbox_guest::Extension::from_manifest(zotbox_guest::manifest!())`)",
        says(&hello.name, &hello.version),
        says(&raw.name, &raw.version)
    ))
}
