//! The replay's answers sorted by (group, row, sample, record) in memory that does not grow with
//! them: an external merge sort. Answers are gathered [`CHUNK`] at a time; a chunk is sorted
//! and, when more follow, written to an anonymous temporary file (a run); the runs are merged,
//! [`FAN_IN`] at a time, into one sorted file, which readers then page through
//! [`READ_BLOCK`] answers at a time. A replay that fits in one chunk never touches the disk.
//!
//! The temporary files are in the system's temporary directory (`TMPDIR`), never in the run
//! directory, and vanish when the report is done, even when it fails.
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};

use super::Answer;

/// Answers sorted in memory at a time: about 6 MB of them.
pub(super) const CHUNK: usize = 1 << 17;
/// Most runs merged at once (open files, and a read buffer each).
const FAN_IN: usize = 64;
/// Answers a reader reads from the sorted file at a time.
const READ_BLOCK: usize = 1024;
/// Bytes of one answer on disk: group, row, sample, record and expected value (4 each), the
/// score and the output's hash (8 each), answered (1).
const ENTRY: usize = 37;

/// One answer with the group it belongs to: what is sorted.
#[derive(Debug, Clone, Copy)]
pub(super) struct Keyed {
    pub group: u32,
    pub answer: Answer,
}

impl Keyed {
    fn key(&self) -> (u32, u32, u32, u32) {
        let a = &self.answer;
        (self.group, a.row, a.sample, a.record)
    }

    fn encode(&self, out: &mut [u8; ENTRY]) {
        let a = &self.answer;
        out[0..4].copy_from_slice(&self.group.to_le_bytes());
        out[4..8].copy_from_slice(&a.row.to_le_bytes());
        out[8..12].copy_from_slice(&a.sample.to_le_bytes());
        out[12..16].copy_from_slice(&a.record.to_le_bytes());
        out[16..20].copy_from_slice(&a.expected.to_le_bytes());
        out[20..28].copy_from_slice(&a.score.to_bits().to_le_bytes());
        out[28..36].copy_from_slice(&a.output.to_le_bytes());
        out[36] = u8::from(a.answered);
    }

    fn decode(bytes: &[u8]) -> Self {
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
        Self {
            group: u32_at(0),
            answer: Answer {
                row: u32_at(4),
                sample: u32_at(8),
                record: u32_at(12),
                expected: u32_at(16),
                score: f64::from_bits(u64_at(20)),
                output: u64_at(28),
                answered: bytes[36] != 0,
            },
        }
    }
}

/// Gathers answers in any order and sorts them.
#[derive(Debug, Default)]
pub(super) struct Sorter {
    chunk: Vec<Keyed>,
    /// Sorted runs written so far.
    runs: Vec<File>,
}

impl Sorter {
    pub fn push(&mut self, answer: Keyed) -> io::Result<()> {
        if self.chunk.len() == CHUNK {
            let run = write_run(&mut self.chunk)?;
            self.runs.push(run);
        }
        self.chunk.push(answer);
        Ok(())
    }

    /// Every answer pushed, sorted, with `each` called on each in order (to check them as they
    /// go by).
    pub fn finish(mut self, mut each: impl FnMut(&Keyed)) -> io::Result<Sorted> {
        if self.runs.is_empty() {
            self.chunk.sort_unstable_by_key(Keyed::key);
            self.chunk.iter().for_each(&mut each);
            return Ok(Sorted::Memory(
                self.chunk.into_iter().map(|k| k.answer).collect(),
            ));
        }
        if !self.chunk.is_empty() {
            let run = write_run(&mut self.chunk)?;
            self.runs.push(run);
        }
        self.chunk = Vec::new();
        while self.runs.len() > FAN_IN {
            let merged: Vec<File> = self.runs.drain(..FAN_IN).collect();
            let run = merge(merged, |_| {})?;
            self.runs.push(run);
        }
        let file = merge(self.runs, each)?;
        Ok(Sorted::File(file))
    }
}

/// Sorts `chunk` into a new temporary file and empties it.
fn write_run(chunk: &mut Vec<Keyed>) -> io::Result<File> {
    chunk.sort_unstable_by_key(Keyed::key);
    let mut out = BufWriter::new(tempfile::tempfile()?);
    let mut bytes = [0u8; ENTRY];
    for answer in chunk.drain(..) {
        answer.encode(&mut bytes);
        out.write_all(&bytes)?;
    }
    out.into_inner().map_err(io::IntoInnerError::into_error)
}

/// Merges sorted runs into one new temporary file, calling `each` on every answer in order.
fn merge(runs: Vec<File>, mut each: impl FnMut(&Keyed)) -> io::Result<File> {
    let mut readers: Vec<BufReader<File>> = Vec::with_capacity(runs.len());
    for mut run in runs {
        io::Seek::rewind(&mut run)?;
        readers.push(BufReader::with_capacity(64 * 1024, run));
    }
    let mut heap = BinaryHeap::new();
    let mut heads: Vec<Option<Keyed>> = Vec::with_capacity(readers.len());
    for (at, reader) in readers.iter_mut().enumerate() {
        let head = next_entry(reader)?;
        if let Some(head) = &head {
            heap.push(Reverse((head.key(), at)));
        }
        heads.push(head);
    }
    let mut out = BufWriter::new(tempfile::tempfile()?);
    let mut bytes = [0u8; ENTRY];
    while let Some(Reverse((_, at))) = heap.pop() {
        let Some(answer) = heads[at].take() else {
            continue;
        };
        each(&answer);
        answer.encode(&mut bytes);
        out.write_all(&bytes)?;
        let next = next_entry(&mut readers[at])?;
        if let Some(next) = &next {
            heap.push(Reverse((next.key(), at)));
        }
        heads[at] = next;
    }
    out.into_inner().map_err(io::IntoInnerError::into_error)
}

/// The next answer of a run; none at its end.
fn next_entry(reader: &mut impl Read) -> io::Result<Option<Keyed>> {
    let mut bytes = [0u8; ENTRY];
    match reader.read_exact(&mut bytes) {
        Ok(()) => Ok(Some(Keyed::decode(&bytes))),
        Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
        Err(err) => Err(err),
    }
}

/// Answers sorted by (group, row, sample, record), addressed by position.
#[derive(Debug)]
pub(super) enum Sorted {
    Memory(Vec<Answer>),
    File(File),
}

impl Sorted {
    /// The answers at positions `at..at + count`, appended to `into`.
    fn read(&self, at: u64, count: usize, into: &mut Vec<Answer>) -> io::Result<()> {
        match self {
            Self::Memory(answers) => {
                let start = usize::try_from(at).unwrap_or(usize::MAX).min(answers.len());
                let end = start.saturating_add(count).min(answers.len());
                into.extend_from_slice(&answers[start..end]);
                Ok(())
            }
            Self::File(file) => {
                let mut bytes = vec![0u8; count * ENTRY];
                read_exact_at(file, &mut bytes, at * ENTRY as u64)?;
                into.extend(
                    bytes
                        .chunks_exact(ENTRY)
                        .map(|entry| Keyed::decode(entry).answer),
                );
                Ok(())
            }
        }
    }
}

/// Reads exactly `bytes.len()` bytes of `file` at `offset`, without moving its cursor.
#[cfg(unix)]
pub(crate) fn read_exact_at(file: &File, bytes: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, bytes, offset)
}

#[cfg(windows)]
pub(crate) fn read_exact_at(file: &File, mut bytes: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !bytes.is_empty() {
        match std::os::windows::fs::FileExt::seek_read(file, bytes, offset)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            read => {
                bytes = &mut bytes[read..];
                offset += read as u64;
            }
        }
    }
    Ok(())
}

/// The sorted answers with the first error met reading them, which the report then fails on:
/// a reader that meets one ends early instead of giving wrong rows.
#[derive(Debug)]
pub(super) struct Store {
    sorted: Sorted,
    failed: RefCell<Option<io::Error>>,
}

impl Store {
    pub fn new(sorted: Sorted) -> Self {
        Self {
            sorted,
            failed: RefCell::new(None),
        }
    }

    /// The answer at `at`, if it can be read.
    pub fn get(&self, at: u64) -> Option<Answer> {
        let mut one = Vec::with_capacity(1);
        match self.sorted.read(at, 1, &mut one) {
            Ok(()) => one.pop(),
            Err(err) => {
                self.fail(err);
                None
            }
        }
    }

    /// The answers at `range`, in order, read a block at a time.
    pub fn cursor(&self, range: std::ops::Range<u64>) -> Cursor<'_> {
        Cursor {
            store: self,
            next: range.start,
            end: range.end,
            block: Vec::new(),
            taken: 0,
        }
    }

    fn fail(&self, err: io::Error) {
        self.failed.borrow_mut().get_or_insert(err);
    }

    /// The first error met reading the answers, if any; taken.
    pub fn failure(&self) -> Option<io::Error> {
        self.failed.borrow_mut().take()
    }
}

/// Answers of a range of a [`Store`], in order.
#[derive(Debug)]
pub(super) struct Cursor<'a> {
    store: &'a Store,
    /// Position of the first answer not yet read into `block`.
    next: u64,
    end: u64,
    block: Vec<Answer>,
    /// Answers of `block` already given.
    taken: usize,
}

impl Cursor<'_> {
    /// The next answer without taking it.
    pub fn peek(&mut self) -> Option<&Answer> {
        if self.taken == self.block.len() {
            if self.next >= self.end {
                return None;
            }
            let count = (self.end - self.next).min(READ_BLOCK as u64) as usize;
            self.block.clear();
            self.taken = 0;
            if let Err(err) = self.store.sorted.read(self.next, count, &mut self.block) {
                self.store.fail(err);
                self.next = self.end;
                self.block.clear();
                return None;
            }
            self.next += count as u64;
        }
        self.block.get(self.taken)
    }
}

impl Iterator for Cursor<'_> {
    type Item = Answer;

    fn next(&mut self) -> Option<Answer> {
        let answer = *self.peek()?;
        self.taken += 1;
        Some(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyed(group: u32, row: u32, record: u32) -> Keyed {
        Keyed {
            group,
            answer: Answer {
                row,
                sample: 1,
                record,
                expected: 7,
                score: f64::from(row % 3) / 2.0,
                output: u64::from(record) * 31,
                answered: !record.is_multiple_of(5),
            },
        }
    }

    /// The sort key of every answer, in the order the sort gave them.
    type Keys = Vec<(u32, u32, u32, u32)>;

    /// Sorts `count` answers of 3 groups pushed in a scrambled order: their keys as the sort
    /// gave them, the store to read them back, and whether it is on disk.
    fn sort(count: u32) -> (Keys, Store, bool) {
        let mut sorter = Sorter::default();
        for i in 0..count {
            // A permutation of 0..count for any count coprime with 7919.
            let record = (u64::from(i) * 7919 % u64::from(count)) as u32;
            sorter.push(keyed(record % 3, record / 3, record)).unwrap();
        }
        let mut seen = Vec::new();
        let sorted = sorter.finish(|k| seen.push(k.key())).unwrap();
        let on_disk = matches!(sorted, Sorted::File(_));
        (seen, Store::new(sorted), on_disk)
    }

    #[test]
    fn answers_come_back_sorted_from_memory_and_from_merged_runs() {
        for count in [10, CHUNK as u32 * 3 + 17] {
            let (seen, store, on_disk) = sort(count);
            assert_eq!(on_disk, count as usize > CHUNK, "{count} answers");
            assert_eq!(seen.len(), count as usize);
            assert!(seen.windows(2).all(|pair| pair[0] < pair[1]), "sorted");
            let read: Vec<Answer> = store.cursor(0..u64::from(count)).collect();
            assert_eq!(read.len(), count as usize);
            for (answer, key) in read.iter().zip(&seen) {
                let again = keyed(answer.record % 3, answer.record / 3, answer.record);
                assert_eq!(again.key(), *key);
                assert_eq!(answer.score.to_bits(), again.answer.score.to_bits());
                assert_eq!(
                    (answer.output, answer.answered, answer.expected),
                    (again.answer.output, again.answer.answered, 7)
                );
            }
            let middle = u64::from(count) / 2;
            assert_eq!(
                store.get(middle).map(|a| a.record),
                Some(read[middle as usize].record)
            );
            assert!(store.failure().is_none());
            assert!(store.get(u64::from(count)).is_none(), "beyond the end");
            assert_eq!(
                store.failure().is_some(),
                on_disk,
                "a short read of the file"
            );
        }
    }

    #[test]
    fn a_read_past_the_end_of_the_file_is_an_error_the_report_fails_on() {
        let (_, store, on_disk) = sort(CHUNK as u32 + 1);
        assert!(on_disk);
        let beyond = CHUNK as u64 + 1;
        assert!(store.cursor(beyond..beyond + 3).next().is_none());
        let err = store.failure().expect("the short read is kept");
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        assert!(store.failure().is_none(), "taken");
    }
}
