//! Refusal plugins: deny rules matched against tool input.
//!
//! ```json
//! {
//!   "name": "no-prod-config",
//!   "description": "refuses to edit production config",
//!   "appendix": "Production config is changed by hand, never by the agent.",
//!   "deny": [
//!     { "tools": ["write_file", "edit_file"], "pathPattern": "config/production",
//!       "reason": "production config is hand-edited" },
//!     { "tools": ["bash"], "commandPattern": "kubectl\\s+apply",
//!       "reason": "deploys to the cluster" }
//!   ]
//! }
//! ```
//!
//! Patterns are case-insensitive regexes searched anywhere in the value.
//! Loading a plugin only parses them (a syntax error is the file's problem);
//! compiling is `crate::guard::DenyRules`'s job, once for the whole guard
//! chain and within its budget, because what one pattern costs only shows
//! when it is compiled and a workspace may hold any number of plugins. Rules
//! are numbered from 1 in messages (`rule 2`) and from 0 in field paths
//! (`deny[1]`).

use std::path::{Path, PathBuf};

use regex_automata::util::syntax;
use serde::Deserialize;

use super::{DataOrigin, FileError, Parsed, check_name, check_text, parse_json, read_file};

/// The longest plugin name.
pub const MAX_NAME_CHARS: usize = 64;

/// The longest description.
pub const MAX_DESCRIPTION_CHARS: usize = 300;

/// The longest prompt appendix.
pub const MAX_APPENDIX_CHARS: usize = 8_000;

/// The longest `reason`.
pub const MAX_REASON_CHARS: usize = 500;

/// The longest `pathPattern` or `commandPattern`, in characters.
pub const MAX_PATTERN_CHARS: usize = 1_000;

/// How many code points the character classes of one plugin's patterns
/// may span together (see [`class_code_points`]). Every deny pattern is
/// read case-insensitively, which folds each code point of a class one by
/// one: `\p{Any}` spans 1 114 112 (≈ 5 ms), so a 4 KB file of them kept
/// every zotbox command in a workspace busy for seconds, and its rules took
/// the guard chain's compile time from the user's. Four such classes.
pub const MAX_PLUGIN_CLASS_CODE_POINTS: u64 = 4 * 0x11_0000;

/// As [`MAX_PLUGIN_CLASS_CODE_POINTS`], for every plugin of one origin
/// together (the workspace's, the user's), however many files it holds.
pub const MAX_ORIGIN_CLASS_CODE_POINTS: u64 = 16 * 0x11_0000;

/// A refusal manifest as written on disk.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawPlugin {
    name: String,
    description: String,
    #[serde(default)]
    appendix: Option<String>,
    #[serde(default)]
    deny: Vec<RawRule>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRule {
    tools: Vec<String>,
    #[serde(default)]
    path_pattern: Option<String>,
    #[serde(default)]
    command_pattern: Option<String>,
    reason: String,
}

/// The tool-call argument a rule looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DenyField {
    /// The path a file tool carries: `path`, `file_path` or `filePath`.
    Path,
    /// A shell command: `command`.
    Command,
}

impl DenyField {
    /// The manifest key that sets a pattern on this field.
    pub fn manifest_key(self) -> &'static str {
        match self {
            Self::Path => "pathPattern",
            Self::Command => "commandPattern",
        }
    }

    /// The tool-call arguments this field reads, in order.
    pub fn arg_keys(self) -> &'static [&'static str] {
        match self {
            Self::Path => &["path", "file_path", "filePath"],
            Self::Command => &["command"],
        }
    }
}

/// One validated deny rule.
#[derive(Debug, Clone)]
pub struct DenyRule {
    /// The tool names it covers (exact match).
    pub tools: Vec<String>,
    /// The argument its pattern is matched against.
    pub field: DenyField,
    /// What the model is told when it blocks.
    pub reason: String,
    pattern: String,
}

impl DenyRule {
    /// A rule from its parts, checking `pattern` as [`check_pattern`] does.
    ///
    /// # Errors
    ///
    /// A phrase saying what is wrong with the tools, pattern or reason.
    pub fn new(
        tools: Vec<String>,
        field: DenyField,
        pattern: &str,
        reason: impl Into<String>,
    ) -> Result<Self, String> {
        if tools.is_empty() {
            return Err("`tools` is empty; name the tools the rule covers".to_owned());
        }
        if let Some(blank) = tools.iter().position(|t| t.trim().is_empty()) {
            return Err(format!("`tools[{blank}]` is empty"));
        }
        let reason = reason.into();
        check_text(&reason, MAX_REASON_CHARS).map_err(|p| format!("`reason` {p}"))?;
        check_pattern(pattern).map_err(|p| format!("`{}` {p}", field.manifest_key()))?;
        Ok(Self {
            tools,
            field,
            reason,
            pattern: pattern.to_owned(),
        })
    }

    /// The pattern as written.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Whether the rule covers `tool`.
    pub fn covers(&self, tool: &str) -> bool {
        self.tools.iter().any(|t| t == tool)
    }
}

/// Checks a deny pattern: not empty, at most [`MAX_PATTERN_CHARS`] long,
/// its classes within [`MAX_PLUGIN_CLASS_CODE_POINTS`], and valid regex
/// syntax under [`pattern_syntax`]. What it costs compiled is checked
/// where it is compiled, against the guard chain's budget
/// (`crate::guard::deny::Budget`).
///
/// # Errors
///
/// A phrase saying why the pattern is refused, with the regex error.
pub fn check_pattern(pattern: &str) -> Result<(), String> {
    check_pattern_shape(pattern)?;
    check_pattern_syntax(pattern)
}

/// The checks of [`check_pattern`] that cost no case folding; the code
/// points its classes span.
fn check_pattern_shape(pattern: &str) -> Result<u64, String> {
    if pattern.is_empty() {
        return Err("is empty; use `.*` to match every value".to_owned());
    }
    let len = pattern.chars().count();
    if len > MAX_PATTERN_CHARS {
        return Err(format!(
            "is {len} characters long; the limit is {MAX_PATTERN_CHARS}"
        ));
    }
    let spanned = class_code_points(pattern);
    if spanned > MAX_PLUGIN_CLASS_CODE_POINTS {
        return Err(too_wide(
            spanned,
            MAX_PLUGIN_CLASS_CODE_POINTS,
            "a plugin's patterns",
        ));
    }
    Ok(spanned)
}

fn check_pattern_syntax(pattern: &str) -> Result<(), String> {
    syntax::parse_with(pattern, &pattern_syntax())
        .map(drop)
        .map_err(|err| format!("is not a valid regex: {err}"))
}

/// The refusal of classes spanning `spanned` code points where `whose` may
/// span `limit`.
fn too_wide(spanned: u64, limit: u64, whose: &str) -> String {
    format!(
        "has character classes spanning {spanned} code points, which reading it \
         case-insensitively folds one by one; {whose} may span {limit} together (`\\p{{Any}}` \
         alone spans 1114112: write `.` or `(?s:.)` for any character)"
    )
}

/// How many code points the Unicode classes (`\p{…}`, `\P{…}`) and the
/// ranges of bracketed classes (`[a-z]`) of `pattern` span, counted as
/// written, before any negation: what case-insensitive reading folds one
/// by one. Perl classes (`\w`, `\d`, `\s`) fold from a table and do not
/// count, nor does `.`. A pattern that does not parse counts 0 (its error
/// is reported by the full parse).
pub fn class_code_points(pattern: &str) -> u64 {
    use regex_syntax::ast;

    struct Spans(u64);
    impl ast::Visitor for Spans {
        type Output = u64;
        type Err = std::convert::Infallible;
        fn finish(self) -> Result<u64, Self::Err> {
            Ok(self.0)
        }
        fn visit_pre(&mut self, ast: &ast::Ast) -> Result<(), Self::Err> {
            if let ast::Ast::ClassUnicode(class) = ast {
                self.0 = self.0.saturating_add(unicode_class_code_points(class));
            }
            Ok(())
        }
        fn visit_class_set_item_pre(&mut self, item: &ast::ClassSetItem) -> Result<(), Self::Err> {
            let spanned = match item {
                ast::ClassSetItem::Unicode(class) => unicode_class_code_points(class),
                ast::ClassSetItem::Range(range) => {
                    u64::from(range.end.c).saturating_sub(u64::from(range.start.c)) + 1
                }
                _ => 0,
            };
            self.0 = self.0.saturating_add(spanned);
            Ok(())
        }
    }

    ast::parse::Parser::new()
        .parse(pattern)
        .map_or(0, |ast| match ast::visit(&ast, Spans(0)) {
            Ok(spanned) => spanned,
        })
}

/// The code points of one `\p{…}`, read case-sensitively (which takes
/// them from a table, at no folding cost).
fn unicode_class_code_points(class: &regex_syntax::ast::ClassUnicode) -> u64 {
    use regex_syntax::ast::ClassUnicodeKind;
    use regex_syntax::hir::{Class, HirKind};

    let written = match &class.kind {
        ClassUnicodeKind::OneLetter(letter) => format!("\\p{letter}"),
        ClassUnicodeKind::Named(name) => format!("\\p{{{name}}}"),
        ClassUnicodeKind::NamedValue { name, value, .. } => format!("\\p{{{name}={value}}}"),
    };
    match regex_syntax::Parser::new()
        .parse(&written)
        .map(|hir| hir.into_kind())
    {
        Ok(HirKind::Class(Class::Unicode(class))) => class
            .ranges()
            .iter()
            .map(|range| u64::from(range.end()) - u64::from(range.start()) + 1)
            .sum(),
        _ => 0,
    }
}

/// The syntax every deny pattern is read with (case-insensitive, Unicode),
/// so that what [`check_pattern`] accepts is what the guard compiles.
pub fn pattern_syntax() -> syntax::Config {
    syntax::Config::new().case_insensitive(true)
}

/// A validated refusal plugin.
#[derive(Debug, Clone)]
pub struct Plugin {
    /// The plugin's unique name.
    pub name: String,
    /// One line about it.
    pub description: String,
    /// Text appended to the system prompt, if any.
    pub appendix: Option<String>,
    /// The deny rules, in file order.
    pub deny: Vec<DenyRule>,
    /// The manifest file.
    pub path: PathBuf,
    /// Where the manifest was found.
    pub origin: DataOrigin,
}

impl Plugin {
    /// Reads and validates the manifest at `path`, parsing its patterns.
    ///
    /// # Errors
    ///
    /// [`FileError`] naming the file and the field at fault; an invalid
    /// pattern names its rule (`deny[1].pathPattern` (rule 2)) and the regex
    /// error.
    pub fn load(path: &Path, origin: DataOrigin) -> Result<Parsed<Self>, FileError> {
        Self::parse(&read_file(path)?, path, origin)
    }

    /// As [`Plugin::load`], the classes of its patterns counted against
    /// `origin_left`, the code points its origin's other plugins have left
    /// (see [`MAX_ORIGIN_CLASS_CODE_POINTS`]), and taken from it when the
    /// plugin loads.
    ///
    /// # Errors
    ///
    /// As [`Plugin::load`]; past `origin_left`, the file's `deny` field.
    pub(crate) fn load_within(
        path: &Path,
        origin: DataOrigin,
        origin_left: &mut u64,
    ) -> Result<Parsed<Self>, FileError> {
        Self::parse_within(&read_file(path)?, path, origin, origin_left)
    }

    /// Validates manifest text as if read from `path`.
    ///
    /// # Errors
    ///
    /// As [`Plugin::load`].
    pub fn parse(text: &str, path: &Path, origin: DataOrigin) -> Result<Parsed<Self>, FileError> {
        let mut origin_left = MAX_ORIGIN_CLASS_CODE_POINTS;
        Self::parse_within(text, path, origin, &mut origin_left)
    }

    fn parse_within(
        text: &str,
        path: &Path,
        origin: DataOrigin,
        origin_left: &mut u64,
    ) -> Result<Parsed<Self>, FileError> {
        let Parsed {
            value: raw,
            warnings,
        } = parse_json::<RawPlugin>(text, path)?;
        check_name(&raw.name, MAX_NAME_CHARS).map_err(|p| FileError::invalid(path, "name", p))?;
        check_text(&raw.description, MAX_DESCRIPTION_CHARS)
            .map_err(|p| FileError::invalid(path, "description", p))?;
        if let Some(appendix) = &raw.appendix {
            check_text(appendix, MAX_APPENDIX_CHARS)
                .map_err(|p| FileError::invalid(path, "appendix", p))?;
        }
        // A team's plugin whose `deny` is misspelt would load, be listed
        // as ready and block nothing: a plugin that does nothing is refused.
        // (A blank appendix is refused above.)
        if raw.deny.is_empty() && raw.appendix.is_none() {
            return Err(FileError::invalid(
                path,
                "deny",
                "is missing or empty, and there is no `appendix`: the plugin would do nothing \
                 (list its rules under `deny`)",
            ));
        }
        // Every rule's shape first, then the plugin's classes together, and
        // only then the parses that fold them.
        let mut deny = Vec::with_capacity(raw.deny.len());
        let mut spanned = 0u64;
        for (index, rule) in raw.deny.into_iter().enumerate() {
            let (rule, rule_spans) = compile_rule(rule, index, path)?;
            deny.push(rule);
            spanned = spanned.saturating_add(rule_spans);
        }
        let limit = MAX_PLUGIN_CLASS_CODE_POINTS.min(*origin_left);
        if spanned > limit {
            let whose = if limit == MAX_PLUGIN_CLASS_CODE_POINTS {
                "a plugin's patterns".to_owned()
            } else {
                format!("the {origin} plugins' patterns left after those loaded before it")
            };
            return Err(FileError::invalid(
                path,
                "deny",
                too_wide(spanned, limit, &whose),
            ));
        }
        for (index, rule) in deny.iter().enumerate() {
            check_pattern_syntax(&rule.pattern).map_err(|problem| {
                FileError::invalid(
                    path,
                    format!("deny[{index}].{}", rule.field.manifest_key()),
                    format!("(rule {}) {problem}", index + 1),
                )
            })?;
        }
        *origin_left -= spanned;
        Ok(Parsed {
            value: Self {
                name: raw.name,
                description: raw.description,
                appendix: raw.appendix,
                deny,
                path: path.to_owned(),
                origin,
            },
            warnings,
        })
    }
}

/// A rule checked but for its pattern's full parse; the code points its
/// pattern's classes span.
fn compile_rule(rule: RawRule, index: usize, path: &Path) -> Result<(DenyRule, u64), FileError> {
    let number = index + 1;
    let invalid = |field: &str, problem: String| {
        FileError::invalid(
            path,
            format!("deny[{index}].{field}"),
            format!("(rule {number}) {problem}"),
        )
    };
    if rule.tools.is_empty() {
        return Err(invalid(
            "tools",
            "is empty; name the tools the rule covers".to_owned(),
        ));
    }
    if let Some(blank) = rule.tools.iter().position(|t| t.trim().is_empty()) {
        return Err(invalid(&format!("tools[{blank}]"), "is empty".to_owned()));
    }
    check_text(&rule.reason, MAX_REASON_CHARS).map_err(|p| invalid("reason", p))?;
    let (field, pattern) = match (rule.path_pattern, rule.command_pattern) {
        (Some(pattern), None) => (DenyField::Path, pattern),
        (None, Some(pattern)) => (DenyField::Command, pattern),
        (Some(_), Some(_)) => {
            return Err(invalid(
                "commandPattern",
                "is set beside `pathPattern`; a rule matches one field, so split it in two"
                    .to_owned(),
            ));
        }
        (None, None) => {
            return Err(invalid(
                "pathPattern",
                "is missing; a rule needs `pathPattern` or `commandPattern`".to_owned(),
            ));
        }
    };
    let spanned = check_pattern_shape(&pattern).map_err(|p| invalid(field.manifest_key(), p))?;
    Ok((
        DenyRule {
            tools: rule.tools,
            field,
            reason: rule.reason,
            pattern,
        },
        spanned,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "/p/.zot/plugins/p.json";

    fn parse(text: &str) -> Result<Parsed<Plugin>, String> {
        Plugin::parse(text, Path::new(FILE), DataOrigin::Project).map_err(|e| e.to_string())
    }

    fn with_rules(rules: &str) -> String {
        format!(r#"{{"name":"p","description":"d","deny":[{rules}]}}"#)
    }

    #[test]
    fn accepts_the_reference_example() {
        let plugin = parse(
            r#"{
              "name": "no-prod-config",
              "description": "refuses to edit production config",
              "appendix": "Production config is changed by hand, never by the agent.",
              "deny": [
                { "tools": ["write_file", "edit_file"], "pathPattern": "config/production", "reason": "production config is hand-edited" },
                { "tools": ["bash"], "commandPattern": "kubectl\\s+apply", "reason": "deploys to the cluster" }
              ]
            }"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(plugin.warnings.is_empty());
        let plugin = plugin.value;
        assert_eq!(plugin.deny.len(), 2);
        assert_eq!(plugin.deny[0].field, DenyField::Path);
        assert_eq!(plugin.deny[1].field, DenyField::Command);
        assert_eq!(plugin.deny[1].pattern(), "kubectl\\s+apply");
        // Case-insensitive, searched anywhere, once the guard compiles it.
        let rules = crate::guard::DenyRules::new(std::slice::from_ref(&plugin));
        let args = serde_json::json!({"command": "sudo KUBECTL Apply -f x"});
        assert!(rules.check("bash", &args).is_some());
        assert!(plugin.deny[0].covers("edit_file"));
        assert!(!plugin.deny[0].covers("Edit_File"));
    }

    #[test]
    fn appendix_only_plugins_need_no_rules() {
        let plugin = parse(r#"{"name":"p","description":"d","appendix":"Be brief."}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(plugin.value.deny.is_empty());
    }

    #[test]
    fn a_plugin_that_would_do_nothing_is_refused() {
        let refusal = format!(
            "`{FILE}`: field `deny` is missing or empty, and there is no `appendix`: the plugin \
             would do nothing (list its rules under `deny`)"
        );
        for text in [
            // Attack on the team's intent: `deny` misspelt loads as ready
            // and blocks nothing.
            r#"{"name":"p","description":"d","denny":[{"tools":["bash"],"commandPattern":"rm","reason":"r"}]}"#,
            r#"{"name":"p","description":"d","deny":[]}"#,
        ] {
            assert_eq!(
                parse(text).err().as_deref(),
                Some(refusal.as_str()),
                "{text}"
            );
        }
    }

    #[test]
    fn errors_name_the_file_rule_and_field() {
        let ok = r#"{"tools":["bash"],"commandPattern":"x","reason":"r"}"#;
        let long = "a".repeat(MAX_PATTERN_CHARS + 1);
        let cases = [
            // Invalid regex: the rule index and the regex error.
            (
                with_rules(&format!(
                    r#"{ok},{{"tools":["bash"],"commandPattern":"(unclosed","reason":"r"}}"#
                )),
                "field `deny[1].commandPattern` (rule 2) is not a valid regex: regex parse error",
            ),
            (
                with_rules(r#"{"tools":["w"],"pathPattern":"[z-a]","reason":"r"}"#),
                "field `deny[0].pathPattern` (rule 1) is not a valid regex",
            ),
            // Overly long pattern.
            (
                with_rules(&format!(
                    r#"{{"tools":["bash"],"commandPattern":"{long}","reason":"r"}}"#
                )),
                "field `deny[0].commandPattern` (rule 1) is 1001 characters long; the limit is 1000",
            ),
            // Exactly one pattern.
            (
                with_rules(
                    r#"{"tools":["bash"],"commandPattern":"x","pathPattern":"y","reason":"r"}"#,
                ),
                "field `deny[0].commandPattern` (rule 1) is set beside `pathPattern`",
            ),
            (
                with_rules(r#"{"tools":["bash"],"reason":"r"}"#),
                "field `deny[0].pathPattern` (rule 1) is missing",
            ),
            (
                with_rules(r#"{"tools":["bash"],"commandPattern":"","reason":"r"}"#),
                "(rule 1) is empty; use `.*`",
            ),
            // Tools and reason.
            (
                with_rules(r#"{"tools":[],"commandPattern":"x","reason":"r"}"#),
                "field `deny[0].tools` (rule 1) is empty",
            ),
            (
                with_rules(r#"{"tools":["bash",""],"commandPattern":"x","reason":"r"}"#),
                "field `deny[0].tools[1]` (rule 1) is empty",
            ),
            (
                with_rules(r#"{"tools":["bash"],"commandPattern":"x","reason":""}"#),
                "field `deny[0].reason` (rule 1) is empty",
            ),
            (
                with_rules(r#"{"tools":["bash"],"commandPattern":"x"}"#),
                "field `deny[0]`: missing field `reason`",
            ),
            (
                with_rules(r#"{"tools":"bash","commandPattern":"x","reason":"r"}"#),
                "field `deny[0].tools`: invalid type",
            ),
            // The plugin itself.
            (
                r#"{"name":"p q","description":"d"}"#.to_owned(),
                "field `name` `p q` contains ` `",
            ),
            (r#"{"name":"p"}"#.to_owned(), "missing field `description`"),
            (
                r#"{"name":"p","description":"d","appendix":""}"#.to_owned(),
                "field `appendix` is empty",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(&text).err().unwrap_or_default();
            assert!(err.contains(expected), "{text}: `{err}` lacks `{expected}`");
            assert!(err.contains(FILE), "{err}");
        }
    }

    /// What a pattern costs compiled shows only when it is compiled, which
    /// the guard chain does within its budget: parsing accepts it.
    #[test]
    fn a_pattern_that_would_compile_huge_is_left_to_the_guard_budget() {
        let parsed = parse(&with_rules(
            r#"{"tools":["bash"],"commandPattern":"\\w{1000}\\w{1000}","reason":"r"}"#,
        ));
        assert!(parsed.is_ok(), "{parsed:?}");
    }

    #[test]
    fn classes_are_counted_by_the_code_points_case_folding_walks() {
        assert_eq!(class_code_points(r"\p{Any}"), 0x11_0000);
        assert_eq!(class_code_points(r"\P{Any}x[^\p{Any}]"), 2 * 0x11_0000);
        assert_eq!(class_code_points(r"[a-z0-9_]"), 36);
        assert_eq!(class_code_points(r"[^/]+\.key$"), 0);
        assert_eq!(class_code_points(r"\w+\s\d.*"), 0);
        assert_eq!(class_code_points(r"[\x{0}-\x{10FFFF}]"), 0x11_0000);
        assert!(class_code_points(r"\pL") > 100_000);
        assert_eq!(class_code_points("(unclosed"), 0);
    }

    #[test]
    fn classes_too_wide_to_fold_are_refused_before_any_is_folded() {
        // One pattern past the limit: 5 × `\p{Any}`.
        let wide = r#"{"tools":["bash"],"commandPattern":"\\p{Any}\\p{Any}\\p{Any}\\p{Any}\\p{Any}","reason":"r"}"#;
        let err = parse(&with_rules(wide)).err().unwrap_or_default();
        assert!(
            err.contains("deny[0].commandPattern")
                && err.contains("(rule 1) has character classes spanning 5570560 code points")
                && err.contains("a plugin's patterns may span 4456448 together"),
            "{err}"
        );
        // Three patterns within it one by one, past it together.
        let two = r#"{"tools":["bash"],"commandPattern":"\\p{Any}\\P{Any}","reason":"r"}"#;
        let err = parse(&with_rules(&[two, two, two].join(",")))
            .err()
            .unwrap_or_default();
        assert!(
            err.contains("field `deny`") && err.contains("spanning 6684672 code points"),
            "{err}"
        );
        // Within it.
        parse(&with_rules(&[two, two].join(","))).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn one_origins_plugins_share_a_class_budget_of_their_own() {
        let four = r#"{"name":"p","description":"d","deny":[{"tools":["bash"],"commandPattern":"\\p{Any}\\p{Any}\\p{Any}\\p{Any}","reason":"r"}]}"#;
        let mut workspace_left = MAX_ORIGIN_CLASS_CODE_POINTS;
        for _ in 0..4 {
            Plugin::parse_within(
                four,
                Path::new(FILE),
                DataOrigin::Project,
                &mut workspace_left,
            )
            .unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(workspace_left, 0);
        let err = Plugin::parse_within(
            four,
            Path::new(FILE),
            DataOrigin::Project,
            &mut workspace_left,
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            err.contains(
                "the project plugins' patterns left after those loaded before it may span 0"
            ),
            "{err}"
        );
        // The user's budget is the user's own.
        let mut user_left = MAX_ORIGIN_CLASS_CODE_POINTS;
        Plugin::parse_within(four, Path::new(FILE), DataOrigin::User, &mut user_left)
            .unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn unknown_keys_are_warnings() {
        let parsed = parse(&with_rules(
            r#"{"tools":["bash"],"commandPattern":"x","reason":"r","severity":"high"}"#,
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            parsed.warnings,
            vec!["unknown key `deny.0.severity` ignored"]
        );
    }

    #[test]
    fn rules_can_be_built_in_code() {
        let rule = DenyRule::new(
            vec!["bash".to_owned()],
            DenyField::Command,
            "rm\\s+-rf",
            "no",
        );
        assert!(rule.is_ok_and(|r| r.pattern() == "rm\\s+-rf"));
        let err = DenyRule::new(vec!["bash".to_owned()], DenyField::Path, "(", "no").err();
        assert!(
            err.unwrap_or_default()
                .starts_with("`pathPattern` is not a valid regex")
        );
        let err = DenyRule::new(Vec::new(), DenyField::Path, "x", "no").err();
        assert!(err.unwrap_or_default().contains("`tools` is empty"));
    }
}
