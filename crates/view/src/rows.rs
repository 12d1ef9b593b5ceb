//! A run's replay answers a page at a time, read from `replay.csv` as it is: the row-level
//! detail beyond the rows a report shows (a report shows at most 2,000; a holdout may have
//! millions). Pages are read by skipping records without parsing them, so memory stays that of
//! one page whatever the file's size.
use std::path::Path;

use serde::Serialize;

use gepa_lab_store::{REPLAY_FILE, ReplayOf, ReplayRow, RunDir, StoreError};

/// Records on one page.
pub const PAGE_RECORDS: usize = 200;

/// One page of `replay.csv`.
#[derive(Debug, Serialize)]
pub struct ReplayPage {
    /// 1-based.
    pub page: usize,
    /// The 1-based number of the first record on the page.
    pub first: usize,
    pub records: Vec<Record>,
    /// More records follow this page.
    pub more: bool,
}

/// One answer as the page shows it.
#[derive(Debug, Serialize)]
pub struct Record {
    pub number: usize,
    pub variant: String,
    pub version: String,
    pub model: String,
    pub row: usize,
    pub sample: u32,
    pub inputs: Vec<(String, String)>,
    pub expected: String,
    pub output: String,
    /// None when the answer failed (see `error`).
    pub score: Option<f64>,
    pub feedback: String,
    pub error: String,
    pub latency_ms: u64,
}

impl Record {
    fn of(number: usize, row: ReplayRow) -> Self {
        let version = match row.version {
            ReplayOf::Version(version) => version.to_string(),
            ReplayOf::PromptFile(file) => file,
        };
        Self {
            number,
            variant: row.variant,
            version,
            model: row.model,
            row: row.row,
            sample: row.sample,
            inputs: row.inputs.into_iter().collect(),
            expected: row.expected,
            output: row.output,
            score: row.error.is_empty().then_some(row.score),
            feedback: row.feedback,
            error: row.error,
            latency_ms: row.latency_ms,
        }
    }
}

/// Why the walk over the file ended.
enum Walk {
    /// One record past the page was seen: there are more.
    Past,
    Failed(StoreError),
}

impl From<StoreError> for Walk {
    fn from(err: StoreError) -> Self {
        Self::Failed(err)
    }
}

/// Page `page` (from 1) of the run directory's `replay.csv`, `size` records a page.
pub fn replay_page(dir: &Path, page: usize, size: usize) -> Result<ReplayPage, StoreError> {
    let (page, size) = (page.max(1), size.max(1));
    let first = (page - 1) * size;
    let mut records = Vec::new();
    let walked = RunDir::open(dir)?.visit_records(REPLAY_FILE, |index, record| {
        if index < first {
            return Ok(());
        }
        if records.len() == size {
            return Err(Walk::Past);
        }
        records.push(Record::of(index + 1, record.read::<ReplayRow>()?));
        Ok(())
    });
    let more = match walked {
        Ok(()) => false,
        Err(Walk::Past) => true,
        Err(Walk::Failed(err)) => return Err(err),
    };
    Ok(ReplayPage {
        page,
        first: first + 1,
        records,
        more,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_hold_their_records_and_say_whether_more_follow() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/run");
        let all: Vec<ReplayRow> = RunDir::open(&fixture)
            .unwrap()
            .read_csv(REPLAY_FILE)
            .unwrap();
        let size = 50;
        assert!(
            all.len() > 2 * size,
            "the fixture has {} records",
            all.len()
        );
        let first = replay_page(&fixture, 1, size).unwrap();
        assert_eq!(first.records.len(), size);
        assert!(first.more);
        assert_eq!(first.records[0].number, 1);
        let last_page = all.len().div_ceil(size);
        let last = replay_page(&fixture, last_page, size).unwrap();
        assert!(!last.more);
        assert_eq!(last.first + last.records.len() - 1, all.len());
        let tail = &all[all.len() - 1];
        let shown = last.records.last().unwrap();
        assert_eq!(
            (shown.row, shown.output.as_str()),
            (tail.row, tail.output.as_str())
        );
        assert!(
            replay_page(&fixture, last_page + 1, size)
                .unwrap()
                .records
                .is_empty()
        );
    }
}
