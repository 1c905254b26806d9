//! What handlers return: [`Response`] for commands, [`ToolOutput`] for
//! tools, [`Verdict`] for interceptors.

use std::fmt::Display;

use zotbox_protocol::{CommandAction, CommandResponse, Content, OpenPanel, ToolResult};

/// A panel: an id the extension picks, a title, body lines and a footer.
///
/// Opened with [`Response::open_panel`], redrawn with
/// [`Context::render_panel`](crate::Context::render_panel).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Panel {
    /// The id later panel frames (keys, resizes, closes) refer to.
    pub id: String,
    /// The panel's title.
    pub title: String,
    /// The body, one entry per line.
    pub lines: Vec<String>,
    /// A status line under the body.
    pub footer: Option<String>,
}

impl Panel {
    /// A panel with no lines and no footer.
    pub fn new(id: impl Into<String>, title: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            title: title.into(),
            lines: Vec::new(),
            footer: None,
        }
    }

    /// Replaces the body.
    #[must_use]
    pub fn with_lines<S: Into<String>>(mut self, lines: impl IntoIterator<Item = S>) -> Self {
        self.lines = lines.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the footer.
    #[must_use]
    pub fn with_footer(mut self, footer: impl Into<String>) -> Self {
        self.footer = Some(footer.into());
        self
    }
}

/// A slash command's answer.
///
/// ```
/// use zotbox_guest::Response;
///
/// let answer = Response::display("cache refreshed");
/// let failure = Response::error("no city given");
/// let both = Response::insert("partial text").with_error("the lookup timed out");
/// # let _ = (answer, failure, both);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    action: CommandAction,
    text: Option<String>,
    panel: Option<OpenPanel>,
    error: Option<String>,
}

impl Response {
    fn action(action: CommandAction, text: impl Into<String>) -> Self {
        Self {
            action,
            text: Some(text.into()),
            panel: None,
            error: None,
        }
    }

    /// Submits `text` as a fresh user message.
    pub fn prompt(text: impl Into<String>) -> Self {
        Self::action(CommandAction::Prompt, text)
    }

    /// Drops `text` into the editor at the cursor.
    pub fn insert(text: impl Into<String>) -> Self {
        Self::action(CommandAction::Insert, text)
    }

    /// Appends `text` to the chat as a one-shot note (no model call).
    pub fn display(text: impl Into<String>) -> Self {
        Self::action(CommandAction::Display, text)
    }

    /// Changes nothing in the UI.
    pub fn noop() -> Self {
        Self {
            action: CommandAction::Noop,
            text: None,
            panel: None,
            error: None,
        }
    }

    /// Shows `message` as an error and changes nothing else.
    pub fn error(message: impl Into<String>) -> Self {
        Self::noop().with_error(message)
    }

    /// Opens a panel.
    pub fn open_panel(panel: Panel) -> Self {
        Self {
            action: CommandAction::OpenPanel,
            text: None,
            panel: Some(OpenPanel {
                id: panel.id,
                title: panel.title,
                lines: panel.lines,
                footer: panel.footer,
            }),
            error: None,
        }
    }

    /// Adds an error, shown whatever the action.
    #[must_use]
    pub fn with_error(mut self, message: impl Into<String>) -> Self {
        self.error = Some(message.into());
        self
    }

    pub(crate) fn into_frame(self, id: String) -> CommandResponse {
        let mut frame = CommandResponse {
            id,
            action: self.action,
            open_panel: self.panel,
            error: self.error,
            ..CommandResponse::default()
        };
        match self.action {
            CommandAction::Prompt => frame.prompt = self.text,
            CommandAction::Insert => frame.insert = self.text,
            CommandAction::Display => frame.display = self.text,
            CommandAction::Noop | CommandAction::OpenPanel => {}
        }
        frame
    }
}

/// What a command handler may return: a [`Response`], or a `Result` whose
/// error becomes [`Response::error`].
pub trait IntoResponse {
    /// Converts into the answer sent to the host.
    fn into_response(self) -> Response;
}

impl IntoResponse for Response {
    fn into_response(self) -> Response {
        self
    }
}

impl<T: IntoResponse, E: Display> IntoResponse for Result<T, E> {
    fn into_response(self) -> Response {
        match self {
            Ok(value) => value.into_response(),
            // `{:#}` shows the whole chain of an `anyhow::Error`.
            Err(err) => Response::error(format!("{err:#}")),
        }
    }
}

/// A tool's result: text and image blocks, possibly flagged as an error.
///
/// ```
/// use zotbox_guest::ToolOutput;
///
/// let ok = ToolOutput::text("Berlin: 16°C, fog");
/// let failed = ToolOutput::error("the weather service is down");
/// let chart = ToolOutput::text("the chart:").with_image("image/png", "iVBORw0KGgo=");
/// let from_string: ToolOutput = String::from("plain text").into();
/// # let _ = (ok, failed, chart, from_string);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolOutput {
    content: Vec<Content>,
    is_error: bool,
}

impl ToolOutput {
    /// One text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![Content::text(text)],
            is_error: false,
        }
    }

    /// One text block saying what went wrong, flagged as an error.
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            content: vec![Content::text(message)],
            is_error: true,
        }
    }

    /// One image block: its MIME type (e.g. `image/png`) and its bytes in base64.
    pub fn image(mime_type: impl Into<String>, base64_data: impl Into<String>) -> Self {
        Self::default().with_image(mime_type, base64_data)
    }

    /// Appends a text block.
    #[must_use]
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.content.push(Content::text(text));
        self
    }

    /// Appends an image block.
    #[must_use]
    pub fn with_image(
        mut self,
        mime_type: impl Into<String>,
        base64_data: impl Into<String>,
    ) -> Self {
        self.content.push(Content::Image {
            mime_type: mime_type.into(),
            data: base64_data.into(),
        });
        self
    }

    /// The blocks, in order.
    pub fn content(&self) -> &[Content] {
        &self.content
    }

    /// Whether the result is flagged as an error.
    pub fn is_error(&self) -> bool {
        self.is_error
    }

    pub(crate) fn into_frame(self, id: String) -> ToolResult {
        ToolResult {
            id,
            content: self.content,
            is_error: self.is_error,
        }
    }
}

impl From<String> for ToolOutput {
    fn from(text: String) -> Self {
        Self::text(text)
    }
}

impl From<&str> for ToolOutput {
    fn from(text: &str) -> Self {
        Self::text(text)
    }
}

impl From<Content> for ToolOutput {
    fn from(block: Content) -> Self {
        Self {
            content: vec![block],
            is_error: false,
        }
    }
}

/// What a tool handler may return: anything that converts into a
/// [`ToolOutput`] (`ToolOutput`, `String`, `&str`, …), or a `Result` of one
/// whose error becomes [`ToolOutput::error`].
pub trait IntoToolOutput {
    /// Converts into the result sent to the host.
    fn into_tool_output(self) -> ToolOutput;
}

impl<T: Into<ToolOutput>> IntoToolOutput for T {
    fn into_tool_output(self) -> ToolOutput {
        self.into()
    }
}

impl<T: IntoToolOutput, E: Display> IntoToolOutput for Result<T, E> {
    fn into_tool_output(self) -> ToolOutput {
        match self {
            Ok(value) => value.into_tool_output(),
            Err(err) => ToolOutput::error(format!("{err:#}")),
        }
    }
}

/// An interceptor's decision.
///
/// Which verdicts apply depends on what is intercepted: every intercept may
/// [`Allow`](Verdict::Allow) or [`Block`](Verdict::Block); only `tool_call`
/// may [`Rewrite`](Verdict::Rewrite) and only `assistant_message` may
/// [`Replace`](Verdict::Replace). A verdict that does not apply is
/// logged and treated as `Allow`.
pub use zotbox_protocol::Verdict;

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn wire(response: Response) -> Value {
        serde_json::to_value(response.into_frame("7".to_owned())).unwrap_or_default()
    }

    #[test]
    fn responses_fill_the_field_their_action_names() {
        let cases = [
            (
                Response::prompt("p"),
                json!({"id":"7","action":"prompt","prompt":"p"}),
            ),
            (
                Response::insert("i"),
                json!({"id":"7","action":"insert","insert":"i"}),
            ),
            (
                Response::display("d"),
                json!({"id":"7","action":"display","display":"d"}),
            ),
            (Response::noop(), json!({"id":"7","action":"noop"})),
            (
                Response::error("bad"),
                json!({"id":"7","action":"noop","error":"bad"}),
            ),
            // An error rides along with any action.
            (
                Response::display("d").with_error("late"),
                json!({"id":"7","action":"display","display":"d","error":"late"}),
            ),
            (
                Response::open_panel(Panel::new("p1", "T").with_lines(["a", "b"])),
                json!({"id":"7","action":"open_panel",
                       "open_panel":{"id":"p1","title":"T","lines":["a","b"]}}),
            ),
        ];
        for (response, expected) in cases {
            assert_eq!(wire(response), expected);
        }
    }

    #[test]
    fn results_convert_into_responses_and_tool_outputs() {
        let ok: Result<Response, String> = Ok(Response::noop());
        assert_eq!(ok.into_response(), Response::noop());
        let err: Result<Response, String> = Err("no city".to_owned());
        assert_eq!(err.into_response(), Response::error("no city"));

        assert_eq!("a".into_tool_output(), ToolOutput::text("a"));
        assert_eq!(String::from("b").into_tool_output(), ToolOutput::text("b"));
        let failed: Result<&str, std::fmt::Error> = Err(std::fmt::Error);
        let output = failed.into_tool_output();
        assert!(output.is_error());
        assert_eq!(
            output.content(),
            [Content::text(
                "an error occurred when formatting an argument"
            )]
        );
        // Results nest: the inner error is still an error.
        let nested: Result<Result<ToolOutput, String>, String> = Ok(Err("inner".to_owned()));
        assert_eq!(nested.into_tool_output(), ToolOutput::error("inner"));
    }

    #[test]
    fn tool_output_blocks_keep_their_order() {
        let output = ToolOutput::text("a")
            .with_image("image/png", "AAAA")
            .with_text("b");
        let frame = serde_json::to_value(output.into_frame("1".to_owned())).unwrap_or_default();
        assert_eq!(
            frame,
            json!({"id":"1","content":[
                {"type":"text","text":"a"},
                {"type":"image","mime_type":"image/png","data":"AAAA"},
                {"type":"text","text":"b"}
            ]})
        );
    }
}
