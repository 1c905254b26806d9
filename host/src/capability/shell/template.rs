//! A data `shell` tool's command template: split once at load, so the
//! model's `{arg}` is one argument wherever the template puts it.
//!
//! Rules, each with a named attack test below:
//!
//! 1. **No shell by default.** A template is split into words once, as the
//!    shell would split plain words (quotes group, a backslash escapes), and
//!    the program runs by `execve`, never `sh -c`. Every `{arg}` becomes part
//!    of exactly one argv element: bare (`grep {arg}`), quoted
//!    (`grep '{arg}'`, `"{arg}"`) or glued (`--grep={arg}`), the argument is
//!    never split, expanded or run.
//! 2. **Shell syntax must be declared.** A template without `"shell": true`
//!    that holds anything a shell would treat specially outside quotes
//!    (operators, expansions, globs, `~`, comments, newlines) is refused at
//!    load, naming the character: under `execve` it would mean something
//!    other than what its author saw.
//! 3. **In a shell template, `{arg}` is a bare word.** With `"shell": true`
//!    the template runs with `sh -c` and every `{arg}` is replaced by one
//!    single-quoted word; a quoted (`'{arg}'`, `"{arg}"`) or glued
//!    (`x{arg}`) placeholder would let the argument close the quotes, so it
//!    is refused at load, as is one inside a here-document or an arithmetic
//!    expansion, where quotes do not protect it.
//! 4. **Never code, never the program.** `{arg}` may not be (part of) the
//!    program, also after a reserved word (`then {arg}`, `! {arg}`), nor
//!    what a wrapper may run as one (`env {arg}`, `timeout 5
//!    {arg}`, `find -exec {arg}`), nor the script of a shell, interpreter,
//!    `sed` or `awk` (`sh -c '… {arg}'`, `python3 -c`, `sed -n {arg}`,
//!    `eval … {arg}`, `trap {arg} EXIT`), nor what a pipe feeds an
//!    interpreter, `xargs` or `awk` (`echo {arg} | sh`), in either kind of
//!    template; a redirection before it (`</dev/null {arg}`) changes none
//!    of that. The lists of programs are
//!    best effort (no list names every program that runs its argument); the
//!    kernel sandbox holds what runs. A shell template with `{arg}` holds no
//!    backquote, in which a quote does not end where it seems.
//! 5. **Never an option the template did not intend.** At call time, an
//!    argument that begins with `-` is refused when it lands at the start of
//!    a word and no `--` word comes before it in the template.
//! 6. **Never a path outside the workspace.** At call time, the word the
//!    argument lands in (or an option's value there, `--file={arg}`) may not
//!    be an absolute path nor climb out of the folder it starts from with
//!    `..`; what it names through a link is checked where the command runs
//!    ([`super::run`]). The system folders stay readable to the command (a
//!    template may name `/etc/hosts`); the model's argument does not reach
//!    them.

use std::borrow::Cow;

use super::quote;
use crate::capability::{Capability, CapabilityError};

/// The placeholder the argument replaces.
pub const PLACEHOLDER: &str = "{arg}";

/// Programs that run an argument as code after one of their code flags.
const INTERPRETERS: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "mksh",
    "ash",
    "busybox",
    "fish",
    "python",
    "python2",
    "python3",
    "perl",
    "ruby",
    "node",
    "nodejs",
    "php",
    "lua",
    "tclsh",
    "osascript",
    "pwsh",
];

/// Programs that run a program a later word names (`env CMD`, `xargs
/// CMD`, `timeout 5 CMD`). Best effort, as every such list: the kernel
/// sandbox holds whatever runs.
const WRAPPERS: &[&str] = &[
    "env", "xargs", "nice", "nohup", "timeout", "stdbuf", "sudo", "doas", "command", "exec",
    "builtin", "time", "setsid", "ionice", "taskset", "chrt", "numactl", "watch", "strace",
    "ltrace", "chroot", "unshare", "nsenter", "flock", "runuser", "su", "parallel",
];

/// Words a shell reads before a command's program (`if {arg}; then`,
/// `do {arg}; done`, `! {arg}`, `{ {arg}; }`): the word after one is the
/// program.
const RESERVED: &[&str] = &[
    "!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until",
];

/// Builtins that run their first operand as shell code, as `eval` does
/// (`trap {arg} EXIT` runs it when the shell exits).
const EVALUATING: &[&str] = &["eval", "trap"];

/// `find`'s actions that run the program the next word names.
const FIND_ACTIONS: &[&str] = &["-exec", "-execdir", "-ok", "-okdir"];

/// Programs whose first operand is a script unless a flag gives one: what
/// their script flags, script-file flags and other flags taking a value are.
const SCRIPTED: &[(&[&str], Flags)] = &[
    (
        &["sed", "gsed"],
        Flags {
            code: &["-e", "--expression"],
            file: &["-f", "--file"],
            value: &["-l", "--line-length"],
        },
    ),
    (
        &["awk", "gawk", "mawk", "nawk"],
        Flags {
            code: &["-e", "--source"],
            file: &["-f", "--file"],
            value: &["-F", "-v", "--field-separator", "--assign"],
        },
    ),
];

/// The flags of a program in [`SCRIPTED`].
struct Flags {
    code: &'static [&'static str],
    file: &'static [&'static str],
    value: &'static [&'static str],
}

/// The flags after which an interpreter's next word is code.
const CODE_FLAGS: &[&str] = &[
    "-c",
    "-e",
    "-E",
    "-p",
    "-r",
    "--eval",
    "--print",
    "--command",
];

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    source: String,
    mode: Mode,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    /// Plain words, run by `execve`.
    Exec(Vec<Word>),
    /// Shell syntax, run by `sh -c`; `{arg}` only as bare words.
    Shell {
        /// Whether some `{arg}` could be read as an option (no `--` before it).
        option_risk: bool,
    },
}

/// One argv element of an `execve` template.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Word {
    parts: Vec<Part>,
    /// A `--` word comes before this one.
    after_dashdash: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Arg,
}

impl Word {
    fn has_arg(&self) -> bool {
        self.parts.contains(&Part::Arg)
    }

    /// The word's text when it holds no placeholder.
    fn literal(&self) -> Option<String> {
        let mut text = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => text.push_str(t),
                Part::Arg => return None,
            }
        }
        Some(text)
    }

    /// Whether the argument lands at the start of the word, where a leading
    /// `-` makes it an option.
    fn arg_leads(&self) -> bool {
        self.parts
            .iter()
            .find(|part| !matches!(part, Part::Text(t) if t.is_empty()))
            == Some(&Part::Arg)
    }

    fn seen(&self) -> Seen {
        Seen {
            text: self.render(PLACEHOLDER),
            has_arg: self.has_arg(),
        }
    }

    fn render(&self, arg: &str) -> String {
        self.parts
            .iter()
            .map(|part| match part {
                Part::Text(t) => t.as_str(),
                Part::Arg => arg,
            })
            .collect()
    }

    /// The word as a shell would need it written: text quoted only where
    /// needed, the argument always single-quoted.
    fn shown(&self, arg: &str) -> String {
        let shown: String = self
            .parts
            .iter()
            .map(|part| match part {
                Part::Text(t) if t.is_empty() => String::new(),
                Part::Text(t) => quote_if_needed(t),
                Part::Arg => quote(arg),
            })
            .collect();
        if shown.is_empty() {
            "''".to_owned()
        } else {
            shown
        }
    }
}

/// What a rendered template runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    /// `sh -c` with this command line.
    Shell(String),
    /// `execve` of the program (looked up on the safe `PATH`) with these
    /// arguments; the first element is the program.
    Exec(Vec<String>),
}

/// A template with its argument applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The command as one shell line (the argument single-quoted): what the
    /// guard chain, deny rules and the audit log see.
    pub shown: String,
    /// What runs.
    pub invocation: Invocation,
    /// The paths the argument lands in, relative to where the command
    /// runs: each word holding it, or an option's value there (rule 6).
    pub arg_paths: Vec<String>,
}

impl Template {
    /// Parses `source`; `shell` is the manifest's `"shell": true`.
    ///
    /// # Errors
    ///
    /// Why the template is refused, as a phrase naming the rule (see the
    /// module docs).
    pub fn parse(source: &str, shell: bool) -> Result<Self, String> {
        if source.contains('\0') {
            return Err("contains a NUL byte".to_owned());
        }
        let mode = if shell {
            check_shell(source)?
        } else {
            Mode::Exec(split_exec(source)?)
        };
        Ok(Self {
            source: source.to_owned(),
            mode,
        })
    }

    /// The template as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the template runs with `sh -c`.
    pub fn is_shell(&self) -> bool {
        matches!(self.mode, Mode::Shell { .. })
    }

    /// Applies `arg` (absent means empty).
    ///
    /// # Errors
    ///
    /// [`CapabilityError::Denied`] (`shell`, the shown command) when the
    /// argument begins with `-` where the template would hand it over as an
    /// option (rule 5).
    pub fn render(&self, arg: Option<&str>) -> Result<Rendered, CapabilityError> {
        let arg = arg.unwrap_or("");
        let (rendered, option_risk) = match &self.mode {
            Mode::Shell { option_risk } => {
                let shown = self.source.replace(PLACEHOLDER, &quote(arg));
                let rendered = Rendered {
                    invocation: Invocation::Shell(shown.clone()),
                    shown,
                    // A bare word: an operand, or refused as an option below.
                    arg_paths: Some(arg.to_owned())
                        .filter(|arg| !arg.is_empty())
                        .into_iter()
                        .collect(),
                };
                (rendered, *option_risk)
            }
            Mode::Exec(words) => {
                let risk = words
                    .iter()
                    .any(|w| w.has_arg() && w.arg_leads() && !w.after_dashdash);
                let shown = words
                    .iter()
                    .map(|w| w.shown(arg))
                    .collect::<Vec<_>>()
                    .join(" ");
                let argv: Vec<String> = words.iter().map(|w| w.render(arg)).collect();
                let arg_paths = words
                    .iter()
                    .zip(&argv)
                    .filter(|(word, _)| word.has_arg())
                    .flat_map(|(word, rendered)| {
                        // After `--` the whole word is an operand.
                        if word.after_dashdash {
                            vec![rendered.clone()]
                        } else {
                            paths_in_word(rendered)
                        }
                    })
                    .filter(|path| !path.is_empty())
                    .collect();
                let rendered = Rendered {
                    shown,
                    invocation: Invocation::Exec(argv),
                    arg_paths,
                };
                (rendered, risk)
            }
        };
        if option_risk && arg.starts_with('-') {
            return Err(CapabilityError::denied(
                Capability::Shell,
                rendered.shown,
                "the argument begins with `-`, so the program would read it as an option; the \
                 template puts no `--` before `{arg}`",
            ));
        }
        if let Some(path) = rendered.arg_paths.iter().find(|path| climbs_out(path)) {
            let path = crate::text::shown(path).into_owned();
            return Err(CapabilityError::denied(
                Capability::Shell,
                rendered.shown,
                format!(
                    "the argument makes `{path}` a path outside the workspace; a tool's \
                     argument names only the workspace's files"
                ),
            ));
        }
        Ok(rendered)
    }
}

/// The paths a word holding the argument may name: the word (not an
/// option), what follows the `=` of a `key=value` (`--file=x`, `dd`'s
/// `if=x`), and in
/// a cluster of short options what follows the first of them that may
/// take a value (`-fx`, `tar`'s `-tvf/etc/x`: from its first `/` or `.`).
fn paths_in_word(word: &str) -> Vec<String> {
    let mut paths = Vec::new();
    if !word.starts_with('-') {
        paths.push(word.to_owned());
    }
    // `key=value`, not a path holding a `=` (`docs/a=b`).
    if let Some((key, value)) = word.split_once('=')
        && !key.contains('/')
    {
        paths.push(value.to_owned());
    }
    if let Some(cluster) = word.strip_prefix('-').filter(|w| !w.starts_with('-')) {
        paths.extend(cluster.get(1..).map(str::to_owned));
        if let Some(at) = cluster.find(['/', '.']) {
            paths.push(cluster[at..].to_owned());
        }
    }
    paths
}

/// Whether `path`, from the folder it is read in, is absolute or climbs
/// out of that folder with `..` (`a/../../x`).
pub(super) fn climbs_out(path: &str) -> bool {
    if path.starts_with('/') {
        return true;
    }
    let mut depth = 0usize;
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => match depth.checked_sub(1) {
                Some(up) => depth = up,
                None => return true,
            },
            _ => depth += 1,
        }
    }
    false
}

/// Text as one shell word, quoted only when a shell would treat a
/// character specially.
fn quote_if_needed(text: &str) -> String {
    let plain = |(i, c): (usize, char)| {
        c.is_ascii_alphanumeric()
            || matches!(
                c,
                '_' | '-' | '.' | ',' | '/' | ':' | '@' | '%' | '+' | '=' | '^'
            )
            || (i > 0 && matches!(c, '~' | '#'))
    };
    if !text.is_empty() && text.chars().enumerate().all(plain) {
        text.to_owned()
    } else {
        quote(text)
    }
}

/// A character for a message: in backticks, except the backtick itself.
fn named(c: char) -> String {
    match c {
        '`' => "a backtick".to_owned(),
        '\n' | '\r' => "a newline".to_owned(),
        c => format!("`{c}`"),
    }
}

/// Splits an `execve` template into words (rule 1), refusing shell syntax
/// (rule 2), then checks rule 4.
fn split_exec(source: &str) -> Result<Vec<Word>, String> {
    #[derive(PartialEq)]
    enum State {
        Plain,
        Single,
        Double,
    }
    let declare = |what: String| {
        format!(
            "{what}, which only a shell understands; add `\"shell\": true` to run it with `sh`, or quote it"
        )
    };
    let mut words: Vec<Word> = Vec::new();
    let mut parts: Vec<Part> = Vec::new();
    let mut text = String::new();
    let mut in_word = false;
    let mut state = State::Plain;
    let mut rest = source;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with(PLACEHOLDER) {
            if !text.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut text)));
            }
            parts.push(Part::Arg);
            in_word = true;
            rest = &rest[PLACEHOLDER.len()..];
            continue;
        }
        rest = &rest[c.len_utf8()..];
        match state {
            State::Single => {
                if c == '\'' {
                    state = State::Plain;
                } else {
                    text.push(c);
                }
            }
            State::Double => match c {
                '"' => state = State::Plain,
                '\\' => match rest.chars().next() {
                    Some(next @ ('$' | '`' | '"' | '\\')) => {
                        text.push(next);
                        rest = &rest[1..];
                    }
                    Some('\n') => rest = &rest[1..],
                    _ => text.push('\\'),
                },
                '$' | '`' => {
                    return Err(declare(format!(
                        "{} inside double quotes is an expansion",
                        named(c)
                    )));
                }
                _ => text.push(c),
            },
            State::Plain => match c {
                ' ' | '\t' => {
                    if in_word {
                        if !text.is_empty() {
                            parts.push(Part::Text(std::mem::take(&mut text)));
                        }
                        let after_dashdash =
                            guarded_by_dashdash(words.iter().map(|w| w.literal().map(Cow::Owned)));
                        words.push(Word {
                            parts: std::mem::take(&mut parts),
                            after_dashdash,
                        });
                        in_word = false;
                    }
                }
                '\'' => {
                    state = State::Single;
                    in_word = true;
                }
                '"' => {
                    state = State::Double;
                    in_word = true;
                }
                '\\' => match rest.chars().next() {
                    Some('\n') | None => {
                        return Err(declare("a trailing backslash joins lines".to_owned()));
                    }
                    Some(next) => {
                        text.push(next);
                        rest = &rest[next.len_utf8()..];
                        in_word = true;
                    }
                },
                '\n' | '\r' => {
                    return Err(declare("a newline separates commands".to_owned()));
                }
                ';' | '&' | '|' | '<' | '>' | '(' | ')' => {
                    return Err(declare(format!("`{c}` is a shell operator")));
                }
                '$' | '`' => return Err(declare(format!("{} is an expansion", named(c)))),
                '*' | '?' | '[' | '{' | '}' => {
                    return Err(declare(format!("`{c}` would be expanded by a shell")));
                }
                '~' if !in_word || text.ends_with(['=', ':']) => {
                    return Err(declare(
                        "`~` at the start of a word (or after `=` or `:`) is an expansion"
                            .to_owned(),
                    ));
                }
                '#' if !in_word => {
                    return Err(declare(
                        "`#` at the start of a word starts a comment".to_owned(),
                    ));
                }
                c => {
                    text.push(c);
                    in_word = true;
                }
            },
        }
    }
    if state != State::Plain {
        return Err("has unbalanced quotes".to_owned());
    }
    if in_word {
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        let after_dashdash = guarded_by_dashdash(words.iter().map(|w| w.literal().map(Cow::Owned)));
        words.push(Word {
            parts,
            after_dashdash,
        });
    }
    let Some(program) = words.first() else {
        return Err("is empty".to_owned());
    };
    if program.has_arg() {
        return Err("puts `{arg}` in the program name; name the program exactly".to_owned());
    }
    let seen: Vec<Seen> = words.iter().map(Word::seen).collect();
    check_code(&seen)?;
    Ok(words)
}

/// One word as rule 4 sees it: its text with `{arg}` written as is, and
/// whether it holds the placeholder.
#[derive(Debug)]
struct Seen {
    text: String,
    has_arg: bool,
}

impl Seen {
    fn literal(&self) -> Option<&str> {
        (!self.has_arg).then_some(self.text.as_str())
    }
}

/// Rule 5: whether a word after `before` (the words before it in its
/// simple command, `None` for one holding `{arg}`) follows a `--` that is
/// the program's own: a `--` with only options (or other `{arg}`s) after
/// it. A word that is neither may be a program a wrapper runs (`timeout --
/// 5 git show {arg}`), for which an earlier `--` means nothing.
fn guarded_by_dashdash<'a>(before: impl DoubleEndedIterator<Item = Option<Cow<'a, str>>>) -> bool {
    for word in before.rev() {
        match word.as_deref() {
            Some("--") => return true,
            Some(option) if option.starts_with('-') => {}
            None => {}
            Some(_) => return false,
        }
    }
    false
}

/// Rule 4 over one simple command.
fn check_code(words: &[Seen]) -> Result<(), String> {
    let code = |name: &str| {
        format!(
            "puts `{{arg}}` in the code `{name}` runs, where the argument would run as code; \
             pass it as a word of its own (`sh -c '… \"$1\"' sh {{arg}}`)"
        )
    };
    check_programs(words)?;
    for (i, word) in words.iter().enumerate() {
        let Some(literal) = word.literal() else {
            continue;
        };
        let name = literal.rsplit('/').next().unwrap_or(literal);
        if FIND_ACTIONS.contains(&name) {
            check_wrapped(name, &words[i + 1..])?;
        }
        if !is_interpreter(name) {
            continue;
        }
        let mut code_next = false;
        for later in &words[i + 1..] {
            // The code is the first word after a code flag that is not
            // itself an option (`sh -e -c CODE`).
            if code_next && (later.has_arg || !later.text.starts_with('-')) {
                if later.has_arg {
                    return Err(code(name));
                }
                break;
            }
            // `-c{arg}`: the code glued to its flag.
            if later.has_arg
                && CODE_FLAGS
                    .iter()
                    .any(|f| f.len() == 2 && later.text.starts_with(f))
            {
                return Err(code(name));
            }
            let flag = later.text.as_str();
            let cluster = !later.has_arg
                && flag.len() > 2
                && flag.starts_with('-')
                && !flag.starts_with("--")
                && flag[1..].chars().all(|c| c.is_ascii_alphabetic())
                && flag[1..].contains(['c', 'e']);
            if (!later.has_arg && CODE_FLAGS.contains(&flag)) || cluster {
                code_next = true;
            }
        }
    }
    Ok(())
}

/// Whether `name` is one of [`INTERPRETERS`], versioned or not
/// (`python3.11`).
fn is_interpreter(name: &str) -> bool {
    INTERPRETERS.iter().any(|known| {
        name.strip_prefix(known)
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
    })
}

/// Where a simple command's program is: its first word that is neither
/// an assignment, a reserved word, nor a redirection or its target
/// (`</dev/null {arg}`, `2>&1 {arg}`, `> out {arg}` run the argument).
fn program_at(words: &[Seen]) -> Option<usize> {
    let mut index = 0;
    while let Some(word) = words.get(index) {
        if word.has_arg {
            return Some(index);
        }
        match redirection(&word.text) {
            // The operator alone: its target is the next word.
            Some(true) => index += 2,
            Some(false) => index += 1,
            None if word.text.contains('=') || RESERVED.contains(&word.text.as_str()) => {
                index += 1;
            }
            None => return Some(index),
        }
    }
    None
}

/// Whether `word` is a redirection: `Some(true)` for the operator alone
/// (`>`, `2>>`, `<`), whose target is the next word, `Some(false)` for
/// one that holds its target (`>/dev/null`, `2>&1`, `<in`).
fn redirection(word: &str) -> Option<bool> {
    let rest = word.trim_start_matches(|c: char| c.is_ascii_digit());
    let target = ["<<<", ">>", ">|", "<>", "<<", ">&", "<&", ">", "<"]
        .iter()
        .find_map(|operator| rest.strip_prefix(operator))?;
    Some(target.is_empty())
}

/// Rule 4 for the programs a simple command runs: its first word that is
/// not an assignment or a reserved word, then each program a wrapper
/// there runs. `{arg}` is none of them, not code for `eval` or `trap` nor
/// the script of a program in [`SCRIPTED`]. (A wrapper's or `sed`'s name
/// elsewhere, as in `grep -rn exec {arg}`, is only a word.)
fn check_programs(words: &[Seen]) -> Result<(), String> {
    let mut at = program_at(words);
    while let Some(i) = at {
        let word = &words[i];
        let Some(literal) = word.literal() else {
            return Err("puts `{arg}` in the program name; name the program exactly".to_owned());
        };
        let name = literal.rsplit('/').next().unwrap_or(literal);
        let after = &words[i + 1..];
        if EVALUATING.contains(&name) && after.iter().any(|w| w.has_arg) {
            return Err(format!(
                "passes `{{arg}}` to `{name}`, which would run it as shell code"
            ));
        }
        if let Some((_, flags)) = SCRIPTED.iter().find(|(names, _)| names.contains(&name)) {
            check_scripted(name, flags, after)?;
        }
        at = if WRAPPERS.contains(&name) {
            check_wrapped(name, after)?.map(|program| i + 1 + program)
        } else {
            None
        };
    }
    Ok(())
}

/// Programs besides the interpreters that run what they read, or hand it
/// to a program as its words (`xargs sh -c`, `awk '{system($0)}'`, `.
/// /dev/stdin`).
const RUNNERS: &[&str] = &[
    "xargs", "parallel", "awk", "gawk", "mawk", "nawk", ".", "source", "eval",
];

/// Rule 4 for a simple command a pipe feeds what an earlier command of
/// its pipeline made of `{arg}` (`echo {arg} | sh`): none of its words may
/// name an interpreter or a program of [`RUNNERS`], however it is given
/// its code (`sh -s`, `sh /dev/stdin`, `env -i sh`, `xargs -I% sh -c %`).
/// Broader than it must be (`| sh ./count.sh` is refused too): which of
/// an interpreter's words is its script depends on every option it has.
fn check_fed(words: &[Seen]) -> Result<(), String> {
    for word in words {
        let Some(literal) = word.literal() else {
            continue;
        };
        let name = literal.rsplit('/').next().unwrap_or(literal);
        if is_interpreter(name) || RUNNERS.contains(&name) {
            return Err(format!(
                "pipes what it makes of `{{arg}}` into `{name}`, which may run what it reads \
                 as code; give `{name}` a script file and pass `{{arg}}` to it as a word"
            ));
        }
    }
    Ok(())
}

/// Rule 4 after a wrapper: `{arg}` anywhere before the program it runs is
/// named, which may be the program (options, their values, assignments
/// and numbers skipped, as the wrapper may read them; `--` ends them).
/// Where in `after` that program is, when the template names one.
fn check_wrapped(wrapper: &str, after: &[Seen]) -> Result<Option<usize>, String> {
    let mut maybe_value = false;
    for (index, word) in after.iter().enumerate() {
        if word.has_arg {
            return Err(format!(
                "puts `{{arg}}` where `{wrapper}` may read it as the program to run (or as \
                 code); name that program in the template, after `--` if options come first"
            ));
        }
        let text = word.text.as_str();
        if text == "--" {
            maybe_value = false;
        } else if text.starts_with('-') && text.len() > 1 {
            maybe_value = true;
        } else if maybe_value
            || text.contains('=')
            || text.chars().all(|c| c.is_ascii_digit() || c == '.')
        {
            maybe_value = false;
        } else {
            // The program, named by the template.
            return Ok(Some(index));
        }
    }
    Ok(None)
}

/// Rule 4 for a program in [`SCRIPTED`]: `{arg}` may not be its script,
/// given by a flag (`sed -e {arg}`, `-e{arg}`) or as the first operand
/// when no flag gives one (`sed -n {arg} file`, `awk {arg}`).
fn check_scripted(name: &str, flags: &Flags, after: &[Seen]) -> Result<(), String> {
    let code = || {
        Err(format!(
            "puts `{{arg}}` in the script `{name}` runs, where the argument would run as code \
             (`{name}` scripts can run commands and write files); keep the script in the \
             template"
        ))
    };
    let mut script_given = false;
    let mut next_is_code = false;
    let mut next_is_value = false;
    let mut options_ended = false;
    for word in after {
        let text = word.text.as_str();
        if std::mem::take(&mut next_is_code) {
            if word.has_arg {
                return code();
            }
            continue;
        }
        if std::mem::take(&mut next_is_value) {
            continue;
        }
        let option = !options_ended && text.starts_with('-') && text.len() > 1;
        if word.has_arg {
            let glued_code = option && flags.code.iter().any(|flag| text.starts_with(flag));
            if glued_code || (!option && !script_given) {
                return code();
            }
            continue;
        }
        if !option {
            // The script, when no flag gave one; then operands.
            script_given = true;
        } else if text == "--" {
            options_ended = true;
        } else if flags.code.contains(&text) {
            (script_given, next_is_code) = (true, true);
        } else if flags.file.contains(&text) {
            (script_given, next_is_value) = (true, true);
        } else if flags.value.contains(&text) {
            next_is_value = true;
        } else if flags
            .code
            .iter()
            .chain(flags.file)
            .any(|flag| text.starts_with(flag))
        {
            // `-e'1d'`, `--file=x.sed`.
            script_given = true;
        }
    }
    Ok(())
}

/// Checks a `"shell": true` template (rules 3 and 4).
fn check_shell(source: &str) -> Result<Mode, String> {
    let bare = |how: &str| {
        format!("{how}; in a shell template `{{arg}}` must be a bare word, which is quoted for you")
    };
    // Characters that end a word next to a bare placeholder.
    let boundary = |c: Option<char>| {
        c.is_none_or(|c| {
            matches!(
                c,
                ' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')'
            )
        })
    };
    // Where quotes do not protect a word, before the words are read.
    if source.contains(PLACEHOLDER) {
        if source.contains("<<") {
            return Err(
                "has a here-document, whose text a shell expands whatever the quotes; \
                 `{arg}` cannot be used safely next to it"
                    .to_owned(),
            );
        }
        if source.contains('`') {
            return Err(
                "has a backquote, inside whose command substitution a quote does not end where \
                 it seems, so the argument could close it; write `$(…)` instead"
                    .to_owned(),
            );
        }
        if source.contains("$((") || source.contains("${") {
            return Err(
                "has an arithmetic or parameter expansion, inside which quotes do not protect \
                 `{arg}`; move that part into a script and pass `{arg}` as a word"
                    .to_owned(),
            );
        }
    }
    let mut single = false;
    let mut double = false;
    let mut previous: Option<char> = None;
    let mut option_risk = false;
    // Whether the current simple command reads what a pipe (not `||`)
    // feeds it, and whether an earlier command of its pipeline holds `{arg}`.
    let mut piped = false;
    let mut arg_upstream = false;
    // The words of the current simple command, for rule 4 and `--`.
    let mut words: Vec<Seen> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut rest = source;
    fn finish(words: &mut Vec<Seen>, word: &mut String, in_word: &mut bool) {
        if *in_word {
            words.push(Seen {
                text: std::mem::take(word),
                has_arg: false,
            });
            *in_word = false;
        }
    }
    while let Some(c) = rest.chars().next() {
        if rest.starts_with(PLACEHOLDER) {
            if single {
                return Err(bare("puts `{arg}` inside single quotes"));
            }
            if double {
                return Err(bare("puts `{arg}` inside double quotes"));
            }
            let next = rest[PLACEHOLDER.len()..].chars().next();
            if in_word || !boundary(previous) || !boundary(next) {
                return Err(bare("glues `{arg}` to other characters"));
            }
            if !guarded_by_dashdash(words.iter().map(|w| w.literal().map(Cow::Borrowed))) {
                option_risk = true;
            }
            words.push(Seen {
                text: PLACEHOLDER.to_owned(),
                has_arg: true,
            });
            previous = Some('}');
            rest = &rest[PLACEHOLDER.len()..];
            continue;
        }
        rest = &rest[c.len_utf8()..];
        if single {
            if c == '\'' {
                single = false;
            } else {
                word.push(c);
            }
        } else if double {
            match c {
                '"' => double = false,
                '\\' => {
                    if let Some(next) = rest.chars().next() {
                        word.push(next);
                        rest = &rest[next.len_utf8()..];
                    }
                }
                c => word.push(c),
            }
        } else {
            match c {
                '\'' => {
                    single = true;
                    in_word = true;
                }
                '"' => {
                    double = true;
                    in_word = true;
                }
                '\\' => {
                    if let Some(next) = rest.chars().next() {
                        word.push(next);
                        rest = &rest[next.len_utf8()..];
                    }
                    in_word = true;
                }
                ' ' | '\t' => finish(&mut words, &mut word, &mut in_word),
                // `2>&1`, `<&0`: a redirection, not a background `&`.
                '&' if matches!(previous, Some('<' | '>')) => {
                    word.push(c);
                    in_word = true;
                }
                '\n' | ';' | '&' | '|' | '(' | ')' => {
                    finish(&mut words, &mut word, &mut in_word);
                    check_code(&words)?;
                    if piped && arg_upstream {
                        check_fed(&words)?;
                    }
                    let holds_arg = words.iter().any(|w| w.has_arg);
                    words.clear();
                    // `|` and `|&` feed the next command; `||` does not.
                    piped = match c {
                        '|' => previous != Some('|') && !rest.starts_with('|'),
                        '&' => previous == Some('|'),
                        _ => false,
                    };
                    arg_upstream = piped && (arg_upstream || holds_arg);
                }
                c => {
                    word.push(c);
                    in_word = true;
                }
            }
        }
        previous = Some(c);
    }
    if single || double {
        return Err("has unbalanced quotes".to_owned());
    }
    finish(&mut words, &mut word, &mut in_word);
    check_code(&words)?;
    if piped && arg_upstream {
        check_fed(&words)?;
    }
    Ok(Mode::Shell { option_risk })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn exec(template: &str, arg: &str) -> (Vec<String>, String) {
        let parsed = Template::parse(template, false).unwrap_or_else(|e| panic!("{template}: {e}"));
        let rendered = parsed.render(Some(arg)).unwrap();
        match rendered.invocation {
            Invocation::Exec(argv) => (argv, rendered.shown),
            Invocation::Shell(_) => panic!("{template} runs a shell"),
        }
    }

    fn refused(template: &str, shell: bool) -> String {
        match Template::parse(template, shell) {
            Err(reason) => reason,
            Ok(parsed) => panic!("{template:?} (shell: {shell}) was accepted: {parsed:?}"),
        }
    }

    #[test]
    fn every_placement_of_arg_is_one_argv_element_without_a_shell() {
        let attack = "$(touch pwned); `touch pwned` 'x' \"y\"\nz";
        // (template, argv with `@` for the argument, shown with `@` for it quoted)
        let cases: &[(&str, &[&str], &str)] = &[
            // Bare.
            ("printf %s {arg}", &["printf", "%s", "@"], "printf %s @"),
            // Single-quoted: the issue's `grep -rn '{arg}' .`.
            (
                "grep -rn '{arg}' .",
                &["grep", "-rn", "@", "."],
                "grep -rn @ .",
            ),
            // Double-quoted.
            (
                "grep -rn \"{arg}\" .",
                &["grep", "-rn", "@", "."],
                "grep -rn @ .",
            ),
            // Glued behind an option: the issue's `git log --grep="{arg}"`.
            (
                "git log --grep={arg}",
                &["git", "log", "--grep=@"],
                "git log --grep=@",
            ),
            (
                "git log --grep=\"{arg}\"",
                &["git", "log", "--grep=@"],
                "git log --grep=@",
            ),
            (
                "git log '--grep={arg}'",
                &["git", "log", "--grep=@"],
                "git log --grep=@",
            ),
            // Glued on both sides, and twice in one word.
            ("cat docs/{arg}.md", &["cat", "docs/@.md"], "cat docs/@.md"),
            ("echo {arg}{arg}", &["echo", "@@"], "echo @@"),
            // Inside a quoted word with spaces: still one element.
            (
                "git commit -m 'WIP: {arg}'",
                &["git", "commit", "-m", "WIP: @"],
                "git commit -m 'WIP: '@",
            ),
            // Positional parameter of a shell script: passed, never run.
            (
                "sh -c 'wc -l -- \"$1\"' sh {arg}",
                &["sh", "-c", "wc -l -- \"$1\"", "sh", "@"],
                "sh -c 'wc -l -- \"$1\"' sh @",
            ),
            // Quotes and escapes in the template's own words.
            (
                "printf \"%s\\n\" {arg}",
                &["printf", "%s\\n", "@"],
                "printf '%s\\n' @",
            ),
            (
                "echo a\\ b '' {arg}",
                &["echo", "a b", "", "@"],
                "echo 'a b' '' @",
            ),
            (
                "git diff HEAD~10 {arg}",
                &["git", "diff", "HEAD~10", "@"],
                "git diff HEAD~10 @",
            ),
        ];
        for (template, argv, shown) in cases {
            let (got, got_shown) = exec(template, attack);
            let expected: Vec<String> = argv.iter().map(|w| w.replace('@', attack)).collect();
            assert_eq!(got, expected, "{template}");
            // The shown line splits back into the same words.
            assert_eq!(
                shell_words::split(&got_shown).unwrap(),
                expected,
                "{template}"
            );
            let quoted = quote(attack);
            assert_eq!(got_shown, shown.replace('@', &quoted), "{template}");
        }
        // An absent argument is an empty element, not a missing one.
        assert_eq!(exec("ls {arg}", "").0, ["ls", ""]);
    }

    #[test]
    fn shell_syntax_without_shell_true_is_refused_at_load() {
        let declare = "which only a shell understands; add `\"shell\": true` to run it with \
                       `sh`, or quote it";
        let cases = [
            ("git log | head", "`|` is a shell operator"),
            ("cd x && ls", "`&` is a shell operator"),
            ("git status; rm -rf ~", "`;` is a shell operator"),
            ("echo pwned > out", "`>` is a shell operator"),
            ("ls *.md", "`*` would be expanded by a shell"),
            ("echo {a,b}", "`{` would be expanded by a shell"),
            ("echo $HOME", "`$` is an expansion"),
            ("echo `id`", "a backtick is an expansion"),
            ("echo \"$(id)\"", "`$` inside double quotes is an expansion"),
            (
                "cat ~/.ssh/id_rsa",
                "`~` at the start of a word (or after `=` or `:`) is an expansion",
            ),
            (
                "git status #x",
                "`#` at the start of a word starts a comment",
            ),
            ("git status\nrm -rf ~", "a newline separates commands"),
        ];
        for (template, words) in cases {
            let reason = refused(template, false);
            assert_eq!(reason, format!("{words}, {declare}"), "{template:?}");
        }
        // Declared, each of them loads.
        for (template, _) in cases {
            assert!(Template::parse(template, true).is_ok(), "{template:?}");
        }
        assert_eq!(refused("echo 'open", false), "has unbalanced quotes");
        assert_eq!(refused(" ", false), "is empty");
    }

    #[test]
    fn arg_is_never_the_program_nor_code() {
        let program = "puts `{arg}` in the program name; name the program exactly";
        let code = |name: &str| {
            format!(
                "puts `{{arg}}` in the code `{name}` runs, where the argument would run as code; \
                 pass it as a word of its own (`sh -c '… \"$1\"' sh {{arg}}`)"
            )
        };
        let cases = [
            // Attack: the argument picks the program.
            ("{arg} --version", program.to_owned()),
            ("/usr/bin/{arg}", program.to_owned()),
            // Attack: the issue's `sh -c 'wc -l {arg}'`, and its relatives.
            ("sh -c 'wc -l {arg}'", code("sh")),
            ("bash -lc \"wc -l {arg}\"", code("bash")),
            ("/bin/sh -c {arg}", code("sh")),
            ("env sh -e -c {arg}", code("sh")),
            ("timeout 5 bash -c 'echo {arg}'", code("bash")),
            ("python3 -c 'print({arg})'", code("python3")),
            ("python3.11 -c {arg}", code("python3.11")),
            ("perl -e{arg}", code("perl")),
            ("node --eval {arg}", code("node")),
        ];
        for (template, reason) in &cases {
            assert_eq!(&refused(template, false), reason, "{template}");
        }
        // A shell given a script file, or the argument after its script, is fine.
        for template in [
            "sh ./scripts/count.sh {arg}",
            "sh -c 'wc -l -- \"$1\"' sh {arg}",
        ] {
            assert!(Template::parse(template, false).is_ok(), "{template}");
        }
    }

    /// Attack: a reserved word before `{arg}` (`then {arg}`, `do {arg}`,
    /// `! {arg}`, `{ {arg}; }`) made it look like an operand while the
    /// shell runs it as the program; `trap {arg} EXIT` runs it as code, and
    /// so does an interpreter a pipe feeds. Each loaded and ran `id`.
    #[test]
    fn arg_after_a_reserved_word_or_fed_to_a_shell_is_refused() {
        let program = "puts `{arg}` in the program name; name the program exactly";
        let fed = |name: &str| {
            format!(
                "pipes what it makes of `{{arg}}` into `{name}`, which may run what it reads as \
                 code; give `{name}` a script file and pass `{{arg}}` to it as a word"
            )
        };
        let cases = [
            ("if true; then {arg}; fi", program.to_owned()),
            ("for x in a; do {arg}; done", program.to_owned()),
            ("while {arg}; do :; done", program.to_owned()),
            ("! {arg}", program.to_owned()),
            ("{ {arg}; }", program.to_owned()),
            ("if true; then X=1 {arg}; fi", program.to_owned()),
            (
                "trap {arg} EXIT",
                "passes `{arg}` to `trap`, which would run it as shell code".to_owned(),
            ),
            ("echo {arg} | sh", fed("sh")),
            ("printf '%s' {arg} |& bash -s", fed("bash")),
            ("echo {arg} | python3 -", fed("python3")),
            ("echo {arg} | xargs sh -c", fed("xargs")),
            ("echo {arg} | { sh; }", fed("sh")),
            // However the interpreter is given its code.
            ("echo {arg} | sh -o errexit", fed("sh")),
            ("echo {arg} | sh /dev/stdin", fed("sh")),
            ("echo {arg} | . /dev/stdin", fed(".")),
            ("echo {arg} | env -i sh", fed("sh")),
            ("echo {arg} | xargs -I% sh -c %", fed("xargs")),
            ("echo {arg} | sort | sh -c sh", fed("sh")),
            ("echo {arg} | awk '{system($0)}'", fed("awk")),
            // Attack: a redirection before it, read as the program.
            ("! 2>&1 {arg}", program.to_owned()),
            ("echo ok && </dev/null {arg}", program.to_owned()),
            ("if true; then >/dev/null {arg}; fi", program.to_owned()),
            ("if true; then > out.txt {arg}; fi", program.to_owned()),
        ];
        for (template, reason) in &cases {
            assert_eq!(&refused(template, true), reason, "{template}");
        }
        // `||`, a shell fed by no argument, a redirection's target, load.
        for template in [
            "cat notes.txt 2>&1 | sh ./scripts/count.sh && wc -l -- {arg}",
            "grep -- {arg} notes.txt 2>&1 || echo none",
            "wc -l -- {arg} > /dev/null 2>&1",
            "cat notes.txt | sh ./scripts/count.sh; wc -l -- {arg}",
            "if test -f notes.txt; then wc -l -- {arg}; fi",
        ] {
            assert!(Template::parse(template, true).is_ok(), "{template}");
        }
    }

    #[test]
    fn arg_is_never_the_script_of_sed_or_awk_nor_the_program_of_a_wrapper() {
        let script = |name: &str| {
            format!(
                "puts `{{arg}}` in the script `{name}` runs, where the argument would run as \
                 code (`{name}` scripts can run commands and write files); keep the script in \
                 the template"
            )
        };
        let wrapped = |name: &str| {
            format!(
                "puts `{{arg}}` where `{name}` may read it as the program to run (or as code); \
                 name that program in the template, after `--` if options come first"
            )
        };
        for shell in [false, true] {
            let cases = [
                // Attack: sed's `e` command runs a line, `w` writes a file.
                ("sed -n {arg} NOTES.md", script("sed")),
                ("sed -e {arg} NOTES.md", script("sed")),
                ("sed --expression {arg} NOTES.md", script("sed")),
                ("/usr/bin/sed -n -E {arg} NOTES.md", script("sed")),
                ("awk {arg} NOTES.md", script("awk")),
                ("gawk -F : {arg} /etc/passwd", script("gawk")),
                // Attack: a wrapper runs the argument as its program.
                ("env {arg}", wrapped("env")),
                ("env -S {arg}", wrapped("env")),
                ("env FOO=1 {arg} x", wrapped("env")),
                ("timeout 5 {arg}", wrapped("timeout")),
                ("nice -n 5 {arg}", wrapped("nice")),
                ("xargs -0 {arg}", wrapped("xargs")),
                ("find . -name x -exec {arg} \\;", wrapped("-exec")),
                ("sudo -u root {arg}", wrapped("sudo")),
                ("nice -n 5 env {arg}", wrapped("env")),
                ("FOO=1 env {arg}", wrapped("env")),
                ("timeout 5 sed -n {arg} NOTES.md", script("sed")),
                // Attack: `eval` anywhere before it.
                (
                    "eval echo {arg}",
                    "passes `{arg}` to `eval`, which would run it as shell code".to_owned(),
                ),
            ];
            for (template, reason) in &cases {
                assert_eq!(
                    &refused(template, shell),
                    reason,
                    "{template} (shell {shell})"
                );
            }
            // The argument as data beside a script or program the template names.
            for template in [
                "sed -n -e /^#/p -- {arg}",
                "sed -n 1,5p {arg}",
                "sed -f scripts/clean.sed {arg}",
                "awk -F : -- '{print}' {arg}",
                "awk -f scripts/sum.awk {arg}",
                "timeout 5 grep -n -- {arg} NOTES.md",
                "env LC_ALL=C grep -n -- {arg} NOTES.md",
                "xargs -0 -- grep -n -- {arg}",
                "find . -name {arg}",
                // A wrapper's, `sed`'s or `eval`'s name as a mere word.
                "grep -rn exec {arg}",
                "grep -n -e sed -e eval -- {arg}",
                "nice -n 5 -- grep -n -- env {arg}",
            ] {
                assert!(
                    Template::parse(template, shell).is_ok(),
                    "{template} (shell {shell}): {:?}",
                    Template::parse(template, shell).err()
                );
            }
        }
        // In a shell template too, the argument is never the program.
        assert_eq!(
            refused("cd docs && {arg} --version", true),
            "puts `{arg}` in the program name; name the program exactly"
        );
    }

    #[test]
    fn a_shell_template_takes_arg_only_as_a_bare_word() {
        let bare = "; in a shell template `{arg}` must be a bare word, which is quoted for you";
        let cases = [
            // Attack: quotes the argument could close (the issue's three templates).
            ("grep -rn '{arg}' .", "puts `{arg}` inside single quotes"),
            (
                "git log --grep=\"{arg}\"",
                "puts `{arg}` inside double quotes",
            ),
            ("sh -c 'wc -l {arg}'", "puts `{arg}` inside single quotes"),
            // Glued placements.
            (
                "git log --grep={arg} | head",
                "glues `{arg}` to other characters",
            ),
            ("cat docs/{arg}.md", "glues `{arg}` to other characters"),
            ("echo {arg}x", "glues `{arg}` to other characters"),
            ("echo \\ {arg}", "glues `{arg}` to other characters"),
        ];
        for (template, how) in cases {
            assert_eq!(
                refused(template, true),
                format!("{how}{bare}"),
                "{template}"
            );
        }
        // Attack: places where quotes do not protect a bare word.
        assert!(refused("cat <<EOF\n{arg}\nEOF", true).starts_with("has a here-document"));
        assert!(refused("echo $(( {arg} ))", true).starts_with("has an arithmetic"));
        // Attack: a single quote does not end a backquote's substitution, so
        // `'`; id; `'` closes it from inside the quoted argument (bash).
        for template in [
            "n=`grep -c {arg} NOTES.md`; echo \"$n matching lines\"",
            "echo `ls {arg}`",
            "echo {arg} # `date`",
        ] {
            assert_eq!(
                refused(template, true),
                "has a backquote, inside whose command substitution a quote does not end where \
                 it seems, so the argument could close it; write `$(…)` instead",
                "{template}"
            );
        }
        assert_eq!(
            refused("eval {arg}", true),
            "passes `{arg}` to `eval`, which would run it as shell code"
        );
        assert!(refused("ls | sh -c {arg}", true).starts_with("puts `{arg}` in the code `sh`"));
        // Bare words next to operators are fine, and quoted for `sh`.
        for template in [
            "git log {arg} | head -n 5",
            "grep -n {arg} *.md",
            "echo {arg}>out.txt",
            "(cd docs && ls {arg})",
            "echo $(printf %s {arg})",
        ] {
            let parsed =
                Template::parse(template, true).unwrap_or_else(|e| panic!("{template}: {e}"));
            let rendered = parsed.render(Some("a'b")).unwrap();
            assert_eq!(
                rendered.invocation,
                Invocation::Shell(template.replace(PLACEHOLDER, r"'a'\''b'"))
            );
        }
    }

    /// Attack: the model's argument names a file outside the workspace
    /// (`/etc/shadow` read as root, `../../.ssh/id_ed25519`), whole, glued
    /// after a folder it climbs out of, or as an option's value. Rule 6.
    #[test]
    fn an_argument_never_names_a_path_outside_the_workspace() {
        let outside = |path: &str| {
            format!(
                "the argument makes `{path}` a path outside the workspace; a tool's argument \
                 names only the workspace's files"
            )
        };
        // (template, shell, argument, the path refused)
        let cases = [
            ("cat -- {arg}", false, "/etc/hostname", "/etc/hostname"),
            ("cat -- {arg}", true, "/etc/hostname", "/etc/hostname"),
            (
                "cat -- {arg}",
                false,
                "../../.ssh/id_ed25519",
                "../../.ssh/id_ed25519",
            ),
            ("cat docs/{arg}", false, "../../x", "docs/../../x"),
            ("wc -l {arg}.md", false, "a/../../notes", "a/../../notes.md"),
            ("make --file={arg}", false, "/tmp/evil.mk", "/tmp/evil.mk"),
            ("awk -f{arg} data.txt", false, "../prog.awk", "../prog.awk"),
            (
                "dd if={arg} status=none",
                false,
                "/etc/shadow",
                "/etc/shadow",
            ),
            ("tar -tvf{arg}", false, "/etc/hostname", "/etc/hostname"),
            ("tar -tvf{arg}", false, "../x.tar", "../x.tar"),
        ];
        for (template, shell, arg, path) in cases {
            let parsed = Template::parse(template, shell).unwrap();
            match parsed.render(Some(arg)) {
                Err(CapabilityError::Denied {
                    capability: Capability::Shell,
                    reason,
                    ..
                }) => assert_eq!(reason, outside(path), "{template} {arg}"),
                other => panic!("{template} {arg}: {other:?}"),
            }
        }
        // In the workspace, `..` that stays in, and text glued in front.
        for (template, arg) in [
            ("cat -- {arg}", "docs/../README.md"),
            ("cat docs/{arg}", "/etc/passwd"),
            ("grep -rn -- {arg} src", "fn main"),
            ("git log --grep={arg}", "a/b"),
        ] {
            let parsed = Template::parse(template, false).unwrap();
            assert!(parsed.render(Some(arg)).is_ok(), "{template} {arg}");
        }
    }

    #[test]
    fn an_argument_that_would_be_an_option_is_refused_unless_after_dashdash() {
        let reason = "the argument begins with `-`, so the program would read it as an option; \
                      the template puts no `--` before `{arg}`";
        // (template, shell, refused)
        let cases = [
            // Attack: the issue's `git show --stat {arg}` writing outside.
            ("git show --stat {arg}", false, true),
            ("git show --stat '{arg}'", false, true),
            ("cat {arg}.md", false, true),
            ("git show --stat {arg}", true, true),
            // `--` before it: a path, not an option.
            ("git show --stat -- {arg}", false, false),
            ("git show --stat -- {arg}", true, false),
            // Glued behind text: it cannot start the word.
            ("git log --grep={arg}", false, false),
            ("cat docs/{arg}", false, false),
            // A `--` in another command does not guard this one.
            ("ls -- x; git show {arg}", true, true),
            // Attack: a `--` of a wrapper guards the wrapper's options, not
            // the program it runs.
            ("timeout -- 5 git show {arg}", false, true),
            ("env -- git show {arg}", true, true),
            // Options after the program's own `--` are its operands.
            ("git log -- {arg} -x", false, false),
        ];
        for (template, shell, is_refused) in cases {
            let parsed = Template::parse(template, shell).unwrap();
            let got = parsed.render(Some("--output=/tmp/x"));
            if is_refused {
                match got {
                    Err(CapabilityError::Denied {
                        capability: Capability::Shell,
                        reason: got,
                        ..
                    }) => assert_eq!(got, reason, "{template}"),
                    other => panic!("{template}: {other:?}"),
                }
            } else {
                assert!(got.is_ok(), "{template}: {got:?}");
            }
            // Arguments that do not begin with `-` always pass.
            assert!(parsed.render(Some("x--output")).is_ok(), "{template}");
        }
        let refusal = Template::parse("git show --stat {arg}", false)
            .unwrap()
            .render(Some("--output=/tmp/x"))
            .unwrap_err();
        assert_eq!(
            refusal.to_string(),
            format!("command of `git show --stat '--output=/tmp/x'` refused: {reason}")
        );
    }
}
