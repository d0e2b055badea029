//! Continuous batching: every sample of a call decodes in a fixed number of cache slots, and a
//! sample that stops frees its slot for the next one at once.
//!
//! The samples to draw (request `i`, sample `k`) form one queue. Rows split into one decoding
//! group per core (as many as keep [`MIN_GROUP_ROWS`] rows each), each with its own slots,
//! taking the next samples from the shared queue as its slots free up. One group per core
//! because a decoding step of a few rows is a chain of small products that one core runs back
//! to back, where splitting every product across the cores leaves them waiting on each other
//! (with candle, 8 rows kept about 1.4 of 2 cores busy; with these kernels, one group of every
//! row with its products split made 4.33 completions/s at 32 sequences against 5.59 with a group
//! per core, and 3.87 against 5.05 at 8). A group alone (one sequence, or the last group
//! running) holds a [`Team`] of the pool's threads instead, which splits each product and the
//! attention over the cores.
//!
//! A prompt is prefilled once per group that takes its samples: its other samples copy its keys
//! and values (and the prefill's logits), and a copy is kept in the queue while samples of that
//! prompt remain to be taken, so that a slot freed later does not prefill it again. Requests with
//! the same tokens are one prompt (an eval's sampled and greedy answers, [`SampleRequest::greedy`]).
//! The beginning every prompt of the call shares (a chat template's system turn and the
//! instructions before the problem: 28 of the quickstart's 147–229 tokens) is prefilled once for
//! the call, before the groups start, and each prompt's own prefill starts where it ends.
//! Why: prefills were about a fifth of a quickstart run (the baseline eval's two passes, 60
//! prompts each, put a prefill at ~0.45 s against ~4.2 ms a decoded token), and its eval
//! prefilled every prompt twice, once per protocol; sharing both took the baseline eval from 96 s
//! to 69 s (median of five interleaved runs each, docs/learning.md).
//!
//! Sample `k` of a request draws from [`Rng::stream`]`(seed, k)` and its logits do not depend on
//! the other rows (see [`super`]), so its tokens are the same whatever the batching.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rayon::prelude::*;
use rlx_kernels::Team;

use super::cache::{Shape, Slot};
use super::forward::{Row, Scratch};
use super::weights::Decoder;
use crate::backend::local::pick::pick;
use crate::backend::error::Result;
use crate::rng::SplitMix64 as Rng;
use crate::seam::{SampleRequest, SampledSequence, SamplingParams, StopReason};

/// Rows decoded together at most (both decoding paths): past a few dozen rows a CPU step is
/// compute-bound, so more rows stop paying while their caches keep growing.
pub(crate) const MAX_ROWS: usize = 32;

/// Rows a group needs before the rows are split into one group per core.
const MIN_GROUP_ROWS: usize = 2;

/// Tokens a call's prompts must share before their common beginning is prefilled once: a
/// shorter one saves little, and its prefill holds up the call's start on one core.
const MIN_STEM: usize = 8;

/// Decoding groups for `rows` rows on `cores` cores: one per core while each keeps
/// [`MIN_GROUP_ROWS`] rows, at least one.
pub(crate) fn group_count(rows: usize, cores: usize) -> usize {
    cores.min(rows / MIN_GROUP_ROWS).max(1)
}

/// Stops a sample early on its tokens so far (stop strings).
pub(crate) type StopText<'a> = dyn Fn(&[u32]) -> Result<bool> + Sync + 'a;

/// What to sample: the requests, their seeds, and when to stop.
pub(crate) struct Job<'a> {
    pub(crate) requests: &'a [SampleRequest],
    /// The call's parameters (its length and stops for every request; each request samples
    /// with [`SampleRequest::params`]).
    pub(crate) params: &'a SamplingParams,
    /// One per request.
    pub(crate) seeds: Vec<u64>,
    pub(crate) stop_tokens: &'a [u32],
    pub(crate) stop_text: &'a StopText<'a>,
}

/// A prompt's keys and values and the logits after it.
pub(super) struct Prefix {
    slot: Slot,
    pub(super) len: usize,
    logits: Vec<f32>,
}

/// The samples not yet taken, and prefixes kept for them (by prompt, see [`Prompts`]).
struct Queue {
    items: Vec<(usize, usize)>,
    next: usize,
    prefixes: HashMap<usize, Arc<Prefix>>,
}

/// What the groups of a call share about its prompts.
pub(super) struct Prompts<'a> {
    /// Each request's sampling parameters (a greedy request's at temperature 0).
    params: Vec<Cow<'a, SamplingParams>>,
    /// Each request's prompt, named by the first request with the same tokens.
    pub(super) id: Vec<usize>,
    /// By prompt: the last queue item that samples it (a kept prefix is needed until the queue
    /// passes it).
    last_item: HashMap<usize, usize>,
    /// The keys and values of the beginning that every prompt shares, when it is worth
    /// prefilling once ([`MIN_STEM`]); shorter than every prompt, so that each prompt's own
    /// prefill has a row to take its logits from.
    pub(super) stem: Option<Prefix>,
}

impl<'a> Prompts<'a> {
    pub(super) fn new(dec: &Decoder, job: &Job<'a>, items: &[(usize, usize)]) -> Result<Self> {
        let requests = job.requests;
        let mut first: HashMap<&[u32], usize> = HashMap::new();
        let id: Vec<usize> = requests.iter().enumerate().map(|(i, r)| *first.entry(r.prompt.as_slice()).or_insert(i)).collect();
        let last_item = items.iter().enumerate().map(|(n, &(i, _))| (id[i], n)).collect();
        // Only prompts that are sampled count: a request of no samples is not prefilled.
        let mut sampled: Vec<usize> = items.iter().map(|&(i, _)| id[i]).collect();
        sampled.dedup();
        let stem = match sampled.split_first() {
            Some((&first, rest)) => {
                let p0 = &requests[first].prompt;
                let (mut common, mut shortest, distinct) = (p0.len(), p0.len(), sampled.len());
                for p in rest.iter().map(|&j| &requests[j].prompt) {
                    common = common.min(p.iter().zip(p0).take_while(|(a, b)| a == b).count());
                    shortest = shortest.min(p.len());
                }
                let len = common.min(shortest - 1);
                tracing::debug!(prompts = distinct, common, stem = len >= MIN_STEM && distinct > 1, "prompt beginnings");
                if distinct > 1 && len >= MIN_STEM { Some(Self::prefill_stem(dec, &p0[..len])?) } else { None }
            }
            None => None,
        };
        Ok(Self { params: requests.iter().map(|r| r.params(job.params)).collect(), id, last_item, stem })
    }

    /// The keys and values of `tokens`, prefilled on the calling thread: a few dozen rows,
    /// against the hundreds of every prompt's own prefill that it saves.
    fn prefill_stem(dec: &Decoder, tokens: &[u32]) -> Result<Prefix> {
        let mut slot = Slot::default();
        slot.reserve(Shape::of(dec.config()), tokens.len());
        let rows: Vec<Row> = tokens.iter().enumerate().map(|(pos, &token)| Row { slot: 0, pos, token }).collect();
        dec.forward(std::slice::from_mut(&mut slot), &rows, &[], &mut Scratch::default(), None)?;
        Ok(Prefix { slot, len: tokens.len(), logits: Vec::new() })
    }
}

/// Samples every request of `job` into `out[request][sample]`.
///
/// # Errors
/// A failing stop check or an invalid row (see [`Decoder::forward`]).
pub(crate) fn run(dec: &Decoder, job: &Job, out: &mut [Vec<SampledSequence>]) -> Result<()> {
    let items = items(job.requests);
    if items.is_empty() {
        return Ok(());
    }
    let groups = group_count(items.len(), rayon::current_num_threads());
    let slots = (MAX_ROWS / groups).min(items.len().div_ceil(groups)).max(1);
    let prompts = Prompts::new(dec, job, &items)?;
    let queue = Mutex::new(Queue { items, next: 0, prefixes: HashMap::new() });
    let running = AtomicUsize::new(groups);
    let group = |_| Group::new(dec, job, &prompts, &queue, &running, slots).run();
    // On the pool's threads even for one group: a product split from outside the pool is
    // injected and waited for on a lock (two thread hand-offs per product, hundreds per token:
    // at one sequence `perf` put 15% of the time in wake-ups and yields), where a pool thread
    // pushes the halves onto its own deque and works on one itself.
    let results: Vec<Result<Vec<Done>>> = if groups == 1 { vec![rayon::scope(|_| group(0))] } else { (0..groups).into_par_iter().map(group).collect() };
    for r in results {
        for ((i, k), seq) in r? {
            out[i][k] = seq;
        }
    }
    Ok(())
}

type Done = ((usize, usize), SampledSequence);

/// The samples to draw, `(request, sample)`, in request order.
pub(super) fn items(requests: &[SampleRequest]) -> Vec<(usize, usize)> {
    requests.iter().enumerate().flat_map(|(i, r)| (0..r.num_samples).map(move |k| (i, k))).collect()
}

/// A sample being decoded.
struct Live {
    item: (usize, usize),
    prompt_len: usize,
    max_new: usize,
    seq: SampledSequence,
    rng: Rng,
    logits: Vec<f32>,
}

struct Group<'a> {
    dec: &'a Decoder,
    job: &'a Job<'a>,
    prompts: &'a Prompts<'a>,
    queue: &'a Mutex<Queue>,
    running: &'a AtomicUsize,
    slots: Vec<Slot>,
    live: Vec<Option<Live>>,
    scratch: Scratch,
    picks: Vec<(f32, u32)>,
    done: Vec<Done>,
}

impl<'a> Group<'a> {
    fn new(dec: &'a Decoder, job: &'a Job<'a>, prompts: &'a Prompts<'a>, queue: &'a Mutex<Queue>, running: &'a AtomicUsize, slots: usize) -> Self {
        Self {
            dec,
            job,
            prompts,
            queue,
            running,
            slots: (0..slots).map(|_| Slot::default()).collect(),
            live: (0..slots).map(|_| None).collect(),
            scratch: Scratch::default(),
            picks: Vec::new(),
            done: Vec::new(),
        }
    }

    fn run(mut self) -> Result<Vec<Done>> {
        let r = self.decode();
        self.running.fetch_sub(1, Ordering::SeqCst);
        r.map(|()| self.done)
    }

    fn decode(&mut self) -> Result<()> {
        while !self.alone() {
            if !self.advance(None)? {
                return Ok(());
            }
        }
        // Alone (one sequence, or the last group still running), the group holds a team of the
        // pool's threads until it is done, so that each step's products split over the cores.
        // One team for every step rather than one per step: a thread woken per step at times
        // lands on the waker's core, and shares it until the scheduler moves it.
        Team::run(|team| {
            while self.advance(Some(team))? {}
            Ok(())
        })
    }

    /// Admits, draws and steps once; false when no sample is left.
    fn advance(&mut self, team: Option<&Team>) -> Result<bool> {
        self.admit(team)?;
        if self.live.iter().all(Option::is_none) {
            return Ok(false);
        }
        self.pick()?;
        self.step(team)?;
        Ok(true)
    }

    /// Whether this group has the cores to itself: only while it is the last running.
    fn alone(&self) -> bool {
        self.running.load(Ordering::SeqCst) < rayon::current_num_threads()
    }

    /// Fills free slots from the queue: one prefill (or a kept prefix) per prompt, copied to
    /// its other samples.
    fn admit(&mut self, team: Option<&Team>) -> Result<()> {
        let free: Vec<usize> = (0..self.live.len()).filter(|&s| self.live[s].is_none()).collect();
        if free.is_empty() {
            return Ok(());
        }
        let (taken, kept) = {
            let mut q = self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let n = free.len().min(q.items.len() - q.next);
            let taken = q.items[q.next..q.next + n].to_vec();
            q.next += n;
            // Prefixes of prompts whose samples are all taken are no longer needed.
            let next = q.next;
            q.prefixes.retain(|p, _| self.prompts.last_item[p] >= next);
            let kept: HashMap<usize, Arc<Prefix>> = taken.iter().filter_map(|&(i, _)| q.prefixes.get_key_value(&self.prompts.id[i]).map(|(&p, k)| (p, k.clone()))).collect();
            (taken, kept)
        };
        let mut free = free.into_iter();
        let mut start = 0;
        while start < taken.len() {
            let prompt = self.prompts.id[taken[start].0];
            let end = start + taken[start..].iter().take_while(|&&(i, _)| self.prompts.id[i] == prompt).count();
            let slots: Vec<usize> = free.by_ref().take(end - start).collect();
            self.admit_prompt(&taken[start..end], &slots, kept.get(&prompt), team)?;
            start = end;
        }
        Ok(())
    }

    /// Starts the samples `items` (all of one prompt) in `slots`.
    fn admit_prompt(&mut self, items: &[(usize, usize)], slots: &[usize], kept: Option<&Arc<Prefix>>, team: Option<&Team>) -> Result<()> {
        let id = self.prompts.id[items[0].0];
        let prompt = &self.job.requests[id].prompt;
        let shape = Shape::of(self.dec.config());
        let max_new = self.job.params.max_tokens.min(self.dec.config().max_position_embeddings - prompt.len());
        let room = prompt.len() + max_new;
        let first = slots[0];
        self.slots[first].reserve(shape, room);
        let logits = match kept {
            Some(p) => {
                self.slots[first].copy_prefix(shape, &p.slot, p.len);
                p.logits.clone()
            }
            None => {
                // Rows attend to their slot's keys and values, whichever step wrote them, so a
                // prefill that starts after the stem's copy gives the logits of a whole one.
                let from = match &self.prompts.stem {
                    Some(stem) => {
                        self.slots[first].copy_prefix(shape, &stem.slot, stem.len);
                        stem.len
                    }
                    None => 0,
                };
                let rows: Vec<Row> = prompt.iter().enumerate().skip(from).map(|(pos, &token)| Row { slot: first, pos, token }).collect();
                self.dec.forward(&mut self.slots, &rows, &[rows.len() - 1], &mut self.scratch, team)?;
                let logits = self.scratch.logits.clone();
                // Kept while samples of this prompt are still queued (the copy made outside the
                // lock: another group taking them meanwhile prefills its own, as it would have).
                if self.prompts.last_item[&id] >= self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).next {
                    let mut slot = Slot::default();
                    slot.reserve(shape, prompt.len());
                    slot.copy_prefix(shape, &self.slots[first], prompt.len());
                    let prefix = Arc::new(Prefix { slot, len: prompt.len(), logits: logits.clone() });
                    self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).prefixes.insert(id, prefix);
                }
                logits
            }
        };
        for &s in &slots[1..] {
            let (src, dst) = pick_two(&mut self.slots, first, s);
            dst.reserve(shape, room);
            dst.copy_prefix(shape, src, prompt.len());
        }
        for (&item, &s) in items.iter().zip(slots) {
            self.live[s] = Some(Live {
                item,
                prompt_len: prompt.len(),
                max_new,
                seq: SampledSequence { tokens: Vec::with_capacity(max_new), logprobs: Vec::with_capacity(max_new), stop_reason: StopReason::Length },
                rng: Rng::stream(self.job.seeds[item.0], item.1 as u64),
                logits: logits.clone(),
            });
        }
        Ok(())
    }

    /// Draws each live sample's next token; samples that stop or reach their length are done.
    fn pick(&mut self) -> Result<()> {
        for slot in &mut self.live {
            let Some(l) = slot else { continue };
            let (tok, lp) = pick(&l.logits, &self.prompts.params[l.item.0], &mut l.rng, &mut self.picks);
            l.seq.tokens.push(tok);
            l.seq.logprobs.push(lp);
            let stopped = self.job.stop_tokens.contains(&tok) || (self.job.stop_text)(&l.seq.tokens)?;
            if stopped {
                l.seq.stop_reason = StopReason::Stop;
            }
            if stopped || l.seq.tokens.len() == l.max_new {
                let l = slot.take().expect("live");
                self.done.push((l.item, l.seq));
            }
        }
        Ok(())
    }

    /// Feeds every live sample's last token through the model.
    fn step(&mut self, team: Option<&Team>) -> Result<()> {
        let (rows, owners): (Vec<Row>, Vec<usize>) = self
            .live
            .iter()
            .enumerate()
            .filter_map(|(s, l)| l.as_ref().map(|l| (Row { slot: s, pos: l.prompt_len + l.seq.tokens.len() - 1, token: *l.seq.tokens.last().expect("picked") }, s)))
            .unzip();
        if rows.is_empty() {
            return Ok(());
        }
        let want: Vec<usize> = (0..rows.len()).collect();
        self.dec.forward(&mut self.slots, &rows, &want, &mut self.scratch, team)?;
        let vocab = self.scratch.logits.len() / rows.len();
        for (i, s) in owners.into_iter().enumerate() {
            let l = self.live[s].as_mut().expect("live");
            l.logits.copy_from_slice(&self.scratch.logits[i * vocab..(i + 1) * vocab]);
        }
        Ok(())
    }
}

/// `(&slots[a], &mut slots[b])` for `a != b`.
fn pick_two(slots: &mut [Slot], a: usize, b: usize) -> (&Slot, &mut Slot) {
    if a < b {
        let (lo, hi) = slots.split_at_mut(b);
        (&lo[a], &mut hi[0])
    } else {
        let (lo, hi) = slots.split_at_mut(a);
        (&hi[0], &mut lo[b])
    }
}
