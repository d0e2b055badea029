//! What one template render may cost: instructions ([`FUEL`]) and output ([`MAX_RENDERED_BYTES`]).
//!
//! Templates are the user's code, run once per prompt: a loop that does not end would hang a run
//! (and `rlx render`) with no error, and one that writes gigabytes would abort the process when
//! memory runs out. minijinja's fuel counts the instructions of one render and stops it at the
//! limit; the output goes through [`Bounded`], which refuses to grow past its cap. A wall-clock
//! timeout was the alternative: it needs a thread per render and makes the outcome depend on the
//! machine's load, where fuel gives the same answer everywhere.

use std::io;

/// Instructions one render may run: 5,000,000. The shipped prompt templates use under a
/// thousandth of it (`render::tests::shipped_templates_use_a_sliver_of_the_fuel`); a render
/// that runs out takes under half a second (`rlx validate` on an endless loop: 0.44 s in all).
pub const FUEL: u64 = 5_000_000;

/// Bytes one rendered prompt template may produce: 1 MiB. A prompt is at most a model's context
/// (hundreds of kilobytes of text for the longest); a problem statement that is larger is better
/// cut in the data than sent.
pub const MAX_RENDERED_BYTES: usize = 1 << 20;

/// A writer that keeps at most `cap` bytes and fails the write that would pass it.
#[derive(Debug)]
pub(crate) struct Bounded {
    buf: Vec<u8>,
    cap: usize,
    overflowed: bool,
}

impl Bounded {
    /// An empty writer holding at most `cap` bytes.
    pub(crate) fn new(cap: usize) -> Self {
        Bounded { buf: Vec::new(), cap, overflowed: false }
    }

    /// Whether a write was refused.
    pub(crate) fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// What was written.
    pub(crate) fn into_inner(self) -> Vec<u8> {
        self.buf
    }
}

impl io::Write for Bounded {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len() + data.len() > self.cap {
            self.overflowed = true;
            return Err(io::Error::new(io::ErrorKind::FileTooLarge, format!("the output passed {} bytes", self.cap)));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    #[test]
    fn bounded_refuses_the_write_past_its_cap() {
        let mut w = Bounded::new(4);
        w.write_all(b"abc").unwrap();
        assert!(w.write_all(b"de").is_err());
        assert!(w.overflowed());
        assert_eq!(w.into_inner(), b"abc");
    }
}
