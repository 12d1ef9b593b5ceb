//! The prompt-evolution service (GEPA): its wire types, defined once here for the client, the
//! local engine's adapter and `serve` alike.
pub mod wire;

/// Model suffixes the evolution service supports; ids are `<word>-<suffix>`, where the word is
/// configuration (see [`ServiceProfile`]).
pub const MODEL_SUFFIXES: [&str; 5] = ["5-mini", "5", "4.1", "4o", "4o-mini"];

/// Names that differ between deployments of the two services. Never hard-coded in logic: read
/// from the environment, with the public deployment's values as defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceProfile {
    /// The fixed word of evolution model ids (`<word>-4o-mini`).
    pub model_word: String,
}

impl Default for ServiceProfile {
    fn default() -> Self {
        Self {
            model_word: "gpt".to_owned(),
        }
    }
}

impl ServiceProfile {
    /// The defaults, overridden by `GEPA_LAB_MODEL_WORD`.
    pub fn from_env() -> Self {
        let mut profile = Self::default();
        if let Ok(word) = std::env::var("GEPA_LAB_MODEL_WORD")
            && !word.trim().is_empty()
        {
            profile.model_word = word.trim().to_owned();
        }
        profile
    }

    /// Every supported evolution model id under this profile.
    pub fn models(&self) -> Vec<String> {
        MODEL_SUFFIXES
            .iter()
            .map(|suffix| format!("{}-{suffix}", self.model_word))
            .collect()
    }

    pub fn supports(&self, model: &str) -> bool {
        model
            .strip_prefix(&self.model_word)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|suffix| MODEL_SUFFIXES.contains(&suffix))
    }
}
