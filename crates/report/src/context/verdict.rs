//! The report's decisions, apart from how they are shown: which version the run recommends,
//! which comparison is the headline, which comparisons form one family for Holm's adjustment,
//! and which cautions a version carries. `context` calls these and lays out what they decide;
//! nothing here writes a sentence.
use super::{ComparisonView, Recommendation, VersionView};
use crate::baseline::AnswerCounts;
use crate::load::{Execution, RunData, version_of};
use crate::stats::{self, PairedComparison};

/// The version the run recommends (see [`ReportContext::best`](super::ReportContext::best)).
pub(super) fn recommend(run: &RunData, versions: &[VersionView]) -> Option<Recommendation> {
    let (execution, version) = run.recommended()?;
    let execution = &run.executions[execution];
    let label = &execution.versions[version].label;
    let model = execution.models.first()?;
    let mean = versions
        .iter()
        .find(|v| v.execution == execution.label && v.label == *label)?
        .scores
        .iter()
        .find(|s| s.model == *model)
        .and_then(|s| s.mean);
    Some(Recommendation {
        execution: execution.label.clone(),
        version: label.clone(),
        model: model.clone(),
        mean,
    })
}

/// The comparison of the seed with the run's best version on its first replay model.
pub(super) fn headline(run: &RunData, comparisons: &[ComparisonView]) -> Option<ComparisonView> {
    let (execution, version) = run.best()?;
    let execution = &run.executions[execution];
    if execution.versions[version].is_seed() {
        return None;
    }
    comparisons
        .iter()
        .find(|c| c.execution == execution.label && Some(&c.model) == execution.models.first())
        .cloned()
}

/// Adjusts the page's family of comparisons: every comparison but the headline, which was
/// chosen before the holdout was read and stays a single test, together with the variants' and
/// the cheapest prompts' against the recommended ones.
pub(super) fn adjust_page_family(
    headline: Option<&ComparisonView>,
    comparisons: &mut [ComparisonView],
    variant_comparisons: &mut [ComparisonView],
    cost_comparisons: &mut [ComparisonView],
) {
    let is_headline = |c: &ComparisonView| {
        headline.is_some_and(|h| h.execution == c.execution && h.model == c.model)
    };
    adjust_family(
        comparisons
            .iter_mut()
            .filter(|c| !is_headline(c))
            .chain(variant_comparisons.iter_mut())
            .chain(cost_comparisons.iter_mut()),
    );
}

/// Adjusts comparisons made together as one family by Holm's method ([`stats::holm`]) and
/// rewrites their verdicts and sentences from the adjusted p-values.
pub fn adjust_family<'a>(family: impl IntoIterator<Item = &'a mut ComparisonView>) {
    let mut views: Vec<&mut ComparisonView> = family.into_iter().collect();
    let mut tests: Vec<&mut PairedComparison> = views.iter_mut().map(|v| &mut v.stats).collect();
    stats::holm(&mut tests);
    for view in views {
        let cautions = (
            std::mem::take(&mut view.cautions_a),
            std::mem::take(&mut view.cautions_b),
            view.above_baseline_b.take(),
        );
        *view = ComparisonView::new(
            &view.execution,
            &view.model,
            &view.a,
            &view.b,
            &view.stats,
            &view.scope,
        );
        (view.cautions_a, view.cautions_b, view.above_baseline_b) = cautions;
    }
}

/// The cautions of one version on one model (see [`AnswerCounts::cautions`]).
pub(super) fn cautions(
    versions: &[VersionView],
    execution: &str,
    label: &str,
    model: &str,
) -> Vec<String> {
    answer_counts(versions, execution, label, model)
        .flat_map(|a| a.cautions.iter().cloned())
        .collect()
}

/// That one version on one model scores significantly above the majority baseline, in words
/// (see [`AnswerCounts::above_baseline`]).
pub(super) fn above_baseline(
    versions: &[VersionView],
    execution: &str,
    label: &str,
    model: &str,
) -> Option<String> {
    answer_counts(versions, execution, label, model).find_map(|a| a.above_baseline.clone())
}

/// The label one version gives to nearly every answered row on one model (see
/// [`AnswerCounts::one_label`]), with the share in words: "`1` to 100% of rows".
pub(super) fn one_label(
    versions: &[VersionView],
    execution: &str,
    label: &str,
    model: &str,
) -> Option<String> {
    answer_counts(versions, execution, label, model)
        .filter(|a| a.one_label)
        .find_map(|a| Some(crate::baseline::one_label_share(a.top.as_ref()?, a.rows)))
}

/// How one version answered on one model, in a classification.
fn answer_counts<'a>(
    versions: &'a [VersionView],
    execution: &'a str,
    label: &'a str,
    model: &'a str,
) -> impl Iterator<Item = &'a AnswerCounts> {
    versions
        .iter()
        .filter(move |v| v.execution == execution && v.label == label)
        .flat_map(|v| &v.scores)
        .filter(move |s| s.model == model)
        .filter_map(|s| s.answers.as_ref())
}

/// With objectives, the recommended version against the cheapest one not significantly worse
/// than it on the Pareto rows (`store::objective_choices`), on the holdout rows both answered on
/// the execution's first replay model: whether the cheaper prompt holds up on rows the search
/// never saw. `None` without objectives, when the two are one version, or when either was not
/// replayed there.
pub(super) fn cheapest_against_best(
    run: &RunData,
    execution: &Execution,
) -> Option<ComparisonView> {
    let (_, choices) = execution.objectives.as_ref()?;
    let best = &execution.versions[execution.best?];
    let (cheapest, _) = choices.cheapest?;
    let cheapest =
        &execution.versions[version_of(&execution.versions, &execution.generations, cheapest)?];
    if cheapest.version == best.version {
        return None;
    }
    let model = execution.models.first()?;
    let pairs = super::paired_scores(
        &run.replay,
        execution,
        best.version,
        cheapest.version,
        model,
    );
    Some(ComparisonView::new(
        &execution.label,
        model,
        &best.label,
        &cheapest.label,
        &pairs.compare(),
        "holdout",
    ))
}
