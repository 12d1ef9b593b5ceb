//! The server's SQLite state: API keys with their rpm limits, usage counts per key, the account
//! tables (read and written by `account_db`) and the tables of the evolution half (by
//! `evolution_store`). Every table is made by `MIGRATIONS`, the one ordered list of the schema.
//!
//! The schema grows by appending statements to `MIGRATIONS`; `PRAGMA user_version` records how
//! many have run, so a database made by an older build is brought up to date on open. Keys are
//! stored as SHA-256 hashes: a copied database file gives no usable key.
use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

use gepa_lab_http::Secret;

/// Schema changes, oldest first. Never edit one that has shipped; append a new one.
const MIGRATIONS: &[&str] = &[
    // 1: keys and their usage.
    "CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        key_hash TEXT NOT NULL UNIQUE,
        tier TEXT NOT NULL,
        rpm_limit INTEGER NOT NULL CHECK (rpm_limit > 0),
        created_at INTEGER NOT NULL
    );
    CREATE TABLE usage (
        key_id TEXT PRIMARY KEY REFERENCES api_keys(id),
        requests INTEGER NOT NULL DEFAULT 0,
        rate_limited INTEGER NOT NULL DEFAULT 0,
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0
    );",
    // 2: credit accounts, payments, login signatures, channel messages (`account_db`).
    "
    CREATE TABLE accounts (
        id TEXT PRIMARY KEY,
        address TEXT UNIQUE,
        balance INTEGER NOT NULL DEFAULT 0 CHECK (balance >= 0),
        metered INTEGER NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE key_accounts (
        key_id TEXT PRIMARY KEY REFERENCES api_keys(id),
        account_id TEXT NOT NULL REFERENCES accounts(id)
    );
    CREATE TABLE login_signatures (
        signature TEXT PRIMARY KEY,
        used_at INTEGER NOT NULL
    );
    CREATE TABLE payments (
        nonce TEXT PRIMARY KEY,
        account_id TEXT NOT NULL REFERENCES accounts(id),
        payer TEXT NOT NULL,
        value TEXT NOT NULL,
        credits INTEGER NOT NULL,
        tx_hash TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE channel_messages (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        channel TEXT NOT NULL,
        author TEXT NOT NULL,
        author_name TEXT NOT NULL,
        author_type TEXT NOT NULL,
        avatar TEXT,
        content TEXT NOT NULL,
        created_at_ms INTEGER NOT NULL
    );
    CREATE INDEX channel_messages_by_time ON channel_messages (channel, created_at_ms);
",
    // 3: evolution executions in creation order (`seq`), their history, and batch jobs
    // (`evolution_store`). The request is kept whole so a queued execution can be run after a
    // restart.
    "CREATE TABLE evolution_executions (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        evolution_id TEXT NOT NULL UNIQUE,
        owner TEXT,
        custom_id TEXT,
        request TEXT NOT NULL,
        seed INTEGER NOT NULL,
        status TEXT NOT NULL,
        current_prompt TEXT,
        current_score REAL,
        current_generation REAL,
        error TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE TABLE evolution_history (
        evolution_id TEXT NOT NULL REFERENCES evolution_executions(evolution_id),
        generation INTEGER NOT NULL,
        score REAL NOT NULL,
        prompt TEXT NOT NULL,
        PRIMARY KEY (evolution_id, generation)
    );
    CREATE TABLE batch_jobs (
        file_id TEXT PRIMARY KEY,
        key_id TEXT NOT NULL REFERENCES api_keys(id),
        status TEXT NOT NULL,
        created_at TEXT NOT NULL,
        task_count INTEGER NOT NULL,
        error_message TEXT,
        result_url TEXT
    );",
    // 4: calls an execution has spent, which the engine knows and the API shows as `budgetUsed`.
    "ALTER TABLE evolution_executions ADD COLUMN budget_used INTEGER;",
    // 5: what each iteration of an execution did (`GET .../iterations`), and every paid call's
    // result, the checkpoint an interrupted execution continues from (`local::journal`).
    "CREATE TABLE evolution_iterations (
        evolution_id TEXT NOT NULL REFERENCES evolution_executions(evolution_id),
        iteration INTEGER NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (evolution_id, iteration)
    );
    CREATE TABLE evolution_calls (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        evolution_id TEXT NOT NULL REFERENCES evolution_executions(evolution_id),
        call TEXT NOT NULL
    );
    CREATE INDEX evolution_calls_by_execution ON evolution_calls (evolution_id, seq);",
    // 6: each candidate's score per Pareto row (a JSON array), for the report's lineage.
    "ALTER TABLE evolution_history ADD COLUMN pareto_scores TEXT;",
    // 7: each candidate's mean costs per answer on its Pareto rows (a JSON object), which
    // `[objectives]` weigh.
    "ALTER TABLE evolution_history ADD COLUMN costs TEXT;",
];

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("database {path}: {error}")]
    Open {
        path: String,
        error: rusqlite::Error,
    },
    #[error("database: {0}")]
    Sql(rusqlite::Error),
    #[error("database: a worker thread stopped: {0}")]
    Worker(String),
}

// By hand rather than `#[from]`, which would make the error a `source` as well as part of the
// message, and a report of the chain would say it twice.
impl From<rusqlite::Error> for DbError {
    fn from(error: rusqlite::Error) -> Self {
        Self::Sql(error)
    }
}

/// A key as the server knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    pub id: String,
    pub tier: String,
    pub rpm_limit: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UsageRow {
    pub requests: u64,
    pub rate_limited: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// Shared handle to the database. Calls run on tokio's blocking pool, one at a time.
#[derive(Clone)]
pub struct Db {
    conn: Arc<Mutex<Connection>>,
}

impl Db {
    pub fn open(path: &Path) -> Result<Db, DbError> {
        let open_error = |source| DbError::Open {
            path: path.display().to_string(),
            error: source,
        };
        let mut conn = Connection::open(path).map_err(open_error)?;
        // WAL lets a reader (an operator's sqlite3 shell, a test) look while the server writes.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(open_error)?;
        // In WAL mode NORMAL still survives a crash of the process; only a power cut can lose
        // the last few usage increments, and it saves an fsync per request.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(open_error)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(open_error)?;
        migrate(&mut conn).map_err(open_error)?;
        Ok(Db {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    pub(crate) async fn call<T, F>(&self, f: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            // A panic in another call cannot leave a half-done write (SQLite rolls it back),
            // so a poisoned lock is safe to take over.
            let conn = conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            f(&conn)
        })
        .await
        .map_err(|e| DbError::Worker(e.to_string()))?
        .map_err(DbError::Sql)
    }

    /// Adds `key`, or changes its rpm limit if it exists. Returns its id.
    pub async fn upsert_key(&self, key: &Secret, rpm_limit: u32) -> Result<String, DbError> {
        let hash = key_hash(key);
        let id = format!("key-{}", &hash[..12]);
        let id_out = id.clone();
        self.call(move |conn| {
            conn.execute(
                "INSERT INTO api_keys (id, key_hash, tier, rpm_limit, created_at)
                 VALUES (?1, ?2, 'local', ?3, unixepoch())
                 ON CONFLICT(key_hash) DO UPDATE SET rpm_limit = excluded.rpm_limit",
                params![id, hash, rpm_limit],
            )?;
            conn.execute(
                "INSERT OR IGNORE INTO usage (key_id) VALUES (?1)",
                params![id],
            )?;
            Ok(())
        })
        .await?;
        Ok(id_out)
    }

    pub async fn find_key(&self, key: &Secret) -> Result<Option<KeyRecord>, DbError> {
        let hash = key_hash(key);
        self.call(move |conn| {
            conn.query_row(
                "SELECT id, tier, rpm_limit FROM api_keys WHERE key_hash = ?1",
                params![hash],
                |row| {
                    Ok(KeyRecord {
                        id: row.get(0)?,
                        tier: row.get(1)?,
                        rpm_limit: row.get(2)?,
                    })
                },
            )
            .optional()
        })
        .await
    }

    pub async fn count_keys(&self) -> Result<u64, DbError> {
        self.call(|conn| conn.query_row("SELECT COUNT(*) FROM api_keys", [], |row| row.get(0)))
            .await
    }

    /// Adds `delta` to the key's counters.
    pub async fn add_usage(&self, key_id: &str, delta: UsageRow) -> Result<(), DbError> {
        let key_id = key_id.to_owned();
        self.call(move |conn| {
            conn.execute(
                "INSERT INTO usage (key_id, requests, rate_limited, prompt_tokens, completion_tokens)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(key_id) DO UPDATE SET
                   requests = requests + excluded.requests,
                   rate_limited = rate_limited + excluded.rate_limited,
                   prompt_tokens = prompt_tokens + excluded.prompt_tokens,
                   completion_tokens = completion_tokens + excluded.completion_tokens",
                params![
                    key_id,
                    delta.requests,
                    delta.rate_limited,
                    delta.prompt_tokens,
                    delta.completion_tokens
                ],
            )?;
            Ok(())
        })
        .await
    }

    pub async fn usage(&self, key_id: &str) -> Result<UsageRow, DbError> {
        let key_id = key_id.to_owned();
        self.call(move |conn| {
            conn.query_row(
                "SELECT requests, rate_limited, prompt_tokens, completion_tokens
                 FROM usage WHERE key_id = ?1",
                params![key_id],
                |row| {
                    Ok(UsageRow {
                        requests: row.get(0)?,
                        rate_limited: row.get(1)?,
                        prompt_tokens: row.get(2)?,
                        completion_tokens: row.get(3)?,
                    })
                },
            )
            .optional()
            .map(Option::unwrap_or_default)
        })
        .await
    }
}

/// Hex SHA-256 of a key: how keys are stored and looked up.
pub fn key_hash(key: &Secret) -> String {
    Sha256::digest(key.expose().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let done: usize = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if done >= MIGRATIONS.len() {
        return Ok(());
    }
    let tx = conn.transaction()?;
    for statement in &MIGRATIONS[done..] {
        tx.execute_batch(statement)?;
    }
    tx.pragma_update(None, "user_version", MIGRATIONS.len())?;
    tx.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keys_are_stored_hashed_and_found_by_value() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.sqlite3");
        let db = Db::open(&path).unwrap();
        let key = Secret::new("dkn_live_test_key");
        let id = db.upsert_key(&key, 30).await.unwrap();
        let again = db.upsert_key(&key, 60).await.unwrap();
        assert_eq!(id, again);
        let found = db.find_key(&key).await.unwrap().unwrap();
        assert_eq!(found.rpm_limit, 60);
        assert_eq!(db.find_key(&Secret::new("other")).await.unwrap(), None);
        assert_eq!(db.count_keys().await.unwrap(), 1);
        drop(db);
        let raw = std::fs::read(&path).unwrap();
        let needle = b"dkn_live_test_key";
        assert!(!raw.windows(needle.len()).any(|w| w == needle));
    }

    #[tokio::test]
    async fn usage_adds_up_and_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.sqlite3");
        let id = {
            let db = Db::open(&path).unwrap();
            let id = db.upsert_key(&Secret::new("k"), 5).await.unwrap();
            let one = UsageRow {
                requests: 1,
                prompt_tokens: 10,
                ..UsageRow::default()
            };
            db.add_usage(&id, one).await.unwrap();
            db.add_usage(&id, one).await.unwrap();
            id
        };
        let db = Db::open(&path).unwrap();
        let usage = db.usage(&id).await.unwrap();
        assert_eq!(usage.requests, 2);
        assert_eq!(usage.prompt_tokens, 20);
    }

    #[test]
    fn migrations_run_once_and_set_the_version() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        migrate(&mut conn).unwrap();
        let version: usize = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .unwrap();
        assert_eq!(version, MIGRATIONS.len());
    }
}
