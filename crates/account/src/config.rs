//! The user's config file: per inference service, the API key it issued, its tier and
//! rpmLimit, the wallet it belongs to, and the confirmed top-up receiver.
//!
//! It lives at `$GEPA_LAB_CONFIG`, else `$XDG_CONFIG_HOME/gepa-lab/config.toml`, else
//! `~/.config/gepa-lab/config.toml`. Since it holds keys, it is written atomically with mode
//! 0600 and refused for reading if its group or others may read it. Keys are filed under the
//! service's base URL and only ever sent to that service: pointing `--url` at another server
//! must not hand it the key of the public one.
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use gepa_lab_http::Secret;
use gepa_lab_wallet::Address;

pub const CONFIG_ENV: &str = gepa_lab_env::CONFIG;

const HEADER: &str = "\
# gepa-lab account settings, written by `gepa-lab auth wallet`, `auth key` and `credits topup`.
# It holds API keys: keep it readable only by you (mode 0600), or gepa-lab refuses to read it.
";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot tell where the config file is: set {CONFIG_ENV}, XDG_CONFIG_HOME or HOME")]
    NoLocation,
    #[error("cannot read config file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "config file {} has mode {mode:04o}, so others may read the API keys in it; allow only its owner (chmod 600 {})",
        path.display(),
        path.display()
    )]
    TooOpen { path: PathBuf, mode: u32 },
    /// The parser's message without its source excerpt, which could quote a key.
    #[error("config file {}, line {line}: {message}", path.display())]
    Syntax {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("config file {}, [services.{service:?}] {field} = {value:?}: {reason}", path.display())]
    Field {
        path: PathBuf,
        service: String,
        field: &'static str,
        value: String,
        reason: String,
    },
    #[error("cannot write config file {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What gepa-lab knows about the user's account at one service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceAccount {
    /// The wallet the key was issued to.
    pub address: Option<Address>,
    pub key: Option<Secret>,
    pub tier: Option<String>,
    pub rpm_limit: Option<NonZeroU32>,
    /// The top-up receiver the user confirmed for this service.
    pub pay_to: Option<Address>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserConfig {
    /// By normalised base URL (see `service_id`).
    pub services: BTreeMap<String, ServiceAccount>,
    /// `[providers.<name>]` tables, as written: experiments read them (`experiment`'s own
    /// reader checks them, with their lines); here they are only kept when the file is saved.
    pub providers: toml::Table,
}

/// The config file's location, from the environment.
pub fn config_path() -> Result<PathBuf, ConfigError> {
    config_path_from(|name| std::env::var_os(name))
}

fn config_path_from(env: impl Fn(&str) -> Option<OsString>) -> Result<PathBuf, ConfigError> {
    let set = |name| env(name).filter(|value| !value.is_empty());
    if let Some(path) = set(CONFIG_ENV) {
        return Ok(PathBuf::from(path));
    }
    // The XDG spec says a relative XDG_CONFIG_HOME is invalid and must be ignored.
    if let Some(dir) = set("XDG_CONFIG_HOME").map(PathBuf::from)
        && dir.is_absolute()
    {
        return Ok(dir.join("gepa-lab").join("config.toml"));
    }
    let home = set("HOME").ok_or(ConfigError::NoLocation)?;
    Ok(PathBuf::from(home)
        .join(".config")
        .join("gepa-lab")
        .join("config.toml"))
}

/// The form a base URL is filed under: parsed and re-printed (so case and a trailing slash do
/// not matter), without a trailing slash.
pub fn service_id(base_url: &str) -> String {
    let trimmed = base_url.trim();
    match reqwest::Url::parse(trimmed) {
        Ok(url) => url.as_str().trim_end_matches('/').to_string(),
        Err(_) => trimmed.trim_end_matches('/').to_string(),
    }
}

/// The parser quotes a value it cannot use (`invalid type: string "…"`), and a key put under
/// the wrong name would be quoted in full: quoted strings are cut from the message.
fn without_quoted_values(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut inside = false;
    for c in message.chars() {
        if c == '"' {
            if !inside {
                out.push_str("\"…\"");
            }
            inside = !inside;
        } else if !inside {
            out.push(c);
        }
    }
    out
}

impl UserConfig {
    /// Reads the file; a missing file is an empty config.
    pub fn load(path: &Path) -> Result<UserConfig, ConfigError> {
        let read_error = |source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        };
        let mut file = match gepa_lab_input::open_regular(path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Ok(UserConfig::default());
            }
            Err(err) => return Err(read_error(err)),
        };
        // Checked on the open file, so the file read is the file checked.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = file.metadata().map_err(read_error)?.permissions().mode();
            if mode & 0o077 != 0 {
                return Err(ConfigError::TooOpen {
                    path: path.to_path_buf(),
                    mode: mode & 0o7777,
                });
            }
        }
        let mut text = Zeroizing::new(String::new());
        file.read_to_string(&mut text).map_err(read_error)?;
        Self::parse(&text, path)
    }

    fn parse(text: &str, path: &Path) -> Result<UserConfig, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|err| ConfigError::Syntax {
            path: path.to_path_buf(),
            line: err
                .span()
                .map(|span| text[..span.start.min(text.len())].lines().count().max(1))
                .unwrap_or(1),
            message: without_quoted_values(err.message().trim()),
        })?;
        let mut services = BTreeMap::new();
        for (service, raw) in raw.services {
            let field_error = |field, value: &str, reason: String| ConfigError::Field {
                path: path.to_path_buf(),
                service: service.clone(),
                field,
                value: value.to_string(),
                reason,
            };
            let address = |field, value: Option<String>| {
                value
                    .map(|text| {
                        text.parse::<Address>()
                            .map_err(|err| field_error(field, &text, err.to_string()))
                    })
                    .transpose()
            };
            let rpm_limit = raw
                .rpm_limit
                .map(|rpm| {
                    NonZeroU32::new(rpm).ok_or_else(|| {
                        field_error("rpm_limit", "0", "must be at least 1".to_string())
                    })
                })
                .transpose()?;
            let account = ServiceAccount {
                address: address("address", raw.address)?,
                key: raw.key.map(Secret::new),
                tier: raw.tier,
                rpm_limit,
                pay_to: address("pay_to", raw.pay_to)?,
            };
            services.insert(service_id(&service), account);
        }
        Ok(UserConfig {
            services,
            providers: raw.providers,
        })
    }

    /// Writes the whole file atomically (a temporary file in the same folder, then a rename),
    /// readable and writable only by its owner; folders it creates are private too.
    pub fn save(&self, path: &Path) -> Result<(), ConfigError> {
        let write_error = |source| ConfigError::Write {
            path: path.to_path_buf(),
            source,
        };
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&dir).map_err(write_error)?;
        let text = Zeroizing::new(self.to_toml());
        // tempfile creates the file with mode 0600 before anything is written to it.
        let mut file = tempfile::NamedTempFile::new_in(&dir).map_err(write_error)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            file.as_file()
                .set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(write_error)?;
        }
        file.write_all(text.as_bytes()).map_err(write_error)?;
        file.as_file().sync_all().map_err(write_error)?;
        file.persist(path).map_err(|err| write_error(err.error))?;
        Ok(())
    }

    fn to_toml(&self) -> String {
        let raw = RawConfig {
            services: self
                .services
                .iter()
                .map(|(service, account)| {
                    let raw = RawService {
                        address: account.address.map(|a| a.to_string()),
                        key: account.key.as_ref().map(|k| k.expose().to_string()),
                        tier: account.tier.clone(),
                        rpm_limit: account.rpm_limit.map(NonZeroU32::get),
                        pay_to: account.pay_to.map(|a| a.to_string()),
                    };
                    (service.clone(), raw)
                })
                .collect(),
            providers: self.providers.clone(),
        };
        // A map of strings, numbers and optional strings always serialises.
        let body = toml::to_string(&raw).unwrap_or_default();
        format!("{HEADER}\n{body}")
    }

    pub fn service(&self, base_url: &str) -> Option<&ServiceAccount> {
        self.services.get(&service_id(base_url))
    }

    pub fn service_mut(&mut self, base_url: &str) -> &mut ServiceAccount {
        self.services.entry(service_id(base_url)).or_default()
    }
}

#[derive(Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    services: BTreeMap<String, RawService>,
    #[serde(default, skip_serializing_if = "toml::Table::is_empty")]
    providers: toml::Table,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawService {
    #[serde(skip_serializing_if = "Option::is_none")]
    address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tier: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rpm_limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pay_to: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "dkn_live_0123456789abcdef";

    fn sample() -> UserConfig {
        let mut config = UserConfig::default();
        let account = config.service_mut("http://127.0.0.1:8080/");
        account.address = Some(
            "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
                .parse()
                .unwrap(),
        );
        account.key = Some(Secret::new(KEY));
        account.tier = Some("free".into());
        account.rpm_limit = NonZeroU32::new(60);
        account.pay_to = Some(
            "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
                .parse()
                .unwrap(),
        );
        config
    }

    #[test]
    fn the_path_follows_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| OsString::from(value))
            }
        };
        let path = |pairs| config_path_from(env(pairs)).ok();
        assert_eq!(
            path(&[(CONFIG_ENV, "/x/c.toml"), ("HOME", "/home/u")]),
            Some(PathBuf::from("/x/c.toml"))
        );
        assert_eq!(
            path(&[("XDG_CONFIG_HOME", "/cfg"), ("HOME", "/home/u")]),
            Some(PathBuf::from("/cfg/gepa-lab/config.toml"))
        );
        assert_eq!(
            path(&[("XDG_CONFIG_HOME", "relative"), ("HOME", "/home/u")]),
            Some(PathBuf::from("/home/u/.config/gepa-lab/config.toml"))
        );
        assert_eq!(
            path(&[(CONFIG_ENV, ""), ("HOME", "/home/u")]),
            Some(PathBuf::from("/home/u/.config/gepa-lab/config.toml"))
        );
        assert!(matches!(
            config_path_from(env(&[])),
            Err(ConfigError::NoLocation)
        ));
    }

    #[test]
    fn services_are_filed_by_normalised_url() {
        assert_eq!(
            service_id("HTTPS://Inference.Dria.co/"),
            "https://inference.dria.co"
        );
        assert_eq!(service_id("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
        let config = sample();
        assert!(config.service("http://127.0.0.1:8080").is_some());
        assert!(config.service("https://inference.dria.co").is_none());
    }

    #[test]
    fn saves_private_and_loads_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new").join("config.toml");
        let config = sample();
        config.save(&path).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
            let dir_mode = std::fs::metadata(path.parent().unwrap())
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(dir_mode & 0o077, 0);
        }
        assert_eq!(UserConfig::load(&path).unwrap(), config);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# gepa-lab"), "{text}");
        assert!(
            text.contains("[services.\"http://127.0.0.1:8080\"]"),
            "{text}"
        );
        assert!(text.contains("rpm_limit = 60"), "{text}");
        // Saving again replaces the file whole.
        let mut changed = config.clone();
        changed.service_mut("http://127.0.0.1:8080").tier = Some("paid".into());
        changed.save(&path).unwrap();
        assert_eq!(UserConfig::load(&path).unwrap(), changed);
    }

    #[test]
    fn providers_are_kept_when_the_file_is_saved() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let text = "[providers.ollama]\nurl = \"http://127.0.0.1:11434/v1\"\nrpm = 60\n";
        let mut config = UserConfig::parse(text, &path).unwrap();
        assert!(config.providers.contains_key("ollama"));
        config.service_mut("http://127.0.0.1:8080").tier = Some("free".into());
        config.save(&path).unwrap();
        let saved = std::fs::read_to_string(&path).unwrap();
        assert!(
            saved.contains("[providers.ollama]") && saved.contains("rpm = 60"),
            "{saved}"
        );
        assert_eq!(UserConfig::load(&path).unwrap(), config);
    }

    #[test]
    fn a_missing_file_is_an_empty_config() {
        let dir = tempfile::tempdir().unwrap();
        let config = UserConfig::load(&dir.path().join("absent.toml")).unwrap();
        assert!(config.services.is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn a_file_others_may_read_is_refused_naming_file_and_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        sample().save(&path).unwrap();
        for mode in [0o644, 0o640, 0o604, 0o620] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = UserConfig::load(&path).unwrap_err();
            let message = err.to_string();
            assert!(matches!(err, ConfigError::TooOpen { .. }), "{message}");
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(message.contains(&format!("{mode:04o}")), "{message}");
        }
    }

    #[test]
    fn bad_files_are_named_without_quoting_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        for (text, expected) in [
            (format!("[services.\"http://x\"]\nkey = {KEY}\n"), "line 2"),
            (
                "[services.\"http://x\"]\nrpm-limit = 5\n".to_string(),
                "rpm-limit",
            ),
            (
                "[services.\"http://x\"]\npay_to = \"0x12\"\n".to_string(),
                "pay_to",
            ),
            (
                "[services.\"http://x\"]\nrpm_limit = 0\n".to_string(),
                "at least 1",
            ),
            (
                format!("[services.\"http://x\"]\nrpm_limit = \"{KEY}\"\n"),
                "line 2",
            ),
        ] {
            let err = UserConfig::parse(&text, &path).unwrap_err();
            let message = err.to_string();
            assert!(message.contains(expected), "{message}");
            assert!(message.contains("config.toml"), "{message}");
            assert!(!message.contains(KEY), "{message}");
        }
    }

    #[test]
    fn debug_never_shows_a_key() {
        assert!(!format!("{:?}", sample()).contains(KEY));
    }
}
