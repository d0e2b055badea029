//! The process allocator: the system's, plus a bounded cache of large freed blocks.
//!
//! A training step allocates the same large tensors (activations, logits, gradients) every
//! micro-batch and frees them at its end. glibc serves blocks of more than 32 MB (and, until its
//! threshold adapts, more than 128 KB) with `mmap` and returns them with `munmap`, so every step
//! faulted every page of them in again and the kernel zeroed each one: 14% of a LoRA step's
//! samples were `clear_page_erms` and 17% of its CPU time was system time. [`configure`] fixes
//! glibc's mmap threshold at 32 MB (so smaller blocks stay in its heap), and [`ReuseLarge`] keeps
//! freed blocks above it in power-of-two size classes (so a block fits the next request of about
//! its size, not only of its exact size) and hands them out again. Together:
//! a LoRA step 10% faster (7.15 → 6.45 s, benches/trainer.rs under load) for 290 MB more peak
//! RSS with one 512-token micro-batch. jemalloc and mimalloc, preloaded into the same benchmark,
//! were both slower than glibc (2.2× and 1.4× the step time; they return freed pages to the
//! kernel eagerly) and mimalloc's peak RSS was 14% higher.
//!
//! The cache is bounded ([`CAP`]), so it adds at most that much to the peak resident size; a
//! block that would exceed it goes back to the system. [`configure`] runs first thing in `main`,
//! before any large block exists, so `RLX_ALLOC=system` never frees a cached-class block through
//! the bypass.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

/// Smallest block the cache keeps: glibc's largest mmap threshold, above which it always maps.
const MIN: usize = 32 << 20;
/// Most bytes kept in the cache.
const CAP: usize = 512 << 20;
/// Cached blocks (a fixed array: the allocator must not allocate for itself).
const SLOTS: usize = 256;

/// See the module docs.
pub struct ReuseLarge {
    cache: Mutex<Cache>,
    /// Whether anything but training ran since the last [`release`] ([`note_other_work`]).
    /// Starts set: loading the model freed its own buffers.
    other_work: AtomicBool,
}

struct Cache {
    blocks: [(usize, usize); SLOTS],
    len: usize,
    bytes: usize,
}

/// Set when `RLX_ALLOC=system`: every request goes straight to the system allocator.
static BYPASS: AtomicBool = AtomicBool::new(false);

/// The process's global allocator, once [`configure`] has been told of it and unless
/// `RLX_ALLOC` is `system` or `keep`: null, [`release`] does nothing.
static INSTALLED: AtomicPtr<ReuseLarge> = AtomicPtr::new(std::ptr::null_mut());

/// Makes glibc keep blocks below [`MIN`] in its heap: a fixed 32 MB mmap threshold (its dynamic
/// one starts at 128 KB and only rises as mapped blocks are freed) and a trim threshold that
/// does not hand the top of the heap back after every step. `RLX_ALLOC=system` leaves glibc's
/// defaults and turns the cache off (to rule the allocator out when chasing memory).
/// `global` is the `#[global_allocator]` static, which [`release`] empties; `RLX_ALLOC=keep`
/// keeps what it holds across steps instead (faster by the re-faults, for more peak memory).
pub fn configure(global: &'static ReuseLarge) {
    match crate::switches::ALLOC.var_os() {
        Some(v) if v == "system" => {
            BYPASS.store(true, Ordering::Relaxed);
            return;
        }
        Some(v) if v == "keep" => {}
        _ => INSTALLED.store(std::ptr::from_ref(global).cast_mut(), Ordering::Relaxed),
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; both values are in range.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MIN as libc::c_int);
        libc::mallopt(libc::M_TRIM_THRESHOLD, (256 << 20) as libc::c_int);
    }
}

/// Records that something other than a training step ran (the local sampler calls it for every
/// batch it decodes and every prompt it scores), so the next [`release`] hands back what it
/// freed.
pub fn note_other_work() {
    if let Some(global) = installed() {
        global.other_work.store(true, Ordering::Relaxed);
    }
}

/// The global allocator given to [`configure`], unless `RLX_ALLOC` is `system` or `keep`.
fn installed() -> Option<&'static ReuseLarge> {
    // SAFETY: INSTALLED is null or the `'static` global allocator given to `configure`.
    unsafe { INSTALLED.load(Ordering::Relaxed).as_ref() }
}

/// Hands what the process holds free back to the system: the global cache's blocks and glibc's
/// free heap pages (`malloc_trim`). The trainer calls it as each optimizer step starts (its first
/// `forward_backward`), when
/// what sampling and evaluating freed (decoder caches, other classes' blocks) would otherwise
/// sit beside the step's own tensors at the run's peak.
///
/// Why per step and not per micro-batch: the cache's point is reuse between micro-batches (10%
/// of a step); once a step, the re-faults were within noise (the trainer bench's `grpo_packed`,
/// five interleaved pairs against `RLX_ALLOC=keep`: median paired ratio 1.01).
///
/// Why only after other work: between two training steps with nothing in between (an SFT stage,
/// a Tinker client training through `rlx serve`, the trainer bench) what was freed is the last
/// step's own tensors, which the next step allocates again at the same peak; handing them back
/// only re-faults them. Full fine-tuning with the AVX2 kernels ran 1.13× faster without that
/// release (95% interval [1.09, 1.15], six ABBA pairs against `RLX_ALLOC=keep`, idle Xeon
/// 2026-11-29), at the same peak RSS (2,797 against 2,769 MB).
pub fn release() {
    let Some(global) = installed() else { return };
    if !global.take_other_work() {
        return;
    }
    global.flush();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages to the kernel; live blocks are untouched.
    unsafe {
        libc::malloc_trim(0);
    }
}

impl ReuseLarge {
    /// An empty cache.
    pub const fn new() -> Self {
        Self { cache: Mutex::new(Cache { blocks: [(0, 0); SLOTS], len: 0, bytes: 0 }), other_work: AtomicBool::new(true) }
    }

    /// Whether anything but training ran since the last call.
    fn take_other_work(&self) -> bool {
        self.other_work.swap(false, Ordering::Relaxed)
    }
}

impl Default for ReuseLarge {
    fn default() -> Self {
        Self::new()
    }
}

/// The size class of a large request: its power of two.
///
/// Why not a finer class (eighths of a power of two, as before): a packed training row's logits
/// are 100–200 MB depending on the row's length, so finer classes kept two or three of them
/// cached beside the live one (a 3-step quickstart peaked at 2.49 GiB, 2.12 with the system
/// allocator, 2.35 with power-of-two classes). A block's resident size is the most any request
/// has touched of it, not its class, so one power-of-two block serves every row length at the
/// RSS of the longest.
fn class(size: usize) -> usize {
    size.next_power_of_two()
}

/// Cached blocks are page-aligned whatever their first request asked for, so any later request
/// of the class can take them.
const PAGE: usize = 4096;

fn cached(layout: &Layout) -> bool {
    layout.size() >= MIN && layout.align() <= PAGE && !BYPASS.load(Ordering::Relaxed)
}

impl ReuseLarge {
    fn take(&self, size: usize) -> Option<*mut u8> {
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let i = c.blocks[..c.len].iter().rposition(|&(s, _)| s == size)?;
        let (_, ptr) = c.blocks[i];
        let last = c.len - 1;
        c.blocks.swap(i, last);
        c.len -= 1;
        c.bytes -= size;
        Some(ptr as *mut u8)
    }

    /// Returns every cached block to the system.
    fn flush(&self) {
        // Taken out under the lock, freed after it: `System.dealloc` (munmap) is slow, and other
        // threads may allocate meanwhile.
        let (blocks, len) = {
            let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            let taken = (c.blocks, c.len);
            c.len = 0;
            c.bytes = 0;
            taken
        };
        for &(size, ptr) in &blocks[..len] {
            // SAFETY: cached blocks came from `System` with their class size and PAGE alignment
            // and are no longer in use.
            unsafe { System.dealloc(ptr as *mut u8, Layout::from_size_align_unchecked(size, PAGE)) }
        }
    }

    fn keep(&self, ptr: *mut u8, size: usize) -> bool {
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if c.len == SLOTS || c.bytes + size > CAP {
            return false;
        }
        let n = c.len;
        c.blocks[n] = (size, ptr as usize);
        c.len += 1;
        c.bytes += size;
        true
    }
}

// SAFETY: every large block handed out is either fresh from `System` with the class size and
// page alignment (>= the caller's) or a cached block of the same class previously obtained that
// way and no longer in use; `dealloc` returns large blocks to `System` with that same layout.
unsafe impl GlobalAlloc for ReuseLarge {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !cached(&layout) {
            // SAFETY: forwarded unchanged.
            return unsafe { System.alloc(layout) };
        }
        let size = class(layout.size());
        if let Some(p) = self.take(size) {
            return p;
        }
        // SAFETY: size >= layout.size() > 0, PAGE a valid alignment >= layout.align().
        unsafe { System.alloc(Layout::from_size_align_unchecked(size, PAGE)) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !cached(&layout) {
            // SAFETY: forwarded unchanged.
            return unsafe { System.alloc_zeroed(layout) };
        }
        let size = class(layout.size());
        if let Some(p) = self.take(size) {
            // SAFETY: the block has at least `layout.size()` writable bytes.
            unsafe { std::ptr::write_bytes(p, 0, layout.size()) };
            return p;
        }
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(Layout::from_size_align_unchecked(size, PAGE)) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY (whole function): the caller guarantees `ptr` came from this allocator with
        // `layout`, and `new_size` with `layout.align()` is a valid layout.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let (was, will) = (cached(&layout), cached(&new_layout));
        if !was && !will {
            // Small blocks: glibc may grow them in place (the trait's default always copies).
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        if was && will && class(layout.size()) == class(new_size) {
            return ptr;
        }
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !cached(&layout) {
            // SAFETY: forwarded unchanged.
            return unsafe { System.dealloc(ptr, layout) };
        }
        let size = class(layout.size());
        if !self.keep(ptr, size) {
            // SAFETY: allocated by `System` with this size class and PAGE alignment.
            unsafe { System.dealloc(ptr, Layout::from_size_align_unchecked(size, PAGE)) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn realloc_keeps_the_contents_across_small_and_large_blocks() {
        let a = ReuseLarge::new();
        // SAFETY: each block is reallocated and freed with the layout it currently has.
        unsafe {
            let small = Layout::from_size_align(1000, 8).unwrap();
            let p = a.alloc(small);
            for i in 0..1000 {
                *p.add(i) = (i % 251) as u8;
            }
            let big_size = (40 << 20) + 12_345; // class 64 MB, like big_size + 4096
            let q = a.realloc(p, small, big_size);
            assert!((0..1000).all(|i| *q.add(i) == (i % 251) as u8), "small -> large copies");
            let big = Layout::from_size_align(big_size, 8).unwrap();
            // Within the same class the block stays put.
            let r = a.realloc(q, big, big_size + 4096);
            assert_eq!(r, q);
            let s = a.realloc(r, Layout::from_size_align(big_size + 4096, 8).unwrap(), 500);
            assert!((0..500).all(|i| *s.add(i) == (i % 251) as u8), "large -> small copies");
            a.dealloc(s, Layout::from_size_align(500, 8).unwrap());
        }
    }

    #[test]
    fn only_a_step_after_other_work_hands_memory_back() {
        let a = ReuseLarge::new();
        assert!(a.take_other_work(), "the first step follows loading the model");
        assert!(!a.take_other_work(), "a step right after a step keeps the cache");
        a.other_work.store(true, Ordering::Relaxed); // what `note_other_work` does to the global one
        assert!(a.take_other_work(), "a step after sampling hands back");
        assert!(!a.take_other_work());
    }

    #[test]
    fn classes_are_powers_of_two_that_fit_the_request() {
        for size in [MIN, MIN + 1, 3 << 20, (5 << 20) + 17, 100_000_000] {
            let c = class(size);
            assert!(c >= size && c < 2 * size && c.is_power_of_two(), "{size} -> {c}");
            assert_eq!(class(c), c, "a class is its own class");
        }
    }

    #[test]
    fn a_freed_block_is_reused_zeroed_and_the_cap_holds() {
        let a = ReuseLarge::new();
        let layout = Layout::from_size_align(40 << 20, 64).unwrap();
        // SAFETY: layouts are non-zero; every block is freed with the layout it was made with.
        unsafe {
            let p = a.alloc(layout);
            p.write_bytes(7, layout.size());
            a.dealloc(p, layout);
            // Same class, slightly smaller request: the cached block comes back, zeroed.
            let smaller = Layout::from_size_align((40 << 20) - 100, 64).unwrap();
            let q = a.alloc_zeroed(smaller);
            assert_eq!(q, p);
            assert!(std::slice::from_raw_parts(q, smaller.size()).iter().all(|&b| b == 0));
            a.dealloc(q, smaller);
            // Blocks past the cap go back to the system: the cache never holds more than CAP.
            let big = Layout::from_size_align(200 << 20, 64).unwrap();
            let (x, y) = (a.alloc(big), a.alloc(big));
            a.dealloc(x, big);
            a.dealloc(y, big);
            assert!(a.cache.lock().unwrap().bytes <= CAP);
            assert_eq!(a.cache.lock().unwrap().len, 2, "the 40 MB block and one 200 MB block");
            // A shorter row's logits take the longer one's block: one class for 130 to 256 MB.
            let shorter = Layout::from_size_align(130 << 20, 64).unwrap();
            let z = a.alloc(shorter);
            assert!(z == x || z == y, "served from the cached 256 MB block");
            a.dealloc(z, shorter);
            a.flush();
            let c = a.cache.lock().unwrap();
            assert_eq!((c.len, c.bytes), (0, 0), "flushed");
        }
    }
}
