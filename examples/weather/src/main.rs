//! `weather`: a tool with typed arguments, and a command that asks the model.
//!
//! The answer is a deterministic fake so the example works offline; with
//! the `http` capability a real lookup is one host call away.

use serde::Deserialize;
use zotbox_guest::{Context, Extension, Level, Response, ToolOutput, schema};

/// The tool's arguments, checked by the SDK before the handler runs.
#[derive(Debug, Deserialize)]
struct WeatherArgs {
    /// The city to look up.
    city: String,
    /// `celsius` (default) or `fahrenheit`.
    #[serde(default)]
    units: Option<String>,
}

/// A stable fake temperature per city, in °C.
fn fake_celsius(city: &str) -> i32 {
    let sum: u32 = city.to_lowercase().bytes().map(u32::from).sum();
    (sum % 30) as i32 - 5
}

fn weather(ctx: &mut Context<'_>, args: WeatherArgs) -> ToolOutput {
    let city = args.city.trim();
    if city.is_empty() {
        return ToolOutput::error("`city` is empty");
    }
    ctx.notify(Level::Info, format!("looking up the weather in {city}"));
    let celsius = fake_celsius(city);
    match args.units.as_deref().unwrap_or("celsius") {
        "celsius" => ToolOutput::text(format!("{city}: {celsius}°C, light fog (fake)")),
        "fahrenheit" => ToolOutput::text(format!(
            "{city}: {}°F, light fog (fake)",
            celsius * 9 / 5 + 32
        )),
        other => ToolOutput::error(format!(
            "unknown units `{other}`; use celsius or fahrenheit"
        )),
    }
}

fn main() -> std::io::Result<()> {
    Extension::new("weather", "1.0.0")
        .command(
            "weather",
            "ask the model about the weather in a city",
            |_ctx, args| {
                Response::prompt(format!(
                    "Use the weather tool for {} and answer in one line.",
                    args.trim()
                ))
            },
        )
        .tool(
            "weather",
            "Get the current weather for a city.",
            schema::object()
                .property("city", schema::string("the city, e.g. Berlin"))
                .property(
                    "units",
                    schema::string("temperature units").enumeration(["celsius", "fahrenheit"]),
                )
                .required(["city"]),
            weather,
        )
        .run()
}
