//! What a repository's hooks run from its working tree.
//!
//! git runs a hook (at a commit, a checkout, a merge) in the working tree,
//! unsandboxed, and hook managers keep the hook generic and let project
//! files decide what it does: husky 9 sets `core.hooksPath = .husky/_`,
//! whose `pre-commit` runs the project's `.husky/pre-commit`; pre-commit's
//! hook reads `.pre-commit-config.yaml`, whose `local` hooks run any
//! command; lefthook's reads `lefthook.yml`; and a hook written by hand
//! often runs a script by path (`./scripts/check.sh`), or is a link to one.
//! Each of those files decides what runs at the user's next commit as much
//! as the hook does, so each is a control path too.
//!
//! For each hook (a file in a hooks folder whose name does not end in
//! `.sample`, which git never runs) this finds: the file a link leads to;
//! every word of it that names a path, as for a command in git's
//! configuration; the configuration of a manager whose hook it is, known by
//! the words that manager writes in it; and for a hooks folder named `_`
//! (husky 9's), the folder above it. It cannot be complete: a hook that
//! runs `make lint` lets the `Makefile` decide, and nothing here says so.

use std::path::{Path, PathBuf};

use super::config::{Named, programs_of};

/// The most hooks read in one folder (git knows about 30 names).
const MAX_HOOKS: usize = 64;

/// The most read of one hook.
const MAX_HOOK_BYTES: u64 = 256 * 1024;

/// The configuration files lefthook reads at the working tree's root.
const LEFTHOOK_CONFIGS: &[&str] = &[
    "lefthook.yml",
    ".lefthook.yml",
    "lefthook.yaml",
    ".lefthook.yaml",
    "lefthook.toml",
    ".lefthook.toml",
    "lefthook.json",
    ".lefthook.json",
    "lefthook-local.yml",
    ".lefthook-local.yml",
    "lefthook-local.yaml",
    ".lefthook-local.yaml",
];

/// Adds to `named` what the hooks in its hooks folders (or, when no
/// `core.hooksPath` is set, in `default`, the repository's own `hooks/`)
/// run from `worktree`, and the folders and files read to find it.
pub(crate) fn add_run_by_hooks(
    named: &mut Named,
    default: PathBuf,
    worktree: &Path,
    home: Option<&Path>,
) {
    let folders = if named.hooks.is_empty() {
        vec![default]
    } else {
        named.hooks.clone()
    };
    for folder in folders {
        // husky 9: `.husky/_/pre-commit` runs `.husky/pre-commit`.
        if folder.file_name().is_some_and(|name| name == "_")
            && let Some(parent) = folder.parent()
            && !named.hooks.iter().any(|hooks| hooks == parent)
        {
            named.hooks.push(parent.to_owned());
        }
        named.files.push(folder.clone());
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        let mut hooks: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| {
                path.extension()
                    .is_none_or(|extension| extension != "sample")
            })
            .collect();
        hooks.sort();
        hooks.truncate(MAX_HOOKS);
        for hook in hooks {
            run_by(named, &hook, worktree, home);
        }
    }
}

/// Adds to `named` what the hook at `hook` runs from `worktree`.
fn run_by(named: &mut Named, hook: &Path, worktree: &Path, home: Option<&Path>) {
    let Some(name) = hook
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
    else {
        return;
    };
    named.files.push(hook.to_owned());
    // A link to a script in the working tree makes that script the hook.
    if hook.is_symlink()
        && let Ok(target) = hook.canonicalize()
    {
        named.run_by_hooks.push((target, name.clone()));
    }
    let Ok(text) = crate::user_file::read_text(hook, MAX_HOOK_BYTES) else {
        return;
    };
    let mut found: Vec<PathBuf> = Vec::new();
    for line in text.lines() {
        let line = line.trim_start();
        if line.starts_with('#') {
            continue;
        }
        // A quoted message that holds a `/` is no path: a path in the
        // working tree with a space in it is not looked for.
        found.extend(
            programs_of(line, worktree, home)
                .into_iter()
                .filter(|path| {
                    path.strip_prefix(worktree).map_or(true, |rest| {
                        !rest.to_string_lossy().contains(char::is_whitespace)
                    })
                }),
        );
        // pre-commit's hook: `hook-impl --config=.pre-commit-config.yaml`.
        if line.contains("hook-impl") {
            found.push(worktree.join(".pre-commit-config.yaml"));
            found.extend(
                line.split_whitespace()
                    .filter_map(|word| word.strip_prefix("--config="))
                    .map(|config| worktree.join(config.trim_matches(['"', '\'', ')']))),
            );
        }
    }
    if text.contains("lefthook") {
        found.extend(LEFTHOOK_CONFIGS.iter().map(|config| worktree.join(config)));
    }
    for path in found {
        if !named.run_by_hooks.iter().any(|(seen, _)| *seen == path) {
            named.run_by_hooks.push((path, name.clone()));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn what_hooks_run_from_the_working_tree_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let hooks = ws.join(".git/hooks");
        std::fs::create_dir_all(&hooks).unwrap();
        std::fs::create_dir_all(ws.join("scripts")).unwrap();
        std::fs::write(ws.join("scripts/check.sh"), "#!/bin/sh\n").unwrap();
        // By hand: a script by path, after a comment naming another.
        std::fs::write(
            hooks.join("pre-commit"),
            "#!/bin/sh\n# ./not/this.sh\nset -e\n./scripts/lint.sh --fix && exec tools/test\n",
        )
        .unwrap();
        // git-lfs's: a redirection and a message are no paths.
        std::fs::write(
            hooks.join("post-merge"),
            "#!/bin/sh\ncommand -v git-lfs >/dev/null 2>&1 || { printf >&2 \"\\n%s\\n\\n\" \
             \"This repository is configured for Git LFS (set by 'core.hookspath'; usually \
             '.git/hooks').\"; exit 2; }\ngit lfs post-merge \"$@\"\n",
        )
        .unwrap();
        // A link to a script in the working tree.
        std::os::unix::fs::symlink("../../scripts/check.sh", hooks.join("pre-push")).unwrap();
        // pre-commit's and lefthook's, in their own words.
        std::fs::write(
            hooks.join("commit-msg"),
            "#!/usr/bin/env bash\n# File generated by pre-commit\n\
             ARGS=(hook-impl --config=ci/hooks.yaml --hook-type=commit-msg)\n",
        )
        .unwrap();
        std::fs::write(
            hooks.join("post-checkout"),
            "#!/bin/sh\ncall_lefthook()\n{\n  lefthook \"$@\"\n}\n",
        )
        .unwrap();
        // Never run: not read.
        std::fs::write(hooks.join("pre-rebase.sample"), "./sample/x.sh\n").unwrap();
        let mut named = Named::default();
        add_run_by_hooks(&mut named, hooks.clone(), &ws, None);
        let found: Vec<(PathBuf, &str)> = named
            .run_by_hooks
            .iter()
            .map(|(path, hook)| (path.clone(), hook.as_str()))
            .collect();
        let mut expected: Vec<(PathBuf, &str)> = vec![
            (ws.join("ci/hooks.yaml"), "commit-msg"),
            (ws.join(".pre-commit-config.yaml"), "commit-msg"),
        ];
        expected.extend(
            LEFTHOOK_CONFIGS
                .iter()
                .map(|config| (ws.join(config), "post-checkout")),
        );
        expected.extend([
            // Outside the working tree: placed nowhere, as a control path.
            (PathBuf::from("/dev/null"), "post-merge"),
            (ws.join("scripts/lint.sh"), "pre-commit"),
            (ws.join("tools/test"), "pre-commit"),
            (
                ws.canonicalize().unwrap().join("scripts/check.sh"),
                "pre-push",
            ),
        ]);
        assert_eq!(found, expected);
        assert!(named.files.contains(&hooks));
        assert!(named.files.contains(&hooks.join("pre-commit")));
    }

    #[test]
    fn husky_s_hooks_folder_makes_the_folder_above_it_one() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join(".husky/_")).unwrap();
        std::fs::write(
            ws.join(".husky/_/pre-commit"),
            "#!/usr/bin/env sh\n. \"$(dirname \"$0\")/h\"\n",
        )
        .unwrap();
        let mut named = Named {
            hooks: vec![ws.join(".husky/_")],
            ..Named::default()
        };
        add_run_by_hooks(&mut named, ws.join(".git/hooks"), &ws, None);
        assert_eq!(named.hooks, [ws.join(".husky/_"), ws.join(".husky")]);
        assert_eq!(named.run_by_hooks, []);
    }
}
