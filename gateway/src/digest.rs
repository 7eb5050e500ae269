//! SHA-256 digests as lower-case hex text: what a repeat of an `Idempotency-Key` must
//! match (`turn`), and the console's ETags (`ui`).

use sha2::{Digest, Sha256};

/// The SHA-256 of `bytes`, 64 lower-case hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_the_known_one_in_lower_case_hex() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
