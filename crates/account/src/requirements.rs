//! Deciding whether to pay what a 402 asks for. Everything the signature would commit the
//! user's money to is checked against what the user asked and confirmed before anything is
//! signed: protocol version, scheme, network, the asset contract, the exact amount, the
//! receiver, a validity window of sane length, and the user's cap.
use gepa_lab_wallet::{Address, Eip712Domain, Network, X402_VERSION};

use super::amount::UsdcAmount;
use super::wire::{PaymentOption, PaymentRequirements};

/// The only scheme a careful client signs: a fixed amount, not "up to".
pub const EXACT_SCHEME: &str = "exact";

/// The longest validity a payment may be asked to have. The reference service asks for 300 s;
/// an authorization that stays valid for days is one that can be settled long after the user
/// stopped expecting it.
pub const MAX_TIMEOUT_SECONDS: u64 = 3600;

/// What the user asked for and confirmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentPolicy {
    pub network: Network,
    /// The amount asked for: `maxAmountRequired` must be exactly this.
    pub amount: UsdcAmount,
    /// The most the user allows this payment to be.
    pub cap: UsdcAmount,
    /// The receiver the user confirmed (or configured) for this service.
    pub pay_to: Address,
}

/// A payment option that passed every check, with its values parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedPayment {
    pub network: Network,
    pub pay_to: Address,
    pub amount: UsdcAmount,
    pub max_timeout_seconds: u64,
    /// The token's EIP-712 domain: extra.name, extra.version, the chain, the asset contract.
    pub domain: Eip712Domain,
}

/// Why a payment is not made. Each names what was asked and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("amount {amount} USDC is above the cap --max-usdc {cap}")]
    OverCap { amount: UsdcAmount, cap: UsdcAmount },
    #[error("x402Version is {seen}; only version {X402_VERSION} is understood")]
    Version { seen: u32 },
    #[error("the payment requirements offer no payment option (accepts is empty)")]
    NoOption,
    #[error("scheme is {seen:?}; only {EXACT_SCHEME:?} (a fixed amount) is signed")]
    Scheme { seen: String },
    #[error("network is {seen:?}; expected {expected:?} (--network)")]
    Network { seen: String, expected: String },
    #[error("asset is {seen:?}; expected the USDC contract on {network}, {expected}")]
    Asset {
        seen: String,
        network: Network,
        expected: Address,
    },
    #[error(
        "maxAmountRequired is {seen:?}; expected {expected} atomic units ({amount} USDC × 10^6)"
    )]
    Amount {
        seen: String,
        expected: u128,
        amount: UsdcAmount,
    },
    #[error("payTo is {seen:?}; the confirmed receiver for this service is {expected}")]
    PayTo { seen: String, expected: Address },
    #[error(
        "payTo is {seen}, and no receiver is confirmed for this service yet; if that address is right, pass --pay-to {seen}"
    )]
    UnconfirmedPayTo { seen: String },
    #[error("maxTimeoutSeconds is {seen}; expected 1 to {MAX_TIMEOUT_SECONDS}")]
    Timeout { seen: u64 },
    #[error("extra (the token's name and version for the signature) is missing")]
    MissingExtra,
}

impl Refusal {
    /// With several options, the most telling reason is the one about the option that got
    /// furthest through the checks; checks run in the order of the variants above.
    fn depth(&self) -> u8 {
        match self {
            Refusal::OverCap { .. } | Refusal::Version { .. } | Refusal::NoOption => 0,
            Refusal::Scheme { .. } => 1,
            Refusal::Network { .. } => 2,
            Refusal::Asset { .. } => 3,
            Refusal::Amount { .. } => 4,
            Refusal::PayTo { .. } | Refusal::UnconfirmedPayTo { .. } => 5,
            Refusal::Timeout { .. } => 6,
            Refusal::MissingExtra => 7,
        }
    }
}

/// Checks the amount against the cap: done before any request, so an over-cap top-up sends
/// nothing at all.
pub fn check_cap(amount: UsdcAmount, cap: UsdcAmount) -> Result<(), Refusal> {
    if amount > cap {
        return Err(Refusal::OverCap { amount, cap });
    }
    Ok(())
}

/// The first option of `requirements` that `policy` allows paying, or why none is.
pub fn check_requirements(
    requirements: &PaymentRequirements,
    policy: &PaymentPolicy,
) -> Result<AcceptedPayment, Refusal> {
    check_cap(policy.amount, policy.cap)?;
    if requirements.x402_version != X402_VERSION {
        return Err(Refusal::Version {
            seen: requirements.x402_version,
        });
    }
    let mut best: Option<Refusal> = None;
    for option in &requirements.accepts {
        match check_option(option, policy) {
            Ok(accepted) => return Ok(accepted),
            Err(refusal) => {
                if best.as_ref().is_none_or(|b| refusal.depth() > b.depth()) {
                    best = Some(refusal);
                }
            }
        }
    }
    Err(best.unwrap_or(Refusal::NoOption))
}

/// The receiver the service asks to be paid, for telling a user who has not confirmed one yet.
pub fn offered_pay_to(requirements: &PaymentRequirements) -> Option<&str> {
    requirements.accepts.first().map(|o| o.pay_to.as_str())
}

fn check_option(
    option: &PaymentOption,
    policy: &PaymentPolicy,
) -> Result<AcceptedPayment, Refusal> {
    if option.scheme != EXACT_SCHEME {
        return Err(Refusal::Scheme {
            seen: option.scheme.clone(),
        });
    }
    if option.network != policy.network.name() {
        return Err(Refusal::Network {
            seen: option.network.clone(),
            expected: policy.network.name().to_string(),
        });
    }
    let usdc = policy.network.usdc();
    if option.asset.parse::<Address>().ok() != Some(usdc) {
        return Err(Refusal::Asset {
            seen: option.asset.clone(),
            network: policy.network,
            expected: usdc,
        });
    }
    let required = UsdcAmount::from_atomic_str(&option.max_amount_required).ok();
    if required != Some(policy.amount) {
        return Err(Refusal::Amount {
            seen: option.max_amount_required.clone(),
            expected: policy.amount.atomic(),
            amount: policy.amount,
        });
    }
    if option.pay_to.parse::<Address>().ok() != Some(policy.pay_to) {
        return Err(Refusal::PayTo {
            seen: option.pay_to.clone(),
            expected: policy.pay_to,
        });
    }
    if !(1..=MAX_TIMEOUT_SECONDS).contains(&option.max_timeout_seconds) {
        return Err(Refusal::Timeout {
            seen: option.max_timeout_seconds,
        });
    }
    let extra = option.extra.as_ref().ok_or(Refusal::MissingExtra)?;
    Ok(AcceptedPayment {
        network: policy.network,
        pay_to: policy.pay_to,
        amount: policy.amount,
        max_timeout_seconds: option.max_timeout_seconds,
        domain: Eip712Domain {
            name: extra.name.clone(),
            version: extra.version.clone(),
            chain_id: policy.network.chain_id(),
            verifying_contract: usdc,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::TokenExtra;

    const RECEIVER: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

    fn documented() -> PaymentRequirements {
        PaymentRequirements {
            x402_version: 1,
            accepts: vec![PaymentOption {
                scheme: "exact".into(),
                network: "base".into(),
                max_amount_required: "10000000".into(),
                resource: "/v1/credits/topup".into(),
                pay_to: RECEIVER.into(),
                asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913".into(),
                max_timeout_seconds: 300,
                extra: Some(TokenExtra {
                    name: "USD Coin".into(),
                    version: "2".into(),
                }),
            }],
        }
    }

    fn policy(amount: &str, cap: &str) -> PaymentPolicy {
        PaymentPolicy {
            network: Network::Base,
            amount: amount.parse().unwrap(),
            cap: cap.parse().unwrap(),
            pay_to: RECEIVER.parse().unwrap(),
        }
    }

    fn refusal(change: impl FnOnce(&mut PaymentOption)) -> Refusal {
        let mut requirements = documented();
        change(&mut requirements.accepts[0]);
        check_requirements(&requirements, &policy("10", "10")).unwrap_err()
    }

    #[test]
    fn the_documented_requirements_are_accepted_with_the_usdc_domain() {
        let accepted = check_requirements(&documented(), &policy("10", "25")).unwrap();
        assert_eq!(accepted.amount.atomic(), 10_000_000);
        assert_eq!(accepted.max_timeout_seconds, 300);
        assert_eq!(
            hex::encode(accepted.domain.separator()),
            "02fa7265e7c5d81118673727957699e4d68f74cd74b7db77da710fe8a2c7834f"
        );
    }

    #[test]
    fn addresses_compare_by_value_not_by_case() {
        let mut requirements = documented();
        requirements.accepts[0].pay_to = RECEIVER.to_lowercase();
        requirements.accepts[0].asset = requirements.accepts[0].asset.to_lowercase();
        assert!(check_requirements(&requirements, &policy("10", "10")).is_ok());
    }

    #[test]
    fn each_wrong_requirement_is_refused_naming_what_was_seen() {
        let cases: Vec<(Refusal, &str)> = vec![
            (refusal(|o| o.scheme = "upto".into()), "\"upto\""),
            (
                refusal(|o| o.network = "base-sepolia".into()),
                "\"base-sepolia\"",
            ),
            (
                refusal(|o| o.asset = "0x036CbD53842c5426634e7929541eC2318f3dCF7e".into()),
                "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
            ),
            (
                refusal(|o| o.max_amount_required = "10000001".into()),
                "10000000 atomic",
            ),
            (
                refusal(|o| o.max_amount_required = "10.0".into()),
                "\"10.0\"",
            ),
            (
                refusal(|o| o.pay_to = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".into()),
                RECEIVER,
            ),
            (refusal(|o| o.pay_to = "nobody".into()), "\"nobody\""),
            (refusal(|o| o.max_timeout_seconds = 86_400), "86400"),
            (
                refusal(|o| o.max_timeout_seconds = 0),
                "maxTimeoutSeconds is 0",
            ),
            (refusal(|o| o.extra = None), "extra"),
        ];
        for (refusal, expected) in cases {
            assert!(refusal.to_string().contains(expected), "{refusal}");
        }
    }

    #[test]
    fn version_cap_and_empty_options_are_refused() {
        let mut requirements = documented();
        requirements.x402_version = 2;
        assert_eq!(
            check_requirements(&requirements, &policy("10", "10")),
            Err(Refusal::Version { seen: 2 })
        );
        let err = check_requirements(&documented(), &policy("10", "9.999999")).unwrap_err();
        assert!(matches!(err, Refusal::OverCap { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "amount 10 USDC is above the cap --max-usdc 9.999999"
        );
        let mut requirements = documented();
        requirements.accepts.clear();
        assert_eq!(
            check_requirements(&requirements, &policy("10", "10")),
            Err(Refusal::NoOption)
        );
    }

    #[test]
    fn a_later_good_option_is_chosen_and_the_deepest_reason_is_reported() {
        let mut requirements = documented();
        let good = requirements.accepts[0].clone();
        requirements.accepts[0].scheme = "upto".into();
        requirements.accepts.push(good.clone());
        assert!(check_requirements(&requirements, &policy("10", "10")).is_ok());

        requirements.accepts[1].max_amount_required = "1".into();
        let err = check_requirements(&requirements, &policy("10", "10")).unwrap_err();
        assert!(matches!(err, Refusal::Amount { .. }), "{err}");
    }
}
