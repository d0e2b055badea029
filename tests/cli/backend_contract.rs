//! The backend contract suite (`rlx::backend::contract`) on the local backend, through the same
//! async seams the engine uses: full fine-tuning and LoRA, Llama and Qwen3 tiny models.

use std::path::PathBuf;

use candle_core::DType;
use rlx::backend::contract::{Fixture, check_sampler, check_trainer};
use rlx::backend::local::model::{Arch, Tuning, random_weights};
use rlx::backend::local::{LocalTrainer, LoraConfig, TrainerOptions, policy_of};

use crate::trainer::tiny_config;

fn fixture(vocab_size: usize) -> Fixture {
    Fixture { prompts: vec![vec![2, 3, 4], vec![5, 6, 7, 8, 9, 10]], vocab_size, stop_token: 1, max_tokens: 6 }
}

async fn contract(arch: Arch, tuning: Tuning) {
    let cfg = tiny_config(arch);
    let vocab = cfg.vocab_size;
    let w = random_weights(&cfg, 0.2, 3, DType::F32).unwrap();
    let trainer = LocalTrainer::from_weights(cfg, w, None, TrainerOptions { tuning, seed: 3, max_tokens_per_microbatch: 4096, ..Default::default() }, PathBuf::from("random")).unwrap();
    let states = tempfile::tempdir().unwrap();
    let policy = policy_of(trainer, states.path().to_path_buf()).await.unwrap();
    let sampler = policy.sampler().await.unwrap();
    check_sampler(&*sampler, &fixture(vocab)).await.unwrap_or_else(|e| panic!("{arch:?} sampler: {e}: {:?}", std::error::Error::source(&e)));
    let trainer = policy.trainer().expect("the local backend trains");
    check_trainer(&**trainer, &fixture(vocab)).await.unwrap_or_else(|e| panic!("{arch:?} trainer: {e}: {:?}", std::error::Error::source(&e)));
    // States are local directories under the state directory, named as asked.
    assert!(states.path().join("contract-0").is_dir());
    assert!(states.path().join("contract-1").is_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_backend_full_finetune_meets_the_contract() {
    contract(Arch::Qwen3, Tuning::Full).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_backend_lora_meets_the_contract() {
    contract(Arch::Llama, Tuning::Lora(LoraConfig::all_linear(4))).await;
}
