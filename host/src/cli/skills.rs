//! `zotbox skills list|show NAME`: the Markdown skills in force.

use anyhow::{Context as _, Result};

use super::output::{json_line, table};
use super::{Context, EXIT_OK};
use zotbox::data::DataSearch;

/// `zotbox skills` subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// List skills: name, origin, description (project beats user by name).
    ///
    /// A workspace's skills (origin `project`) load as text whether or not
    /// the workspace is trusted: a skill runs nothing.
    List,
    /// Print one skill's body.
    Show {
        /// The skill's name.
        name: String,
    },
}

impl Command {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let home = context.home()?;
        let mut search = DataSearch::new(context.workspace()?, home.root());
        // A package changed since its install shows none of its skills, as
        // the host loads none.
        let policy = zotbox::policy::Policy::load_for(&home)?;
        zotbox::store::lock::check_packages(&mut search, &home, &policy);
        let data = search.load();
        match self {
            Self::List => {
                if context.json {
                    for skill in &data.skills {
                        json_line(&serde_json::json!({
                            "name": skill.name, "origin": skill.origin.as_str(),
                            "description": skill.description, "path": skill.path,
                        }))?;
                    }
                } else if data.skills.is_empty() {
                    println!("no skills found");
                } else {
                    let rows: Vec<Vec<String>> = data
                        .skills
                        .iter()
                        .map(|s| {
                            vec![
                                zotbox::text::shown(&s.name).into_owned(),
                                s.origin.as_str().to_owned(),
                                zotbox::text::shown(&s.description).into_owned(),
                            ]
                        })
                        .collect();
                    print!("{}", table(&["NAME", "ORIGIN", "DESCRIPTION"], &rows));
                }
                for problem in data
                    .problems
                    .iter()
                    .filter(|p| p.path.extension().is_some_and(|e| e == "md"))
                {
                    // The error names the file already.
                    eprintln!("warning: skipped: {}", zotbox::text::shown(&problem.error));
                }
            }
            Self::Show { name } => {
                let skill = data
                    .skill(&name)
                    .with_context(|| format!("no skill `{name}`"))?;
                if context.json {
                    json_line(&serde_json::json!({
                        "name": skill.name, "description": skill.description, "body": skill.body,
                    }))?;
                } else {
                    print!("{}", zotbox::text::shown_text(&skill.body));
                    if !skill.body.ends_with('\n') {
                        println!();
                    }
                }
            }
        }
        Ok(EXIT_OK)
    }
}
