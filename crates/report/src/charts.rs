//! The report's charts: score by generation for each execution, holdout score per version and
//! model with 95% intervals, a per-row correctness heatmap, and latency and token use. Each chart
//! is drawn by one function generic over plotters' `DrawingBackend`, once into SVG (inlined in
//! the page and written as `charts/<name>.svg`) and, when asked, once more into a bitmap written
//! as `charts/<name>.png`. The lineage of each execution's candidates (`lineage`) is drawn the
//! same way.
//!
//! The SVG's `<text>` is laid out by whatever renders the page. The bitmap's text is drawn with
//! DejaVu Sans, embedded in the binary (`assets/fonts/`), so a PNG has its text on a machine with
//! no fonts installed: by `bitmap`, which also says why not by plotters. The font is registered
//! with plotters' `ab_glyph` font support too, since plotters measures text with it on every
//! backend. Labels are escaped by plotters' SVG backend; we still cut long ones to keep the
//! layout sane.
mod bitmap;
mod frontier;
mod lineage;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Serialize;

use super::ReportError;
use super::answers::{self, Rows};
use super::context::{ReportContext, RowTable};
use super::load::{Execution, RunData};

/// A chart ready to inline in the page and to write as `charts/<name>.svg` (and `.png`).
#[derive(Debug, Clone, Serialize)]
pub struct Chart {
    pub title: String,
    /// The file name without its extension.
    pub name: String,
    pub svg: String,
    /// The PNG file's bytes, when PNG charts were asked for.
    #[serde(skip)]
    pub png: Option<Vec<u8>>,
}

impl Chart {
    pub fn svg_file(&self) -> String {
        format!("{}.svg", self.name)
    }

    pub fn png_file(&self) -> String {
        format!("{}.png", self.name)
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Charts {
    pub score_by_generation: Vec<Chart>,
    pub holdout: Option<Chart>,
    pub heatmaps: Vec<Chart>,
    pub latency_tokens: Option<Chart>,
    /// The lineage of each execution's candidates, by execution label; only for executions
    /// whose iterations are on record.
    pub lineage: BTreeMap<String, Chart>,
    /// With `[objectives]`: for each execution with them (in the order of the context's
    /// `costs`), its score against the cost of each objective, with its frontier.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub frontier: Vec<Vec<Chart>>,
}

impl Charts {
    pub fn all(&self) -> impl Iterator<Item = &Chart> {
        self.score_by_generation
            .iter()
            .chain(&self.holdout)
            .chain(&self.heatmaps)
            .chain(&self.latency_tokens)
            .chain(self.lineage.values())
            .chain(self.frontier.iter().flatten())
    }
}

const FONT: &str = "sans-serif";
const SEED_COLOUR: RGBColor = RGBColor(0x5b, 0x6b, 0x7f);
const POINT_COLOUR: RGBColor = RGBColor(0x31, 0x6f, 0xb8);
const BEST_COLOUR: RGBColor = RGBColor(0xc4, 0x4e, 0x19);
const BUDGET_COLOUR: RGBColor = RGBColor(0x7a, 0x9a, 0x3a);
const GRID: RGBColor = RGBColor(0xe4, 0xe6, 0xea);
const ERROR_CELL: RGBColor = RGBColor(0xb8, 0xb8, 0xb8);

/// Registers the embedded font under the family name the charts use, once per process. With
/// plotters' `ab_glyph` feature every text style looks its family up in that table, the SVG
/// backend's too (to measure text), so this runs before any chart is drawn.
fn register_font() -> Drawn {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let registered = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, bitmap::FONT_FILE).is_ok()
    });
    if registered {
        Ok(())
    } else {
        Err("the embedded font DejaVuSans.ttf does not parse".into())
    }
}

/// What a chart's drawing code returns: plotters' errors are generic over the backend, so they
/// are kept as their message.
type Drawn = Result<(), String>;

fn failed(err: impl std::fmt::Display) -> String {
    err.to_string()
}

fn chart_error(chart: &str) -> impl Fn(String) -> ReportError + '_ {
    move |message| ReportError::Chart {
        chart: chart.to_owned(),
        message,
    }
}

/// One chart's data, laid out in pixels, drawn the same way on any backend.
trait Drawing {
    /// Width and height in pixels.
    fn size(&self) -> (u32, u32);

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Drawn;
}

fn paint<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, drawing: &impl Drawing) -> Drawn {
    register_font()?;
    root.fill(&WHITE).map_err(failed)?;
    drawing.draw(root)?;
    root.present().map_err(failed)
}

/// The legend of the line charts, in their lower right corner.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Drawn {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font((FONT, 12))
        .background_style(WHITE.mix(0.85))
        .border_style(GRID)
        .draw()
        .map_err(failed)
}

/// Draws a chart as SVG and, if `png`, as PNG too.
fn chart(
    title: String,
    name: String,
    drawing: &impl Drawing,
    png: bool,
) -> Result<Chart, ReportError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, drawing.size()).into_drawing_area();
        paint(&root, drawing).map_err(chart_error(&name))?;
    }
    let png = if png {
        let (width, height) = drawing.size();
        let pixels = pixels(drawing).map_err(chart_error(&name))?;
        Some(encode_png(&pixels, width, height).map_err(chart_error(&name))?)
    } else {
        None
    };
    Ok(Chart {
        title,
        name,
        svg,
        png,
    })
}

/// Draws a chart into 8-bit RGB pixels, row by row.
fn pixels(drawing: &impl Drawing) -> Result<Vec<u8>, String> {
    let (width, height) = drawing.size();
    let mut pixels = vec![0; width as usize * height as usize * 3];
    {
        let root = bitmap::Bitmap(BitMapBackend::with_buffer(&mut pixels, (width, height)))
            .into_drawing_area();
        paint(&root, drawing)?;
    }
    Ok(pixels)
}

fn encode_png(pixels: &[u8], width: u32, height: u32) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    let mut encoder = png::Encoder::new(&mut bytes, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(failed)?;
    writer.write_image_data(pixels).map_err(failed)?;
    writer.finish().map_err(failed)?;
    Ok(bytes)
}

/// Cuts a label to `max` characters, with an ellipsis.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// Draws every chart of the report, as SVG and, if `png`, as PNG too.
pub fn build(run: &RunData, context: &ReportContext, png: bool) -> Result<Charts, ReportError> {
    let mut charts = Charts::default();
    for execution in &run.executions {
        if execution.generations.is_empty() {
            continue;
        }
        let budget = run.manifest.executions[execution.index].plan.start.budget;
        charts.score_by_generation.push(chart(
            format!("{}: score by generation", execution.label),
            format!("score-by-generation-{}", file_part(&execution.label)),
            &ScoreByGeneration::new(execution, budget),
            png,
        )?);
    }
    let intervals = holdout_rows(context);
    if !intervals.is_empty() {
        charts.holdout = Some(chart(
            "Holdout score per version and model (95% interval)".into(),
            "holdout".into(),
            &IntervalChart::new(intervals),
            png,
        )?);
        charts.latency_tokens = Some(chart(
            "Latency and token use per version and model (means over answered rows)".into(),
            "latency-tokens".into(),
            &LatencyTokens::new(context),
            png,
        )?);
    }
    let mut models: Vec<&str> = Vec::new();
    for table in &context.row_tables {
        if !models.contains(&table.model.as_str()) {
            models.push(&table.model);
        }
    }
    for model in models {
        let tables: Vec<&RowTable> = context
            .row_tables
            .iter()
            .filter(|t| t.model == model)
            .collect();
        charts.heatmaps.push(chart(
            format!("Per-row correctness on {model} (rows × versions)"),
            format!("heatmap-{}", file_part(model)),
            &Heatmap::of_model(run, &tables),
            png,
        )?);
    }
    charts.frontier = frontier_charts(context, png)?;
    for search in &context.searches {
        if search.summary.is_none() || search.lineage.is_empty() {
            continue;
        }
        charts.lineage.insert(
            search.execution.clone(),
            chart(
                format!("{}: lineage of the candidates", search.execution),
                format!("lineage-{}", file_part(&search.execution)),
                &lineage::Lineage::new(&search.lineage),
                png,
            )?,
        );
    }
    Ok(charts)
}

/// With `[objectives]`, each execution's score against the cost of each objective it sets, one
/// chart per objective: the first objective's is `frontier-<execution>`, each other's
/// `frontier-<execution>-<cost>`.
fn frontier_charts(context: &ReportContext, png: bool) -> Result<Vec<Vec<Chart>>, ReportError> {
    context
        .costs
        .iter()
        .map(|view| {
            view.axes
                .iter()
                .enumerate()
                .map(|(index, axis)| {
                    let measured = axis.costs.iter().filter(|c| c.is_some()).count();
                    let name = if index == 0 {
                        format!("frontier-{}", file_part(&view.execution))
                    } else {
                        format!("frontier-{}-{}", file_part(&view.execution), axis.axis)
                    };
                    chart(
                        format!(
                            "{}, objective {} of {} ({}): mean Pareto score against {} \
                             ({measured} of {} candidates measured)",
                            view.execution,
                            index + 1,
                            view.axes.len(),
                            axis.objective,
                            axis.axis_label,
                            view.candidates.len()
                        ),
                        name,
                        &frontier::Frontier::new(view, axis),
                        png,
                    )
                })
                .collect()
        })
        .collect()
}

/// A file-name part from a label or model name, which may hold any character.
fn file_part(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Points for every generation's score, the best score so far as a step line, and the budget
/// spent on a secondary axis when the history reports it.
struct ScoreByGeneration {
    /// (generation, score) of every generation.
    points: Vec<(f64, f64)>,
    best: Vec<(f64, f64)>,
    /// (generation, budget used) where the history reports it.
    spent: Vec<(f64, f64)>,
    budget: u64,
    last: f64,
    low: f64,
    high: f64,
    budget_top: f64,
}

impl ScoreByGeneration {
    fn new(execution: &Execution, budget: u64) -> Self {
        let generations = &execution.generations;
        let last = generations
            .iter()
            .map(|g| g.generation)
            .max()
            .unwrap_or(0)
            .max(1) as f64;
        let low = generations.iter().map(|g| g.score).fold(0.0, f64::min);
        let high = generations.iter().map(|g| g.score).fold(1.0, f64::max);
        let spent: Vec<(f64, f64)> = generations
            .iter()
            .filter_map(|g| g.budget_used.map(|b| (f64::from(g.generation), b as f64)))
            .collect();
        let budget_top = spent
            .iter()
            .map(|(_, b)| *b)
            .fold(budget as f64, f64::max)
            .max(1.0);
        let mut best = Vec::new();
        let mut so_far = f64::NEG_INFINITY;
        for g in generations {
            let x = f64::from(g.generation);
            if so_far.is_finite() && g.score > so_far {
                best.push((x, so_far));
            }
            so_far = so_far.max(g.score);
            best.push((x, so_far));
        }
        best.push((last + 0.5, so_far));
        Self {
            points: generations
                .iter()
                .map(|g| (f64::from(g.generation), g.score))
                .collect(),
            best,
            spent,
            budget,
            last,
            low,
            high,
            budget_top,
        }
    }
}

impl Drawing for ScoreByGeneration {
    fn size(&self) -> (u32, u32) {
        (560, 280)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Drawn {
        let Self {
            points,
            best,
            spent,
            budget,
            last,
            low,
            high,
            budget_top,
        } = self;
        let mut chart = ChartBuilder::on(root)
            .margin(10)
            .x_label_area_size(34)
            .y_label_area_size(44)
            .right_y_label_area_size(if spent.is_empty() { 10 } else { 54 })
            .build_cartesian_2d(-0.5..last + 0.5, *low..high * 1.04)
            .map_err(failed)?
            .set_secondary_coord(-0.5..last + 0.5, 0.0..budget_top * 1.04);
        // Generations are whole numbers: one label per generation up to 12, never a fraction.
        let x_labels = (*last as usize + 1).min(12);
        chart
            .configure_mesh()
            .x_desc("generation")
            .y_desc("evolution score")
            .x_labels(x_labels)
            .x_label_formatter(&|x| {
                if x.fract() == 0.0 && *x >= 0.0 {
                    format!("{x:.0}")
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| format!("{y:.1}"))
            .light_line_style(TRANSPARENT)
            .bold_line_style(GRID)
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 13))
            .draw()
            .map_err(failed)?;
        if !spent.is_empty() {
            chart
                .configure_secondary_axes()
                .y_desc("budget spent (calls)")
                .y_label_formatter(&|y| format!("{y:.0}"))
                .label_style((FONT, 12))
                .axis_desc_style((FONT, 13))
                .draw()
                .map_err(failed)?;
            chart
                .draw_secondary_series(LineSeries::new(
                    spent.iter().copied(),
                    BUDGET_COLOUR.stroke_width(2),
                ))
                .map_err(failed)?
                .label(format!("budget spent (of {budget})"))
                .legend(|(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], BUDGET_COLOUR.stroke_width(2))
                });
        }
        chart
            .draw_series(LineSeries::new(
                best.iter().copied(),
                BEST_COLOUR.stroke_width(2),
            ))
            .map_err(failed)?
            .label("highest so far")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BEST_COLOUR.stroke_width(2)));
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&point| Circle::new(point, 4, POINT_COLOUR.filled())),
            )
            .map_err(failed)?
            .label("generation")
            .legend(|(x, y)| Circle::new((x + 8, y), 4, POINT_COLOUR.filled()));
        legend(&mut chart)
    }
}

/// One run of an experiment on the chart of its runs: the seed's and the best version's mean
/// holdout score, when the run has them.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPoint {
    /// What the x axis says under the run: its date.
    pub label: String,
    pub seed: Option<f64>,
    pub best: Option<f64>,
}

/// The seed's and the best version's holdout score over an experiment's runs, oldest first
/// (`gepa-lab view`). SVG only.
pub fn runs_history(name: &str, runs: &[RunPoint]) -> Result<Chart, ReportError> {
    chart(
        format!("{name}: holdout score by run"),
        format!("history-{}", file_part(name)),
        &RunsHistory(runs),
        false,
    )
}

struct RunsHistory<'a>(&'a [RunPoint]);

impl Drawing for RunsHistory<'_> {
    fn size(&self) -> (u32, u32) {
        (720, 300)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Drawn {
        let runs = self.0;
        let last = runs.len().saturating_sub(1).max(1) as f64;
        let scores = runs.iter().flat_map(|r| r.seed.into_iter().chain(r.best));
        let low = scores.clone().fold(1.0, f64::min).min(0.0);
        let high = scores.fold(0.0, f64::max).max(1.0);
        let mut chart = ChartBuilder::on(root)
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(44)
            .build_cartesian_2d(-0.5..last + 0.5, low..high * 1.04)
            .map_err(failed)?;
        // At most 12 labels: a run's date under whole positions only.
        let x_labels = runs.len().clamp(2, 12);
        chart
            .configure_mesh()
            .x_desc("run (oldest first)")
            .y_desc("holdout score")
            .x_labels(x_labels)
            .x_label_formatter(&|x| {
                let index = x.round();
                if (x - index).abs() > 1e-9 || index < 0.0 {
                    return String::new();
                }
                runs.get(index as usize)
                    .map(|r| cut(&r.label, 16))
                    .unwrap_or_default()
            })
            .y_label_formatter(&|y| format!("{y:.1}"))
            .light_line_style(TRANSPARENT)
            .bold_line_style(GRID)
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 13))
            .draw()
            .map_err(failed)?;
        let series = |pick: fn(&RunPoint) -> Option<f64>| -> Vec<(f64, f64)> {
            runs.iter()
                .enumerate()
                .filter_map(|(i, r)| Some((i as f64, pick(r)?)))
                .collect()
        };
        // The best first, the seed over it as rings: a run whose best is its seed shows both.
        for (points, colour, label, ring) in [
            (series(|r| r.best), BEST_COLOUR, "best version", false),
            (series(|r| r.seed), SEED_COLOUR, "seed", true),
        ] {
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    colour.stroke_width(2),
                ))
                .map_err(failed)?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], colour.stroke_width(2))
                });
            let (radius, style) = if ring {
                (6, colour.stroke_width(2))
            } else {
                (4, colour.filled())
            };
            chart
                .draw_series(
                    points
                        .iter()
                        .map(move |&point| Circle::new(point, radius, style)),
                )
                .map_err(failed)?;
        }
        legend(&mut chart)
    }
}

/// One line of the interval chart.
struct IntervalRow {
    label: String,
    mean: f64,
    low: f64,
    high: f64,
    is_seed: bool,
    is_best: bool,
}

fn holdout_rows(context: &ReportContext) -> Vec<IntervalRow> {
    let several = context.executions.len() > 1;
    context
        .versions
        .iter()
        .flat_map(|v| {
            let several_models = v.scores.len() > 1;
            v.scores.iter().filter_map(move |s| {
                let mean = s.mean?;
                let mut label = if several {
                    format!("{} · {}", v.execution, v.label)
                } else {
                    v.label.clone()
                };
                if several_models {
                    label = format!("{label} · {}", s.model);
                }
                Some(IntervalRow {
                    label,
                    mean,
                    low: s.ci_low.unwrap_or(mean),
                    high: s.ci_high.unwrap_or(mean),
                    is_seed: v.is_seed,
                    is_best: v.is_best,
                })
            })
        })
        .collect()
}

const ROW_HEIGHT: i32 = 22;
const LABEL_CHARS: usize = 34;

fn label_width(labels: impl Iterator<Item = usize>) -> i32 {
    let longest = labels.max().unwrap_or(4).min(LABEL_CHARS) as i32;
    (longest * 7 + 16).max(60)
}

/// The colours the interval chart uses for `rows`, named: the best orange, the seed grey unless
/// it is the best, other versions blue; only the colours drawn are named.
fn colour_key(rows: &[IntervalRow]) -> String {
    let mut key = Vec::new();
    if rows.iter().any(|r| r.is_best) {
        key.push("best orange");
    }
    if rows.iter().any(|r| r.is_seed && !r.is_best) {
        key.push("seed grey");
    }
    if rows.iter().any(|r| !r.is_seed && !r.is_best) {
        key.push("other versions blue");
    }
    key.join(", ")
}

/// Points with horizontal interval bars, one line per version and model, on a 0–1 axis.
struct IntervalChart {
    rows: Vec<IntervalRow>,
    /// Width of the label column.
    left: i32,
    width: i32,
    /// Width of the 0–1 axis.
    plot: i32,
    top: i32,
    height: i32,
}

impl IntervalChart {
    fn new(rows: Vec<IntervalRow>) -> Self {
        let left = label_width(rows.iter().map(|r| r.label.chars().count()));
        let width = 720;
        let top = 12;
        Self {
            left,
            width,
            plot: width - left - 70,
            top,
            height: top + ROW_HEIGHT * rows.len() as i32 + 44,
            rows,
        }
    }

    fn x(&self, v: f64) -> i32 {
        self.left + (v.clamp(0.0, 1.0) * f64::from(self.plot)).round() as i32
    }
}

impl Drawing for IntervalChart {
    fn size(&self) -> (u32, u32) {
        (self.width as u32, self.height as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Drawn {
        let Self {
            rows,
            left,
            width,
            plot,
            top,
            ..
        } = self;
        let x = |v| self.x(v);
        let label_style =
            TextStyle::from((FONT, 12).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
        let tick_style =
            TextStyle::from((FONT, 11).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        let axis_y = top + ROW_HEIGHT * rows.len() as i32 + 4;
        for tick in 0..=10 {
            let v = f64::from(tick) / 10.0;
            root.draw(&PathElement::new([(x(v), *top), (x(v), axis_y)], GRID))
                .map_err(failed)?;
            if tick % 2 == 0 {
                root.draw(&Text::new(
                    format!("{v:.1}"),
                    (x(v), axis_y + 4),
                    tick_style.clone(),
                ))
                .map_err(failed)?;
            }
        }
        root.draw(&Text::new(
            format!(
                "mean holdout score with 95% interval ({})",
                colour_key(rows)
            ),
            (left + plot / 2, axis_y + 22),
            tick_style.clone(),
        ))
        .map_err(failed)?;
        for (i, row) in rows.iter().enumerate() {
            let y = top + ROW_HEIGHT * i as i32 + ROW_HEIGHT / 2;
            let colour = if row.is_best {
                BEST_COLOUR
            } else if row.is_seed {
                SEED_COLOUR
            } else {
                POINT_COLOUR
            };
            root.draw(&Text::new(
                cut(&row.label, LABEL_CHARS),
                (left - 8, y),
                label_style.clone(),
            ))
            .map_err(failed)?;
            root.draw(&PathElement::new(
                [(x(row.low), y), (x(row.high), y)],
                colour.stroke_width(2),
            ))
            .map_err(failed)?;
            for end in [row.low, row.high] {
                root.draw(&PathElement::new(
                    [(x(end), y - 5), (x(end), y + 5)],
                    colour.stroke_width(2),
                ))
                .map_err(failed)?;
            }
            root.draw(&Circle::new((x(row.mean), y), 5, colour.filled()))
                .map_err(failed)?;
            root.draw(&Text::new(
                format!("{:.2}", row.mean),
                (width - 60, y),
                TextStyle::from((FONT, 12).into_font()).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(failed)?;
        }
        Ok(())
    }
}

/// Mean latency and mean tokens (prompt + completion, stacked) per version and model, as two
/// panels of horizontal bars sharing the labels.
struct LatencyTokens {
    bars: Vec<Bar>,
    /// Width of the label column.
    left: i32,
    width: i32,
    /// Width of each panel.
    panel: i32,
    top: i32,
    height: i32,
    max_latency: f64,
    max_tokens: f64,
}

/// One line of the latency and tokens chart: means over the answered rows.
struct Bar {
    label: String,
    latency: f64,
    prompt: f64,
    completion: f64,
}

impl LatencyTokens {
    fn new(context: &ReportContext) -> Self {
        let several = context.executions.len() > 1;
        let bars: Vec<Bar> = context
            .versions
            .iter()
            .flat_map(|v| {
                let several_models = v.scores.len() > 1;
                v.scores.iter().filter(|s| s.answered > 0).map(move |s| {
                    let mut label = if several {
                        format!("{} · {}", v.execution, v.label)
                    } else {
                        v.label.clone()
                    };
                    if several_models {
                        label = format!("{label} · {}", s.model);
                    }
                    Bar {
                        label,
                        latency: s.mean_latency_ms.unwrap_or(0.0),
                        prompt: s.mean_prompt_tokens.unwrap_or(0.0),
                        completion: s.mean_completion_tokens.unwrap_or(0.0),
                    }
                })
            })
            .collect();
        let left = label_width(bars.iter().map(|b| b.label.chars().count()));
        let width = 760;
        let top = 28;
        Self {
            left,
            width,
            panel: (width - left - 40) / 2,
            top,
            height: top + ROW_HEIGHT * bars.len() as i32 + 30,
            max_latency: bars.iter().map(|b| b.latency).fold(1.0, f64::max),
            max_tokens: bars
                .iter()
                .map(|b| b.prompt + b.completion)
                .fold(1.0, f64::max),
            bars,
        }
    }
}

impl Drawing for LatencyTokens {
    fn size(&self) -> (u32, u32) {
        (self.width as u32, self.height as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Drawn {
        let Self {
            bars,
            left,
            panel,
            top,
            max_latency,
            max_tokens,
            ..
        } = self;
        let label_style =
            TextStyle::from((FONT, 12).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
        let value_style =
            TextStyle::from((FONT, 11).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        let title_style =
            TextStyle::from((FONT, 12).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        let latency_x = *left;
        let tokens_x = left + panel + 20;
        root.draw(&Text::new(
            "mean latency, send to answer (ms)",
            (latency_x, 12),
            title_style.clone(),
        ))
        .map_err(failed)?;
        root.draw(&Text::new(
            "mean tokens: prompt (dark) + completion (light)",
            (tokens_x, 12),
            title_style.clone(),
        ))
        .map_err(failed)?;
        let bar_width =
            |value: f64, max: f64| ((value / max) * f64::from(panel - 60)).round() as i32;
        for (i, bar) in bars.iter().enumerate() {
            let y0 = top + ROW_HEIGHT * i as i32 + 4;
            let y1 = y0 + ROW_HEIGHT - 8;
            let mid = (y0 + y1) / 2;
            root.draw(&Text::new(
                cut(&bar.label, LABEL_CHARS),
                (left - 8, mid),
                label_style.clone(),
            ))
            .map_err(failed)?;
            let w = bar_width(bar.latency, *max_latency);
            root.draw(&Rectangle::new(
                [(latency_x, y0), (latency_x + w, y1)],
                POINT_COLOUR.filled(),
            ))
            .map_err(failed)?;
            root.draw(&Text::new(
                format!("{:.0}", bar.latency),
                (latency_x + w + 4, mid),
                value_style.clone(),
            ))
            .map_err(failed)?;
            let p = bar_width(bar.prompt, *max_tokens);
            let c = bar_width(bar.completion, *max_tokens);
            root.draw(&Rectangle::new(
                [(tokens_x, y0), (tokens_x + p, y1)],
                SEED_COLOUR.filled(),
            ))
            .map_err(failed)?;
            root.draw(&Rectangle::new(
                [(tokens_x + p, y0), (tokens_x + p + c, y1)],
                SEED_COLOUR.mix(0.4).filled(),
            ))
            .map_err(failed)?;
            root.draw(&Text::new(
                format!("{:.0} + {:.0}", bar.prompt, bar.completion),
                (tokens_x + p + c + 4, mid),
                value_style.clone(),
            ))
            .map_err(failed)?;
        }
        Ok(())
    }
}

/// Score colour: red at 0, yellow at 0.5, green at 1 (ColorBrewer RdYlGn ends and middle).
fn score_colour(score: f64) -> RGBColor {
    let (a, b, t) = if score < 0.5 {
        ((0xd7, 0x30, 0x27), (0xfe, 0xe0, 0x8b), score / 0.5)
    } else {
        ((0xfe, 0xe0, 0x8b), (0x1a, 0x98, 0x50), (score - 0.5) / 0.5)
    };
    let mix = |a: u8, b: u8| {
        (f64::from(a) + (f64::from(b) - f64::from(a)) * t.clamp(0.0, 1.0)).round() as u8
    };
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// One line per version (all executions on one model), one column per holdout row; grey where the
/// answer failed, blank where the version was not asked that row.
struct Heatmap {
    lines: Vec<Line>,
    /// The columns, left to right: the first and last holdout row (dataset row number) of each.
    columns: Vec<(usize, usize)>,
    /// Rows per column: 1, or the bin size when there are more rows than [`HEATMAP_CELLS`] allow.
    per_column: usize,
    /// Width of the label column.
    left: i32,
    cell_w: i32,
    cell_h: i32,
    top: i32,
}

/// The most cells (lines × columns) the heatmap draws, so that its SVG stays small at any
/// holdout size; past it, consecutive rows share a column. About 80 bytes of SVG per cell.
const HEATMAP_CELLS: usize = 10_000;
/// Columns the heatmap may always draw, however many lines it has.
const HEATMAP_COLUMNS_MIN: usize = 40;
/// Columns beyond which rows are binned even with few lines: the chart stays on a screen.
const HEATMAP_COLUMNS_MAX: usize = 240;

/// One version's line: label, whether it is the best, and per column that the version was asked
/// on, the mean score of its answered rows there (`None` when all of them failed).
struct Line {
    label: String,
    best: bool,
    cells: Vec<(usize, Option<f64>)>,
}

impl Heatmap {
    /// The heatmap of the row tables on one model: a line per version of each table, its
    /// answers read from the run's replay.
    fn of_model(run: &RunData, tables: &[&RowTable]) -> Self {
        let several = tables.len() > 1;
        let mut lines = Vec::new();
        for table in tables {
            let execution = run.executions.iter().find(|e| e.label == table.execution);
            for version in &table.versions {
                let rows = execution.and_then(|e| {
                    let v = e.versions.iter().find(|v| v.label == *version)?;
                    run.replay.version(&e.variant, v.version, &table.model)
                });
                let label = if several {
                    format!("{} · {version}", table.execution)
                } else {
                    version.clone()
                };
                let best = table.best.as_deref() == Some(version.as_str());
                lines.push((label, best, rows));
            }
        }
        Self::new(lines)
    }

    /// The heatmap of `lines` (label, best, answers): every row some line answered, in row
    /// order, binned into columns of consecutive rows; for each line and column it was asked
    /// on, the mean score of its answered rows there (`None` when all of them failed). Read in
    /// two passes, the first counting the rows, so that no row is held.
    fn new(lines: Vec<(String, bool, Option<Rows<'_>>)>) -> Self {
        let versions: Vec<Option<Rows<'_>>> = lines.iter().map(|(_, _, rows)| *rows).collect();
        let total = answers::walk(&versions).count();
        let most =
            (HEATMAP_CELLS / lines.len().max(1)).clamp(HEATMAP_COLUMNS_MIN, HEATMAP_COLUMNS_MAX);
        let per_column = total.div_ceil(most).max(1);
        let column_count = total.div_ceil(per_column);
        let mut columns: Vec<(usize, usize)> = Vec::with_capacity(column_count);
        // Per line and column: (sum of answered scores, answered, asked).
        let mut bins = vec![vec![(0.0, 0usize, 0usize); column_count]; lines.len()];
        for (rank, (row, answers)) in answers::walk(&versions).enumerate() {
            let column = rank / per_column;
            if rank % per_column == 0 {
                columns.push((row, row));
            } else if let Some(last) = columns.last_mut() {
                last.1 = row;
            }
            for (line, answers) in answers.iter().enumerate() {
                let (Some(answers), Some(bin)) = (answers, bins[line].get_mut(column)) else {
                    continue;
                };
                if let Some(score) = answers.score() {
                    bin.0 += score;
                    bin.1 += 1;
                }
                bin.2 += 1;
            }
        }
        let lines: Vec<Line> = lines
            .into_iter()
            .zip(bins)
            .map(|((label, best, _), bins)| Line {
                label,
                best,
                cells: bins
                    .into_iter()
                    .enumerate()
                    .filter(|(_, (_, _, asked))| *asked > 0)
                    .map(|(column, (sum, answered, _))| {
                        (column, (answered > 0).then(|| sum / answered as f64))
                    })
                    .collect(),
            })
            .collect();
        Self {
            left: label_width(lines.iter().map(|l| l.label.chars().count())),
            cell_w: (640 / columns.len().max(1) as i32).clamp(3, 22),
            cell_h: if lines.len() > 60 { 8 } else { 18 },
            top: 10,
            columns,
            per_column,
            lines,
        }
    }
}

impl Drawing for Heatmap {
    fn size(&self) -> (u32, u32) {
        let width = self.left + self.cell_w * self.columns.len() as i32 + 20;
        let extra_legend = LEGEND_LINE * (self.legend().len() as i32 - 1);
        let height = self.top + self.cell_h * self.lines.len() as i32 + 64 + extra_legend;
        (width.max(420) as u32, height as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Drawn {
        let Self {
            lines,
            columns,
            per_column: _,
            left,
            cell_w,
            cell_h,
            top,
        } = self;
        let label_style = TextStyle::from((FONT, if *cell_h < 12 { 8 } else { 12 }).into_font())
            .pos(Pos::new(HPos::Right, VPos::Center));
        let tick_style =
            TextStyle::from((FONT, 10).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        for (i, Line { label, best, cells }) in lines.iter().enumerate() {
            let y0 = top + cell_h * i as i32;
            let text = if *best {
                format!("{label} (best)")
            } else {
                label.clone()
            };
            root.draw(&Text::new(
                cut(&text, LABEL_CHARS),
                (left - 6, y0 + cell_h / 2),
                label_style.clone(),
            ))
            .map_err(failed)?;
            for &(column, score) in cells {
                let x0 = left + cell_w * column as i32;
                let colour = score.map_or(ERROR_CELL, score_colour);
                root.draw(&Rectangle::new(
                    [(x0, y0), (x0 + cell_w - 1, y0 + cell_h - 1)],
                    colour.filled(),
                ))
                .map_err(failed)?;
            }
        }
        let axis_y = top + cell_h * lines.len() as i32 + 4;
        let every = (columns.len() / 12).max(1);
        for (i, (first, _)) in columns.iter().enumerate().step_by(every) {
            let x = left + cell_w * i as i32 + cell_w / 2;
            root.draw(&Text::new(
                first.to_string(),
                (x, axis_y),
                tick_style.clone(),
            ))
            .map_err(failed)?;
        }
        let legend_style =
            TextStyle::from((FONT, 11).into_font()).pos(Pos::new(HPos::Left, VPos::Top));
        for (i, line) in self.legend().into_iter().enumerate() {
            root.draw(&Text::new(
                line,
                (*left, axis_y + 20 + LEGEND_LINE * i as i32),
                legend_style.clone(),
            ))
            .map_err(failed)?;
        }
        Ok(())
    }
}

/// The height of one line of the heatmap's legend, in pixels.
const LEGEND_LINE: i32 = 14;

impl Heatmap {
    /// The legend under the cells, one line each: short enough for the narrowest chart that
    /// has it (a 400-row holdout, binned two rows to a column, once ran off its right edge).
    fn legend(&self) -> Vec<String> {
        if self.per_column > 1 {
            vec![
                format!(
                    "holdout rows in row order, {} to a column (the tick is its first dataset \
                     row number);",
                    self.per_column
                ),
                "colour: the mean score of the column's answered rows, red 0, yellow 0.5, green \
                 1, grey all failed"
                    .to_owned(),
            ]
        } else {
            vec![
                "holdout row (dataset row number); red 0, yellow 0.5, green 1, grey failed"
                    .to_owned(),
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answers::ReplayTable;
    use gepa_lab_store::Version;

    #[test]
    fn colours_run_from_red_through_yellow_to_green() {
        assert_eq!(score_colour(0.0), RGBColor(0xd7, 0x30, 0x27));
        assert_eq!(score_colour(0.5), RGBColor(0xfe, 0xe0, 0x8b));
        assert_eq!(score_colour(1.0), RGBColor(0x1a, 0x98, 0x50));
    }

    /// The replay records of one table's `rows`, each with a cell per version (seed, g1):
    /// `None` where the version was not asked the row, `Some(None)` where it failed.
    fn records(
        variant: &str,
        rows: &[(usize, Vec<Option<Option<f64>>>)],
    ) -> Vec<gepa_lab_store::ReplayRow> {
        use gepa_lab_store::{ReplayOf, ReplayRow, Version};
        let versions = [Version::Seed, Version::Generation(1)];
        rows.iter()
            .flat_map(|(row, cells)| {
                cells
                    .iter()
                    .zip(versions)
                    .filter_map(move |(cell, version)| {
                        let cell = (*cell)?;
                        Some(ReplayRow {
                            variant: variant.to_owned(),
                            version: ReplayOf::Version(version),
                            model: "m".into(),
                            answered_by: "m".into(),
                            row: *row,
                            sample: 1,
                            inputs: BTreeMap::new(),
                            expected: "x".into(),
                            output: "x".into(),
                            score: cell.unwrap_or(0.0),
                            feedback: String::new(),
                            latency_ms: 1,
                            waited_ms: None,
                            prompt_tokens: 1,
                            completion_tokens: 1,
                            node_id: String::new(),
                            error: if cell.is_none() {
                                "failed".into()
                            } else {
                                String::new()
                            },
                        })
                    })
            })
            .collect()
    }

    /// The heatmap's lines for `variants` of the table: seed and g1 of each.
    fn lines<'a>(
        table: &'a ReplayTable,
        variants: &[String],
    ) -> Vec<(String, bool, Option<Rows<'a>>)> {
        variants
            .iter()
            .flat_map(|variant| {
                [Version::Seed, Version::Generation(1)].map(|version| {
                    (
                        format!("{variant} {version}"),
                        version != Version::Seed,
                        table.version(variant, version, "m"),
                    )
                })
            })
            .collect()
    }

    #[test]
    fn the_heatmap_bins_many_rows_into_columns_of_mean_scores() {
        // 1,000 rows: the seed right on even rows, g1 failed on rows 1 to 10, else right.
        let rows: Vec<(usize, Vec<Option<Option<f64>>>)> = (1..=1000)
            .map(|row| {
                let seed = Some(Some(if row % 2 == 0 { 1.0 } else { 0.0 }));
                let g1 = if row <= 10 {
                    Some(None)
                } else {
                    Some(Some(1.0))
                };
                (row, vec![seed, g1])
            })
            .collect();
        let table = ReplayTable::of(&records("", &rows)).unwrap();
        let heatmap = Heatmap::new(lines(&table, &[String::new()]));
        assert_eq!(heatmap.per_column, 5, "1,000 rows in at most 240 columns");
        assert_eq!(heatmap.columns.len(), 200);
        assert_eq!(heatmap.columns[0], (1, 5));
        assert_eq!(heatmap.columns[199], (996, 1000));
        let seed = &heatmap.lines[0].cells;
        assert_eq!(seed.len(), 200);
        assert_eq!(seed[0], (0, Some(0.4)), "rows 1 to 5: 2 of 5 right");
        let g1 = &heatmap.lines[1].cells;
        assert_eq!(g1[0], (0, None), "all of rows 1 to 5 failed");
        assert_eq!(g1[2], (2, Some(1.0)));
        // Few rows: one column each, as before.
        let small = [
            (3, vec![Some(Some(1.0)), None]),
            (8, vec![Some(None), Some(Some(0.5))]),
        ];
        let table = ReplayTable::of(&records("", &small)).unwrap();
        let heatmap = Heatmap::new(lines(&table, &[String::new()]));
        assert_eq!((heatmap.per_column, heatmap.columns.len()), (1, 2));
        assert_eq!(heatmap.lines[0].cells, [(0, Some(1.0)), (1, None)]);
        assert_eq!(
            heatmap.lines[1].cells,
            [(1, Some(0.5))],
            "not asked on row 3"
        );
        // Many lines: fewer columns, so that the chart keeps to its cells. 200,000 answers,
        // more than one sorting chunk: read back from a temporary file.
        let variants: Vec<String> = (0..100).map(|v| format!("v{v}")).collect();
        let all: Vec<(usize, Vec<Option<Option<f64>>>)> = (1..=1000)
            .map(|row| (row, vec![Some(Some(1.0)); 2]))
            .collect();
        let replay: Vec<_> = variants.iter().flat_map(|v| records(v, &all)).collect();
        let table = ReplayTable::of(&replay).unwrap();
        let heatmap = Heatmap::new(lines(&table, &variants));
        assert_eq!(heatmap.lines.len(), 200);
        assert!(heatmap.columns.len() * heatmap.lines.len() <= HEATMAP_CELLS);
        assert_eq!(heatmap.columns.len(), 50);
        assert!(
            heatmap.lines.iter().all(|line| line.cells.len() == 50),
            "every line on every column"
        );
        assert!(table.check().is_ok());
    }

    #[test]
    fn the_heatmap_legend_stays_inside_the_chart() {
        // Holdouts of two versions: 400 rows (two to a column, where the one-line legend once
        // ran off the edge), 321 (161 columns of 3 pixels, the narrowest binned chart) and 60.
        for holdout in [400, 321, 60] {
            let rows: Vec<(usize, Vec<Option<Option<f64>>>)> = (1..=holdout)
                .map(|row| (row, vec![Some(Some(1.0)), Some(Some(1.0))]))
                .collect();
            let table = ReplayTable::of(&records("", &rows)).unwrap();
            let heatmap = Heatmap::new(lines(&table, &[String::new()]));
            let (width, height) = heatmap.size();
            let drawn = pixels(&heatmap).unwrap();
            let legend_top = (heatmap.top + heatmap.cell_h * 2 + 24) as u32;
            let legend = dark_pixels(&drawn, width, (0, legend_top), (width, height));
            assert!(
                legend > 200,
                "{holdout} rows: {legend} dark pixels in the legend"
            );
            let edge = dark_pixels(&drawn, width, (width - 12, legend_top), (width, height));
            assert_eq!(
                edge, 0,
                "{holdout} rows: the legend runs into the right edge"
            );
        }
    }

    #[test]
    fn labels_are_cut_with_an_ellipsis() {
        assert_eq!(cut("short", 10), "short");
        assert_eq!(cut("abcdefghij", 5), "abcd…");
    }

    /// A blank plot with a caption, to see text in the bitmap.
    struct Captioned(&'static str);

    impl Drawing for Captioned {
        fn size(&self) -> (u32, u32) {
            (240, 80)
        }

        fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Drawn {
            ChartBuilder::on(root)
                .caption(self.0, (FONT, 24))
                .margin(4)
                .build_cartesian_2d(0.0..1.0, 0.0..1.0)
                .map_err(failed)?;
            Ok(())
        }
    }

    /// Whether any pixel in the rectangle is dark: text is black, antialiased at its edges.
    fn dark_pixels(pixels: &[u8], width: u32, (x0, y0): (u32, u32), (x1, y1): (u32, u32)) -> usize {
        (y0..y1)
            .flat_map(|y| (x0..x1).map(move |x| ((y * width + x) * 3) as usize))
            .filter(|&at| pixels[at..at + 3].iter().all(|&c| c < 96))
            .count()
    }

    #[test]
    fn text_is_drawn_into_the_bitmap_with_the_embedded_font() {
        let titled = pixels(&Captioned("Score")).unwrap();
        let untitled = pixels(&Captioned("")).unwrap();
        // The caption sits in the top 30 pixels; nothing else is drawn there.
        let title_dark = dark_pixels(&titled, 240, (0, 0), (240, 30));
        assert!(
            title_dark > 40,
            "{title_dark} dark pixels where the title is"
        );
        assert_eq!(dark_pixels(&untitled, 240, (0, 0), (240, 30)), 0);
        assert_ne!(titled, untitled);
    }

    #[test]
    fn interval_chart_labels_are_drawn_into_the_bitmap() {
        let row = |label: &str| IntervalRow {
            label: label.into(),
            mean: 0.5,
            low: 0.4,
            high: 0.6,
            is_seed: true,
            is_best: false,
        };
        let label = "budget-10 · seed";
        // Spaces as long as the label give the same layout with no ink.
        let blank = " ".repeat(label.chars().count());
        let labelled = IntervalChart::new(vec![row(label)]);
        let unlabelled = IntervalChart::new(vec![row(&blank)]);
        assert_eq!(labelled.size(), unlabelled.size());
        let (width, _) = labelled.size();
        let label_box = ((0, 12), (labelled.left as u32 - 8, 12 + ROW_HEIGHT as u32));
        let with = pixels(&labelled).unwrap();
        let without = pixels(&unlabelled).unwrap();
        assert!(dark_pixels(&with, width, label_box.0, label_box.1) > 40);
        assert_eq!(dark_pixels(&without, width, label_box.0, label_box.1), 0);
    }

    #[test]
    fn the_interval_charts_key_names_the_colours_it_draws() {
        let row = |is_seed, is_best| IntervalRow {
            label: "v".into(),
            mean: 0.5,
            low: 0.4,
            high: 0.6,
            is_seed,
            is_best,
        };
        // An evolved best against the seed.
        assert_eq!(
            colour_key(&[row(true, false), row(false, true)]),
            "best orange, seed grey"
        );
        // The seed kept as best, an evolved version shown for reference.
        assert_eq!(
            colour_key(&[row(true, true), row(false, false)]),
            "best orange, other versions blue"
        );
        assert_eq!(
            colour_key(&[row(true, false), row(false, true), row(false, false)]),
            "best orange, seed grey, other versions blue"
        );
    }

    #[test]
    fn interval_chart_escapes_labels() {
        let chart = IntervalChart::new(vec![IntervalRow {
            label: "<script>alert(1)</script>".into(),
            mean: 0.5,
            low: 0.4,
            high: 0.6,
            is_seed: true,
            is_best: false,
        }]);
        let svg = super::chart("t".into(), "t".into(), &chart, false)
            .unwrap()
            .svg;
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(!svg.contains("<script>"), "{svg}");
    }
}
