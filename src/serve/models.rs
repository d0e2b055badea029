//! The model registry: the served base model (its files, the names clients may call it, the
//! tokenizer directory `get_info` names) and the training models clients create, each a local
//! trainer behind the [`Trainer`] seam.
//!
//! Ordering: each training model has one task that owns a reorder buffer and hands requests to
//! the trainer strictly in `seq_id` order (1, 2, 3, ...), waiting for a missing id as Tinker's
//! server does (§4: "missing reserved IDs cannot be skipped"). Handing a request over *submits*
//! it (the seam's methods queue on the trainer's thread when called), so execution order is
//! submission order however the replies are awaited.
//!
//! Checkpoints: `tinker://<model_id>/weights/<name>` is `<state_dir>/<model_id>/weights/<name>`
//! (a local trainer state: weights and Adam moments), `sampler_weights` likewise;
//! `external_weights/<name>` is a PEFT adapter directory (what `save_weights_external` writes
//! and signed URLs serve). Each model directory holds `model.json` (base model, LoRA layout) so
//! a checkpoint can be reopened after a restart. A checkpoint with a TTL has its expiry beside
//! it (`.<name>.expires`, Unix seconds); once past it the checkpoint is deleted when next looked
//! at, so it is gone for every endpoint at once.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::mpsc;

use crate::backend::{self, Policy, Sampler, Trainer, local};
use crate::seam::{Finetune, LoraConfig, StateRef};
use crate::tinker::{CheckpointKind, TinkerPath};

/// The served base model.
#[derive(Debug, Clone)]
pub(crate) struct Base {
    /// The located model (GGUF file or HF directory).
    pub path: PathBuf,
    /// Names a client may pass as `base_model` (the first is the canonical one).
    pub names: Vec<String>,
    /// A Hugging Face tokenizer directory that `AutoTokenizer.from_pretrained` loads offline.
    pub tokenizer_dir: PathBuf,
    /// The EOS token ids (the default stop of `asample`).
    pub eos: Vec<u32>,
}

impl Base {
    /// Reads the model's tokenizer files (not its weights) and writes the tokenizer directory
    /// under `state_dir/tokenizer`.
    ///
    /// # Errors
    /// Unreadable model files, a model without a tokenizer, a state directory whose path
    /// contains `:` (the SDK cuts `tokenizer_id` at the first `:`), I/O failures.
    pub(crate) fn prepare(path: PathBuf, names: Vec<String>, state_dir: &Path) -> Result<Self, backend::Error> {
        let dir = state_dir.join("tokenizer");
        if dir.to_string_lossy().contains(':') {
            return Err(backend::Error::InvalidArgument {
                what: "state directory",
                reason: format!("`{}` contains `:`, which the Tinker SDK cuts tokenizer ids at; choose another `--state-dir`", state_dir.display()),
            });
        }
        let files = crate::prompt::model_files::read(&path).map_err(|e| backend::Error::Model { path: path.clone(), reason: e.to_string() })?;
        let tokenizer = files.tokenizer.ok_or_else(|| backend::Error::Model { path: path.clone(), reason: "has no tokenizer".into() })?;
        let eos: Vec<u32> = files.special.eos_token.iter().filter_map(|t| tokenizer.token_to_id(t)).collect();
        write_tokenizer_dir(&dir, &tokenizer, &files.special, files.chat_template.as_deref())?;
        Ok(Base { path, names, tokenizer_dir: dir, eos })
    }

    /// Checks that `name` is one of the served names.
    ///
    /// # Errors
    /// A message naming the served names.
    pub(crate) fn check_name(&self, name: &str) -> Result<(), String> {
        if self.names.iter().any(|n| n == name) {
            Ok(())
        } else {
            let list = self.names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
            Err(format!("base model `{name}` is not served here; this `rlx serve` serves {list} (choose with `--model` and `--name`)"))
        }
    }
}

/// Writes `tokenizer.json` and a `tokenizer_config.json` naming the fast tokenizer class, so
/// `transformers.AutoTokenizer` loads the directory without a `config.json` or the network.
fn write_tokenizer_dir(dir: &Path, tok: &tokenizers::Tokenizer, special: &crate::prompt::chat::SpecialTokens, chat_template: Option<&str>) -> Result<(), backend::Error> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| backend::Error::Io { action: "write", path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let tp = dir.join("tokenizer.json");
    tok.save(&tp, false).map_err(|e| backend::Error::Tokenizer(format!("cannot write `{}`: {e}", tp.display())))?;
    let mut cfg = serde_json::Map::new();
    cfg.insert("tokenizer_class".into(), "PreTrainedTokenizerFast".into());
    for (k, v) in [("bos_token", &special.bos_token), ("eos_token", &special.eos_token), ("pad_token", &special.pad_token), ("unk_token", &special.unk_token)] {
        if let Some(v) = v {
            cfg.insert(k.into(), v.clone().into());
        }
    }
    if let Some(t) = chat_template {
        cfg.insert("chat_template".into(), t.into());
    }
    let cp = dir.join("tokenizer_config.json");
    std::fs::write(&cp, serde_json::Value::Object(cfg).to_string()).map_err(io(&cp))
}

/// `model.json` of a training model's directory.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Meta {
    /// The model id (`<session>:train:<n>`).
    pub model_id: String,
    /// The base model name the client gave.
    pub base_model: String,
    /// The adapter layout (what a checkpoint must be reopened with).
    pub lora: LoraConfig,
    /// Adapter initialisation seed.
    pub seed: u64,
    /// `user_metadata` of the request that created it, returned by `GET /training_runs/{id}`.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub user_metadata: serde_json::Map<String, serde_json::Value>,
}

/// A job for a training model: called with the model's trainer (or why it failed to open), in
/// `seq_id` order.
pub(crate) type Job = Box<dyn FnOnce(&Result<Arc<dyn Trainer>, String>) + Send>;

/// A training model.
pub(crate) struct TrainingModel {
    /// Its facts.
    pub meta: Meta,
    jobs: mpsc::UnboundedSender<(u64, Job)>,
}

impl TrainingModel {
    /// Queues `job` as request `seq_id` (≥ 1).
    pub(crate) fn enqueue(&self, seq_id: u64, job: Job) {
        // The task lives as long as the registry holds this model; a send can only fail after
        // shutdown, when nobody waits for the reply either.
        let _ = self.jobs.send((seq_id, job));
    }
}

/// How a new training model starts.
#[derive(Debug, Clone)]
pub(crate) enum Start {
    /// Fresh adapters (`create_model`).
    Fresh,
    /// From a checkpoint directory (`load_weights` create-via-load).
    From(PathBuf),
}

/// Base model, training models, and samplers of saved weights.
pub(crate) struct Registry {
    /// The served base model.
    pub base: Base,
    state_dir: PathBuf,
    threads: Option<usize>,
    /// Never held across an `.await`.
    models: Mutex<HashMap<String, Arc<TrainingModel>>>,
    /// Samplers of saved paths (and of the base model, under its name), opened once.
    samplers: tokio::sync::Mutex<HashMap<String, Arc<dyn Sampler>>>,
}

impl Registry {
    /// A registry serving `base`, writing checkpoints under `state_dir`.
    pub(crate) fn new(base: Base, state_dir: PathBuf, threads: Option<usize>) -> Self {
        Registry { base, state_dir, threads, models: Mutex::default(), samplers: tokio::sync::Mutex::default() }
    }

    /// The directory of model `model_id`.
    pub(crate) fn model_dir(&self, model_id: &str) -> PathBuf {
        self.state_dir.join("models").join(model_id)
    }

    /// Where a `tinker://` path lives on disk.
    pub(crate) fn checkpoint_dir(&self, p: &TinkerPath) -> PathBuf {
        self.model_dir(&p.training_run_id).join(p.kind.segment()).join(&p.name)
    }

    /// The `model.json` of the model that wrote `p`.
    ///
    /// # Errors
    /// A path this state directory has no checkpoint for.
    pub(crate) fn meta_of(&self, p: &TinkerPath) -> Result<Meta, String> {
        if !self.exists(p) {
            return Err(format!("no checkpoint `{p}` in this server's state directory `{}`", self.state_dir.display()));
        }
        if p.kind == CheckpointKind::External {
            return Err(format!("`{p}` is external weights (Hugging Face files to download): it cannot be trained or sampled from; use the `weights/` or `sampler_weights/` checkpoint it was exported from"));
        }
        let mp = self.model_dir(&p.training_run_id).join("model.json");
        let text = std::fs::read_to_string(&mp).map_err(|e| format!("cannot read `{}`: {e}", mp.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("`{}` is not a model description: {e}", mp.display()))
    }

    /// Whether checkpoint `p` is there and has not expired (an expired one is deleted now).
    pub(crate) fn exists(&self, p: &TinkerPath) -> bool {
        let dir = self.checkpoint_dir(p);
        let there = match p.kind {
            CheckpointKind::State | CheckpointKind::Sampler => dir.join("state.json").is_file(),
            // Written through a staging directory: present means complete.
            CheckpointKind::External => dir.is_dir(),
        };
        if there && self.expires_at(p).is_some_and(|t| t <= SystemTime::now()) {
            tracing::info!("checkpoint `{p}` expired; deleting it");
            let _ = self.delete(p);
            return false;
        }
        there
    }

    fn expiry_file(&self, p: &TinkerPath) -> PathBuf {
        self.model_dir(&p.training_run_id).join(p.kind.segment()).join(format!(".{}.expires", p.name))
    }

    /// When checkpoint `p` expires (`None`: never).
    pub(crate) fn expires_at(&self, p: &TinkerPath) -> Option<SystemTime> {
        let secs: u64 = std::fs::read_to_string(self.expiry_file(p)).ok()?.trim().parse().ok()?;
        Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs))
    }

    /// Sets (or, with `None`, removes) the expiry of `p`.
    ///
    /// # Errors
    /// I/O failures.
    pub(crate) fn set_expiry(&self, p: &TinkerPath, at: Option<SystemTime>) -> std::io::Result<()> {
        let f = self.expiry_file(p);
        match at {
            Some(t) => std::fs::write(&f, t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs().to_string()),
            None if f.exists() => std::fs::remove_file(&f),
            None => Ok(()),
        }
    }

    /// Deletes checkpoint `p` (its files and its expiry); whether it was there.
    ///
    /// # Errors
    /// I/O failures.
    pub(crate) fn delete(&self, p: &TinkerPath) -> std::io::Result<bool> {
        let dir = self.checkpoint_dir(p);
        let _ = std::fs::remove_file(self.expiry_file(p));
        if !dir.exists() {
            return Ok(false);
        }
        std::fs::remove_dir_all(&dir)?;
        Ok(true)
    }

    /// The checkpoints of kind `kind` of model `model_id` that exist: `(written, name, bytes)`,
    /// oldest first.
    pub(crate) fn list(&self, model_id: &str, kind: CheckpointKind) -> Vec<(SystemTime, String, u64)> {
        let dir = self.model_dir(model_id).join(kind.segment());
        let mut found: Vec<(SystemTime, String, u64)> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            // Hidden entries are expiry files and staging directories.
            .filter(|name| !name.starts_with('.'))
            .filter(|name| self.exists(&TinkerPath { training_run_id: model_id.to_string(), kind, name: name.clone() }))
            .map(|name| {
                let path = dir.join(&name);
                let written = std::fs::metadata(&path).and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH);
                (written, name, size(&path))
            })
            .collect();
        found.sort();
        found
    }

    /// A training model.
    pub(crate) fn get(&self, model_id: &str) -> Option<Arc<TrainingModel>> {
        self.models.lock().unwrap_or_else(|e| e.into_inner()).get(model_id).cloned()
    }

    /// Creates training model `meta.model_id` and starts its task; `created` is called once the
    /// trainer is open (or failed to open). A model id that exists is left alone (`None`).
    pub(crate) fn create(&self, meta: Meta, start: Start, created: impl FnOnce(Result<(), String>) + Send + 'static) -> Option<Arc<TrainingModel>> {
        let mut models = self.models.lock().unwrap_or_else(|e| e.into_inner());
        if models.contains_key(&meta.model_id) {
            return None;
        }
        let dir = self.model_dir(&meta.model_id);
        let (jobs, rx) = mpsc::unbounded_channel();
        let model = Arc::new(TrainingModel { meta: meta.clone(), jobs });
        models.insert(meta.model_id.clone(), model.clone());
        let open = open_trainer(self.base.path.clone(), meta.lora.clone(), meta.seed, dir.clone(), self.threads);
        tokio::spawn(async move {
            let trainer = async {
                std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
                let text = serde_json::to_string_pretty(&meta).expect("meta serialises");
                std::fs::write(dir.join("model.json"), text).map_err(|e| format!("cannot write `{}`: {e}", dir.join("model.json").display()))?;
                let t = open.await.map_err(|e| e.to_string())?;
                if let Start::From(p) = &start {
                    t.load_state(&StateRef::local(p)).await.map_err(|e| e.to_string())?;
                }
                Ok::<_, String>(t)
            }
            .await;
            created(trainer.as_ref().map(|_| ()).map_err(Clone::clone));
            sequence(trainer, rx).await;
        });
        Some(model)
    }

    /// A sampler over saved weights at `p` (opened once, then shared).
    ///
    /// # Errors
    /// An unknown checkpoint, a model that does not load, a state that does not match.
    pub(crate) async fn sampler_of_path(&self, p: &TinkerPath) -> Result<Arc<dyn Sampler>, String> {
        let key = p.to_string();
        let mut samplers = self.samplers.lock().await;
        if let Some(s) = samplers.get(&key) {
            return Ok(s.clone());
        }
        let meta = self.meta_of(p)?;
        let scratch = self.state_dir.join("scratch");
        let t = open_trainer(self.base.path.clone(), meta.lora, meta.seed, scratch, self.threads).await.map_err(|e| e.to_string())?;
        t.load_state(&StateRef::local(&self.checkpoint_dir(p))).await.map_err(|e| e.to_string())?;
        let s = t.sampler().await.map_err(|e| e.to_string())?;
        samplers.insert(key, s.clone());
        Ok(s)
    }

    /// Remembers the sampler of a path just saved (so sampling it needs no reload).
    pub(crate) async fn remember_sampler(&self, p: &TinkerPath, s: Arc<dyn Sampler>) {
        self.samplers.lock().await.insert(p.to_string(), s);
    }

    /// A sampler over the base model's weights (rank-1 adapters start at zero, so it is the
    /// base model).
    ///
    /// # Errors
    /// A model that does not load.
    pub(crate) async fn base_sampler(&self) -> Result<Arc<dyn Sampler>, String> {
        let key = format!("base:{}", self.base.names[0]);
        let mut samplers = self.samplers.lock().await;
        if let Some(s) = samplers.get(&key) {
            return Ok(s.clone());
        }
        let t = open_trainer(self.base.path.clone(), LoraConfig::all_linear(1), 0, self.state_dir.join("scratch"), self.threads).await.map_err(|e| e.to_string())?;
        let s = t.sampler().await.map_err(|e| e.to_string())?;
        samplers.insert(key, s.clone());
        Ok(s)
    }
}

/// The bytes of the files under `dir`.
fn size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => size(&e.path()),
            _ => e.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
}

/// The adapter layout for Tinker's `lora_config`: attention and/or MLP projections. rlx puts no
/// adapter on the unembedding, so `train_unembed` alone is refused and otherwise ignored.
///
/// # Errors
/// Neither attention nor MLP chosen, or rank 0.
pub(crate) fn lora_of(c: &crate::tinker::wire::LoraConfig) -> Result<LoraConfig, String> {
    if c.rank == 0 {
        return Err("`lora_config.rank` must be at least 1".into());
    }
    let mut targets = vec![];
    if c.train_attn {
        targets.extend(["q_proj", "k_proj", "v_proj", "o_proj"]);
    }
    if c.train_mlp {
        targets.extend(["gate_proj", "up_proj", "down_proj"]);
    }
    if targets.is_empty() {
        return Err("`lora_config` must train attention or MLP layers (rlx has no adapter on the unembedding alone)".into());
    }
    let mut l = LoraConfig::all_linear(c.rank as usize);
    l.targets = targets.into_iter().map(String::from).collect();
    Ok(l)
}

async fn open_trainer(path: PathBuf, lora: LoraConfig, seed: u64, state_dir: PathBuf, threads: Option<usize>) -> Result<Arc<dyn Trainer>, backend::Error> {
    // f32 sampling: a Tinker client compares sampler and trainer log-probabilities, and the
    // server is a test double of a GPU service, not a throughput path.
    let options = local::Options { threads, max_tokens_per_microbatch: crate::spec::defaults::MAX_TOKENS_PER_MICROBATCH as usize, sample_weights: local::SampleWeights::F32, learner_temperature: 1.0, seed, state_dir };
    match local::open(path, &Finetune::Lora(lora), options).await? {
        Policy::Trainable(t) => Ok(t),
        Policy::Fixed(_) => Err(backend::Error::CannotTrain { kind: "local" }),
    }
}

/// Runs a model's jobs in `seq_id` order, starting at 1; a job waits for its predecessors.
async fn sequence(trainer: Result<Arc<dyn Trainer>, String>, mut rx: mpsc::UnboundedReceiver<(u64, Job)>) {
    let mut next = 1u64;
    let mut waiting: BTreeMap<u64, Job> = BTreeMap::new();
    while let Some((seq, job)) = rx.recv().await {
        if seq < next {
            // Cannot happen (duplicates are answered before they get here); run it rather than
            // park it forever.
            tracing::warn!(seq, next, "a training request arrived after its turn");
            job(&trainer);
            continue;
        }
        waiting.insert(seq, job);
        while let Some(job) = waiting.remove(&next) {
            job(&trainer);
            next += 1;
        }
        if !waiting.is_empty() {
            tracing::debug!(next, waiting = waiting.len(), "waiting for a missing seq_id");
        }
    }
}
