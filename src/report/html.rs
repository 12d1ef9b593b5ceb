//! `index.html`: one self-contained page (inline CSS and SVG, no script, no network) rendered by
//! minijinja from the report context and the charts. The template is embedded in the binary.
//!
//! Every value from the run (prompts, model outputs, inputs, names) goes through minijinja's HTML
//! auto-escaping, which the `.html` template name switches on; only the SVG charts, which
//! plotters has already escaped, are marked safe.
use minijinja::Environment;
use minijinja::value::{Serde, Value};
use serde::Serialize;

use super::ReportError;
use super::charts::Charts;
use super::context::ReportContext;
use super::format;

const TEMPLATE: &str = include_str!("templates/index.html");

/// What the page template sees: the context's fields at the top level, and the charts.
#[derive(Serialize)]
struct Page<'a> {
    #[serde(flatten)]
    context: &'a ReportContext,
    charts: &'a Charts,
}

pub fn render(context: &ReportContext, charts: &Charts) -> Result<String, ReportError> {
    let mut env = Environment::new();
    format::register_filters(&mut env);
    env.add_template("index.html", TEMPLATE)
        .map_err(ReportError::template("index.html"))?;
    let template = env
        .get_template("index.html")
        .map_err(ReportError::template("index.html"))?;
    template
        .render(Value::from(Serde(&Page { context, charts })))
        .map_err(ReportError::template("index.html"))
}
