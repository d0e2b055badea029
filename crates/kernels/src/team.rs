//! A team of rayon's threads held while a decoding group runs alone: each step's products and
//! attention split into parts that the team's threads claim from one counter, and a thread with
//! nothing to claim spins (then yields) for the next split instead of going back to rayon.
//!
//! Why not rayon's `join` per product: a step of one sequence is about 200 products of a few
//! microseconds each, and each split through rayon woke the other thread and waited for it
//! (`perf` put a tenth of one-sequence decoding in the scheduler, and a core sat idle while the
//! other ran the step's short serial parts). llama.cpp's threads wait on a spinning barrier for
//! the same reason. Parts are claimed, not assigned: the caller never waits for a part nobody
//! has started, so a helper that arrives late (its core busy with the trainer or the sandbox)
//! costs only its share of the parallelism, never a deadlock.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// Spins of an idle helper before it starts yielding its core (about 50 µs).
const SPIN: u32 = 2_000;

/// The split being worked on: `f(part)` for each part.
struct Split<'a> {
    f: &'a (dyn Fn(usize) + Sync),
}

/// The threads of a decoding group's steps; see [`Team::run`].
pub struct Team {
    helpers: usize,
    /// The current split, valid while one of its parts is unfinished.
    split: AtomicPtr<Split<'static>>,
    /// `epoch << 40 | parts << 20 | next`: a part is claimed by moving `next` on with a
    /// compare-and-swap, so a claim of a finished split's epoch fails.
    claim: AtomicU64,
    /// Parts of the current split finished.
    done: AtomicUsize,
    stop: AtomicBool,
    panicked: AtomicBool,
}

/// Bits of `parts` and of `next` in the claim word.
const PARTS_BITS: u32 = 20;

fn pack(epoch: u64, parts: usize, next: usize) -> u64 {
    (epoch << (2 * PARTS_BITS)) | ((parts as u64) << PARTS_BITS) | next as u64
}

fn unpack(c: u64) -> (u64, usize, usize) {
    let mask = (1u64 << PARTS_BITS) - 1;
    (c >> (2 * PARTS_BITS), ((c >> PARTS_BITS) & mask) as usize, (c & mask) as usize)
}

impl Team {
    /// Runs `f` with a team of the current rayon pool's threads: the caller, and the pool's
    /// other threads as helpers (through a broadcast) working on [`Team::split`]s until `f`
    /// returns.
    pub fn run<R: Send>(f: impl FnOnce(&Team) -> R + Send) -> R {
        let team = Team {
            helpers: rayon::current_num_threads().saturating_sub(1),
            split: AtomicPtr::new(std::ptr::null_mut()),
            claim: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
        };
        if team.helpers == 0 {
            return f(&team);
        }
        rayon::scope(|s| {
            // On the pool's thread that runs `f` (the caller's, or the one a caller from outside
            // the pool was injected into). A broadcast wakes each of the other threads for its
            // own copy, where one spawned job would wait on this thread's deque to be stolen.
            let (me, helpers) = (rayon::current_thread_index(), &team);
            s.spawn_broadcast(move |_, ctx| {
                if Some(ctx.index()) != me {
                    helpers.help();
                }
            });
            let r = catch_unwind(AssertUnwindSafe(|| f(&team)));
            team.stop.store(true, Ordering::Release);
            r.unwrap_or_else(|p| resume_unwind(p))
        })
    }

    /// Threads in the team (the caller and its helpers, whether or not they have arrived).
    pub fn threads(&self) -> usize {
        self.helpers + 1
    }

    /// Calls `f(part)` for every part in `0..parts`, on whichever of the team's threads claim
    /// them (the caller among them), and returns when all have finished. Parts should be a few
    /// per thread: each claim is one compare-and-swap on a line the threads share.
    ///
    /// # Panics
    /// If a part panics (after every part has finished or been given up), or `parts` ≥ 2²⁰.
    pub fn split(&self, parts: usize, f: &(dyn Fn(usize) + Sync)) {
        assert!(parts < 1 << PARTS_BITS, "{parts} parts");
        if parts == 0 {
            return;
        }
        let split = Split { f };
        // SAFETY (lifetime): the pointer is only dereferenced by a thread holding a claimed,
        // unfinished part of this epoch, and this function does not return (nor unwind) before
        // every claimed part has finished (`done == parts`).
        self.split.store((&raw const split).cast_mut().cast(), Ordering::Relaxed);
        self.done.store(0, Ordering::Relaxed);
        let (epoch, _, _) = unpack(self.claim.load(Ordering::Relaxed));
        self.claim.store(pack(epoch + 1, parts, 0), Ordering::Release);
        let mut mine = Ok(());
        while let Some(i) = self.claim_part() {
            mine = catch_unwind(AssertUnwindSafe(|| f(i)));
            self.done.fetch_add(1, Ordering::Release);
            if mine.is_err() {
                // Give up the parts nobody has claimed, then wait for those in flight.
                while self.claim_part().is_some() {
                    self.done.fetch_add(1, Ordering::Release);
                }
                break;
            }
        }
        let mut spins = 0u32;
        while self.done.load(Ordering::Acquire) < parts {
            pause(&mut spins);
        }
        if let Err(p) = mine {
            resume_unwind(p);
        }
        assert!(!self.panicked.swap(false, Ordering::Relaxed), "a thread of the decoding team panicked");
    }

    /// Splits `data` into chunks of `size` (the last may be shorter) and calls
    /// `f(chunk index, chunk)` for each, in `parts` parts of consecutive chunks (see
    /// [`Team::split`]).
    pub fn chunks_mut<T: Send>(&self, data: &mut [T], size: usize, parts: usize, f: &(dyn Fn(usize, &mut [T]) + Sync)) {
        let chunks = data.len().div_ceil(size.max(1));
        let parts = parts.clamp(1, chunks.max(1));
        let per = chunks.div_ceil(parts);
        let (len, base) = (data.len(), SendPtr(data.as_mut_ptr()));
        self.split(chunks.div_ceil(per.max(1)), &|p| {
            for c in p * per..((p + 1) * per).min(chunks) {
                let (start, end) = (c * size, ((c + 1) * size).min(len));
                // SAFETY: chunks are disjoint, each is claimed by one part, and `data` is
                // borrowed mutably until `split` returns after every part.
                let chunk = unsafe { std::slice::from_raw_parts_mut(base.get().add(start), end - start) };
                f(c, chunk);
            }
        });
    }

    /// Claims the next part of the current split, if one is left.
    fn claim_part(&self) -> Option<usize> {
        let mut c = self.claim.load(Ordering::Acquire);
        loop {
            let (_, parts, next) = unpack(c);
            if next >= parts {
                return None;
            }
            match self.claim.compare_exchange_weak(c, c + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(next),
                Err(now) => c = now,
            }
        }
    }

    /// A helper: claims and runs parts until the team stops, spinning while there are none.
    fn help(&self) {
        let mut idle = 0u32;
        while !self.stop.load(Ordering::Acquire) {
            let Some(i) = self.claim_part() else {
                pause(&mut idle);
                continue;
            };
            idle = 0;
            // SAFETY: part i of the current epoch is claimed and unfinished, so the split it
            // belongs to is alive (see `split`); the Acquire of the claim orders this read after
            // the pointer's store.
            let split = unsafe { &*self.split.load(Ordering::Relaxed) };
            if catch_unwind(AssertUnwindSafe(|| (split.f)(i))).is_err() {
                self.panicked.store(true, Ordering::Relaxed);
            }
            self.done.fetch_add(1, Ordering::Release);
        }
    }
}

/// One wait of a spin loop: a pause for the first [`SPIN`] rounds, then a yield of the core.
/// Yielding matters when two of the team's threads share a core (the scheduler wakes a thread
/// on its waker's core at times, and moves it a few milliseconds later): a spinning thread there
/// holds off the one it waits for.
fn pause(rounds: &mut u32) {
    *rounds = rounds.saturating_add(1);
    if *rounds < SPIN {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// A buffer's base, shared by the parts that write its disjoint chunks.
struct SendPtr<T>(*mut T);

impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SendPtr<T> {}

// SAFETY: parts write disjoint chunks and the split waits for all of them.
unsafe impl<T: Send> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// Through a method, so that closures capture the `Sync` wrapper and not the raw pointer.
    fn get(self) -> *mut T {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Every part runs exactly once per split, over many splits in a row (the epochs keep
    /// claims of one split out of the next), on a pool of several threads.
    #[test]
    fn every_part_runs_once_per_split() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        let counts: Vec<AtomicUsize> = (0..37).map(|_| AtomicUsize::new(0)).collect();
        let threads = Mutex::new(std::collections::HashSet::new());
        pool.install(|| {
            Team::run(|team| {
                assert_eq!(team.threads(), 3);
                for round in 0..500 {
                    let parts = 1 + round % 37;
                    team.split(parts, &|i| {
                        counts[i].fetch_add(1, Ordering::Relaxed);
                        threads.lock().unwrap().insert(std::thread::current().id());
                    });
                }
            });
        });
        for (i, c) in counts.iter().enumerate() {
            let want = (0..500).filter(|r| i < 1 + r % 37).count();
            assert_eq!(c.load(Ordering::Relaxed), want, "part {i}");
        }
        assert!(!threads.lock().unwrap().is_empty());
    }

    /// Chunks cover the buffer once, each with its index; a pool of one thread runs them all.
    #[test]
    fn chunks_cover_the_buffer() {
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let mut data = vec![0usize; 103];
            pool.install(|| Team::run(|team| team.chunks_mut(&mut data, 10, 4, &|c, chunk| chunk.iter_mut().for_each(|v| *v += c + 1))));
            assert!(data.iter().enumerate().all(|(i, &v)| v == i / 10 + 1), "{threads} threads: {data:?}");
        }
    }

    /// A panicking part panics the split's caller, after the other parts have finished, and the
    /// team goes on to the next split.
    #[test]
    fn a_panicking_part_reaches_the_caller() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let ran = AtomicUsize::new(0);
        pool.install(|| {
            Team::run(|team| {
                let r = catch_unwind(AssertUnwindSafe(|| {
                    team.split(16, &|i| {
                        assert_ne!(i, 5, "part 5 fails");
                        ran.fetch_add(1, Ordering::Relaxed);
                    })
                }));
                assert!(r.is_err());
                let after = AtomicUsize::new(0);
                team.split(8, &|_| {
                    after.fetch_add(1, Ordering::Relaxed);
                });
                assert_eq!(after.load(Ordering::Relaxed), 8);
            });
        });
        assert!(ran.load(Ordering::Relaxed) <= 15);
    }
}
