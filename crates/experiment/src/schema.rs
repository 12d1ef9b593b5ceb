//! The JSON Schema of the experiment file, generated from the types in `file.rs`, and the
//! questions the loader asks of it: which keys does this table allow?
use serde_json::{Map, Value, json};

use super::file::ExperimentFile;

/// Tables a variant may override, each with every key optional.
const OVERRIDABLE: [&str; 8] = [
    "description",
    "prompt",
    "dataset",
    "evolution",
    "evaluator",
    "replay",
    "engine",
    "objectives",
];

/// The schema `gepa-lab schema` prints and the loader checks keys against.
pub fn json_schema() -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(ExperimentFile))
        .expect("a generated schema is plain JSON");
    // A variant overrides parts of the experiment's tables, so it takes the same keys as they do
    // with none required. schemars cannot express "this type, all optional", so the override
    // definitions are derived here from the generated ones.
    let properties = schema["properties"].clone();
    let mut variant_properties = Map::new();
    variant_properties.insert(
        "name".into(),
        schema["$defs"]["Variant"]["properties"]["name"].clone(),
    );
    for key in OVERRIDABLE {
        let Some(property) = properties.get(key) else {
            continue;
        };
        let mut property = resolve(&schema, property).clone();
        if let Some(object) = property.as_object_mut() {
            object.remove("required");
            object.remove("default");
        }
        variant_properties.insert(key.into(), property);
    }
    let variant = &mut schema["$defs"]["Variant"];
    variant["properties"] = Value::Object(variant_properties);
    variant["additionalProperties"] = json!(false);
    schema["additionalProperties"] = json!(false);
    for name in [
        "PromptSection",
        "DatasetSection",
        "EvolutionSection",
        "EvaluatorSection",
        "ReplaySection",
        "JudgeSection",
        "ProviderSection",
        "ObjectivesSection",
        "ObjectiveSection",
    ] {
        schema["$defs"][name]["additionalProperties"] = json!(false);
    }
    schema
}

/// Follows a local `$ref`, and for an optional table (`anyOf: [table, null]`) picks the table.
fn resolve<'a>(root: &'a Value, node: &'a Value) -> &'a Value {
    if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
        let target = reference
            .strip_prefix("#/")
            .map(|path| path.split('/').fold(root, |at, part| &at[part]));
        return target.map_or(node, |target| resolve(root, target));
    }
    for combinator in ["anyOf", "oneOf"] {
        if let Some(options) = node.get(combinator).and_then(Value::as_array)
            && let Some(table) = options
                .iter()
                .map(|option| resolve(root, option))
                .find(|option| option.get("properties").is_some())
        {
            return table;
        }
    }
    node
}

/// What the schema says about one table: its keys and the schema of each.
#[derive(Clone, Copy)]
pub struct TableShape<'a> {
    root: &'a Value,
    properties: &'a Map<String, Value>,
}

impl<'a> TableShape<'a> {
    pub fn root(schema: &'a Value) -> Option<Self> {
        Self::of(schema, schema)
    }

    fn of(root: &'a Value, node: &'a Value) -> Option<Self> {
        let properties = resolve(root, node).get("properties")?.as_object()?;
        Some(Self { root, properties })
    }

    pub fn keys(&self) -> impl Iterator<Item = &'a str> {
        self.properties.keys().map(String::as_str)
    }

    pub fn knows(&self, key: &str) -> bool {
        self.properties.contains_key(key)
    }

    /// The shape of the table under `key`, when that key holds a table.
    pub fn table(&self, key: &str) -> Option<Self> {
        Self::of(self.root, self.properties.get(key)?)
    }

    /// The shape of each table in the map under `key`, whose own keys are names the user picks
    /// (for `[providers.<name>]`).
    pub fn map_values(&self, key: &str) -> Option<Self> {
        let values = resolve(self.root, self.properties.get(key)?).get("additionalProperties")?;
        Self::of(self.root, values)
    }

    /// The shape of each table in the array under `key` (for `[[variants]]`).
    pub fn array_items(&self, key: &str) -> Option<Self> {
        let items = resolve(self.root, self.properties.get(key)?).get("items")?;
        Self::of(self.root, items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_is_closed_and_variants_take_optional_overrides() {
        let schema = json_schema();
        let root = TableShape::root(&schema).unwrap();
        assert!(root.knows("name") && root.knows("variants") && !root.knows("nmae"));
        let dataset = root.table("dataset").unwrap();
        assert!(dataset.knows("minibatch") && dataset.knows("shuffle_seed"));
        let replay = root
            .table("replay")
            .expect("an optional table still has a shape");
        assert!(replay.table("judge").unwrap().knows("rubric"));
        let variant = root.array_items("variants").unwrap();
        assert!(variant.knows("name") && variant.knows("evolution") && !variant.knows("variants"));
        let engine = variant
            .table("engine")
            .expect("a variant may override [engine]");
        assert!(engine.knows("merge") && engine.knows("seed") && !engine.knows("sed"));
        assert!(variant.table("evolution").unwrap().knows("budget"));
        assert!(
            !variant.knows("providers"),
            "providers are the file's, not a variant's"
        );
        let provider = root.map_values("providers").unwrap();
        assert!(provider.knows("key_env") && !provider.knows("key"));
        assert!(provider.map_values("headers").unwrap().knows("env"));
        let variant_dataset = resolve(
            &schema,
            &schema["$defs"]["Variant"]["properties"]["dataset"],
        );
        assert!(variant_dataset.get("required").is_none());
        assert!(
            schema["$defs"]["DatasetSection"]["required"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
        );
    }
}
