//! A shell command line in the forms a `commandPattern` is tried on.
//!
//! Rules:
//!
//! 1. A deny rule sees what will run, not only what was typed. A command is
//!    read as `sh` reads it: quotes and backslashes are removed (`git 'push'`,
//!    `git pu''sh`, `git "push"`, `git pu\sh` are all `git push`), `$'…'`
//!    escapes are decoded, and the words are joined by single spaces.
//! 2. Every simple command counts. The line is split where `sh` starts
//!    another command (`;`, `&&`, `||`, `|`, `&`, newlines, `(`, `)`) and
//!    where it runs one inside another (`$(…)`, backticks, also inside double
//!    quotes and inside a parameter expansion's word: `${x:-$(…)}`), so
//!    `x; /bin/rm -rf y` or `echo "$(git push)"` is caught.
//! 3. The program is reduced to its basename (`/usr/bin/git` is `git`), past
//!    leading assignments, redirections (bash's `{fd}>` too), reserved
//!    words (`if`, `{`, `!`, `coproc` with its name, …) and the wrappers that
//!    run their argument (`exec`, `command`, `env`, `sudo`, `timeout`,
//!    `flock`, `strace`, …) with their options, the values those take
//!    (`sudo -u root`) and their operands (`timeout 5`).
//! 4. A line `sh` would reject (an unclosed quote) is read as far as it goes
//!    and, conservatively, also with every quote character and backslash
//!    removed: the lines before the error may still run.
//! 5. bash expands brace groups before it runs a line (`git pu{s,}h` is
//!    `git push puh`): a form holding one is also tried expanded, within a
//!    budget per word and per line, so a check stays quick.
//! 6. bash expands a `~` that starts a word, or a part of an assignment, to
//!    `$HOME`: the line and each form holding one, or `$HOME` itself, are
//!    also tried with the home spelled out ([`home_expanded`], given the
//!    home by the caller).
//!
//! The forms returned are the whole line normalised (commands joined by
//! their operators), each list inside a substitution likewise, and each
//! simple command from its program on. A rule matching the raw line or any
//! form blocks. What this cannot see — the value of a variable (`${IFS}`,
//! `$@`), a command built at run time (`eval`), `sh -c '…'` nested in an
//! argument, an alias or a function, another spelling of the same
//! options — is the kernel sandbox's to contain: deny rules are a filter,
//! not the sandbox.

/// Reserved words that may stand before a simple command's program.
const RESERVED: &[&str] = &[
    "!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "time",
];

/// A program that runs another, named after its options.
struct Wrapper {
    name: &'static str,
    /// Its options whose value is the next word (`nice -n 5 git push`),
    /// separated by spaces: that word is no program.
    valued: &'static str,
    /// Words it takes before the program, options aside (`timeout 5 git`).
    operands: usize,
}

impl Wrapper {
    /// Whether option `word` takes the next word as its value.
    fn takes_a_value(&self, word: &str) -> bool {
        self.valued.split(' ').any(|option| option == word)
    }
}

const fn wrapper(name: &'static str, valued: &'static str, operands: usize) -> Wrapper {
    Wrapper {
        name,
        valued,
        operands,
    }
}

/// Programs that run a later word as a program.
const WRAPPERS: &[Wrapper] = &[
    wrapper("builtin", "", 0),
    wrapper("busybox", "", 0),
    wrapper("chroot", "--userspec --groups", 1),
    wrapper("chrt", "", 1),
    wrapper("command", "", 0),
    wrapper("doas", "-u -C", 0),
    wrapper("env", "-u --unset -C --chdir", 0),
    wrapper("exec", "-a", 0),
    wrapper("flock", "-w --timeout -E --conflict-exit-code", 1),
    wrapper("ionice", "-c --class -n --classdata", 0),
    wrapper("nice", "-n --adjustment", 0),
    wrapper("nohup", "", 0),
    wrapper("setsid", "", 0),
    wrapper("stdbuf", "-i --input -o --output -e --error", 0),
    wrapper(
        "strace",
        "-o --output -e -p --attach -s --string-limit -E --env -u --user -a --columns -P \
         --trace-path -I --interruptible -b --detach-on -X --const-print-style -S --summary-sort-by",
        0,
    ),
    wrapper(
        "sudo",
        "-u --user -g --group -h --host -p --prompt -C --close-from -D --chdir -r --role -t \
         --type -T --command-timeout -U --other-user -R --chroot",
        0,
    ),
    wrapper("taskset", "", 1),
    wrapper("time", "-f --format -o --output", 0),
    wrapper("timeout", "-s --signal -k --kill-after", 1),
    wrapper(
        "unshare",
        "-S --setuid -G --setgid -R --root -w --wd --map-user --map-group --propagation",
        0,
    ),
    wrapper("watch", "-n --interval -q --equexit", 0),
    wrapper(
        "xargs",
        "-I -n --max-args -P --max-procs -s --max-chars -L --max-lines -d --delimiter -E -a \
         --arg-file",
        0,
    ),
];

/// The wrapper named `name`, if it is one.
fn wrapper_named(name: &str) -> Option<&'static Wrapper> {
    WRAPPERS.iter().find(|wrapper| wrapper.name == name)
}

/// Characters after which a command needs reading as the shell would; a
/// line without any of them (and without a path, a doubled space or a
/// leading wrapper) is its own only form.
const SPECIAL: &[char] = &[
    '\'', '"', '\\', '$', '`', ';', '&', '|', '(', ')', '<', '>', '\n', '\r', '\t', '#', '=', '/',
    '{', '}', '!', '*', '?', '[',
];

/// The words of each simple command in `command` as `sh` splits them
/// (quotes and backslashes taken away, each redirection's operator a word
/// of its own and its target the next), the program as written
/// (`./scripts/build.sh`, not `build.sh`): the line's commands first, then
/// those of each substitution as it closes. No expansion: a word the line
/// computes stays as written.
pub(crate) fn simple_commands(command: &str) -> impl Iterator<Item = Vec<String>> {
    Lexer::run_as_written(command)
        .lists
        .into_iter()
        .flat_map(|list| list.commands.into_iter().map(|simple| simple.words))
}

/// The normalised forms of `command` that differ from it, without
/// duplicates; empty when `command` is already its only form (the common
/// case costs no allocation).
pub(super) fn normal_forms(command: &str) -> Vec<String> {
    if is_plain(command) {
        return Vec::new();
    }
    let parsed = Lexer::run(command);
    let mut forms: Vec<String> = Vec::new();
    // A line may hold tens of thousands of simple commands: a search of
    // the forms so far for each would make the check quadratic, and a
    // check that outlasts zot's 5 s lets the call through.
    let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut add = |form: String| {
        if !form.is_empty() && form != command && seen.insert(form.clone()) {
            forms.push(form);
        }
    };
    // Names a line's patterns may be compared with, together: a line of
    // many simple commands, each a pattern, must not cost the list of
    // programs each.
    let mut glob_budget = MAX_GLOB_COMPARISONS;
    for list in &parsed.lists {
        let mut whole = String::new();
        for (index, simple) in list.commands.iter().enumerate() {
            if index > 0 {
                push_word(
                    &mut whole,
                    list.operators.get(index - 1).copied().unwrap_or(";"),
                );
            }
            for word in &simple.words {
                push_word(&mut whole, word);
            }
        }
        for simple in &list.commands {
            let mut from_program = String::new();
            let words = simple.words.get(simple.program..).unwrap_or_default();
            for word in words {
                push_word(&mut from_program, word);
            }
            add(from_program);
            // A program named by a pattern (`/usr/bin/[r]m`, `cur?`) runs
            // as a program its pattern matches: tried as each, by name.
            if let Some((program, rest)) = words.split_first() {
                for name in programs_matching(program, &mut glob_budget) {
                    let mut form = name.to_owned();
                    for word in rest {
                        push_word(&mut form, word);
                    }
                    add(form);
                }
            }
        }
        add(whole);
    }
    if parsed.unbalanced {
        add(conservative(command));
    }
    // bash expands `{a,b}` before it runs a line (`git pu{s,}h` is `git
    // push puh`): each form holding one is also tried expanded, within a
    // budget for the whole line (a check must stay quick). Past it, or past
    // the groups a word may have expanded, the form is tried with its
    // braces and commas dropped (`-{r,}{,}…f` as `-rf`), never only as
    // written.
    let mut line_budget = MAX_LINE_EXPANSION_BYTES;
    let braced: Vec<String> = forms
        .iter()
        .map(String::as_str)
        .chain(std::iter::once(command))
        .filter(|form| form.contains('{') && form.contains(','))
        .filter_map(|form| {
            let expanded = (line_budget > 0).then(|| expand_braces(form));
            match expanded {
                Some(Expansion::Unchanged) => None,
                Some(Expansion::Expanded(expanded)) if expanded.len() <= line_budget => {
                    line_budget -= expanded.len();
                    Some(expanded)
                }
                _ => Some(without_braces(form)),
            }
        })
        .collect();
    for form in braced {
        if form != command && seen.insert(form.clone()) {
            forms.push(form);
        }
    }
    forms
}

/// `form` with the home folder bash would put in it spelled out as `home`:
/// each `~` it expands ([`tilde_expanded`]) and each `$HOME` or `${HOME}`
/// (the one variable whose value a check knows: the `$HOME` zot runs with).
/// `None` when there is none.
pub(super) fn home_expanded(form: &str, home: &str) -> Option<String> {
    let tilde = tilde_expanded(form, home);
    let variable = home_variable_expanded(tilde.as_deref().unwrap_or(form), home);
    variable.or(tilde)
}

/// `form` with each `$HOME` (no letter, digit or `_` after it) and
/// `${HOME}` as `home`; `None` when there is none.
fn home_variable_expanded(form: &str, home: &str) -> Option<String> {
    if !form.contains("HOME") {
        return None;
    }
    let mut expanded = String::with_capacity(form.len() + home.len());
    let mut rest = form;
    let mut changed = false;
    while let Some(at) = rest.find('$') {
        expanded.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let tail = after.strip_prefix("{HOME}").or_else(|| {
            after
                .strip_prefix("HOME")
                .filter(|tail| !tail.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
        });
        match tail {
            Some(tail) => {
                expanded.push_str(home);
                rest = tail;
                changed = true;
            }
            None => {
                expanded.push('$');
                rest = after;
            }
        }
    }
    expanded.push_str(rest);
    changed.then_some(expanded)
}

/// `form` (words separated by single spaces) with each `~` bash expands
/// to `home` replaced by it: one that starts a word, or follows the `=` or
/// a `:` of a word that reads as an assignment (bash expands those in
/// arguments too: `dd if=~/x`), when a `/`, a `:` or the word's end comes
/// next. `None` when there is none. (`~+` and `~-`, the working folders,
/// are left: a rule on the workspace's own files reads them relative.) A
/// quoted `~` is not expanded by bash, but the forms have lost their
/// quotes: it is expanded here all the same, which only blocks more.
pub(super) fn tilde_expanded(form: &str, home: &str) -> Option<String> {
    if !form.contains('~') {
        return None;
    }
    let mut expanded = String::with_capacity(form.len() + home.len());
    let mut changed = false;
    for (index, word) in form.split(' ').enumerate() {
        if index > 0 {
            expanded.push(' ');
        }
        let (head, value) = match word.split_once('=') {
            Some((name, value)) if crate::capability::is_variable_name(name) => {
                (&word[..=name.len()], value)
            }
            _ => ("", word),
        };
        expanded.push_str(head);
        if head.is_empty() {
            changed |= push_tilde_expanded(&mut expanded, value, home);
            continue;
        }
        // In an assignment each `:`-separated part may start with `~`.
        for (part_index, part) in value.split(':').enumerate() {
            if part_index > 0 {
                expanded.push(':');
            }
            changed |= push_tilde_expanded(&mut expanded, part, home);
        }
    }
    changed.then_some(expanded)
}

/// Appends `part` to `out`, a leading `~` followed by `/`, `:` or nothing
/// as `home`; whether it was.
fn push_tilde_expanded(out: &mut String, part: &str, home: &str) -> bool {
    match part.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with(['/', ':']) => {
            out.push_str(home);
            out.push_str(rest);
            true
        }
        _ => {
            out.push_str(part);
            false
        }
    }
}

/// Brace groups expanded in one word at most; a word with more is left as
/// it is (each group may double it).
const MAX_BRACE_GROUPS: usize = 8;

/// The longest expanded form tried: past it the form is not expanded (a
/// line of many groups would otherwise grow by their product).
const MAX_EXPANDED_BYTES: usize = 64 * 1024;

/// The expanded forms of one line, together, at most.
const MAX_LINE_EXPANSION_BYTES: usize = 1024 * 1024;

/// What [`expand_braces`] made of a form.
enum Expansion {
    /// No word holds a group.
    Unchanged,
    /// Every word's groups expanded.
    Expanded(String),
    /// The expansion would pass [`MAX_EXPANDED_BYTES`].
    TooLarge,
}

/// `form` with every word's brace groups expanded as bash expands them
/// (`-r{,}f` is `-rf -rf`, `{rm,-rf,x}` is `rm -rf x`); a word of more
/// than [`MAX_BRACE_GROUPS`] groups has the rest dropped
/// ([`without_braces`]).
fn expand_braces(form: &str) -> Expansion {
    let mut changed = false;
    let mut words = Vec::new();
    let mut budget = MAX_EXPANDED_BYTES;
    for word in form.split(' ') {
        let before = words.len();
        if expand_word(word, MAX_BRACE_GROUPS, &mut words, &mut budget).is_none() {
            return Expansion::TooLarge;
        }
        changed |= words.len() != before + 1 || words[before] != word;
    }
    if changed {
        Expansion::Expanded(words.join(" "))
    } else {
        Expansion::Unchanged
    }
}

/// `form` with every `{`, `}` and `,` dropped: what a deny rule reads of a
/// brace expansion too large to try (`rm -{r,}{,}f` as `rm -rf`).
fn without_braces(form: &str) -> String {
    form.chars()
        .filter(|c| !matches!(c, '{' | '}' | ','))
        .collect()
}

/// Pushes the words `word` expands to (as it is when it holds no brace
/// group; past `groups_left` groups, with the rest's braces dropped), each
/// paid from `budget`; `None` once the budget is spent.
fn expand_word(
    word: &str,
    groups_left: usize,
    out: &mut Vec<String>,
    budget: &mut usize,
) -> Option<()> {
    let Some((open, close, alternatives)) = brace_group(word) else {
        *budget = budget.checked_sub(word.len() + 1)?;
        out.push(word.to_owned());
        return Some(());
    };
    if groups_left == 0 {
        let word = without_braces(word);
        *budget = budget.checked_sub(word.len() + 1)?;
        out.push(word);
        return Some(());
    }
    let (before, after) = (&word[..open], &word[close + 1..]);
    for alternative in alternatives {
        let next = format!("{before}{alternative}{after}");
        if next.len() > *budget {
            return None;
        }
        expand_word(&next, groups_left - 1, out, budget)?;
    }
    Some(())
}

/// The first brace group of `word` (not a `${…}`): where it opens and
/// closes, and its comma-separated alternatives (a group without a comma
/// at its own level is no group). One pass with a stack of the open
/// braces: a scan from each `{` to its match made `{{{…,}}}` cost the
/// square of its length (40 KB held the guard past zot's 5 s).
fn brace_group(word: &str) -> Option<(usize, usize, Vec<&str>)> {
    struct Open {
        at: usize,
        /// Not a `${`.
        candidate: bool,
        /// Where its own commas start in `commas`.
        commas_from: usize,
    }
    let bytes = word.as_bytes();
    let mut open: Vec<Open> = Vec::new();
    let mut commas: Vec<usize> = Vec::new();
    // The group opening first, once closed: an outer group closes after
    // the groups inside it but comes first, as bash expands it.
    let mut first: Option<(usize, usize, Vec<usize>)> = None;
    for (index, byte) in bytes.iter().enumerate() {
        match byte {
            b'{' => open.push(Open {
                at: index,
                candidate: index == 0 || bytes[index - 1] != b'$',
                commas_from: commas.len(),
            }),
            b',' if !open.is_empty() => commas.push(index),
            b'}' => {
                let Some(group) = open.pop() else {
                    continue;
                };
                let own = commas.split_off(group.commas_from);
                let earlier = first.as_ref().is_some_and(|(at, _, _)| *at < group.at);
                if group.candidate && !own.is_empty() && !earlier {
                    first = Some((group.at, index, own));
                }
            }
            _ => {}
        }
    }
    let (open, close, commas) = first?;
    let mut alternatives = Vec::with_capacity(commas.len() + 1);
    let mut from = open + 1;
    for comma in commas.into_iter().chain([close]) {
        alternatives.push(&word[from..comma]);
        from = comma + 1;
    }
    Some((open, close, alternatives))
}

/// The programs a pattern can run as: the names in the folders of
/// [`SAFE_PATH`](crate::capability::shell::SAFE_PATH) that `word` matches
/// as a shell pattern (`*`, `?`, `[…]`), at most [`MAX_GLOB_PROGRAMS`],
/// paid from `budget` (each name compared costs the pattern's length, what
/// a match may take); none for a word without a pattern character. Past
/// the budget, the word with its pattern characters dropped (`[r]m` as
/// `rm`, `****rm` as `rm`).
fn programs_matching(word: &str, budget: &mut usize) -> Vec<String> {
    if !word.contains(['*', '?', '[']) {
        return Vec::new();
    }
    let names = program_names();
    let cost = names.len().saturating_mul(word.len());
    if *budget < cost {
        return vec![word.chars().filter(|c| !"*?[]!^".contains(*c)).collect()];
    }
    *budget -= cost;
    names
        .iter()
        .filter(|name| glob_matches(word.as_bytes(), name.as_bytes()))
        .take(MAX_GLOB_PROGRAMS)
        .cloned()
        .collect()
}

/// The programs a pattern is tried as, at most.
const MAX_GLOB_PROGRAMS: usize = 32;

/// What one line's patterns may cost, together, in names compared times
/// pattern length (a few milliseconds; a `PATH` holds a few thousand
/// names).
const MAX_GLOB_COMPARISONS: usize = 4 * 1024 * 1024;

/// The names in the folders of the shell's `PATH`, read once.
fn program_names() -> &'static [String] {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let mut names: Vec<String> = crate::capability::shell::SAFE_PATH
            .split(':')
            .filter_map(|dir| std::fs::read_dir(dir).ok())
            .flatten()
            .flatten()
            .filter_map(|entry| entry.file_name().into_string().ok())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    })
}

/// Whether `name` matches the shell pattern `pattern` (`*`, `?`, `[…]`
/// with `!` or `^` to negate and `a-z` ranges; other bytes as written).
/// Linear in practice: a `*` is retried only from the last one.
fn glob_matches(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
                continue;
            }
            Some(b'?') => {
                p += 1;
                n += 1;
                continue;
            }
            Some(b'[') => {
                if let Some((matched, next)) = class_matches(&pattern[p..], name[n]) {
                    if matched {
                        p += next;
                        n += 1;
                        continue;
                    }
                } else if name[n] == b'[' {
                    // No closing `]`: a literal `[`.
                    p += 1;
                    n += 1;
                    continue;
                }
            }
            Some(&literal) if literal == name[n] => {
                p += 1;
                n += 1;
                continue;
            }
            _ => {}
        }
        match &mut star {
            Some((star_p, star_n)) => {
                *star_n += 1;
                p = *star_p + 1;
                n = *star_n;
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Whether `byte` is in the class `class` opens (`[` first); with the
/// length of the class. `None` when the class does not close.
fn class_matches(class: &[u8], byte: u8) -> Option<(bool, usize)> {
    let mut i = 1;
    let negated = matches!(class.get(i), Some(b'!' | b'^'));
    if negated {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    loop {
        let c = *class.get(i)?;
        if c == b']' && !first {
            return Some((matched != negated, i + 1));
        }
        first = false;
        if class.get(i + 1) == Some(&b'-') && class.get(i + 2).is_some_and(|&end| end != b']') {
            let end = class[i + 2];
            matched |= (c..=end).contains(&byte);
            i += 3;
        } else {
            matched |= c == byte;
            i += 1;
        }
    }
}

/// Whether `command` needs no reading: its normal form is itself.
fn is_plain(command: &str) -> bool {
    if command.contains(SPECIAL) || command.contains("  ") {
        return false;
    }
    if command.starts_with(' ') || command.ends_with(' ') {
        return false;
    }
    let first = command.split(' ').next().unwrap_or_default();
    !(RESERVED.contains(&first) || first == "coproc" || wrapper_named(first).is_some())
}

/// Appends `word` after a space; an empty word (`''`) adds nothing, so
/// that it cannot split what a rule reads as one phrase.
fn push_word(line: &mut String, word: &str) {
    if word.is_empty() {
        return;
    }
    if !line.is_empty() {
        line.push(' ');
    }
    line.push_str(word);
}

/// `command` with every quote character and backslash removed and runs of
/// whitespace as single spaces: for a line the lexer could not close.
fn conservative(command: &str) -> String {
    let stripped: String = command
        .chars()
        .filter(|c| !matches!(c, '\'' | '"' | '\\'))
        .collect();
    stripped.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// How deep substitutions may nest before the rest of the line is read
/// as text (and the conservative form added): bounds the lexer's memory
/// whatever the line holds.
const MAX_DEPTH: usize = 64;

/// One simple command: its words, and where its program is.
#[derive(Debug, Default, PartialEq, Eq)]
struct Simple {
    words: Vec<String>,
    /// Index of the (innermost) program word; `words.len()` when none.
    program: usize,
}

/// Commands joined by operators: the whole line, or one substitution.
#[derive(Debug, Default)]
struct List {
    commands: Vec<Simple>,
    /// `operators[i]` joins `commands[i]` and `commands[i + 1]`.
    operators: Vec<&'static str>,
    /// The operator that will join the next command, once there is one.
    pending: Option<&'static str>,
}

impl List {
    /// Adds a simple command: as [`simple`] reads it, or its words as
    /// they are when `as_written`.
    fn push(&mut self, words: Vec<String>, as_written: bool) {
        if !self.commands.is_empty() {
            self.operators.push(self.pending.take().unwrap_or(";"));
        }
        self.pending = None;
        self.commands.push(if as_written {
            Simple { words, program: 0 }
        } else {
            simple(words)
        });
    }
}

/// What [`Lexer::run`] read.
#[derive(Debug, Default)]
struct Parsed {
    /// The top-level list first, then each substitution as it closed.
    lists: Vec<List>,
    /// The line ended inside a quote, or nested too deep to follow.
    unbalanced: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closer {
    /// The line itself.
    End,
    /// `$(…)`: closed by the `)` at paren depth 0.
    Paren,
    /// `` `…` ``.
    Backtick,
}

/// A list being read, and what to resume when it closes.
#[derive(Debug)]
struct Frame {
    closer: Closer,
    /// Plain `(` opened inside a `$(…)` and not yet closed.
    depth: usize,
    list: List,
    /// The enclosing list's words and word, resumed when this closes.
    outer_words: Vec<String>,
    outer_word: Option<String>,
    /// The enclosing word was inside double quotes when this opened.
    in_double: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quote {
    None,
    Single,
    Double,
    /// `$'…'`.
    AnsiC,
}

/// A POSIX `sh` reader, far enough to know the words of every command.
struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    /// Innermost last; the bottom one is the line itself.
    frames: Vec<Frame>,
    /// The innermost list's finished words and the word being read.
    words: Vec<String>,
    word: Option<String>,
    quote: Quote,
    parsed: Parsed,
    /// How many parameter expansions this line lies in (see `braced`).
    nesting: usize,
    /// Each simple command's words are kept as they are, not read by
    /// [`simple`]: redirections kept, the program not shortened.
    as_written: bool,
}

/// Parameter expansions read inside one another before the line counts as
/// nested too deep to follow (and is also read conservatively).
const MAX_EXPANSIONS: usize = 8;

impl<'a> Lexer<'a> {
    fn run(command: &'a str) -> Parsed {
        Self::run_nested(command, 0, false)
    }

    /// [`Lexer::run`], each simple command's words as they are.
    fn run_as_written(command: &'a str) -> Parsed {
        Self::run_nested(command, 0, true)
    }

    fn run_nested(command: &'a str, nesting: usize, as_written: bool) -> Parsed {
        let mut lexer = Lexer {
            chars: command.chars().peekable(),
            frames: vec![Frame {
                closer: Closer::End,
                depth: 0,
                list: List::default(),
                outer_words: Vec::new(),
                outer_word: None,
                in_double: false,
            }],
            words: Vec::new(),
            word: None,
            quote: Quote::None,
            parsed: Parsed::default(),
            nesting,
            as_written,
        };
        while let Some(c) = lexer.chars.next() {
            match lexer.quote {
                Quote::None => lexer.plain(c),
                Quote::Single => lexer.single(c),
                Quote::Double => lexer.double(c),
                Quote::AnsiC => lexer.ansi_c(c),
            }
        }
        if lexer.quote != Quote::None {
            lexer.parsed.unbalanced = true;
            lexer.quote = Quote::None;
        }
        // Close whatever is still open, innermost first: an unclosed `$(`
        // still names a command the shell may have started reading.
        while lexer.frames.len() > 1 {
            lexer.close_frame();
        }
        lexer.end_command(None);
        if let Some(frame) = lexer.frames.pop() {
            lexer.parsed.lists.insert(0, frame.list);
        }
        lexer.parsed
    }

    fn word(&mut self) -> &mut String {
        self.word.get_or_insert_with(String::new)
    }

    fn end_word(&mut self) {
        if let Some(word) = self.word.take() {
            self.words.push(word);
        }
    }

    /// Ends the current simple command; `operator` joins it to the next.
    fn end_command(&mut self, operator: Option<&'static str>) {
        self.end_word();
        let words = std::mem::take(&mut self.words);
        let Some(frame) = self.frames.last_mut() else {
            return;
        };
        if !words.is_empty() {
            frame.list.push(words, self.as_written);
        }
        if operator.is_some() && !frame.list.commands.is_empty() {
            frame.list.pending = operator;
        }
    }

    fn open_frame(&mut self, closer: Closer) {
        if self.frames.len() > MAX_DEPTH {
            self.parsed.unbalanced = true;
            self.word()
                .push_str(if closer == Closer::Paren { "$(" } else { "`" });
            return;
        }
        let frame = Frame {
            closer,
            depth: 0,
            list: List::default(),
            outer_words: std::mem::take(&mut self.words),
            outer_word: self.word.take(),
            in_double: self.quote == Quote::Double,
        };
        self.frames.push(frame);
        self.quote = Quote::None;
    }

    fn close_frame(&mut self) {
        self.end_command(None);
        let Some(frame) = self.frames.pop() else {
            return;
        };
        self.parsed.lists.push(frame.list);
        // The enclosing word goes on around the substitution as if it
        // expanded to nothing: `pu$(true)sh` runs as `push`.
        self.words = frame.outer_words;
        self.word = frame.outer_word;
        if frame.in_double {
            self.word();
            self.quote = Quote::Double;
        }
    }

    fn top(&self) -> (Closer, usize) {
        self.frames
            .last()
            .map_or((Closer::End, 0), |f| (f.closer, f.depth))
    }

    fn plain(&mut self, c: char) {
        match c {
            ' ' | '\t' | '\r' => self.end_word(),
            '\n' | ';' => self.end_command(Some(";")),
            '&' => {
                let operator = if self.chars.next_if_eq(&'&').is_some() {
                    "&&"
                } else {
                    "&"
                };
                self.end_command(Some(operator));
            }
            '|' => {
                let operator = if self.chars.next_if_eq(&'|').is_some() {
                    "||"
                } else {
                    "|"
                };
                self.end_command(Some(operator));
            }
            // A subshell: its commands are commands like the others.
            '(' => {
                if let Some(frame) = self.frames.last_mut() {
                    frame.depth += 1;
                }
                self.end_command(None);
            }
            ')' => match self.top() {
                (Closer::Paren, 0) => self.close_frame(),
                _ => {
                    if let Some(frame) = self.frames.last_mut() {
                        frame.depth = frame.depth.saturating_sub(1);
                    }
                    self.end_command(None);
                }
            },
            '`' => {
                if self.top().0 == Closer::Backtick {
                    self.close_frame();
                } else {
                    self.open_frame(Closer::Backtick);
                }
            }
            '<' | '>' => self.redirection(c),
            '\'' => {
                self.word();
                self.quote = Quote::Single;
            }
            '"' => {
                self.word();
                self.quote = Quote::Double;
            }
            '\\' => match self.chars.next() {
                // A line continuation joins the lines.
                Some('\n') | None => {}
                Some(escaped) => self.word().push(escaped),
            },
            '$' => self.dollar(),
            '#' if self.word.is_none() => {
                // A comment, to the end of the line.
                while self.chars.next_if(|n| *n != '\n').is_some() {}
            }
            c => self.word().push(c),
        }
    }

    /// A redirection stays in its command as one word (`>>`, `2>&`, `<<-`,
    /// `>|`), its target as the next.
    fn redirection(&mut self, c: char) {
        let mut operator = match self.word.take() {
            Some(fd) if is_descriptor(&fd) => fd,
            other => {
                self.word = other;
                self.end_word();
                String::new()
            }
        };
        operator.push(c);
        while let Some(next) = self
            .chars
            .next_if(|n| matches!(n, '<' | '>' | '&' | '|' | '-'))
        {
            operator.push(next);
        }
        self.words.push(operator);
    }

    /// After a `$` outside single quotes.
    fn dollar(&mut self) {
        match self.chars.peek() {
            Some('(') => {
                self.chars.next();
                self.open_frame(Closer::Paren);
            }
            Some('\'') if self.quote == Quote::None => {
                self.chars.next();
                self.word();
                self.quote = Quote::AnsiC;
            }
            Some('"') if self.quote == Quote::None => {
                self.chars.next();
                self.word();
                self.quote = Quote::Double;
            }
            Some('{') => {
                self.chars.next();
                // A parameter expansion: its value is unknown, so it stays
                // as written. But a command substituted in its word
                // (`${x:-$(git push)}`, `` ${x:=`rm -rf y`} ``) runs: its
                // text is read again as a line of its own.
                let text = self.braced();
                let word = self.word.get_or_insert_with(String::new);
                word.push_str("${");
                word.push_str(&text);
                word.push('}');
                if text.contains(['$', '`']) {
                    if self.nesting < MAX_EXPANSIONS {
                        let inner = Lexer::run_nested(&text, self.nesting + 1, self.as_written);
                        self.parsed.lists.extend(inner.lists);
                        self.parsed.unbalanced |= inner.unbalanced;
                    } else {
                        self.parsed.unbalanced = true;
                    }
                }
            }
            _ => self.word().push('$'),
        }
    }

    /// The text of a parameter expansion after its `${`, up to the `}` that
    /// closes it (past the `${…}` and `$(…)` inside it); the end of the
    /// line leaves it unclosed.
    fn braced(&mut self) -> String {
        let mut text = String::new();
        let (mut braces, mut parens) = (1usize, 0usize);
        for c in self.chars.by_ref() {
            match c {
                '{' if text.ends_with('$') => braces += 1,
                '}' if parens == 0 => {
                    braces -= 1;
                    if braces == 0 {
                        return text;
                    }
                }
                '(' => parens += 1,
                ')' => parens = parens.saturating_sub(1),
                _ => {}
            }
            text.push(c);
        }
        self.parsed.unbalanced = true;
        text
    }

    fn single(&mut self, c: char) {
        if c == '\'' {
            self.quote = Quote::None;
        } else {
            self.word().push(c);
        }
    }

    fn double(&mut self, c: char) {
        match c {
            '"' => self.quote = Quote::None,
            '\\' => match self.chars.peek().copied() {
                Some('\n') => {
                    self.chars.next();
                }
                Some(escaped @ ('$' | '`' | '"' | '\\')) => {
                    self.chars.next();
                    self.word().push(escaped);
                }
                // Before any other character a backslash in double quotes
                // is itself.
                _ => self.word().push('\\'),
            },
            '$' => self.dollar(),
            '`' => self.open_frame(Closer::Backtick),
            c => self.word().push(c),
        }
    }

    fn ansi_c(&mut self, c: char) {
        match c {
            '\'' => self.quote = Quote::None,
            '\\' => {
                if let Some(decoded) = self.ansi_escape() {
                    self.word().push(decoded);
                }
            }
            c => self.word().push(c),
        }
    }

    /// The character a `$'…'` escape stands for (after the backslash).
    fn ansi_escape(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        let (radix, max_digits, mut value) = match c {
            'a' => return Some('\u{7}'),
            'b' => return Some('\u{8}'),
            'e' | 'E' => return Some('\u{1b}'),
            'f' => return Some('\u{c}'),
            'n' => return Some('\n'),
            'r' => return Some('\r'),
            't' => return Some('\t'),
            'v' => return Some('\u{b}'),
            'c' => {
                return self
                    .chars
                    .next()
                    .and_then(|n| char::from_u32(u32::from(n) & 0x1f));
            }
            'x' => (16, 2, 0),
            'u' => (16, 4, 0),
            'U' => (16, 8, 0),
            '0'..='7' => (8, 2, c.to_digit(8).unwrap_or(0)),
            // `\\`, `\'`, `\"`, `\?` and unknown escapes: the character.
            other => return Some(other),
        };
        for _ in 0..max_digits {
            let Some(digit) = self.chars.peek().and_then(|d| d.to_digit(radix)) else {
                break;
            };
            self.chars.next();
            value = value.saturating_mul(radix).saturating_add(digit);
        }
        char::from_u32(value)
    }
}

/// A simple command from its words: its program found and basenamed.
fn simple(words: Vec<String>) -> Simple {
    // Redirections go wherever the program's words are (`rm 2>/dev/null
    // -rf x` runs `rm -rf x`), so none is left between a rule's words.
    let mut words: Vec<String> = {
        let mut kept = Vec::with_capacity(words.len());
        let mut words = words.into_iter();
        while let Some(word) = words.next() {
            if is_redirection(&word) {
                // And its target.
                words.next();
            } else {
                kept.push(word);
            }
        }
        kept
    };
    let mut index = 0;
    let mut program = words.len();
    // The wrapper whose options and operands come next, and how many of
    // its operands are still to come.
    let mut wrapping: Option<(&Wrapper, usize)> = None;
    while let Some(word) = words.get(index) {
        if let Some((wrapper, operands)) = &mut wrapping {
            if word.starts_with('-') {
                // An option, and its value when that is the next word.
                index += if wrapper.takes_a_value(word) { 2 } else { 1 };
                continue;
            }
            if *operands > 0 {
                *operands -= 1;
                index += 1;
                continue;
            }
        }
        if wrapping.is_none() && word == "coproc" {
            // bash's `coproc [NAME] command`: a NAME stands only before a
            // compound command (`coproc worker { rm -rf x; }`).
            let named = words.get(index + 2).is_some_and(|w| w == "{");
            index += if named { 2 } else { 1 };
            continue;
        }
        let skip = is_assignment(word) || (wrapping.is_none() && RESERVED.contains(&word.as_str()));
        if skip {
            index += 1;
            continue;
        }
        let base = basename(word);
        if base.len() != word.len() {
            words[index] = base.to_owned();
        }
        program = index;
        let Some(wrapper) = wrapper_named(&words[index]) else {
            break;
        };
        wrapping = Some((wrapper, wrapper.operands));
        index += 1;
    }
    Simple { words, program }
}

/// A redirection operator as [`Lexer::redirection`] keeps it: an optional
/// descriptor number, then `<` or `>` and the operator's other characters.
fn is_redirection(word: &str) -> bool {
    let start = word.find(['<', '>']).unwrap_or(word.len());
    let (descriptor, operator) = word.split_at(start);
    (descriptor.is_empty() || is_descriptor(descriptor))
        && operator.starts_with(['<', '>'])
        && operator
            .chars()
            .all(|c| matches!(c, '<' | '>' | '&' | '|' | '-'))
}

/// What may stand before a redirection's operator: a descriptor's number
/// (`2>`), or bash's `{NAME}`, which opens a new one and puts its number
/// in `NAME` (`{fd}>/dev/null rm -rf x` runs `rm -rf x`).
fn is_descriptor(word: &str) -> bool {
    if let Some(name) = word.strip_prefix('{').and_then(|w| w.strip_suffix('}')) {
        return crate::capability::is_variable_name(name);
    }
    !word.is_empty() && word.chars().all(|d| d.is_ascii_digit())
}

/// `NAME=value`.
fn is_assignment(word: &str) -> bool {
    word.split_once('=')
        .is_some_and(|(name, _)| crate::capability::is_variable_name(name))
}

/// The last `/`-separated part of `word`, unless that is empty.
fn basename(word: &str) -> &str {
    match word.rsplit_once('/') {
        Some((_, base)) if !base.is_empty() => base,
        _ => word,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `$HOME` as bash 5 expands it with `HOME=/h`; other variables, whose
    /// values a check does not know, are left as written.
    #[test]
    fn home_variables_expand_as_home() {
        let cases = [
            ("cat $HOME/.ssh/x", Some("cat /h/.ssh/x")),
            ("cat ${HOME}/.ssh/x", Some("cat /h/.ssh/x")),
            ("cp ~/a $HOME", Some("cp /h/a /h")),
            ("echo $HOMEDIR/x $HOME_X", None),
            ("echo ${HOMEDIR} $PATH HOME", None),
        ];
        for (form, expected) in cases {
            assert_eq!(home_expanded(form, "/h").as_deref(), expected, "{form}");
        }
    }

    /// Each case as bash 5 prints `echo` of it with `HOME=/h`.
    #[test]
    fn tildes_expand_where_bash_expands_them() {
        let cases = [
            ("echo ~", Some("echo /h")),
            ("echo ~/x", Some("echo /h/x")),
            ("echo ~:/x", Some("echo /h:/x")),
            ("echo if=~/x", Some("echo if=/h/x")),
            ("X=/bin:~/y ls", Some("X=/bin:/h/y ls")),
            ("echo x=a:~/y:~", Some("echo x=a:/h/y:/h")),
            ("echo ~/a:~/b", Some("echo /h/a:~/b")),
            ("echo a~/x", None),
            ("echo --opt=~/z", None),
            ("echo ~root/x", None),
            ("echo ~+/x ~-", None),
            ("echo x", None),
        ];
        for (form, expected) in cases {
            assert_eq!(tilde_expanded(form, "/h").as_deref(), expected, "{form}");
        }
    }

    /// The forms of `command`, sorted, for comparing as a set.
    fn forms(command: &str) -> Vec<String> {
        let mut forms = normal_forms(command);
        forms.sort();
        forms
    }

    #[test]
    fn commands_are_read_as_the_shell_reads_them() {
        let cases: &[(&str, &[&str])] = &[
            // Plain commands are their own only form: nothing to add.
            ("git status", &[]),
            ("cargo test --workspace", &[]),
            // Quotes and escapes removed.
            ("git 'push'", &["git push"]),
            ("git pu''sh", &["git push"]),
            ("git \"push\"", &["git push"]),
            ("git pu\\sh", &["git push"]),
            ("rm '-rf' x", &["rm -rf x"]),
            ("rm -r''f x", &["rm -rf x"]),
            ("git '' push", &["git push"]),
            // Inside double quotes a backslash before an ordinary character
            // stays, as `sh` keeps it.
            ("git \"pu\\sh\"", &["git pu\\sh"]),
            ("echo \"a\\\"b\"", &["echo a\"b"]),
            // `$'…'` decoded; `$"…"` is a double-quoted string.
            ("git $'\\x70ush'", &["git push"]),
            ("git $'pu\\163h'", &["git push"]),
            ("git $\"push\"", &["git push"]),
            // A parameter expansion stays as written.
            ("git ${X}push", &[]),
            // Whitespace runs become single spaces.
            ("git  push", &["git push"]),
            (" git\tpush ", &["git push"]),
            // The program's basename.
            ("/usr/bin/git push", &["git push"]),
            ("./rm -rf x", &["rm -rf x"]),
            ("/bin/rm -rf x", &["rm -rf x"]),
            ("cat /etc/passwd", &[]),
            // Every simple command, and the line with its operators.
            ("x; git push", &["git push", "x", "x ; git push"]),
            // (The whole line, already in normal form, is the raw form.)
            ("true && git push", &["git push", "true"]),
            ("a || b | c & d", &["a", "b", "c", "d"]),
            ("a ||b|c", &["a", "a || b | c", "b", "c"]),
            ("a\ngit push", &["a", "a ; git push", "git push"]),
            ("(git push)", &["git push"]),
            ("a && (/bin/rm -rf x)", &["a", "a && rm -rf x", "rm -rf x"]),
            // Substitutions are commands of their own; the word around one
            // goes on as if it expanded to nothing.
            ("$(git push)", &["git push"]),
            ("echo \"$(git push)\"", &["echo", "git push"]),
            ("echo `/usr/bin/git push`", &["echo", "git push"]),
            ("git pu$(true)sh", &["git push", "true"]),
            ("echo $(a $(git push) b)", &["a b", "echo", "git push"]),
            ("echo $((1 + 2))", &["1 + 2", "echo"]),
            // Past assignments, redirections, reserved words and wrappers.
            ("X=1 /usr/bin/git push", &["X=1 git push", "git push"]),
            ("exec /usr/bin/git push", &["exec git push", "git push"]),
            ("env -i A=b git push", &["git push"]),
            ("sudo rm -rf /", &["rm -rf /"]),
            // Attack: a wrapper's option value, or operand, taken for the
            // program, which an anchored rule would then miss.
            ("nice -n 5 curl x", &["curl x"]),
            ("sudo -u root curl x", &["curl x"]),
            ("env -u A curl x", &["curl x"]),
            ("exec -a foo curl x", &["curl x"]),
            ("timeout 5 curl x", &["curl x"]),
            ("timeout -s KILL 5 curl x", &["curl x"]),
            ("setsid curl x", &["curl x"]),
            ("stdbuf -o0 curl x", &["curl x"]),
            ("busybox curl x", &["curl x"]),
            ("chroot / curl x", &["curl x"]),
            ("flock -w 5 /tmp/lock curl x", &["curl x"]),
            ("strace -f -o /dev/null curl x", &["curl x"]),
            ("unshare -r curl x", &["curl x"]),
            ("watch -n 5 curl x", &["curl x"]),
            (
                "nice -n 5 sudo -u root /usr/bin/curl x",
                &["curl x", "nice -n 5 sudo -u root curl x"],
            ),
            (
                "if /usr/bin/git push; then :; fi",
                &[":", "git push", "if git push ; then : ; fi"],
            ),
            (
                ">log /usr/bin/git push 2>&1",
                // Redirections dropped wherever they stand.
                &["git push"],
            ),
            // A comment ends the line for the shell.
            ("git status # '; git push", &["git status"]),
            // Unclosed quotes: as far as it goes, and without quotes at all.
            ("git 'push", &["git push"]),
            (
                "rm -rf x; echo \"un closed",
                &[
                    "echo un closed",
                    "rm -rf x",
                    "rm -rf x ; echo un closed",
                    "rm -rf x; echo un closed",
                ],
            ),
            ("$(git push", &["git push"]),
        ];
        let failures: Vec<String> = cases
            .iter()
            .filter(|(command, expected)| forms(command) != *expected)
            .map(|(command, expected)| {
                format!("{command:?}: {:?}, expected {expected:?}", forms(command))
            })
            .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn a_command_substituted_in_a_parameter_expansion_is_read() {
        // Attack: each runs the inner command (`sh` substitutes the word of
        // `${x:-word}` when `x` is unset), hidden behind `${`.
        for (command, inner) in [
            ("echo ${x:-$(git 'push')}", "git push"),
            ("echo ${x:-$(rm -r''f y)}", "rm -rf y"),
            ("echo \"${x:-$(git pu\\sh)}\"", "git push"),
            (": ${x:=`git 'push'`}", "git push"),
            ("echo ${x#$(git 'push')}", "git push"),
            ("echo ${a:-${b:-$(/bin/rm -rf /)}}", "rm -rf /"),
            ("echo ${x:-$(echo }) $(git push)}", "git push"),
        ] {
            let forms = normal_forms(command);
            assert!(
                forms.iter().any(|form| form == inner),
                "{command:?}: {forms:?}"
            );
        }
        // A plain parameter expansion still stays as written.
        assert_eq!(forms("git ${X}push"), Vec::<String>::new());
        // Expansions nested past the limit: read conservatively as well,
        // without recursing without bound.
        let deep = format!(
            "{}$(git 'push'){}",
            "${x:-".repeat(10_000),
            "}".repeat(10_000)
        );
        let forms = normal_forms(&deep);
        assert!(
            forms.iter().any(|form| form.contains("git push")),
            "{}",
            forms.len()
        );
    }

    /// The scan `brace_group` replaced (from each `{` to its match), kept
    /// as the reference its one pass must agree with.
    fn brace_group_by_rescanning(word: &str) -> Option<(usize, usize, Vec<&str>)> {
        let bytes = word.as_bytes();
        let mut start = 0;
        while let Some(found) = word[start..].find('{') {
            let open = start + found;
            start = open + 1;
            if open > 0 && bytes[open - 1] == b'$' {
                continue;
            }
            let (mut depth, mut from) = (0usize, open + 1);
            let mut alternatives = Vec::new();
            for (index, byte) in bytes.iter().enumerate().skip(open) {
                match byte {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            if alternatives.is_empty() {
                                break;
                            }
                            alternatives.push(&word[from..index]);
                            return Some((open, index, alternatives));
                        }
                    }
                    b',' if depth == 1 => {
                        alternatives.push(&word[from..index]);
                        from = index + 1;
                    }
                    _ => {}
                }
            }
        }
        None
    }

    #[test]
    fn the_first_brace_group_is_found_in_one_pass_as_by_rescanning() {
        // Every word of up to 7 of these characters, as the rescanning
        // reference reads it.
        let alphabet = [b'{', b'}', b',', b'$', b'a'];
        let mut checked = 0;
        for len in 0..=7u32 {
            for mut n in 0..alphabet.len().pow(len) {
                let mut word = String::new();
                for _ in 0..len {
                    word.push(char::from(alphabet[n % alphabet.len()]));
                    n /= alphabet.len();
                }
                assert_eq!(
                    brace_group(&word),
                    brace_group_by_rescanning(&word),
                    "{word:?}"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 97_656);
        // Attack: nested braces none of which is a group at its own level
        // cost the rescan the square of their length; one pass reads them
        // once, and the group inside still comes out.
        let deep = format!("{}a,b{}", "{x".repeat(20_000), "}".repeat(20_000));
        let (open, close, alternatives) = brace_group(&deep).unwrap_or_default();
        assert_eq!(
            (open, close - open, alternatives),
            (39_998, 5, vec!["xa", "b"])
        );
    }

    #[test]
    fn redirections_patterns_and_long_brace_runs_do_not_hide_a_command() {
        // Attack (each run by bash as the denied command): a redirection
        // between the program and its options; a program named by a
        // pattern; more brace groups than are expanded.
        for (command, meant) in [
            ("rm 2>/dev/null -rf victim", "rm -rf victim"),
            ("git 2>&1 push origin main", "git push origin main"),
            ("rm -rf >out x <in", "rm -rf x"),
            ("/usr/bin/[r]m -rf victim", "rm -rf victim"),
            ("/bin/ch?od 777 x", "chmod 777 x"),
            ("[c]hmod 777 x", "chmod 777 x"),
            ("/usr/bin/r[!a-l]* -rf x", "rm -rf x"),
            // bash opens a descriptor for `{NAME}>` and runs the rest.
            ("{fd}>/dev/null rm -rf x", "rm -rf x"),
            ("rm {fd}<in -rf x", "rm -rf x"),
            // A coprocess runs its command, named or not.
            ("coproc rm -rf x", "rm -rf x"),
            ("coproc worker { rm -rf x; }", "rm -rf x"),
            ("coproc { rm -rf x; }", "rm -rf x"),
        ] {
            let forms = normal_forms(command);
            assert!(forms.iter().any(|f| f == meant), "{command:?}: {forms:?}");
        }
        let many = "rm -{r,}{,}{,}{,}{,}{,}{,}{,}{,}f victim";
        let forms = normal_forms(many);
        assert!(
            forms.iter().any(|f| f.starts_with("rm -rf ")),
            "{many:?}: {forms:?}"
        );
        // Past the expansion's budget: the braces dropped.
        let long = format!("rm -r{{,}}f {}{}", "x".repeat(300), "{a,b}".repeat(8));
        let forms = normal_forms(&long);
        assert!(
            forms.iter().any(|f| f.starts_with("rm -rf xxx")),
            "{:?}",
            forms
                .iter()
                .map(|f| &f[..f.len().min(40)])
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_line_of_many_patterns_costs_a_budget_then_drops_their_characters() {
        // Attack: patterns enough to spend the budget, then the command.
        let junk: String = (0..2000).map(|i| format!("zz{i}*; ")).collect();
        let command = format!("{junk}/usr/bin/[r]m -rf x; {}rm -rf y", "*".repeat(300));
        let forms = normal_forms(&command);
        for meant in ["rm -rf x", "rm -rf y"] {
            assert!(forms.iter().any(|f| f == meant), "{meant}");
        }
    }

    #[test]
    fn shell_patterns_match_as_the_shell_matches_them() {
        for (pattern, name, matches) in [
            ("r?", "rm", true),
            ("r?", "rmdir", false),
            ("*", "", true),
            ("c*l", "curl", true),
            ("c*l", "curlx", false),
            ("[r]m", "rm", true),
            ("[!r]m", "rm", false),
            ("[^a-q]m", "rm", true),
            ("[]]x", "]x", true),
            ("[a-", "[a-", true),
            ("*a*a*a*a*b", &"a".repeat(60), false),
        ] {
            assert_eq!(
                glob_matches(pattern.as_bytes(), name.as_bytes()),
                matches,
                "{pattern:?} {name:?}"
            );
        }
    }

    #[test]
    fn brace_groups_are_tried_expanded_as_bash_expands_them() {
        // Attack: bash runs each of these as the denied command.
        for (command, expanded) in [
            ("{rm,-rf,x}", "rm -rf x"),
            ("rm -r{,}f x", "rm -rf -rf x"),
            ("git pu{s,}h", "git push puh"),
            ("{kubectl,apply} -f x", "kubectl apply -f x"),
            ("x; /bin/{rm,-rf} y", "rm -rf y"),
            ("echo {a,{b,c}}d", "echo ad bd cd"),
        ] {
            let forms = normal_forms(command);
            assert!(
                forms.iter().any(|form| form == expanded),
                "{command:?}: {forms:?}"
            );
        }
        // No group: a parameter, one alternative, a shell group.
        for command in ["echo ${a,b}", "echo {a}", "{ a; b; }", "echo ${x}{"] {
            assert!(
                normal_forms(command)
                    .iter()
                    .all(|form| !form.contains(" , ")),
                "{command:?}"
            );
        }
        // A line of many commands each holding groups: within the line's
        // budget, at once.
        let line = "x{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b};".repeat(100_000);
        let total: usize = normal_forms(&line).iter().map(String::len).sum();
        assert!(
            total <= line.len() * 3 + MAX_LINE_EXPANSION_BYTES,
            "{total}"
        );
        // Many groups, or a long word: the expansion stays within its
        // budget, or is not tried.
        for many in [
            "{a,b}".repeat(100_000),
            "{a,b}".repeat(9),
            format!("{{a,b}}{}", "x".repeat(40_000)),
        ] {
            let forms = normal_forms(&many);
            assert!(
                forms
                    .iter()
                    .all(|form| form.len() <= MAX_EXPANDED_BYTES.max(many.len())),
                "{}",
                many.len()
            );
        }
    }

    /// What trust covers reads the words as written: the program with its
    /// path and a redirection with its target, inside substitutions too.
    #[test]
    fn simple_commands_keep_the_words_as_written() {
        let words: Vec<Vec<String>> =
            simple_commands("./scripts/b.sh 'x y'; sh < scripts/g.sh && echo \"$(tools/lint -q)\"")
                .collect();
        assert_eq!(
            words,
            [
                vec!["./scripts/b.sh", "x y"],
                vec!["sh", "<", "scripts/g.sh"],
                vec!["echo", ""],
                vec!["tools/lint", "-q"],
            ]
            .map(|words| words.into_iter().map(str::to_owned).collect::<Vec<_>>())
        );
    }

    #[test]
    fn deep_nesting_is_read_as_text_past_the_limit() {
        let deep = format!("{}git 'push'{}", "$(".repeat(200), ")".repeat(200));
        let forms = normal_forms(&deep);
        assert!(forms.iter().any(|f| f.ends_with("git push")), "{forms:?}");
    }

    #[test]
    fn hostile_input_never_panics() {
        for command in [
            "",
            " ",
            "'",
            "\"",
            "\\",
            "$",
            "$(",
            ")",
            "`",
            "$'\\",
            "$'\\x",
            "$'\\u{",
            "$'\\c",
            "${",
            "((((",
            "))))",
            "$((1+2))",
            ">",
            "2>",
            "<<<",
            "a;;;b",
            "&&&&",
            "\u{0}",
            "é'ü\"`$(ß",
            "$'\\U0011ffff'",
            "$'\\777'",
            "\"`\"`",
            "$(`)`",
        ] {
            let _ = normal_forms(command);
        }
    }
}
