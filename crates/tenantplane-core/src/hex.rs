//! The short hex digests tenantplane names things with.

use std::fmt::Write as _;

/// The first `bytes` bytes of `digest` (a SHA-256 output, say) as lowercase hex:
/// `2 * bytes` characters. What is hashed, and how, stays with each caller: names
/// made from these digests live on the host, so their inputs never change.
pub fn short_hex(digest: impl AsRef<[u8]>, bytes: usize) -> String {
    let mut out = String::with_capacity(2 * bytes);
    for b in digest.as_ref().iter().take(bytes) {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_leading_bytes_as_lowercase_hex() {
        assert_eq!(short_hex([0x00, 0xab, 0x10, 0xff], 3), "00ab10");
        assert_eq!(short_hex([0xff], 4), "ff");
        assert_eq!(short_hex([0x01, 0x02], 0), "");
    }
}
