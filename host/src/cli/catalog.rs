//! `zotbox ext search|info|update`: what the policy's registries offer, a
//! preview before an install, and updates that never widen a grant without
//! asking (the library checks; this renders).

use anyhow::{Result, bail};
use zotbox::home::ZotHome;
use zotbox::policy::Policy;
use zotbox::store::registry::client::Client;
use zotbox::store::source::Source;
use zotbox::store::{installer, lock};
use zotbox::text::{Shown, shown};

use super::output::{json_line, table};
use super::{Context, EXIT_OK};

/// `ext search TEXT`: the entries whose name or description holds TEXT,
/// from every registry (newest versions first).
pub(crate) async fn search(context: &Context, text: &str) -> Result<u8> {
    let home = context.home()?;
    let policy = Policy::load_for(&home)?;
    let client = Client::new(&home, &policy);
    let mut rows = Vec::new();
    let mut failed = false;
    for (registry, index) in client.indexes().await? {
        let index = match index {
            Ok(index) => index,
            Err(err) => {
                failed = true;
                eprintln!("warning: {}", zotbox::text::chain(&err));
                continue;
            }
        };
        for entry in index.search(text) {
            if context.json {
                json_line(&serde_json::json!({
                    "name": entry.name,
                    "version": entry.version,
                    "kind": entry.kind.as_str(),
                    "description": entry.description,
                    "revoked": entry.revoked,
                    "key": entry.key.map(|k| k.to_string()),
                    "registry": registry.url,
                }))?;
            } else {
                rows.push(vec![
                    shown(&entry.name).into_owned(),
                    shown(&entry.version).into_owned(),
                    entry.kind.as_str().to_owned(),
                    if entry.revoked {
                        "revoked".to_owned()
                    } else {
                        shown(entry.description.as_deref().unwrap_or("")).into_owned()
                    },
                    shown(&registry.url).into_owned(),
                ]);
            }
        }
    }
    if !context.json {
        if rows.is_empty() {
            println!("no registry lists an extension matching `{}`", Shown(text));
        } else {
            print!(
                "{}",
                table(
                    &["NAME", "VERSION", "KIND", "DESCRIPTION", "REGISTRY"],
                    &rows
                )
            );
        }
    }
    Ok(if failed && rows.is_empty() {
        super::EXIT_ERROR
    } else {
        EXIT_OK
    })
}

/// `ext info NAME[@VERSION]`: downloads and checks the archive, and shows
/// what an install would show (files, capabilities against the grant,
/// signature) without installing anything.
pub(crate) async fn info(context: &Context, text: &str) -> Result<u8> {
    let home = context.home()?;
    let policy = Policy::load_for(&home)?;
    // Read by the rules `ext install` reads a registry entry by: a name,
    // and after `@` a version that is one.
    let source = match Source::parse(text)? {
        source @ Source::Registry { .. } => source,
        _ => bail!(
            "`{}` is not a registry entry: give NAME or NAME@VERSION",
            Shown(text)
        ),
    };
    super::source::announce(context, &source);
    let pending = installer::prepare(&source, &home, &policy, &home.extensions_dir()).await?;
    let Some(obtained) = pending.obtained() else {
        bail!("`{}` is not a registry entry", Shown(text));
    };
    let plan = pending.plan();
    let entry = &obtained.found.entry;
    if context.json {
        json_line(&serde_json::json!({
            "name": entry.name,
            "version": entry.version,
            "kind": entry.kind.as_str(),
            "description": entry.description,
            "registry": obtained.found.registry.url,
            "sha256": entry.sha256,
            "signed_by": obtained.verified.key.map(|k| k.to_string()),
            "capabilities": entry.capabilities,
            "granted": installer::granted(&policy, plan),
            "files": plan.entries().iter().map(|e| &e.path).collect::<Vec<_>>(),
            "installed": plan.replaces(),
        }))?;
        return Ok(EXIT_OK);
    }
    println!(
        "`{}` {} ({}) from {}",
        Shown(&entry.name),
        Shown(&entry.version),
        entry.kind.as_str(),
        shown(&obtained.found.registry.url)
    );
    if let Some(description) = &entry.description {
        println!("  {}", Shown(description));
    }
    println!("  {}", super::source::signature_status(obtained));
    super::ext::print_plan(plan);
    super::policy::print_grant(&policy, plan.manifest(), &plan.declared());
    println!(
        "nothing was installed; `zotbox ext install {}` installs it",
        Shown(text)
    );
    Ok(EXIT_OK)
}

/// `ext update [NAME]`: for each extension installed from a registry, the
/// newest version listed; what it would add to the grant is shown, and an
/// update that adds anything is asked about again (`--yes` accepts).
/// Nothing updates without this command.
pub(crate) async fn update(context: &Context, only: Option<&str>, yes: bool) -> Result<u8> {
    let home = context.home()?;
    let policy = Policy::load_for(&home)?;
    let locked = installer::from_registries(&home, only)?;
    if locked.is_empty() {
        match only {
            Some(name)
                if !home.extensions_dir().join(name).is_dir()
                    && !home.packages_dir().join(name).is_dir() =>
            {
                bail!(
                    "no extension `{}` is installed (see `zotbox list`)",
                    Shown(name)
                )
            }
            Some(name) => bail!(
                "`{}` was not installed from a registry; reinstall it from its source with \
                 `zotbox ext install`",
                Shown(name)
            ),
            None => {
                println!("no extension was installed from a registry");
                return Ok(EXIT_OK);
            }
        }
    }
    if only.is_some() {
        for (dir, entry) in locked {
            update_one(context, &home, &policy, &dir, &entry, yes).await?;
        }
        return Ok(EXIT_OK);
    }
    // One install that cannot be updated (its registry down, its
    // workspace's `.zot/extensions` made a link) holds up no other.
    let mut code = EXIT_OK;
    for (dir, entry) in locked {
        if let Err(err) = update_one(context, &home, &policy, &dir, &entry, yes).await {
            super::print_error(&err.context(format!("`{}` was not updated", Shown(&entry.name))));
            code = super::EXIT_ERROR;
        }
    }
    Ok(code)
}

async fn update_one(
    context: &Context,
    home: &ZotHome,
    policy: &Policy,
    dir: &std::path::Path,
    locked: &lock::LockEntry,
    yes: bool,
) -> Result<()> {
    let name = &locked.name;
    let Some(update) = installer::check_update(home, policy, dir, locked).await? else {
        if context.json {
            json_line(&serde_json::json!({
                "action": "up-to-date", "name": name, "version": locked.version,
            }))?;
        } else {
            println!("`{}` {} is up to date", Shown(name), Shown(&locked.version));
        }
        return Ok(());
    };
    if !context.json {
        let signed = update
            .pending
            .obtained()
            .map(super::source::signature_status)
            .unwrap_or_default();
        println!(
            "update `{}` {} → {} ({signed})",
            Shown(name),
            Shown(&update.from),
            Shown(&update.to),
        );
        for line in &update.added {
            println!("  + {}", shown(line));
        }
        for line in &update.removed {
            println!("  - {}", shown(line));
        }
        if update.pending.plan().stays_disabled() {
            println!("  it stays disabled, as you left it (`zotbox ext enable` turns it on)");
        }
    }
    if !update.added.is_empty() {
        // A wider grant is a new decision: shown in full, asked again.
        if !context.json {
            println!("the new version asks for more than you granted:");
            let plan = update.pending.plan();
            super::policy::print_grant(policy, plan.manifest(), &plan.declared());
        }
        super::ext::consent(name, yes)?;
    }
    let target = super::ext::commit(home, policy, update.pending, locked.scope).await?;
    if context.json {
        json_line(&serde_json::json!({
            "action": "updated", "name": name, "from": update.from, "to": update.to,
            "path": target, "added": update.added, "removed": update.removed,
        }))?;
    } else {
        println!(
            "updated `{}` at {}",
            Shown(name),
            shown(&target.display().to_string())
        );
    }
    Ok(())
}
