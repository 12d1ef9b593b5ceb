//! `gepa-lab models`: the models of an inference API as a table.
use super::ExitStatus;

use anyhow::Context;

use super::inference_args::InferenceArgs;
use crate::inference::{Inference, ModelClass};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub inference: InferenceArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let client = args.inference.client()?;
    let mut models = super::runtime()?
        .block_on(client.models())
        .with_context(|| format!("listing models at {}", args.inference.base_url))?;
    // Most available first: that is the order a user should pick models in.
    models.sort_by(|a, b| {
        b.node_count
            .cmp(&a.node_count)
            .then_with(|| a.id.cmp(&b.id))
    });
    let rows: Vec<[String; 4]> = models
        .iter()
        .map(|m| {
            let class = match ModelClass::of(&m.id) {
                ModelClass::Vision => "vision",
                ModelClass::Audio => "audio",
                ModelClass::Text => "text",
            };
            [
                m.id.clone(),
                m.node_count.to_string(),
                class.to_owned(),
                m.owned_by.clone(),
            ]
        })
        .collect();
    print!(
        "{}",
        table(["model", "node_count", "class", "owned_by"], &rows)
    );
    Ok(ExitStatus::Ok)
}

fn table(header: [&str; 4], rows: &[[String; 4]]) -> String {
    let mut widths = header.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 4]| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            // node_count is a number: right-aligned, so magnitudes line up.
            if i == 1 {
                out.push_str(&format!("{cell:>w$}", w = widths[i]));
            } else {
                out.push_str(&format!("{cell:<w$}", w = widths[i]));
            }
            out.push_str(if i + 1 < cells.len() { "  " } else { "\n" });
        }
        format!("{}\n", out.trim_end())
    };
    let mut out = line(header);
    for row in rows {
        out.push_str(&line([&row[0], &row[1], &row[2], &row[3]]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let rows = vec![
            [
                "qwen3.5:9b".to_owned(),
                "12".to_owned(),
                "text".to_owned(),
                "dria".to_owned(),
            ],
            [
                "a-vl".to_owned(),
                "3".to_owned(),
                "vision".to_owned(),
                "x".to_owned(),
            ],
        ];
        let shown = table(["model", "node_count", "class", "owned_by"], &rows);
        assert_eq!(
            shown,
            "model       node_count  class   owned_by\n\
             qwen3.5:9b          12  text    dria\n\
             a-vl                 3  vision  x\n"
        );
    }
}
