//! The lineage chart of an execution's candidates, laid out like a version-control graph: one
//! row per candidate in generation order (the seed at the top), each in a lane (column), with
//! its label, mean Pareto score and origin written to the right of the lanes. Rows keep the
//! chart readable however many generations there are: it grows in height, one row each, and
//! only as wide as the lines of descent alive at the same time.
//!
//! A parent's line runs down its lane to its last child, which continues in that lane; every
//! other child branches off with a curve into the nearest free lane. A lane is taken only where
//! it is free from the row above the branch to the child, so no line runs through a candidate
//! it does not join. The edges into a merge (two parents) are dashed.
use std::collections::HashMap;

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{BEST_COLOUR, Drawing, Drawn, FONT, POINT_COLOUR, SEED_COLOUR, failed};
use crate::format;
use crate::search::{self, LineageNode};

const MERGE_COLOUR: RGBColor = RGBColor(0x7b, 0x3f, 0xa0);
const EDGE_COLOUR: RGBColor = RGBColor(0x8a, 0x96, 0xa8);
const ROW: i32 = 26;
const TOP: i32 = 36;
const LEFT: i32 = 12;
/// Width of the text column right of the lanes.
const TEXT: i32 = 620;

/// Where each candidate goes: its row is its position in generation order, its lane is here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Layout {
    /// Lane of each candidate, by row.
    pub lanes: Vec<usize>,
    pub lane_count: usize,
    pub edges: Vec<Edge>,
}

/// A parent → child link, by row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Edge {
    pub parent: usize,
    pub child: usize,
    /// An edge into a merge.
    pub merge: bool,
}

impl Layout {
    /// Lays out `nodes`, which are in generation order. A parent that is not an earlier node is
    /// ignored (the search view leaves such links out already).
    pub fn new(nodes: &[LineageNode]) -> Self {
        let row: HashMap<usize, usize> = nodes
            .iter()
            .enumerate()
            .map(|(row, node)| (node.generation, row))
            .collect();
        let parents: Vec<Vec<usize>> = nodes
            .iter()
            .enumerate()
            .map(|(child, node)| {
                let mut parents: Vec<usize> = node
                    .parents
                    .iter()
                    .filter_map(|generation| row.get(generation).copied())
                    .filter(|&parent| parent < child)
                    .collect();
                parents.dedup();
                parents
            })
            .collect();
        // Children come in row order, so the last one written is the last child.
        let mut last_child: Vec<Option<usize>> = vec![None; nodes.len()];
        for (child, parents) in parents.iter().enumerate() {
            for &parent in parents {
                last_child[parent] = Some(child);
            }
        }
        let mut lanes: Vec<usize> = Vec::with_capacity(nodes.len());
        // The last row each lane is taken through.
        let mut taken: Vec<usize> = Vec::new();
        for (child, parents) in parents.iter().enumerate() {
            let continued = parents
                .iter()
                .find(|&&parent| last_child[parent] == Some(child))
                .map(|&parent| lanes[parent]);
            let lane = continued.unwrap_or_else(|| {
                let near = parents.first().map_or(0, |&parent| lanes[parent]);
                // A new lane (index `taken.len()`) is always free.
                (0..=taken.len())
                    .filter(|&lane| taken.get(lane).is_none_or(|&through| through < child))
                    .min_by_key(|&lane| (lane.abs_diff(near), lane))
                    .unwrap_or(taken.len())
            });
            let through = last_child[child].unwrap_or(child);
            match taken.get_mut(lane) {
                Some(slot) => *slot = through,
                None => taken.push(through),
            }
            lanes.push(lane);
        }
        let edges = parents
            .iter()
            .enumerate()
            .flat_map(|(child, parents)| {
                parents.iter().map(move |&parent| Edge {
                    parent,
                    child,
                    merge: nodes[child].merge,
                })
            })
            .collect();
        Self {
            lanes,
            lane_count: taken.len(),
            edges,
        }
    }
}

/// The chart: the layout and the words of each row.
pub(super) struct Lineage {
    layout: Layout,
    rows: Vec<Row>,
    lane_width: i32,
}

/// One candidate's row.
struct Row {
    label: String,
    score: String,
    /// Where it came from: "seed", "from g2", "merge of g3 + g4", with the iteration.
    origin: String,
    best: bool,
    seed: bool,
}

impl Lineage {
    pub fn new(nodes: &[LineageNode]) -> Self {
        let layout = Layout::new(nodes);
        let rows = nodes
            .iter()
            .map(|node| {
                let parents: Vec<String> = node
                    .parents
                    .iter()
                    .map(|&parent| search::label(parent))
                    .collect();
                let mut origin = match (node.generation, parents.len(), node.merge) {
                    (0, 0, _) => "seed".to_owned(),
                    (_, 0, _) => "parent not on record".to_owned(),
                    (_, _, true) => format!("merge of {}", parents.join(" + ")),
                    (_, _, false) => format!("from {}", parents.join(" + ")),
                };
                if let Some(iteration) = node.iteration {
                    origin.push_str(&format!(", iteration {iteration}"));
                }
                if let Some(wins) = &node.wins {
                    origin.push_str(&match (wins.rows.len(), wins.alone()) {
                        (0, _) => " · wins no row".to_owned(),
                        (1, 1) => " · wins 1 row, alone".to_owned(),
                        (won, 0) => format!(" · wins {won} row{}", plural(won)),
                        (won, alone) => format!(" · wins {won} rows ({alone} alone)"),
                    });
                }
                if node.is_best {
                    origin.push_str(" · best");
                }
                Row {
                    label: node.label.clone(),
                    score: format::number(node.score, 3),
                    origin,
                    best: node.is_best,
                    seed: node.generation == 0,
                }
            })
            .collect();
        // Narrower lanes when many lines of descent run side by side.
        let lane_width = if layout.lane_count > 16 { 12 } else { 20 };
        Self {
            layout,
            rows,
            lane_width,
        }
    }

    fn x(&self, lane: usize) -> i32 {
        LEFT + self.lane_width * lane as i32 + self.lane_width / 2
    }

    fn y(row: usize) -> i32 {
        TOP + ROW * row as i32 + ROW / 2
    }

    /// The line from a parent to a child: down the parent's lane, then (into another lane) an
    /// S-curve over the last row, sampled as a polyline.
    fn edge_points(&self, edge: &Edge) -> Vec<(i32, i32)> {
        let (from, to) = (
            self.layout.lanes[edge.parent],
            self.layout.lanes[edge.child],
        );
        let (x0, x1) = (self.x(from), self.x(to));
        let (y0, y1) = (Self::y(edge.parent), Self::y(edge.child));
        if from == to {
            return vec![(x0, y0), (x1, y1)];
        }
        let bend = y1 - ROW;
        let mut points = vec![(x0, y0)];
        for step in 0..=10 {
            let t = f64::from(step) / 10.0;
            // A cubic Bézier with vertical tangents at both ends: x eases, y is linear.
            let ease = t * t * (3.0 - 2.0 * t);
            let x = f64::from(x0) + f64::from(x1 - x0) * ease;
            let y = f64::from(bend) + f64::from(ROW) * t;
            points.push((x.round() as i32, y.round() as i32));
        }
        points
    }

    fn text_x(&self) -> i32 {
        LEFT + self.lane_width * self.layout.lane_count.max(1) as i32 + 12
    }
}

fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "s" }
}

impl Drawing for Lineage {
    fn size(&self) -> (u32, u32) {
        let width = (self.text_x() + TEXT).max(640);
        let height = TOP + ROW * self.rows.len() as i32 + 8;
        (width as u32, height as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Drawn {
        draw_legend(root)?;
        for edge in &self.layout.edges {
            let points = self.edge_points(edge);
            if edge.merge {
                root.draw(&DashedPathElement::new(
                    points,
                    5,
                    3,
                    MERGE_COLOUR.stroke_width(2),
                ))
            } else {
                root.draw(&PathElement::new(points, EDGE_COLOUR.stroke_width(2)))
            }
            .map_err(failed)?;
        }
        self.draw_rows(root)
    }
}

/// Left-aligned text of `size` in `colour`, centred on its line.
fn text(size: u32, colour: &'static RGBColor) -> TextStyle<'static> {
    TextStyle::from((FONT, size).into_font())
        .color(colour)
        .pos(Pos::new(HPos::Left, VPos::Center))
}

/// The legend above the chart: an accepted proposal's edge, a merge's, the best version's dot.
fn draw_legend<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>) -> Drawn {
    let legend_y = 14;
    let label = |words: &str, x: i32| {
        root.draw(&Text::new(words, (x, legend_y), text(15, &BLACK)))
            .map_err(failed)
    };
    let mut x = LEFT;
    root.draw(&PathElement::new(
        [(x, legend_y), (x + 22, legend_y)],
        EDGE_COLOUR.stroke_width(2),
    ))
    .map_err(failed)?;
    label("accepted proposal (parent to child)", x + 28)?;
    x += 270;
    root.draw(&DashedPathElement::new(
        [(x, legend_y), (x + 22, legend_y)],
        4,
        3,
        MERGE_COLOUR.stroke_width(2),
    ))
    .map_err(failed)?;
    label("merge (two parents)", x + 28)?;
    x += 170;
    root.draw(&Circle::new((x + 6, legend_y), 6, BEST_COLOUR.filled()))
        .map_err(failed)?;
    label("the report's best version", x + 18)
}

impl Lineage {
    /// Each version's dot on its lane, with its label, score and origin to the right.
    fn draw_rows<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Drawn {
        let text_x = self.text_x();
        for (row, line) in self.rows.iter().enumerate() {
            let (x, y) = (self.x(self.layout.lanes[row]), Self::y(row));
            let colour = if line.best {
                BEST_COLOUR
            } else if line.seed {
                SEED_COLOUR
            } else {
                POINT_COLOUR
            };
            if line.best {
                root.draw(&Circle::new((x, y), 9, BEST_COLOUR.mix(0.3).filled()))
                    .map_err(failed)?;
            }
            root.draw(&Circle::new((x, y), 6, colour.filled()))
                .map_err(failed)?;
            let ink = if line.best { &BEST_COLOUR } else { &BLACK };
            root.draw(&Text::new(line.label.clone(), (text_x, y), text(17, ink)))
                .map_err(failed)?;
            root.draw(&Text::new(
                line.score.clone(),
                (text_x + 44, y),
                text(17, ink),
            ))
            .map_err(failed)?;
            root.draw(&Text::new(
                line.origin.clone(),
                (text_x + 104, y),
                text(16, &SEED_COLOUR),
            ))
            .map_err(failed)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(generation: usize, parents: &[usize]) -> LineageNode {
        LineageNode {
            generation,
            label: search::label(generation),
            score: Some(0.5),
            parents: parents.to_vec(),
            merge: parents.len() == 2,
            iteration: (generation > 0).then_some(generation),
            is_best: false,
            wins: None,
        }
    }

    /// Checks what makes the graph readable: a line never runs through a candidate it does not
    /// join, and the lines of two parents never share a stretch of lane.
    fn assert_readable(layout: &Layout) {
        // (lane, first row, last row) of each edge's straight part.
        let mut runs: Vec<(usize, usize, usize, usize)> = Vec::new();
        for edge in &layout.edges {
            let (from, to) = (layout.lanes[edge.parent], layout.lanes[edge.child]);
            assert!(edge.parent < edge.child, "{edge:?}");
            let end = if from == to {
                edge.child
            } else {
                edge.child - 1
            };
            for row in edge.parent + 1..=end {
                assert!(
                    row == edge.child || layout.lanes[row] != from,
                    "the edge {edge:?} runs through row {row} in lane {from}"
                );
            }
            runs.push((from, edge.parent, end, edge.parent));
        }
        for a in &runs {
            for b in &runs {
                if a.0 == b.0 && a.3 != b.3 {
                    assert!(
                        a.2 <= b.1 || b.2 <= a.1,
                        "lines of two parents share lane {}: {a:?} and {b:?}",
                        a.0
                    );
                }
            }
        }
    }

    #[test]
    fn a_chain_stays_in_one_lane() {
        let nodes: Vec<LineageNode> = (0..50)
            .map(|g| node(g, &[g.saturating_sub(1)][..usize::from(g > 0)]))
            .collect();
        let layout = Layout::new(&nodes);
        assert_eq!(layout.lane_count, 1);
        assert_eq!(layout.edges.len(), 49);
        assert!(
            layout
                .edges
                .iter()
                .all(|e| e.child == e.parent + 1 && !e.merge)
        );
        assert_readable(&layout);
    }

    #[test]
    fn the_children_of_one_parent_share_its_line_and_two_lanes() {
        let nodes: Vec<LineageNode> = (0..50)
            .map(|g| node(g, &[0][..usize::from(g > 0)]))
            .collect();
        let layout = Layout::new(&nodes);
        assert_eq!(layout.lane_count, 2);
        // The last child continues the seed's lane; the others branch off beside it.
        assert_eq!(layout.lanes[49], layout.lanes[0]);
        assert!(layout.lanes[1..49].iter().all(|&lane| lane == 1));
        assert_readable(&layout);
    }

    #[test]
    fn a_merge_has_two_incoming_edges_both_marked() {
        // g1 and g2 from the seed, g3 from g1, g4 merges g2 and g3.
        let nodes = vec![
            node(0, &[]),
            node(1, &[0]),
            node(2, &[0]),
            node(3, &[1]),
            node(4, &[2, 3]),
        ];
        let layout = Layout::new(&nodes);
        let edges: Vec<(usize, usize, bool)> = layout
            .edges
            .iter()
            .map(|e| (e.parent, e.child, e.merge))
            .collect();
        assert_eq!(
            edges,
            vec![
                (0, 1, false),
                (0, 2, false),
                (1, 3, false),
                (2, 4, true),
                (3, 4, true)
            ]
        );
        // g2, the seed's last child, continues its lane; the merge continues g2's.
        assert_eq!(layout.lanes, vec![0, 1, 0, 1, 0]);
        assert_readable(&layout);
    }

    /// A synthetic search of 50 generations: each candidate from one of the recent ones, every
    /// seventh a merge, as a Pareto-front selection tends to make.
    fn fifty_generations() -> Vec<LineageNode> {
        let mut state: u64 = 12345;
        let mut next = |n: usize| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as usize % n
        };
        (0..50)
            .map(|g| match g {
                0 => node(0, &[]),
                g if g % 7 == 0 => {
                    let a = g - 1 - next(g.min(6));
                    let b = g - 1 - next(g.min(6));
                    if a == b {
                        node(g, &[a])
                    } else {
                        node(g, &[a.min(b), a.max(b)])
                    }
                }
                g => node(g, &[g - 1 - next(g.min(8))]),
            })
            .collect()
    }

    #[test]
    fn fifty_generations_lay_out_readably_and_fit_the_page() {
        let mut nodes = fifty_generations();
        nodes[37].is_best = true;
        let layout = Layout::new(&nodes);
        assert_readable(&layout);
        let merges = nodes.iter().filter(|n| n.merge).count();
        assert!(merges >= 5, "{merges} merges");
        assert_eq!(
            layout.edges.iter().filter(|e| e.merge).count(),
            2 * merges,
            "two dashed edges per merge"
        );
        assert_eq!(layout.edges.len(), 49 + merges);
        assert!(layout.lane_count <= 12, "{} lanes", layout.lane_count);

        let chart = Lineage::new(&nodes);
        let (width, height) = chart.size();
        assert!(width <= 1100, "wider than the page: {width}");
        assert_eq!(height as i32, TOP + ROW * 50 + 8, "one row per generation");
        let svg = super::super::chart("t".into(), "t".into(), &chart, false)
            .unwrap()
            .svg;
        for g in [0, 1, 25, 49] {
            assert!(svg.contains(&format!(">\ng{g}\n</text>")), "g{g} missing");
        }
        // The best version is written in the best colour, and only it.
        let best = format!(
            "#{:02X}{:02X}{:02X}",
            BEST_COLOUR.0, BEST_COLOUR.1, BEST_COLOUR.2
        );
        let best_labels: Vec<&str> = svg
            .split("</text>")
            .filter_map(|chunk| chunk.split_once("<text").map(|(_, text)| text))
            .filter(|text| text.contains(&format!("fill=\"{best}\"")))
            .filter_map(|text| text.rsplit('>').next())
            .map(str::trim)
            .collect();
        assert_eq!(best_labels, vec!["g37", "0.500"], "{svg}");
    }

    #[test]
    fn each_row_says_how_many_pareto_rows_the_candidate_wins() {
        use search::{ParetoWins, WonRow};
        let wins = |rows: &[(usize, bool)]| ParetoWins {
            rows: rows
                .iter()
                .map(|&(row, alone)| WonRow { row, alone })
                .collect(),
        };
        let mut nodes = vec![node(0, &[]), node(1, &[0]), node(2, &[0]), node(3, &[1, 2])];
        nodes[0].wins = Some(wins(&[]));
        nodes[1].wins = Some(wins(&[(4, true)]));
        nodes[2].wins = Some(wins(&[(4, false), (9, false)]));
        nodes[3].wins = Some(wins(&[(4, false), (7, true), (9, true)]));
        nodes[3].is_best = true;
        let chart = Lineage::new(&nodes);
        let origins: Vec<&str> = chart.rows.iter().map(|row| row.origin.as_str()).collect();
        assert_eq!(
            origins,
            vec![
                "seed · wins no row",
                "from g0, iteration 1 · wins 1 row, alone",
                "from g0, iteration 2 · wins 2 rows",
                "merge of g1 + g2, iteration 3 · wins 3 rows (2 alone) · best",
            ]
        );
    }
}
