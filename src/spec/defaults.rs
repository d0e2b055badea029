//! The values the plan gives keys that a spec leaves out, where the default is not a plain serde
//! default: named once here, applied once by `plan`, and quoted by the key's description in the
//! schema (a test checks that each description says `Default `<value>``).

/// `backend.max_tokens_per_microbatch` (local).
pub const MAX_TOKENS_PER_MICROBATCH: u32 = 512;
/// `backend.max_in_flight` (tinker).
pub const TINKER_MAX_IN_FLIGHT: u32 = 64;
/// `backend.concurrency` (openai).
pub const OPENAI_CONCURRENCY: u32 = 8;
/// `backend.timeout_s` (openai).
pub const OPENAI_TIMEOUT_S: f64 = 300.0;
/// `backend.max_retries` (openai).
pub const OPENAI_MAX_RETRIES: u32 = 4;

/// `sandbox.concurrency` for `kind: fusion`: requests in flight to Sandbox Fusion. (`kind:
/// local` defaults to the machine's cores, which its pool counts when it starts: a property of
/// the machine a run lands on, not of the experiment.)
pub const FUSION_CONCURRENCY: u32 = 32;

/// `reward.function`: the Python function a `python` reward calls.
pub const REWARD_FUNCTION: &str = "reward";
/// `reward.call_timeout_s`: seconds per call of the Python reward function.
pub const REWARD_CALL_TIMEOUT_S: f64 = 10.0;
/// `reward.max_failures`: failed Python reward calls a run tolerates before it stops.
pub const REWARD_MAX_FAILURES: u32 = 3;

/// `eval.samples`: the largest k of `eval.k` (pass@k needs at least k samples), 1 without k.
pub fn eval_samples(samples: Option<u32>, k: &[u32]) -> u32 {
    samples.unwrap_or_else(|| k.iter().copied().max().unwrap_or(1))
}

/// `eval.greedy`: on whenever the main eval samples (temperature > 0), so every run that
/// evaluates reports greedy pass@1 beside sampled pass@k.
pub fn eval_greedy(greedy: Option<bool>, temperature: f64) -> bool {
    greedy.unwrap_or(temperature > 0.0)
}

/// The serde default of flags that are on unless a spec turns them off (`data.shuffle`,
/// `grpo.skip_degenerate`, ...).
pub(crate) fn yes() -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The description of `path` (object properties and `oneOf` branches searched in order).
    fn description(schema: &serde_json::Value, key: &str) -> Vec<String> {
        let mut out = vec![];
        let mut stack = vec![schema];
        while let Some(v) = stack.pop() {
            match v {
                serde_json::Value::Object(m) => {
                    if let Some(d) = m.get("properties").and_then(|p| p.get(key)).and_then(|p| p.get("description")).and_then(|d| d.as_str()) {
                        out.push(d.to_string());
                    }
                    stack.extend(m.values());
                }
                serde_json::Value::Array(a) => stack.extend(a),
                _ => {}
            }
        }
        out
    }

    #[test]
    fn schema_descriptions_quote_the_defaults() {
        let schema = crate::spec::schema::json_schema();
        for (key, value) in [
            ("max_tokens_per_microbatch", MAX_TOKENS_PER_MICROBATCH.to_string()),
            ("max_in_flight", TINKER_MAX_IN_FLIGHT.to_string()),
            ("concurrency", OPENAI_CONCURRENCY.to_string()),
            ("concurrency", FUSION_CONCURRENCY.to_string()),
            ("timeout_s", format!("{OPENAI_TIMEOUT_S}")),
            ("max_retries", OPENAI_MAX_RETRIES.to_string()),
            ("function", REWARD_FUNCTION.to_string()),
            ("call_timeout_s", format!("{REWARD_CALL_TIMEOUT_S}")),
            ("max_failures", REWARD_MAX_FAILURES.to_string()),
        ] {
            let ds = description(&schema, key);
            assert!(ds.iter().any(|d| d.contains(&format!("Default `{value}`"))), "`{key}`: no description says Default `{value}`: {ds:?}");
        }
        assert_eq!(eval_samples(None, &[1, 5]), 5);
        assert_eq!(eval_samples(Some(8), &[1]), 8);
        assert_eq!(eval_samples(None, &[]), 1);
        assert!(eval_greedy(None, 0.7) && !eval_greedy(None, 0.0) && !eval_greedy(Some(false), 0.7));
    }
}
