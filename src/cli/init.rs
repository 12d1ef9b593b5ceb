//! `gepa-lab init --dataset CSV`: a first experiment file for a dataset, commented, that
//! validates as written. The expected column and the inputs are guessed from the header, the
//! seed prompt uses every input, the splits and the budget fit the file's rows, and the file is
//! checked with `validate` before `init` says it is done.
use super::ExitStatus;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::experiment::starter::{
    AnswerName, ModelLine, Shape, answer_name_of, name_of, read_shape, starter_text,
};
use crate::experiment::{Plan, validate_file};
use crate::inference::embedded::{CATALOG, DEFAULT_MODEL, LOCAL, models_dir};
use crate::inference::{ChatMessage, ChatRequest};
use crate::runner::probe::{self, ModelProbe, ProbeJob};

/// Tokens a model may take to name a classification's labels: a name of one to three words.
const NAME_TOKENS: u32 = 12;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The CSV file (with a header row) the experiment runs on.
    #[arg(long, value_name = "CSV")]
    dataset: PathBuf,
    /// The column holding the expected output. Default: a column named expected, label, answer,
    /// output, target, gold, class, category, queue or y, else the last column.
    #[arg(long, value_name = "COLUMN")]
    expected: Option<String>,
    /// Where to write the experiment. Default: `<dataset stem>.toml` in the current folder.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Replace FILE when it exists.
    #[arg(long)]
    force: bool,
    /// Do not ask the installed embedded models anything: neither the seed on a few feedback
    /// and Pareto rows, to choose the replay model (write the default model, `local`), nor, when
    /// the expected column is named `label` or the like, what the labels describe.
    #[arg(long)]
    no_probe: bool,
    #[command(flatten)]
    settings: super::SettingsArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let mut shape = match read_shape(&args.dataset, args.expected.as_deref()) {
        Ok(shape) => shape,
        Err(message) => {
            eprintln!("error: {}: {message}", args.dataset.display());
            return Ok(ExitStatus::Invalid);
        }
    };
    let out = args.out.clone().unwrap_or_else(|| {
        let stem = args
            .dataset
            .file_stem()
            .map_or_else(|| "experiment".into(), |s| s.to_string_lossy().into_owned());
        PathBuf::from(format!("{}.toml", name_of(&stem)))
    });
    if out.exists() && !args.force {
        eprintln!(
            "error: {} exists; pass --force to replace it, or --out for another file",
            out.display()
        );
        return Ok(ExitStatus::Invalid);
    }
    let models = if args.no_probe {
        None
    } else {
        installed_models()
    };
    if let Some(models) = &models {
        shape.answer_name = name_the_answer(&shape, models)?;
    }
    let default_model = ModelLine {
        model: LOCAL.to_owned(),
        comment: String::new(),
    };
    let text = match starter_text(&shape, &args.dataset, &out, &default_model) {
        Ok(text) => text,
        Err(message) => {
            eprintln!("error: {}: {message}", args.dataset.display());
            return Ok(ExitStatus::Invalid);
        }
    };
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating the folder {}", parent.display()))?;
    }
    crate::store::write_atomic(&out, text.as_bytes())?;
    let mut validation = validate_file(&out, &args.settings.settings());
    // The probe reads the rows the written file's own split gives the engine, so it runs on a
    // file that validates; a better model is then written into it and checked again.
    if let Some(models) = &models
        && let Some(plan) = &validation.plan
        && let Some(model) = probe_models(plan, models)?
        && model != default_model
    {
        let text = starter_text(&shape, &args.dataset, &out, &model)
            .map_err(|message| anyhow::anyhow!("{}: {message}", args.dataset.display()))?;
        crate::store::write_atomic(&out, text.as_bytes())?;
        validation = validate_file(&out, &args.settings.settings());
    }
    for diagnostic in &validation.diagnostics {
        eprintln!("{diagnostic}\n");
    }
    if validation.plan.is_none() {
        eprintln!(
            "{}: written, but it does not validate (see above); edit it, then `gepa-lab validate {}`",
            out.display(),
            out.display()
        );
        return Ok(ExitStatus::Invalid);
    }
    print_written(&args.dataset, &out, &shape);
    Ok(ExitStatus::Ok)
}

/// What `init` wrote, on the terminal: the file, the dataset's shape, and what the user must
/// still say (what numeric labels stand for).
fn print_written(dataset: &Path, out: &Path, shape: &Shape) {
    let left_out = if shape.left_out.is_empty() {
        String::new()
    } else {
        let columns: Vec<String> = shape.left_out.iter().map(|c| c.summary()).collect();
        format!("; left out {}", columns.join(", "))
    };
    println!(
        "{}: an experiment on {} ({} rows; inputs {}; expected {}{left_out}). It validates; read \
         its comments, then `gepa-lab run {}`.",
        out.display(),
        dataset.display(),
        shape.rows,
        shape.inputs.join(", "),
        shape.expected,
        out.display()
    );
    if shape.expected_by_position {
        eprintln!(
            "note: no column is named like the expected answer (expected, label, answer, target, \
             class, ...), so the last one, {:?}, is taken as it; if the answer is in another \
             column, run init again with `--expected COLUMN`",
            shape.expected
        );
    }
    if let Some(labels) = shape.numeric_labels() {
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        eprintln!(
            "note: the labels are numbers ({}): before `run`, say in the seed what each stands \
             for (`1 means ...`); nothing in the data tells a model, and a seed that does not \
             say is answered as a guess",
            labels.join(", ")
        );
    }
}

/// The installed catalog models, smallest first, by the ids an experiment names them with.
/// Each question below loads only the models it asks.
struct Installed {
    ids: Vec<String>,
}

/// [`Installed`], or `None` when no catalog model is installed.
fn installed_models() -> Option<Installed> {
    let dir = models_dir();
    let mut installed: Vec<_> = CATALOG
        .iter()
        .filter(|model| model.path_in(&dir).is_file())
        .collect();
    if installed.is_empty() {
        return None;
    }
    installed.sort_by_key(|model| model.bytes);
    let ids: Vec<String> = installed
        .iter()
        .map(|model| {
            if model.name == DEFAULT_MODEL {
                LOCAL.to_owned()
            } else {
                model.model_id()
            }
        })
        .collect();
    Some(Installed { ids })
}

/// The name the largest installed model gives a classification's labels when the expected
/// column's name does not say what they are ([`Shape::answer_name_question`]), for the seed's
/// first line; said on the terminal either way. A seed that names the answer scored higher on
/// most datasets measured, and no wrong name measured lost significantly
/// (`docs/experiment-file.md`).
fn name_the_answer(shape: &Shape, models: &Installed) -> anyhow::Result<Option<AnswerName>> {
    let (Some(question), Some(labels), Some(model)) = (
        shape.answer_name_question(),
        shape.labels.as_ref(),
        models.ids.last(),
    ) else {
        return Ok(None);
    };
    let mut request = ChatRequest::new(model.as_str(), vec![ChatMessage::user(question)]);
    request.temperature = Some(0.0);
    request.max_tokens = Some(NAME_TOKENS);
    let inference = super::backends::inference_backend(std::slice::from_ref(model), None)?;
    let answer = super::runtime()?.block_on(inference.chat(&request));
    let said = match &answer {
        Ok(response) => response.content().to_owned(),
        Err(error) => format!("no answer ({error})"),
    };
    let name = answer_name_of(&said, labels);
    match &name {
        Some(name) => eprintln!(
            "name: the column {:?} does not say what its labels are; {model} named them {name:?}, \
             which the seed's first line says (edit it if it is wrong)",
            shape.expected
        ),
        None => eprintln!(
            "name: the column {:?} does not say what its labels are, and {model}'s answer {:?} \
             is not a name of one to three words: the seed lists the labels only",
            shape.expected,
            said.trim()
        ),
    }
    Ok(name.map(|name| AnswerName {
        name,
        model: model.clone(),
    }))
}

/// Asks every installed catalog model the seed on [`PROBE_ROWS`] feedback and Pareto rows of
/// `plan` (see [`ProbeJob`]) and returns the model [`probe::choose`] picks, with a comment that
/// shows every model's score. `None` when fewer than two models are installed, or the plan has no replay.
fn probe_models(plan: &Plan, models: &Installed) -> anyhow::Result<Option<ModelLine>> {
    let ids = &models.ids;
    if ids.len() < 2 {
        return Ok(None);
    }
    let Some(job) = ProbeJob::of(plan)? else {
        return Ok(None);
    };
    eprintln!(
        "probe: asking {} installed models the seed on {} feedback and Pareto rows, to choose the \
         replay model (--no-probe skips this)",
        ids.len(),
        job.rows.len()
    );
    let inference = super::backends::inference_backend(ids, None)?;
    let probes: Vec<ModelProbe> = super::runtime()?.block_on(async {
        let mut probes = ask_each(&job.probe(), &inference, ids).await;
        if probe::undecided(&probes)
            && let Some(more) = job.more()
        {
            eprintln!(
                "probe: the models are less than {} rows apart; asking {} more rows",
                probe::margin(job.rows.len()),
                more.rows.len()
            );
            let second = ask_each(&more, &inference, ids).await;
            probes = probes
                .into_iter()
                .zip(second)
                .map(|(first, more)| first.merged(more))
                .collect();
            for result in &probes {
                eprintln!("probe: {}", probe_line(result));
            }
        }
        probes
    });
    let Some(chosen) = probe::choose(&probes) else {
        return Ok(None);
    };
    if let Some(note) = one_answer_note(&probes) {
        eprintln!("note: {}", note.join(" "));
    }
    Ok(Some(ModelLine {
        model: chosen.model.clone(),
        comment: probe_comment(job.rows.len(), &probes),
    }))
}

/// One round of the probe on each of `ids`, each model's result on the terminal.
async fn ask_each(
    probe: &probe::Probe<'_>,
    inference: &std::sync::Arc<dyn crate::inference::Inference>,
    ids: &[String],
) -> Vec<ModelProbe> {
    let mut probes = Vec::new();
    for id in ids {
        let result = probe.run(inference, id).await;
        eprintln!("probe: {}", probe_line(&result));
        probes.push(result);
    }
    probes
}

/// The comment above the replay model `init` writes: how the probe chose, and each model's
/// probe on a line.
fn probe_comment(first_rows: usize, probes: &[ModelProbe]) -> String {
    let mut comment = format!(
        "# Chosen by `init`'s probe: each installed model answered the seed on {first_rows} feedback\n\
         # and Pareto rows (never holdout rows; each expected answer in turn), and on {} more when\n\
         # the first left the models closer than the margin; a larger model is chosen when it\n\
         # scores higher by at least {}% of the rows asked (the sums below), or when the smaller\n\
         # one gives one answer to {}% of the rows and the larger does not.\n\
         # `--no-probe` writes `local` without asking.\n",
        probe::MORE_PROBE_ROWS,
        probe::MARGIN_PERCENT,
        crate::score::ONE_ANSWER_PERCENT
    );
    for result in probes {
        comment.push_str(&format!("#   {}\n", probe_line(result)));
    }
    for line in one_answer_note(probes).unwrap_or_default() {
        comment.push_str(&format!("# {line}\n"));
    }
    comment
}

/// What to tell the user when every model gave one answer to nearly every probe row: the rows
/// hold each expected answer in turn, so the seed does not yet tell them apart on this data and
/// every model scores as if it always answered the same. The search starts from there, and the
/// user often knows in a sentence what it cannot see. `None` otherwise. Lines of a comment.
fn one_answer_note(probes: &[ModelProbe]) -> Option<Vec<&'static str>> {
    (!probes.is_empty() && probes.iter().all(ModelProbe::answers_one_way)).then(|| {
        vec![
            "Every model gave one answer to nearly every row asked: the seed does not yet tell",
            "the rows apart on this data. Say in it what sets each answer apart (what makes",
            "an input one label and not another); the evolution starts from the seed as written.",
        ]
    })
}

/// One model's probe in words, on one line: "local: 9.0 of 20 (0.450); most common answer `x` on
/// 13 rows; 12 s".
fn probe_line(probe: &ModelProbe) -> String {
    let mut line = format!(
        "{}: {:.1} of {} ({:.3})",
        probe.model,
        probe.total,
        probe.rows,
        probe.mean()
    );
    if let Some((answer, count)) = probe.top_answer() {
        // On one line: the line is also a TOML comment, and a JSON answer spans several.
        let answer: String = answer
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .filter(|c| !c.is_control() && *c != '`')
            .take(40)
            .collect();
        line.push_str(&format!("; most common answer `{answer}` on {count} rows"));
    }
    if probe.answered < probe.rows {
        let missing = probe.rows - probe.answered;
        let rows = if missing == 1 { "row" } else { "rows" };
        line.push_str(&format!("; {missing} {rows} got no answer"));
    }
    line.push_str(&format!("; {:.0} s", probe.seconds));
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_line_stays_one_line_whatever_the_answer() {
        let probe = ModelProbe {
            model: "local".into(),
            rows: 20,
            answered: 19,
            total: 9.0,
            answers: vec![("{\n  \"city\": null,\r\n\t`x`\u{7}".into(), 3)],
            seconds: 12.4,
        };
        let line = probe_line(&probe);
        assert_eq!(
            line,
            "local: 9.0 of 20 (0.450); most common answer `{ \"city\": null, x` on 3 rows; 1 row got \
             no answer; 12 s"
        );
        // The whole comment parses as TOML comments.
        let text = format!("# {line}\nkey = 1\n");
        assert!(toml::from_str::<toml::Table>(&text).is_ok(), "{text}");
    }

    /// A probe of `rows` rows that answered `top` to `count` of them and something else to the rest.
    fn probe(model: &str, top: &str, count: usize, rows: usize) -> ModelProbe {
        ModelProbe {
            model: model.into(),
            rows,
            answered: rows,
            total: (rows / 2) as f64,
            answers: vec![(top.into(), count), ("other".into(), rows - count)],
            seconds: 1.0,
        }
    }

    #[test]
    fn the_comment_says_so_when_every_model_answers_one_way() {
        // Spam Assassin emails (2026-11-29): the 0.5B answered `ham` to 40 of 40 probe rows,
        // the 1.5B `spam` to 40 of 40.
        let both = [probe("local", "ham", 40, 40), probe("big", "spam", 39, 40)];
        let comment = probe_comment(20, &both);
        assert!(
            comment.contains("# Every model gave one answer"),
            "{comment}"
        );
        assert!(toml::from_str::<toml::Table>(&format!("{comment}key = 1\n")).is_ok());
        // One model that tells the rows apart is enough to say nothing.
        let one = [probe("local", "ham", 40, 40), probe("big", "spam", 30, 40)];
        assert!(one_answer_note(&one).is_none());
        assert!(!probe_comment(20, &one).contains("Every model"));
        assert!(one_answer_note(&[]).is_none());
    }
}
