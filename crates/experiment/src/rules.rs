//! Every rule the validator enforces, with a stable id for diagnostics, tests and the README.
use serde::Serialize;

macro_rules! rules {
    ($($variant:ident => $id:literal, $summary:literal;)*) => {
        /// A validation rule. `id` is stable: scripts and editors may match on it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Rule {
            $($variant,)*
        }

        impl Rule {
            pub const ALL: &[Rule] = &[$(Rule::$variant,)*];

            pub fn id(self) -> &'static str {
                match self {
                    $(Rule::$variant => $id,)*
                }
            }

            /// What the rule requires, in one line.
            pub fn summary(self) -> &'static str {
                match self {
                    $(Rule::$variant => $summary,)*
                }
            }
        }
    };
}

rules! {
    FileRead => "file-read", "the experiment file exists and is readable";
    TomlSyntax => "toml-syntax", "the file is valid TOML";
    UnknownKey => "unknown-key", "every key is one the format defines (the closest known key is suggested)";
    Type => "type", "every value has the type its key needs";
    Required => "required", "required tables and keys are present";
    NameFormat => "name-format", "`name` uses only a-z, 0-9, `_` and `-`, 1 to 40 characters";
    CustomIdLength => "custom-id-length", "each execution's customId is at most 50 characters";
    CustomIdUnique => "custom-id-unique", "no two executions of a file share a customId";
    PromptSource => "prompt-source", "exactly one of `prompt.seed`, `prompt.seed_file` and `prompt.user` (`system` and `turns` go with `user`)";
    PromptFile => "prompt-file", "`prompt.seed_file` exists and is readable UTF-8";
    PromptEmpty => "prompt-empty", "the seed prompt has at least 1 character";
    PromptSyntax => "prompt-syntax", "every `{` in the prompt is closed; `{{` and `}}` are literal braces";
    PromptVariable => "prompt-variable", "every `{variable}` in the prompt names a column of `dataset.inputs`";
    PromptUnusedInput => "prompt-unused-input", "(warning) every input column is used in the prompt";
    PromptPartPlaceholder => "prompt-part-placeholder", "`prompt.system` and `prompt.turns` have no `{variable}` placeholder (only the user template does)";
    PromptPartMarker => "prompt-part-marker", "no part of the prompt holds a line that is a part marker (`<system>`, `<user>`, ...), and a `seed` does not read as a prompt of several parts";
    PromptEvolve => "prompt-evolve", "`prompt.evolve` names at least 1 part, each `system` or `user` and one the prompt has";
    DatasetInputs => "dataset-inputs", "`dataset.inputs` lists at least 1 column, each once";
    DatasetExpectedInInputs => "dataset-expected-in-inputs", "the expected column is not also an input (the prompt would show the answer)";
    DatasetFile => "dataset-file", "`dataset.file` exists and is readable";
    DatasetHeader => "dataset-header", "the CSV has a UTF-8 header row without duplicate names";
    DatasetColumn => "dataset-column", "every input and the expected column are header columns (the closest is suggested)";
    DatasetRaggedRow => "dataset-ragged-row", "every row has as many fields as the header";
    DatasetEncoding => "dataset-encoding", "every field is valid UTF-8";
    DatasetExpectedEmpty => "dataset-expected-empty", "every expected value has at least 1 character after trimming";
    DatasetInputEmpty => "dataset-input-empty", "(warning) input values are not empty";
    DatasetRowsSummary => "dataset-rows-summary", "row problems beyond the first 20 are counted in one line";
    MinibatchMin => "minibatch-min", "`dataset.minibatch` is at least 1";
    ParetoMin => "pareto-min", "`dataset.pareto` is at least 1";
    DatasetRows => "dataset-rows", "the CSV has at least minibatch + pareto usable rows";
    HoldoutValue => "holdout-value", "`dataset.holdout` is \"rest\", \"none\" or a count >= 0";
    HoldoutSize => "holdout-size", "a holdout count fits in the rows left after minibatch and pareto";
    HoldoutEmpty => "holdout-empty", "with [replay], the holdout has at least 1 row";
    Strategy => "strategy", "`evolution.strategy` is RPM or SAM";
    StrategySam => "strategy-sam", "(warning) the service may offer only RPM";
    EvolutionModel => "evolution-model", "`evolution.model` is a supported evolution model";
    EvaluatorModel => "evaluator-model", "`evaluator.model` is a supported evolution model";
    BudgetMin => "budget-min", "`evolution.budget` is at least 1";
    BudgetLow => "budget-low", "(warning) `evolution.budget` is at least 10; 25-50 is recommended";
    BudgetReflections => "budget-reflections", "(warning) the budget pays for at least 3 reflections after the seed's Pareto scores";
    EvaluatorMetric => "evaluator-metric", "(warning) `evaluator.metric` is accuracy, exact_match or coherence";
    EvaluatorThreshold => "evaluator-threshold", "`evaluator.threshold` is a number from 0 to 1";
    ReplayModels => "replay-models", "`replay.models` lists at least 1 model, each once";
    ReplayTop => "replay-top", "`replay.top` is at least 1";
    ReplayConcurrency => "replay-concurrency", "`replay.concurrency` is from 1 to 256";
    ReplayMaxTokens => "replay-max-tokens", "`replay.max_tokens` is from 1 to 32768";
    ReplayTemperature => "replay-temperature", "`replay.temperature` is a number from 0 to 2";
    ReplayRepeat => "replay-repeat", "`replay.repeat` is from 1 to 100";
    ReplayRepeatGreedy => "replay-repeat-greedy", "(warning) `replay.repeat` above 1 comes with a temperature above 0";
    ReplayScorer => "replay-scorer", "`replay.scorer` is a known scorer whose pattern or schema file is valid";
    ReplayJudge => "replay-judge", "the judge scorer has a [replay.judge] table";
    EngineRange => "engine-range", "each number of [engine] is within its range (see the README's [engine] table)";
    EngineSeedShared => "engine-seed-shared", "every variant has the same `engine.seed`: it is the run's seed, and each variant's own seed is derived from it";
    EngineOnError => "engine-on-error", "`engine.on_error` is fail or score_zero";
    EngineProposer => "engine-proposer", "`engine.proposer` is rules or rewrite, and not rules beside a reflection_template";
    EngineReflectionModel => "engine-reflection-model", "`engine.reflection_model` and `engine.task_model` are non-empty model references";
    EngineReflectionTemplate => "engine-reflection-template", "`engine.reflection_template` is a readable file containing <curr_instructions> and <inputs_outputs_feedback>";
    EngineReflectionTemplateFence => "engine-reflection-template-fence", "(warning) the reflection template asks for the new prompt in a fenced block";
    ProviderName => "provider-name", "a provider's name uses only a-z, 0-9, `_` and `-`, 1 to 32 characters, and is neither `local` nor `public`";
    ProviderUrl => "provider-url", "a provider's `url` is an http(s) URL with a host";
    ProviderRange => "provider-range", "a provider's `rpm` is 1 to 100000, `max_in_flight` 1 to 1024, `timeout_secs` 1 to 3600";
    ProviderHeader => "provider-header", "a provider's header names are valid HTTP header names, with a text value or `{ env = \"VAR\" }`";
    ProviderKeyEnv => "provider-key-env", "`key_env` and `{ env = ... }` header values name environment variables; those of a provider a model uses are set";
    ModelProvider => "model-provider", "a model reference `<provider>/<model>` names a declared provider (an undeclared prefix within 2 edits of a declared name is a typo) and a model";
    ProviderUnreachable => "provider-unreachable", "(plan --check, run) every used provider answers GET /v1/models";
    ProviderModel => "provider-model", "(plan --check, run) every provider lists the models the file names of it in /v1/models";
    ObjectivesOneOf => "objectives-one-of", "[objectives] names at least one cost, and each of `prompt_tokens`, `answer_tokens` and `latency_ms` sets exactly one of `limit` and `weight`";
    ObjectivesLimit => "objectives-limit", "an objective's `limit` is above 0 and at most 1000000 tokens (3600000 for `latency_ms`)";
    ObjectivesWeight => "objectives-weight", "an objective's `weight` is above 0 and at most 1";
    TrackingMlflow => "tracking-mlflow", "`tracking.mlflow` is an http(s) URL of an MLflow tracking server and `tracking.experiment`, when given, 1 to 500 characters";
    VariantName => "variant-name", "a variant name uses only a-z, 0-9, `_` and `-`";
    VariantNameUnique => "variant-name-unique", "variant names are unique";
}

impl Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.id())
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}
