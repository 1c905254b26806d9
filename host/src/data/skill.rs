//! Skills: Markdown instructions with a name and a description.
//!
//! ```markdown
//! ---
//! name: deploy
//! description: Ship a release. Use when asked to deploy or cut a release.
//! ---
//!
//! # Deploy
//! ...
//! ```
//!
//! The frontmatter is read by hand, not by a YAML parser: `key: value` lines,
//! values plain, `"double"` or `'single'` quoted, `#` comments, and indented
//! continuation lines (including `>` and `|` block values). `name` is
//! required; `description` should be there. Other keys are kept as warnings.

use std::path::{Path, PathBuf};

use super::{DataOrigin, FileError, Parsed, check_name, read_file};

/// The longest skill name; it becomes a slash command.
pub const MAX_NAME_CHARS: usize = 64;

/// The longest description.
pub const MAX_DESCRIPTION_CHARS: usize = 1_024;

/// A skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// The skill's unique name.
    pub name: String,
    /// When to use it.
    pub description: String,
    /// The Markdown after the frontmatter.
    pub body: String,
    /// The file (for builtin skills, `builtin:<name>`).
    pub path: PathBuf,
    /// Where it was found.
    pub origin: DataOrigin,
}

impl Skill {
    /// Reads and validates the skill at `path`.
    ///
    /// # Errors
    ///
    /// [`FileError`] naming the file and the line or field at fault.
    pub fn load(path: &Path, origin: DataOrigin) -> Result<Parsed<Self>, FileError> {
        Self::parse(&read_file(path)?, path, origin)
    }

    /// Validates skill text as if read from `path`.
    ///
    /// # Errors
    ///
    /// As [`Skill::load`].
    pub fn parse(text: &str, path: &Path, origin: DataOrigin) -> Result<Parsed<Self>, FileError> {
        let parse_err = |detail: String| FileError::Parse {
            path: path.to_owned(),
            detail,
        };
        let (entries, body) = split_frontmatter(text).map_err(parse_err)?;
        let mut name = None;
        let mut description = None;
        let mut warnings = Vec::new();
        for (line, key, value) in entries {
            let slot = match key.as_str() {
                "name" => &mut name,
                "description" => &mut description,
                _ => {
                    warnings.push(format!("frontmatter key `{key}` ignored"));
                    continue;
                }
            };
            if slot.is_some() {
                return Err(parse_err(format!(
                    "line {line}: frontmatter key `{key}` appears twice"
                )));
            }
            *slot = Some(value);
        }
        let name = name
            .ok_or_else(|| FileError::invalid(path, "name", "is missing from the frontmatter"))?;
        check_name(&name, MAX_NAME_CHARS).map_err(|p| FileError::invalid(path, "name", p))?;
        let description = description.unwrap_or_else(|| {
            warnings.push(
                "frontmatter has no `description`; the model cannot tell when to use the skill"
                    .to_owned(),
            );
            String::new()
        });
        let len = description.chars().count();
        if len > MAX_DESCRIPTION_CHARS {
            return Err(FileError::invalid(
                path,
                "description",
                format!("is {len} characters long; the limit is {MAX_DESCRIPTION_CHARS}"),
            ));
        }
        Ok(Parsed {
            value: Self {
                name,
                description,
                body: body.to_owned(),
                path: path.to_owned(),
                origin,
            },
            warnings,
        })
    }
}

/// A frontmatter entry: its line number (from 1), key and value.
type Entry = (usize, String, String);

/// Splits `---`-delimited frontmatter from the body.
fn split_frontmatter(text: &str) -> Result<(Vec<Entry>, &str), String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = LineIter {
        rest: text,
        number: 0,
    };
    match lines.next() {
        Some((_, first)) if first.trim_end() == "---" => {}
        _ => {
            return Err(
                "has no frontmatter; start the file with a `---` line, then `name:` and \
                 `description:`, then `---`"
                    .to_owned(),
            );
        }
    }
    let mut entries: Vec<Entry> = Vec::new();
    // The key whose value continues on indented lines, and how to join them.
    let mut open: Option<Block> = None;
    loop {
        let Some((number, line)) = lines.next() else {
            return Err("frontmatter opened on line 1 is never closed with `---`".to_owned());
        };
        if line.trim_end() == "---" {
            break;
        }
        let indented = line.starts_with([' ', '\t']);
        if let (true, Some(block)) = (indented || line.trim().is_empty(), open.as_mut()) {
            block.push(line.trim());
            continue;
        }
        if let Some(block) = open.take()
            && let Some(entry) = entries.last_mut()
        {
            entry.2 = block.finish(std::mem::take(&mut entry.2));
        }
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if indented {
            return Err(format!("line {number}: unexpected indented line"));
        }
        let Some((key, value)) = trimmed.split_once(':') else {
            return Err(format!("line {number}: expected `key: value`"));
        };
        let key = key.trim();
        if key.is_empty() || key.contains([' ', '"', '\'']) {
            return Err(format!("line {number}: expected `key: value`"));
        }
        let value = value.trim();
        let (value, block) = match value {
            "|" | "|-" | "|+" => (String::new(), Block::new(true)),
            ">" | ">-" | ">+" => (String::new(), Block::new(false)),
            _ => (
                unquote(value).map_err(|p| format!("line {number}: `{key}` {p}"))?,
                Block::new(false),
            ),
        };
        entries.push((number, key.to_owned(), value));
        open = Some(block);
    }
    if let Some(block) = open
        && let Some(entry) = entries.last_mut()
    {
        entry.2 = block.finish(std::mem::take(&mut entry.2));
    }
    let body = lines.rest.trim_start_matches(['\n', '\r']);
    Ok((entries, body))
}

/// Lines with their numbers, keeping the unread rest for the body.
struct LineIter<'a> {
    rest: &'a str,
    number: usize,
}

impl<'a> Iterator for LineIter<'a> {
    type Item = (usize, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let (line, rest) = match self.rest.split_once('\n') {
            Some((line, rest)) => (line, rest),
            None => (self.rest, ""),
        };
        self.rest = rest;
        self.number += 1;
        Some((self.number, line.strip_suffix('\r').unwrap_or(line)))
    }
}

/// Continuation lines of a value: joined with newlines (`|`) or spaces.
struct Block {
    literal: bool,
    lines: Vec<String>,
}

impl Block {
    fn new(literal: bool) -> Self {
        Self {
            literal,
            lines: Vec::new(),
        }
    }

    fn push(&mut self, line: &str) {
        self.lines.push(line.to_owned());
    }

    fn finish(mut self, first: String) -> String {
        while self.lines.last().is_some_and(String::is_empty) {
            self.lines.pop();
        }
        let mut parts = Vec::with_capacity(self.lines.len() + 1);
        if !first.is_empty() {
            parts.push(first);
        }
        // A folded value's blank lines would only add stray spaces.
        let literal = self.literal;
        parts.extend(self.lines.into_iter().filter(|l| literal || !l.is_empty()));
        parts.join(if self.literal { "\n" } else { " " })
    }
}

/// A value as written after `key:`: quoted, or plain with an optional
/// ` # comment`.
fn unquote(value: &str) -> Result<String, String> {
    if let Some(inner) = value.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return trailing(chars.as_str()).map(|()| out),
                '\\' => match chars.next() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some(c @ ('"' | '\\' | '/')) => out.push(c),
                    Some(other) => return Err(format!("has an unknown escape `\\{other}`")),
                    None => break,
                },
                c => out.push(c),
            }
        }
        return Err("has an unclosed `\"`".to_owned());
    }
    if let Some(inner) = value.strip_prefix('\'') {
        let mut out = String::new();
        let mut chars = inner.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\'' {
                if chars.peek() == Some(&'\'') {
                    chars.next();
                    out.push('\'');
                } else {
                    let rest: String = chars.collect();
                    return trailing(&rest).map(|()| out);
                }
            } else {
                out.push(c);
            }
        }
        return Err("has an unclosed `'`".to_owned());
    }
    let plain = match value.find(" #") {
        Some(at) => &value[..at],
        None => value,
    };
    Ok(plain.trim_end().to_owned())
}

/// After a closing quote only a comment may follow.
fn trailing(rest: &str) -> Result<(), String> {
    let rest = rest.trim();
    if rest.is_empty() || rest.starts_with('#') {
        Ok(())
    } else {
        Err(format!("has `{rest}` after the closing quote"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "/p/.zot/skills/deploy.md";

    fn parse(text: &str) -> Result<Parsed<Skill>, String> {
        Skill::parse(text, Path::new(FILE), DataOrigin::Project).map_err(|e| e.to_string())
    }

    fn skill(text: &str) -> Skill {
        parse(text).unwrap_or_else(|e| panic!("{e}")).value
    }

    #[test]
    fn reads_the_reference_example() {
        let s = skill(
            "---\nname: deploy\ndescription: Ship a release. Use when asked to deploy or cut a release.\n---\n\n# Deploy\n\n1. Confirm the tests pass.\n",
        );
        assert_eq!(s.name, "deploy");
        assert_eq!(
            s.description,
            "Ship a release. Use when asked to deploy or cut a release."
        );
        assert_eq!(s.body, "# Deploy\n\n1. Confirm the tests pass.\n");
        assert_eq!(s.origin, DataOrigin::Project);
    }

    #[test]
    fn values_quoted_commented_and_folded() {
        let cases = [
            // Double quotes keep colons and `#`, and unescape.
            ("description: \"a: b # c \\\"q\\\"\"", "a: b # c \"q\""),
            // Single quotes double a quote to escape it.
            ("description: 'it''s: fine'  # why", "it's: fine"),
            // A plain value loses a trailing comment but keeps inner colons.
            ("description: use it: now # note", "use it: now"),
            // Folded and literal blocks.
            ("description: >\n  one\n  two\n", "one two"),
            ("description: |\n  one\n  two\n", "one\ntwo"),
            // A plain value continued on indented lines.
            ("description: one\n  two", "one two"),
            // CRLF line ends and a byte-order mark.
            ("description: crlf\r", "crlf"),
        ];
        for (line, expected) in cases {
            let text = format!("\u{feff}---\r\nname: n\n{line}\n---\nbody");
            let s = skill(&text);
            assert_eq!(s.description, expected, "{line}");
            assert_eq!(s.body, "body", "{line}");
        }
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let cases = [
            ("# Deploy\n", "has no frontmatter"),
            ("", "has no frontmatter"),
            ("---\nname: a\n", "never closed with `---`"),
            (
                "---\ndescription: d\n---\n",
                "field `name` is missing from the frontmatter",
            ),
            ("---\nname: a b\n---\n", "field `name` `a b` contains ` `"),
            (
                "---\nname: a\nname: b\n---\n",
                "line 3: frontmatter key `name` appears twice",
            ),
            (
                "---\nname: a\njust text\n---\n",
                "line 3: expected `key: value`",
            ),
            (
                "---\nname: \"a\n---\n",
                "line 2: `name` has an unclosed `\"`",
            ),
            (
                "---\nname: 'a' b\n---\n",
                "line 2: `name` has `b` after the closing quote",
            ),
            ("---\n  name: a\n---\n", "line 2: unexpected indented line"),
        ];
        for (text, expected) in cases {
            let err = parse(text).err().unwrap_or_default();
            assert!(
                err.contains(expected),
                "{text:?}: `{err}` lacks `{expected}`"
            );
            assert!(err.contains(FILE), "{err}");
        }
    }

    #[test]
    fn missing_description_and_unknown_keys_are_warnings() {
        let parsed = parse("---\nname: a\nlicense: MIT\n# a comment\n---\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.value.description, "");
        assert_eq!(parsed.value.body, "");
        assert_eq!(parsed.warnings.len(), 2, "{:?}", parsed.warnings);
        assert!(parsed.warnings[0].contains("key `license` ignored"));
        assert!(parsed.warnings[1].contains("no `description`"));
    }
}
