//! Reading every page of an evolution's history, and finding an execution by its customId.
//!
//! Page numbering is not in the contract; gepa-lab numbers pages from 1 (as `serve` does) and
//! stops at the first empty page, a page shorter than the limit, a page that brings no generation
//! not already read (a service that ignores `page`, alternates or cycles pages, or goes back to
//! earlier ones would otherwise be read forever), or more generations than the caller allows (an
//! execution cannot have more than its budget pays for).
use std::collections::BTreeMap;

use super::wire::{Execution, HistoryRecord};
use super::{Evolution, EvolutionError};

/// Records per history or list page asked for.
pub const PAGE_LIMIT: u32 = 50;
/// A bound on pages read, far above any real history, so a misbehaving service cannot loop us.
const MAX_PAGES: u32 = 10_000;

/// Every generation of an execution's history, one record per generation (the last one seen
/// wins), in generation order, with what paging noticed on the way.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    pub records: Vec<HistoryRecord>,
    pub pages: u32,
    /// A full page brought no generation not already read (the same page again, or an earlier
    /// one); paging stopped there.
    pub repeated_page: bool,
    /// Records whose generation was already seen on an earlier page.
    pub duplicates: usize,
    /// More generations came than the caller allows; paging stopped there.
    pub truncated: bool,
}

/// Generations read at most when the caller knows no better bound.
pub const MAX_GENERATIONS: usize = 100_000;

pub async fn fetch_history(
    evolution: &dyn Evolution,
    evolution_id: &str,
    limit: u32,
    max_generations: usize,
) -> Result<History, EvolutionError> {
    let mut history = History::default();
    let mut by_generation: BTreeMap<u64, HistoryRecord> = BTreeMap::new();
    for page in 1..=MAX_PAGES {
        let records = evolution
            .prompts(evolution_id, Some(page), Some(limit))
            .await?;
        history.pages = page;
        if records.is_empty() {
            break;
        }
        // Generations are numbers on the wire; a fractional one is not a generation we know.
        let generation = |record: &HistoryRecord| record.generation.max(0.0).round() as u64;
        if records
            .iter()
            .all(|record| by_generation.contains_key(&generation(record)))
        {
            history.repeated_page = true;
            break;
        }
        for record in &records {
            if by_generation
                .insert(generation(record), record.clone())
                .is_some()
            {
                history.duplicates += 1;
            }
        }
        if by_generation.len() > max_generations {
            history.truncated = true;
            while by_generation.len() > max_generations {
                by_generation.pop_last();
            }
            break;
        }
        if records.len() < limit as usize {
            break;
        }
    }
    history.records = by_generation.into_values().collect();
    Ok(history)
}

/// Looks an execution up by its customId across every page of `get_all_executions`: how resume
/// finds an execution whose start request may have reached the service before a crash.
pub async fn find_by_custom_id(
    evolution: &dyn Evolution,
    custom_id: &str,
) -> Result<Option<Execution>, EvolutionError> {
    // Pages seen, by the evolutionIds they hold: a page seen before (a service that ignores
    // `page`, or alternates pages) means every execution has been seen.
    let mut seen: std::collections::HashSet<Vec<Option<String>>> = Default::default();
    for page in 1..=MAX_PAGES {
        let executions = evolution.list(Some(page), Some(PAGE_LIMIT)).await?;
        if let Some(found) = executions
            .iter()
            .find(|execution| execution.custom_id.as_deref() == Some(custom_id))
        {
            return Ok(Some(found.clone()));
        }
        let ids = executions.iter().map(|e| e.evolution_id.clone()).collect();
        if executions.len() < PAGE_LIMIT as usize || !seen.insert(ids) {
            return Ok(None);
        }
    }
    // Not "not found": a list that never ends cannot say the start did not arrive, and sending it
    // again could start the execution twice.
    Err(EvolutionError::Invalid(format!(
        "the list of executions did not end after {MAX_PAGES} pages; cannot tell whether \
         customId {custom_id} was started"
    )))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::wire::{BatchJobs, StartExecution, Status};

    /// Serves a fixed list of history pages; `page` beyond them is empty unless `sticky`, which
    /// answers every page with the first one (a service that ignores `page`).
    struct Pages {
        pages: Vec<Vec<HistoryRecord>>,
        sticky: bool,
        asked: Mutex<Vec<u32>>,
    }

    fn record(generation: u32) -> HistoryRecord {
        HistoryRecord {
            generation: f64::from(generation),
            score: f64::from(generation) / 10.0,
            prompt: format!("prompt {generation}"),
            pareto_scores: None,
            costs: None,
        }
    }

    #[async_trait]
    impl Evolution for Pages {
        async fn start(&self, _: &StartExecution) -> Result<String, EvolutionError> {
            unreachable!("not used")
        }
        async fn get(&self, _: &str) -> Result<Execution, EvolutionError> {
            unreachable!("not used")
        }
        async fn list(
            &self,
            page: Option<u32>,
            _: Option<u32>,
        ) -> Result<Vec<Execution>, EvolutionError> {
            let execution = |id: &str| Execution {
                evolution_id: Some(id.into()),
                custom_id: Some(id.into()),
                strategy: None,
                status: Status::Pending,
                budget: None,
                prompt: None,
                created_at: None,
                error: None,
                budget_used: None,
            };
            Ok(match page {
                Some(1) => (0..PAGE_LIMIT)
                    .map(|i| execution(&format!("a{i}")))
                    .collect(),
                Some(2) => vec![execution("wanted")],
                _ => Vec::new(),
            })
        }
        async fn prompts(
            &self,
            _: &str,
            page: Option<u32>,
            _: Option<u32>,
        ) -> Result<Vec<HistoryRecord>, EvolutionError> {
            let page = page.expect("always paged");
            self.asked.lock().unwrap().push(page);
            // Sticky: the pages over and over (one page: a service that ignores `page`).
            let index = if self.sticky {
                (page as usize - 1) % self.pages.len()
            } else {
                page as usize - 1
            };
            Ok(self.pages.get(index).cloned().unwrap_or_default())
        }
        async fn batch_jobs(&self) -> Result<BatchJobs, EvolutionError> {
            unreachable!("not used")
        }
    }

    fn pages(pages: Vec<Vec<HistoryRecord>>, sticky: bool) -> Pages {
        Pages {
            pages,
            sticky,
            asked: Mutex::new(Vec::new()),
        }
    }

    #[tokio::test]
    async fn reads_until_a_short_page() {
        let service = pages(vec![vec![record(0), record(1)], vec![record(2)]], false);
        let history = fetch_history(&service, "e", 2, MAX_GENERATIONS)
            .await
            .unwrap();
        assert_eq!(
            history
                .records
                .iter()
                .map(|r| r.generation)
                .collect::<Vec<_>>(),
            [0.0, 1.0, 2.0]
        );
        assert_eq!(*service.asked.lock().unwrap(), [1, 2]);
    }

    #[tokio::test]
    async fn reads_until_an_empty_page_on_an_exact_boundary() {
        let service = pages(
            vec![vec![record(0), record(1)], vec![record(2), record(3)]],
            false,
        );
        let history = fetch_history(&service, "e", 2, MAX_GENERATIONS)
            .await
            .unwrap();
        assert_eq!(history.records.len(), 4);
        assert_eq!(*service.asked.lock().unwrap(), [1, 2, 3]);
    }

    #[tokio::test]
    async fn a_repeated_page_stops_paging() {
        let service = pages(vec![vec![record(0), record(1)]], true);
        let history = fetch_history(&service, "e", 2, MAX_GENERATIONS)
            .await
            .unwrap();
        assert!(history.repeated_page);
        assert_eq!(history.records.len(), 2);
        assert_eq!(*service.asked.lock().unwrap(), [1, 2]);
    }

    #[tokio::test]
    async fn alternating_pages_stop_paging_too() {
        // The case from the field: pages A, B, A, B, ... read 9,669 times in 7 minutes.
        let service = pages(
            vec![vec![record(0), record(1)], vec![record(2), record(3)]],
            true,
        );
        let history = fetch_history(&service, "e", 2, MAX_GENERATIONS)
            .await
            .unwrap();
        assert!(history.repeated_page);
        assert_eq!(history.records.len(), 4);
        assert_eq!(*service.asked.lock().unwrap(), [1, 2, 3]);
    }

    #[tokio::test]
    async fn a_page_that_goes_back_to_read_generations_stops_paging() {
        // Not the same bytes as page 1 (other prompts), but only generations already read: a
        // service that went back would otherwise be read to the page bound.
        let mut earlier = vec![record(0), record(1)];
        for record in &mut earlier {
            record.prompt.push_str(" again");
        }
        let service = pages(
            vec![
                vec![record(0), record(1)],
                vec![record(2), record(3)],
                earlier,
            ],
            false,
        );
        let history = fetch_history(&service, "e", 2, MAX_GENERATIONS)
            .await
            .unwrap();
        assert!(history.repeated_page);
        assert_eq!(history.duplicates, 0, "the stale page is not taken");
        assert_eq!(history.records[0].prompt, "prompt 0");
        assert_eq!(*service.asked.lock().unwrap(), [1, 2, 3]);
    }

    #[tokio::test]
    async fn no_more_generations_are_kept_than_the_caller_allows() {
        // The case from the field: endless pages gave 500,000 generations and a 575 MB file.
        let service = pages(
            (0..100)
                .map(|p| vec![record(2 * p), record(2 * p + 1)])
                .collect(),
            false,
        );
        let history = fetch_history(&service, "e", 2, 5).await.unwrap();
        assert!(history.truncated);
        assert_eq!(history.records.len(), 5);
        assert_eq!(
            service.asked.lock().unwrap().len(),
            3,
            "stopped at the first page past it"
        );
    }

    #[tokio::test]
    async fn overlapping_pages_are_deduplicated_by_generation() {
        let service = pages(
            vec![
                vec![record(0), record(1)],
                vec![record(1), record(2)],
                vec![],
            ],
            false,
        );
        let history = fetch_history(&service, "e", 2, MAX_GENERATIONS)
            .await
            .unwrap();
        assert_eq!(history.records.len(), 3);
        assert_eq!(history.duplicates, 1);
    }

    #[tokio::test]
    async fn finds_an_execution_on_a_later_page() {
        let service = pages(Vec::new(), false);
        let found = find_by_custom_id(&service, "wanted").await.unwrap();
        assert_eq!(
            found.and_then(|e| e.evolution_id).as_deref(),
            Some("wanted")
        );
        assert!(
            find_by_custom_id(&service, "absent")
                .await
                .unwrap()
                .is_none()
        );
    }
}
