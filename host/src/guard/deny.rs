//! The deny-rule stage: the refusal plugins' rules, compiled once for the
//! whole chain.
//!
//! Rules:
//!
//! 1. A rule applies when the called tool's name is in its `tools` (exact
//!    match). A `pathPattern` is searched in the path a file tool carries
//!    (`path`, `file_path`, `filePath`), a `commandPattern` in `command`,
//!    under any key zot's tools would read as one of these (`COMMAND`,
//!    `Path`: [`super::zot_args`]); a missing or non-string argument matches
//!    nothing. The first matching
//!    rule, plugins in the order given and rules in file order, decides.
//! 2. A rule sees what will run. A command is tried as written and in its
//!    normalised forms ([`command`]: shell words without quotes and escapes,
//!    every simple command, programs by basename, the home spelled out for
//!    a `~` bash expands and for `$HOME`), a path as written, lexically
//!    normalised and where it leads from the workspace (a leading `~/` or
//!    `$HOME/` also with the home spelled out, and where that leads), its
//!    links followed ([`path`]). A match on any form blocks. This holds for
//!    data tools and the `shell` capability alike: both ask this stage.
//! 3. Rules compile within a budget ([`compile`]): each distinct pattern once
//!    per field, the whole chain within [`Budget::CHAIN`]. A plugin over
//!    budget is refused whole and reported ([`DenyRules::problems`]); the
//!    others keep guarding, the user's served before the workspace's.
//! 4. A call costs one hash lookup when no rule names its tool, and one
//!    automaton pass per form of each argument otherwise; only a call that
//!    does match asks the set which rules did.

mod command;
mod compile;
mod path;

use std::collections::HashMap;
use std::fmt;

use serde_json::Value;

pub(crate) use command::simple_commands;
pub use compile::{Budget, BudgetError};
use compile::{FieldSet, field_slot};

use crate::data::{DataProblem, DataSet, DenyField, Plugin};

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

/// The rules naming one tool.
#[derive(Debug, Clone, Default)]
struct ToolRules {
    /// Global rule positions, ascending.
    rules: Vec<usize>,
    path: bool,
    command: bool,
}

/// The compiled deny rules of a set of plugins.
#[derive(Debug, Clone, Default)]
pub struct DenyRules {
    rules: Vec<RuleRef>,
    by_tool: HashMap<String, ToolRules>,
    /// One set per field, indexed by [`field_slot`].
    sets: [Option<FieldSet>; 2],
    refusals: Vec<BudgetError>,
    problems: Vec<DataProblem>,
    /// The workspace paths are resolved from (canonical), when known.
    workspace: Option<std::path::PathBuf>,
    /// The user's home folder as `$HOME` spells it, which a leading `~`
    /// stands for, when known.
    home: Option<String>,
}

impl DenyRules {
    /// Compiles the rules of `plugins` within [`Budget::CHAIN`]; earlier
    /// plugins decide first. Plugins over budget are left out and listed
    /// in [`DenyRules::problems`].
    pub fn new(plugins: &[Plugin]) -> Self {
        Self::with_budget(plugins, Budget::CHAIN)
    }

    /// As [`DenyRules::new`], within `budget`.
    pub fn with_budget(plugins: &[Plugin], budget: Budget) -> Self {
        let mut allotment = compile::allot(plugins, budget);
        let mut rules = loop {
            match Self::assemble(plugins, &allotment.accepted, budget) {
                Ok(rules) => break rules,
                // Measured to fit, yet the engine refused the union: let
                // the plugin the budget served last go, and try again.
                Err(detail) => {
                    tracing::warn!("deny rules could not be compiled together: {detail}");
                    if !allotment.refuse_last(plugins, &detail) {
                        break Self::default();
                    }
                }
            }
        };
        rules.problems = allotment
            .refusals
            .iter()
            .map(|refusal| DataProblem {
                path: refusal.path().clone(),
                error: refusal.to_string(),
            })
            .collect();
        rules.refusals = allotment.refusals;
        rules
    }

    /// Numbers the accepted plugins' rules and compiles each field's set.
    fn assemble(plugins: &[Plugin], accepted: &[bool], budget: Budget) -> Result<Self, String> {
        let mut rules = Vec::new();
        let mut by_tool: HashMap<String, ToolRules> = HashMap::new();
        let mut patterns: [Vec<&str>; 2] = [Vec::new(), Vec::new()];
        let mut positions: [HashMap<&str, usize>; 2] = [HashMap::new(), HashMap::new()];
        let mut rules_of: [Vec<Vec<usize>>; 2] = [Vec::new(), Vec::new()];
        let admitted = plugins
            .iter()
            .zip(accepted)
            .filter_map(|(plugin, ok)| ok.then_some(plugin));
        for plugin in admitted {
            for (index, rule) in plugin.deny.iter().enumerate() {
                let id = rules.len();
                rules.push(RuleRef {
                    plugin: plugin.name.clone(),
                    rule: index,
                    reason: rule.reason.clone(),
                    field: rule.field,
                });
                let slot = field_slot(rule.field);
                let pattern = rule.pattern();
                let position = *positions[slot].entry(pattern).or_insert_with(|| {
                    patterns[slot].push(pattern);
                    rules_of[slot].push(Vec::new());
                    patterns[slot].len() - 1
                });
                rules_of[slot][position].push(id);
                for tool in &rule.tools {
                    let entry = by_tool.entry(tool.clone()).or_default();
                    // A tool listed twice in one rule needs the rule once.
                    if entry.rules.last() != Some(&id) {
                        entry.rules.push(id);
                    }
                    match rule.field {
                        DenyField::Path => entry.path = true,
                        DenyField::Command => entry.command = true,
                    }
                }
            }
        }
        let mut sets: [Option<FieldSet>; 2] = [None, None];
        for (slot, (patterns, rules_of)) in patterns.iter().zip(rules_of).enumerate() {
            if !patterns.is_empty() {
                sets[slot] = Some(FieldSet::build(patterns, rules_of, budget)?);
            }
        }
        Ok(Self {
            rules,
            by_tool,
            sets,
            refusals: Vec::new(),
            problems: Vec::new(),
            workspace: None,
            home: None,
        })
    }

    /// The deny rules of the guard chain for the data files in force: every
    /// plugin, shadowed ones included (see [`DataSet::guard_plugins`]), with
    /// the paths of calls resolved from `workspace`, where zot's tools
    /// resolve them. The one way every front end assembles them.
    pub fn for_data(set: &DataSet, workspace: &std::path::Path) -> Self {
        Self::new(&set.guard_plugins()).resolving_from(workspace)
    }

    /// These rules with a call's paths also matched where they lead from
    /// `workspace`, and a `~` or `$HOME` in a path or a command read as the
    /// process's `$HOME` (rule 2). A workspace that cannot be resolved (gone, not
    /// readable) leaves paths matched as written.
    pub fn resolving_from(mut self, workspace: &std::path::Path) -> Self {
        self.workspace = std::fs::canonicalize(workspace).ok();
        if self.workspace.is_none() && !workspace.as_os_str().is_empty() {
            tracing::warn!(
                "the workspace `{}` cannot be resolved: deny rules match paths as written",
                crate::text::Shown(&workspace.to_string_lossy())
            );
        }
        self.with_home(crate::home::user_home().as_deref())
    }

    /// These rules with a leading `~` read as `home`: the `$HOME` zot runs
    /// with, which bash and, it may be, zot's file tools expand it to. A
    /// home that is not an absolute UTF-8 path is none.
    fn with_home(mut self, home: Option<&std::path::Path>) -> Self {
        self.home = home
            .filter(|home| home.is_absolute())
            .and_then(std::path::Path::to_str)
            .map(|home| home.trim_end_matches('/').to_owned());
        self
    }

    /// The plugins refused for the budget, as problems of their files, for
    /// `list` and `doctor` to show.
    #[cfg(any(test, feature = "internals"))]
    pub fn problems(&self) -> &[DataProblem] {
        &self.problems
    }

    /// Why each refused plugin was refused.
    #[cfg(any(test, feature = "internals"))]
    pub fn refusals(&self) -> &[BudgetError] {
        &self.refusals
    }

    /// Records in `set` what compiling refused: each refused plugin leaves
    /// `plugins` (and `shadowed_plugins`) and becomes a problem of its file,
    /// so that listings show it refused rather than in force.
    pub fn report_to(&self, set: &mut DataSet) {
        let refused = |plugin: &Plugin| self.refusals.iter().any(|r| *r.path() == plugin.path);
        set.plugins.retain(|plugin| !refused(plugin));
        set.shadowed_plugins.retain(|plugin| !refused(plugin));
        set.problems.extend(self.problems.iter().cloned());
    }

    /// The number of rules in force.
    #[cfg(any(test, feature = "internals"))]
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether no rule is in force.
    #[cfg(any(test, feature = "internals"))]
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether any rule covers the tool named `tool_name`.
    #[cfg(any(test, feature = "internals"))]
    pub fn covers(&self, tool_name: &str) -> bool {
        self.by_tool.contains_key(tool_name)
    }

    /// The heap the compiled sets take, in bytes (search caches aside).
    #[cfg(any(test, feature = "internals"))]
    pub fn compiled_bytes(&self) -> usize {
        self.sets.iter().flatten().map(FieldSet::memory_usage).sum()
    }

    /// Whether checking a call of `tool_name` resolves its paths on the
    /// filesystem: a path rule covers the tool and there is a workspace to
    /// resolve from. Such a check may wait on a folder that does not answer.
    pub fn resolves_paths_of(&self, tool_name: &str) -> bool {
        self.workspace.is_some() && self.by_tool.get(tool_name).is_some_and(|tool| tool.path)
    }

    /// The first rule that blocks a call of `tool_name` with `args`, if any.
    pub fn check(&self, tool_name: &str, args: &Value) -> Option<DenyHit> {
        let tool = self.by_tool.get(tool_name)?;
        let args = args.as_object()?;
        let covers = |id: usize| tool.rules.binary_search(&id).is_ok();
        let mut first: Option<usize> = None;
        if tool.path
            && let Some(set) = &self.sets[field_slot(DenyField::Path)]
        {
            for path in strings_read_as(args, DenyField::Path) {
                set.first_rule(path, &covers, &mut first);
                if let Some(normal) = path::normalize_path(path) {
                    set.first_rule(&normal, &covers, &mut first);
                }
                // `~/…` spelled as a tool expanding it spells it, and
                // where that leads.
                let home = self.home.as_deref().zip(path::under_home(path));
                if let Some((home, rest)) = home {
                    let spelled = format!("{home}{rest}");
                    set.first_rule(&spelled, &covers, &mut first);
                    if let Some(normal) = path::normalize_path(&spelled) {
                        set.first_rule(&normal, &covers, &mut first);
                    }
                }
                let Some(workspace) = self.workspace.as_deref() else {
                    continue;
                };
                let from_home = home.and_then(|(home, rest)| {
                    path::leads_to(
                        workspace,
                        std::path::Path::new(home),
                        rest.trim_start_matches('/'),
                    )
                });
                let leads_to = [path::leads_to(workspace, workspace, path), from_home];
                for form in leads_to.into_iter().flatten().filter(|form| form != path) {
                    set.first_rule(&form, &covers, &mut first);
                }
            }
        }
        if tool.command
            && let Some(set) = &self.sets[field_slot(DenyField::Command)]
        {
            for command in strings_read_as(args, DenyField::Command) {
                set.first_rule(command, &covers, &mut first);
                let forms = command::normal_forms(command);
                for form in &forms {
                    set.first_rule(form, &covers, &mut first);
                }
                // bash expands `~` and `$HOME` before the command runs.
                if let Some(home) = self.home.as_deref() {
                    let written = std::iter::once(command);
                    for form in written.chain(forms.iter().map(String::as_str)) {
                        if let Some(expanded) = command::home_expanded(form, home) {
                            set.first_rule(&expanded, &covers, &mut first);
                        }
                    }
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

/// Every string argument `field` reads: under each of its keys, in any
/// spelling zot's tools read as that key (a non-string matches nothing).
fn strings_read_as(
    args: &serde_json::Map<String, Value>,
    field: DenyField,
) -> impl Iterator<Item = &str> {
    field
        .arg_keys()
        .iter()
        .flat_map(move |key| super::zot_args::values_read_as(args, key))
        .filter_map(Value::as_str)
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
            // Attack: keys zot's tools read whatever their case (Go's
            // `encoding/json`), the last one winning: the rule reads them
            // all.
            (
                "bash",
                json!({"Command": "kubectl apply"}),
                some("no-prod-config", 1),
            ),
            (
                "bash",
                json!({"command": "ls", "COMMAND": "kubectl apply"}),
                some("no-prod-config", 1),
            ),
            (
                "write_file",
                json!({"PATH": "config/production.yml"}),
                some("no-prod-config", 0),
            ),
            (
                "write_file",
                json!({"path": "README.md", "FilePath": "config/production.yml"}),
                some("no-prod-config", 0),
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
        assert!(rules.problems().is_empty(), "{:?}", rules.problems());
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

    /// The issue's plugin: `git\s+push` and `rm\s+-rf` on `bash` and on the
    /// data tool `run`, plus an anchored rule, which only the basename of
    /// the program can meet.
    fn no_push() -> Vec<Plugin> {
        vec![plugin(
            r#"{"name":"no-push","description":"d","deny":[
              {"tools":["bash","run"],"commandPattern":"git\\s+push","reason":"pushes are reviewed"},
              {"tools":["bash","run"],"commandPattern":"rm\\s+-rf","reason":"deletes recursively"},
              {"tools":["bash"],"commandPattern":"^curl\\b","reason":"no downloads"}
            ]}"#,
        )]
    }

    /// A grant of `git **` sees the words `git push` in every spelling; the
    /// deny rules see them too, whatever quoting, path or command position
    /// hides them.
    #[test]
    fn a_deny_rule_blocks_what_the_grant_lets_through_in_any_spelling() {
        let rules = DenyRules::new(&no_push());
        let grant = crate::capability::shell::ShellGrant::new(&["git **".to_owned()])
            .unwrap_or_else(|e| panic!("{e}"));
        let push = Some(("no-push".to_owned(), 0));
        let rm = Some(("no-push".to_owned(), 1));
        let curl = Some(("no-push".to_owned(), 2));
        // `(command, whether grant `git **` lets it run, expected hit)`.
        let cases = [
            // Quotes and escapes: the grant sees `git push`, as git will.
            ("git 'push'", true, push.clone()),
            ("git pu''sh", true, push.clone()),
            ("git \"push\"", true, push.clone()),
            ("git pu\\sh", true, push.clone()),
            ("git $'\\x70ush' origin", false, push.clone()),
            // A path to the program, other commands before it, inside a
            // substitution.
            ("/usr/bin/git push", false, push.clone()),
            ("x; git push", false, push.clone()),
            ("true && git push", false, push.clone()),
            ("$(git push)", false, push.clone()),
            ("echo \"`git 'push'`\"", false, push.clone()),
            ("(cd sub && git pu\\sh)", false, push.clone()),
            ("rm '-rf' x", false, rm.clone()),
            ("/bin/rm -rf x", false, rm.clone()),
            ("rm -r''f x", false, rm.clone()),
            ("x\nrm -r\"f\" y", false, rm.clone()),
            // An anchored rule meets the program wherever it stands.
            ("/usr/bin/curl -O x", false, curl.clone()),
            ("X=1 curl x", false, curl.clone()),
            ("echo; exec /usr/bin/curl x", false, curl.clone()),
            ("git status && curl x", false, curl.clone()),
            // An unclosed quote: what `sh` would read before failing.
            ("git 'push", false, push.clone()),
            // Innocent commands pass.
            ("git status", true, None),
            ("git log --grep 'push'", true, None),
            ("echo curl", false, None),
            ("echo x; echo curl", false, None),
            ("rm -r x", false, None),
        ];
        let mut failures = Vec::new();
        for (command, granted, expected) in cases {
            let args = json!({ "command": command });
            let got = hit(&rules, "bash", args.clone());
            if got != expected {
                failures.push(format!("{command:?}: {got:?}, expected {expected:?}"));
            }
            if grant.allows(command).is_ok() != granted {
                failures.push(format!("{command:?}: grant `git **` allows: {}", !granted));
            }
            // The same rules name the data tool `run`, whose rendered
            // command is checked the same way.
            if expected.as_ref().is_some_and(|(_, rule)| *rule < 2) {
                assert_eq!(hit(&rules, "run", args), expected, "{command:?} as `run`");
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// Attack: the workspace's author writes its links. A rule on
    /// `config/production` or `.env` sees where a path leads, so a link to
    /// the guarded place (or above it) carries no call past it, nor does an
    /// absolute spelling past a rule anchored at the workspace's root.
    #[test]
    fn a_path_rule_sees_where_the_workspaces_links_lead() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        // A workspace whose own name a rule's pattern meets.
        let ws = dir.path().join("secret-tool");
        let mkdir = |p: &Path| std::fs::create_dir_all(p).unwrap_or_else(|e| panic!("{e}"));
        let link = |target: &str, at: &str| {
            std::os::unix::fs::symlink(target, ws.join(at)).unwrap_or_else(|e| panic!("{e}"));
        };
        mkdir(&ws.join("config/production/sub"));
        mkdir(&ws.join("docs"));
        std::fs::write(ws.join(".env"), "KEY=1").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(ws.join("docs/readme.md"), "hi").unwrap_or_else(|e| panic!("{e}"));
        link("config/production", "notes");
        link("config", "cfg");
        link(".env", "innocent.txt");
        link("config/production/new.yml", "fresh.yml");
        link(&ws.join(".env").to_string_lossy(), "docs/abs-env");
        link("notes", "chain");
        link("config/production/sub", "deep");
        link("loop", "loop");
        link("docs", "docs-link");
        link("/etc", "outside");
        // A target that is not UTF-8.
        std::os::unix::fs::symlink(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(
                b"config/production/\xff",
            ),
            ws.join("odd"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let guard = plugin(
            r#"{"name":"guard","description":"d","deny":[
              {"tools":["write_file","read_file"],"pathPattern":"^config/production","reason":"hand-edited"},
              {"tools":["read_file"],"pathPattern":"(^|/)\\.env$","reason":"secrets"},
              {"tools":["read_file"],"pathPattern":"^/etc/|secret","reason":"elsewhere"}
            ]}"#,
        );
        let rules = DenyRules::new(std::slice::from_ref(&guard)).resolving_from(&ws);
        let prod = Some(("guard".to_owned(), 0));
        let env = Some(("guard".to_owned(), 1));
        let elsewhere = Some(("guard".to_owned(), 2));
        let abs = |rest: &str| ws.join(rest).to_string_lossy().into_owned();
        let cases = [
            ("write_file", "notes/app.yml".to_owned(), prod.clone()),
            (
                "write_file",
                "cfg/production/app.yml".to_owned(),
                prod.clone(),
            ),
            ("write_file", "chain/app.yml".to_owned(), prod.clone()),
            ("write_file", "odd/app.yml".to_owned(), prod.clone()),
            // A link whose target does not exist yet: the write creates it.
            ("write_file", "fresh.yml".to_owned(), prod.clone()),
            // `..` leaves the folder the link reached, not the one spelled.
            ("write_file", "deep/../app.yml".to_owned(), prod.clone()),
            // Below the last folder that exists, taken as spelled.
            (
                "write_file",
                "notes/new/dir/app.yml".to_owned(),
                prod.clone(),
            ),
            // An absolute spelling of a workspace file, plain or through a link.
            ("write_file", abs("config/production/app.yml"), prod.clone()),
            ("write_file", abs("notes/app.yml"), prod.clone()),
            ("read_file", "innocent.txt".to_owned(), env.clone()),
            ("read_file", "docs/abs-env".to_owned(), env.clone()),
            ("read_file", "docs-link/../.env".to_owned(), env.clone()),
            // Out of the workspace, where it leads is absolute.
            ("read_file", "outside/passwd".to_owned(), elsewhere.clone()),
            (
                "read_file",
                "docs/../../../../../../etc/passwd".to_owned(),
                elsewhere.clone(),
            ),
            // Innocent paths pass, through links too; a looping link is
            // matched as written (its open fails anyway).
            ("write_file", "docs/readme.md".to_owned(), None),
            // A file of the workspace is matched relative to it, so the
            // workspace's own name does not meet `secret`.
            ("read_file", "docs/readme.md".to_owned(), None),
            ("write_file", "docs-link/readme.md".to_owned(), None),
            ("write_file", abs("docs/readme.md"), None),
            ("read_file", "loop/x".to_owned(), None),
            ("read_file", "missing/.envelope".to_owned(), None),
        ];
        let mut failures = Vec::new();
        for (tool, path, expected) in cases {
            let got = hit(&rules, tool, json!({ "path": path }));
            if got != expected {
                failures.push(format!("{tool} {path:?}: {got:?}, expected {expected:?}"));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        // Without a workspace to resolve from, the same links pass: the
        // cases above are the resolution's doing.
        let plain = DenyRules::new(&[guard]);
        for (tool, path) in [
            ("write_file", "notes/app.yml"),
            ("read_file", "innocent.txt"),
        ] {
            assert_eq!(hit(&plain, tool, json!({ "path": path })), None, "{path}");
        }
    }

    /// Attack: the model, steered by a repository's text, spells a path
    /// from `~`, which bash, and it may be a file tool, expand to `$HOME`. A
    /// rule anchored at the home's path sees `~` as `$HOME` spells it and,
    /// for a path, where that leads (links and `..` followed as from the
    /// workspace), here with a `$HOME` that is itself a link.
    #[test]
    fn a_rule_sees_a_tilde_as_the_home_it_stands_for() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = std::fs::canonicalize(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let (home, spelled) = (dir.join("home"), dir.join("me"));
        let ws = home.join("src/app");
        for folder in [home.join(".ssh"), ws.join("config/production")] {
            std::fs::create_dir_all(folder).unwrap_or_else(|e| panic!("{e}"));
        }
        for (target, at) in [(".ssh", home.join("keys")), ("home", spelled.clone())] {
            std::os::unix::fs::symlink(target, at).unwrap_or_else(|e| panic!("{e}"));
        }
        let escaped = |path: &Path| regex::escape(&path.to_string_lossy()).replace('\\', "\\\\");
        let guard = plugin(&format!(
            r#"{{"name":"guard","description":"d","deny":[
              {{"tools":["read_file"],"pathPattern":"^{home}/\\.ssh(/|$)","reason":"keys"}},
              {{"tools":["read_file"],"pathPattern":"^/etc/","reason":"system"}},
              {{"tools":["read_file"],"pathPattern":"^config/production","reason":"prod"}},
              {{"tools":["read_file"],"pathPattern":"^{me}/\\.aws/","reason":"cloud"}},
              {{"tools":["bash"],"commandPattern":"{me}/\\.ssh/","reason":"shell keys"}}
            ]}}"#,
            home = escaped(&home),
            me = escaped(&spelled),
        ));
        let rules = DenyRules::new(std::slice::from_ref(&guard))
            .resolving_from(&ws)
            .with_home(Some(&spelled));
        let rule = |index: usize| Some(("guard".to_owned(), index));
        let up = "../".repeat(home.components().count());
        let paths = [
            // Where `~/` leads: the home's link and the links in it followed.
            ("~/.ssh/id_rsa".to_owned(), rule(0)),
            ("~/.ssh".to_owned(), rule(0)),
            ("~/keys/id_rsa".to_owned(), rule(0)),
            ("~/src/../.ssh/id_rsa".to_owned(), rule(0)),
            (format!("~/{up}etc/passwd"), rule(1)),
            // Home's spelling of a workspace file is relative to it.
            ("~/src/app/config/production/db.yml".to_owned(), rule(2)),
            // As `$HOME` spells it, where nothing exists yet.
            ("~/.aws/credentials".to_owned(), rule(3)),
            ("$HOME/.ssh/id_rsa".to_owned(), rule(0)),
            ("${HOME}/.aws/config".to_owned(), rule(3)),
            ("$HOMES/.ssh/id_rsa".to_owned(), None),
            ("~/notes.txt".to_owned(), None),
            ("~".to_owned(), None),
            // Another user's home takes a lookup this does not make; a
            // `~` further on is no home to any tool.
            ("~root/.ssh/id_rsa".to_owned(), None),
            ("docs/~/.ssh/id_rsa".to_owned(), None),
        ];
        let commands = [
            ("cat ~/.ssh/id_rsa", rule(4)),
            ("cd /tmp && cp ~/.ssh/id_rsa .", rule(4)),
            ("dd if=~/.ssh/id_rsa of=/dev/stdout", rule(4)),
            ("PATH=/bin:~/.ssh/bin:$PATH ls", rule(4)),
            // bash leaves a quoted `~` alone; the forms lost the quotes.
            ("echo '~/.ssh/id_rsa'", rule(4)),
            ("cat ~root/.ssh/id_rsa", None),
            ("cat a~/.ssh/id_rsa", None),
            ("cat \"$HOME/.ssh/id_rsa\"", rule(4)),
        ];
        let mut failures = Vec::new();
        let cases = (paths
            .iter()
            .map(|(path, expected)| ("read_file", json!({ "path": path }), expected)))
        .chain(
            commands
                .iter()
                .map(|(command, expected)| ("bash", json!({ "command": command }), expected)),
        );
        for (tool, args, expected) in cases {
            let got = hit(&rules, tool, args.clone());
            if got != *expected {
                failures.push(format!("{args}: {got:?}, expected {expected:?}"));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        // Without a home, `~/` is a folder of the workspace: the cases
        // above are the home's doing.
        let homeless = DenyRules::new(&[guard]).resolving_from(&ws).with_home(None);
        assert_eq!(
            hit(&homeless, "read_file", json!({"path": "~/.ssh/id_rsa"})),
            None
        );
        assert_eq!(
            hit(&homeless, "bash", json!({"command": "cat ~/.ssh/id_rsa"})),
            None
        );
    }

    /// The normalised forms are computed only for a tool some rule names;
    /// a covered tool with a plain command costs no extra pass.
    #[test]
    fn uncovered_tools_and_plain_commands_need_no_normalising() {
        assert!(command::normal_forms("cargo test --workspace").is_empty());
        let rules = DenyRules::new(&no_push());
        assert!(!rules.covers("glob"));
        assert_eq!(hit(&rules, "glob", json!({"command": "git 'push'"})), None);
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
            refused: Default::default(),
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
        let plugins = fifty_by_ten();
        let started = std::time::Instant::now();
        let allotment = compile::allot(&plugins, Budget::CHAIN);
        println!("measure 50x10: {:?}", started.elapsed());
        let started = std::time::Instant::now();
        let rules = DenyRules::new(&plugins);
        println!("compile 50x10: {:?}", started.elapsed());
        drop(allotment);
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
        let calls = calls.into_iter().chain([
            (
                "bash",
                json!({"command": "git 'status' --porcelain && \"cargo\" test --workspace"}),
            ),
            (
                "bash",
                json!({"command": "cd deploy; /usr/bin/tool42x6 'apply' -f all.yaml"}),
            ),
        ]);
        for (tool, args) in &calls.collect::<Vec<_>>() {
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
