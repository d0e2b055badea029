//! gRPC over HTTP/2, the little of it both sides need: the 5-byte message framing, the
//! `grpc-timeout` header, status codes and the percent-encoded `grpc-message`. The transport is
//! hyper's HTTP/2 (server) and reqwest's (client), both already in the build for other reasons;
//! tonic would have added its own codegen and tower stack for these five functions.

use std::time::Duration;

use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};

/// `OK`.
pub(crate) const OK: u32 = 0;
/// `CANCELLED`.
pub(crate) const CANCELLED: u32 = 1;
/// `INVALID_ARGUMENT`.
pub(crate) const INVALID_ARGUMENT: u32 = 3;
/// `DEADLINE_EXCEEDED`.
pub(crate) const DEADLINE_EXCEEDED: u32 = 4;
/// `NOT_FOUND`.
pub(crate) const NOT_FOUND: u32 = 5;
/// `RESOURCE_EXHAUSTED`.
pub(crate) const RESOURCE_EXHAUSTED: u32 = 8;
/// `FAILED_PRECONDITION`.
pub(crate) const FAILED_PRECONDITION: u32 = 9;
/// `ABORTED`.
pub(crate) const ABORTED: u32 = 10;
/// `UNIMPLEMENTED`.
pub(crate) const UNIMPLEMENTED: u32 = 12;
/// `INTERNAL`.
pub(crate) const INTERNAL: u32 = 13;
/// `UNAVAILABLE`.
pub(crate) const UNAVAILABLE: u32 = 14;
/// `UNAUTHENTICATED`.
pub(crate) const UNAUTHENTICATED: u32 = 16;

/// The name of a status code, for messages.
pub(crate) fn code_name(code: u32) -> &'static str {
    match code {
        OK => "OK",
        CANCELLED => "CANCELLED",
        2 => "UNKNOWN",
        INVALID_ARGUMENT => "INVALID_ARGUMENT",
        DEADLINE_EXCEEDED => "DEADLINE_EXCEEDED",
        NOT_FOUND => "NOT_FOUND",
        6 => "ALREADY_EXISTS",
        7 => "PERMISSION_DENIED",
        RESOURCE_EXHAUSTED => "RESOURCE_EXHAUSTED",
        9 => "FAILED_PRECONDITION",
        ABORTED => "ABORTED",
        11 => "OUT_OF_RANGE",
        UNIMPLEMENTED => "UNIMPLEMENTED",
        INTERNAL => "INTERNAL",
        UNAVAILABLE => "UNAVAILABLE",
        15 => "DATA_LOSS",
        UNAUTHENTICATED => "UNAUTHENTICATED",
        _ => "UNKNOWN",
    }
}

/// One message, length-prefixed (uncompressed).
pub(crate) fn frame(msg: &impl prost::Message) -> Bytes {
    let len = msg.encoded_len();
    let mut b = BytesMut::with_capacity(5 + len);
    b.put_u8(0);
    b.put_u32(len as u32);
    msg.encode(&mut b).expect("a BytesMut grows");
    b.freeze()
}

/// Splits a byte stream into messages as they complete.
#[derive(Default)]
pub(crate) struct Deframer {
    buf: BytesMut,
}

impl Deframer {
    /// Adds bytes received.
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next complete message, `Ok(None)` when more bytes are needed.
    ///
    /// # Errors
    /// A compressed message (rlx never asks for compression, so a peer sending one is broken).
    pub(crate) fn next(&mut self) -> Result<Option<Bytes>, String> {
        if self.buf.len() < 5 {
            return Ok(None);
        }
        if self.buf[0] != 0 {
            return Err("a compressed gRPC message (compression was not negotiated)".into());
        }
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if self.buf.len() < 5 + len {
            return Ok(None);
        }
        self.buf.advance(5);
        Ok(Some(self.buf.split_to(len).freeze()))
    }
}

/// `grpc-timeout` (`<digits><H|M|S|m|u|n>`).
pub(crate) fn parse_timeout(v: &str) -> Option<Duration> {
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A `grpc-timeout` value for `d` (milliseconds, at most 8 digits as the spec allows).
pub(crate) fn format_timeout(d: Duration) -> String {
    let ms = d.as_millis().max(1);
    if ms < 100_000_000 { format!("{ms}m") } else { format!("{}S", d.as_secs().min(99_999_999)) }
}

/// `grpc-message`: percent-encoded outside printable ASCII (and `%`).
pub(crate) fn encode_message(m: &str) -> String {
    let mut out = String::with_capacity(m.len());
    for b in m.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The inverse of [`encode_message`] (lossy on invalid UTF-8).
pub(crate) fn decode_message(m: &str) -> String {
    let bytes = m.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A gRPC status to answer with: a code of this module's table and a message for the client.
#[derive(Debug)]
pub(crate) struct Status {
    pub(crate) code: u32,
    pub(crate) message: String,
}

impl Status {
    pub(crate) fn new(code: u32, message: impl Into<String>) -> Status {
        Status { code, message: message.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_in_pieces() {
        let msg = super::super::wire::GetSandboxRequest { sandbox_id: "sb-1".into() };
        let mut framed = frame(&msg).to_vec();
        framed.extend_from_slice(&frame(&msg));
        let mut d = Deframer::default();
        d.push(&framed[..3]);
        assert_eq!(d.next().unwrap(), None);
        d.push(&framed[3..]);
        let one = d.next().unwrap().unwrap();
        assert_eq!(<super::super::wire::GetSandboxRequest as prost::Message>::decode(one).unwrap(), msg);
        assert!(d.next().unwrap().is_some());
        d.push(&[1, 0, 0, 0, 0]);
        assert!(d.next().is_err(), "compressed frames are refused");
    }

    #[test]
    fn timeouts_and_messages() {
        assert_eq!(parse_timeout("1500m"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_timeout("x"), None);
        assert_eq!(parse_timeout(""), None);
        assert_eq!(parse_timeout(&format_timeout(Duration::from_secs(3))), Some(Duration::from_secs(3)));
        let m = "sandbox `a` not found: 100% gone\né";
        assert_eq!(decode_message(&encode_message(m)), m);
        assert!(!encode_message(m).contains('\n'));
    }
}
