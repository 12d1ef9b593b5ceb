//! The frontier chart of an execution with `[objectives]`: every candidate's mean Pareto score
//! against its mean cost per answer on the objectives' first cost, the seed and each candidate
//! marked and labelled, the frontier (the candidates no other beats on both) joined by a line,
//! the recommended and the cheapest candidates ringed, and that cost's limit drawn as a dashed
//! vertical line. Candidates whose cost was not measured are left out, and the title says how
//! many.
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{BEST_COLOUR, Drawing, Drawn, FONT, GRID, POINT_COLOUR, SEED_COLOUR, failed, legend};
use crate::context::CostView;

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
    pub(super) fn new(view: &CostView) -> Self {
        let points: Vec<Point> = view
            .candidates
            .iter()
            .filter_map(|c| {
                Some(Point {
                    label: c.label.clone(),
                    cost: c.cost?,
                    score: c.score,
                    seed: c.label == "seed",
                    recommended: c.recommended,
                    cheapest: c.cheapest,
                })
            })
            .collect();
        let line = view
            .frontier
            .iter()
            .filter_map(|label| points.iter().find(|p| p.label == *label))
            .map(|p| (p.cost, p.score))
            .collect();
        let high = points
            .iter()
            .map(|p| p.cost)
            .chain(view.limit)
            .fold(1.0, f64::max);
        Self {
            points,
            line,
            limit: view.limit,
            axis_label: view.axis_label.clone(),
            high: high * 1.1,
        }
    }
}

impl Drawing for Frontier {
    fn size(&self) -> (u32, u32) {
        (560, 320)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Drawn {
        let mut chart = ChartBuilder::on(root)
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
        if let Some(limit) = self.limit {
            let style = LIMIT_COLOUR.stroke_width(2);
            chart
                .draw_series([DashedPathElement::new(
                    [(limit, 0.0), (limit, 1.08)],
                    6,
                    4,
                    style,
                )])
                .map_err(failed)?
                .label(format!("limit ({limit})"))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], style));
        }
        chart
            .draw_series(LineSeries::new(
                self.line.iter().copied(),
                BEST_COLOUR.stroke_width(2),
            ))
            .map_err(failed)?
            .label("frontier")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BEST_COLOUR.stroke_width(2)));
        self.draw_points(&mut chart)?;
        legend(&mut chart)
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
            .map_err(failed)?
            .label("candidate (grey: the seed)")
            .legend(|(x, y)| Circle::new((x + 8, y), 4, POINT_COLOUR.filled()));
        chart
            .draw_series(
                self.points
                    .iter()
                    .filter(|p| p.recommended)
                    .map(|p| Circle::new((p.cost, p.score), 8, BEST_COLOUR.stroke_width(2))),
            )
            .map_err(failed)?
            .label("recommended")
            .legend(|(x, y)| Circle::new((x + 8, y), 6, BEST_COLOUR.stroke_width(2)));
        chart
            .draw_series(
                self.points
                    .iter()
                    .filter(|p| p.cheapest)
                    .map(|p| Circle::new((p.cost, p.score), 11, CHEAPEST_COLOUR.stroke_width(2))),
            )
            .map_err(failed)?
            .label("cheapest not significantly worse")
            .legend(|(x, y)| Circle::new((x + 8, y), 6, CHEAPEST_COLOUR.stroke_width(2)));
        let style = TextStyle::from((FONT, 11).into_font()).pos(Pos::new(HPos::Left, VPos::Bottom));
        chart
            .draw_series(
                self.points
                    .iter()
                    .map(|p| Text::new(p.label.clone(), (p.cost, p.score), style.clone())),
            )
            .map_err(failed)?;
        Ok(())
    }
}
