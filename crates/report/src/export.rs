//! Machine-readable exports beside the CSV files: `results.json` (versioned) and the replay
//! table in a columnar format for notebooks, `replay.parquet`.
use polars::prelude::{CompatLevel, PolarsError, SchemaExt};
use polars_parquet::write::{
    CompressionOptions, FileWriter, StatisticsOptions, Version, WriteOptions, get_dtype_encoding,
    row_group_iter,
};
use serde::Serialize;

use super::ReportError;
use super::context::{
    ComparisonView, CostView, ExecutionView, ExperimentView, MethodView, Recommendation,
    ReportContext, VersionScore,
};
use super::tables::replay_frame;
use gepa_lab_store::{ReplayRow, StoreError};

/// Name of the results file in the run directory.
pub const RESULTS_FILE: &str = "results.json";

/// Name of the Parquet copy of `replay.csv` in the run directory.
pub const REPLAY_PARQUET_FILE: &str = "replay.parquet";

/// `results.json`: the numbers of the report without its prose, diffs and per-row tables. The
/// shape is versioned by `format_version` (the report context's version): a reader should check
/// it before reading further.
#[derive(Debug, Serialize)]
pub struct Results<'a> {
    pub format_version: u32,
    pub generator: String,
    pub simulated: bool,
    pub experiment: &'a ExperimentView,
    pub executions: &'a [ExecutionView],
    /// The version the run recommends, the seed included: what `run --fail-under` gates on.
    pub best: Option<&'a Recommendation>,
    pub headline: Option<&'a ComparisonView>,
    pub comparisons: &'a [ComparisonView],
    /// With `[objectives]`: each execution's costs, frontier, recommended and cheapest
    /// candidates and their holdout comparison; absent without.
    #[serde(skip_serializing_if = "no_costs")]
    pub costs: &'a [CostView],
    pub versions: Vec<VersionResult<'a>>,
    pub method: &'a MethodView,
}

#[derive(Debug, Serialize)]
pub struct VersionResult<'a> {
    pub execution: &'a str,
    pub label: &'a str,
    pub generation: Option<u32>,
    pub is_seed: bool,
    pub is_best: bool,
    pub validation_score: Option<f64>,
    pub prompt: &'a str,
    pub scores: &'a [VersionScore],
}

fn no_costs(costs: &&[CostView]) -> bool {
    costs.is_empty()
}

pub fn results(context: &ReportContext) -> Results<'_> {
    Results {
        format_version: context.format_version,
        generator: format!("gepa-lab {}", env!("CARGO_PKG_VERSION")),
        simulated: context.simulated,
        experiment: &context.experiment,
        executions: &context.executions,
        best: context.best.as_ref(),
        headline: context.headline.as_ref(),
        comparisons: &context.comparisons,
        costs: &context.costs,
        versions: context
            .versions
            .iter()
            .map(|v| VersionResult {
                execution: &v.execution,
                label: &v.label,
                generation: v.generation,
                is_seed: v.is_seed,
                is_best: v.is_best,
                validation_score: v.validation_score,
                prompt: &v.prompt,
                scores: &v.scores,
            })
            .collect(),
        method: &context.method,
    }
}

/// Replay rows per row group of `replay.parquet`: the most of them held in memory while it is
/// written, about 1.4 KB each as records and as a frame (so about 23 MB). Readers read groups
/// of this size without trouble; larger ones only made writing the file the report's largest
/// use of memory.
pub const ROW_GROUP_ROWS: usize = 16_384;

/// Writes `replay.parquet` into `out` from the rows of `replay.csv`, read one at a time: each row
/// group is [`ROW_GROUP_ROWS`] rows as a replay frame (`tables::replay_frame`, the columns of
/// `replay.csv`), so the file of a table of any length is written in bounded memory. It is
/// written the way polars-io writes one (format version 1 pages, dictionary encoding, min/max
/// and null-count statistics) but with uncompressed pages: the codecs are left out of the build
/// (see Cargo.toml).
///
/// The file holds no `ARROW:schema` entry: its columns are flat and the Parquet logical types say
/// all there is (UTF-8 strings, unsigned integers, doubles), whereas polars would record there
/// its in-memory string-view type, which means nothing to a reader that is not Arrow.
pub fn write_replay_parquet<W: std::io::Write>(
    rows: impl Iterator<Item = Result<ReplayRow, StoreError>>,
    out: W,
) -> Result<W, ReportError> {
    let failed = |err: PolarsError| ReportError::Template {
        name: REPLAY_PARQUET_FILE.into(),
        message: err.to_string(),
    };
    let compat = CompatLevel::newest();
    let schema = replay_frame(&[])?.schema().to_arrow(compat);
    let options = WriteOptions {
        statistics: StatisticsOptions::default(),
        compression: CompressionOptions::Uncompressed,
        version: Version::V1,
        data_page_size: None,
    };
    let mut writer = FileWriter::try_new(out, schema, options).map_err(failed)?;
    let columns = writer.parquet_schema().fields().to_vec();
    let mut batch: Vec<ReplayRow> = Vec::with_capacity(ROW_GROUP_ROWS);
    let mut rows = rows.peekable();
    while rows.peek().is_some() {
        batch.clear();
        for row in rows.by_ref().take(ROW_GROUP_ROWS) {
            batch.push(row?);
        }
        // A frame built from whole columns has one chunk: one row group.
        let frame = replay_frame(&batch)?;
        for chunk in frame.iter_chunks(compat, false) {
            if chunk.is_empty() {
                continue;
            }
            let length = chunk.len() as u64;
            let encodings = chunk
                .schema()
                .iter_values()
                .map(|field| get_dtype_encoding(&field.dtype))
                .collect();
            let group = row_group_iter(chunk, encodings, columns.clone(), options);
            writer.write(length, group).map_err(failed)?;
        }
    }
    writer.end(Some(Vec::new())).map_err(failed)?;
    Ok(writer.into_inner())
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;
    use std::path::Path;

    use polars::prelude::*;
    use polars_parquet::parquet::schema::types::{IntegerType, PrimitiveLogicalType as Logical};
    use polars_parquet::read::{
        BasicDecompressor, FileMetadata, PageReader, column_iter_to_arrays, infer_schema,
        read_metadata,
    };
    use polars_parquet::write::ParquetPhysicalType as Physical;
    use polars_parquet::write::ParquetType;

    use super::*;
    use gepa_lab_store::{REPLAY_FILE, ReplayRow, RunDir};

    fn fixture() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/run")
    }

    /// Reads a Parquet file with polars' own reader, one row group after the other.
    fn read_back(bytes: &[u8]) -> (FileMetadata, DataFrame) {
        let metadata = read_metadata(&mut Cursor::new(bytes)).unwrap();
        let schema = infer_schema(&metadata).unwrap();
        let mut frame: Option<DataFrame> = None;
        for group in &metadata.row_groups {
            let columns = schema
                .iter_values()
                .map(|field| {
                    let (pages, types): (Vec<_>, Vec<_>) = group
                        .columns_under_root_iter(&field.name)
                        .expect("every field has a column chunk")
                        .map(|chunk| {
                            let range = chunk.byte_range();
                            let bytes = bytes[range.start as usize..range.end as usize].to_vec();
                            let pages = PageReader::new(
                                Cursor::new(bytes.into()),
                                chunk,
                                vec![],
                                usize::MAX,
                            );
                            (
                                BasicDecompressor::new(pages, vec![]),
                                &chunk.descriptor().descriptor.primitive_type,
                            )
                        })
                        .unzip();
                    let (arrays, _) =
                        column_iter_to_arrays(pages, types, field.clone(), None).unwrap();
                    Column::from(Series::try_from((field.name.clone(), arrays)).unwrap())
                })
                .collect::<Vec<_>>();
            let part = DataFrame::new_infer_height(columns).unwrap();
            frame = Some(match frame {
                Some(mut whole) => {
                    whole.vstack_mut(&part).unwrap();
                    whole
                }
                None => part,
            });
        }
        (metadata, frame.expect("at least one row group"))
    }

    #[test]
    fn replay_parquet_reads_back_as_replay_csv() {
        let run = RunDir::open(&fixture()).unwrap();
        let rows: Vec<ReplayRow> = run.read_csv(REPLAY_FILE).unwrap();
        let frame = replay_frame(&rows).unwrap();
        let bytes = write_replay_parquet(rows.iter().cloned().map(Ok), Vec::new()).unwrap();
        assert!(bytes.starts_with(b"PAR1") && bytes.ends_with(b"PAR1"));
        let (metadata, back) = read_back(&bytes);

        // The columns of replay.csv, in its order, with Parquet's own types: a reader that
        // knows nothing of polars or Arrow sees UTF-8 strings, unsigned integers and doubles.
        // As this version writes replay.csv (the fixture predates the `waited_ms` column).
        let temp = tempfile::tempdir().unwrap();
        let written = RunDir::folder(temp.path()).unwrap();
        written.write_csv(REPLAY_FILE, &rows).unwrap();
        let mut csv = csv::Reader::from_path(written.file(REPLAY_FILE)).unwrap();
        let header: Vec<String> = csv.headers().unwrap().iter().map(String::from).collect();
        let string = (Physical::ByteArray, Some(Logical::String));
        let unsigned = |physical, width| (physical, Some(Logical::Integer(width)));
        let expected_types: Vec<(&str, (Physical, Option<Logical>))> = vec![
            ("variant", string),
            ("version", string),
            ("model", string),
            ("answered_by", string),
            ("row", unsigned(Physical::Int64, IntegerType::UInt64)),
            ("sample", unsigned(Physical::Int32, IntegerType::UInt32)),
            ("inputs", string),
            ("expected", string),
            ("output", string),
            ("score", (Physical::Double, None)),
            ("feedback", string),
            ("latency_ms", unsigned(Physical::Int64, IntegerType::UInt64)),
            ("waited_ms", unsigned(Physical::Int64, IntegerType::UInt64)),
            (
                "prompt_tokens",
                unsigned(Physical::Int32, IntegerType::UInt32),
            ),
            (
                "completion_tokens",
                unsigned(Physical::Int32, IntegerType::UInt32),
            ),
            ("node_id", string),
            ("error", string),
        ];
        let types: Vec<(&str, (Physical, Option<Logical>))> = metadata
            .schema()
            .fields()
            .iter()
            .map(|field| match field {
                ParquetType::PrimitiveType(p) => (
                    p.field_info.name.as_str(),
                    (p.physical_type, p.logical_type),
                ),
                ParquetType::GroupType { .. } => panic!("a nested column: {field:?}"),
            })
            .collect();
        assert_eq!(types, expected_types);
        assert_eq!(
            header,
            expected_types
                .iter()
                .map(|(name, _)| *name)
                .collect::<Vec<_>>()
        );
        assert!(
            metadata
                .key_value_metadata
                .as_deref()
                .unwrap_or_default()
                .is_empty(),
            "no ARROW:schema entry"
        );

        // Read back, it is the frame it was written from (nulls included) ...
        assert_eq!(metadata.num_rows, rows.len());
        assert_eq!(back.height(), rows.len());
        assert_eq!(
            back.dtypes(),
            [
                DataType::String,
                DataType::String,
                DataType::String,
                DataType::String,
                DataType::UInt64,
                DataType::UInt32,
                DataType::String,
                DataType::String,
                DataType::String,
                DataType::Float64,
                DataType::String,
                DataType::UInt64,
                DataType::UInt64,
                DataType::UInt32,
                DataType::UInt32,
                DataType::String,
                DataType::String,
            ]
        );
        assert!(back.equals_missing(&frame));

        // ... and every field says what replay.csv says, except that a row with an error has
        // null where the CSV file writes 0.
        let text = |name: &str, i: usize| back.column(name).unwrap().str().unwrap().get(i);
        let mut errors = 0;
        for (i, record) in csv.records().enumerate() {
            let record = record.unwrap();
            let field = |name: &str| &record[header.iter().position(|h| h == name).unwrap()];
            for name in [
                "variant",
                "version",
                "model",
                "answered_by",
                "expected",
                "output",
                "feedback",
                "node_id",
                "error",
            ] {
                assert_eq!(
                    text(name, i),
                    Some(field(name)),
                    "{name} of record {}",
                    i + 1
                );
            }
            // The same JSON object; the fixture was written by Python, whose JSON has spaces.
            let json = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap();
            assert_eq!(json(text("inputs", i).unwrap()), json(field("inputs")));
            let row = back.column("row").unwrap().u64().unwrap().get(i);
            assert_eq!(row, Some(field("row").parse().unwrap()));
            let score = back.column("score").unwrap().f64().unwrap().get(i);
            let latency = back.column("latency_ms").unwrap().u64().unwrap().get(i);
            let tokens = back.column("prompt_tokens").unwrap().u32().unwrap().get(i);
            let completion = back
                .column("completion_tokens")
                .unwrap()
                .u32()
                .unwrap()
                .get(i);
            if field("error").is_empty() {
                assert_eq!(score, Some(field("score").parse().unwrap()));
                assert_eq!(latency, Some(field("latency_ms").parse().unwrap()));
                assert_eq!(tokens, Some(field("prompt_tokens").parse().unwrap()));
                assert_eq!(
                    completion,
                    Some(field("completion_tokens").parse().unwrap())
                );
            } else {
                errors += 1;
                assert_eq!(
                    (score, latency, tokens, completion),
                    (None, None, None, None)
                );
            }
        }
        assert_eq!(errors, 1, "the fixture has one failed answer");
        assert_eq!(back.column("score").unwrap().null_count(), 1);

        // A few fields by hand, from the first record of replay.csv.
        assert!(
            text("inputs", 0)
                .unwrap()
                .starts_with(r#"{"review":"Fits true"#)
        );
        assert_eq!(
            back.column("latency_ms").unwrap().u64().unwrap().get(0),
            Some(198)
        );
        assert_eq!(
            back.column("score").unwrap().f64().unwrap().get(1),
            Some(1.0)
        );
    }

    #[test]
    fn a_long_replay_is_written_a_row_group_at_a_time_and_reads_back_whole() {
        let run = RunDir::open(&fixture()).unwrap();
        let rows: Vec<ReplayRow> = run.read_csv(REPLAY_FILE).unwrap();
        let long: Vec<ReplayRow> = (0..ROW_GROUP_ROWS + 5)
            .map(|i| ReplayRow {
                row: i + 1,
                ..rows[i % rows.len()].clone()
            })
            .collect();
        let bytes = write_replay_parquet(long.iter().cloned().map(Ok), Vec::new()).unwrap();
        let (metadata, back) = read_back(&bytes);
        assert_eq!(metadata.row_groups.len(), 2);
        assert_eq!(metadata.row_groups[1].num_rows(), 5);
        assert!(back.equals_missing(&replay_frame(&long).unwrap()));
        // A bad record stops the file, named.
        let broken = long
            .iter()
            .cloned()
            .map(Ok)
            .take(3)
            .chain(std::iter::once(Err(StoreError::Format {
                path: "replay.csv".into(),
                message: "record 4: bad".into(),
            })));
        let err = write_replay_parquet(broken, Vec::new()).unwrap_err();
        assert!(err.to_string().contains("record 4"), "{err}");
    }

    #[test]
    fn an_empty_replay_is_a_parquet_file_with_no_rows() {
        let bytes = write_replay_parquet(std::iter::empty(), Vec::new()).unwrap();
        let metadata = read_metadata(&mut Cursor::new(&bytes)).unwrap();
        assert_eq!(metadata.num_rows, 0);
        assert_eq!(metadata.schema().fields().len(), 17);
    }
}
