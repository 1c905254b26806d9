//! `zotbox serve`: the data side as one zot extension, on stdio.

use anyhow::Result;

use super::{Context, EXIT_OK};

/// Arguments of `zotbox serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

impl Args {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        zotbox::serve::serve(context.home()?, tokio::io::stdin(), tokio::io::stdout()).await?;
        Ok(EXIT_OK)
    }
}
