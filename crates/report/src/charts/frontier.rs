//! The frontier chart of an execution with `[objectives]`: every candidate's mean Pareto score
//! against its mean cost per answer on one objective's cost, the seed and each candidate
//! marked and labelled, the frontier (the candidates no other beats on both) joined by a line,
//! the recommended and the cheapest candidates ringed, and that cost's limit drawn as a dashed
//! vertical line. Candidates whose cost was not measured are left out, and the title says how
//! many. One chart per objective the experiment sets, each against its own cost; the legend
//! sits beside the plot, never over a point.
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{BEST_COLOUR, Drawing, Drawn, FONT, GRID, POINT_COLOUR, SEED_COLOUR, failed};
use crate::context::{CostAxis, CostView};

const LIMIT_COLOUR: RGBColor = RGBColor(0xb0, 0x2a, 0x2a);
const CHEAPEST_COLOUR: RGBColor = RGBColor(0x7a, 0x9a, 0x3a);

/// One candidate on the chart.
struct Point {
    label: String,
    cost: f64,
    score: f64,
    seed: bool,
    recommended: bool,
    cheapest: bool,
}

pub(super) struct Frontier {
    points: Vec<Point>,
    /// The frontier, by ascending cost.
    line: Vec<(f64, f64)>,
    limit: Option<f64>,
    axis_label: String,
    high: f64,
}

impl Frontier {
    /// The chart of `view`'s candidates against the cost of `axis`, one of its objectives.
    pub(super) fn new(view: &CostView, axis: &CostAxis) -> Self {
        let points: Vec<Point> = view
            .candidates
            .iter()
            .zip(&axis.costs)
            .filter_map(|(c, cost)| {
                Some(Point {
                    label: c.label.clone(),
                    cost: (*cost)?,
                    score: c.score,
                    seed: c.label == "seed",
                    recommended: c.recommended,
                    cheapest: c.cheapest,
                })
            })
            .collect();
        let line = axis
            .frontier
            .iter()
            .filter_map(|label| points.iter().find(|p| p.label == *label))
            .map(|p| (p.cost, p.score))
            .collect();
        let costliest = points.iter().map(|p| p.cost).fold(1.0, f64::max);
        // A limit far above every candidate would squeeze them against the axis: it is drawn
        // only when it is near them, and the legend says where it is otherwise.
        let high = match axis.limit {
            Some(limit) if limit <= costliest * LIMIT_SPAN => costliest.max(limit),
            _ => costliest,
        };
        Self {
            points,
            line,
            limit: axis.limit,
            axis_label: axis.axis_label.clone(),
            high: high * 1.1,
        }
    }
}

/// How far beyond the costliest candidate a limit may be and still be drawn.
const LIMIT_SPAN: f64 = 3.0;

/// Width of the plot; the legend is drawn to its right, where it cannot cover a point or a
/// label.
const PLOT_WIDTH: u32 = 560;
const LEGEND_WIDTH: u32 = 230;

impl Drawing for Frontier {
    fn size(&self) -> (u32, u32) {
        (PLOT_WIDTH + LEGEND_WIDTH, 320)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Drawn {
        let (plot, side) = root.split_horizontally(PLOT_WIDTH);
        let mut chart = ChartBuilder::on(&plot)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(44)
            .build_cartesian_2d(0.0..self.high, 0.0..1.08)
            .map_err(failed)?;
        chart
            .configure_mesh()
            .x_desc(self.axis_label.as_str())
            .y_desc("mean Pareto score")
            .y_label_formatter(&|y| format!("{y:.1}"))
            .light_line_style(TRANSPARENT)
            .bold_line_style(GRID)
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 13))
            .draw()
            .map_err(failed)?;
        if let Some(limit) = self.limit.filter(|&limit| limit <= self.high) {
            chart
                .draw_series([DashedPathElement::new(
                    [(limit, 0.0), (limit, 1.08)],
                    6,
                    4,
                    LIMIT_COLOUR.stroke_width(2),
                )])
                .map_err(failed)?;
        }
        chart
            .draw_series(LineSeries::new(
                self.line.iter().copied(),
                BEST_COLOUR.stroke_width(2),
            ))
            .map_err(failed)?;
        self.draw_points(&mut chart)?;
        self.draw_legend(&side)
    }
}

impl Frontier {
    fn draw_points<DB: DrawingBackend>(
        &self,
        chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    ) -> Drawn {
        let colour = |p: &Point| if p.seed { SEED_COLOUR } else { POINT_COLOUR };
        chart
            .draw_series(
                self.points
                    .iter()
                    .map(|p| Circle::new((p.cost, p.score), 4, colour(p).filled())),
            )
            .map_err(failed)?;
        chart
            .draw_series(
                self.points
                    .iter()
                    .filter(|p| p.recommended)
                    .map(|p| Circle::new((p.cost, p.score), 8, BEST_COLOUR.stroke_width(2))),
            )
            .map_err(failed)?;
        chart
            .draw_series(
                self.points
                    .iter()
                    .filter(|p| p.cheapest)
                    .map(|p| Circle::new((p.cost, p.score), 11, CHEAPEST_COLOUR.stroke_width(2))),
            )
            .map_err(failed)?;
        // Each label beside its point, clear of the rings around it.
        let style = TextStyle::from((FONT, 11).into_font()).pos(Pos::new(HPos::Left, VPos::Bottom));
        chart
            .draw_series(self.points.iter().map(|p| {
                EmptyElement::at((p.cost, p.score))
                    + Text::new(p.label.clone(), (10, -8), style.clone())
            }))
            .map_err(failed)?;
        Ok(())
    }

    /// The legend, one entry a line, in its own area beside the plot.
    fn draw_legend<DB: DrawingBackend>(&self, side: &DrawingArea<DB, Shift>) -> Drawn {
        let text = TextStyle::from((FONT, 12).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        let mut y = 24;
        let mut entry = |label: String, mark: &dyn Fn(i32, i32) -> Drawn| -> Drawn {
            mark(14, y)?;
            side.draw(&Text::new(label, (34, y), text.clone()))
                .map_err(failed)?;
            y += 22;
            Ok(())
        };
        if let Some(limit) = self.limit {
            let label = if limit <= self.high {
                format!("limit ({limit})")
            } else {
                format!("limit ({limit}, off the chart)")
            };
            entry(label, &|x, y| {
                side.draw(&DashedPathElement::new(
                    [(x - 8, y), (x + 10, y)],
                    6,
                    4,
                    LIMIT_COLOUR.stroke_width(2),
                ))
                .map_err(failed)
            })?;
        }
        entry("frontier".to_owned(), &|x, y| {
            side.draw(&PathElement::new(
                [(x - 8, y), (x + 10, y)],
                BEST_COLOUR.stroke_width(2),
            ))
            .map_err(failed)
        })?;
        entry("candidate".to_owned(), &|x, y| {
            side.draw(&Circle::new((x, y), 4, POINT_COLOUR.filled()))
                .map_err(failed)
        })?;
        entry("the seed".to_owned(), &|x, y| {
            side.draw(&Circle::new((x, y), 4, SEED_COLOUR.filled()))
                .map_err(failed)
        })?;
        entry("recommended".to_owned(), &|x, y| {
            side.draw(&Circle::new((x, y), 7, BEST_COLOUR.stroke_width(2)))
                .map_err(failed)
        })?;
        entry("cheapest not significantly".to_owned(), &|x, y| {
            side.draw(&Circle::new((x, y), 9, CHEAPEST_COLOUR.stroke_width(2)))
                .map_err(failed)
        })?;
        side.draw(&Text::new("worse".to_owned(), (34, y - 6), text.clone()))
            .map_err(failed)
    }
}
