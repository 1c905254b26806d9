//! The paths git's configuration names as hooks, more configuration or
//! programs to run.
//!
//! A repository's `config` may move its hooks into the working tree
//! (`core.hooksPath = .githooks`, or `.husky` as husky sets it), read
//! more configuration from a file there (`include.path = ../.gitconfig`,
//! a common way to share settings), and run a program there
//! (`filter.<name>.smudge = ./scripts/decrypt.sh %f` at every checkout,
//! [`COMMANDS`]). Each makes a project file decide what runs: git runs
//! `.githooks/pre-commit` at the next commit, and a `core.fsmonitor` line
//! in the included file at the next `git status`, none of it sandboxed.
//! So what the configuration names is a control path, like the `.git/`
//! that names it.
//!
//! Only these keys are read, from the files git reads in the workspace
//! (the system's, the user's, the repository's and what each includes),
//! with the syntax git accepts: `[section]`, `[section "sub"]` and the
//! old `[section.sub]`, names in any case, quoted values with escapes,
//! comments, lines continued with `\`. A conditional include counts
//! whatever its condition says: a folder is protected at least whenever
//! git would read it. The files are the workspace's or the user's to
//! write, read capped and never from a FIFO; a file that cannot be read
//! names nothing.

use std::path::{Path, PathBuf};

/// The most read of one configuration file.
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// How deep includes are followed (git stops at 10 too).
const MAX_INCLUDE_DEPTH: usize = 10;

/// What git's configuration names, absolute.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Named {
    /// Folders git runs hooks from (`core.hooksPath`).
    pub(crate) hooks: Vec<PathBuf>,
    /// Files git reads as configuration (`include.path`,
    /// `includeIf.<condition>.path`).
    pub(crate) includes: Vec<PathBuf>,
    /// Programs git runs by path, each with the key that names it
    /// (`filter.<driver>.smudge = ./scripts/smudge.sh %f`).
    pub(crate) programs: Vec<(PathBuf, String)>,
    /// Files the hooks run or read from the working tree, each with the
    /// hook's name ([`super::hooks`]).
    pub(crate) run_by_hooks: Vec<(PathBuf, String)>,
    /// Every file and folder read or looked for to find these: when none
    /// has changed, neither have they.
    pub(crate) files: Vec<PathBuf>,
}

impl Named {
    /// Whether it names nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.hooks.is_empty()
            && self.includes.is_empty()
            && self.programs.is_empty()
            && self.run_by_hooks.is_empty()
    }

    /// Each path named, as a control path: `(path, is a folder, what it
    /// is)`.
    pub(crate) fn into_control_paths(self) -> Vec<(PathBuf, bool, String)> {
        let hooks = self.hooks.into_iter().map(|hooks| {
            (
                hooks,
                true,
                "the folder git runs hooks from (`core.hooksPath`): it decides what runs"
                    .to_owned(),
            )
        });
        let includes = self.includes.into_iter().map(|include| {
            (
                include,
                false,
                "a file git reads as its config (`include.path`): it decides what runs".to_owned(),
            )
        });
        let programs = self.programs.into_iter().map(|(program, key)| {
            (
                program,
                false,
                format!("a program git's configuration runs (`{key}`): it decides what runs"),
            )
        });
        let run_by_hooks = self.run_by_hooks.into_iter().map(|(file, hook)| {
            (
                file,
                false,
                format!("a file git's `{hook}` hook runs or reads: it decides what runs"),
            )
        });
        hooks
            .chain(includes)
            .chain(programs)
            .chain(run_by_hooks)
            .collect()
    }
}

/// The keys whose value is a command git runs, as `(section, key)`, `*`
/// for any key: without being asked (a filter at checkout, a diff driver,
/// `core.fsmonitor` at `git status`) or as part of what the user asked
/// (an editor, a pager, an alias).
const COMMANDS: &[(&str, &str)] = &[
    ("core", "fsmonitor"),
    ("core", "sshcommand"),
    ("core", "askpass"),
    ("core", "editor"),
    ("core", "pager"),
    ("sequence", "editor"),
    ("filter", "clean"),
    ("filter", "smudge"),
    ("filter", "process"),
    ("diff", "textconv"),
    ("diff", "command"),
    ("merge", "driver"),
    ("difftool", "cmd"),
    ("difftool", "path"),
    ("mergetool", "cmd"),
    ("mergetool", "path"),
    ("gpg", "program"),
    ("credential", "helper"),
    ("interactive", "difffilter"),
    ("pager", "*"),
    ("alias", "*"),
];

/// The sections whose keys sit under a driver's or a tool's name.
const DRIVER_SECTIONS: &[&str] = &["filter", "diff", "merge", "difftool", "mergetool"];

/// One `section.key = value` setting read from a file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Setting {
    /// The section, lowercased, without its subsection.
    section: String,
    /// The key, lowercased.
    key: String,
    /// The value, unquoted and unescaped (`None`: a bare key, `true`).
    value: Option<String>,
}

/// What the configuration files `files` and every file they include name,
/// a relative `core.hooksPath` taken from `worktree` (where git runs
/// hooks), `~/` from `home`.
pub(crate) fn named(files: &[PathBuf], worktree: &Path, home: Option<&Path>) -> Named {
    let mut named = Named::default();
    let mut todo: Vec<(PathBuf, usize)> = files.iter().map(|file| (file.clone(), 0)).collect();
    let mut seen = std::collections::HashSet::new();
    while let Some((file, depth)) = todo.pop() {
        if depth > MAX_INCLUDE_DEPTH || !seen.insert(file.clone()) {
            continue;
        }
        let Ok(text) = crate::user_file::read_text(&file, MAX_CONFIG_BYTES) else {
            continue;
        };
        let folder = file.parent().unwrap_or(Path::new("/"));
        for setting in settings(&text) {
            let Some(value) = setting.value.as_deref().filter(|v| !v.is_empty()) else {
                continue;
            };
            match (setting.section.as_str(), setting.key.as_str()) {
                ("core", "hookspath") => {
                    if let Some(path) = interpolate(value, worktree, home) {
                        named.hooks.push(path);
                    }
                }
                (section, key)
                    if COMMANDS
                        .iter()
                        .any(|&(s, k)| s == section && (k == key || k == "*")) =>
                {
                    let shown = if DRIVER_SECTIONS.contains(&section) {
                        format!("{section}.<name>.{key}")
                    } else {
                        format!("{section}.{key}")
                    };
                    for program in programs_of(value, worktree, home) {
                        named.programs.push((program, shown.clone()));
                    }
                }
                ("include" | "includeif", "path") => {
                    if let Some(path) = interpolate(value, folder, home) {
                        if !named.includes.contains(&path) {
                            named.includes.push(path.clone());
                        }
                        todo.push((path, depth + 1));
                    }
                }
                _ => {}
            }
        }
    }
    named.files = seen.into_iter().collect();
    named
}

/// A path value as git reads it: `~/` in `home`, a relative one in `base`.
/// `None` for what cannot be resolved here (`~user/`, `%(prefix)/`, no home).
fn interpolate(value: &str, base: &Path, home: Option<&Path>) -> Option<PathBuf> {
    if let Some(rest) = value.strip_prefix("~/") {
        return home.map(|home| home.join(rest));
    }
    if value.starts_with('~') || value.starts_with("%(") {
        return None;
    }
    Some(base.join(value))
}

/// The programs and scripts command `value` names by path, relative ones
/// from `worktree`, where git runs commands: every word holding a `/`
/// (`./scripts/smudge.sh %f`, `!./build.sh` for an alias), not only the
/// first, since the program may be an interpreter and the path its
/// script (`!sh scripts/lint.sh`, `node ./tools/x.js`), or come after
/// another command (`!cd web && ./dev.sh`). A word without one
/// (`git-lfs`, `sh`, `%f`) is a name found on `PATH` or no path: no
/// workspace decides it. Words are split at spaces and at `;`, `&`, `|`,
/// `(`, `)`, `<` and `>`, quotes keeping theirs together; an option's value
/// (`--rcfile=./x`) counts, a URL or a variable does not. A word that
/// only looks like a path (`sed s/a/b/`) is protected for nothing.
pub(super) fn programs_of(value: &str, worktree: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let command = value.trim_start().trim_start_matches('!');
    words(command)
        .into_iter()
        .filter_map(|word| {
            let path = if word.starts_with('-') {
                word.split_once('=')?.1.to_owned()
            } else {
                word
            };
            let named = path.contains('/') && !path.contains("://") && !path.starts_with('$');
            named.then(|| interpolate(&path, worktree, home)).flatten()
        })
        .collect()
}

/// The words of shell command `command`, split as [`programs_of`] says.
fn words(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    for c in command.chars() {
        match quote {
            Some(open) if c == open => quote = None,
            Some(_) => word.push(c),
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')' | '<' | '>') => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            None => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// The settings of configuration `text`, in order; malformed lines are
/// skipped (git refuses the file; nothing here grants anything).
fn settings(text: &str) -> Vec<Setting> {
    let mut found = Vec::new();
    let mut section = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let mut rest = line.trim_start();
        if let Some(header) = rest.strip_prefix('[') {
            let Some((name, after)) = section_header(header) else {
                section.clear();
                continue;
            };
            section = name;
            // git allows a setting after the header, on the same line.
            rest = after.trim_start();
        }
        if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
            continue;
        }
        let name_end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(rest.len());
        let (key, after) = rest.split_at(name_end);
        if key.is_empty() || section.is_empty() {
            continue;
        }
        let after = after.trim_start();
        let value = if let Some(value) = after.strip_prefix('=') {
            Some(value_of(value, &mut lines))
        } else if after.is_empty() || after.starts_with('#') || after.starts_with(';') {
            None
        } else {
            continue;
        };
        found.push(Setting {
            section: section.clone(),
            key: key.to_ascii_lowercase(),
            value,
        });
    }
    found
}

/// The section name (lowercased, subsection dropped) of a header whose
/// `[` is gone, and what follows its `]`.
fn section_header(header: &str) -> Option<(String, &str)> {
    let name_end = header
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.'))
        .unwrap_or(header.len());
    let (name, mut rest) = header.split_at(name_end);
    // `[section.sub]`: the old spelling of a subsection.
    let name = name.split('.').next().unwrap_or_default();
    if name.is_empty() {
        return None;
    }
    let spaced = rest.trim_start();
    if let Some(quoted) = spaced.strip_prefix('"') {
        let mut escaped = false;
        let mut end = None;
        for (at, c) in quoted.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    end = Some(at);
                    break;
                }
                _ => {}
            }
        }
        rest = quoted.get(end? + 1..)?;
    }
    let rest = rest.trim_start().strip_prefix(']')?;
    Some((name.to_ascii_lowercase(), rest))
}

/// A value after its `=`: quotes removed, escapes read, a comment outside
/// quotes ended, unquoted whitespace at either end dropped, and a `\` at
/// the end of a line continued on the next one of `lines`.
fn value_of<'a>(first: &'a str, lines: &mut impl Iterator<Item = &'a str>) -> String {
    let mut value = String::new();
    // Where the value ends if no more than whitespace follows: unquoted
    // trailing whitespace is dropped, quoted is kept.
    let mut kept = 0;
    let mut quoted = false;
    let mut line = first;
    'lines: loop {
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    None => {
                        // Continued on the next line.
                        kept = value.len();
                        match lines.next() {
                            Some(next) => {
                                line = next;
                                continue 'lines;
                            }
                            None => break 'lines,
                        }
                    }
                    Some('n') => value.push('\n'),
                    Some('t') => value.push('\t'),
                    Some('b') => value.push('\u{8}'),
                    Some(other) => value.push(other),
                },
                '"' => quoted = !quoted,
                '#' | ';' if !quoted => break 'lines,
                c if c.is_whitespace() && !quoted => {
                    // Kept inside the value, none at its ends.
                    if !value.is_empty() {
                        value.push(c);
                    }
                    continue;
                }
                c => value.push(c),
            }
            kept = value.len();
        }
        break;
    }
    value.truncate(kept);
    value
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn setting(section: &str, key: &str, value: Option<&str>) -> Setting {
        Setting {
            section: section.to_owned(),
            key: key.to_owned(),
            value: value.map(str::to_owned),
        }
    }

    #[test]
    fn settings_are_read_as_git_reads_them() {
        let text = "# a comment\n\
                    [core]\n\
                    \trepositoryformatversion = 0\n\
                    \tHooksPath = .githooks ; why\n\
                    [Include] path = \"../my shared.gitconfig\"\n\
                    [includeIf \"gitdir:~/work/\"]\n\
                    \tpath = ~/work.gitconfig\n\
                    [core.sub]\n\
                    \tbare\n\
                    \tfsmonitor = \"a \\\"quoted\\\" # not a comment\"\n\
                    \tpager = less \\\n\
                    \t  -R\n\
                    [broken\n\
                    \thookspath = ignored\n";
        assert_eq!(
            settings(text),
            [
                setting("core", "repositoryformatversion", Some("0")),
                setting("core", "hookspath", Some(".githooks")),
                setting("include", "path", Some("../my shared.gitconfig")),
                setting("includeif", "path", Some("~/work.gitconfig")),
                setting("core", "bare", None),
                setting("core", "fsmonitor", Some("a \"quoted\" # not a comment")),
                setting("core", "pager", Some("less \t  -R")),
            ]
        );
    }

    #[test]
    fn programs_and_scripts_named_by_path_are_found_and_those_on_path_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("ws/.git")).unwrap();
        std::fs::write(
            root.join("ws/.git/config"),
            "[filter \"crypt\"]\n\tsmudge = ./scripts/decrypt.sh %f\n\tclean = git-crypt clean\n\
             [diff \"pdf\"]\n\ttextconv = \"\\\"tools/pdf to text\\\" --x\"\n\
             [core]\n\tfsmonitor = true\n\tpager = less\n\teditor = ~/bin/ed\n\
             [alias]\n\tst = status\n\tbuild = !./build.sh all\n\
             \tlint = \"!sh scripts/lint.sh --fix&&cd web; node --require=./hook.js x.js\"\n\
             \tweb = !open https://x.invalid/a $HOME/b\n\
             [credential \"https://x\"]\n\thelper = /abs/helper get\n\
             [url \"x\"]\n\tinsteadOf = ./not/a/program\n",
        )
        .unwrap();
        let ws = root.join("ws");
        let named = named(&[ws.join(".git/config")], &ws, Some(&root.join("home")));
        assert_eq!(
            named.programs,
            [
                (
                    ws.join("./scripts/decrypt.sh"),
                    "filter.<name>.smudge".to_owned()
                ),
                (
                    ws.join("tools/pdf to text"),
                    "diff.<name>.textconv".to_owned()
                ),
                (root.join("home/bin/ed"), "core.editor".to_owned()),
                (ws.join("./build.sh"), "alias.build".to_owned()),
                (ws.join("scripts/lint.sh"), "alias.lint".to_owned()),
                (ws.join("./hook.js"), "alias.lint".to_owned()),
                (PathBuf::from("/abs/helper"), "credential.helper".to_owned()),
            ]
        );
    }

    #[test]
    fn hooks_and_includes_are_found_through_includes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("ws/.git")).unwrap();
        std::fs::create_dir_all(root.join("home")).unwrap();
        std::fs::write(
            root.join("ws/.git/config"),
            "[core]\n\thooksPath = .githooks\n[include]\n\tpath = ../shared.gitconfig\n",
        )
        .unwrap();
        std::fs::write(
            root.join("ws/shared.gitconfig"),
            "[include]\n\tpath = conf/more\n\tpath = ~/user.gitconfig\n\tpath = ~other/x\n",
        )
        .unwrap();
        std::fs::create_dir_all(root.join("ws/conf")).unwrap();
        std::fs::write(
            root.join("ws/conf/more"),
            "[core]\n\thookspath = /abs/hooks\n",
        )
        .unwrap();
        // A loop of includes ends.
        std::fs::write(
            root.join("home/user.gitconfig"),
            "[include]\n\tpath = user.gitconfig\n",
        )
        .unwrap();
        let named = named(
            &[root.join("ws/.git/config"), root.join("missing")],
            &root.join("ws"),
            Some(&root.join("home")),
        );
        assert_eq!(
            named.hooks,
            [root.join("ws/.githooks"), PathBuf::from("/abs/hooks")]
        );
        assert_eq!(
            named.includes,
            [
                root.join("ws/.git/../shared.gitconfig"),
                root.join("ws/.git/../conf/more"),
                root.join("home/user.gitconfig"),
            ]
        );
    }
}
