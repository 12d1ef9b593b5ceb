//! `index.html`: one self-contained page (inline CSS and SVG, no script, no network) rendered by
//! minijinja from the report context and the charts. The template is embedded in the binary.
//!
//! Every value from the run (prompts, model outputs, inputs, names) goes through minijinja's HTML
//! auto-escaping, which the `.html` template name switches on; only the SVG charts, which
//! plotters has already escaped, are marked safe, and sentences passed through the `code` filter,
//! which escapes them itself and sets their code spans in `<code>` (`format::html_with_code`).
use minijinja::Environment;
use minijinja::value::{Serde, Value};
use serde::Serialize;

use super::ReportError;
use super::charts::Charts;
use super::compare::CompareReport;
use super::context::ReportContext;
use super::format;

const TEMPLATE: &str = include_str!("templates/index.html");
const COMPARE_TEMPLATE: &str = include_str!("templates/compare.html");
/// The style both pages share.
const STYLE: &str = include_str!("templates/style.css");

/// What the page template sees: the context's fields at the top level, and the charts.
#[derive(Serialize)]
struct Page<'a> {
    #[serde(flatten)]
    context: &'a ReportContext,
    charts: &'a Charts,
    /// The most rows the row tables show in all (see [`super::context::ROWS_ON_PAGE`]).
    rows_on_page: usize,
}

pub fn render(context: &ReportContext, charts: &Charts) -> Result<String, ReportError> {
    let page = Page {
        context,
        charts,
        rows_on_page: super::context::ROWS_ON_PAGE,
    };
    render_page("index.html", TEMPLATE, &page)
}

/// What the comparison page sees: the comparison's fields at the top level.
#[derive(Serialize)]
struct ComparePage<'a> {
    #[serde(flatten)]
    report: &'a CompareReport,
    simulated: bool,
    /// Some contender answered rows more than once: the agreement column is shown.
    repeated: bool,
}

/// The page of `compare --prompts`: scores with intervals, the paired comparisons, the rows
/// each prompt scored differently from the first with both answers, and the prompts.
pub fn render_compare(report: &CompareReport) -> Result<String, ReportError> {
    let page = ComparePage {
        report,
        simulated: report.any_simulated(),
        repeated: report.contenders.iter().any(|c| c.agreement.is_some()),
    };
    render_page("compare.html", COMPARE_TEMPLATE, &page)
}

/// Renders the template `text` (named `name`, whose extension decides the escaping) with the
/// report's filters, and the shared style as `style.css` to include.
fn render_page(
    name: &'static str,
    text: &'static str,
    page: &impl Serialize,
) -> Result<String, ReportError> {
    render_page_with(&[], name, text, page)
}

/// [`render_page`], with more templates (name, text) that `text` may extend or include.
/// `gepa-lab view` renders its pages with it, so they look like the reports they link to.
pub fn render_page_with(
    partials: &[(&'static str, &'static str)],
    name: &'static str,
    text: &'static str,
    page: &impl Serialize,
) -> Result<String, ReportError> {
    let mut env = Environment::new();
    format::register_filters(&mut env);
    format::register_html_filters(&mut env);
    env.add_template("style.css", STYLE)
        .map_err(ReportError::template("style.css"))?;
    for (partial, body) in partials {
        env.add_template(partial, body)
            .map_err(ReportError::template(partial))?;
    }
    env.add_template(name, text)
        .map_err(ReportError::template(name))?;
    let template = env
        .get_template(name)
        .map_err(ReportError::template(name))?;
    template
        .render(Value::from(Serde(page)))
        .map_err(ReportError::template(name))
}
