//! The server's account state in SQLite: credit accounts and which keys draw on them, used
//! login signatures, payments (whose unique nonce is the replay guard), and channel messages.
//!
//! A wallet's keys share one account, keyed by the wallet address; a key given with
//! `--api-key` gets an unmetered account of its own, keyed by the key's id, on first use.
use rusqlite::{OptionalExtension, Transaction, params};

use super::db::{Db, DbError, key_hash};
use gepa_lab_http::Secret;

/// The credit account a key draws on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountRow {
    pub id: String,
    /// The wallet, for keys issued by `/v1/auth/wallet`.
    pub address: Option<String>,
    pub balance: i64,
    /// Whether chat requests debit it.
    pub metered: bool,
}

/// A new wallet key and what it is registered with.
pub struct NewWalletKey<'a> {
    pub address: &'a str,
    pub key: &'a Secret,
    pub tier: &'a str,
    pub rpm_limit: u32,
    /// Credits a wallet gets when it registers for the first time.
    pub free_credits: i64,
}

/// A payment to record and credit.
pub struct NewPayment {
    pub account_id: String,
    pub nonce: String,
    pub payer: String,
    pub value: String,
    pub credits: i64,
    pub tx_hash: String,
}

/// A message to store; its time is assigned on insert.
pub struct NewMessage {
    pub id: String,
    pub channel: String,
    pub author: String,
    pub author_name: String,
    pub avatar: Option<String>,
    pub content: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    pub id: String,
    pub channel: String,
    pub author: String,
    pub author_name: String,
    pub author_type: String,
    pub content: String,
    pub created_at_ms: i64,
}

/// A page request; cursors in microseconds since the epoch, both exclusive.
#[derive(Debug, Clone, Copy)]
pub struct MessageRange<'a> {
    pub channel: &'a str,
    pub before_us: Option<i64>,
    pub after_us: Option<i64>,
    pub limit: u32,
}

impl Db {
    /// `call` inside one transaction, committed when `f` succeeds and rolled back otherwise.
    async fn in_transaction<T, F>(&self, f: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> rusqlite::Result<T> + Send + 'static,
    {
        self.call(move |conn| {
            let tx = conn.unchecked_transaction()?;
            let out = f(&tx)?;
            tx.commit()?;
            Ok(out)
        })
        .await
    }

    /// Stores a new key for `address`, creating the wallet's account (with the free credits)
    /// if this is its first key. Returns the key's id.
    pub async fn register_wallet_key(&self, new: NewWalletKey<'_>) -> Result<String, DbError> {
        let hash = key_hash(new.key);
        let key_id = format!("key-{}", &hash[..12]);
        let (address, tier, rpm, free) = (
            new.address.to_string(),
            new.tier.to_string(),
            new.rpm_limit,
            new.free_credits,
        );
        let id = key_id.clone();
        self.in_transaction(move |tx| {
            tx.execute(
                "INSERT INTO api_keys (id, key_hash, tier, rpm_limit, created_at)
                 VALUES (?1, ?2, ?3, ?4, unixepoch())",
                params![id, hash, tier, rpm],
            )?;
            tx.execute(
                "INSERT OR IGNORE INTO usage (key_id) VALUES (?1)",
                params![id],
            )?;
            tx.execute(
                "INSERT OR IGNORE INTO accounts (id, address, balance, metered, created_at)
                 VALUES (?1, ?1, ?2, 1, unixepoch())",
                params![address, free],
            )?;
            tx.execute(
                "INSERT INTO key_accounts (key_id, account_id) VALUES (?1, ?2)",
                params![id, address],
            )?;
            Ok(())
        })
        .await?;
        Ok(key_id)
    }

    /// Records a login signature as used; `false` if it was used before. Signatures older than
    /// `forget_before` (unix seconds) are dropped: their timestamps are outside the window.
    pub async fn use_login_signature(
        &self,
        signature: String,
        now: i64,
        forget_before: i64,
    ) -> Result<bool, DbError> {
        self.in_transaction(move |tx| {
            tx.execute(
                "DELETE FROM login_signatures WHERE used_at < ?1",
                params![forget_before],
            )?;
            let inserted = tx.execute(
                "INSERT OR IGNORE INTO login_signatures (signature, used_at) VALUES (?1, ?2)",
                params![signature, now],
            )?;
            Ok(inserted == 1)
        })
        .await
    }

    /// The account `key_id` draws on; a key without one (from `--api-key`) gets an unmetered
    /// account of its own.
    pub async fn account_of_key(&self, key_id: &str) -> Result<AccountRow, DbError> {
        let key_id = key_id.to_string();
        self.in_transaction(move |tx| account_of_key(tx, &key_id))
            .await
    }

    /// Records the payment and credits its account, atomically. `None` if the nonce was used
    /// before: nothing is credited twice for one authorization.
    pub async fn credit_payment(&self, payment: NewPayment) -> Result<Option<i64>, DbError> {
        self.in_transaction(move |tx| {
            let inserted = tx.execute(
                "INSERT OR IGNORE INTO payments
                   (nonce, account_id, payer, value, credits, tx_hash, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, unixepoch())",
                params![
                    payment.nonce,
                    payment.account_id,
                    payment.payer,
                    payment.value,
                    payment.credits,
                    payment.tx_hash
                ],
            )?;
            if inserted == 0 {
                return Ok(None);
            }
            tx.query_row(
                "UPDATE accounts SET balance = balance + ?2 WHERE id = ?1 RETURNING balance",
                params![payment.account_id, payment.credits],
                |row| row.get(0),
            )
            .map(Some)
        })
        .await
    }

    /// Takes up to `credits` from the account; the balance stops at 0. Returns the new balance.
    pub async fn debit(&self, account_id: &str, credits: i64) -> Result<i64, DbError> {
        let account_id = account_id.to_string();
        self.in_transaction(move |tx| {
            tx.query_row(
                "UPDATE accounts SET balance = MAX(0, balance - ?2) WHERE id = ?1
                 RETURNING balance",
                params![account_id, credits],
                |row| row.get(0),
            )
        })
        .await
    }

    /// Stores a message stamped `now_ms`, or 1 ms after the newest message if that is not
    /// later: timestamps are unique and increasing, so timestamp cursors never skip or repeat
    /// a message.
    pub async fn insert_message(
        &self,
        message: NewMessage,
        author_type: &'static str,
        now_ms: i64,
    ) -> Result<StoredMessage, DbError> {
        self.in_transaction(move |tx| {
            let newest: Option<i64> = tx.query_row(
                "SELECT MAX(created_at_ms) FROM channel_messages",
                [],
                |row| row.get(0),
            )?;
            let created_at_ms = newest.map_or(now_ms, |newest| now_ms.max(newest + 1));
            tx.execute(
                "INSERT INTO channel_messages
                   (id, channel, author, author_name, author_type, avatar, content, created_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    message.id,
                    message.channel,
                    message.author,
                    message.author_name,
                    author_type,
                    message.avatar,
                    message.content,
                    created_at_ms
                ],
            )?;
            Ok(StoredMessage {
                id: message.id,
                channel: message.channel,
                author: message.author,
                author_name: message.author_name,
                author_type: author_type.to_string(),
                content: message.content,
                created_at_ms,
            })
        })
        .await
    }

    /// Up to `limit` messages of the channel inside the cursors, newest first.
    pub async fn messages(&self, range: MessageRange<'_>) -> Result<Vec<StoredMessage>, DbError> {
        let channel = range.channel.to_string();
        let (before, after, limit) = (range.before_us, range.after_us, range.limit);
        self.in_transaction(move |tx| {
            let mut statement = tx.prepare(
                "SELECT id, channel, author, author_name, author_type, content, created_at_ms
                 FROM channel_messages
                 WHERE channel = ?1
                   AND (?2 IS NULL OR created_at_ms * 1000 < ?2)
                   AND (?3 IS NULL OR created_at_ms * 1000 > ?3)
                 ORDER BY created_at_ms DESC, seq DESC
                 LIMIT ?4",
            )?;
            let rows = statement.query_map(params![channel, before, after, limit], |row| {
                Ok(StoredMessage {
                    id: row.get(0)?,
                    channel: row.get(1)?,
                    author: row.get(2)?,
                    author_name: row.get(3)?,
                    author_type: row.get(4)?,
                    content: row.get(5)?,
                    created_at_ms: row.get(6)?,
                })
            })?;
            rows.collect()
        })
        .await
    }
}

fn account_of_key(tx: &Transaction<'_>, key_id: &str) -> rusqlite::Result<AccountRow> {
    let linked: Option<String> = tx
        .query_row(
            "SELECT account_id FROM key_accounts WHERE key_id = ?1",
            params![key_id],
            |row| row.get(0),
        )
        .optional()?;
    let account_id = match linked {
        Some(id) => id,
        None => {
            tx.execute(
                "INSERT OR IGNORE INTO accounts (id, address, balance, metered, created_at)
                 VALUES (?1, NULL, 0, 0, unixepoch())",
                params![key_id],
            )?;
            tx.execute(
                "INSERT INTO key_accounts (key_id, account_id) VALUES (?1, ?1)",
                params![key_id],
            )?;
            key_id.to_string()
        }
    };
    tx.query_row(
        "SELECT id, address, balance, metered FROM accounts WHERE id = ?1",
        params![account_id],
        |row| {
            Ok(AccountRow {
                id: row.get(0)?,
                address: row.get(1)?,
                balance: row.get(2)?,
                metered: row.get(3)?,
            })
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn db() -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("s.sqlite3")).unwrap();
        (dir, db)
    }

    fn wallet_key<'a>(address: &'a str, key: &'a Secret) -> NewWalletKey<'a> {
        NewWalletKey {
            address,
            key,
            tier: "free",
            rpm_limit: 60,
            free_credits: 100,
        }
    }

    #[tokio::test]
    async fn a_wallet_gets_free_credits_once_and_its_keys_share_them() {
        let (_dir, db) = db().await;
        let (one, two) = (Secret::new("dkn_live_1"), Secret::new("dkn_live_2"));
        let first = db
            .register_wallet_key(wallet_key("0xA", &one))
            .await
            .unwrap();
        let second = db
            .register_wallet_key(wallet_key("0xA", &two))
            .await
            .unwrap();
        assert_ne!(first, second);
        assert_eq!(db.debit("0xA", 30).await.unwrap(), 70);
        let account = db.account_of_key(&second).await.unwrap();
        assert_eq!(account.balance, 70);
        assert!(account.metered);
        assert_eq!(account.address.as_deref(), Some("0xA"));
        assert_eq!(db.debit("0xA", 500).await.unwrap(), 0);
        assert_eq!(db.find_key(&one).await.unwrap().unwrap().tier, "free");
    }

    #[tokio::test]
    async fn configured_keys_get_an_unmetered_account_of_their_own() {
        let (_dir, db) = db().await;
        let id = db.upsert_key(&Secret::new("k"), 60).await.unwrap();
        let account = db.account_of_key(&id).await.unwrap();
        assert_eq!(account.id, id);
        assert_eq!((account.balance, account.metered), (0, false));
        assert_eq!(db.account_of_key(&id).await.unwrap(), account);
    }

    #[tokio::test]
    async fn a_nonce_credits_once() {
        let (_dir, db) = db().await;
        let id = db.upsert_key(&Secret::new("k"), 60).await.unwrap();
        let account = db.account_of_key(&id).await.unwrap();
        let payment = |nonce: &str| NewPayment {
            account_id: account.id.clone(),
            nonce: nonce.into(),
            payer: "0xB".into(),
            value: "1000000".into(),
            credits: 100,
            tx_hash: format!("0x{nonce}"),
        };
        assert_eq!(db.credit_payment(payment("01")).await.unwrap(), Some(100));
        assert_eq!(db.credit_payment(payment("01")).await.unwrap(), None);
        assert_eq!(db.credit_payment(payment("02")).await.unwrap(), Some(200));
    }

    #[tokio::test]
    async fn login_signatures_are_single_use() {
        let (_dir, db) = db().await;
        assert!(db.use_login_signature("s".into(), 1000, 400).await.unwrap());
        assert!(!db.use_login_signature("s".into(), 1001, 401).await.unwrap());
        // Once forgotten (outside any window), it could be stored again.
        assert!(
            db.use_login_signature("s".into(), 2000, 1500)
                .await
                .unwrap()
        );
    }

    #[tokio::test]
    async fn message_times_are_unique_and_pages_are_newest_first() {
        let (_dir, db) = db().await;
        let message = |id: &str, channel: &str| NewMessage {
            id: id.into(),
            channel: channel.into(),
            author: "0xA".into(),
            author_name: "a".into(),
            avatar: None,
            content: id.into(),
        };
        for id in ["m1", "m2", "m3"] {
            db.insert_message(message(id, "general"), "api", 5_000)
                .await
                .unwrap();
        }
        db.insert_message(message("r1", "requests"), "api", 1_000)
            .await
            .unwrap();
        let page = |before_us, after_us, limit| {
            db.messages(MessageRange {
                channel: "general",
                before_us,
                after_us,
                limit,
            })
        };
        let all = page(None, None, 10).await.unwrap();
        let ids: Vec<_> = all.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["m3", "m2", "m1"]);
        let times: Vec<_> = all.iter().map(|m| m.created_at_ms).collect();
        assert_eq!(times, [5_002, 5_001, 5_000]);
        let ids = |page: Vec<StoredMessage>| page.into_iter().map(|m| m.id).collect::<Vec<_>>();
        assert_eq!(
            ids(page(Some(5_002_000), None, 10).await.unwrap()),
            ["m2", "m1"]
        );
        assert_eq!(
            ids(page(None, Some(5_000_000), 10).await.unwrap()),
            ["m3", "m2"]
        );
        assert_eq!(ids(page(None, Some(4_999_999), 1).await.unwrap()), ["m3"]);
        assert_eq!(
            ids(page(Some(5_002_000), Some(5_000_000), 10).await.unwrap()),
            ["m2"]
        );
    }
}
