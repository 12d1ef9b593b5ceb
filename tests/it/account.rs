//! The account half of the inference API: `auth wallet`, `credits`, `channel` and the config
//! file, run as the real binary and through `AccountClient` against `serve`, plus top-up
//! refusals against a small fake service that asks for the wrong things.
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gepa_lab::account::channel::format_timestamp;
use gepa_lab::account::wire::{
    ApiKeyGrant, ChannelMessage, PaymentRequirements, PostMessage, SettlementResponse, TopupResult,
};
use gepa_lab::account::{
    AccountClient, AccountConfig, AccountError, Channel, PaymentPolicy, ReadQuery, UserConfig,
    check_requirements, created_at, login_message,
};
use gepa_lab::http::{RetryPolicy, Secret};
use gepa_lab::inference::{ChatMessage, ChatRequest, Inference, InferenceError};
use gepa_lab::wallet::{
    Eip712Domain, Network, PaymentPayload, PrivateKey, TransferWithAuthorization, random_nonce,
};
use serde_json::json;

use crate::common::{Serve, raw};

/// The "hello world" key of the signing vectors, and its address.
const WALLET_KEY: &str = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
const WALLET: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
/// The "Some data" key: a second wallet.
const OTHER_KEY: &str = "4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318";
const RECEIVER: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const USDC_BASE: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
const USDC_BASE_SEPOLIA: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
const API_KEY: &str = "dkn_live_account_tests";

/// A user of the CLI with a config file of their own and the test wallet in the environment.
struct User {
    _dir: tempfile::TempDir,
    config: PathBuf,
    url: String,
}

impl User {
    fn new(url: &str) -> User {
        let dir = tempfile::tempdir().expect("temp dir");
        User {
            config: dir.path().join("gepa-lab").join("config.toml"),
            _dir: dir,
            url: url.to_owned(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = crate::common::command();
        command
            .args(args)
            .env("GEPA_LAB_INFERENCE_URL", &self.url)
            .env("GEPA_LAB_CONFIG", &self.config)
            .env("GEPA_LAB_WALLET_KEY", WALLET_KEY)
            .env_remove("XDG_CONFIG_HOME");
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run gepa-lab")
    }

    fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = self.command(args);
        for (name, value) in env {
            command.env(name, value);
        }
        command.output().expect("run gepa-lab")
    }

    fn stored(&self) -> UserConfig {
        UserConfig::load(&self.config).expect("config loads")
    }

    /// The config file holds keys: only its owner may read it.
    fn assert_private(&self) {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&self.config)
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    fn key(&self) -> String {
        let config = self.stored();
        let account = config.service(&self.url).expect("a stored account");
        account
            .key
            .as_ref()
            .expect("a stored key")
            .expose()
            .to_owned()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        text(&output.stdout),
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// The credits of a `balance: N credits (X USDC)` line.
fn balance_in(stdout: &str) -> i64 {
    let line = stdout
        .lines()
        .find(|line| line.starts_with("balance: "))
        .unwrap_or_else(|| panic!("no balance line in {stdout}"));
    line["balance: ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number in {line}"))
}

fn account_client(url: &str, key: &str) -> AccountClient {
    let mut config = AccountConfig::new(url, Some(Secret::new(key)));
    config.retry = RetryPolicy {
        base_delay: Duration::from_millis(20),
        ..RetryPolicy::default()
    };
    AccountClient::new(config).expect("client")
}

fn now() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp()).expect("after 1970")
}

#[test]
fn wallet_key_chat_balance_topup_round_trip() {
    let serve = Serve::start_with(
        &["sim:model=m"],
        &[],
        &[
            "--pay-to",
            RECEIVER,
            "--free-credits",
            "50",
            "--tokens-per-credit",
            "10",
            "--wallet-rpm",
            "600",
        ],
    );
    let user = User::new(&serve.url);

    let out = user.run(&["auth", "wallet"]);
    let stdout = ok(&out);
    assert!(
        stdout.contains(&format!("registered wallet {WALLET}")),
        "{stdout}"
    );
    assert!(stdout.contains("tier: free"), "{stdout}");
    assert!(stdout.contains("rpmLimit: 600"), "{stdout}");
    assert!(!stdout.contains("dkn_live_") && !text(&out.stderr).contains("dkn_live_"));
    user.assert_private();
    let key = user.key();
    assert!(
        key.starts_with("dkn_live_"),
        "issued keys carry the live prefix"
    );
    let stored = user.stored();
    let account = stored.service(&serve.url).unwrap();
    assert_eq!(account.rpm_limit.map(|r| r.get()), Some(600));
    assert_eq!(
        account.address.map(|a| a.to_string()).as_deref(),
        Some(WALLET)
    );

    // `chat` finds the stored key itself; the same request through the library tells the
    // price, since the simulated model answers it identically.
    let question = "Is the sky blue?\nAnswer with one of: yes, no";
    ok(&user.run(&["chat", "--model", "m", question]));
    let answer = block_on(
        serve
            .client(Some(&key))
            .chat(&ChatRequest::new("m", vec![ChatMessage::user(question)])),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let tokens = answer.usage.expect("usage").total_tokens;
    let cost = i64::try_from(tokens.div_ceil(10).max(1)).unwrap();
    let after_chat = balance_in(&ok(&user.run(&["credits", "balance"])));
    assert_eq!(after_chat, 50 - 2 * cost);

    // The first top-up needs the receiver confirmed; then it is remembered.
    let out = user.run(&["credits", "topup", "2.5", "--max-usdc", "5"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("no receiver is confirmed"), "{stderr}");
    assert!(stderr.contains(&format!("--pay-to {RECEIVER}")), "{stderr}");

    let stdout = ok(&user.run(&[
        "credits",
        "topup",
        "2.5",
        "--max-usdc",
        "5",
        "--pay-to",
        RECEIVER,
    ]));
    assert!(stdout.contains("credits added: 250"), "{stdout}");
    assert_eq!(balance_in(&stdout), after_chat + 250);
    assert!(stdout.contains("transaction: 0x"), "{stdout}");
    assert!(
        stdout.contains("settlement: success, network local"),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("payer {WALLET}")), "{stdout}");
    let stored = user.stored();
    let pay_to = stored.service(&serve.url).and_then(|a| a.pay_to);
    assert_eq!(pay_to.map(|a| a.to_string()).as_deref(), Some(RECEIVER));

    let stdout = ok(&user.run(&["credits", "topup", "0.01", "--max-usdc", "1"]));
    assert!(stdout.contains("credits added: 1"), "{stdout}");
    let final_balance = balance_in(&ok(&user.run(&["credits", "balance"])));
    assert_eq!(final_balance, after_chat + 251);
    let usdc = format!("{}.{:02}", final_balance / 100, final_balance % 100);
    assert!(
        ok(&user.run(&["credits", "balance"])).contains(&format!("({usdc} USDC)")),
        "balance_usdc has two fraction digits"
    );

    let conn = rusqlite::Connection::open(&serve.db).unwrap();
    let payments: i64 = conn
        .query_row("SELECT COUNT(*) FROM payments", [], |row| row.get(0))
        .unwrap();
    assert_eq!(payments, 2);
    let raw_db = std::fs::read(&serve.db).unwrap();
    assert!(
        !raw_db.windows(key.len()).any(|w| w == key.as_bytes()),
        "keys are stored hashed"
    );
}

/// Runs a future to completion from a plain (non-async) test, which runs the binary.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

/// A stand-in inference service whose top-up asks for whatever the test says, and counts the
/// requests it gets, paid or not.
struct FakeService {
    url: String,
    requests: Arc<AtomicUsize>,
    paid: Arc<AtomicUsize>,
    /// The `X-PAYMENT` header of each paid request, in order.
    payments: Arc<std::sync::Mutex<Vec<String>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeService {
    fn start(requirements: serde_json::Value) -> FakeService {
        FakeService::start_limiting(requirements, 0)
    }

    /// As `start`, and the first `limited` paid requests are answered 429 with
    /// `Retry-After: 1`, processing nothing.
    fn start_limiting(requirements: serde_json::Value, limited: usize) -> FakeService {
        use axum::http::{HeaderMap, StatusCode};
        use axum::response::IntoResponse;

        let requests = Arc::new(AtomicUsize::new(0));
        let paid = Arc::new(AtomicUsize::new(0));
        let payments = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (counted, paid_count, seen) = (
            Arc::clone(&requests),
            Arc::clone(&paid),
            Arc::clone(&payments),
        );
        let handler = move |headers: HeaderMap| {
            let (requirements, counted, paid_count, seen) = (
                requirements.clone(),
                Arc::clone(&counted),
                Arc::clone(&paid_count),
                Arc::clone(&seen),
            );
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                if let Some(payment) = headers.get("x-payment") {
                    let number = paid_count.fetch_add(1, Ordering::SeqCst);
                    seen.lock()
                        .unwrap()
                        .push(payment.to_str().unwrap_or_default().to_owned());
                    if number < limited {
                        return (
                            StatusCode::TOO_MANY_REQUESTS,
                            [("retry-after", "1")],
                            "slow down",
                        )
                            .into_response();
                    }
                    return axum::Json(json!({"credits_added": 1, "balance": 1,
                        "balance_usdc": "0.01", "txHash": "0x00"}))
                    .into_response();
                }
                (StatusCode::PAYMENT_REQUIRED, axum::Json(requirements)).into_response()
            }
        };
        let app = axum::Router::new().route("/v1/credits/topup", axum::routing::post(handler));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("non-blocking");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await
                    .expect("fake service");
            });
        });
        FakeService {
            url,
            requests,
            paid,
            payments,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for FakeService {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn documented_option() -> serde_json::Value {
    json!({
        "scheme": "exact",
        "network": "base",
        "maxAmountRequired": "10000000",
        "resource": "/v1/credits/topup",
        "payTo": RECEIVER,
        "asset": USDC_BASE,
        "maxTimeoutSeconds": 300,
        "extra": {"name": "USD Coin", "version": "2"}
    })
}

fn requirements_with(change: impl FnOnce(&mut serde_json::Value)) -> serde_json::Value {
    let mut option = documented_option();
    change(&mut option);
    json!({"x402Version": 1, "accepts": [option]})
}

/// `credits topup AMOUNT --max-usdc CAP --pay-to RECEIVER` against a fake service.
fn topup_against(fake: &FakeService, amount: &str, cap: &str) -> Output {
    let user = User::new(&fake.url);
    user.run_with(
        &[
            "credits",
            "topup",
            amount,
            "--max-usdc",
            cap,
            "--pay-to",
            RECEIVER,
        ],
        &[("GEPA_LAB_INFERENCE_KEY", "dkn_live_fake")],
    )
}

#[test]
fn a_paid_topup_answered_429_is_sent_again_as_signed_after_retry_after() {
    // Nothing was processed, so the same payment goes again; its nonce makes a replay harmless.
    let fake = FakeService::start_limiting(requirements_with(|_| {}), 1);
    let started = std::time::Instant::now();
    let out = topup_against(&fake, "10", "10");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(1),
        "Retry-After was waited"
    );
    let payments = fake.payments.lock().unwrap().clone();
    assert_eq!(payments.len(), 2, "one 429, then the same payment again");
    assert_eq!(
        payments[0], payments[1],
        "the signed payload is not signed anew"
    );
    assert_eq!(fake.paid.load(Ordering::SeqCst), 2);
}

#[test]
fn topup_refuses_each_wrong_requirement_without_signing() {
    let cases: Vec<(&str, serde_json::Value, &str)> = vec![
        (
            "scheme",
            requirements_with(|o| o["scheme"] = json!("upto")),
            "scheme is \"upto\"",
        ),
        (
            "network",
            requirements_with(|o| o["network"] = json!("base-sepolia")),
            "network is \"base-sepolia\"; expected \"base\"",
        ),
        (
            "asset",
            requirements_with(|o| o["asset"] = json!(USDC_BASE_SEPOLIA)),
            "asset is",
        ),
        (
            "amount",
            requirements_with(|o| o["maxAmountRequired"] = json!("10000001")),
            "maxAmountRequired is \"10000001\"; expected 10000000",
        ),
        (
            "payTo",
            requirements_with(|o| o["payTo"] = json!(WALLET)),
            "the confirmed receiver for this service is 0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
        ),
        (
            "version",
            json!({"x402Version": 2, "accepts": [documented_option()]}),
            "x402Version is 2",
        ),
        (
            "timeout",
            requirements_with(|o| o["maxTimeoutSeconds"] = json!(604_800)),
            "maxTimeoutSeconds is 604800",
        ),
    ];
    for (name, requirements, expected) in cases {
        let fake = FakeService::start(requirements);
        let out = topup_against(&fake, "10", "10");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(
            stderr.contains("payment refused, nothing was signed"),
            "{name}: {stderr}"
        );
        assert!(stderr.contains(expected), "{name}: {stderr}");
        assert_eq!(
            fake.requests.load(Ordering::SeqCst),
            1,
            "{name}: only the 402 request"
        );
        assert_eq!(fake.paid.load(Ordering::SeqCst), 0, "{name}: nothing paid");
    }

    // The documented requirements themselves are paid, once.
    let fake = FakeService::start(requirements_with(|_| {}));
    ok(&topup_against(&fake, "10", "10"));
    assert_eq!(fake.paid.load(Ordering::SeqCst), 1);
}

#[test]
fn topup_over_the_cap_contacts_nobody() {
    let fake = FakeService::start(requirements_with(|_| {}));
    let out = topup_against(&fake, "10", "9.999999");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("amount 10 USDC is above the cap --max-usdc 9.999999"),
        "{stderr}"
    );
    assert_eq!(fake.requests.load(Ordering::SeqCst), 0);

    // More than 6 fraction digits is not an amount at all: a usage error.
    let out = topup_against(&fake, "1.0000001", "10");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("7 fraction digits"));
    assert_eq!(fake.requests.load(Ordering::SeqCst), 0);
}

/// What a serve with a receiver and a configured key answers, step by step.
struct PaySetup {
    serve: Serve,
    wallet: PrivateKey,
    domain: Eip712Domain,
}

impl PaySetup {
    fn new() -> PaySetup {
        let serve = Serve::start_with(
            &["sim:model=m"],
            &[&format!("{API_KEY}:6000")],
            &["--pay-to", RECEIVER],
        );
        PaySetup {
            serve,
            wallet: PrivateKey::from_hex(OTHER_KEY).unwrap(),
            domain: Eip712Domain {
                name: "USD Coin".into(),
                version: "2".into(),
                chain_id: Network::Base.chain_id(),
                verifying_contract: Network::Base.usdc(),
            },
        }
    }

    fn authorization(&self, value: u128) -> TransferWithAuthorization {
        TransferWithAuthorization::for_payment(
            self.wallet.address(),
            RECEIVER.parse().unwrap(),
            value,
            now(),
            300,
            random_nonce().unwrap(),
        )
    }

    fn header(&self, authorization: TransferWithAuthorization) -> String {
        PaymentPayload::sign(&self.wallet, Network::Base, &self.domain, authorization)
            .unwrap()
            .to_header()
    }

    async fn send(&self, amount: &str, header: Option<&str>) -> reqwest::Response {
        let mut request = raw()
            .post(format!("{}/v1/credits/topup", self.serve.url))
            .bearer_auth(API_KEY)
            .json(&json!({ "amount": amount }));
        if let Some(header) = header {
            request = request.header("X-PAYMENT", header);
        }
        request.send().await.unwrap()
    }

    async fn balance(&self) -> i64 {
        account_client(&self.serve.url, API_KEY)
            .balance()
            .await
            .unwrap()
            .balance
    }
}

#[tokio::test]
async fn serve_asks_for_the_documented_requirements_and_rejects_a_replayed_nonce() {
    let setup = PaySetup::new();
    let asked = setup.send("10", None).await;
    assert_eq!(asked.status(), 402);
    let requirements: PaymentRequirements = asked.json().await.unwrap();
    assert_eq!(
        serde_json::to_value(&requirements).unwrap(),
        json!({"x402Version": 1, "accepts": [documented_option()]})
    );
    let policy = PaymentPolicy {
        network: Network::Base,
        amount: "10".parse().unwrap(),
        cap: "10".parse().unwrap(),
        pay_to: RECEIVER.parse().unwrap(),
    };
    assert!(check_requirements(&requirements, &policy).is_ok());

    let header = setup.header(setup.authorization(10_000_000));
    let paid = setup.send("10", Some(&header)).await;
    assert_eq!(paid.status(), 200);
    let settlement = paid
        .headers()
        .get("x-payment-response")
        .expect("X-PAYMENT-RESPONSE")
        .to_str()
        .unwrap()
        .to_owned();
    let settlement = SettlementResponse::from_header(&settlement).unwrap();
    assert!(settlement.success);
    assert_eq!(settlement.network, "local");
    assert_eq!(
        settlement.payer.as_deref(),
        Some("0x2c7536E3605D9C16a7a3D7b1898e529396a65c23")
    );
    let result: TopupResult = paid.json().await.unwrap();
    assert_eq!(result.credits_added, 1000);
    assert_eq!(result.balance, 1000);
    assert_eq!(result.balance_usdc, "10.00");
    assert_eq!(result.tx_hash, settlement.transaction);

    let replayed = setup.send("10", Some(&header)).await;
    assert_eq!(replayed.status(), 409);
    assert!(replayed.text().await.unwrap().contains("already used"));
    assert_eq!(setup.balance().await, 1000, "credited once");
}

#[tokio::test]
async fn serve_rejects_payments_outside_their_window_or_terms() {
    let setup = PaySetup::new();
    let mut expired = setup.authorization(1_000_000);
    expired.valid_after = now() - 1000;
    expired.valid_before = now() - 10;
    let mut early = setup.authorization(1_000_000);
    early.valid_after = now() + 1000;
    early.valid_before = now() + 1300;
    let mut elsewhere = setup.authorization(1_000_000);
    elsewhere.to = WALLET.parse().unwrap();
    let short = setup.authorization(999_999);
    let mut forged = PaymentPayload::sign(
        &setup.wallet,
        Network::Base,
        &setup.domain,
        setup.authorization(1_000_000),
    )
    .unwrap();
    forged.authorization.from = WALLET.parse().unwrap();
    let cases = [
        (setup.header(expired), "expired: validBefore"),
        (setup.header(early), "not valid yet: validAfter"),
        (setup.header(elsewhere), "not this server's receiver"),
        (
            setup.header(short),
            "value 999999 is not maxAmountRequired 1000000",
        ),
        (forged.to_header(), "signature"),
        ("bm90IGpzb24=".to_owned(), "invalid X-PAYMENT"),
    ];
    for (header, expected) in cases {
        let answer = setup.send("1", Some(&header)).await;
        assert_eq!(answer.status(), 400, "{expected}");
        let body = answer.text().await.unwrap();
        assert!(body.contains(expected), "{expected}: {body}");
    }
    for (amount, expected) in [("0.001", "whole number of credits"), ("1e3", "amount")] {
        let answer = setup.send(amount, None).await;
        assert_eq!(answer.status(), 400);
        assert!(answer.text().await.unwrap().contains(expected));
    }
    assert_eq!(setup.balance().await, 0, "nothing was credited");
}

#[tokio::test]
async fn wallet_login_checks_time_signer_and_reuse() {
    let serve = Serve::start_with(
        &["sim:model=m"],
        &[],
        &[
            "--login-word",
            "gepa",
            "--key-prefix",
            "test_live_",
            "--login-window",
            "60",
        ],
    );
    let wallet = PrivateKey::from_hex(WALLET_KEY).unwrap();
    let other = PrivateKey::from_hex(OTHER_KEY).unwrap();
    let login = |signer: &PrivateKey, address: &str, timestamp: i64| {
        json!({
            "address": address,
            "signature": signer.sign_personal(login_message("gepa", timestamp)).to_string(),
            "timestamp": timestamp,
        })
    };
    let send = |body: serde_json::Value| {
        let url = format!("{}/v1/auth/wallet", serve.url);
        async move { raw().post(url).json(&body).send().await.unwrap() }
    };
    // Two seconds back, inside the window: the CLI login at the end signs the current second,
    // and a signature over the same second would be the same bytes, refused as used before.
    let now = chrono::Utc::now().timestamp() - 2;

    let body = login(&wallet, WALLET, now);
    let granted = send(body.clone()).await;
    assert_eq!(granted.status(), 200);
    let grant: ApiKeyGrant = granted.json().await.unwrap();
    assert!(grant.key.expose().starts_with("test_live_"));
    assert_eq!(grant.rpm_limit, 60);
    assert_eq!(grant.id, WALLET);

    let reused = send(body).await;
    assert_eq!(reused.status(), 401);
    assert!(reused.text().await.unwrap().contains("used before"));

    for (body, status, expected) in [
        (
            login(&wallet, WALLET, now - 120),
            401,
            "s behind server time",
        ),
        (
            login(&wallet, WALLET, now + 120),
            401,
            "s ahead of server time",
        ),
        (login(&other, WALLET, now), 401, "not by address"),
        (
            login(&wallet, "0x1234", now),
            400,
            "invalid parameter address",
        ),
        (
            json!({"address": WALLET, "timestamp": now}),
            400,
            "signature",
        ),
    ] {
        let answer = send(body).await;
        assert_eq!(answer.status(), status, "{expected}");
        let text = answer.text().await.unwrap();
        assert!(text.contains(expected), "{expected}: {text}");
    }

    // The login word is configuration on both sides.
    let user = User::new(&serve.url);
    let wrong_word = user.run(&["auth", "wallet"]);
    assert!(!wrong_word.status.success());
    assert!(
        text(&wrong_word.stderr).contains("gepa-login-"),
        "{}",
        text(&wrong_word.stderr)
    );
    ok(&user.run_with(&["auth", "wallet"], &[("GEPA_LAB_LOGIN_WORD", "gepa")]));
    assert!(user.key().starts_with("test_live_"));
}

fn post(channel: &str, content: &str) -> PostMessage {
    PostMessage {
        channel: channel.into(),
        content: content.into(),
        name: None,
        avatar: None,
    }
}

fn contents(messages: &[ChannelMessage]) -> Vec<String> {
    messages.iter().map(|m| m.content.clone()).collect()
}

fn numbered(range: impl Iterator<Item = usize>) -> Vec<String> {
    range.map(|i| format!("m{i:03}")).collect()
}

#[tokio::test]
async fn channel_pages_newest_first_with_cursors_and_a_cap_of_200() {
    let serve = Serve::start(&["sim:model=m"], &[&format!("{API_KEY}:100000")]);
    let client = account_client(&serve.url, API_KEY);
    let mut posted = Vec::new();
    for i in 0..250 {
        posted.push(
            client
                .post_message(&post("general", &format!("m{i:03}")))
                .await
                .unwrap(),
        );
    }
    client
        .post_message(&post("requests", "elsewhere"))
        .await
        .unwrap();
    let first = &posted[0];
    assert_eq!(first.author_type, "api");
    assert!(first.author.starts_with("key-"), "{}", first.author);
    assert_eq!(first.author_name, first.author);
    assert!(
        first.created_at.ends_with('Z') && first.created_at.len() == 24,
        "{}",
        first.created_at
    );
    let times: Vec<_> = posted.iter().map(|m| created_at(m).unwrap()).collect();
    assert!(
        times.windows(2).all(|w| w[0] < w[1]),
        "times are unique and increasing"
    );

    let mut query = ReadQuery::new(Channel::General);
    assert_eq!(
        contents(&client.read_messages(&query).await.unwrap()),
        numbered((200..250).rev())
    );
    query.limit = 200;
    let newest = client.read_messages(&query).await.unwrap();
    assert_eq!(contents(&newest), numbered((50..250).rev()));

    query.before = created_at(newest.last().unwrap());
    assert_eq!(
        contents(&client.read_messages(&query).await.unwrap()),
        numbered((0..50).rev())
    );
    query.before = Some(times[120]);
    query.after = Some(times[100]);
    assert_eq!(
        contents(&client.read_messages(&query).await.unwrap()),
        numbered((101..120).rev())
    );
    query.before = None;
    query.after = Some(times[199]);
    assert_eq!(
        contents(&client.read_messages(&query).await.unwrap()),
        numbered((200..250).rev())
    );
    // Forward reading walks back through full pages, so more than 200 new messages all come.
    let caught_up = client.read_after(Channel::General, times[0]).await.unwrap();
    assert_eq!(contents(&caught_up), numbered(1..250));
    let requests = client
        .read_messages(&ReadQuery::new(Channel::Requests))
        .await
        .unwrap();
    assert_eq!(contents(&requests), ["elsewhere"]);

    // 201 is refused by the client before sending, and by the server.
    query.limit = 201;
    let err = client.read_messages(&query).await.unwrap_err();
    assert!(matches!(err, AccountError::Rule(_)), "{err}");
    for (params, expected) in [
        ("channel=general&limit=201", "1 to 200"),
        ("channel=general&limit=0", "1 to 200"),
        ("channel=general&limit=many", "limit"),
        ("channel=random", "general or requests"),
        ("limit=5", "missing parameter channel"),
        ("channel=general&before=yesterday", "ISO 8601"),
        ("channel=general&after=2025-01-01", "ISO 8601"),
    ] {
        let answer = raw()
            .get(format!("{}/v1/channel?{params}", serve.url))
            .bearer_auth(API_KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 400, "{params}");
        let body = answer.text().await.unwrap();
        assert!(body.contains(expected), "{params}: {body}");
    }
    let cursor = format_timestamp(times[249]).replace('Z', "%2B00:00");
    let answer = raw()
        .get(format!(
            "{}/v1/channel?channel=general&limit=1&before={cursor}",
            serve.url
        ))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap();
    let page: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(
        page["messages"][0]["content"], "m248",
        "offsets other than Z are read"
    );
}

#[tokio::test]
async fn channel_posts_break_no_rule_on_either_side() {
    let serve = Serve::start(&["sim:model=m"], &[&format!("{API_KEY}:6000")]);
    let client = account_client(&serve.url, API_KEY);
    let bad = [
        (
            json!({"channel": "random", "content": "hi"}),
            "general or requests",
        ),
        (
            json!({"channel": "general", "content": "hi", "name": "Big Bot"}),
            "lowercase",
        ),
        (
            json!({"channel": "general", "content": "hi", "name": "a".repeat(33)}),
            "33 characters",
        ),
        (
            json!({"channel": "general", "content": "hi", "avatar": "http://x.org/a.png"}),
            "https",
        ),
        (json!({"channel": "general", "content": "  "}), "empty"),
        (json!({"channel": "general"}), "content"),
    ];
    for (body, expected) in bad {
        let post: Result<PostMessage, _> = serde_json::from_value(body.clone());
        if let Ok(post) = post {
            let err = client.post_message(&post).await.unwrap_err();
            assert!(matches!(err, AccountError::Rule(_)), "{err}");
            assert!(err.to_string().contains(expected), "{err}");
        }
        let answer = raw()
            .post(format!("{}/v1/channel", serve.url))
            .bearer_auth(API_KEY)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 400, "{body}");
        let text = answer.text().await.unwrap();
        assert!(text.contains(expected), "{body}: {text}");
    }
    let stored = client
        .post_message(&PostMessage {
            channel: "requests".into(),
            content: "please add a model".into(),
            name: Some("gepa_bot-x".into()),
            avatar: Some("https://example.org/a.png".into()),
        })
        .await
        .unwrap();
    assert_eq!(stored.author_name, "gepa_bot-x");
    let unauthenticated = raw()
        .get(format!("{}/v1/channel?channel=general", serve.url))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);
}

#[test]
fn channel_cli_posts_as_the_wallet_and_follows_until_interrupted() {
    let serve = Serve::start(&["sim:model=m"], &[&format!("{API_KEY}:6000")]);
    let user = User::new(&serve.url);
    ok(&user.run(&["auth", "wallet"]));
    let stdout = ok(&user.run(&[
        "channel",
        "post",
        "general",
        "hello from the cli",
        "--name",
        "cli-user",
    ]));
    assert!(
        stdout.contains(
            "cli-user [api 0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266]: hello from the cli"
        ),
        "{stdout}"
    );
    let refused = user.run(&["channel", "post", "general", "x", "--name", "CLI"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("lowercase"),
        "{}",
        text(&refused.stderr)
    );
    let refused = user.run(&["channel", "read", "general", "--limit", "201"]);
    assert_eq!(refused.status.code(), Some(1));
    let refused = user.run(&["channel", "read", "general", "--after", "last tuesday"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).contains("ISO 8601"));

    let mut follower = user
        .command(&[
            "channel",
            "read",
            "general",
            "--follow",
            "--interval",
            "2",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn follower");
    let lines = {
        let stdout = follower.stdout.take().expect("stdout");
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        receive
    };
    let next = |what: &str| {
        let line = lines
            .recv_timeout(Duration::from_secs(15))
            .unwrap_or_else(|_| panic!("no line for {what}"));
        serde_json::from_str::<ChannelMessage>(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    assert_eq!(next("the existing message").content, "hello from the cli");
    let client = account_client(&serve.url, API_KEY);
    block_on(async {
        client.post_message(&post("general", "one")).await.unwrap();
        client
            .post_message(&post("requests", "not followed"))
            .await
            .unwrap();
        client.post_message(&post("general", "two")).await.unwrap();
    });
    assert_eq!(next("the first new message").content, "one");
    assert_eq!(next("the second new message").content, "two");
    assert!(
        lines.recv_timeout(Duration::from_millis(2500)).is_err(),
        "nothing is printed twice"
    );
    // Ctrl-C stops following, successfully.
    let pid = i32::try_from(follower.id()).unwrap();
    // SAFETY: sends SIGINT to the child this test spawned and still owns.
    unsafe {
        libc::kill(pid, libc::SIGINT);
    }
    let status = follower.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

#[cfg(unix)]
#[test]
fn a_config_file_others_can_read_is_refused_and_a_key_goes_only_to_its_service() {
    use std::os::unix::fs::PermissionsExt;
    let serve = Serve::start(&["sim:model=m"], &[&format!("{API_KEY}:6000")]);
    let user = User::new(&serve.url);
    let mut config = UserConfig::default();
    config.service_mut(&serve.url).key = Some(Secret::new(API_KEY));
    config.save(&user.config).unwrap();
    ok(&user.run(&["credits", "balance"]));

    std::fs::set_permissions(&user.config, std::fs::Permissions::from_mode(0o644)).unwrap();
    for args in [
        &["credits", "balance"][..],
        &["models"],
        &["channel", "read", "general"],
    ] {
        let out = user.run(args);
        assert_eq!(out.status.code(), Some(3), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&user.config.display().to_string()),
            "{stderr}"
        );
        assert!(stderr.contains("mode 0644"), "{stderr}");
        assert!(stderr.contains("chmod 600"), "{stderr}");
        assert!(!stderr.contains(API_KEY), "{stderr}");
    }
    // A key given in the environment does not need the file.
    ok(&user.run_with(&["models"], &[("GEPA_LAB_INFERENCE_KEY", API_KEY)]));

    std::fs::set_permissions(&user.config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let elsewhere = user.run_with(
        &["credits", "balance"],
        &[("GEPA_LAB_INFERENCE_URL", "http://127.0.0.1:9")],
    );
    assert_eq!(elsewhere.status.code(), Some(3));
    assert!(
        text(&elsewhere.stderr).contains("no API key for http://127.0.0.1:9"),
        "{}",
        text(&elsewhere.stderr)
    );
}

#[tokio::test]
async fn empty_wallet_accounts_get_402_on_chat_when_credits_are_required() {
    let serve = Serve::start_with(
        &["sim:model=m"],
        &[&format!("{API_KEY}:6000")],
        &["--free-credits", "0", "--require-credits"],
    );
    let wallet = PrivateKey::from_hex(WALLET_KEY).unwrap();
    let grant = AccountClient::new(AccountConfig::new(serve.url.clone(), None))
        .unwrap()
        .register_wallet(&wallet, "dria", chrono::Utc::now().timestamp())
        .await
        .unwrap();
    let request = ChatRequest::new("m", vec![ChatMessage::user("hello")]);
    let err = serve
        .client(Some(grant.key.expose()))
        .chat(&request)
        .await
        .unwrap_err();
    match &err {
        InferenceError::Api(api) => assert_eq!(api.status().map(|s| s.as_u16()), Some(402)),
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("no credits left"), "{err}");
    // Keys given with --api-key are not metered.
    serve.client(Some(API_KEY)).chat(&request).await.unwrap();
    let balance = account_client(&serve.url, grant.key.expose())
        .balance()
        .await
        .unwrap();
    assert_eq!(
        (balance.balance, balance.balance_usdc.as_str()),
        (0, "0.00")
    );
}

/// `auth key` stores a key read from standard input; `executions` and `run --backend URL` then
/// find it in the config file with no key in the environment, and send it to that URL only.
#[test]
fn stored_keys_serve_executions_and_run_without_environment_keys() {
    use std::io::Write;

    // sim-text is the experiment's replay model: without it every replay answer would fail,
    // which `run` now reports with exit 6.
    let serve = Serve::start(
        &["sim:model=m,model=sim-text"],
        &[&format!("{API_KEY}:100000")],
    );
    let user = User::new(&serve.url);
    // No evolution key or URL in the environment: `common::command` leaves out the test's own.
    let command = |args: &[&str]| user.command(args);
    let store = |service: &str, stdin: &str| {
        let mut child = command(&["auth", "key", service, "--url", &serve.url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };

    // Before a key is stored, the service refuses the request.
    let refused = command(&["executions", "list", "--url", &serve.url])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(3), "{}", text(&refused.stderr));

    let empty = store("evolution", "  \n");
    assert_eq!(empty.status.code(), Some(1));
    assert!(text(&empty.stderr).contains("standard input: the key is empty"));

    let stored = store("evolution", &format!("{API_KEY}\n"));
    let stdout = ok(&stored);
    assert!(
        stdout.contains("stored in") && !stdout.contains(API_KEY),
        "{stdout}"
    );
    assert_eq!(user.key(), API_KEY);
    user.assert_private();
    // Accepted now (serve holds no execution yet).
    ok(&command(&["executions", "list", "--url", &serve.url])
        .output()
        .unwrap());

    // A whole run against the same URL: both halves use the stored key.
    let out = tempfile::tempdir().unwrap();
    let experiment = crate::common::root().join("tests/fixtures/run_experiments/two_variants.toml");
    let run = command(&[
        "run",
        "--backend",
        &serve.url,
        "--yes",
        "--poll-interval",
        "0.1",
    ])
    .arg("--out")
    .arg(out.path())
    .arg(&experiment)
    .stdin(Stdio::null())
    .output()
    .unwrap();
    let stdout = ok(&run);
    assert!(stdout.contains("report: "), "{stdout}");
    let listed = ok(&command(&["executions", "list", "--url", &serve.url])
        .output()
        .unwrap());
    assert_eq!(listed.matches("completed").count(), 2, "{listed}");
    let mut leaked = Vec::new();
    for entry in walk(out.path()) {
        if std::fs::read_to_string(&entry).is_ok_and(|t| t.contains(API_KEY)) {
            leaked.push(entry);
        }
    }
    assert!(leaked.is_empty(), "the key reached {leaked:?}");
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
