//! Which submission may start, and on which worker slot.
//!
//! Two numbers: `workers`, the submissions that may use the CPU at once (the cores), and
//! `slots`, the submissions that may be in flight at once (each holds a warm worker process). Up
//! to `workers` start at once, as before. Beyond that a queued submission starts only while one
//! in flight is *waiting*: it used (almost) no CPU over the last sampling tick because it sleeps,
//! blocks on a lock or a pipe, or sits out a deadline. Why not simply more slots: timeouts are
//! wall clock, so CPU-bound programs sharing cores get less CPU inside their limit and slow but
//! correct code turns into timeouts (measured on Sandbox
//! Fusion, which starts everything at once). Why not the machine's idle time (`/proc/stat`):
//! other load on the machine would then decide, and a busy neighbour would stall the queue.
//!
//! "Waiting" is read from `/proc/<pid>/schedstat` (nanoseconds on the CPU, per task) summed over
//! the slot's worker and all its descendants, i.e. the submission's processes; a slot whose set
//! of processes changed between two samples counts as busy. Sampling runs only while a
//! submission is queued (a background task that ends when the queue is empty).
//!
//! An extra submission (beyond `workers`) also needs the machine to have its memory limit
//! available (`MemAvailable`), so idle submissions holding memory cannot push the machine into
//! swap. The per-slot limits (uid, RLIMIT_NPROC, RLIMIT_AS, the PID namespace) are unchanged.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// How often in-flight submissions are sampled while others queue. Short enough that a queued
/// request waits little behind a sleeper; long enough that a running program reliably shows CPU.
const TICK: Duration = Duration::from_millis(20);

/// Below this share of one core over a tick, a submission is waiting (a running program shows
/// ~100%; the worker's own select/poll wake-ups are well under 1%).
const IDLE_SHARE: f64 = 0.05;

/// The admission state of one pool.
pub(crate) struct Admission {
    workers: usize,
    state: Mutex<State>,
    changed: Notify,
    /// Process id of each slot's worker (0: not started), for sampling.
    pids: Vec<AtomicU32>,
}

struct State {
    /// Free slots, the highest index last: slots are taken lowest first, so the eagerly started
    /// workers serve before a lazily started extra one is needed.
    free: Vec<usize>,
    running: Vec<Running>,
    queued: usize,
    sampling: bool,
}

/// A slot's processes (sorted ids) and the nanoseconds they spent on the CPU.
type Sample = (Vec<u32>, u64);

struct Running {
    slot: usize,
    /// Last sample.
    sample: Option<Sample>,
    waiting: bool,
}

/// A slot held by one submission; released on drop.
pub(crate) struct SlotGuard {
    admission: Arc<Admission>,
    /// The slot's index.
    pub(crate) slot: usize,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let mut st = self.admission.state.lock().expect("admission lock");
        st.running.retain(|r| r.slot != self.slot);
        let pos = st.free.iter().position(|&s| s < self.slot).unwrap_or(st.free.len());
        st.free.insert(pos, self.slot);
        drop(st);
        self.admission.changed.notify_waiters();
    }
}

/// Decrements the queue length even when the waiting future is dropped.
struct Queued<'a>(&'a Admission);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.state.lock().expect("admission lock").queued -= 1;
    }
}

impl Admission {
    /// `slots` ≥ `workers` ≥ 1.
    pub(crate) fn new(workers: usize, slots: usize) -> Arc<Admission> {
        let workers = workers.max(1);
        let slots = slots.max(workers);
        Arc::new(Admission {
            workers,
            state: Mutex::new(State { free: (0..slots).rev().collect(), running: Vec::new(), queued: 0, sampling: false }),
            changed: Notify::new(),
            pids: (0..slots).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    /// Slots in all.
    pub(crate) fn slots(&self) -> usize {
        self.pids.len()
    }

    /// Submissions that may use the CPU at once.
    pub(crate) fn workers(&self) -> usize {
        self.workers
    }

    /// The process id of a slot's worker, once started.
    pub(crate) fn pid(&self, slot: usize) -> Option<u32> {
        Some(self.pids[slot].load(Ordering::Relaxed)).filter(|&p| p != 0)
    }

    /// Record the process id of a slot's (re)started worker.
    pub(crate) fn set_pid(&self, slot: usize, pid: u32) {
        self.pids[slot].store(pid, Ordering::Relaxed);
    }

    /// Wait for a slot. `memory_mb` is the submission's memory limit (0: none), checked
    /// against `MemAvailable` only for a start beyond `workers`.
    ///
    /// Cancel safety: dropping the future leaves the queue; a returned guard owns its slot.
    pub(crate) async fn admit(self: &Arc<Self>, memory_mb: u64) -> SlotGuard {
        let mut queued = None;
        loop {
            // Registered before the state is checked, so a release in between is not missed.
            let notified = self.changed.notified();
            {
                let mut st = self.state.lock().expect("admission lock");
                if let Some(slot) = self.try_admit(&mut st, memory_mb) {
                    if let Some(q) = queued.take() {
                        // Its Drop would take the lock we hold.
                        std::mem::forget(q);
                        st.queued -= 1;
                    }
                    drop(st);
                    return SlotGuard { admission: self.clone(), slot };
                }
                if queued.is_none() {
                    st.queued += 1;
                    queued = Some(Queued(self));
                }
                if !st.sampling {
                    st.sampling = true;
                    tokio::spawn(sample_loop(self.clone()));
                }
            }
            notified.await;
        }
    }

    fn try_admit(&self, st: &mut State, memory_mb: u64) -> Option<usize> {
        let busy = st.running.iter().filter(|r| !r.waiting).count();
        if !can_start(self.workers, st.free.len(), st.running.len(), busy, || mem_available_mb().is_none_or(|m| m >= memory_mb)) {
            return None;
        }
        let slot = st.free.pop()?;
        st.running.push(Running { slot, sample: None, waiting: false });
        Some(slot)
    }
}

/// The admission rule: a free slot, and fewer than `workers` submissions using the CPU; a start
/// beyond `workers` in flight also needs `memory_ok`.
fn can_start(workers: usize, free: usize, in_flight: usize, busy: usize, memory_ok: impl FnOnce() -> bool) -> bool {
    free > 0 && busy < workers && (in_flight < workers || memory_ok())
}

async fn sample_loop(admission: Arc<Admission>) {
    loop {
        tokio::time::sleep(TICK).await;
        let slots: Vec<(usize, u32)> = {
            let mut st = admission.state.lock().expect("admission lock");
            if st.queued == 0 {
                st.sampling = false;
                return;
            }
            st.running.iter().map(|r| (r.slot, admission.pids[r.slot].load(Ordering::Relaxed))).collect()
        };
        // /proc is read outside the lock.
        let samples: Vec<(usize, Option<Sample>)> = slots.into_iter().map(|(slot, pid)| (slot, (pid != 0).then(|| tree_schedstat(pid)).flatten())).collect();
        let mut st = admission.state.lock().expect("admission lock");
        let mut any_waiting = false;
        for (slot, sample) in samples {
            let Some(r) = st.running.iter_mut().find(|r| r.slot == slot) else { continue };
            r.waiting = match (&r.sample, &sample) {
                (Some((pids0, ns0)), Some((pids1, ns1))) => {
                    pids0 == pids1 && (ns1.saturating_sub(*ns0) as f64) < IDLE_SHARE * TICK.as_nanos() as f64
                }
                _ => false,
            };
            any_waiting |= r.waiting;
            r.sample = sample;
        }
        drop(st);
        if any_waiting {
            admission.changed.notify_waiters();
        }
    }
}

/// `pid` and its live descendants (sorted), and the nanoseconds they spent on the CPU; `None`
/// when `pid` is gone or `/proc` lacks schedstat.
fn tree_schedstat(pid: u32) -> Option<Sample> {
    let mut pids = Vec::new();
    super::proc_tree::descendants(pid, &mut pids);
    pids.push(pid);
    pids.sort_unstable();
    let mut ns = 0u64;
    for &p in &pids {
        // Per task: a process's threads each have their own schedstat.
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else { continue };
        for t in tasks.filter_map(Result::ok) {
            // A thread that exited since the listing is skipped, not the whole sample (a busy
            // process starts and ends threads all the time; the lib tests' own process did).
            let Ok(text) = std::fs::read_to_string(t.path().join("schedstat")) else { continue };
            ns += text.split_whitespace().next()?.parse::<u64>().ok()?;
        }
    }
    Some((pids, ns))
}

/// `MemAvailable` in MiB; `None` when `/proc/meminfo` cannot tell.
fn mem_available_mb() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? / 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_to_workers_start_at_once_and_more_only_while_some_wait() {
        // 2 workers, 8 slots.
        assert!(can_start(2, 8, 0, 0, || false));
        assert!(can_start(2, 7, 1, 1, || false));
        // Two running on the CPU: the third queues, whatever the memory.
        assert!(!can_start(2, 6, 2, 2, || true));
        // One of the two waits: a third starts if memory allows.
        assert!(can_start(2, 6, 2, 1, || true));
        assert!(!can_start(2, 6, 2, 1, || false));
        // No free slot: nothing starts.
        assert!(!can_start(2, 0, 8, 0, || true));
    }

    #[tokio::test]
    async fn slots_are_taken_lowest_first_and_returned() {
        let a = Admission::new(2, 4);
        let g0 = a.admit(0).await;
        let g1 = a.admit(0).await;
        assert_eq!((g0.slot, g1.slot), (0, 1));
        drop(g0);
        let g = a.admit(0).await;
        assert_eq!(g.slot, 0, "the freed eager slot is reused before an extra one");
        // Both busy (never sampled as waiting): a third admission queues.
        let third = tokio::time::timeout(Duration::from_millis(100), a.admit(0)).await;
        assert!(third.is_err(), "a third submission must queue while two use the CPU");
        assert_eq!(a.state.lock().unwrap().queued, 0, "a dropped waiter leaves the queue");
        drop(g1);
        assert_eq!(a.admit(0).await.slot, 1);
    }

    #[test]
    fn a_sleeping_process_tree_reads_as_idle_and_this_one_as_ours() {
        let me = std::process::id();
        let (pids, _) = tree_schedstat(me).expect("schedstat of this process");
        assert!(pids.contains(&me));
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        // Read only once `sleep` has exec'd and gone to sleep: the fork, exec and dynamic
        // loading before that cost a few ms of CPU (a CI run read 2.8 ms in the window).
        let stat = format!("/proc/{}/stat", child.id());
        let asleep = || {
            std::fs::read_to_string(&stat)
                .map(|s| s.contains("(sleep) S"))
                .unwrap_or(false)
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(4);
        while !asleep() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(20));
        let (pids, a) = tree_schedstat(child.id()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let (pids2, b) = tree_schedstat(child.id()).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(pids, pids2);
        assert!(((b - a) as f64) < IDLE_SHARE * 50e6, "a sleeping process used {} ns in 50 ms", b - a);
    }
}
