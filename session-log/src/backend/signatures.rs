//! SQLite's index for the text search: per block of a session's messages, a signature
//! (a Bloom filter of their words, as [`search_words`] reads them), kept by triggers
//! through the SQL functions this module registers on every connection, and the mask a
//! search compares the signatures with.
//!
//! Why signatures and not a word index: an inverted index (FTS5, or a table of word keys)
//! rewrites a random B-tree leaf per distinct word of every message, which cut message
//! appends 17–75× (commit 770ac6c), and FTS5 keeps a deleted message's terms until a
//! merge. A block's signature is one row, rewritten in place when a message joins it
//! (next to the session's row the same append rewrites anyway). A search reads the
//! account's signatures (a few hundred bytes per session, as PostgreSQL's `bloom` index
//! reads its signatures) and then only the messages of the blocks whose signature has
//! every bit of every word, to check them word for word: a false positive costs a read,
//! never a wrong answer.
//!
//! Signatures hold bits, not words, so no page of the file keeps a removed message's text
//! through them.

use std::ffi::{c_char, c_int};

use libsqlite3_sys as ffi;

use crate::store::search_words;

/// Bytes in a signature (2,048 bits).
pub(crate) const SIGNATURE_BYTES: usize = 256;
const BITS: u64 = (SIGNATURE_BYTES * 8) as u64;
/// Bits each word sets.
const BITS_PER_WORD: u32 = 3;
/// A block takes a message while at most this many of its bits are set with it (30 %):
/// a word not in the block then passes with a chance of at most 0.3³ ≈ 2.7 %, and a
/// search for two words 0.07 %.
const MAX_SET_BITS: u32 = 614;

/// The bits of `word`: three 11-bit slices of its 64-bit FNV-1a hash, mixed by
/// MurmurHash3's finaliser (FNV-1a alone leaves the low bits of short, similar words
/// alike). Stored in the database: changing it asks for a migration that rebuilds
/// `message_signatures`.
fn word_bits(word: &str) -> impl Iterator<Item = usize> {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = word
        .bytes()
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME));
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    (0..BITS_PER_WORD).map(move |i| ((h >> (i * 11)) % BITS) as usize)
}

/// Sets the bits of every word of `text` in `signature`.
fn add_words(signature: &mut [u8; SIGNATURE_BYTES], text: &str) {
    for word in search_words(text) {
        for bit in word_bits(&word) {
            signature[bit / 8] |= 1 << (bit % 8);
        }
    }
}

/// The mask a search for `words` compares each signature with: a block may hold a message
/// with all of them only if its signature has every bit of the mask.
pub(crate) fn mask(words: &[String]) -> Vec<u8> {
    let mut mask = [0; SIGNATURE_BYTES];
    add_words(&mut mask, &words.join(" "));
    mask.to_vec()
}

fn set_bits(signature: &[u8; SIGNATURE_BYTES]) -> u32 {
    signature.iter().map(|b| b.count_ones()).sum()
}

/// A stored signature (a NULL, or a blob of another size, reads as empty).
fn signature_of(blob: Option<&[u8]>) -> [u8; SIGNATURE_BYTES] {
    blob.and_then(|b| b.try_into().ok())
        .unwrap_or([0; SIGNATURE_BYTES])
}

/// Registers the functions on every SQLite connection this process opens from now on
/// (the migration's triggers call them: a connection without them cannot write a message
/// event). Called once, from `configure_sqlite`.
pub(crate) fn register_on_every_connection() {
    // SAFETY: `register` has the signature SQLite calls an extension's entry point with.
    let rc = unsafe { ffi::sqlite3_auto_extension(Some(register)) };
    if rc != ffi::SQLITE_OK {
        tracing::error!(
            rc,
            "could not register SQLite's message signature functions"
        );
    }
}

type ScalarFunction =
    unsafe extern "C" fn(*mut ffi::sqlite3_context, c_int, *mut *mut ffi::sqlite3_value);

unsafe extern "C" fn register(
    db: *mut ffi::sqlite3,
    _error: *mut *mut c_char,
    _api: *const ffi::sqlite3_api_routines,
) -> c_int {
    let functions: [(&std::ffi::CStr, ScalarFunction); 3] = [
        (c"tether_signature", signature_sql),
        (c"tether_signature_fits", fits_sql),
        (c"tether_signature_has", has_sql),
    ];
    for (name, function) in functions {
        // SAFETY: a connection SQLite is opening; the name is a static C string.
        let rc = unsafe {
            ffi::sqlite3_create_function_v2(
                db,
                name.as_ptr(),
                2,
                ffi::SQLITE_UTF8 | ffi::SQLITE_DETERMINISTIC | ffi::SQLITE_INNOCUOUS,
                std::ptr::null_mut(),
                Some(function),
                None,
                None,
                None,
            )
        };
        if rc != ffi::SQLITE_OK {
            return rc;
        }
    }
    ffi::SQLITE_OK
}

/// Argument `i` of a call as bytes (text or blob), `None` when NULL.
///
/// SAFETY: `argv` holds at least `i + 1` values of the current call; the slice lives only
/// as long as the call.
unsafe fn argument<'a>(argv: *mut *mut ffi::sqlite3_value, i: usize) -> Option<&'a [u8]> {
    // SAFETY: as the caller promises; `sqlite3_value_blob` before `sqlite3_value_bytes`,
    // as SQLite asks.
    unsafe {
        let value = *argv.add(i);
        if ffi::sqlite3_value_type(value) == ffi::SQLITE_NULL {
            return None;
        }
        let p = ffi::sqlite3_value_blob(value).cast::<u8>();
        let n = ffi::sqlite3_value_bytes(value) as usize;
        Some(if p.is_null() || n == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(p, n)
        })
    }
}

/// The signature and the message text of a call `(signature, text)`.
///
/// SAFETY: as for [`argument`], with two arguments.
unsafe fn signature_and_text(
    argv: *mut *mut ffi::sqlite3_value,
) -> ([u8; SIGNATURE_BYTES], String) {
    // SAFETY: as the caller promises.
    let (signature, text) = unsafe { (argument(argv, 0), argument(argv, 1)) };
    let text = String::from_utf8_lossy(text.unwrap_or_default()).into_owned();
    (signature_of(signature), text)
}

/// `tether_signature(signature, text)`: `signature` (NULL for a new block) with the
/// words of `text` added.
unsafe extern "C" fn signature_sql(
    ctx: *mut ffi::sqlite3_context,
    _argc: c_int,
    argv: *mut *mut ffi::sqlite3_value,
) {
    // SAFETY: SQLite passes the two values the function is registered with.
    let (mut signature, text) = unsafe { signature_and_text(argv) };
    add_words(&mut signature, &text);
    // SAFETY: SQLite copies the blob (SQLITE_TRANSIENT) before `signature` is dropped.
    unsafe {
        ffi::sqlite3_result_blob(
            ctx,
            signature.as_ptr().cast(),
            SIGNATURE_BYTES as c_int,
            ffi::SQLITE_TRANSIENT(),
        )
    };
}

/// `tether_signature_fits(signature, text)`: 1 when the block can take the message (with
/// its words, at most [`MAX_SET_BITS`] are set), else 0.
unsafe extern "C" fn fits_sql(
    ctx: *mut ffi::sqlite3_context,
    _argc: c_int,
    argv: *mut *mut ffi::sqlite3_value,
) {
    // SAFETY: SQLite passes the two values the function is registered with.
    let (mut signature, text) = unsafe { signature_and_text(argv) };
    add_words(&mut signature, &text);
    let fits = set_bits(&signature) <= MAX_SET_BITS;
    // SAFETY: the context of this call.
    unsafe { ffi::sqlite3_result_int(ctx, c_int::from(fits)) };
}

/// `tether_signature_has(signature, mask)`: 1 when `signature` has every bit of `mask`
/// (see [`mask`]), else 0.
unsafe extern "C" fn has_sql(
    ctx: *mut ffi::sqlite3_context,
    _argc: c_int,
    argv: *mut *mut ffi::sqlite3_value,
) {
    // SAFETY: SQLite passes the two values the function is registered with.
    let (signature, mask) = unsafe { (argument(argv, 0), argument(argv, 1)) };
    let has = match (signature, mask) {
        (Some(s), Some(m)) if s.len() == m.len() => s.iter().zip(m).all(|(s, m)| s & m == *m),
        _ => false,
    };
    // SAFETY: the context of this call.
    unsafe { ffi::sqlite3_result_int(ctx, c_int::from(has)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signature(text: &str) -> [u8; SIGNATURE_BYTES] {
        let mut s = [0; SIGNATURE_BYTES];
        add_words(&mut s, text);
        s
    }

    fn has(signature: &[u8; SIGNATURE_BYTES], words: &str) -> bool {
        let m = mask(&search_words(words));
        signature.iter().zip(&m).all(|(s, m)| s & m == *m)
    }

    #[test]
    fn a_signature_has_its_words_case_folded_and_whole() {
        let s = signature("Sunny in PARIS, sunny!");
        assert!(has(&s, "paris"));
        assert!(has(&s, "SUNNY paris in"));
        assert!(!has(&s, "rome"));
        assert_eq!(set_bits(&s), 9, "three distinct words, three bits each");
    }

    #[test]
    fn stored_bits_never_change() {
        // A change asks for a migration that rebuilds the stored signatures.
        let bits: Vec<usize> = word_bits("paris").collect();
        assert_eq!(bits, vec![1286, 1022, 434]);
    }

    #[test]
    fn a_full_block_lets_few_absent_words_through() {
        // Words join while they fit, as the trigger adds messages to a block.
        let mut block = [0; SIGNATURE_BYTES];
        let mut taken = 0;
        for i in 0.. {
            let mut next = block;
            add_words(&mut next, &format!("w{i}"));
            if set_bits(&next) > MAX_SET_BITS {
                break;
            }
            (block, taken) = (next, i + 1);
        }
        assert!((200..=260).contains(&taken), "{taken} words fill a block");
        // At 30 % of the bits set, about 0.3³ ≈ 2.7 % of absent words pass; of 10,000:
        let passing = (10_000..20_000)
            .filter(|i| has(&block, &format!("w{i}")))
            .count();
        assert!((100..=500).contains(&passing), "{passing} of 10,000 pass");
        // Two absent words together pass far more rarely.
        let pairs = (10_000..20_000)
            .filter(|i| has(&block, &format!("w{i} v{i}")))
            .count();
        assert!(pairs < 50, "{pairs} of 10,000 pairs pass");
    }
}
