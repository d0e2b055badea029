//! The test-only backend the engine's tests drive (`seams`, `health`, `variants`): a
//! [`Scripted`] sampler, whose completions a script decides from the problem a prompt asks for
//! (one of `experiments/data/easy_python_*.jsonl`), and a [`Recorder`] trainer, which trains
//! nothing, records what it was sent and reports scripted numbers. Each test file keeps only
//! what its script decides (which answer, which numbers) and what it reads back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rlx::backend::{Pending, Sampler, Trainer};
use rlx::seam::{AdamParams, Datum, DatumOutput, ForwardBackwardOutput, LossFn, LossStats, OptimStepOutput, SampleRequest, SampledSequence, SamplingParams, StateRef, StopReason};
use serde_json::Value;

use crate::common::{TestContext, repo};

/// One problem of the scripted data.
pub(crate) struct Problem {
    /// The statement, as the prompt carries it.
    pub(crate) statement: String,
    /// The reference solution.
    pub(crate) solution: String,
    /// From the eval file (`easy_python_eval.jsonl`) rather than the training file.
    pub(crate) eval: bool,
}

/// The scripted data and the tiny model's tokenizer (`cx`'s `tiny/`).
pub(crate) struct Problems {
    tokenizer: tokenizers::Tokenizer,
    pub(crate) rows: Vec<Problem>,
}

impl Problems {
    /// The training file's problems, then, with `with_eval`, the eval file's; tokenized with the
    /// tiny model under `dir` (a test's directory, or a child process's).
    pub(crate) fn load_in(dir: &std::path::Path, with_eval: bool) -> Problems {
        let tokenizer = tokenizers::Tokenizer::from_file(dir.join("tiny/tokenizer.json")).unwrap();
        let mut rows = vec![];
        let files: &[(&str, bool)] = if with_eval { &[("easy_python_train.jsonl", false), ("easy_python_eval.jsonl", true)] } else { &[("easy_python_train.jsonl", false)] };
        for &(file, eval) in files {
            for line in std::fs::read_to_string(repo().join("experiments/data").join(file)).unwrap().lines() {
                let v: Value = serde_json::from_str(line).unwrap();
                rows.push(Problem { statement: v["text"].as_str().unwrap().to_string(), solution: v["code"].as_str().unwrap().to_string(), eval });
            }
        }
        Problems { tokenizer, rows }
    }

    /// `prompt` decoded.
    pub(crate) fn text(&self, prompt: &[u32]) -> String {
        self.tokenizer.decode(prompt, false).unwrap()
    }

    /// The index of the problem `prompt` asks for.
    pub(crate) fn index(&self, prompt: &[u32]) -> usize {
        let text = self.tokenizer.decode(prompt, false).unwrap();
        self.rows.iter().position(|p| text.contains(p.statement.as_str())).expect("a known problem")
    }

    /// `text` as sampled: its tokens, `<|im_end|>` (the engine's stop token) when it stopped,
    /// and `logprob` for every token.
    pub(crate) fn sequence(&self, text: &str, stop_reason: StopReason, logprob: f32) -> SampledSequence {
        let mut tokens = self.tokenizer.encode(text, false).unwrap().get_ids().to_vec();
        if stop_reason == StopReason::Stop {
            tokens.push(1);
        }
        SampledSequence { logprobs: vec![logprob; tokens.len()], tokens, stop_reason }
    }
}

/// A trainer's saved states: `scripted://<name>` with the optimizer step each was saved at; kept
/// in a file too when [`States::persisted`], so that a process killed and started again resumes.
#[derive(Default)]
pub(crate) struct States(Mutex<HashMap<String, u64>>, Option<std::path::PathBuf>);

impl States {
    /// The states saved in `file` by an earlier process, and saved there from now on.
    pub(crate) fn persisted(file: std::path::PathBuf) -> States {
        let saved = std::fs::read(&file).ok().map(|b| serde_json::from_slice(&b).unwrap()).unwrap_or_default();
        States(Mutex::new(saved), Some(file))
    }

    /// Saves `name` at `step`.
    pub(crate) fn save(&self, name: &str, step: u64) -> Pending<StateRef> {
        let uri = format!("scripted://{name}");
        let mut states = self.0.lock().unwrap();
        states.insert(uri.clone(), step);
        if let Some(file) = &self.1 {
            // Written whole and renamed: a kill mid-write leaves the last complete file.
            let tmp = file.with_extension("tmp");
            std::fs::write(&tmp, serde_json::to_vec(&*states).unwrap()).unwrap();
            std::fs::rename(&tmp, file).unwrap();
        }
        drop(states);
        Box::pin(async move { Ok(StateRef(uri)) })
    }

    /// The step `state` was saved at (`None`: never saved), and the reply to give the engine:
    /// an unknown state is an error, as a real trainer's.
    pub(crate) fn load(&self, state: &StateRef) -> (Option<u64>, Pending<()>) {
        let found = self.0.lock().unwrap().get(&state.0).copied();
        (found, Box::pin(async move { found.map(|_| ()).ok_or_else(|| rlx::backend::Error::InvalidArgument { what: "state", reason: "unknown".into() }) }))
    }
}

/// Counts requests in flight (submitted, reply not yet taken) and remembers the most at once.
#[derive(Default)]
pub(crate) struct InFlight {
    now: AtomicUsize,
    max: AtomicUsize,
}

impl InFlight {
    fn enter(&self) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(n, Ordering::SeqCst);
    }
    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
    /// The most requests seen in flight at once.
    pub(crate) fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }
}

/// One completion to script.
pub(crate) struct Call {
    /// The training step being sampled (for an eval, the last step sampled): training sample
    /// calls so far, one call per step at these tests' sizes.
    pub(crate) step: usize,
    /// Whether every prompt of the call is an eval problem.
    pub(crate) eval: bool,
    /// Whether it is a greedy eval's (an eval at temperature 0).
    pub(crate) greedy: bool,
    /// The problem's index in [`Problems::rows`].
    pub(crate) problem: usize,
    /// Which of the request's completions (0..num_samples).
    pub(crate) sample: usize,
    /// The request's seed.
    pub(crate) seed: Option<u64>,
    /// The prompt, decoded (a later turn's holds the earlier turns and what followed them).
    pub(crate) prompt: String,
}

/// Decides a completion: its text and how it stopped.
pub(crate) type Script = dyn Fn(&Problems, &Call) -> (String, StopReason) + Send + Sync;

/// A sampler whose completions a [`Script`] decides; every token has the log-probability
/// `logprob(step)`. Each reply is ready one scheduler turn after it was submitted, so requests
/// in flight can be observed.
pub(crate) struct Scripted {
    pub(crate) problems: Problems,
    script: Box<Script>,
    logprob: fn(usize) -> f32,
    max_in_flight: usize,
    /// Training sample calls so far.
    pub(crate) steps: AtomicUsize,
    /// Sample calls so far, evals included.
    pub(crate) calls: AtomicUsize,
    /// The problem of every request, in order.
    pub(crate) asked: Mutex<Vec<usize>>,
    pub(crate) in_flight: Arc<InFlight>,
}

impl Scripted {
    /// On the training file's problems, then with `with_eval` the eval file's; log-probability
    /// -0.5, 2 calls worth keeping in flight (the seam's default).
    pub(crate) fn new(cx: &TestContext, with_eval: bool, script: impl Fn(&Problems, &Call) -> (String, StopReason) + Send + Sync + 'static) -> Scripted {
        Scripted::new_in(cx.path(), with_eval, script)
    }

    /// As [`Scripted::new`], with the tiny model under `dir`.
    pub(crate) fn new_in(dir: &std::path::Path, with_eval: bool, script: impl Fn(&Problems, &Call) -> (String, StopReason) + Send + Sync + 'static) -> Scripted {
        Scripted {
            problems: Problems::load_in(dir, with_eval),
            script: Box::new(script),
            logprob: |_| -0.5,
            max_in_flight: 2,
            steps: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
            asked: Mutex::default(),
            in_flight: Arc::default(),
        }
    }

    /// Each token's log-probability by step (the sampler's entropy estimate).
    pub(crate) fn logprob(self, logprob: fn(usize) -> f32) -> Scripted {
        Scripted { logprob, ..self }
    }

    /// How many calls the engine should keep in flight.
    pub(crate) fn max_in_flight(self, max_in_flight: usize) -> Scripted {
        Scripted { max_in_flight, ..self }
    }
}

impl Sampler for Scripted {
    fn sample(&self, requests: Vec<SampleRequest>, params: &SamplingParams) -> Pending<Vec<Vec<SampledSequence>>> {
        // Submitted now: counted as in flight until the reply is taken.
        self.in_flight.enter();
        self.calls.fetch_add(1, Ordering::SeqCst);
        let idx: Vec<usize> = requests.iter().map(|r| self.problems.index(&r.prompt)).collect();
        self.asked.lock().unwrap().extend(&idx);
        let eval = idx.iter().all(|&i| self.problems.rows[i].eval);
        let step = if eval { self.steps.load(Ordering::SeqCst).saturating_sub(1) } else { self.steps.fetch_add(1, Ordering::SeqCst) };
        let out = requests
            .iter()
            .zip(&idx)
            .map(|(r, &problem)| {
                let greedy = eval && r.params(params).temperature == 0.0;
                let prompt = self.problems.text(&r.prompt);
                (0..r.num_samples)
                    .map(|sample| {
                        let (text, stop_reason) = (self.script)(&self.problems, &Call { step, eval, greedy, problem, sample, seed: r.seed, prompt: prompt.clone() });
                        self.problems.sequence(&text, stop_reason, (self.logprob)(step))
                    })
                    .collect()
            })
            .collect();
        let in_flight = self.in_flight.clone();
        Box::pin(async move {
            tokio::task::yield_now().await;
            in_flight.leave();
            Ok(out)
        })
    }
    fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }
}

/// What the trainer reports for its `n`th optimizer step (from 0, counted on this trainer
/// object, resumes included): the loss and loss statistics of the `forward_backward` before it,
/// and the gradient norm (`None`: the backend reports none).
pub(crate) struct Reported {
    pub(crate) loss: f64,
    pub(crate) stats: LossStats,
    pub(crate) grad_norm: Option<f64>,
}

/// The numbers of each optimizer step.
pub(crate) type Numbers = dyn Fn(usize) -> Reported + Send + Sync;

/// Each datum's (sampler log-probabilities, advantages) as one `forward_backward` received them.
pub(crate) type Received = Vec<(Vec<f32>, Vec<f32>)>;

/// A trainer that trains nothing: records every request (`log`, `datums`, `inputs`), reports
/// [`Numbers`], keeps states by name with the optimizer step each was saved at, and samples
/// with its [`Scripted`] sampler. Each reply is ready one scheduler turn after it was submitted.
pub(crate) struct Recorder {
    sampler: Arc<Scripted>,
    numbers: Box<Numbers>,
    remote: bool,
    /// `forward_backward N LOSS`, `optim_step LR`, `save_state NAME`, `load_state URI`.
    pub(crate) log: Mutex<Vec<String>>,
    /// Datums per `forward_backward`.
    pub(crate) datums: Mutex<Vec<usize>>,
    pub(crate) inputs: Mutex<Vec<Received>>,
    pub(crate) in_flight: Arc<InFlight>,
    /// `optim_step` calls on this object: the index into `numbers`.
    calls: AtomicUsize,
    /// The optimizer step (restored by `load_state`).
    steps: Mutex<u64>,
    states: States,
}

impl Recorder {
    /// A local trainer (the engine samples one step ahead) reporting loss 1, default loss
    /// statistics and gradient norm 0.5 at every step.
    pub(crate) fn new(sampler: Arc<Scripted>) -> Recorder {
        Recorder {
            sampler,
            numbers: Box::new(|_| Reported { loss: 1.0, stats: LossStats::default(), grad_norm: Some(0.5) }),
            remote: false,
            log: Mutex::default(),
            datums: Mutex::default(),
            inputs: Mutex::default(),
            in_flight: Arc::default(),
            calls: AtomicUsize::new(0),
            steps: Mutex::default(),
            states: States::default(),
        }
    }

    /// Saves its states in `file` too, and starts from those saved there (a killed process's).
    pub(crate) fn persisting(self, file: std::path::PathBuf) -> Recorder {
        Recorder { states: States::persisted(file), ..self }
    }

    /// A remote service's trainer: the engine streams groups k steps deep.
    pub(crate) fn remote(self) -> Recorder {
        Recorder { remote: true, ..self }
    }

    /// Reports `numbers` instead.
    pub(crate) fn numbers(self, numbers: impl Fn(usize) -> Reported + Send + Sync + 'static) -> Recorder {
        Recorder { numbers: Box::new(numbers), ..self }
    }

    /// A reply ready one scheduler turn after it was submitted (in flight until then).
    fn reply<T: Send + 'static>(&self, value: T) -> Pending<T> {
        self.in_flight.enter();
        let in_flight = self.in_flight.clone();
        Box::pin(async move {
            tokio::task::yield_now().await;
            in_flight.leave();
            Ok(value)
        })
    }
}

impl Trainer for Recorder {
    fn runs_elsewhere(&self) -> bool {
        self.remote
    }
    fn forward_backward(&self, data: Vec<Datum>, loss: LossFn) -> Pending<ForwardBackwardOutput> {
        self.log.lock().unwrap().push(format!("forward_backward {} {}", data.len(), loss.name()));
        self.datums.lock().unwrap().push(data.len());
        let inputs = data.iter().map(|d| (d.loss_fn_inputs.logprobs.clone().unwrap_or_default(), d.loss_fn_inputs.advantages.clone().unwrap_or_default())).collect();
        self.inputs.lock().unwrap().push(inputs);
        let Reported { loss, stats, .. } = (self.numbers)(self.calls.load(Ordering::SeqCst));
        let outputs = data.iter().map(|d| DatumOutput { logprobs: vec![-0.5; d.model_input.len()] }).collect();
        self.reply(ForwardBackwardOutput { loss, outputs, stats })
    }
    fn optim_step(&self, adam: AdamParams) -> Pending<OptimStepOutput> {
        self.log.lock().unwrap().push(format!("optim_step {}", adam.learning_rate));
        let grad_norm = (self.numbers)(self.calls.fetch_add(1, Ordering::SeqCst)).grad_norm;
        let step = {
            let mut s = self.steps.lock().unwrap();
            *s += 1;
            *s
        };
        self.reply(OptimStepOutput { grad_norm, clipped: false, step, metrics: Default::default() })
    }
    fn save_state(&self, name: &str) -> Pending<StateRef> {
        self.log.lock().unwrap().push(format!("save_state {name}"));
        self.states.save(name, *self.steps.lock().unwrap())
    }
    fn load_state(&self, state: &StateRef) -> Pending<()> {
        self.log.lock().unwrap().push(format!("load_state {state}"));
        let (found, reply) = self.states.load(state);
        if let Some(s) = found {
            *self.steps.lock().unwrap() = s;
        }
        reply
    }
    fn sampler(&self) -> Pending<Arc<dyn Sampler>> {
        let s: Arc<dyn Sampler> = self.sampler.clone();
        Box::pin(async move { Ok(s) })
    }
}
