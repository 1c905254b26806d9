//! `zotbox ext search|info|update`: what the policy's registries offer, a
//! preview before an install, and updates that never widen a grant without
//! asking (the library checks; this renders).

use std::collections::BTreeMap;

use anyhow::{Result, bail};
use zotbox::home::ZotHome;
use zotbox::policy::Policy;
use zotbox::store::registry::client::Client;
use zotbox::store::registry::compare_versions;
use zotbox::store::{install, lock};
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
                eprintln!("warning: {err}");
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
    let (name, version) = match text.split_once('@') {
        Some((name, version)) => (name, Some(version)),
        None => (text, None),
    };
    let obtained = super::source::from_registry(context, &home, &policy, name, version).await?;
    let plan = install::plan(&obtained.fetched.folder, &home.extensions_dir())?;
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
            "granted": super::ext::granted(&policy, plan.manifest()),
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
    println!("  {}", super::source::signature_status(&obtained));
    super::ext::print_plan(&plan);
    super::policy::print_grant(&policy, plan.manifest());
    println!(
        "nothing was installed; `zotbox ext install {}` installs it",
        Shown(text)
    );
    Ok(EXIT_OK)
}

/// The capabilities `new` grants that `old` did not, and those it no
/// longer grants, as `+ capability value` / `- capability value` lines.
fn grant_diff(
    old: &BTreeMap<String, Vec<String>>,
    new: &BTreeMap<String, Vec<String>>,
) -> (Vec<String>, Vec<String>) {
    let lines = |from: &BTreeMap<String, Vec<String>>, to: &BTreeMap<String, Vec<String>>| {
        let mut lines = Vec::new();
        for (capability, values) in to {
            let before = from.get(capability);
            for value in values {
                if !before.is_some_and(|before| before.contains(value)) {
                    lines.push(format!("{capability} {}", shown(value)));
                }
            }
        }
        lines
    };
    (lines(old, new), lines(new, old))
}

/// `ext update [NAME]`: for each extension installed from a registry, the
/// newest version listed; what it would add to the grant is shown, and an
/// update that adds anything is asked about again (`--yes` accepts).
/// Nothing updates without this command.
pub(crate) async fn update(context: &Context, only: Option<&str>, yes: bool) -> Result<u8> {
    let home = context.home()?;
    let policy = Policy::load_for(&home)?;
    let locked: Vec<(String, lock::LockEntry)> = lock::Lock::load(&home)?
        .entries()
        .filter(|(_, entry)| entry.registry.is_some())
        .filter(|(_, entry)| only.is_none_or(|name| entry.name == name))
        .map(|(dir, entry)| (dir.to_owned(), entry.clone()))
        .collect();
    if locked.is_empty() {
        match only {
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
    let client = Client::new(&home, &policy);
    for (dir, entry) in locked {
        update_one(context, &home, &policy, &client, &dir, &entry, yes).await?;
    }
    Ok(EXIT_OK)
}

async fn update_one(
    context: &Context,
    home: &ZotHome,
    policy: &Policy,
    client: &Client<'_>,
    dir: &str,
    locked: &lock::LockEntry,
    yes: bool,
) -> Result<()> {
    let name = &locked.name;
    let found = client.find(name, None).await?;
    if compare_versions(&found.entry.version, &locked.version) != std::cmp::Ordering::Greater {
        if context.json {
            json_line(&serde_json::json!({
                "action": "up-to-date", "name": name, "version": locked.version,
            }))?;
        } else {
            println!("`{}` {} is up to date", Shown(name), Shown(&locked.version));
        }
        return Ok(());
    }
    let obtained = client.obtain(found).await?;
    let extensions = std::path::Path::new(dir)
        .parent()
        .map_or_else(|| home.extensions_dir(), std::path::Path::to_owned);
    let plan = install::plan(&obtained.fetched.folder, &extensions)?;
    let granted = super::ext::granted(policy, plan.manifest());
    let (added, removed) = grant_diff(&locked.capabilities, &granted);
    let version = &obtained.found.entry.version;
    if !context.json {
        println!(
            "update `{}` {} → {} ({})",
            Shown(name),
            Shown(&locked.version),
            Shown(version),
            super::source::signature_status(&obtained)
        );
        for line in &added {
            println!("  + {line}");
        }
        for line in &removed {
            println!("  - {line}");
        }
    }
    if !added.is_empty() {
        // A wider grant is a new decision: shown in full, asked again.
        if !context.json {
            println!("the new version asks for more than you granted:");
            super::policy::print_grant(policy, plan.manifest());
        }
        super::ext::consent(name, yes)?;
    }
    let target =
        super::ext::commit_install(home, policy, plan, &obtained.fetched.recorded, locked.scope)
            .await?;
    if context.json {
        json_line(&serde_json::json!({
            "action": "updated", "name": name, "from": locked.version, "to": version,
            "path": target, "added": added, "removed": removed,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_diff_lists_what_is_added_and_what_is_dropped() {
        let map = |pairs: &[(&str, &[&str])]| -> BTreeMap<String, Vec<String>> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.iter().map(|s| (*s).to_owned()).collect()))
                .collect()
        };
        let old = map(&[("http", &["https://a.example"]), ("fs-read", &["docs/**"])]);
        let new = map(&[
            ("http", &["https://a.example", "https://b.example"]),
            ("shell", &["git status"]),
        ]);
        let (added, removed) = grant_diff(&old, &new);
        assert_eq!(added, ["http https://b.example", "shell git status"]);
        assert_eq!(removed, ["fs-read docs/**"]);
        assert_eq!(grant_diff(&old, &old), (Vec::new(), Vec::new()));
    }
}
