//! Digests as text: lower-case hex of some bytes, and the SHA-256 of a text in full or cut to
//! its first bytes (the short digests ruleop writes into labels and annotations).

use sha2::{Digest, Sha256};

/// Lower-case hex of some bytes.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of `data`, 64 lower-case hex digits.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// The first `bytes` bytes of the SHA-256 of `data`, as `2 × bytes` lower-case hex digits (all
/// 32 when `bytes` is more).
pub(crate) fn sha256_hex_prefix(data: &[u8], bytes: usize) -> String {
    let digest = Sha256::digest(data);
    hex(&digest[..bytes.min(digest.len())])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_is_the_start_of_the_full_digest() {
        let full = sha256_hex(b"");
        assert_eq!(full, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(sha256_hex_prefix(b"", 8), full[..16]);
        assert_eq!(sha256_hex_prefix(b"", 64), full, "more than 32 bytes is all of it");
        assert_eq!(hex(&[0, 15, 255]), "000fff");
    }
}
