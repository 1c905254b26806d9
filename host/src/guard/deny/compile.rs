//! The chain's deny patterns, compiled once and within a budget.
//!
//! Rules:
//!
//! 1. A pattern is compiled once per field, however many rules, tools and
//!    plugins name it: each field has one set of distinct patterns, and a
//!    rule is a pattern plus the tools it covers.
//! 2. The whole chain has one budget: its distinct patterns may compile to
//!    [`Budget::CHAIN`]'s size together; the user's plugins, then the
//!    workspace's, each have its time to compile.
//!    Measuring stops where the budget runs out, so a plugin over budget
//!    costs no more than what was left.
//! 3. A plugin over budget is refused whole, with a problem naming it and
//!    the limit: half a plugin would guard less than its author thinks and
//!    say nothing. The plugins that fit keep guarding, later ones included.
//! 4. The user's plugins are served first, then the workspace's: a cloned
//!    repository (whose plugins load without trust, since they can only
//!    block) cannot take the budget the user's rules need. The order in
//!    which rules *decide* a call is a separate matter ([`super::DenyRules`]).

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use regex_automata::meta;
use regex_automata::nfa::thompson::{self, WhichCaptures};
use regex_automata::{Input, MatchKind, PatternSet};

use crate::data::plugin::pattern_syntax;
use crate::data::{DataOrigin, DenyField, Plugin};

/// How much the deny patterns of a chain may cost to compile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The bytes the forward automata of the distinct patterns may take
    /// together; the compiled sets in memory take about 2.5 times that.
    pub size: usize,
    /// How long measuring them may take, on the wall clock.
    pub time: Duration,
}

impl Budget {
    /// The budget of every guard chain: 2 MiB, 2 s. An ordinary pattern
    /// takes one or two KiB (`kubectl\s+apply` ≈ 1.4 KiB), so a thousand
    /// fit with room to spare; a `\w{30}` takes ≈ 0.5 MiB. Refusing a plugin
    /// over it takes two compiles of at most the budget (≈ 70 ms). The time
    /// is a backstop the size budget should never let a machine reach.
    pub const CHAIN: Self = Self {
        size: 2 * 1024 * 1024,
        time: Duration::from_secs(2),
    };
}

impl Default for Budget {
    fn default() -> Self {
        Self::CHAIN
    }
}

/// Why a plugin's rules were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// Its patterns would take the chain past the size budget.
    #[error(
        "`{}`: plugin `{plugin}` refused: its rules exceed the deny-rule budget (the patterns \
         of all plugins together may compile to {}); simplify its patterns or drop rules",
        crate::text::shown(&.path.display().to_string()),
        bytes(*.limit)
    )]
    OverSize {
        /// The plugin's file.
        path: PathBuf,
        /// The plugin's name.
        plugin: String,
        /// The chain's size budget, in bytes.
        limit: usize,
    },
    /// Compiling the chain's patterns took the time budget before its
    /// patterns were done.
    #[error(
        "`{}`: plugin `{plugin}` refused: its rules exceed the deny-rule budget (the patterns \
         of all plugins together may take {} to compile); simplify its patterns or drop rules",
        crate::text::shown(&.path.display().to_string()),
        duration(*.limit)
    )]
    OverTime {
        /// The plugin's file.
        path: PathBuf,
        /// The plugin's name.
        plugin: String,
        /// The chain's time budget.
        limit: Duration,
    },
    /// The chain's set could not be built with its patterns (a limit of
    /// the regex engine the budget did not foresee).
    #[error(
        "`{}`: plugin `{plugin}` refused: its rules could not be compiled with the others: \
         {detail}",
        crate::text::shown(&.path.display().to_string())
    )]
    Unjoinable {
        /// The plugin's file.
        path: PathBuf,
        /// The plugin's name.
        plugin: String,
        /// The engine's error.
        detail: String,
    },
}

impl BudgetError {
    /// The refused plugin's file.
    pub fn path(&self) -> &PathBuf {
        match self {
            Self::OverSize { path, .. }
            | Self::OverTime { path, .. }
            | Self::Unjoinable { path, .. } => path,
        }
    }
}

/// `4 MiB`, or the exact number of bytes.
fn bytes(n: usize) -> String {
    const MIB: usize = 1024 * 1024;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else {
        format!("{n} bytes")
    }
}

/// `2 s`, or milliseconds.
fn duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// Which plugins the budget admits, by index into the plugins given.
#[derive(Debug)]
pub(super) struct Allotment {
    pub(super) accepted: Vec<bool>,
    pub(super) refusals: Vec<BudgetError>,
    /// Plugin indices in the order the budget served them.
    order: Vec<usize>,
}

impl Allotment {
    /// Refuses the accepted plugin with rules that the budget served last
    /// (the workspace's before the user's); `false` when none is left.
    pub(super) fn refuse_last(&mut self, plugins: &[Plugin], detail: &str) -> bool {
        let last = self
            .order
            .iter()
            .rev()
            .copied()
            .find(|&i| self.accepted[i] && plugins.get(i).is_some_and(|p| !p.deny.is_empty()));
        let (Some(index), Some(plugin)) = (last, last.and_then(|i| plugins.get(i))) else {
            return false;
        };
        self.accepted[index] = false;
        self.refusals.push(BudgetError::Unjoinable {
            path: plugin.path.clone(),
            plugin: plugin.name.clone(),
            detail: detail.to_owned(),
        });
        true
    }
}

/// Decides which of `plugins` fit in `budget`. The common case costs one
/// compile per field: every distinct pattern together, which fits. Only
/// when that goes over are the plugins measured one by one, the user's
/// first, each plugin's new patterns together.
pub(super) fn allot(plugins: &[Plugin], budget: Budget) -> Allotment {
    let started = Instant::now();
    let mut order: Vec<usize> = (0..plugins.len()).collect();
    // Stable: the user's plugins, in their order, then the workspace's.
    order.sort_by_key(|&i| plugins[i].origin == DataOrigin::Project);
    let mut allotment = Allotment {
        accepted: vec![false; plugins.len()],
        refusals: Vec::new(),
        order,
    };
    let no_patterns: [HashSet<&str>; 2] = [HashSet::new(), HashSet::new()];
    let everything: Vec<&Plugin> = plugins.iter().collect();
    let all = new_patterns(&everything, &no_patterns);
    if measure_fields(&all, budget.size).is_ok() && started.elapsed() <= budget.time {
        allotment.accepted.fill(true);
        return allotment;
    }
    let mut compiled = no_patterns;
    let mut left = budget.size;
    // Each side has the time budget to itself, from its first plugin on:
    // the workspace's patterns, measured in the common case above and last
    // here, cannot run out the user's clock.
    let mut clock: Option<(bool, Instant)> = None;
    for &index in &allotment.order {
        let plugin = &plugins[index];
        let workspace = plugin.origin == DataOrigin::Project;
        let started = match clock {
            Some((side, started)) if side == workspace => started,
            _ => clock.insert((workspace, Instant::now())).1,
        };
        let new = new_patterns(&[plugin], &compiled);
        let refusal = if new.iter().all(Vec::is_empty) {
            None
        } else if started.elapsed() > budget.time {
            Some(BudgetError::OverTime {
                path: plugin.path.clone(),
                plugin: plugin.name.clone(),
                limit: budget.time,
            })
        } else {
            match measure_fields(&new, left) {
                Ok(cost) => {
                    left = left.saturating_sub(cost);
                    None
                }
                Err(Measured::TooLarge) => Some(BudgetError::OverSize {
                    path: plugin.path.clone(),
                    plugin: plugin.name.clone(),
                    limit: budget.size,
                }),
                Err(Measured::Failed(detail)) => Some(BudgetError::Unjoinable {
                    path: plugin.path.clone(),
                    plugin: plugin.name.clone(),
                    detail,
                }),
            }
        };
        match refusal {
            Some(refusal) => {
                tracing::warn!("{refusal}");
                allotment.refusals.push(refusal);
            }
            None => {
                allotment.accepted[index] = true;
                for (slot, patterns) in new.into_iter().enumerate() {
                    compiled[slot].extend(patterns);
                }
            }
        }
    }
    allotment
}

/// The distinct patterns of `plugins` per field, in order, leaving out
/// those in `known`.
fn new_patterns<'a>(plugins: &[&'a Plugin], known: &[HashSet<&'a str>; 2]) -> [Vec<&'a str>; 2] {
    let mut seen: [HashSet<&str>; 2] = [HashSet::new(), HashSet::new()];
    let mut new: [Vec<&str>; 2] = [Vec::new(), Vec::new()];
    for rule in plugins.iter().flat_map(|plugin| &plugin.deny) {
        let slot = field_slot(rule.field);
        let pattern = rule.pattern();
        if !known[slot].contains(pattern) && seen[slot].insert(pattern) {
            new[slot].push(pattern);
        }
    }
    new
}

/// The index of a field's set.
pub(super) fn field_slot(field: DenyField) -> usize {
    match field {
        DenyField::Path => 0,
        DenyField::Command => 1,
    }
}

enum Measured {
    TooLarge,
    Failed(String),
}

/// What each field's patterns cost together, if that is within `limit`.
fn measure_fields(patterns: &[Vec<&str>; 2], limit: usize) -> Result<usize, Measured> {
    let mut cost = 0usize;
    for field in patterns {
        cost = cost.saturating_add(measure(field, limit.saturating_sub(cost))?);
    }
    Ok(cost)
}

/// The size of the forward automaton of `patterns`, compiled as the set
/// will compile them; [`Measured::TooLarge`] as soon as it passes `limit`,
/// so that measuring costs no more than the budget allows.
fn measure(patterns: &[&str], limit: usize) -> Result<usize, Measured> {
    if patterns.is_empty() {
        return Ok(0);
    }
    thompson::Compiler::new()
        .syntax(pattern_syntax())
        .configure(
            thompson::Config::new()
                .which_captures(WhichCaptures::None)
                .nfa_size_limit(Some(limit)),
        )
        .build_many(patterns)
        .map(|nfa| nfa.memory_usage())
        .map_err(|err| {
            if err.size_limit().is_some() {
                Measured::TooLarge
            } else {
                Measured::Failed(err.to_string())
            }
        })
}

/// One field's distinct patterns as one automaton, and the rules that use
/// each pattern.
#[derive(Debug, Clone)]
pub(super) struct FieldSet {
    matcher: meta::Regex,
    /// Per pattern, the global positions of its rules, ascending.
    rules: Vec<Vec<usize>>,
}

impl FieldSet {
    /// Compiles `patterns` (measured already) into one set.
    pub(super) fn build(
        patterns: &[&str],
        rules: Vec<Vec<usize>>,
        budget: Budget,
    ) -> Result<Self, String> {
        let config = meta::Config::new()
            .match_kind(MatchKind::All)
            .utf8_empty(true)
            .which_captures(WhichCaptures::None)
            // Measured within the budget already; the reverse automaton
            // gets room on top.
            .nfa_size_limit(Some(budget.size.saturating_mul(4)))
            .hybrid_cache_capacity(2 * 1024 * 1024)
            // A literal prefilter over many patterns costs more to build
            // than the set (a thousand patterns: 1.5 s instead of 45 ms)
            // and saves little on a command line.
            .auto_prefilter(false);
        let matcher = meta::Builder::new()
            .configure(config)
            .syntax(pattern_syntax())
            .build_many(patterns)
            .map_err(|err| match err.size_limit() {
                Some(limit) => format!("the set would pass {}", bytes(limit)),
                None => err.to_string(),
            })?;
        Ok(Self { matcher, rules })
    }

    /// Lowers `first` to the earliest rule whose pattern matches `text`
    /// and that `covers` the tool called.
    pub(super) fn first_rule(
        &self,
        text: &str,
        covers: &impl Fn(usize) -> bool,
        first: &mut Option<usize>,
    ) {
        if !self.matcher.is_match(text) {
            return;
        }
        let mut matched = PatternSet::new(self.matcher.pattern_len());
        self.matcher
            .which_overlapping_matches(&Input::new(text), &mut matched);
        for pattern in matched.iter() {
            let Some(rules) = self.rules.get(pattern.as_usize()) else {
                continue;
            };
            for &rule in rules {
                if first.is_some_and(|f| rule >= f) {
                    break;
                }
                if covers(rule) {
                    *first = Some(rule);
                    break;
                }
            }
        }
    }

    /// The heap the compiled set takes (without per-thread search caches).
    #[cfg(any(test, feature = "internals"))]
    pub(super) fn memory_usage(&self) -> usize {
        self.matcher.memory_usage()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::{Value, json};

    use super::*;
    use crate::guard::DenyRules;

    fn plugin(file: &str, origin: DataOrigin, value: &Value) -> Plugin {
        Plugin::parse(&value.to_string(), Path::new(file), origin)
            .unwrap_or_else(|e| panic!("{e}"))
            .value
    }

    /// The user's plugin every test expects to keep guarding.
    fn keeper() -> Plugin {
        plugin(
            "/home/zot/plugins/keep.json",
            DataOrigin::User,
            &json!({"name": "keep", "description": "d", "deny": [
                {"tools": ["bash"], "commandPattern": r"rm\s+-rf", "reason": "no"}
            ]}),
        )
    }

    fn blocks(rules: &DenyRules, command: &str) -> Option<String> {
        rules
            .check("bash", &json!({ "command": command }))
            .map(|hit| hit.decider())
    }

    /// The issue's 12 KB plugin: 16 rules, each of a distinct pattern that
    /// compiles to ≈ 0.5 MiB, each naming 100 tools.
    fn twelve_kb() -> (String, Value) {
        let tools: Vec<String> = (0..100).map(|t| format!("to{t:02}")).collect();
        let rules: Vec<Value> = (0..16)
            .map(|r| json!({"tools": tools, "commandPattern": format!(r"\w{{30}}{r:02}"), "reason": "r"}))
            .collect();
        let value = json!({"name": "wide", "description": "d", "deny": rules});
        (value.to_string(), value)
    }

    /// The issue's 69 KB plugin: 1 000 rules of distinct heavy patterns.
    fn thousand_rules() -> (String, Value) {
        let rules: Vec<Value> = (0..1000)
            .map(|r| json!({"tools": ["bash"], "commandPattern": format!(r"\w{{30}}{r:04}"), "reason": "r"}))
            .collect();
        let value = json!({"name": "many", "description": "d", "deny": rules});
        (value.to_string(), value)
    }

    fn over_size(file: &str, name: &str) -> String {
        format!(
            "`{file}`: plugin `{name}` refused: its rules exceed the deny-rule budget (the \
             patterns of all plugins together may compile to 2 MiB); simplify its patterns or \
             drop rules"
        )
    }

    #[test]
    fn the_issues_heavy_plugins_are_refused_quickly_and_the_others_keep_guarding() {
        for (text, value) in [twelve_kb(), thousand_rules()] {
            let file = "/ws/.zot/plugins/heavy.json";
            let heavy = plugin(file, DataOrigin::Project, &value);
            let name = heavy.name.clone();
            // The workspace's plugin comes first, as in `DataSet::plugins`.
            let rules = DenyRules::new(&[heavy, keeper()]);
            let problems: Vec<&str> = rules.problems().iter().map(|p| p.error.as_str()).collect();
            assert_eq!(problems, [over_size(file, &name)], "{} bytes", text.len());
            assert_eq!(rules.problems()[0].path, Path::new(file));
            assert_eq!(rules.len(), 1);
            assert_eq!(
                blocks(&rules, "rm -rf /").as_deref(),
                Some("plugin `keep` rule 1")
            );
            // Well under the issue's 50 MiB (it took 1.94 GiB).
            assert!(
                rules.compiled_bytes() < 1024 * 1024,
                "{}",
                rules.compiled_bytes()
            );
        }
        assert!((11_000..13_000).contains(&twelve_kb().0.len()));
        assert!((60_000..70_000).contains(&thousand_rules().0.len()));
    }

    #[test]
    fn a_thousand_ordinary_rules_fit_with_room_to_spare() {
        let rules: Vec<Value> = (0..1000)
            .map(|r| json!({"tools": ["bash"], "commandPattern": format!(r"forbidden-{r:04}\s+--now"), "reason": "r"}))
            .collect();
        let many = plugin(
            "/ws/.zot/plugins/many.json",
            DataOrigin::Project,
            &json!({"name": "many", "description": "d", "deny": rules}),
        );
        let rules = DenyRules::new(&[many, keeper()]);
        assert!(rules.problems().is_empty(), "{:?}", rules.problems());
        assert_eq!(rules.len(), 1001);
        assert_eq!(
            blocks(&rules, "x; forbidden-0999 '--now'").as_deref(),
            Some("plugin `many` rule 1000")
        );
        assert!(
            rules.compiled_bytes() < 50 * 1024 * 1024,
            "{}",
            rules.compiled_bytes()
        );
    }

    /// A pattern shared by many plugins, tools and rules compiles once and
    /// is charged once: a hundred plugins of one heavy pattern fit.
    #[test]
    fn the_same_pattern_is_compiled_and_charged_once() {
        let plugins: Vec<Plugin> = (0..100)
            .map(|p| {
                let tools: Vec<String> = (0..50).map(|t| format!("t{t}")).collect();
                plugin(
                    &format!("/ws/.zot/plugins/p{p}.json"),
                    DataOrigin::Project,
                    &json!({"name": format!("p{p}"), "description": "d", "deny": [
                        {"tools": tools, "commandPattern": r"\w{30}", "reason": "r"},
                        {"tools": tools, "commandPattern": r"\w{30}", "reason": "r"}
                    ]}),
                )
            })
            .collect();
        let rules = DenyRules::new(&plugins);
        assert!(rules.problems().is_empty(), "{:?}", rules.problems());
        assert_eq!(rules.len(), 200);
        let one = DenyRules::new(&plugins[..1]).compiled_bytes();
        assert_eq!(rules.compiled_bytes(), one);
        let hit = rules.check("t49", &json!({"command": "a".repeat(30)}));
        assert_eq!(
            hit.map(|h| h.decider()).as_deref(),
            Some("plugin `p0` rule 1")
        );
    }

    /// The workspace's plugin is listed (and decides) first, but the budget
    /// serves the user's first: a cloned repository cannot starve it.
    #[test]
    fn the_users_plugins_are_served_before_the_workspaces() {
        let heavy = |file: &str, origin, name: &str, pattern: &str| {
            plugin(
                file,
                origin,
                &json!({"name": name, "description": "d", "deny": [
                    {"tools": ["bash"], "commandPattern": pattern, "reason": name}
                ]}),
            )
        };
        let workspace = heavy(
            "/ws/.zot/plugins/w.json",
            DataOrigin::Project,
            "w",
            r"\w{31}",
        );
        let user = heavy("/home/zot/plugins/u.json", DataOrigin::User, "u", r"\w{30}");
        let budget = Budget {
            size: 1024 * 1024,
            time: Duration::from_secs(60),
        };
        let rules = DenyRules::with_budget(&[workspace.clone(), user.clone()], budget);
        let refused: Vec<&Path> = rules
            .refusals()
            .iter()
            .map(|r| r.path().as_path())
            .collect();
        assert_eq!(refused, [Path::new("/ws/.zot/plugins/w.json")]);
        assert_eq!(
            rules.problems()[0].error,
            "`/ws/.zot/plugins/w.json`: plugin `w` refused: its rules exceed the deny-rule \
             budget (the patterns of all plugins together may compile to 1 MiB); simplify its \
             patterns or drop rules"
        );
        assert_eq!(
            blocks(&rules, &"a".repeat(31)).as_deref(),
            Some("plugin `u` rule 1")
        );
        // Two plugins of the user's: the order they come in decides.
        let mut second = workspace;
        second.origin = DataOrigin::User;
        let rules = DenyRules::with_budget(&[second, user], budget);
        let refused: Vec<&str> = rules
            .refusals()
            .iter()
            .map(|r| match r {
                BudgetError::OverSize { plugin, .. } => plugin.as_str(),
                _ => "?",
            })
            .collect();
        assert_eq!(refused, ["u"]);
    }

    /// A pattern that alone would compile past the budget (≈ 35 MiB) is
    /// refused after compiling no more than the budget.
    #[test]
    fn one_huge_pattern_refuses_its_plugin_whole() {
        let file = "/ws/.zot/plugins/huge.json";
        let huge = plugin(
            file,
            DataOrigin::Project,
            &json!({"name": "huge", "description": "d", "deny": [
                {"tools": ["bash"], "commandPattern": "fine", "reason": "r"},
                {"tools": ["bash"], "commandPattern": r"\w{1000}\w{1000}", "reason": "r"}
            ]}),
        );
        let rules = DenyRules::new(&[huge, keeper()]);
        let problems: Vec<&str> = rules.problems().iter().map(|p| p.error.as_str()).collect();
        assert_eq!(problems, [over_size(file, "huge")]);
        // Whole: its harmless first rule went with it.
        assert_eq!(blocks(&rules, "fine"), None);
        assert_eq!(
            blocks(&rules, "rm -rf x").as_deref(),
            Some("plugin `keep` rule 1")
        );
    }

    #[test]
    fn past_the_time_budget_plugins_with_new_patterns_are_refused() {
        let slow = plugin(
            "/ws/.zot/plugins/slow.json",
            DataOrigin::Project,
            &json!({"name": "slow", "description": "d", "deny": [
                {"tools": ["bash"], "commandPattern": r"\w{5}a", "reason": "r"},
                {"tools": ["bash"], "commandPattern": r"\w{5}b", "reason": "r"},
                {"tools": ["bash"], "commandPattern": r"\w{5}c", "reason": "r"}
            ]}),
        );
        let budget = Budget {
            size: Budget::CHAIN.size,
            time: Duration::from_nanos(1),
        };
        let rules = DenyRules::with_budget(&[slow, keeper()], budget);
        let problems: Vec<&str> = rules.problems().iter().map(|p| p.error.as_str()).collect();
        assert_eq!(
            problems,
            [
                "`/home/zot/plugins/keep.json`: plugin `keep` refused: its rules exceed the \
                 deny-rule budget (the patterns of all plugins together may take 0 ms to \
                 compile); simplify its patterns or drop rules",
                "`/ws/.zot/plugins/slow.json`: plugin `slow` refused: its rules exceed the \
                 deny-rule budget (the patterns of all plugins together may take 0 ms to \
                 compile); simplify its patterns or drop rules",
            ]
        );
        assert!(rules.is_empty());
    }

    #[test]
    fn refusals_leave_the_data_set_and_become_its_problems() {
        let file = "/ws/.zot/plugins/heavy.json";
        let heavy = plugin(file, DataOrigin::Project, &twelve_kb().1);
        let mut set = crate::data::DataSet {
            plugins: vec![heavy, keeper()],
            ..crate::data::DataSet::default()
        };
        let rules = DenyRules::for_data(&set, Path::new("/ws"));
        rules.report_to(&mut set);
        let names: Vec<&str> = set.plugins.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["keep"]);
        let problems: Vec<&str> = set.problems.iter().map(|p| p.error.as_str()).collect();
        assert_eq!(problems, [over_size(file, "wide")]);
    }

    #[test]
    fn author_bytes_in_a_file_name_are_escaped_in_the_problem() {
        let file = "/ws/.zot/plugins/\u{1b}[2Kx.json";
        let heavy = plugin(file, DataOrigin::Project, &twelve_kb().1);
        let rules = DenyRules::new(&[heavy]);
        assert_eq!(
            rules.problems()[0].error,
            over_size("/ws/.zot/plugins/\\u{1b}[2Kx.json", "wide")
        );
    }
}
