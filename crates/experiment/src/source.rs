//! Loading an experiment file: TOML with spans, unknown keys, variants merged over the base.
//!
//! The file is parsed once into a spanned tree. Keys are checked against the generated schema,
//! each `[[variants]]` table is merged over the base tables at the tree level (so every value keeps
//! the span of the place it was written), and each merged tree is deserialized into an
//! [`Experiment`]. Validation later asks [`Spans`] where a key path was written.
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

use super::diagnostic::{Diagnostic, Location};
use super::file::DatasetSection;
use super::file::{
    EngineSection, EvaluatorSection, EvolutionSection, Experiment, ObjectivesSection,
    PromptSection, ProviderSection, ReplaySection, TrackingSection,
};
use super::rules::Rule;
use super::schema::{TableShape, json_schema};

/// The text of a file and a way to turn byte offsets into lines and columns.
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub path: PathBuf,
    pub text: String,
    line_starts: Vec<usize>,
}

impl SourceFile {
    pub fn new(path: PathBuf, text: String) -> Self {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(at, _)| at + 1))
            .collect();
        Self {
            path,
            text,
            line_starts,
        }
    }

    /// The 1-based line and character column of a byte offset, with that line's text.
    pub fn location(&self, offset: usize) -> Location {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&start| start <= offset) - 1;
        let start = self.line_starts[line];
        let end = self.text[start..]
            .find('\n')
            .map_or(self.text.len(), |at| start + at);
        let column = self
            .text
            .get(start..offset)
            .map_or(1, |before| before.chars().count() + 1);
        Location {
            file: self.path.clone(),
            line: line + 1,
            column,
            source_line: Some(self.text[start..end].trim_end_matches('\r').to_owned()),
        }
    }
}

/// Where each key path (`dataset.inputs.0`, `evolution.budget`) of one experiment was written:
/// the span of its value. A variant's overrides point into the variant's table.
#[derive(Debug, Clone, Default)]
pub struct Spans {
    values: HashMap<String, Range<usize>>,
}

impl Spans {
    fn record(&mut self, path: &str, value: &Spanned<DeValue<'_>>) {
        self.values.insert(path.to_owned(), value.span());
        match value.get_ref() {
            DeValue::Table(table) => {
                for (key, item) in table.iter() {
                    self.record(&join(path, key.get_ref()), item);
                }
            }
            DeValue::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    self.record(&join(path, &index.to_string()), item);
                }
            }
            _ => {}
        }
    }

    /// The span of `path`, or of the nearest enclosing table written in the file (a missing key is
    /// shown at its table).
    pub fn find(&self, path: &str) -> Option<Range<usize>> {
        let mut path = path;
        loop {
            if let Some(span) = self.values.get(path) {
                return Some(span.clone());
            }
            path = &path[..path.rfind('.')?];
        }
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// One experiment to validate: the base, or the base with one variant's overrides.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub variant: Option<String>,
    /// Where the variant's `name` was written, for problems of the variant as a whole.
    pub variant_span: Option<Range<usize>>,
    /// `None` when a table could not be read; the reasons are in the load's diagnostics.
    pub experiment: Option<Experiment>,
    pub spans: Spans,
}

#[derive(Debug)]
pub struct Loaded {
    pub source: SourceFile,
    pub resolved: Vec<Resolved>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Loaded {
    pub fn location(&self, span: Option<Range<usize>>) -> Option<Location> {
        span.map(|span| self.source.location(span.start))
    }
}

/// Reads and parses `path`. Problems come back as diagnostics, never as a panic.
pub fn load(path: &Path) -> Result<Loaded, Box<Diagnostic>> {
    let text = gepa_lab_input::read_text(path, gepa_lab_input::TEXT_LIMIT).map_err(|err| {
        Box::new(
            Diagnostic::error(
                Rule::FileRead,
                format!("cannot read the experiment file: {err}"),
            )
            .in_file(path),
        )
    })?;
    let source = SourceFile::new(path.to_owned(), text);
    let mut diagnostics = Vec::new();
    let resolved = resolve(&source, &mut diagnostics);
    Ok(Loaded {
        source,
        resolved,
        diagnostics,
    })
}

/// Syntax errors of one file reported at most; a count stands for the rest.
const MAX_SYNTAX_ERRORS: usize = 10;

fn resolve(source: &SourceFile, diagnostics: &mut Vec<Diagnostic>) -> Vec<Resolved> {
    let (root, errors) = DeTable::parse_recoverable(&source.text);
    if !errors.is_empty() {
        report_syntax_errors(source, errors, diagnostics);
        return Vec::new();
    }
    let schema = json_schema();
    let shape = TableShape::root(&schema).expect("the experiment schema describes a table");
    check_keys(source, root.get_ref(), shape, "", diagnostics);

    let mut base = root.get_ref().clone();
    let variants = base.remove("variants");
    let base_span = root.span();
    let variant_tables: Vec<&Spanned<DeValue<'_>>> = match variants.as_ref().map(Spanned::get_ref) {
        None => Vec::new(),
        Some(DeValue::Array(items)) => items.iter().collect(),
        Some(_) => {
            let span = variants.as_ref().map(Spanned::span);
            diagnostics.push(
                Diagnostic::error(
                    Rule::Type,
                    "`variants` must be an array of tables, written as [[variants]]",
                )
                .at(span.map(|span| source.location(span.start))),
            );
            Vec::new()
        }
    };
    if variant_tables.is_empty() {
        return vec![resolve_one(
            source,
            Spanned::new(base_span, base),
            None,
            diagnostics,
        )];
    }
    variant_tables
        .into_iter()
        .enumerate()
        .map(|(index, variant)| {
            let location = source.location(variant.span().start);
            let Some(table) = variant.get_ref().as_table() else {
                diagnostics.push(
                    Diagnostic::error(Rule::Type, "each variant must be a table")
                        .at(Some(location)),
                );
                return Resolved {
                    variant: Some(format!("#{}", index + 1)),
                    variant_span: Some(variant.span()),
                    experiment: None,
                    spans: Spans::default(),
                };
            };
            let mut merged = base.clone();
            merge(&mut merged, table);
            let name = table.get("name");
            let label = variant_label(source, name, index, location, diagnostics);
            let mut resolved = resolve_one(
                source,
                Spanned::new(base_span.clone(), merged),
                Some(label),
                diagnostics,
            );
            resolved.variant_span = Some(name.map_or(variant.span(), Spanned::span));
            resolved
        })
        .collect()
}

/// The file's TOML syntax errors, the first [`MAX_SYNTAX_ERRORS`] of them and then one line for
/// the rest.
fn report_syntax_errors(
    source: &SourceFile,
    errors: Vec<toml::de::Error>,
    diagnostics: &mut Vec<Diagnostic>,
) {
    // Later syntax errors mostly follow from the first ones, and a damaged file can have
    // thousands (3,750 on one line of 30,000 quotes, each once a copy of the line).
    let total = errors.len();
    for (shown, error) in errors.into_iter().enumerate() {
        let location = error
            .span()
            .map_or_else(|| source.location(0), |span| source.location(span.start));
        let message = if shown < MAX_SYNTAX_ERRORS {
            format!("not valid TOML: {}", error.message().trim())
        } else {
            format!(
                "not valid TOML: {} more syntax errors from here on are not shown; fix the \
                 first {MAX_SYNTAX_ERRORS}, which often cause the rest",
                total - shown
            )
        };
        diagnostics.push(Diagnostic::error(Rule::TomlSyntax, message).at(Some(location)));
        if shown == MAX_SYNTAX_ERRORS {
            break;
        }
    }
}

/// A variant's label: its `name`, else `#<position>` with the problem reported.
fn variant_label(
    source: &SourceFile,
    name: Option<&Spanned<DeValue<'_>>>,
    index: usize,
    location: Location,
    diagnostics: &mut Vec<Diagnostic>,
) -> String {
    match name.map(|name| (name, name.get_ref().as_str())) {
        Some((_, Some(name))) => name.to_owned(),
        Some((name, None)) => {
            diagnostics.push(
                Diagnostic::error(Rule::Type, "a variant's `name` must be a string")
                    .at(Some(source.location(name.span().start))),
            );
            format!("#{}", index + 1)
        }
        None => {
            diagnostics.push(
                Diagnostic::error(
                    Rule::Required,
                    format!("variant #{} has no `name`", index + 1),
                )
                .at(Some(location))
                .help("give every [[variants]] table a unique `name = \"...\"`"),
            );
            format!("#{}", index + 1)
        }
    }
}

/// Lays a variant's keys over the base: tables merge key by key, anything else replaces.
fn merge<'i>(base: &mut DeTable<'i>, overrides: &DeTable<'i>) {
    for (key, value) in overrides.iter() {
        // The variant's own name is not the experiment's name.
        if key.get_ref() == "name" {
            continue;
        }
        match (base.get_mut(key.get_ref().as_ref()), value.get_ref()) {
            (Some(existing), DeValue::Table(table)) if existing.get_ref().is_table() => {
                if let DeValue::Table(existing) = existing.get_mut() {
                    merge(existing, table);
                }
            }
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}

/// An unknown key, with the closest known one. A key written into a provider's table is shown
/// without its line, which would print the key itself.
fn unknown_key(
    source: &SourceFile,
    key: &Spanned<std::borrow::Cow<'_, str>>,
    here: &str,
    shape: TableShape<'_>,
) -> Diagnostic {
    let name = key.get_ref().as_ref();
    let mut location = source.location(key.span().start);
    let in_provider = here.starts_with("providers.");
    if in_provider {
        location.source_line = None;
    }
    let suggestion = gepa_lab_suggest::closest(name, shape.keys());
    let allowed: Vec<&str> = shape.keys().collect();
    Diagnostic::error(Rule::UnknownKey, format!("unknown key `{here}`"))
        .at(Some(location))
        .seen(name)
        .help(match suggestion {
            _ if in_provider && name == "key" => "a key never goes in a file: put it in an \
                environment variable and name that with key_env = \"VAR\""
                .to_owned(),
            Some(suggestion) => format!("did you mean `{suggestion}`?"),
            None => format!("known keys here: {}", allowed.join(", ")),
        })
}

fn check_keys(
    source: &SourceFile,
    table: &DeTable<'_>,
    shape: TableShape<'_>,
    path: &str,
    diagnostics: &mut Vec<Diagnostic>,
) {
    for (key, value) in table.iter() {
        let name = key.get_ref().as_ref();
        let here = join(path, name);
        if !shape.knows(name) {
            diagnostics.push(unknown_key(source, key, &here, shape));
            continue;
        }
        match value.get_ref() {
            DeValue::Table(inner) => {
                if let Some(inner_shape) = shape.table(name) {
                    check_keys(source, inner, inner_shape, &here, diagnostics);
                } else if let Some(value_shape) = shape.map_values(name) {
                    for (entry, item) in inner.iter() {
                        if let DeValue::Table(table) = item.get_ref() {
                            let at = join(&here, entry.get_ref());
                            check_keys(source, table, value_shape, &at, diagnostics);
                        }
                    }
                }
            }
            DeValue::Array(items) => {
                if let Some(item_shape) = shape.array_items(name) {
                    for (index, item) in items.iter().enumerate() {
                        if let DeValue::Table(inner) = item.get_ref() {
                            check_keys(
                                source,
                                inner,
                                item_shape,
                                &format!("{here}.{index}"),
                                diagnostics,
                            );
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

fn resolve_one(
    source: &SourceFile,
    root: Spanned<DeTable<'_>>,
    variant: Option<String>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Resolved {
    let mut spans = Spans::default();
    for (key, value) in root.get_ref().iter() {
        spans.record(key.get_ref(), value);
    }
    let mut reader = SectionReader {
        source,
        table: root.get_ref(),
        diagnostics,
        failed: false,
    };
    let name: Option<String> = reader.required("name");
    let description = reader.optional("description");
    let prompt: Option<PromptSection> = reader.required("prompt");
    let dataset: Option<DatasetSection> = reader.required("dataset");
    let evolution: Option<EvolutionSection> = reader.required("evolution");
    let evaluator: Option<EvaluatorSection> = reader.required("evaluator");
    let replay: Option<ReplaySection> = reader.optional("replay");
    let engine: Option<EngineSection> = reader.optional("engine");
    let objectives: Option<ObjectivesSection> = reader.optional("objectives");
    let tracking: Option<TrackingSection> = reader.optional("tracking");
    let providers: Option<BTreeMap<String, ProviderSection>> = reader.optional("providers");
    let experiment = match (name, prompt, dataset, evolution, evaluator) {
        (Some(name), Some(prompt), Some(dataset), Some(evolution), Some(evaluator))
            if !reader.failed =>
        {
            Some(Experiment {
                name,
                description,
                prompt,
                dataset,
                evolution,
                evaluator,
                replay,
                engine,
                objectives,
                tracking,
                providers: providers.unwrap_or_default(),
            })
        }
        _ => None,
    };
    Resolved {
        variant,
        variant_span: None,
        experiment,
        spans,
    }
}

/// Deserializes the top-level tables one at a time, so that a mistake in one table does not hide
/// the mistakes in the others.
struct SectionReader<'a, 'i> {
    source: &'a SourceFile,
    table: &'a DeTable<'i>,
    diagnostics: &'a mut Vec<Diagnostic>,
    failed: bool,
}

impl SectionReader<'_, '_> {
    fn required<T: DeserializeOwned>(&mut self, key: &str) -> Option<T> {
        if self.table.get(key).is_none() {
            self.failed = true;
            let what = if key == "name" {
                "key `name`".to_owned()
            } else {
                format!("table [{key}]")
            };
            self.diagnostics.push(
                Diagnostic::error(Rule::Required, format!("missing required {what}"))
                    .at(Some(self.source.location(0)))
                    .help(format!(
                        "docs/experiment-file.md has a complete example and the keys of {what}"
                    )),
            );
            return None;
        }
        self.optional(key)
    }

    fn optional<T: DeserializeOwned>(&mut self, key: &str) -> Option<T> {
        let value = self.table.get(key)?;
        match T::deserialize(ValueDeserializer::from(value.clone())) {
            Ok(section) => Some(section),
            Err(error) => {
                self.failed = true;
                let span = error.span().unwrap_or_else(|| value.span());
                let message = error.message().trim().to_owned();
                let rule = if message.starts_with("missing field") {
                    Rule::Required
                } else {
                    Rule::Type
                };
                // Not tagged with the variant: the span already points at the value, and an error in
                // a base table then reads the same for every variant and is reported once.
                self.diagnostics.push(
                    Diagnostic::error(rule, format!("in `{key}`: {message}"))
                        .at(Some(self.source.location(span.start))),
                );
                None
            }
        }
    }
}

/// The `[providers]` tables of the user's config file, read like an experiment file's (keys
/// checked, each value with its place), with where each key was written. The file also holds
/// API keys, so no diagnostic about it quotes one of its lines.
pub struct ConfigProviders {
    pub source: SourceFile,
    pub spans: Spans,
    pub providers: BTreeMap<String, ProviderSection>,
}

impl ConfigProviders {
    pub fn location(&self, path: &str) -> Option<Location> {
        self.spans.find(path).map(|span| {
            let mut location = self.source.location(span.start);
            location.source_line = None;
            location
        })
    }
}

/// Reads the providers of the config file at `path`; problems are added to `diagnostics`.
pub fn config_providers(path: &Path, diagnostics: &mut Vec<Diagnostic>) -> Option<ConfigProviders> {
    let text = gepa_lab_input::read_text(path, gepa_lab_input::TEXT_LIMIT).ok()?;
    let source = SourceFile::new(path.to_owned(), text);
    let (root, errors) = DeTable::parse_recoverable(&source.text);
    let mut found = Vec::new();
    if errors.is_empty()
        && let Some(value) = root.get_ref().get("providers")
    {
        let schema = json_schema();
        let shape = TableShape::root(&schema).and_then(|root| root.map_values("providers"));
        if let (DeValue::Table(table), Some(shape)) = (value.get_ref(), shape) {
            for (name, item) in table.iter() {
                if let DeValue::Table(inner) = item.get_ref() {
                    let at = format!("providers.{}", name.get_ref());
                    check_keys(&source, inner, shape, &at, &mut found);
                }
            }
        }
        let mut spans = Spans::default();
        spans.record("providers", value);
        let mut reader = SectionReader {
            source: &source,
            table: root.get_ref(),
            diagnostics: &mut found,
            failed: false,
        };
        let providers = reader.optional("providers").unwrap_or_default();
        for mut diagnostic in found {
            if let Some(location) = &mut diagnostic.location {
                location.source_line = None;
            }
            diagnostics.push(diagnostic);
        }
        return Some(ConfigProviders {
            source,
            spans,
            providers,
        });
    }
    None
}
