//! Data-only extensions: declarative tools, refusal plugins and Markdown skills.
//!
//! Everything here is data, never code. A *tool* describes one bounded
//! operation the host performs itself ([`tool`]); a *plugin* carries deny
//! rules the guard chain enforces ([`plugin`], `crate::guard`); a *skill*
//! is Markdown instructions with a name ([`skill`]). Tools that are not
//! auto-approved wait for the user's approval ([`approval`]).
//!
//! # Where the files live
//!
//! [`DataSearch::load`] reads `tools/*.json`, `plugins/*.json` and
//! `skills/*.md` from four roots, in increasing precedence:
//!
//! | origin | root |
//! |---|---|
//! | user | `$ZOT_HOME` |
//! | user | `~/.shiro-neko` |
//! | project | `<workspace>/.zot` |
//! | project | `<workspace>/.shiro` |
//!
//! Installed data packages ([`package`]) are roots too, each below the
//! folders of its scope: `$ZOT_HOME/packages/*` (origin `registry`) below
//! `$ZOT_HOME`, `<workspace>/.zot/packages/*` (origin `project`) below
//! `<workspace>/.zot`. A package whose files changed since it was installed
//! is refused by the host ([`DataSearch::refuse`]) and loads nothing.
//!
//! A name found in a higher root shadows the same name in a lower one (the
//! loser is kept in [`DataSet::shadowed`]); inside one folder the first file
//! in name order wins. Skills also merge with the builtin and registry ones,
//! with the precedence `builtin < registry < user < project`.
//!
//! A malformed file is reported in [`DataSet::problems`] and skipped, never
//! fatal; unknown keys are reported in [`DataSet::warnings`]. A workspace's
//! data folders hold at most [`MAX_WORKSPACE_DATA_ENTRIES`] entries and
//! [`MAX_WORKSPACE_DATA_BYTES`] of files together: a folder that would pass
//! either is a problem too, and loads nothing.

pub mod approval;
pub mod package;
pub mod plugin;
pub mod skill;
pub mod tool;

use crate::user_file::FileError;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

pub use approval::{ApprovalError, Approvals, NotApproved};
pub use plugin::{DenyField, DenyRule, Plugin};
pub use skill::Skill;
pub use tool::{DataTool, Rendered, ToolKind};

/// The largest data file read. Protects the host from memory exhaustion by a
/// huge (or endless, like a FIFO) file dropped into a data folder.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The most entries read from a workspace's data folders together (its
/// `tools/`, `plugins/` and `skills/`, its packages and theirs): a folder
/// that would pass it loads nothing and is reported as a problem, and so
/// does every folder after it. A cloned repository's 100 000 skill files
/// (which load without trust), in one folder or spread over a thousand
/// packages, would otherwise keep `serve` from answering intercepts while
/// it read them (`THREATS.md` rule 7). The user's own folders have no cap:
/// refusing one whole would switch off the user's refusal plugins.
pub const MAX_WORKSPACE_DATA_ENTRIES: usize = 10_000;

/// The most bytes of files read from a workspace's data folders together
/// (each counted up to [`MAX_FILE_BYTES`], as read): a folder whose files
/// would pass it loads nothing and is reported as a problem. Without it a
/// cloned repository's 10 000 files of 1 MiB each (a few kilobytes of
/// download, compressed) would hold `serve` reading, and holding, 10 GiB.
pub const MAX_WORKSPACE_DATA_BYTES: u64 = 32 * 1024 * 1024;

/// Where a data extension came from, in increasing precedence among the
/// user's side; a workspace's tool or skill never takes a name that side
/// holds (see [`DataSet::add_skill`]), and its plugins only add rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DataOrigin {
    /// Shipped inside zotbox.
    Builtin,
    /// Installed from the registry.
    Registry,
    /// The user's folders: `$ZOT_HOME` and `~/.shiro-neko`.
    User,
    /// The project's folders: `<workspace>/.zot` and `<workspace>/.shiro`.
    Project,
}

impl DataOrigin {
    /// The origin as shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Builtin => "builtin",
            Self::Registry => "registry",
            Self::User => "user",
            Self::Project => "project",
        }
    }
}

impl std::fmt::Display for DataOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A value parsed from a data file, with the warnings it raised.
#[derive(Debug, Clone)]
pub struct Parsed<T> {
    /// The value.
    pub value: T,
    /// Non-fatal findings, such as unknown keys, as phrases.
    pub warnings: Vec<String>,
}

/// A file reported while loading: a problem (skipped) or a warning (loaded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataProblem {
    /// The file at fault.
    pub path: PathBuf,
    /// What was wrong, naming the file and field.
    pub error: String,
}

/// Every data extension found.
#[derive(Debug, Clone, Default)]
pub struct DataSet {
    /// The winning tools, highest precedence first.
    pub tools: Vec<DataTool>,
    /// The winning refusal plugins, highest precedence first; their deny
    /// rules are checked in this order.
    pub plugins: Vec<Plugin>,
    /// The winning skills.
    pub skills: Vec<Skill>,
    /// The losers on name: `(kind, name, path)`, kind being `tool`, `plugin`
    /// or `skill`.
    pub shadowed: Vec<(String, String, PathBuf)>,
    /// Plugins that lost on name. Their deny rules stay in force (see
    /// [`DataSet::guard_plugins`]): a refusal plugin can only be added to,
    /// never switched off by another file of the same name.
    pub shadowed_plugins: Vec<Plugin>,
    /// Tools of a workspace the user has not trusted (see
    /// [`crate::store::trust`]): listed, refused by name, never offered or
    /// run, and they shadow nothing (the user's tool of the same name stays
    /// in force).
    pub untrusted_tools: Vec<DataTool>,
    /// Files that failed to load and were skipped.
    pub problems: Vec<DataProblem>,
    /// Files that loaded with warnings (unknown keys, ignored fields).
    pub warnings: Vec<DataProblem>,
    /// Where each name stands in the lists above, for the `add_*` methods.
    pub(crate) names: Names,
    /// Entries of the workspace's data folders read so far, against
    /// [`MAX_WORKSPACE_DATA_ENTRIES`].
    pub(crate) workspace_entries: usize,
    /// Bytes of the workspace's data files taken so far, against
    /// [`MAX_WORKSPACE_DATA_BYTES`].
    pub(crate) workspace_bytes: u64,
}

/// The [`NameIndex`] of each list of a [`DataSet`] that names are added to.
#[derive(Debug, Clone, Default)]
pub(crate) struct Names {
    tools: NameIndex,
    untrusted_tools: NameIndex,
    plugins: NameIndex,
    skills: NameIndex,
}

/// Where each name stands in one list of a [`DataSet`], so that adding one
/// file's tool, plugin or skill is one look-up. Searching the list instead
/// made loading N files cost N² name comparisons: 40 000 skill files in a
/// cloned repository kept `serve` from answering intercepts for seconds.
///
/// The lists are public, and are changed from outside (refused plugins are
/// removed after loading): a list whose length, or whose entry at a known
/// name's place, no longer agrees with the index is indexed again before
/// the index is believed.
#[derive(Debug, Clone, Default)]
struct NameIndex {
    /// Each name's place in the list; the first place when one repeats.
    places: std::collections::HashMap<String, usize>,
    /// List entries whose name was read: what loading costs, for tests.
    #[cfg(test)]
    reads: usize,
}

impl NameIndex {
    /// The place of `name` in `list`, whose entries are named by `name_of`.
    fn find<T>(&mut self, list: &[T], name: &str, name_of: fn(&T) -> &str) -> Option<usize> {
        let place = self.places.get(name).copied();
        let agrees = self.places.len() == list.len()
            && place.is_none_or(|at| {
                list.get(at)
                    .is_some_and(|item| self.read(item, name_of) == name)
            });
        if !agrees {
            self.places.clear();
            for (at, item) in list.iter().enumerate() {
                let name = self.read(item, name_of).to_owned();
                self.places.entry(name).or_insert(at);
            }
        }
        self.places.get(name).copied()
    }

    /// Notes that `name` was pushed at `at`, the end of the list.
    fn pushed(&mut self, name: &str, at: usize) {
        self.places.insert(name.to_owned(), at);
    }

    fn read<'a, T>(&mut self, item: &'a T, name_of: fn(&T) -> &str) -> &'a str {
        #[cfg(test)]
        {
            self.reads += 1;
        }
        name_of(item)
    }
}

impl DataSet {
    /// The tool named `name`.
    pub fn tool(&self, name: &str) -> Option<&DataTool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The tool named `name` held back because its workspace is not trusted.
    pub fn untrusted_tool(&self, name: &str) -> Option<&DataTool> {
        self.untrusted_tools.iter().find(|t| t.name == name)
    }

    /// The plugin named `name`.
    pub fn plugin(&self, name: &str) -> Option<&Plugin> {
        self.plugins.iter().find(|p| p.name == name)
    }

    /// The skill named `name`.
    pub fn skill(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    /// Adds a skill shipped inside zotbox; user and project skills of the
    /// same name override it, whether added before or after. An empty path
    /// becomes `builtin:<name>`.
    pub fn add_builtin_skill(&mut self, mut skill: Skill) {
        skill.origin = DataOrigin::Builtin;
        if skill.path.as_os_str().is_empty() {
            skill.path = PathBuf::from(format!("builtin:{}", skill.name));
        }
        self.add_skill(skill);
    }

    /// Adds a skill installed from the registry; it overrides a builtin of
    /// the same name, and user and project skills override it.
    pub fn add_registry_skill(&mut self, mut skill: Skill) {
        skill.origin = DataOrigin::Registry;
        self.add_skill(skill);
    }

    /// Adds a skill, merging by name: a higher [`DataOrigin`] replaces a
    /// lower one, but a workspace's never replaces one the user has (theirs,
    /// installed or built in: a cloned repository would otherwise answer the
    /// user's own `/deploy`); on a tie the skill already present stays. The
    /// loser is recorded in [`DataSet::shadowed`].
    pub fn add_skill(&mut self, skill: Skill) {
        // The workspace's below every origin of the user's side.
        let rank = |origin: DataOrigin| match origin {
            DataOrigin::Project => 0,
            DataOrigin::Builtin => 1,
            DataOrigin::Registry => 2,
            DataOrigin::User => 3,
        };
        let place = self
            .names
            .skills
            .find(&self.skills, &skill.name, |s| &s.name);
        match place.and_then(|at| self.skills.get_mut(at)) {
            Some(existing) if rank(existing.origin) >= rank(skill.origin) => {
                self.shadowed
                    .push(("skill".to_owned(), skill.name.clone(), skill.path));
            }
            Some(existing) => {
                let lost = std::mem::replace(existing, skill);
                self.shadowed
                    .push(("skill".to_owned(), lost.name, lost.path));
            }
            None => {
                self.names.skills.pushed(&skill.name, self.skills.len());
                self.skills.push(skill);
            }
        }
    }

    fn hold_tool(&mut self, tool: DataTool) {
        let untrusted = &mut self.names.untrusted_tools;
        if untrusted
            .find(&self.untrusted_tools, &tool.name, |t| &t.name)
            .is_some()
        {
            self.shadowed
                .push(("tool".to_owned(), tool.name, tool.path));
        } else {
            untrusted.pushed(&tool.name, self.untrusted_tools.len());
            self.untrusted_tools.push(tool);
        }
    }

    fn add_tool(&mut self, tool: DataTool) {
        let tools = &mut self.names.tools;
        if tools.find(&self.tools, &tool.name, |t| &t.name).is_some() {
            self.shadowed
                .push(("tool".to_owned(), tool.name, tool.path));
        } else {
            tools.pushed(&tool.name, self.tools.len());
            self.tools.push(tool);
        }
    }

    /// Every plugin whose deny rules the guard chain enforces, in the order
    /// they decide: the winners on name, then the plugins they shadow. A
    /// workspace plugin named like a user plugin therefore adds its rules
    /// and removes none. Every front end (`call`, `serve`, `run`, the
    /// library) builds its chain from this.
    pub fn guard_plugins(&self) -> Vec<Plugin> {
        self.plugins
            .iter()
            .chain(&self.shadowed_plugins)
            .cloned()
            .collect()
    }

    fn add_plugin(&mut self, plugin: Plugin) {
        let plugins = &mut self.names.plugins;
        if plugins
            .find(&self.plugins, &plugin.name, |p| &p.name)
            .is_some()
        {
            self.shadowed.push((
                "plugin".to_owned(),
                plugin.name.clone(),
                plugin.path.clone(),
            ));
            self.shadowed_plugins.push(plugin);
        } else {
            plugins.pushed(&plugin.name, self.plugins.len());
            self.plugins.push(plugin);
        }
    }

    fn take<T>(&mut self, path: &Path, result: Result<Parsed<T>, FileError>) -> Option<T> {
        match result {
            Ok(parsed) => {
                for warning in parsed.warnings {
                    let error = format!("`{}`: {warning}", path.display());
                    tracing::warn!("{error}");
                    self.warnings.push(DataProblem {
                        path: path.to_owned(),
                        error,
                    });
                }
                Some(parsed.value)
            }
            Err(error) => {
                tracing::warn!("{error}");
                self.problems.push(DataProblem {
                    path: path.to_owned(),
                    error: error.to_string(),
                });
                None
            }
        }
    }
}

/// Where to look for data extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataSearch {
    /// The project (workspace) root.
    pub workspace: PathBuf,
    /// The user's `$ZOT_HOME`.
    pub zot_home: PathBuf,
    /// The user's home folder, for `~/.shiro-neko`; `None` skips it.
    pub home_dir: Option<PathBuf>,
    /// Installed packages not to load, by folder, with why.
    pub refused: std::collections::BTreeMap<PathBuf, String>,
}

impl DataSearch {
    /// A search of `workspace` and `zot_home`, with the home folder from `$HOME`.
    pub fn new(workspace: impl Into<PathBuf>, zot_home: impl Into<PathBuf>) -> Self {
        Self {
            workspace: workspace.into(),
            zot_home: zot_home.into(),
            home_dir: crate::home::user_home(),
            refused: std::collections::BTreeMap::new(),
        }
    }

    /// The installed data packages, disabled ones included, lowest
    /// precedence first: the user's (origin `registry`), then the
    /// workspace's (`project`). A folder whose manifest does not load or is
    /// not a data package is left out ([`DataSearch::load`] reports it).
    pub fn packages(&self) -> Vec<(crate::manifest::Manifest, DataOrigin)> {
        self.package_folders()
            .into_iter()
            .filter_map(|(dir, origin)| {
                let manifest =
                    crate::manifest::Manifest::load(&dir.join(crate::manifest::MANIFEST_FILE))
                        .ok()?;
                manifest.is_data().then_some((manifest, origin))
            })
            .collect()
    }

    /// Refuses the installed package in `dir`: [`DataSearch::load`] reports
    /// `reason` for it and loads none of its files.
    pub fn refuse(&mut self, dir: &Path, reason: String) {
        self.refused.insert(dir.to_owned(), reason);
    }

    fn package_folders(&self) -> Vec<(PathBuf, DataOrigin)> {
        let mut folders = Vec::new();
        for (base, origin) in [
            (&self.zot_home, DataOrigin::Registry),
            (&self.workspace.join(".zot"), DataOrigin::Project),
        ] {
            let Ok(entries) = std::fs::read_dir(base.join(package::PACKAGES_DIR)) else {
                continue;
            };
            // A workspace's packages count against its data budget (see
            // `roots_with_packages`); more than that is never listed.
            let cap = match origin {
                DataOrigin::Project => MAX_WORKSPACE_DATA_ENTRIES.saturating_add(1),
                _ => usize::MAX,
            };
            let mut found: Vec<PathBuf> = entries
                .take(cap)
                .filter_map(Result::ok)
                .filter(|entry| !entry.file_name().to_string_lossy().starts_with('.'))
                // A package is a folder of its own, never a link to one.
                .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
                .map(|entry| entry.path())
                .collect();
            found.sort();
            folders.extend(found.into_iter().map(|dir| (dir, origin)));
        }
        // `$ZOT_HOME` as the workspace's `.zot`: each package once.
        let mut seen = std::collections::BTreeSet::new();
        folders.retain(|(dir, _)| seen.insert(dir.clone()));
        folders
    }

    /// [`DataSearch::roots`] with the installed packages in their places,
    /// each package's folder a root of its own; the packages whose
    /// manifests fail, or that were refused, are reported in `set`.
    fn roots_with_packages(&self, set: &mut DataSet) -> Vec<(PathBuf, DataOrigin)> {
        let mut packages: Vec<(PathBuf, DataOrigin)> = Vec::new();
        let mut over_budget = false;
        for (dir, origin) in self.package_folders() {
            let path = dir.join(crate::manifest::MANIFEST_FILE);
            if origin == DataOrigin::Project && !set.within_workspace_budget(1) {
                if !over_budget {
                    let error = format!(
                        "the workspace's data folders hold more than \
                         {MAX_WORKSPACE_DATA_ENTRIES} entries together: its packages from `{}` \
                         on were not loaded",
                        dir.display()
                    );
                    tracing::warn!("{error}");
                    set.problems.push(DataProblem { path: dir, error });
                    over_budget = true;
                }
                continue;
            }
            let problem = match crate::manifest::Manifest::load(&path) {
                Err(error) => Some(error.to_string()),
                Ok(m) if !m.is_data() => Some(format!(
                    "`{}` is not a data package (its `kind` is `{}`); extensions go in \
                     `extensions/`",
                    path.display(),
                    m.kind()
                )),
                Ok(m) if !m.raw.enabled => None,
                Ok(_) => match self.refused.get(&dir) {
                    Some(reason) => {
                        // The reason names the package, not where it lies.
                        tracing::warn!("`{}`: {reason}", dir.display());
                        set.problems.push(DataProblem {
                            path,
                            error: reason.clone(),
                        });
                        continue;
                    }
                    None => {
                        packages.push((dir, origin));
                        continue;
                    }
                },
            };
            if let Some(error) = problem {
                tracing::warn!("{error}");
                set.problems.push(DataProblem { path, error });
            }
        }
        // The user's packages below every other root; the workspace's below
        // its own folders.
        let (mut roots, project): (Vec<_>, Vec<_>) = packages
            .into_iter()
            .partition(|(_, origin)| *origin == DataOrigin::Registry);
        let mut project = Some(project);
        for (root, origin) in self.roots() {
            if origin == DataOrigin::Project
                && let Some(project) = project.take()
            {
                roots.extend(project);
            }
            roots.push((root, origin));
        }
        roots.extend(project.into_iter().flatten());
        roots
    }

    /// The roots that hold `tools/`, `plugins/` and `skills/`, in increasing
    /// precedence. A folder listed twice (a workspace whose `.zot` is
    /// `$ZOT_HOME`) keeps only its higher place, so its files do not shadow
    /// themselves.
    pub fn roots(&self) -> Vec<(PathBuf, DataOrigin)> {
        let mut roots = vec![(self.zot_home.clone(), DataOrigin::User)];
        if let Some(home) = &self.home_dir {
            roots.push((home.join(".shiro-neko"), DataOrigin::User));
        }
        roots.push((self.workspace.join(".zot"), DataOrigin::Project));
        roots.push((self.workspace.join(".shiro"), DataOrigin::Project));
        let mut unique: Vec<(PathBuf, DataOrigin)> = Vec::with_capacity(roots.len());
        for (index, root) in roots.iter().enumerate() {
            if !roots[index + 1..].iter().any(|(later, _)| *later == root.0) {
                unique.push(root.clone());
            }
        }
        unique
    }

    /// Loads every tool, plugin and skill, applying precedence. Never fails:
    /// bad files end up in [`DataSet::problems`].
    pub fn load(&self) -> DataSet {
        self.load_tools_of_project(ProjectTools::Use)
    }

    /// As [`DataSearch::load`] for a workspace the user has not trusted:
    /// its tools go to [`DataSet::untrusted_tools`] and take no name; its
    /// plugins (which can only block) and skills (text) load as usual.
    pub fn load_holding_project_tools(&self) -> DataSet {
        self.load_tools_of_project(ProjectTools::Hold)
    }

    fn load_tools_of_project(&self, project: ProjectTools) -> DataSet {
        let mut set = DataSet::default();
        // Highest precedence first, so that the first name found wins.
        let roots: Vec<_> = self
            .roots_with_packages(&mut set)
            .into_iter()
            .rev()
            .collect();
        // Tools and skills: the user's side first, so that a workspace's
        // one named like one of the user's is shadowed and never replaces
        // it (it may add, not replace); among each side, highest first.
        let user_first: Vec<_> = {
            let (user, project): (Vec<_>, Vec<_>) = roots
                .iter()
                .cloned()
                .partition(|(_, origin)| *origin != DataOrigin::Project);
            user.into_iter().chain(project).collect()
        };
        for (root, origin) in &user_first {
            for path in set.files_in(&root.join("tools"), "json", *origin) {
                let result = tool::DataTool::load(&path, *origin);
                if let Some(tool) = set.take(&path, result) {
                    if *origin == DataOrigin::Project && project == ProjectTools::Hold {
                        set.hold_tool(tool);
                    } else {
                        set.add_tool(tool);
                    }
                }
            }
        }
        // The code points each origin's plugins may still span (one budget
        // per origin: the workspace's files cannot use up the user's).
        let mut class_left = std::collections::BTreeMap::new();
        for (root, origin) in &roots {
            for path in set.files_in(&root.join("plugins"), "json", *origin) {
                let left = class_left
                    .entry(*origin)
                    .or_insert(plugin::MAX_ORIGIN_CLASS_CODE_POINTS);
                let result = plugin::Plugin::load_within(&path, *origin, left);
                if let Some(plugin) = set.take(&path, result) {
                    set.add_plugin(plugin);
                }
            }
        }
        for (root, origin) in &user_first {
            for path in set.files_in(&root.join("skills"), "md", *origin) {
                let result = skill::Skill::load(&path, *origin);
                if let Some(skill) = set.take(&path, result) {
                    set.add_skill(skill);
                }
            }
        }
        set
    }
}

/// What to do with the workspace's own tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProjectTools {
    Use,
    Hold,
}

impl DataSet {
    /// Counts `n` more entries read from the workspace's data folders:
    /// whether all read so far are within [`MAX_WORKSPACE_DATA_ENTRIES`].
    fn within_workspace_budget(&mut self, n: usize) -> bool {
        self.workspace_entries = self.workspace_entries.saturating_add(n);
        self.workspace_entries <= MAX_WORKSPACE_DATA_ENTRIES
    }

    /// The files of `dir` ending in `.extension`, sorted by name. Hidden files
    /// (editor swap files and the like) are skipped. A folder that does not
    /// exist holds nothing; one that cannot be read, or a workspace's
    /// holding more than [`MAX_WORKSPACE_DATA_ENTRIES`], is a problem.
    fn files_in(&mut self, dir: &Path, extension: &str, origin: DataOrigin) -> Vec<PathBuf> {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(source) => {
                self.refuse_folder(dir, FileError::read(dir, source).to_string());
                return Vec::new();
            }
        };
        let cap = match origin {
            DataOrigin::Project => {
                MAX_WORKSPACE_DATA_ENTRIES.saturating_sub(self.workspace_entries)
            }
            DataOrigin::Builtin | DataOrigin::Registry | DataOrigin::User => usize::MAX,
        };
        // Every entry counts, hidden or not: the cap bounds what is read.
        let entries: Vec<_> = entries.take(cap.saturating_add(1)).collect();
        if origin == DataOrigin::Project && !self.within_workspace_budget(entries.len()) {
            let error = format!(
                "`{}` holds more entries than a workspace's data folders may together \
                 ({MAX_WORKSPACE_DATA_ENTRIES}); none of its files was loaded",
                dir.display()
            );
            self.refuse_folder(dir, error);
            return Vec::new();
        }
        // Each file with its size, from the one `stat` that finds it a file.
        let mut files: Vec<(PathBuf, u64)> = entries
            .into_iter()
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| {
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or(".");
                !name.starts_with('.')
                    && path
                        .extension()
                        .and_then(|e| e.to_str())
                        .is_some_and(|e| e.eq_ignore_ascii_case(extension))
            })
            .filter_map(|path| {
                let meta = std::fs::metadata(&path)
                    .ok()
                    .filter(|meta| meta.is_file())?;
                Some((path, meta.len()))
            })
            .collect();
        files.sort();
        if origin == DataOrigin::Project {
            // As read: a file over the cap is refused after its first
            // `MAX_FILE_BYTES`.
            let bytes: u64 = files
                .iter()
                .map(|(_, len)| (*len).min(MAX_FILE_BYTES))
                .sum();
            let total = self.workspace_bytes.saturating_add(bytes);
            if total > MAX_WORKSPACE_DATA_BYTES {
                let error = format!(
                    "`{}` holds more bytes than a workspace's data files may together ({} MiB); \
                     none of its files was loaded",
                    dir.display(),
                    MAX_WORKSPACE_DATA_BYTES >> 20
                );
                self.refuse_folder(dir, error);
                return Vec::new();
            }
            self.workspace_bytes = total;
        }
        files.into_iter().map(|(path, _)| path).collect()
    }

    /// Reports the folder `dir` as a problem (and logs it): none of its
    /// files loads, for `error`.
    fn refuse_folder(&mut self, dir: &Path, error: String) {
        tracing::warn!("{error}");
        self.problems.push(DataProblem {
            path: dir.to_owned(),
            error,
        });
    }
}

/// Reads a data file, refusing one larger than [`MAX_FILE_BYTES`].
pub(crate) fn read_file(path: &Path) -> Result<String, FileError> {
    crate::user_file::read_text(path, MAX_FILE_BYTES)
}

/// Deserializes JSON, naming the field at fault and collecting unknown keys
/// as warnings.
pub(crate) fn parse_json<T: DeserializeOwned>(
    text: &str,
    path: &Path,
) -> Result<Parsed<T>, FileError> {
    let crate::user_file::WithUnknown {
        value,
        unknown_keys: unknown,
    } = crate::user_file::parse::<T>(text).map_err(|detail| FileError::Parse {
        path: path.to_owned(),
        detail,
    })?;
    Ok(Parsed {
        value,
        warnings: unknown
            .into_iter()
            .map(|key| format!("unknown key `{key}` ignored"))
            .collect(),
    })
}

/// Checks a name the model or the user types: ASCII letters, digits, `-` and
/// `_`, 1 to `max` characters.
///
/// # Errors
///
/// A phrase saying what is wrong.
pub fn check_name(name: &str, max: usize) -> Result<(), String> {
    if name.is_empty() {
        return Err("is empty".to_owned());
    }
    // `zotbox skills show -x` would read the name as an option.
    if name.starts_with('-') {
        return Err(format!(
            "`{}` must not start with `-` (a command line would read it as an option)",
            crate::text::Shown(name)
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_')))
    {
        return Err(format!(
            "`{}` contains `{}`; use letters, digits, `-` and `_`",
            crate::text::Shown(name),
            crate::text::Shown(&bad.to_string())
        ));
    }
    if name.len() > max {
        return Err(format!(
            "`{}` is longer than {max} characters",
            crate::text::Shown(name)
        ));
    }
    Ok(())
}

/// Checks a free-text field: not blank, at most `max` characters.
pub(crate) fn check_text(text: &str, max: usize) -> Result<(), String> {
    if text.trim().is_empty() {
        return Err("is empty".to_owned());
    }
    let len = text.chars().count();
    if len > max {
        return Err(format!("is {len} characters long; the limit is {max}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("{e}"));
    }

    fn tool_json(name: &str, command: &str) -> String {
        format!(r#"{{"name":"{name}","description":"d","kind":"shell","command":"{command}"}}"#)
    }

    fn skill_md(name: &str, body: &str) -> String {
        format!("---\nname: {name}\ndescription: d\n---\n{body}")
    }

    struct Fixture {
        _tmp: tempfile::TempDir,
        search: DataSearch,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let search = DataSearch {
            workspace: tmp.path().join("ws"),
            zot_home: tmp.path().join("zot"),
            home_dir: Some(tmp.path().join("home")),
            refused: Default::default(),
        };
        Fixture { _tmp: tmp, search }
    }

    #[test]
    fn roots_are_in_increasing_precedence() {
        let f = fixture();
        let roots: Vec<(PathBuf, DataOrigin)> = f.search.roots();
        let base = f.search.workspace.parent().map(Path::to_path_buf);
        let base = base.unwrap_or_default();
        assert_eq!(
            roots,
            vec![
                (base.join("zot"), DataOrigin::User),
                (base.join("home/.shiro-neko"), DataOrigin::User),
                (base.join("ws/.zot"), DataOrigin::Project),
                (base.join("ws/.shiro"), DataOrigin::Project),
            ]
        );
    }

    #[test]
    fn a_folder_listed_twice_is_read_once() {
        let f = fixture();
        let mut s = f.search.clone();
        s.zot_home = s.workspace.join(".zot");
        write(&s.zot_home.join("tools"), "a.json", &tool_json("a", "x"));
        assert_eq!(s.roots().len(), 3);
        let set = s.load();
        assert_eq!(set.tool("a").map(|t| t.origin), Some(DataOrigin::Project));
        assert!(set.shadowed.is_empty(), "{:?}", set.shadowed);
    }

    #[test]
    fn the_user_keeps_a_name_the_workspace_uses_too_and_bad_files_are_reported_not_fatal() {
        let f = fixture();
        let s = &f.search;
        let zot_tools = s.zot_home.join("tools");
        let neko_tools = s
            .home_dir
            .clone()
            .unwrap_or_default()
            .join(".shiro-neko/tools");
        let zot_proj = s.workspace.join(".zot/tools");
        let shiro_proj = s.workspace.join(".shiro/tools");
        // Attack: `a` everywhere, the workspace's named like the user's:
        // the user's highest root, `~/.shiro-neko`, keeps it.
        write(&zot_tools, "a.json", &tool_json("a", "zot-home"));
        write(&neko_tools, "a.json", &tool_json("a", "neko"));
        write(&zot_proj, "a.json", &tool_json("a", "dot-zot"));
        write(&shiro_proj, "a.json", &tool_json("a", "dot-shiro"));
        // `b` only in the user's folders: `~/.shiro-neko` beats `$ZOT_HOME`.
        write(&zot_tools, "b.json", &tool_json("b", "zot-home"));
        write(&neko_tools, "b.json", &tool_json("b", "neko"));
        // A broken file and a file of the wrong extension.
        write(
            &zot_proj,
            "broken.json",
            r#"{"name":"c","description":"d","kind":"shell"}"#,
        );
        write(&zot_proj, "notes.txt", "not a tool");
        // Hidden files are editor leftovers.
        write(&zot_proj, ".a.json", &tool_json("hidden", "x"));
        // An unknown key loads with a warning.
        write(
            &zot_proj,
            "d.json",
            &tool_json("d", "x").replace("{", r#"{"colour":1,"#),
        );
        let set = s.load();
        let tools: Vec<(&str, String)> = set
            .tools
            .iter()
            .map(|t| {
                let ToolKind::Shell { command, .. } = &t.kind else {
                    panic!("not shell")
                };
                (t.name.as_str(), command.clone())
            })
            .collect();
        assert_eq!(
            tools,
            vec![
                ("a", "neko".to_owned()),
                ("b", "neko".to_owned()),
                ("d", "x".to_owned()),
            ]
        );
        assert_eq!(set.tool("a").map(|t| t.origin), Some(DataOrigin::User));
        assert_eq!(set.tool("b").map(|t| t.origin), Some(DataOrigin::User));
        let shadowed: Vec<&PathBuf> = set.shadowed.iter().map(|(_, _, p)| p).collect();
        assert_eq!(
            shadowed,
            vec![
                &zot_tools.join("a.json"),
                &zot_tools.join("b.json"),
                &shiro_proj.join("a.json"),
                &zot_proj.join("a.json"),
            ]
        );
        assert!(set.shadowed.iter().all(|(kind, _, _)| kind == "tool"));
        assert_eq!(set.problems.len(), 1, "{:?}", set.problems);
        assert_eq!(set.problems[0].path, zot_proj.join("broken.json"));
        assert!(set.problems[0].error.contains("`command` is missing"));
        assert_eq!(set.warnings.len(), 1, "{:?}", set.warnings);
        assert!(set.warnings[0].error.contains("unknown key `colour`"));
    }

    #[test]
    fn untrusted_project_tools_are_held_and_shadow_nothing() {
        let f = fixture();
        let s = &f.search;
        write(
            &s.zot_home.join("tools"),
            "deploy.json",
            &tool_json("deploy", "user"),
        );
        write(
            &s.workspace.join(".zot/tools"),
            "deploy.json",
            &tool_json("deploy", "project"),
        );
        write(
            &s.workspace.join(".shiro/tools"),
            "wipe.json",
            &tool_json("wipe", "rm"),
        );
        let set = s.load_holding_project_tools();
        // The user's `deploy` stays in force; the workspace's are held.
        let command = |t: &DataTool| t.kind.template().to_owned();
        assert_eq!(
            set.tools.iter().map(command).collect::<Vec<_>>(),
            vec!["user"]
        );
        let held: Vec<(&str, String)> = set
            .untrusted_tools
            .iter()
            .map(|t| (t.name.as_str(), command(t)))
            .collect();
        assert_eq!(
            held,
            vec![("wipe", "rm".to_owned()), ("deploy", "project".to_owned())]
        );
        assert!(set.shadowed.is_empty(), "{:?}", set.shadowed);
        assert!(set.untrusted_tool("wipe").is_some() && set.tool("wipe").is_none());
    }

    #[test]
    fn plugins_and_skills_load_with_the_same_precedence() {
        let f = fixture();
        let s = &f.search;
        let plugin = |name: &str, reason: &str| {
            format!(
                r#"{{"name":"{name}","description":"d","deny":[{{"tools":["bash"],"commandPattern":"x","reason":"{reason}"}}]}}"#
            )
        };
        write(&s.zot_home.join("plugins"), "p.json", &plugin("p", "user"));
        write(
            &s.workspace.join(".shiro/plugins"),
            "p.json",
            &plugin("p", "project"),
        );
        write(&s.zot_home.join("plugins"), "q.json", &plugin("q", "user"));
        write(
            &s.zot_home.join("skills"),
            "deploy.md",
            &skill_md("deploy", "user"),
        );
        write(
            &s.workspace.join(".zot/skills"),
            "deploy.md",
            &skill_md("deploy", "project"),
        );
        write(&s.workspace.join(".zot/skills"), "bad.md", "no frontmatter");
        let set = s.load();
        let plugins: Vec<(&str, &str)> = set
            .plugins
            .iter()
            .map(|p| (p.name.as_str(), p.deny[0].reason.as_str()))
            .collect();
        assert_eq!(plugins, vec![("p", "project"), ("q", "user")]);
        // Attack: the workspace's `deploy` would answer the user's own
        // `/deploy`; it is shadowed instead.
        assert_eq!(set.skill("deploy").map(|s| s.body.as_str()), Some("user"));
        assert_eq!(set.problems.len(), 1, "{:?}", set.problems);
        let kinds: Vec<&str> = set.shadowed.iter().map(|(k, _, _)| k.as_str()).collect();
        assert_eq!(kinds, vec!["plugin", "skill"]);
    }

    #[test]
    fn skills_merge_project_below_builtin_below_registry_below_user() {
        let f = fixture();
        let s = &f.search;
        write(
            &s.zot_home.join("skills"),
            "debug.md",
            &skill_md("debug", "user"),
        );
        // Attack: the workspace's `plan` and `review`, loaded before the
        // bundled and installed skills of those names are added.
        for name in ["plan", "review"] {
            write(
                &s.workspace.join(".zot/skills"),
                &format!("{name}.md"),
                &skill_md(name, "project"),
            );
        }
        let mut set = s.load();
        let builtin = |name: &str, body: &str| Skill {
            name: name.to_owned(),
            description: "d".to_owned(),
            body: body.to_owned(),
            path: PathBuf::from(format!("builtin:{name}")),
            origin: DataOrigin::Builtin,
        };
        // The user's `debug` overrides the bundled one, whatever the order.
        set.add_builtin_skill(builtin("debug", "builtin"));
        // A registry skill overrides a builtin added before it...
        set.add_builtin_skill(builtin("review", "builtin"));
        set.add_registry_skill(builtin("review", "registry"));
        // ...and one added after it.
        set.add_registry_skill(builtin("plan", "registry"));
        set.add_builtin_skill(builtin("plan", "builtin"));
        let bodies: Vec<(&str, &str, DataOrigin)> = set
            .skills
            .iter()
            .map(|s| (s.name.as_str(), s.body.as_str(), s.origin))
            .collect();
        assert_eq!(
            bodies,
            vec![
                ("debug", "user", DataOrigin::User),
                ("plan", "registry", DataOrigin::Registry),
                ("review", "registry", DataOrigin::Registry),
            ]
        );
        assert_eq!(set.shadowed.len(), 5);
    }

    #[test]
    fn loading_reads_one_name_per_file_not_one_per_file_loaded_before_it() {
        // Attack: a cloned repository with tens of thousands of tiny skill
        // (or tool, or plugin) files. Each file used to be checked against
        // every name loaded before it, N² comparisons in all, and `serve`
        // answered no intercept until loading was done.
        const N: usize = 300;
        let f = fixture();
        let s = &f.search;
        for (root, body) in [
            (&s.zot_home, "user"),
            (&s.workspace.join(".zot"), "project"),
        ] {
            for i in 0..N {
                let name = format!("n{i:04}");
                write(
                    &root.join("tools"),
                    &format!("{name}.json"),
                    &tool_json(&name, body),
                );
                write(
                    &root.join("plugins"),
                    &format!("{name}.json"),
                    &format!(
                        r#"{{"name":"{name}","description":"d","deny":[{{"tools":["bash"],"commandPattern":"{body}","reason":"r"}}]}}"#
                    ),
                );
                write(
                    &root.join("skills"),
                    &format!("{name}.md"),
                    &skill_md(&name, body),
                );
            }
        }
        for set in [s.load(), s.load_holding_project_tools()] {
            assert_eq!(set.problems, []);
            let names = &set.names;
            let reads = [
                names.tools.reads,
                names.untrusted_tools.reads,
                names.plugins.reads,
                names.skills.reads,
            ];
            // One name read per file added (the one its place names), none
            // for a file whose name is new.
            assert!(reads.iter().sum::<usize>() <= 3 * N, "{reads:?}");
            // The same winners as ever: the user's tools and skills; the
            // workspace's plugins, with the user's rules kept in force.
            assert_eq!(set.tools.len(), N);
            assert_eq!(set.plugins.len() + set.shadowed_plugins.len(), 2 * N);
            assert_eq!(set.skills.len(), N);
            assert!(set.skills.iter().all(|skill| skill.body == "user"));
            assert!(set.plugins.iter().all(|p| p.origin == DataOrigin::Project));
        }
    }

    /// Each problem of `set`: the file or folder, and why.
    fn where_and_why(set: &DataSet) -> Vec<(&Path, &str)> {
        (set.problems.iter())
            .map(|p| (p.path.as_path(), p.error.as_str()))
            .collect()
    }

    #[test]
    fn a_workspace_data_folder_past_the_cap_loads_nothing_and_says_so() {
        // Attack: a cloned repository's skills folder with more files than
        // loading can get through before zot stops waiting for the guard.
        let f = fixture();
        let s = &f.search;
        let project = s.workspace.join(".zot/skills");
        let user = s.zot_home.join("skills");
        for dir in [&project, &user] {
            write(dir, "real.md", &skill_md("real", "b"));
            // Hidden entries count too: they are read to be skipped.
            for i in 0..MAX_WORKSPACE_DATA_ENTRIES {
                write(dir, &format!(".{i}"), "");
            }
        }
        let set = s.load();
        let problems = where_and_why(&set);
        let error = format!(
            "`{}` holds more entries than a workspace's data folders may together (10000); none \
             of its files was loaded",
            project.display()
        );
        assert_eq!(problems, [(project.as_path(), error.as_str())]);
        // The user's folder has no cap: theirs loads.
        let skills: Vec<(&str, DataOrigin)> = set
            .skills
            .iter()
            .map(|s| (s.name.as_str(), s.origin))
            .collect();
        assert_eq!(skills, [("real", DataOrigin::User)]);
        assert_eq!(set.shadowed, []);
    }

    #[test]
    fn a_workspace_s_data_folders_share_one_budget_and_its_packages_count_against_it() {
        // Attack: the files spread over several folders (or a thousand
        // packages), each under a cap of its own, cost what one folder of
        // all of them would.
        let f = fixture();
        let s = &f.search;
        let half = MAX_WORKSPACE_DATA_ENTRIES / 2 + 1;
        for folder in ["tools", "skills"] {
            let dir = s.workspace.join(".zot").join(folder);
            for i in 0..half {
                write(&dir, &format!(".{i}"), "");
            }
        }
        let set = s.load();
        let refused: Vec<&DataProblem> = set
            .problems
            .iter()
            .filter(|p| {
                p.error
                    .contains("than a workspace's data folders may together")
            })
            .collect();
        assert_eq!(refused.len(), 1, "{:?}", set.problems);
        assert!(set.workspace_entries <= MAX_WORKSPACE_DATA_ENTRIES + 1);

        let f = fixture();
        let s = &f.search;
        let packages = s.workspace.join(".zot").join(package::PACKAGES_DIR);
        for i in 0..=MAX_WORKSPACE_DATA_ENTRIES {
            std::fs::create_dir_all(packages.join(format!("p{i:05}")))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let set = s.load();
        let past: Vec<&DataProblem> = set
            .problems
            .iter()
            .filter(|p| p.error.contains("its packages from"))
            .collect();
        assert_eq!(past.len(), 1, "{:?}", set.problems.last());
        assert!(past[0].path.ends_with("p10000"), "{:?}", past[0]);
    }

    #[test]
    fn a_workspace_s_data_files_past_the_byte_budget_load_nothing_and_say_so() {
        // Attack: a cloned repository's skills of a mebibyte each (zeros
        // compress to nothing in a clone), which `serve` would read and
        // hold before it registered. Sparse here: the budget refuses them
        // by their size, before a byte is read.
        let f = fixture();
        let s = &f.search;
        let big = |dir: &Path, name: &str| {
            write(dir, &format!("{name}.md"), &skill_md(name, "b"));
            let file = std::fs::OpenOptions::new()
                .append(true)
                .open(dir.join(format!("{name}.md")))
                .unwrap_or_else(|e| panic!("{e}"));
            file.set_len(MAX_FILE_BYTES)
                .unwrap_or_else(|e| panic!("{e}"));
        };
        let (project, user) = (s.workspace.join(".zot/skills"), s.zot_home.join("skills"));
        let count = MAX_WORKSPACE_DATA_BYTES / MAX_FILE_BYTES;
        for i in 0..count {
            big(&project, &format!("p{i:02}"));
            big(&user, &format!("u{i:02}"));
        }
        // Within the budget together: the whole folder loads.
        let set = s.load();
        assert_eq!(set.skills.len() as u64, 2 * count, "{:?}", set.problems);
        // One file more, in another folder: that folder loads nothing.
        let tools = s.workspace.join(".zot/tools");
        write(
            &tools,
            "t.json",
            r#"{"name":"t","description":"d","kind":"read","path":"x"}"#,
        );
        let set = s.load();
        let problems = where_and_why(&set);
        let error = |dir: &Path| {
            format!(
                "`{}` holds more bytes than a workspace's data files may together (32 MiB); none \
                 of its files was loaded",
                dir.display()
            )
        };
        // Tools are read first: they fit, and the skills no longer do.
        assert_eq!(problems, [(project.as_path(), error(&project).as_str())]);
        let origins: Vec<DataOrigin> = set.skills.iter().map(|s| s.origin).collect();
        assert_eq!(origins, vec![DataOrigin::User; count as usize]);
        assert_eq!(set.tools.len(), 1);
    }

    #[test]
    fn a_list_changed_from_outside_is_indexed_again_before_a_name_is_added() {
        let skill = |name: &str, origin: DataOrigin| Skill {
            name: name.to_owned(),
            description: "d".to_owned(),
            body: "b".to_owned(),
            path: PathBuf::from(format!("{origin}:{name}")),
            origin,
        };
        let mut set = DataSet::default();
        for name in ["a", "b", "c"] {
            set.add_skill(skill(name, DataOrigin::Project));
        }
        // Removed from outside: `a` may be added again, and `c` (moved up
        // one place) is still found.
        set.skills.remove(0);
        set.add_skill(skill("a", DataOrigin::Project));
        set.add_skill(skill("c", DataOrigin::User));
        // Pushed from outside: found, though the index never saw it.
        set.skills.push(skill("d", DataOrigin::User));
        set.add_skill(skill("d", DataOrigin::Project));
        let skills: Vec<(&str, DataOrigin)> = set
            .skills
            .iter()
            .map(|s| (s.name.as_str(), s.origin))
            .collect();
        assert_eq!(
            skills,
            [
                ("b", DataOrigin::Project),
                ("c", DataOrigin::User),
                ("a", DataOrigin::Project),
                ("d", DataOrigin::User),
            ]
        );
        assert_eq!(set.shadowed.len(), 2);
    }

    #[test]
    fn oversized_files_are_refused() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = tmp.path().join("big.json");
        let big = vec![b' '; (MAX_FILE_BYTES + 1) as usize];
        std::fs::write(&path, big).unwrap_or_else(|e| panic!("{e}"));
        let err = read_file(&path)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("file is larger than 1048576 bytes"), "{err}");
    }

    #[test]
    fn names_are_plain_words() {
        let cases = [
            ("recent-changes_2", None),
            ("", Some("is empty")),
            ("a b", Some("contains ` `")),
            ("../x", Some("contains `.`")),
            ("é", Some("contains `é`")),
            ("x\u{1b}", Some("contains `\\u{1b}`")),
            ("-x", Some("`-x` must not start with `-`")),
            (&"x".repeat(41), Some("longer than 40")),
        ];
        for (name, expected) in cases {
            let got = check_name(name, 40).err();
            match expected {
                None => assert_eq!(got, None, "{name}"),
                Some(expected) => {
                    let got = got.unwrap_or_default();
                    assert!(got.contains(expected), "{name}: `{got}` lacks `{expected}`");
                }
            }
        }
    }
}
