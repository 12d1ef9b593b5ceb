//! Datasets: CSV files with a header row, checked row by row and split into the minibatch
//! (feedback), Pareto (validation) and holdout (replay) parts.
//!
//! Files are streamed: checking a file keeps one record in memory at a time, and reading rows
//! back keeps only the rows asked for. Nothing here knows about experiment files; the caller maps
//! problems onto its own diagnostics.
mod line_ends;
mod split;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use thiserror::Error;

pub use line_ends::{LineEnds, line_at};
pub use split::{HoldoutSize, Order, RowSet, Split, SplitError};

/// A problem that stops a file from being read at all.
#[derive(Debug, Error)]
pub enum DatasetError {
    #[error("{}: cannot open: {error}", path.display())]
    Open {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: the file is empty; a header row is required", path.display())]
    Empty { path: PathBuf },
    #[error("{}:{line}: CSV could not be read: {message}", path.display())]
    Csv {
        path: PathBuf,
        line: u64,
        message: String,
    },
    #[error("{}:1: header column {position} is not valid UTF-8", path.display())]
    HeaderEncoding { path: PathBuf, position: usize },
    #[error(
        "{}:1: duplicate header name \"{name}\" (columns {first} and {second}); every column needs its own name",
        path.display()
    )]
    DuplicateHeader {
        path: PathBuf,
        name: String,
        first: usize,
        second: usize,
    },
}

/// The CSV header and where the experiment's columns sit in it.
#[derive(Debug, Clone)]
pub struct Header {
    pub names: Vec<String>,
}

/// A column the experiment names that the header does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingColumn {
    pub name: String,
    /// The closest header name, when one is close enough to be a likely typo.
    pub suggestion: Option<String>,
}

/// Positions of the input columns and the expected-output column in each record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Columns {
    inputs: Vec<(String, usize)>,
    expected: (String, usize),
}

impl Header {
    /// Finds the columns by name; every name that is missing is reported, not only the first.
    pub fn columns(
        &self,
        inputs: &[String],
        expected: &str,
    ) -> Result<Columns, Vec<MissingColumn>> {
        let mut missing = Vec::new();
        let mut find = |name: &str| {
            let found = self.names.iter().position(|header| header == name);
            if found.is_none() {
                missing.push(MissingColumn {
                    name: name.to_owned(),
                    suggestion: gepa_lab_suggest::closest(
                        name,
                        self.names.iter().map(String::as_str),
                    )
                    .map(str::to_owned),
                });
            }
            found
        };
        let inputs: Vec<_> = inputs
            .iter()
            .map(|name| find(name).map(|index| (name.clone(), index)))
            .collect();
        let expected = find(expected).map(|index| (expected.to_owned(), index));
        match (inputs.into_iter().collect::<Option<Vec<_>>>(), expected) {
            (Some(inputs), Some(expected)) if missing.is_empty() => {
                Ok(Columns { inputs, expected })
            }
            _ => Err(missing),
        }
    }
}

/// One data row, as the service and the replay need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// 0-based position among the data rows of the file (header excluded), before any shuffle.
    pub index: usize,
    /// 1-based line of the file where the record starts.
    pub line: u64,
    pub inputs: BTreeMap<String, String>,
    pub expected: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

/// Something wrong with one row. Rows are numbered from 1 after the header, like a spreadsheet
/// would show them below a frozen header; `line` is where the record starts in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowProblem {
    pub severity: Severity,
    pub row: usize,
    pub line: u64,
    pub kind: RowProblemKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowProblemKind {
    /// The record has a different number of fields than the header. `line_breaks` counts the
    /// line breaks inside its fields: a quote left open swallows the lines after it into one
    /// field, up to the next quote or the end of the file.
    Ragged {
        expected: usize,
        seen: usize,
        line_breaks: usize,
    },
    /// A field is not valid UTF-8.
    Encoding { column: String },
    /// The expected-output value is empty or only white space.
    EmptyExpected { column: String },
    /// An input value is empty; allowed, but usually a mistake.
    EmptyInput { column: String },
}

impl RowProblemKind {
    /// `record` has not the header's `expected` number of fields.
    pub fn ragged(expected: usize, record: &csv::ByteRecord) -> Self {
        Self::Ragged {
            expected,
            seen: record.len(),
            line_breaks: record
                .iter()
                .map(|field| field.iter().filter(|&&byte| byte == b'\n').count())
                .sum(),
        }
    }
}

impl std::fmt::Display for RowProblemKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ragged {
                expected,
                seen,
                line_breaks,
            } => {
                let fields = if *seen == 1 { "field" } else { "fields" };
                write!(f, "has {seen} {fields} but the header has {expected}")?;
                if *line_breaks > 0 {
                    write!(
                        f,
                        "; its quoted text runs over {} lines: is a quote (\") left open? \
                         (inside a quoted field a quote is written twice, \"\")",
                        line_breaks + 1
                    )?;
                }
                Ok(())
            }
            Self::Encoding { column } => write!(f, "column \"{column}\" is not valid UTF-8"),
            Self::EmptyExpected { column } => write!(
                f,
                "column \"{column}\" (expected output) is empty; every expected value needs at least 1 character"
            ),
            Self::EmptyInput { column } => write!(f, "input column \"{column}\" is empty"),
        }
    }
}

/// What a full pass over the file found.
#[derive(Debug, Clone)]
pub struct Scan {
    /// Data rows in the file (header excluded).
    pub rows: usize,
    /// Rows without an error: the rows a split may use.
    pub usable: usize,
    /// The first problems found, at most the limit given to [`scan`].
    pub problems: Vec<RowProblem>,
    /// Problems found in all, of each severity, including those not kept.
    pub error_count: usize,
    pub warning_count: usize,
    /// SHA-256 of the file's bytes, hex: identifies the exact data an experiment ran on.
    pub sha256: String,
    /// With [`LabelKeys::Keep`], a key of each data row's expected answer, in file order, for a
    /// stratified split ([`Order::Stratified`]): read from the bytes `sha256` hashes, so the keys
    /// are of the very file the split is checked against. Rows with the same answer (trimmed,
    /// as [`Row::expected`] holds it) have the same key: the first eight bytes of the answer's
    /// SHA-256, so two different answers share one only by a collision of 64 bits, and a file
    /// costs eight bytes a row whatever its answers' length.
    pub label_keys: Option<Vec<u64>>,
}

/// Whether a [`scan`] keeps the key of each row's expected answer ([`Scan::label_keys`]): only a
/// stratified split needs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelKeys {
    Skip,
    Keep,
}

impl LabelKeys {
    /// `Keep` for a stratified split.
    pub fn for_split(stratified: bool) -> Self {
        if stratified { Self::Keep } else { Self::Skip }
    }
}

/// Hashes the bytes as the CSV reader pulls them, so the check and the hash share one pass.
struct Hashing<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.hasher.update(&buf[..read]);
        Ok(read)
    }
}

/// Opens a CSV file: UTF-8 with or without a byte-order mark, LF or CRLF, quoted fields that may
/// span lines. Records may have any number of fields; [`scan`] reports the ragged ones.
fn open(path: &Path) -> Result<csv::Reader<LineEnds<impl Read>>, DatasetError> {
    let file = gepa_lab_input::open_stream(path).map_err(|source| DatasetError::Open {
        path: path.to_owned(),
        error: source,
    })?;
    Ok(csv_reader(file))
}

/// The CSV reader of every dataset read: a header row and records of any width, whose lines
/// [`line_at`] tells whatever the line ends.
pub fn csv_reader<R: Read>(input: R) -> csv::Reader<LineEnds<R>> {
    csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(LineEnds::new(input))
}

/// `err` of the record that starts at `line`.
fn csv_error(path: &Path, line: u64, err: &csv::Error) -> DatasetError {
    DatasetError::Csv {
        path: path.to_owned(),
        line,
        message: err.to_string(),
    }
}

/// Reads only the header row.
pub fn read_header(path: &Path) -> Result<Header, DatasetError> {
    header_of(path, &mut open(path)?)
}

fn header_of<R: Read>(path: &Path, reader: &mut csv::Reader<R>) -> Result<Header, DatasetError> {
    // The header starts the file, so the line csv gives is its own (see `line_ends`).
    let raw = reader
        .byte_headers()
        .map_err(|err| csv_error(path, err.position().map_or(0, csv::Position::line), &err))?;
    if raw.is_empty() {
        return Err(DatasetError::Empty {
            path: path.to_owned(),
        });
    }
    let mut names: Vec<String> = Vec::with_capacity(raw.len());
    for (position, field) in raw.iter().enumerate() {
        let name = std::str::from_utf8(field).map_err(|_| DatasetError::HeaderEncoding {
            path: path.to_owned(),
            position: position + 1,
        })?;
        // csv strips a leading byte-order mark itself; trimming makes `a, b` headers work too.
        let name = name.trim().to_owned();
        if let Some(first) = names.iter().position(|seen| *seen == name) {
            return Err(DatasetError::DuplicateHeader {
                path: path.to_owned(),
                name,
                first: first + 1,
                second: position + 1,
            });
        }
        names.push(name);
    }
    Ok(Header { names })
}

/// Checks every row of the file in one streaming pass, keeping at most `keep` problems (and the
/// label keys, when asked).
pub fn scan(
    path: &Path,
    columns: &Columns,
    keep: usize,
    labels: LabelKeys,
) -> Result<Scan, DatasetError> {
    let file = gepa_lab_input::open_stream(path).map_err(|source| DatasetError::Open {
        path: path.to_owned(),
        error: source,
    })?;
    let mut reader = csv_reader(Hashing {
        inner: file,
        hasher: Sha256::new(),
    });
    let width = header_of(path, &mut reader)?.names.len();
    let mut scan = Scan {
        rows: 0,
        usable: 0,
        problems: Vec::new(),
        error_count: 0,
        warning_count: 0,
        sha256: String::new(),
        label_keys: (labels == LabelKeys::Keep).then(Vec::new),
    };
    let mut record = csv::ByteRecord::new();
    let mut found = Vec::new();
    while reader
        .read_byte_record(&mut record)
        .map_err(|err| csv_error(path, line_at(&mut reader, err.position()), &err))?
    {
        scan.rows += 1;
        if let Some(keys) = &mut scan.label_keys {
            keys.push(label_key(&record, columns));
        }
        found.clear();
        check_record(&record, width, columns, &mut found);
        let line = line_at(&mut reader, record.position());
        let mut usable = true;
        for (severity, kind) in found.drain(..) {
            match severity {
                Severity::Error => {
                    usable = false;
                    scan.error_count += 1;
                }
                Severity::Warning => scan.warning_count += 1,
            }
            if scan.problems.len() < keep {
                scan.problems.push(RowProblem {
                    severity,
                    row: scan.rows,
                    line,
                    kind,
                });
            }
        }
        scan.usable += usize::from(usable);
    }
    let mut input = reader.into_inner().into_inner();
    // The CSV reader may stop before the end of the file (a final newline); hash the rest too.
    std::io::copy(&mut input, &mut std::io::sink()).map_err(|source| DatasetError::Open {
        path: path.to_owned(),
        error: source,
    })?;
    scan.sha256 = format!("{:x}", input.hasher.finalize());
    Ok(scan)
}

fn check_record(
    record: &csv::ByteRecord,
    width: usize,
    columns: &Columns,
    found: &mut Vec<(Severity, RowProblemKind)>,
) {
    if record.len() != width {
        found.push((Severity::Error, RowProblemKind::ragged(width, record)));
        return;
    }
    // Each field is UTF-8; an empty one is a problem of the severity its column gives it.
    let mut check =
        |name: &String, index: usize, empty: Severity, kind: fn(String) -> RowProblemKind| {
            match std::str::from_utf8(&record[index]) {
                Err(_) => found.push((
                    Severity::Error,
                    RowProblemKind::Encoding {
                        column: name.clone(),
                    },
                )),
                Ok(value) if value.trim().is_empty() => found.push((empty, kind(name.clone()))),
                Ok(_) => {}
            }
        };
    for (name, index) in &columns.inputs {
        check(name, *index, Severity::Warning, |column| {
            RowProblemKind::EmptyInput { column }
        });
    }
    let (name, index) = &columns.expected;
    check(name, *index, Severity::Error, |column| {
        RowProblemKind::EmptyExpected { column }
    });
}

/// Reads the rows at `indices` (0-based data-row positions, any order) in one streaming pass and
/// returns them in the order asked for. Only those rows are held in memory.
pub fn read_rows(
    path: &Path,
    columns: &Columns,
    indices: &[usize],
) -> Result<Vec<Row>, DatasetError> {
    // Where each wanted row goes in the output, sorted by row index for a single forward pass.
    let mut wanted: Vec<(usize, usize)> = indices
        .iter()
        .enumerate()
        .map(|(slot, &row)| (row, slot))
        .collect();
    wanted.sort_unstable();
    let mut out: Vec<Option<Row>> = vec![None; indices.len()];
    let mut reader = open(path)?;
    header_of(path, &mut reader)?;
    let mut record = csv::StringRecord::new();
    let mut next = wanted.iter().peekable();
    let mut index = 0;
    while next.peek().is_some() {
        let more = reader
            .read_record(&mut record)
            .map_err(|err| csv_error(path, line_at(&mut reader, err.position()), &err))?;
        if !more {
            break;
        }
        while let Some(&&(row, slot)) = next.peek() {
            if row != index {
                break;
            }
            let line = line_at(&mut reader, record.position());
            out[slot] = Some(row_of(&record, index, line, columns));
            next.next();
        }
        index += 1;
    }
    let found: Vec<Row> = out.into_iter().flatten().collect();
    if found.len() != indices.len() {
        return Err(DatasetError::Csv {
            path: path.to_owned(),
            line: 0,
            message: format!(
                "asked for {} rows but the file has only {index} data rows; it changed since it was checked",
                indices.len()
            ),
        });
    }
    Ok(found)
}

/// The [`Row`] a record of the file at data-row position `index`, starting at `line`, holds.
fn row_of(record: &csv::StringRecord, index: usize, line: u64, columns: &Columns) -> Row {
    Row {
        index,
        line,
        inputs: columns
            .inputs
            .iter()
            .map(|(name, at)| (name.clone(), record.get(*at).unwrap_or_default().to_owned()))
            .collect(),
        expected: record
            .get(columns.expected.1)
            .unwrap_or_default()
            .trim()
            .to_owned(),
    }
}

/// The key of a record's expected answer (see [`Scan::label_keys`]).
fn label_key(record: &csv::ByteRecord, columns: &Columns) -> u64 {
    // Not UTF-8 is an error of the row that `scan` reports; here it only needs a key.
    let answer = String::from_utf8_lossy(record.get(columns.expected.1).unwrap_or_default());
    let digest = Sha256::digest(answer.trim());
    let mut key = [0u8; 8];
    key.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(key)
}

/// The rows at some data-row positions, read in file order a few at a time in one pass over the
/// file, so that a holdout of any size is never held whole: only the set of positions asked for
/// (a range, or a bit per row) and the rows of the current chunk are in memory.
pub struct RowStream {
    path: std::path::PathBuf,
    columns: Columns,
    reader: csv::Reader<LineEnds<gepa_lab_input::LineLimited<std::io::BufReader<std::fs::File>>>>,
    record: csv::StringRecord,
    /// The positions asked for.
    wanted: RowSet,
    /// How many of `wanted` were read, and the next one to read.
    taken: usize,
    next: Option<usize>,
    /// The data-row position of the next record of the file.
    index: usize,
}

impl RowStream {
    pub fn open(path: &Path, columns: &Columns, wanted: &RowSet) -> Result<Self, DatasetError> {
        let file = gepa_lab_input::open_stream(path).map_err(|source| DatasetError::Open {
            path: path.to_owned(),
            error: source,
        })?;
        let mut reader = csv_reader(file);
        header_of(path, &mut reader)?;
        Ok(Self {
            path: path.to_owned(),
            columns: columns.clone(),
            reader,
            record: csv::StringRecord::new(),
            next: wanted.next_from(0),
            wanted: wanted.clone(),
            taken: 0,
            index: 0,
        })
    }

    /// How many rows the stream yields in all.
    pub fn len(&self) -> usize {
        self.wanted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.wanted.is_empty()
    }

    /// The next at most `n` rows asked for, in file order; empty once every one was read. A
    /// file with fewer rows than asked for is an error: it changed since it was checked.
    pub fn next_chunk(&mut self, n: usize) -> Result<Vec<Row>, DatasetError> {
        let mut rows = Vec::with_capacity(n.min(self.wanted.len() - self.taken));
        while rows.len() < n && self.taken < self.wanted.len() {
            let more = self.reader.read_record(&mut self.record).map_err(|err| {
                let line = line_at(&mut self.reader, err.position());
                csv_error(&self.path, line, &err)
            })?;
            if !more {
                return Err(DatasetError::Csv {
                    path: self.path.clone(),
                    line: 0,
                    message: format!(
                        "asked for {} rows but the file has only {} data rows; it changed since it was checked",
                        self.wanted.len(),
                        self.index
                    ),
                });
            }
            if self.next == Some(self.index) {
                let line = line_at(&mut self.reader, self.record.position());
                rows.push(row_of(&self.record, self.index, line, &self.columns));
                self.taken += 1;
                self.next = self.wanted.next_from(self.index + 1);
            }
            self.index += 1;
        }
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(rows: usize) -> (tempfile::TempDir, std::path::PathBuf, Columns) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.csv");
        let mut text = String::from("text,label\n");
        for i in 0..rows {
            text.push_str(&format!("\"row {i}, quoted\",label {i}\n"));
        }
        std::fs::write(&path, text).unwrap();
        let columns = read_header(&path)
            .unwrap()
            .columns(&["text".to_owned()], "label")
            .unwrap();
        (dir, path, columns)
    }

    #[test]
    fn a_row_stream_yields_the_rows_asked_for_in_file_order_a_chunk_at_a_time() {
        let (_dir, path, columns) = file(20);
        let mut stream =
            RowStream::open(&path, &columns, &RowSet::of([17, 3, 9, 3, 12, 0])).unwrap();
        assert_eq!(stream.len(), 5, "a repeated position counts once");
        let chunk = |stream: &mut RowStream, n| -> Vec<usize> {
            stream
                .next_chunk(n)
                .unwrap()
                .iter()
                .map(|row| row.index)
                .collect()
        };
        assert_eq!(chunk(&mut stream, 2), [0, 3]);
        assert_eq!(chunk(&mut stream, 2), [9, 12]);
        assert_eq!(chunk(&mut stream, 2), [17]);
        assert!(chunk(&mut stream, 2).is_empty());
        // The same rows as `read_rows` reads, field for field.
        let mut again = RowStream::open(&path, &columns, &RowSet::of([12])).unwrap();
        assert_eq!(
            again.next_chunk(10).unwrap(),
            read_rows(&path, &columns, &[12]).unwrap()
        );
    }

    #[test]
    fn label_keys_are_equal_for_equal_answers_only_and_kept_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.csv");
        std::fs::write(&path, "text,label\na,yes\nb, yes \nc,no\n\"d\ne\",Yes\n").unwrap();
        let columns = read_header(&path)
            .unwrap()
            .columns(&["text".to_owned()], "label")
            .unwrap();
        let keys = scan(&path, &columns, 0, LabelKeys::Keep)
            .unwrap()
            .label_keys
            .unwrap();
        assert_eq!(keys.len(), 4, "a quoted field spanning lines is one row");
        assert_eq!(keys[0], keys[1], "answers are trimmed, as rows read them");
        assert_ne!(keys[0], keys[2]);
        assert_ne!(keys[0], keys[3], "case is kept");
        let plain = scan(&path, &columns, 0, LabelKeys::Skip).unwrap();
        assert_eq!(plain.label_keys, None);
    }

    #[test]
    fn a_row_stream_over_a_file_that_got_shorter_is_an_error() {
        let (_dir, path, columns) = file(5);
        let mut stream = RowStream::open(&path, &columns, &RowSet::of([1, 7])).unwrap();
        let err = stream.next_chunk(10).unwrap_err().to_string();
        assert!(
            err.contains("asked for 2 rows") && err.contains("changed"),
            "{err}"
        );
    }

    #[test]
    fn rows_name_their_own_lines_with_windows_line_ends_and_the_hash_is_of_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.csv");
        // Line 3 starts a quoted value over two lines; line 5 has an empty label, line 6 one
        // field too few.
        let text = "text,label\r\na,yes\r\n\"b\r\nc\",no\r\nd,\r\ne\r\nf,yes\r\n";
        std::fs::write(&path, text).unwrap();
        let columns = read_header(&path)
            .unwrap()
            .columns(&["text".to_owned()], "label")
            .unwrap();
        let checked = scan(&path, &columns, 10, LabelKeys::Skip).unwrap();
        let lines: Vec<(usize, u64)> = checked.problems.iter().map(|p| (p.row, p.line)).collect();
        assert_eq!(lines, [(3, 5), (4, 6)], "{:?}", checked.problems);
        let rows = read_rows(&path, &columns, &[0, 1, 4]).unwrap();
        let lines: Vec<u64> = rows.iter().map(|row| row.line).collect();
        assert_eq!(lines, [2, 3, 7]);
        assert_eq!(
            rows[1].inputs["text"], "b\r\nc",
            "values are read as written"
        );
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(checked.sha256, format!("{:x}", Sha256::digest(&bytes)));
    }
}
