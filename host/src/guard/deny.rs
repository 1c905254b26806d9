//! The deny-rule stage: the refusal plugins' rules, compiled once.
//!
//! A rule applies when the called tool's name is in its `tools` (exact
//! match). A `pathPattern` is searched in the path a file tool carries
//! (`path`, `file_path`, `filePath`), a `commandPattern` in `command`; a
//! missing or non-string argument matches nothing. The first matching rule,
//! plugins in load order and rules in file order, decides.
//!
//! Paths are matched as written and, when different, lexically normalised
//! (`./`, `//`, `a/..` and `\` resolved), so that `config/./production.yml`
//! does not slip past `config/production`.
//!
//! Rules are grouped per (tool, field) into one [`RegexSet`], so a call costs
//! one hash lookup and one automaton pass per argument whatever the number of
//! rules; only a call that does match asks the set which rules did.

use std::collections::HashMap;
use std::fmt;

use regex::{Regex, RegexSet, RegexSetBuilder};
use serde_json::Value;

use crate::data::plugin::PATTERN_SIZE_LIMIT;
use crate::data::{DataSet, DenyField, Plugin};

/// The most memory one tool's combined set of patterns may take; past it
/// the patterns are tried one by one instead.
const SET_SIZE_LIMIT: usize = 32 * PATTERN_SIZE_LIMIT;

/// The rule that blocked a tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenyHit {
    /// The plugin's name.
    pub plugin: String,
    /// The rule's index in the plugin's `deny` list, from 0.
    pub rule: usize,
    /// The rule's reason, for the model.
    pub reason: String,
    /// The argument that matched.
    pub field: DenyField,
}

impl DenyHit {
    /// Which rule decided, for logs and audit: ``plugin `no-prod-config`
    /// rule 2`` (rules numbered from 1, as in the plugin's error messages).
    pub fn decider(&self) -> String {
        format!("plugin `{}` rule {}", self.plugin, self.rule + 1)
    }
}

impl fmt::Display for DenyHit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "blocked by {}: {}", self.decider(), self.reason)
    }
}

/// Where a rule came from, by its position in the global order.
#[derive(Debug, Clone)]
struct RuleRef {
    plugin: String,
    rule: usize,
    reason: String,
    field: DenyField,
}

/// Every pattern one tool has on one field.
#[derive(Debug, Clone)]
struct FieldRules {
    /// Global rule positions, ascending, parallel to the matcher's patterns.
    ids: Vec<usize>,
    matcher: Matcher,
}

#[derive(Debug, Clone)]
enum Matcher {
    Set(RegexSet),
    /// Fallback when the combined set would be too large.
    Each(Vec<Regex>),
}

impl FieldRules {
    fn build(rules: Vec<(usize, Regex)>) -> Self {
        let ids = rules.iter().map(|(id, _)| *id).collect();
        let regexes: Vec<Regex> = rules.into_iter().map(|(_, regex)| regex).collect();
        // Same flags as each rule's own regex (see `data::plugin`).
        let set = RegexSetBuilder::new(regexes.iter().map(Regex::as_str))
            .case_insensitive(true)
            .size_limit(SET_SIZE_LIMIT)
            .dfa_size_limit(SET_SIZE_LIMIT)
            .build();
        let matcher = match set {
            Ok(set) => Matcher::Set(set),
            Err(err) => {
                tracing::debug!("deny rules tried one by one: {err}");
                Matcher::Each(regexes)
            }
        };
        Self { ids, matcher }
    }

    /// The global position of the first rule matching `text`.
    fn first_match(&self, text: &str) -> Option<usize> {
        let index = match &self.matcher {
            Matcher::Set(set) => {
                if !set.is_match(text) {
                    return None;
                }
                set.matches(text).iter().next()?
            }
            Matcher::Each(regexes) => regexes.iter().position(|r| r.is_match(text))?,
        };
        self.ids.get(index).copied()
    }
}

#[derive(Debug, Clone, Default)]
struct ToolRules {
    path: Option<FieldRules>,
    command: Option<FieldRules>,
}

/// The compiled deny rules of a set of plugins.
#[derive(Debug, Clone, Default)]
pub struct DenyRules {
    rules: Vec<RuleRef>,
    by_tool: HashMap<String, ToolRules>,
}

impl DenyRules {
    /// Compiles the rules of `plugins`, in order: earlier plugins decide first.
    pub fn new(plugins: &[Plugin]) -> Self {
        let mut rules = Vec::new();
        let mut grouped: HashMap<(String, DenyField), Vec<(usize, Regex)>> = HashMap::new();
        for plugin in plugins {
            for (index, rule) in plugin.deny.iter().enumerate() {
                let id = rules.len();
                rules.push(RuleRef {
                    plugin: plugin.name.clone(),
                    rule: index,
                    reason: rule.reason.clone(),
                    field: rule.field,
                });
                let mut seen = Vec::new();
                for tool in &rule.tools {
                    // A tool listed twice in one rule needs the pattern once.
                    if seen.contains(&tool) {
                        continue;
                    }
                    seen.push(tool);
                    grouped
                        .entry((tool.clone(), rule.field))
                        .or_default()
                        .push((id, rule.regex().clone()));
                }
            }
        }
        let mut by_tool: HashMap<String, ToolRules> = HashMap::new();
        for ((tool, field), list) in grouped {
            let entry = by_tool.entry(tool).or_default();
            let compiled = Some(FieldRules::build(list));
            match field {
                DenyField::Path => entry.path = compiled,
                DenyField::Command => entry.command = compiled,
            }
        }
        Self { rules, by_tool }
    }

    /// The deny rules of the guard chain for the data files in force: every
    /// plugin, shadowed ones included (see [`DataSet::guard_plugins`]). The
    /// one way every front end assembles them.
    pub fn for_data(set: &DataSet) -> Self {
        Self::new(&set.guard_plugins())
    }

    /// The number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether any rule covers the tool named `tool_name`.
    pub fn covers(&self, tool_name: &str) -> bool {
        self.by_tool.contains_key(tool_name)
    }

    /// The first rule that blocks a call of `tool_name` with `args`, if any.
    pub fn check(&self, tool_name: &str, args: &Value) -> Option<DenyHit> {
        let tool = self.by_tool.get(tool_name)?;
        let args = args.as_object()?;
        let mut first: Option<usize> = None;
        let mut consider = |id: Option<usize>| {
            if let Some(id) = id
                && first.is_none_or(|f| id < f)
            {
                first = Some(id);
            }
        };
        if let Some(rules) = &tool.path {
            for key in DenyField::Path.arg_keys() {
                if let Some(Value::String(path)) = args.get(*key) {
                    consider(rules.first_match(path));
                    if let Some(normal) = normalize_path(path) {
                        consider(rules.first_match(&normal));
                    }
                }
            }
        }
        if let Some(rules) = &tool.command {
            for key in DenyField::Command.arg_keys() {
                if let Some(Value::String(command)) = args.get(*key) {
                    consider(rules.first_match(command));
                }
            }
        }
        let rule = self.rules.get(first?)?;
        Some(DenyHit {
            plugin: rule.plugin.clone(),
            rule: rule.rule,
            reason: rule.reason.clone(),
            field: rule.field,
        })
    }
}

/// `path` with `\` as `/`, empty and `.` segments dropped and `..` resolved
/// lexically; `None` when that changes nothing.
fn normalize_path(path: &str) -> Option<String> {
    let needs = path.contains('\\')
        || path.contains("//")
        || path
            .split(['/', '\\'])
            .any(|segment| segment == "." || segment == "..");
    if !needs {
        return None;
    }
    let unified = path.replace('\\', "/");
    let absolute = unified.starts_with('/');
    let mut segments: Vec<&str> = Vec::new();
    for segment in unified.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                if segments.last().is_some_and(|s| *s != "..") {
                    segments.pop();
                } else if !absolute {
                    segments.push("..");
                }
            }
            segment => segments.push(segment),
        }
    }
    let joined = segments.join("/");
    let normal = if absolute {
        format!("/{joined}")
    } else {
        joined
    };
    (normal != path).then_some(normal)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;
    use crate::data::DataOrigin;

    fn plugin(text: &str) -> Plugin {
        Plugin::parse(text, Path::new("/p/plugins/x.json"), DataOrigin::Project)
            .unwrap_or_else(|e| panic!("{e}"))
            .value
    }

    fn reference() -> Vec<Plugin> {
        vec![
            plugin(
                r#"{"name":"no-prod-config","description":"d","deny":[
                  {"tools":["write_file","edit_file"],"pathPattern":"config/production","reason":"production config is hand-edited"},
                  {"tools":["bash"],"commandPattern":"kubectl\\s+apply","reason":"deploys to the cluster"}
                ]}"#,
            ),
            plugin(
                r#"{"name":"no-secrets","description":"d","deny":[
                  {"tools":["read_file","write_file"],"pathPattern":"\\.env$","reason":"secrets"},
                  {"tools":["bash"],"commandPattern":"\\.env\\b","reason":"secrets via shell"},
                  {"tools":["bash"],"commandPattern":"kubectl","reason":"no kubectl at all"}
                ]}"#,
            ),
        ]
    }

    /// `(plugin, rule from 0)` of the hit, if any.
    fn hit(rules: &DenyRules, tool: &str, args: Value) -> Option<(String, usize)> {
        rules.check(tool, &args).map(|h| (h.plugin, h.rule))
    }

    #[test]
    fn table() {
        let rules = DenyRules::new(&reference());
        let some = |plugin: &str, rule: usize| Some((plugin.to_owned(), rule));
        let cases = [
            // The reference example.
            (
                "bash",
                json!({"command": "kubectl apply -f x.yaml"}),
                some("no-prod-config", 1),
            ),
            (
                "write_file",
                json!({"path": "config/production.yml"}),
                some("no-prod-config", 0),
            ),
            // Case variation still hits: patterns are case-insensitive.
            (
                "bash",
                json!({"command": "KUBECTL Apply -f x"}),
                some("no-prod-config", 1),
            ),
            (
                "edit_file",
                json!({"path": "Config/PRODUCTION.yml"}),
                some("no-prod-config", 0),
            ),
            // Searched anywhere in the value.
            (
                "bash",
                json!({"command": "cd x && kubectl   apply"}),
                some("no-prod-config", 1),
            ),
            // First rule wins: `kubectl apply` is rule 2 of the first plugin,
            // though rule 3 of the second also matches.
            (
                "bash",
                json!({"command": "kubectl apply"}),
                some("no-prod-config", 1),
            ),
            // ...and a later rule decides when the earlier does not match.
            (
                "bash",
                json!({"command": "kubectl get pods"}),
                some("no-secrets", 2),
            ),
            (
                "bash",
                json!({"command": "cat .env"}),
                some("no-secrets", 1),
            ),
            // Tool not listed: no hit, though the path would match.
            ("read_file", json!({"path": "config/production.yml"}), None),
            ("Bash", json!({"command": "kubectl apply"}), None),
            ("shell", json!({"command": "kubectl apply"}), None),
            // Path vs command fields: a path rule ignores `command` and back.
            ("write_file", json!({"command": "config/production"}), None),
            ("bash", json!({"path": "kubectl apply"}), None),
            // The other path spellings.
            (
                "write_file",
                json!({"file_path": "config/production.yml"}),
                some("no-prod-config", 0),
            ),
            (
                "write_file",
                json!({"filePath": "config/production.yml"}),
                some("no-prod-config", 0),
            ),
            (
                "write_file",
                json!({"path": "README.md", "filePath": "a/.env"}),
                some("no-secrets", 0),
            ),
            // Missing or non-string arguments match nothing.
            ("bash", json!({}), None),
            ("bash", json!({"command": ["kubectl", "apply"]}), None),
            ("write_file", json!({"path": null}), None),
            ("bash", json!("kubectl apply"), None),
            // Harmless calls pass.
            ("bash", json!({"command": "ls -la"}), None),
            ("write_file", json!({"path": "config/staging.yml"}), None),
            // Attack: path tricks that name the same file.
            (
                "write_file",
                json!({"path": "config/./production.yml"}),
                some("no-prod-config", 0),
            ),
            (
                "write_file",
                json!({"path": "config//production.yml"}),
                some("no-prod-config", 0),
            ),
            (
                "write_file",
                json!({"path": "docs/../config/production.yml"}),
                some("no-prod-config", 0),
            ),
            (
                "write_file",
                json!({"path": "config\\production.yml"}),
                some("no-prod-config", 0),
            ),
        ];
        for (tool, args, expected) in cases {
            assert_eq!(hit(&rules, tool, args.clone()), expected, "{tool} {args}");
        }
    }

    #[test]
    fn hits_carry_reason_and_decider() {
        let rules = DenyRules::new(&reference());
        let hit = rules.check("bash", &json!({"command": "kubectl apply"}));
        let hit = hit.unwrap_or_else(|| panic!("no hit"));
        assert_eq!(hit.reason, "deploys to the cluster");
        assert_eq!(hit.field, DenyField::Command);
        assert_eq!(hit.decider(), "plugin `no-prod-config` rule 2");
        assert_eq!(
            hit.to_string(),
            "blocked by plugin `no-prod-config` rule 2: deploys to the cluster"
        );
        assert_eq!(rules.len(), 5);
        assert!(rules.covers("edit_file"));
        assert!(!rules.covers("glob"));
        assert!(
            DenyRules::default()
                .check("bash", &json!({"command": "x"}))
                .is_none()
        );
    }

    #[test]
    fn the_fallback_matcher_agrees_with_the_set() {
        let rules = vec![(3, compile("b+")), (7, compile("A"))];
        let set = FieldRules::build(rules.clone());
        assert!(matches!(set.matcher, Matcher::Set(_)));
        let each = FieldRules {
            ids: vec![3, 7],
            matcher: Matcher::Each(rules.into_iter().map(|(_, r)| r).collect()),
        };
        for (text, expected) in [("xa", Some(7)), ("aBB", Some(3)), ("z", None)] {
            assert_eq!(set.first_match(text), expected, "{text}");
            assert_eq!(each.first_match(text), expected, "{text}");
        }
    }

    fn compile(pattern: &str) -> Regex {
        crate::data::plugin::compile_pattern(pattern).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn paths_normalize_lexically() {
        let cases = [
            ("config/production.yml", None),
            ("./config/production.yml", Some("config/production.yml")),
            ("a//b/./c", Some("a/b/c")),
            ("a/b/../../c", Some("c")),
            ("../x", None),
            ("../a/../x", Some("../x")),
            ("/../etc/passwd", Some("/etc/passwd")),
            ("a\\b", Some("a/b")),
        ];
        for (path, expected) in cases {
            assert_eq!(normalize_path(path).as_deref(), expected, "{path}");
        }
    }

    /// 50 plugins of 10 rules each: 250 command and 250 path patterns.
    fn fifty_by_ten() -> Vec<Plugin> {
        (0..50)
            .map(|p| {
                let rules: Vec<Value> = (0..10)
                    .map(|r| {
                        if r % 2 == 0 {
                            json!({"tools": ["bash"], "commandPattern": format!(r"tool{p}x{r}\s+(apply|delete)\b"), "reason": format!("r{p}.{r}")})
                        } else {
                            json!({"tools": ["write_file", "edit_file"], "pathPattern": format!(r"(^|/)secrets{p}_{r}/.*\.(ya?ml|json)$"), "reason": format!("r{p}.{r}")})
                        }
                    })
                    .collect();
                plugin(&json!({"name": format!("p{p}"), "description": "d", "deny": rules}).to_string())
            })
            .collect()
    }

    #[test]
    fn fifty_plugins_of_ten_rules_compile_and_decide() {
        let rules = DenyRules::new(&fifty_by_ten());
        assert_eq!(rules.len(), 500);
        let tool = rules
            .by_tool
            .get("bash")
            .unwrap_or_else(|| panic!("no bash"));
        assert!(matches!(
            tool.command.as_ref().map(|r| &r.matcher),
            Some(Matcher::Set(_))
        ));
        let some = |plugin: &str, rule: usize| Some((plugin.to_owned(), rule));
        let cases = [
            (
                "bash",
                json!({"command": "TOOL49X8 Delete now"}),
                some("p49", 8),
            ),
            (
                "bash",
                json!({"command": "tool0x0 apply && tool7x2 apply"}),
                some("p0", 0),
            ),
            (
                "edit_file",
                json!({"path": "app/secrets31_5/db.yaml"}),
                some("p31", 5),
            ),
            (
                "bash",
                json!({"command": "git status --porcelain && cargo test --workspace"}),
                None,
            ),
            ("edit_file", json!({"path": "src/secrets31_5.rs"}), None),
        ];
        for (tool, args, expected) in cases {
            assert_eq!(hit(&rules, tool, args.clone()), expected, "{tool} {args}");
        }
    }

    #[test]
    fn bad_plugins_are_reported_and_the_rest_still_guard() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = tmp.path().join("ws/.zot/plugins");
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let files = [
            (
                "a-bad.json",
                r#"{"name":"bad","description":"d","deny":[
                  {"tools":["bash"],"commandPattern":"ok","reason":"r"},
                  {"tools":["bash"],"commandPattern":"rm\\s+(-rf","reason":"r"}]}"#,
            ),
            (
                "b-good.json",
                r#"{"name":"good","description":"d","deny":[
                  {"tools":["bash"],"commandPattern":"rm\\s+-rf","reason":"no"}]}"#,
            ),
        ];
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("{e}"));
        }
        let set = crate::data::DataSearch {
            workspace: tmp.path().join("ws"),
            zot_home: tmp.path().join("zot"),
            home_dir: None,
        }
        .load();
        assert_eq!(set.problems.len(), 1, "{:?}", set.problems);
        let error = &set.problems[0].error;
        assert!(error.contains("a-bad.json"), "{error}");
        assert!(
            error.contains("field `deny[1].commandPattern` (rule 2) is not a valid regex"),
            "{error}"
        );
        assert!(error.contains("unclosed group"), "{error}");
        // The bad plugin is skipped whole: half a plugin would guard less
        // than its author thinks, and say nothing about it.
        let rules = DenyRules::new(&set.plugins);
        assert_eq!(rules.len(), 1);
        assert_eq!(
            hit(&rules, "bash", json!({"command": "RM -RF /"})),
            Some(("good".to_owned(), 0))
        );
        assert_eq!(hit(&rules, "bash", json!({"command": "ok"})), None);
    }

    /// `cargo test -p zotbox --release --lib guard::deny::tests::timing -- --ignored --nocapture`
    #[test]
    #[ignore = "timing, not correctness"]
    fn timing() {
        let started = std::time::Instant::now();
        let rules = DenyRules::new(&fifty_by_ten());
        println!("compile 50x10: {:?}", started.elapsed());
        let calls = [
            (
                "bash",
                json!({"command": "git status --porcelain && cargo test --workspace -- --nocapture"}),
            ),
            ("edit_file", json!({"path": "host/src/guard/deny.rs"})),
            (
                "edit_file",
                json!({"path": "./host/../host/src/guard/deny.rs"}),
            ),
            (
                "bash",
                json!({"command": "cd deploy && tool42x6 apply -f all.yaml"}),
            ),
            ("read_file", json!({"path": "README.md"})),
        ];
        for (tool, args) in &calls {
            let n = 20_000;
            let started = std::time::Instant::now();
            let mut hits = 0;
            for _ in 0..n {
                hits += usize::from(rules.check(tool, std::hint::black_box(args)).is_some());
            }
            let per = started.elapsed() / n;
            println!("{tool} {args}: {per:?} per call ({hits} hits)");
        }
    }
}
