//! Output helpers: aligned tables for people, JSON Lines for machines.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;
use unicode_width::UnicodeWidthStr;

use zotbox::HostEvent;
use zotbox::text::Shown;

/// A cell longer than this many characters is clipped, saying how many
/// it left out (`--json` prints it whole): one author's long field must
/// not push a screen's other rows out of sight, as a row of thousands of
/// characters, padded into every other row's column too, would. A consent
/// screen ends with a count of its own of what the cells hold.
const MAX_CELL: usize = 1000;

/// Prints rows as columns padded to the widest cell, each cell escaped
/// ([`zotbox::text::shown`]: idempotent, so a cell shown already reads the
/// same) and clipped to [`MAX_CELL`] characters; the last column is not
/// padded. A cell holds one line: a `\n` an author wrote would forge a
/// row. Widths are the columns a terminal draws, not characters: a name in
/// CJK takes two per character, and counting one would shift every column
/// after it.
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<std::borrow::Cow<'_, str>>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|cell| match zotbox::text::shown(cell) {
                    std::borrow::Cow::Borrowed(cell) => clip_cell(cell),
                    std::borrow::Cow::Owned(escaped) => clip_cell(&escaped).into_owned().into(),
                })
                .collect()
        })
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.width()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.width());
        }
    }
    let mut out = String::new();
    let header: Vec<std::borrow::Cow<'_, str>> = headers.iter().map(|h| (*h).into()).collect();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (index, cell) in row.iter().enumerate() {
            if index + 1 == row.len() {
                line.push_str(cell);
            } else {
                let pad = widths[index] - cell.width();
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `cell`, or its first [`MAX_CELL`] characters and how many more it has.
fn clip_cell(cell: &str) -> std::borrow::Cow<'_, str> {
    match cell.char_indices().nth(MAX_CELL) {
        None => cell.into(),
        Some((end, _)) => {
            let more = cell[end..].chars().count();
            format!(
                "{}… ({more} more characters; --json shows all)",
                &cell[..end]
            )
            .into()
        }
    }
}

/// Up to three of `names`, escaped and clipped, then how many more: names
/// an author chose, in a line of zotbox's own.
pub(crate) fn a_few(names: &[&str]) -> String {
    a_few_of(names, ", ", |name| {
        format!(
            "`{}`",
            zotbox::text::clipped(&zotbox::text::shown(name), 40)
        )
    })
}

/// Up to three of `items`, each as `show` writes it, then how many more,
/// joined by `separator`.
pub(crate) fn a_few_of<T>(items: &[T], separator: &str, show: impl Fn(&T) -> String) -> String {
    const SHOWN: usize = 3;
    let mut out: Vec<String> = items.iter().take(SHOWN).map(show).collect();
    if items.len() > SHOWN {
        out.push(format!("and {} more", items.len() - SHOWN));
    }
    out.join(separator)
}

/// Writes one JSON object as one line on stdout, every character a
/// terminal acts on escaped ([`zotbox::text::json`]): names, templates and
/// messages in it are an author's.
pub(crate) fn json_line<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let mut line = zotbox::text::json(value)?;
    line.push('\n');
    quiet_if_gone(std::io::stdout().lock().write_all(line.as_bytes()))?;
    Ok(())
}

/// `written`, a write to stdout; once its reader is gone (`zotbox list
/// --json | head -1`), zotbox stops quietly with status 0, as it does for
/// `println!` (see `main`) and as ripgrep and coreutils do.
pub(crate) fn quiet_if_gone<T>(written: std::io::Result<T>) -> std::io::Result<T> {
    if let Err(err) = &written
        && err.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(i32::from(super::EXIT_OK));
    }
    written
}

/// Prints the host events received so far: notes and panels on stderr for
/// people, as JSON Lines on stdout for machines.
pub(crate) fn drain_events(
    events: &mut tokio::sync::broadcast::Receiver<HostEvent>,
    json: bool,
) -> anyhow::Result<()> {
    while let Ok(event) = events.try_recv() {
        if json {
            json_line(&event)?;
            continue;
        }
        // Each line an extension wrote is one line here, escaped.
        match event {
            HostEvent::Notify {
                extension,
                level,
                message,
            } => eprintln!(
                "[{}] {}: {}",
                Shown(&extension),
                Shown(&level),
                Shown(&message)
            ),
            HostEvent::PanelRender { extension, panel } => {
                eprintln!(
                    "[{}] panel `{}`:",
                    Shown(&extension),
                    Shown(&panel.panel_id)
                );
                for line in &panel.lines {
                    eprintln!("  {}", Shown(line));
                }
            }
            HostEvent::Exited { extension, reason } => {
                eprintln!("[{}] {}", Shown(&extension), Shown(&reason));
            }
            _ => {}
        }
    }
    Ok(())
}

/// On a terminal, shows each first compile of a wasm program as it
/// happens: it can take seconds, and silence reads as a hang.
pub(crate) fn show_compiles(mut events: tokio::sync::broadcast::Receiver<HostEvent>) {
    use tokio::sync::broadcast::error::RecvError;
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return;
    }
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(HostEvent::Compiling { extension, bytes }) => eprintln!(
                    "compiling `{}` ({} KiB) for the first time…",
                    Shown(&extension),
                    bytes / 1024
                ),
                Ok(HostEvent::Compiled { extension, took_ms }) => eprintln!(
                    "compiled `{}` in {:.1}s (cached for next time)",
                    Shown(&extension),
                    Duration::from_millis(took_ms).as_secs_f64()
                ),
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => break,
            }
        }
    });
}

/// `launcher`, announcing its first compiles on a terminal.
pub(crate) fn with_compile_notes(launcher: zotbox::Launcher) -> zotbox::Launcher {
    let (events, receiver) = tokio::sync::broadcast::channel(16);
    show_compiles(receiver);
    launcher.with_events(events)
}

/// Joins a list for a table cell, `-` when empty.
pub(crate) fn cell(items: &[String]) -> String {
    if items.is_empty() {
        "-".to_owned()
    } else {
        items.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_to_the_widest_cell() {
        let rows = vec![
            vec!["weather".to_owned(), "ready".to_owned(), "x".to_owned()],
            vec!["a".to_owned(), "failed".to_owned(), "y".to_owned()],
        ];
        let text = table(&["NAME", "STATE", "NOTE"], &rows);
        assert_eq!(
            text,
            "NAME     STATE   NOTE\nweather  ready   x\na        failed  y\n"
        );
    }

    #[test]
    fn a_cell_is_one_line_whoever_made_it() {
        // A caller that forgot to escape an author's name: the table does.
        let rows = vec![
            vec!["evil\nforged  ready".to_owned(), "failed".to_owned()],
            vec!["\u{1b}[2J".to_owned(), "ready".to_owned()],
        ];
        let text = table(&["NAME", "STATE"], &rows);
        assert_eq!(
            text,
            "NAME                    STATE\n\
             evil\\u{a}forged  ready  failed\n\
             \\u{1b}[2J               ready\n"
        );
    }

    #[test]
    fn wide_characters_take_the_columns_a_terminal_draws() {
        // Two CJK characters draw four columns: counted as two, the rows
        // under this one would start their second column two columns early.
        let rows = vec![
            vec!["天気".to_owned(), "ready".to_owned()],
            vec!["weather".to_owned(), "ready".to_owned()],
        ];
        let text = table(&["NAME", "STATE"], &rows);
        assert_eq!(text, "NAME     STATE\n天気     ready\nweather  ready\n");
    }
}
