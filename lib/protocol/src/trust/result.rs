//! Escalation Results signed by the Session Coordinator's protocol key.
//!
//! A result file is `signature (64) || body`: body is a postcard
//! [`SignedBody`], the signature is Ed25519 over [`CONTEXT`] and the body,
//! by the key of the coordinator's protocol credential in the published
//! Trust Anchor. The body binds the outcome to the generation, the Agent
//! Sandbox, the Client Session and the Escalation Request ID, so a result
//! made for another request, session or generation, or written by anyone
//! but the coordinator, is refused by `lazaret-escalate`.

use ed25519_compact::{PublicKey, SecretKey, Signature};
use serde::{Deserialize, Serialize};

use super::claims::GenerationId;
use super::TrustError;
use crate::escalation::ResultRecord;

const CONTEXT: &[u8] = b"lazaret escalation result 1\0";
const SIG: usize = 64;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SignedBody {
    pub generation: GenerationId,
    pub sandbox_id: String,
    pub session_id: String,
    pub record: ResultRecord,
}

fn message(body: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(CONTEXT.len() + body.len());
    m.extend_from_slice(CONTEXT);
    m.extend_from_slice(body);
    m
}

/// The bytes of a result file.
pub fn seal(body: &SignedBody, key: &SecretKey) -> Vec<u8> {
    // Invariant: a `SignedBody` (plain fields, derived `Serialize`)
    // always encodes into a `Vec`.
    #[allow(clippy::expect_used)]
    let b = postcard::to_allocvec(body).expect("result encode");
    let sig = key.sign(message(&b), None);
    let mut out = Vec::with_capacity(SIG + b.len());
    out.extend_from_slice(sig.as_ref());
    out.extend_from_slice(&b);
    out
}

/// What the reader of a result expects it to be about.
pub struct Expect<'a> {
    pub generation: &'a GenerationId,
    pub sandbox_id: &'a str,
    pub session_id: &'a str,
    pub request_id: &'a [u8; 16],
}

/// Checks the signature before anything is parsed, then every binding.
pub fn open(bytes: &[u8], key: &PublicKey, want: &Expect<'_>) -> Result<ResultRecord, TrustError> {
    let bad = |why: &str| TrustError::Result(why.to_string());
    if bytes.len() < SIG {
        return Err(bad("too short to be signed"));
    }
    let (sig, body) = bytes.split_at(SIG);
    let sig = Signature::from_slice(sig).map_err(|_| bad("malformed signature"))?;
    key.verify(message(body), &sig)
        .map_err(|_| bad("not signed by this Domain's Session Coordinator"))?;
    let b: SignedBody = postcard::from_bytes(body).map_err(|_| bad("malformed"))?;
    if b.generation != *want.generation {
        return Err(bad("made for another Domain generation"));
    }
    if b.sandbox_id != want.sandbox_id {
        return Err(bad("made for another Agent Sandbox"));
    }
    if b.session_id != want.session_id {
        return Err(bad("made for another Client Session"));
    }
    if b.record.request_id != *want.request_id {
        return Err(bad("made for another Escalation Request"));
    }
    Ok(b.record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::escalation::Outcome;
    use ed25519_compact::KeyPair;

    fn body() -> SignedBody {
        SignedBody {
            generation: GenerationId {
                domain_id: "d".into(),
                number: 2,
                nonce: [9; 16],
            },
            sandbox_id: "sb".into(),
            session_id: "s".into(),
            record: ResultRecord {
                request_id: [1; 16],
                outcome: Outcome::TimedOut,
            },
        }
    }

    #[test]
    fn a_result_opens_only_under_its_key_and_for_its_own_request() {
        let k = KeyPair::generate();
        let b = body();
        let sealed = seal(&b, &k.sk);
        let want = Expect {
            generation: &b.generation,
            sandbox_id: "sb",
            session_id: "s",
            request_id: &[1; 16],
        };
        assert_eq!(open(&sealed, &k.pk, &want).unwrap(), b.record);
        // Another key (a forger's).
        let other = KeyPair::generate();
        assert!(open(&seal(&b, &other.sk), &k.pk, &want).is_err());
        // A flipped byte in the body.
        let mut t = sealed.clone();
        *t.last_mut().unwrap() ^= 1;
        assert!(open(&t, &k.pk, &want).is_err());
        // Replays: another request, session, sandbox or generation.
        for (field, e) in [
            (
                "request",
                Expect {
                    request_id: &[2; 16],
                    ..want
                },
            ),
            (
                "session",
                Expect {
                    session_id: "t",
                    ..want
                },
            ),
            (
                "sandbox",
                Expect {
                    sandbox_id: "x",
                    ..want
                },
            ),
        ] {
            let err = open(&sealed, &k.pk, &e).unwrap_err().to_string();
            assert!(err.contains("another"), "{field}: {err}");
        }
        let next = GenerationId {
            number: 3,
            ..b.generation.clone()
        };
        assert!(open(
            &sealed,
            &k.pk,
            &Expect {
                generation: &next,
                ..want
            }
        )
        .is_err());
        assert!(open(&sealed[..10], &k.pk, &want).is_err());
    }
}
