//! [`OpenaiSampler`]: the [`Sampler`] seam over an OpenAI-compatible server.
//!
//! Every completion is its own request with its own seed, derived from the prompt's seed and
//! the completion's index: `n > 1` in one request is not seeded per completion by every server
//! (llama-cpp-python ignores `n`), and one request per completion lets the concurrency limit,
//! not the batch shape, decide how many sequences the server decodes at once. Requests are
//! spawned when [`Sampler::sample`] is called, so batches the engine queues overlap.
//!
//! Log-probabilities are whatever the server reports for the sampled tokens: vLLM's and
//! llama-cpp-python's are of the model's distribution before temperature; llama-server's are of
//! the distribution its sampler drew from. Nothing trains on them (the backend cannot train), so
//! they are recorded, not relied on. Chat completions have none (NaN), and their tokens are our
//! encoding of the text.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::traits::{ChatRequest, Pending, Sampler};
use crate::seam::{SampleRequest, SampledSequence, SamplingParams, Stop};
use crate::prompt::{Message, Tokenizer};

use super::client::Client;
use super::tokens::Vocab;
use super::wire::{self, Dialect, Prompt, Reported};
use super::config::{Api, Config, PromptEncoding};
use super::error::Error;

/// Tokens and requests so far (per-request token accounting, summed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Completions requested and received.
    pub requests: u64,
    /// Prompt tokens the server counted.
    pub prompt_tokens: u64,
    /// Completion tokens the server counted.
    pub completion_tokens: u64,
    /// Retries after infrastructure failures.
    pub retries: u64,
}

/// A sampler on an OpenAI-compatible server.
#[derive(Debug, Clone)]
pub struct OpenaiSampler {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: Config,
    client: Client,
    dialect: Dialect,
    vocab: Vocab,
    requests: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
}

/// One completion to ask for.
struct Job {
    prompt: Vec<u32>,
    messages: Option<Vec<Message>>,
    tools: Arc<Vec<serde_json::Value>>,
    seed: Option<u64>,
}

impl OpenaiSampler {
    pub(super) fn new(config: Config, client: Client, dialect: Dialect, tokenizer: Arc<Tokenizer>) -> OpenaiSampler {
        let inner = Inner { config, client, dialect, vocab: Vocab::new(tokenizer), requests: AtomicU64::new(0), prompt_tokens: AtomicU64::new(0), completion_tokens: AtomicU64::new(0) };
        OpenaiSampler { inner: Arc::new(inner) }
    }

    /// The server's dialect, as learnt from `/v1/models`.
    pub fn dialect(&self) -> Dialect {
        self.inner.dialect
    }

    /// Requests and tokens so far.
    pub fn usage(&self) -> Usage {
        let i = &self.inner;
        Usage {
            requests: i.requests.load(Ordering::Relaxed),
            prompt_tokens: i.prompt_tokens.load(Ordering::Relaxed),
            completion_tokens: i.completion_tokens.load(Ordering::Relaxed),
            retries: i.client.retries(),
        }
    }

    fn submit(&self, batch: Vec<(SampleRequest, Option<Vec<Message>>, Vec<serde_json::Value>)>, params: &SamplingParams) -> Pending<Vec<Vec<SampledSequence>>> {
        if let Err(e) = params.validate() {
            return Box::pin(async move { Err(e.into()) });
        }
        let chat = self.inner.config.api == Api::Chat;
        // Each request's own parameters: a greedy one decodes at temperature 0.
        let mut groups: Vec<(Arc<SamplingParams>, Vec<Job>)> = Vec::with_capacity(batch.len());
        for (req, messages, tools) in batch {
            let tools = Arc::new(tools);
            if req.prompt.is_empty() {
                return Box::pin(async { Err(Error::Invalid("empty prompt".into()).into()) });
            }
            if chat && messages.is_none() {
                return Box::pin(async { Err(Error::Invalid("`backend.api: chat` samples conversations; this caller gave token prompts only".into()).into()) });
            }
            let seed = req.seed.or(params.seed);
            let jobs = (0..req.num_samples).map(|i| Job { prompt: req.prompt.clone(), messages: messages.clone(), tools: tools.clone(), seed: seed.map(|s| completion_seed(s, i as u64)) }).collect();
            groups.push((Arc::new(req.params(params).into_owned()), jobs));
        }
        let handle = tokio::runtime::Handle::try_current();
        // Spawned now, so the requests are in flight before the reply is awaited.
        let spawned: Vec<Vec<_>> = groups
            .into_iter()
            .map(|(params, jobs)| {
                jobs.into_iter()
                    .map(|job| {
                        let (inner, params) = (self.inner.clone(), params.clone());
                        let fut = async move { inner.complete(job, &params).await };
                        match &handle {
                            Ok(h) => Spawned::Task(h.spawn(fut)),
                            Err(_) => Spawned::Lazy(Box::pin(fut)),
                        }
                    })
                    .collect()
            })
            .collect();
        Box::pin(async move {
            let mut out = Vec::with_capacity(spawned.len());
            for jobs in spawned {
                let mut seqs = Vec::with_capacity(jobs.len());
                for job in jobs {
                    let seq = match job {
                        Spawned::Task(t) => t.await.map_err(|e| crate::backend::error::Error::Gone { what: "OpenAI request task", reason: e.to_string() })??,
                        Spawned::Lazy(f) => f.await?,
                    };
                    seqs.push(seq);
                }
                out.push(seqs);
            }
            Ok(out)
        })
    }
}

type Completion = Result<SampledSequence, Error>;

enum Spawned {
    Task(tokio::task::JoinHandle<Completion>),
    Lazy(std::pin::Pin<Box<dyn std::future::Future<Output = Completion> + Send>>),
}

/// The seed of completion `i` of a prompt seeded `seed` (splitmix64), in 31 bits: servers
/// store seeds as C `int`s or `uint32`s.
fn completion_seed(seed: u64, i: u64) -> u64 {
    // The first draw of the generator at `seed + i·γ` (γ its increment): the output for index i
    // of the stream seeded `seed`.
    crate::rng::SplitMix64::new(seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15))).next_u64() & 0x7FFF_FFFF
}

impl Inner {
    async fn complete(&self, job: Job, params: &SamplingParams) -> Result<SampledSequence, Error> {
        let cfg = &self.config;
        let tok = self.vocab.tokenizer();
        let mut stop_texts = vec![];
        let mut stop_ids = vec![];
        for s in &params.stop {
            match s {
                Stop::Text(t) => stop_texts.push(t.clone()),
                Stop::Token(id) => stop_ids.push(*id),
            }
        }
        let chat = cfg.api == Api::Chat;
        // The prompt length the server should count: ours, or for a text prompt our encoding of
        // the text it is sent as. Decoding and encoding again need not give the prompt's own ids
        // back (a sampled completion inside a retry turn can merge into other tokens), so
        // comparing with `job.prompt.len()` took a served model's correct count for a mismatch.
        let mut expected_prompt_tokens = job.prompt.len() as u64;
        let (path, body) = if chat {
            let messages = job.messages.as_deref().unwrap_or_default();
            ("chat/completions", wire::chat_body(&cfg.model, messages, &job.tools, params, job.seed, &stop_texts, self.dialect))
        } else {
            let prompt = match cfg.prompt {
                PromptEncoding::Tokens => Prompt::Tokens(&job.prompt),
                PromptEncoding::Text => {
                    let text = tok.decode(&job.prompt, false).map_err(|e| Error::Tokenizer(e.to_string()))?;
                    expected_prompt_tokens = tok.encode(&text).map_err(|e| Error::Tokenizer(e.to_string()))?.len() as u64;
                    Prompt::Text(text)
                }
            };
            ("completions", wire::completion_body(&cfg.model, prompt, params, job.seed, &stop_texts, &stop_ids, self.dialect))
        };
        let choice = self.client.post(path, &body, |v| wire::parse_reply(v, chat)).await?;
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.prompt_tokens.fetch_add(choice.prompt_tokens.unwrap_or(0), Ordering::Relaxed);
        self.completion_tokens.fetch_add(choice.completion_tokens.unwrap_or(0), Ordering::Relaxed);

        // The prompt the server saw must be ours (a text prompt is tokenized again; a server
        // may add a BOS token of its own).
        if !chat && let Some(n) = choice.prompt_tokens {
            let ours = expected_prompt_tokens;
            if n != ours && n != ours + 1 {
                return Err(Error::TokenMismatch { detail: format!("the server counted {n} prompt tokens, our tokenizer {ours}: is `model.base` the served model?") });
            }
        }
        // Chat replies are text: their tokens are our encoding of it, with no log-probabilities.
        let reported = if chat { Reported::None } else { choice.tokens };
        let mut tokens = self.vocab.ids(&reported, &choice.text)?;
        let mut logprobs = match reported {
            Reported::None => vec![f32::NAN; tokens.len()],
            _ => choice.logprobs,
        };
        if logprobs.len() != tokens.len() {
            return Err(Error::TokenMismatch { detail: format!("{} tokens but {} log-probabilities", tokens.len(), logprobs.len()) });
        }
        if !chat && tokens.len() > params.max_tokens {
            return Err(Error::Malformed { url: format!("{}/{path}", cfg.base_url), attempts: 1, reason: format!("{} tokens for `max_tokens` {}", tokens.len(), params.max_tokens) });
        }
        // A completion that ran into `max_tokens` ends there; one that stopped keeps what the
        // server reported (a stop token when it returns one, as vLLM does).
        let stop_reason = choice.finish;
        if let Some(i) = tokens.iter().position(|t| stop_ids.contains(t))
            && i + 1 < tokens.len()
        {
            tokens.truncate(i + 1);
            logprobs.truncate(i + 1);
        }
        Ok(SampledSequence { tokens, logprobs, stop_reason })
    }
}

impl Sampler for OpenaiSampler {
    fn sample(&self, requests: Vec<SampleRequest>, params: &SamplingParams) -> Pending<Vec<Vec<SampledSequence>>> {
        self.submit(requests.into_iter().map(|r| (r, None, vec![])).collect(), params)
    }

    fn sample_chat(&self, requests: Vec<ChatRequest>, params: &SamplingParams) -> Pending<Vec<Vec<SampledSequence>>> {
        self.submit(requests.into_iter().map(|r| (r.request, Some(r.messages), r.tools)).collect(), params)
    }

    /// Groups go one per call (see [`Sampler::batch_rows`]), so twice the concurrency of them
    /// keeps the server busy while earlier ones are graded.
    fn max_in_flight(&self) -> usize {
        2 * self.inner.config.concurrency.max(1)
    }

    fn batch_rows(&self) -> usize {
        1
    }

    fn keeps_stop_tokens(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_seeds_are_distinct_and_fit_31_bits() {
        let seeds: std::collections::BTreeSet<u64> = (0..1000).map(|i| completion_seed(7, i)).collect();
        assert_eq!(seeds.len(), 1000);
        assert!(seeds.iter().all(|&s| s < 1 << 31));
        assert_ne!(completion_seed(7, 0), completion_seed(8, 0));
    }
}
