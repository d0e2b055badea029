//! MLflow through its REST API (`/api/2.0/mlflow/...`): the experiment by name (created if
//! missing), one MLflow run per rlx run (its id kept in `sinks/mlflow.json`, so a resumed rlx run
//! continues it), the resolved spec as params, each metrics line as metrics at its step, and the
//! run's status at the end.
//!
//! Requests are retried on connection errors, timeouts, 429 and 5xx (three tries, doubling
//! backoff from 0.5 s); a 4xx other than 429 is the request's fault and is not retried. A server
//! that stays down costs the run nothing: the lines stay unmirrored, the next step tries again,
//! and `rlx sync mlflow` sends them later. Rejected: the `mlflow` Python client through a helper
//! as W&B has: the REST API is documented and stable, and Python would be one more thing to have.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::follow::Cursor;
use super::mirror::{End, Mirror, SinkError};
use crate::retry;
use crate::runlog::MetricsLine;

/// MLflow's limits per `runs/log-batch` call.
const MAX_METRICS: usize = 1000;
const MAX_PARAMS: usize = 100;
/// Longest param value MLflow stores (`MAX_PARAM_VAL_LENGTH`).
const MAX_PARAM_LEN: usize = 6000;
/// Longest param key.
const MAX_KEY_LEN: usize = 250;
const TRIES: u32 = 3;

/// What `sinks/mlflow.json` keeps besides the cursor.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct State {
    /// The tracking server the run lives on (a changed URI starts a new MLflow run).
    tracking_uri: String,
    /// The experiment's name (a changed name starts a new MLflow run too).
    #[serde(default)]
    experiment: String,
    experiment_id: Option<String>,
    run_id: Option<String>,
    /// Whether the params went out (MLflow refuses to log a param twice with another value, and
    /// they never change within a run).
    params_logged: bool,
}

/// Mirrors a run into an MLflow tracking server.
pub(crate) struct Mlflow {
    api: String,
    experiment: String,
    run_name: String,
    params: Vec<(String, String)>,
    state: State,
    client: reqwest::Client,
    auth: Option<Auth>,
    /// The saved state was for another server or experiment.
    moved: bool,
}

enum Auth {
    Bearer(String),
    Basic(String, String),
}

impl Mlflow {
    /// A mirror into `tracking_uri`'s experiment `experiment`, logging `config` (the resolved
    /// spec) flattened as params. `saved` is the tracker's saved state.
    pub(crate) fn new(tracking_uri: &str, experiment: &str, run_name: &str, config: &Value, saved: &Value) -> Mlflow {
        let uri = tracking_uri.trim_end_matches('/').to_string();
        let mut state: State = serde_json::from_value(saved.clone()).unwrap_or_default();
        let moved = !state.tracking_uri.is_empty() && (state.tracking_uri != uri || state.experiment != experiment);
        if moved || state.tracking_uri.is_empty() {
            state = State { tracking_uri: uri.clone(), experiment: experiment.into(), ..State::default() };
        }
        let mut params = vec![];
        flatten("", config, &mut params);
        let client = reqwest::Client::builder().connect_timeout(Duration::from_secs(5)).timeout(Duration::from_secs(30)).build().expect("a reqwest client builds");
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let auth = match (env("MLFLOW_TRACKING_TOKEN"), env("MLFLOW_TRACKING_USERNAME"), env("MLFLOW_TRACKING_PASSWORD")) {
            (Some(t), _, _) => Some(Auth::Bearer(t)),
            (None, Some(u), Some(p)) => Some(Auth::Basic(u, p)),
            _ => None,
        };
        Mlflow { api: format!("{uri}/api/2.0/mlflow"), experiment: experiment.into(), run_name: run_name.into(), params, state, client, auth, moved }
    }

    /// One call, retried as the module doc says. `Ok(Err(body))` is an answer the server gave
    /// with an error code (the caller decides: "does not exist" is expected sometimes).
    async fn call(&self, get: bool, path: &str, body: &Value) -> Result<Result<Value, (u16, Value)>, SinkError> {
        let url = format!("{}/{path}", self.api);
        let policy = retry::Policy::counted(TRIES - 1, Duration::from_millis(500), Duration::from_secs(8));
        let url = &url;
        let done = retry::run(&policy, url, |_| async move {
            let mut req = if get { self.client.get(url).query(&body.as_object().map(|o| o.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect::<Vec<_>>()).unwrap_or_default()) } else { self.client.post(url).json(body) };
            req = match &self.auth {
                Some(Auth::Bearer(t)) => req.bearer_auth(t),
                Some(Auth::Basic(u, p)) => req.basic_auth(u, Some(p)),
                None => req,
            };
            match req.send().await {
                Ok(resp) => {
                    let status = resp.status();
                    let text = resp.text().await.unwrap_or_default();
                    let value: Value = serde_json::from_str(&text).unwrap_or_else(|_| json!({"message": text}));
                    if status.is_success() {
                        retry::Attempt::Done(Ok(value))
                    } else if !(status.is_server_error() || status.as_u16() == 429) {
                        retry::Attempt::Done(Err((status.as_u16(), value)))
                    } else {
                        retry::Attempt::Retry(format!("HTTP {status}: {}", message(&value)), None)
                    }
                }
                Err(e) => retry::Attempt::Retry(crate::causes::causes(&e).join(": "), None),
            }
        })
        .await;
        done.map_err(|g| match g.exhausted {
            true => SinkError::Failed(format!("`{path}` failed after {} tries: {}", g.attempts, g.last)),
            false => SinkError::Failed(format!("`{path}` failed: {}", g.last)),
        })
    }

    /// A call whose error answer is a failure.
    async fn ok(&self, path: &str, body: &Value) -> Result<Value, SinkError> {
        self.call(false, path, body).await?.map_err(|(code, v)| SinkError::Failed(format!("`{path}`: HTTP {code}: {}", message(&v))))
    }

    /// The MLflow run, created (with its experiment) on first use.
    async fn run_id(&mut self) -> Result<String, SinkError> {
        if let Some(id) = &self.state.run_id {
            return Ok(id.clone());
        }
        let exp = match &self.state.experiment_id {
            Some(e) => e.clone(),
            None => {
                let by_name = json!({"experiment_name": self.experiment});
                let id = match self.call(true, "experiments/get-by-name", &by_name).await? {
                    Ok(v) => v["experiment"]["experiment_id"].as_str().map(str::to_string),
                    Err((404, _)) => None,
                    Err((code, v)) => return Err(SinkError::Failed(format!("`experiments/get-by-name`: HTTP {code}: {}", message(&v)))),
                };
                match id {
                    Some(id) => id,
                    None => match self.call(false, "experiments/create", &json!({"name": self.experiment})).await? {
                        Ok(v) => v["experiment_id"].as_str().unwrap_or_default().to_string(),
                        // Created by someone else in between.
                        Err(_) => self.call(true, "experiments/get-by-name", &by_name).await?.map_err(|(code, v)| SinkError::Failed(format!("`experiments/create`: HTTP {code}: {}", message(&v))))?["experiment"]["experiment_id"].as_str().unwrap_or_default().to_string(),
                    },
                }
            }
        };
        self.state.experiment_id = Some(exp.clone());
        let body = json!({
            "experiment_id": exp,
            "run_name": self.run_name,
            "start_time": now_ms(),
            "tags": [{"key": "mlflow.runName", "value": self.run_name}, {"key": "mlflow.source.name", "value": "rlx"}],
        });
        let v = self.ok("runs/create", &body).await?;
        let id = v["run"]["info"]["run_id"].as_str().ok_or_else(|| SinkError::Failed(format!("`runs/create` answered without a run id: {v}")))?.to_string();
        self.state.run_id = Some(id.clone());
        Ok(id)
    }

    async fn log_params(&mut self, run: &str) -> Result<(), SinkError> {
        if self.state.params_logged {
            return Ok(());
        }
        for chunk in self.params.chunks(MAX_PARAMS) {
            let params: Vec<Value> = chunk.iter().map(|(k, v)| json!({"key": k, "value": v})).collect();
            self.ok("runs/log-batch", &json!({"run_id": run, "params": params})).await?;
        }
        self.state.params_logged = true;
        Ok(())
    }

    async fn set_status(&mut self, status: &str, end: bool) -> Result<(), SinkError> {
        let run = self.run_id().await?;
        let mut body = json!({"run_id": run, "status": status});
        if end {
            body["end_time"] = json!(now_ms());
        }
        self.ok("runs/update", &body).await.map(drop)
    }
}

/// MLflow's error message in an error body (`{"error_code": ..., "message": ...}`).
fn message(v: &Value) -> String {
    match (v["error_code"].as_str(), v["message"].as_str()) {
        (Some(c), Some(m)) => format!("{c}: {m}"),
        (None, Some(m)) => m.chars().take(200).collect(),
        _ => v.to_string().chars().take(200).collect(),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// `config` as `a.b.c` → value strings; arrays and scalars are leaves (arrays as JSON).
fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                flatten(&key, x, out);
            }
        }
        Value::Null => {}
        other => {
            let text = match other {
                Value::String(s) => s.clone(),
                x => x.to_string(),
            };
            let key: String = prefix.chars().take(MAX_KEY_LEN).collect();
            out.push((key, text.chars().take(MAX_PARAM_LEN).collect()));
        }
    }
}

/// A metric name as MLflow accepts it: letters, digits, `_ - . : /` and spaces. rlx's only other
/// character is the `@` of `eval/pass@k`, which becomes `_at_` (`eval/pass_at_1`); anything else
/// becomes `_`.
pub(crate) fn metric_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 3);
    for c in name.chars() {
        match c {
            '@' => out.push_str("_at_"),
            c if c.is_ascii_alphanumeric() || "_-.:/ ".contains(c) => out.push(c),
            _ => out.push('_'),
        }
    }
    out
}

/// A metric value as MLflow's JSON takes it: NaN and infinities as the strings protobuf's JSON
/// mapping defines (plain JSON has no NaN).
fn metric_value(v: f64) -> Value {
    if v.is_nan() {
        json!("NaN")
    } else if v.is_infinite() {
        json!(if v > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        json!(v)
    }
}

impl Mirror for Mlflow {
    fn name(&self) -> &'static str {
        "MLflow"
    }

    async fn start(&mut self) -> Result<(), SinkError> {
        let run = self.run_id().await?;
        self.log_params(&run).await?;
        self.set_status("RUNNING", false).await
    }

    async fn send(&mut self, lines: &[MetricsLine], _upto: Cursor) -> Result<(), SinkError> {
        let run = self.run_id().await?;
        self.log_params(&run).await?;
        let ts = now_ms();
        let metrics: Vec<Value> = lines.iter().flat_map(|l| l.values.iter().map(move |(k, &v)| json!({"key": metric_name(k), "value": metric_value(v), "timestamp": ts, "step": l.step}))).collect();
        for chunk in metrics.chunks(MAX_METRICS) {
            self.ok("runs/log-batch", &json!({"run_id": run, "metrics": chunk})).await?;
        }
        Ok(())
    }

    async fn finish(&mut self, end: End) -> Result<(), SinkError> {
        let status = match end {
            End::Finished => "FINISHED",
            End::Failed => "FAILED",
            End::Interrupted => "KILLED",
        };
        self.set_status(status, true).await
    }

    fn starts_over(&self) -> bool {
        self.moved
    }

    fn state(&self) -> Value {
        serde_json::to_value(&self.state).expect("state serialises")
    }

    fn location(&self) -> String {
        format!("experiment `{}` at {}", self.experiment, self.state.tracking_uri)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_the_flattened_spec() {
        let mut out = vec![];
        flatten("", &json!({"name": "x", "grpo": {"group_size": 8, "loss": {"kind": "ppo"}}, "eval": {"k": [1, 5]}, "d": null}), &mut out);
        assert_eq!(
            out,
            vec![("name".into(), "x".into()), ("grpo.group_size".into(), "8".into()), ("grpo.loss.kind".into(), "ppo".into()), ("eval.k".into(), "[1,5]".into())]
        );
        assert_eq!(metric_value(f64::NAN), json!("NaN"));
        assert_eq!(metric_value(0.5), json!(0.5));
        assert_eq!(metric_name("eval/pass@10"), "eval/pass_at_10");
        assert_eq!(metric_name("train/loss"), "train/loss");
        assert_eq!(metric_name("a+b"), "a_b");
    }
}
