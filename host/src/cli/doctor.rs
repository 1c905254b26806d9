//! `zotbox doctor`: one summary of everything that is not right.

use anyhow::Result;

use super::output::json_line;
use super::{Context, EXIT_ERROR, EXIT_OK};
use zotbox::discovery::ZotLaunch;
use zotbox::host::{ExtensionState, Host};
use zotbox::text::shown;

/// Arguments of `zotbox doctor`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

impl Args {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let home = context.home()?;
        let mut findings: Vec<(String, String)> = Vec::new();
        let host = match context.host().await {
            Ok(host) => Some(host),
            Err(err) => {
                findings.push(("host".to_owned(), format!("{err:#}")));
                None
            }
        };
        let mut notes = vec![
            format!("zot home: {}", home.root().display()),
            format!("workspace: {}", context.workspace()?.display()),
        ];
        if let Some(host) = &host {
            for info in host.list() {
                if matches!(
                    info.state,
                    ExtensionState::Failed
                        | ExtensionState::Invalid
                        | ExtensionState::Restarting
                        | ExtensionState::Untrusted
                ) {
                    findings.push((
                        format!("extension `{}`", info.name),
                        format!(
                            "{}: {}",
                            info.state.as_str(),
                            info.reason.clone().unwrap_or_default()
                        ),
                    ));
                }
                if let Some(mismatch) = &info.hello_mismatch {
                    findings.push((format!("extension `{}`", info.name), mismatch.clone()));
                }
                for warning in &info.warnings {
                    findings.push((
                        format!("extension `{}`", info.name),
                        format!("warning: {warning}"),
                    ));
                }
            }
            let data = host.data_set();
            let mut counts = format!(
                "data: {} tools, {} refusal plugins, {} skills",
                data.tools.len(),
                data.plugins.len(),
                data.skills.len()
            );
            if !data.untrusted_tools.is_empty() {
                counts.push_str(&format!(
                    ", {} workspace tools off until trusted",
                    data.untrusted_tools.len()
                ));
            }
            notes.push(counts);
            for problem in &data.problems {
                // The error names the file already.
                findings.push(("data file skipped".to_owned(), problem.error.clone()));
            }
            // Loaded, but with a key ignored: perhaps one its author misspelt.
            for warning in &data.warnings {
                findings.push((
                    "data file".to_owned(),
                    format!("warning: {}", warning.error),
                ));
            }
            workspace_findings(host, &mut findings, &mut notes);
            launcher_findings(host, &mut findings);
            grant_notes(host, &home, &mut notes);
            let layers: Vec<String> = host
                .policy()
                .layers()
                .iter()
                .map(|l| l.path.display().to_string())
                .collect();
            notes.push(format!(
                "policy: {}",
                if layers.is_empty() {
                    format!(
                        "none (a sandboxed extension gets what its manifest asks, within \
                         zotbox's built-in ceilings: {} MiB of memory, {} s a call)",
                        zotbox::policy::BUILT_IN_MAX_MEMORY_MB,
                        zotbox::policy::BUILT_IN_MAX_TOOL_TIMEOUT_MS / 1000
                    )
                } else {
                    layers.join(", ")
                }
            ));
            if let Some(audit) = host.audit_log() {
                notes.push(format!("audit log: {}", audit.display()));
            } else {
                findings.push((
                    "audit log".to_owned(),
                    "cannot be written; capability uses go unrecorded".to_owned(),
                ));
            }
            host.shutdown().await;
        }
        confinement(
            host.as_ref().map(zotbox::Host::policy),
            &mut notes,
            &mut findings,
        );
        match zotbox::shared::status(&home) {
            Ok(Some(status)) => {
                notes.push(super::host::status_line(&status));
                for instance in &status.instances {
                    notes.push(format!(
                        "  `{}` for workspace {} (relay pid {}, up {})",
                        instance.name,
                        instance.workspace.as_ref().map_or_else(
                            || "(not named yet)".to_owned(),
                            |w| format!("`{}`", w.display())
                        ),
                        instance.relay_pid,
                        super::host::duration(instance.uptime_secs)
                    ));
                }
            }
            Ok(None) => {
                notes.push("zotbox host: not running (`zotbox run` starts it on demand)".to_owned())
            }
            Err(err) => findings.push(("zotbox host".to_owned(), err.to_string())),
        }
        let logs = home.logs_dir();
        let probe = logs.join(".doctor-probe");
        let writable =
            std::fs::create_dir_all(&logs).is_ok() && std::fs::write(&probe, b"").is_ok();
        let _ = std::fs::remove_file(&probe);
        if !writable {
            findings.push((
                format!("`{}`", logs.display()),
                "is not writable: extension logs are lost".to_owned(),
            ));
        }
        if context.json {
            for note in &notes {
                json_line(&serde_json::json!({"note": note}))?;
            }
            for (subject, problem) in &findings {
                json_line(&serde_json::json!({"subject": subject, "problem": problem}))?;
            }
        } else {
            for note in &notes {
                println!("{}", shown(note));
            }
            if findings.is_empty() {
                println!("no problems found");
            } else {
                println!("\n{} problem(s):", findings.len());
                for (subject, problem) in &findings {
                    println!("  {}: {}", shown(subject), shown(problem));
                }
            }
        }
        Ok(if findings.is_empty() {
            EXIT_OK
        } else {
            EXIT_ERROR
        })
    }
}

/// The workspace's own extensions and data tools: where its trust stands,
/// which of its tools stay off, and what zot itself does with its manifests
/// (zot starts them without asking, natively unless they are `zotbox run`,
/// and a workspace manifest replaces the user's of the same folder or name,
/// zotbox's `serve` launcher above all). The text is escaped where it is
/// printed, like every finding.
fn workspace_findings(host: &Host, findings: &mut Vec<(String, String)>, notes: &mut Vec<String>) {
    let trusted = host.workspace_trusted();
    notes.push(format!("workspace trust: {}", host.workspace_summary()));
    if let Some(why) = host.workspace_not_a_project() {
        findings.push(("workspace".to_owned(), why));
    }
    if let Some(refusal) = host.workspace_refusal() {
        for tool in &host.data_set().untrusted_tools {
            findings.push((
                format!("data tool `{}`", tool.name),
                format!("untrusted: {refusal}"),
            ));
        }
    }
    let search = host.search_path();
    for path in search.workspace_manifests() {
        let Ok(manifest) = zotbox::manifest::Manifest::load(&path) else {
            continue;
        };
        let ZotLaunch::Native(command) = zotbox::discovery::zot_launch(&manifest) else {
            continue;
        };
        let subject = format!("extension `{}`", manifest.name());
        let what = format!(
            "zot would run natively, outside the sandbox: `{}` (from `{}`)",
            command,
            path.display()
        );
        if trusted {
            notes.push(format!("{subject} (workspace): {what}"));
        } else {
            findings.push((
                subject,
                format!("{what}; zot starts it without asking, trusted or not, and zotbox cannot stop that"),
            ));
        }
    }
    for shadow in search.zot_shadows() {
        let subject = format!("extension `{}`", shadow.name);
        let problem = if shadow.serve_launcher {
            format!(
                "the workspace's `{}` shadows zotbox's serve launcher inside zot: zot runs it \
                 instead of `zotbox serve`, so every refusal plugin is off in zot; remove it \
                 or do not start zot in this workspace",
                shadow.workspace.display()
            )
        } else {
            format!(
                "the workspace's `{}` shadows yours at `{}` inside zot: zot runs the \
                 workspace's instead",
                shadow.workspace.display(),
                shadow.user.display()
            )
        };
        findings.push((subject, problem));
    }
}

/// What reaches past the sandbox by grant. Which native extensions hold
/// which secrets: they get the value itself (as the variable they
/// declared), outside the sandbox, and nothing stops them sending it
/// anywhere (granted by the policy and set for them by the user, that is;
/// the rest get nothing and are not listed). And which sandboxed ones may
/// rewrite the agent's tool calls: zot runs what they answer, its own
/// `bash` included, with the user's permissions.
fn grant_notes(host: &Host, home: &zotbox::home::ZotHome, notes: &mut Vec<String>) {
    let store = zotbox::store::secret::SecretStore::new(home);
    // The host's own discovery has warned of every manifest it could not
    // load; this one is only for the manifests that loaded.
    let again = || host.search_path().discover();
    let found =
        tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), again);
    for found in found.found {
        let manifest = &found.manifest;
        let grant = host.policy().grant(&manifest.raw.capabilities);
        if !matches!(manifest.program, zotbox::manifest::Program::Native { .. }) {
            if grant.rewrite.iter().any(|event| event == "tool_call") {
                notes.push(format!(
                    "extension `{}` (sandboxed) may rewrite the agent's tool calls: zot runs \
                     what it answers, its own `bash` included, outside the sandbox",
                    shown(manifest.name())
                ));
            }
            continue;
        }
        for (name, spec) in &grant.secrets {
            let Some(variable) = &spec.env else {
                continue;
            };
            if !store.is_set_for(manifest.name(), name) {
                continue;
            }
            notes.push(format!(
                "extension `{}` (native, outside the sandbox) holds secret `{name}` as \
                 `${variable}` and can send it anywhere",
                manifest.name()
            ));
        }
    }
}

/// zot's launchers of zotbox (a sandboxed extension's `zotbox run`, the
/// `serve` launcher): one whose binary no longer exists, or is not this
/// zotbox, breaks silently inside zot after a move or an upgrade.
fn launcher_findings(host: &Host, findings: &mut Vec<(String, String)>) {
    let me = std::env::current_exe().and_then(std::fs::canonicalize).ok();
    let search = host.search_path();
    let folders = [search.home.extensions_dir(), search.project_dir()];
    for folder in folders {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        let mut manifests: Vec<std::path::PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path().join(zotbox::manifest::MANIFEST_FILE))
            .collect();
        manifests.sort();
        for path in manifests {
            let Ok(manifest) = zotbox::manifest::Manifest::load(&path) else {
                continue;
            };
            if let Some(problem) = launcher_problem(&manifest, me.as_deref()) {
                findings.push((format!("extension `{}`", manifest.name()), problem));
            }
        }
    }
}

/// What is wrong with `manifest`'s launcher of zotbox, if it is one.
fn launcher_problem(
    manifest: &zotbox::manifest::Manifest,
    me: Option<&std::path::Path>,
) -> Option<String> {
    let raw = &manifest.raw;
    let exec = raw.exec.as_deref()?;
    let serve = zotbox::discovery::is_serve_launcher(manifest);
    let run = manifest.kind() == "wasm" && raw.args.first().is_some_and(|a| a == "run");
    let named_zotbox = std::path::Path::new(exec)
        .file_name()
        .is_some_and(|name| name == "zotbox");
    if !(serve || run) || !named_zotbox {
        return None;
    }
    let fix = if serve {
        "run `zotbox setup` to point it at this zotbox".to_owned()
    } else {
        format!(
            "run `zotbox ext install` on its source again (or set `exec` in `{}` to `zotbox`)",
            manifest.path.display()
        )
    };
    let found =
        zotbox::discovery::locate_program(exec, &manifest.dir).filter(|path| path.is_file());
    let Some(found) = found else {
        return Some(format!(
            "zot starts it with `{exec}`, which no longer exists: zot cannot start it; {fix}"
        ));
    };
    let found = std::fs::canonicalize(&found).unwrap_or(found);
    match me {
        Some(me) if me != found => Some(format!(
            "zot starts it with `{}`, which is not this zotbox (`{}`); {fix}",
            found.display(),
            me.display()
        )),
        _ => None,
    }
}

/// The kernel protections shell commands (and native extensions under
/// `confine_native`) run under: one note listing what this kernel offers,
/// one finding per protection it lacks, saying what runs without it.
fn confinement(
    policy: Option<&zotbox::policy::Policy>,
    notes: &mut Vec<String>,
    findings: &mut Vec<(String, String)>,
) {
    use zotbox::capability::confine::{Kernel, Protection};
    let kernel = Kernel::get();
    let offered: Vec<&str> = kernel
        .report()
        .into_iter()
        .filter(|(_, offered)| offered.is_ok())
        .map(|(protection, _)| match protection {
            Protection::Landlock => "Landlock",
            Protection::LandlockNetwork => "Landlock network",
            Protection::LandlockScopes => "Landlock scopes",
            Protection::UserNamespace => "user namespaces",
            Protection::MountNamespace => "mount namespaces",
            Protection::PidNamespace => "PID namespaces",
            Protection::NetworkNamespace => "network namespaces",
        })
        .collect();
    notes.push(format!(
        "kernel confinement: Landlock ABI {}; {}",
        kernel.landlock_abi,
        if offered.is_empty() {
            "no protection available".to_owned()
        } else {
            offered.join(", ")
        }
    ));
    let required_by = policy.and_then(zotbox::policy::Policy::confinement_required_by);
    for (protection, offered) in kernel.report() {
        let Err(why) = offered else {
            continue;
        };
        let consequence = match required_by {
            Some(path) => format!(
                "policy `{}` sets `require_confinement: true`, so shell commands and native \
                 extensions are refused",
                path.display()
            ),
            None => "shell commands (and native extensions under `confine_native`) run \
                     without it"
                .to_owned(),
        };
        findings.push((
            "this kernel".to_owned(),
            format!("lacks {} ({why}); {consequence}", protection.describe()),
        ));
    }
}
