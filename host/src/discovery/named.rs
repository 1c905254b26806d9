//! The files a command's words or a native extension's manifest name:
//! what trust covers and no grant may write, for editing one changes what
//! runs (`sh scripts/build.sh`, `"args": ["-c", "sh ../../../run.sh"]`).

use std::path::{Path, PathBuf};

use crate::manifest::Manifest;

/// Programs that run the commands a file of the folder they run in names,
/// without a word naming it (`make` reads `Makefile`, `npm test` the
/// `scripts` of `package.json`): the file decides what runs as surely as
/// a script. (A build tool also compiles the project's sources; those are
/// the project's, not a file of commands.)
const TASK_FILES: &[(&[&str], &[&str])] = &[
    (&["make", "gmake"], &["Makefile", "makefile", "GNUmakefile"]),
    (&["npm", "pnpm", "yarn", "bun"], &["package.json"]),
    (&["just"], &["justfile", "Justfile", ".justfile"]),
    (&["rake"], &["Rakefile", "rakefile"]),
    (&["task"], &["Taskfile.yml", "Taskfile.yaml"]),
    (&["tox"], &["tox.ini"]),
    (&["nox"], &["noxfile.py"]),
];

/// What in a template's `word` may name a file: the word, or for an
/// option the value glued to it (`--file=build.mk`, `-fbuild.mk`: make,
/// awk and sed read their program so); nothing for an option alone.
fn file_in_word(word: &str) -> Option<&str> {
    if word.is_empty() {
        return None;
    }
    if !word.starts_with('-') {
        return Some(word);
    }
    match word.split_once('=') {
        Some((_, value)) => Some(value),
        None if !word.starts_with("--") => word.get(2..).filter(|value| !value.is_empty()),
        None => None,
    }
}

/// The most paths one glob of a tool's template is taken to name.
const MAX_GLOB_MATCHES: usize = 256;

/// What `word`, a glob (`scripts/*.sh`, `s*/build.sh`), matches from
/// `folder` as the shell would expand it when the line runs: each
/// component matched against the entries of the folders the ones before
/// it matched (a name starting with `.` only by a component that does).
/// At most [`MAX_GLOB_MATCHES`] paths a component, so a template's author
/// cannot make the review walk the whole disk.
fn glob_matches(folder: &Path, word: &str) -> Vec<PathBuf> {
    let mut places = vec![if word.starts_with('/') {
        PathBuf::from("/")
    } else {
        folder.to_owned()
    }];
    for component in word.split('/').filter(|c| !c.is_empty() && *c != ".") {
        if !component.contains(['*', '?', '[']) {
            for place in &mut places {
                place.push(component);
            }
            continue;
        }
        let Ok(glob) = globset::GlobBuilder::new(component)
            .literal_separator(true)
            .build()
        else {
            return Vec::new();
        };
        let matcher = glob.compile_matcher();
        let mut matched = Vec::new();
        'places: for place in &places {
            let Ok(entries) = std::fs::read_dir(place) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let hidden = name.as_encoded_bytes().starts_with(b".");
                if (hidden && !component.starts_with('.')) || !matcher.is_match(&name) {
                    continue;
                }
                matched.push(place.join(&name));
                if matched.len() >= MAX_GLOB_MATCHES {
                    break 'places;
                }
            }
        }
        places = matched;
    }
    places
}

/// Reads the words of a command for the files they may name: the words as
/// the guard's deny rules read a command (`sh scripts/"build.sh"` names
/// `scripts/build.sh`), but as written: the program with its path
/// (`./scripts/build.sh`), a redirection's target (`sh < scripts/build.sh`),
/// a file glued to an option (`make --file=build.mk`, `awk -fprog.awk`),
/// Python's `-m scripts.tool`, and the file of commands a task runner
/// reads where it runs ([`TASK_FILES`]: `make`'s `Makefile`, `npm`'s
/// `package.json`); a glob names what it matches now (`sh
/// s*/build.sh`); a word of several words is read again as a line of its
/// own, for it may be a script handed to a shell (`bash -c "sh
/// scripts/build.sh"`). Each is tried from every folder in `folders`: the
/// one the command runs in, then each an earlier `cd` (or `make -C`) of
/// the line went to.
/// Trying a word that names no file costs nothing but the look. A name the
/// line computes as it runs (`sh "$SCRIPT"`, what `find -exec` finds) is
/// not followed.
pub(crate) struct NamedFiles<'a> {
    folders: Vec<PathBuf>,
    /// A template's `{arg}` is the model's to fill; in a native
    /// extension's arguments it is two braces and a word, like any other.
    model_fills_arg: bool,
    named: &'a mut Vec<PathBuf>,
}

impl<'a> NamedFiles<'a> {
    /// Lines read inside one another before the rest is left as words.
    const MAX_DEPTH: usize = 4;
    /// Folders a line's `cd`s lead to that words are tried from: every word
    /// is tried from each, so an author's line of thousands of `cd`s and
    /// words cannot make a review look up millions of paths.
    const MAX_FOLDERS: usize = 16;

    /// A reader of the commands run in `folder` (where `model_fills_arg`
    /// when they are a template's), adding what they name to `named`.
    pub(crate) fn from(
        folder: PathBuf,
        model_fills_arg: bool,
        named: &'a mut Vec<PathBuf>,
    ) -> Self {
        Self {
            folders: vec![folder],
            model_fills_arg,
            named,
        }
    }

    /// What the command line `line` names.
    pub(crate) fn line(&mut self, line: &str) {
        self.line_at(line, 0);
    }

    fn line_at(&mut self, line: &str, depth: usize) {
        for words in crate::guard::deny::simple_commands(line) {
            self.words_at(&words, depth);
        }
    }

    /// What the words of one command, split already, name.
    pub(crate) fn words(&mut self, words: &[String]) {
        self.words_at(words, 0);
    }

    fn words_at(&mut self, words: &[String], depth: usize) {
        // `make -C x` runs in `x`: its `Makefile` is read there.
        for pair in words.windows(2) {
            if pair[0] == "-C"
                && !(self.model_fills_arg && pair[1].contains("{arg}"))
                && self.folders.len() < Self::MAX_FOLDERS
                && let Some(base) = self.folders.first()
            {
                let folder = base.join(&pair[1]);
                self.folders.push(folder);
            }
        }
        for (index, word) in words.iter().enumerate() {
            let Some(word) = file_in_word(word) else {
                continue;
            };
            // A script handed to a shell, however short (`sh<run.sh`).
            if depth < Self::MAX_DEPTH
                && word.contains(|c: char| c.is_whitespace() || "<>|;&".contains(c))
            {
                self.line_at(word, depth + 1);
            }
            if self.model_fills_arg && word.contains("{arg}") {
                continue;
            }
            let after = |option: &str| index > 0 && words[index - 1] == option;
            // `cd x`, `cd -- x`, `pushd x`: from where the line is now.
            let changes_folder = |at: usize| matches!(words[at].as_str(), "cd" | "pushd");
            let entered = (index > 0 && changes_folder(index - 1))
                || (index > 1 && words[index - 1] == "--" && changes_folder(index - 2));
            if entered
                && self.folders.len() < Self::MAX_FOLDERS
                && let Some(now) = self.folders.last()
            {
                let folder = now.join(word);
                self.folders.push(folder);
            }
            let program = word.rsplit('/').next().unwrap_or(word);
            let task_files = TASK_FILES
                .iter()
                .find(|(programs, _)| programs.contains(&program))
                .map_or(&[][..], |(_, files)| *files);
            // Python's `-m scripts.tool` runs `scripts/tool.py`, or the
            // package's `__main__.py`.
            let module = word.replace('.', "/");
            let modules = after("-m").then(|| {
                [
                    format!("{module}.py"),
                    format!("{module}/__main__.py"),
                    format!("{module}/__init__.py"),
                ]
            });
            let glob = word.contains(['*', '?', '[']);
            let braced = braces(word);
            for folder in &self.folders {
                self.named.push(folder.join(word));
                // A folder Python runs (its `__main__.py`).
                self.named.push(folder.join(word).join("__main__.py"));
                for each in &braced {
                    self.named.push(folder.join(each));
                }
                for file in modules.iter().flatten() {
                    self.named.push(folder.join(file));
                }
                for file in task_files {
                    self.named.push(folder.join(file));
                }
                if glob {
                    self.named.extend(glob_matches(folder, word));
                }
            }
        }
    }
}

/// The words a shell's brace expansion makes of `word` (`scripts/{run,x}.sh`:
/// `scripts/run.sh`, `scripts/x.sh`), its first group expanded, at most 64;
/// none when it has no group.
fn braces(word: &str) -> Vec<String> {
    let Some(open) = word.find('{') else {
        return Vec::new();
    };
    let Some(close) = word[open..].find('}').map(|at| open + at) else {
        return Vec::new();
    };
    let inside = &word[open + 1..close];
    if !inside.contains(',') {
        return Vec::new();
    }
    let (before, after) = (&word[..open], &word[close + 1..]);
    inside
        .split(',')
        .take(64)
        .map(|each| format!("{before}{each}{after}"))
        .collect()
}

/// Interpreters whose first operand is the script they run.
const INTERPRETERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "python", "python3", "node", "perl", "ruby",
];

/// What a shell script runs by name, as written in it: what `.` and
/// `source` read, the script an interpreter is given (`sh x.sh`, `python3
/// tool.py`), and a program named by its path (`./build.sh`, `exec
/// ../bin/run`), each from the folder the script's `cd`s reached (as
/// paths from where it started). Not every word: a script names the files
/// it writes too, and covering those would revoke trust at the script's
/// first run.
pub(crate) fn scripts_a_script_runs(text: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut here = PathBuf::new();
    for words in crate::guard::deny::simple_commands(text) {
        let mut at = words
            .iter()
            .position(|word| !word.contains('=') || word.starts_with('='));
        while let Some(index) = at {
            let program = words[index].as_str();
            let name = program.rsplit('/').next().unwrap_or(program);
            let operand = words[index + 1..]
                .iter()
                .find(|word| !word.starts_with('-'));
            at = None;
            if matches!(name, "cd" | "pushd") {
                if let Some(folder) = operand {
                    here.push(folder);
                }
            } else if matches!(name, "." | "source") || INTERPRETERS.contains(&name) {
                found.extend(operand.map(|script| here.join(script)));
            } else if name == "exec" || name == "command" {
                at = Some(index + 1).filter(|next| *next < words.len());
            } else if program.contains('/') {
                found.push(here.join(program));
            }
        }
    }
    found
}

/// The files `manifest` makes zot or zotbox run, as paths from its
/// folder: the `exec` when it is a path, what its arguments name as a
/// command's words do ([`NamedFiles`]: an interpreter's script, a script
/// handed to `sh -c`, a module, and what the program is given), and the
/// `wasm` file. Whether each exists, and is a file, is the caller's
/// question: most arguments name none.
pub(crate) fn named_paths(manifest: &Manifest) -> Vec<PathBuf> {
    let dir = &manifest.dir;
    let mut named = Vec::new();
    if let Some(exec) = &manifest.raw.exec
        && exec.contains('/')
    {
        named.push(dir.join(exec));
    }
    NamedFiles::from(dir.clone(), false, &mut named).words(&manifest.raw.args);
    if let crate::manifest::Program::Wasm { path } = &manifest.program {
        named.push(path.clone());
    }
    named
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attack: a template (or a native manifest's `sh -c` line) of a
    /// thousand `cd`s, each word tried from every folder the line went to,
    /// made a trust review look up about a million paths.
    #[test]
    fn a_line_of_many_cds_is_read_from_a_bounded_number_of_folders() {
        let line: String = (0..1000).map(|i| format!("cd d{i}; ")).collect();
        let mut named = Vec::new();
        NamedFiles::from(PathBuf::from("/ws"), true, &mut named).line(&format!("{line}sh run.sh"));
        assert!(named.len() < 100_000, "{} paths", named.len());
        // The first folders are still tried.
        assert!(named.contains(&PathBuf::from("/ws/d0/d1/run.sh")));
    }
}
