//! Where the wallet's private key comes from, for the subcommands that sign (`auth wallet`,
//! `credits topup`). Never from a flag's value: a command line is visible to other users.
use std::path::PathBuf;

use crate::wallet::{PrivateKey, WalletError};

pub const WALLET_KEY_ENV: &str = crate::env::WALLET_KEY;

#[derive(Debug, clap::Args)]
pub struct WalletArgs {
    /// File holding the wallet's private key (64 hex digits), readable only by its owner
    /// (chmod 600). Without it, the key is read from the environment variable
    /// GEPA_LAB_WALLET_KEY.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
}

impl WalletArgs {
    pub fn load(&self) -> Result<PrivateKey, WalletError> {
        match &self.key_file {
            Some(path) => PrivateKey::from_file(path),
            None => PrivateKey::from_env(WALLET_KEY_ENV),
        }
    }
}
