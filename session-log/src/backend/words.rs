//! SQLite's word index for the text search: the words of a message (as
//! [`search_words`] reads them) as account-scoped 64-bit keys, and the SQL function
//! `tether_word_keys(account_id, text)` through which the `events` triggers of migration
//! `message_words` keep the index, so that every writer keeps it in the transaction of the
//! event.
//!
//! Keys, not words: the index never holds a message's text, so no page of the file keeps
//! a removed message's words however SQLite moved its cells before the removal (pages an
//! append rewrites are not zeroed: secure delete is on only for removals).

use std::collections::BTreeSet;
use std::ffi::{c_char, c_int};

use libsqlite3_sys as ffi;

use crate::store::search_words;

/// The key of `word` (one of [`search_words`]) in `account_id`: 64-bit FNV-1a over the
/// account's length, the account and the word. Stored in the database: changing it asks
/// for a migration that rebuilds `message_words`.
pub(crate) fn word_key(account_id: &str, word: &str) -> i64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let len = (account_id.len() as u64).to_le_bytes();
    let bytes = len
        .iter()
        .chain(account_id.as_bytes())
        .chain(word.as_bytes());
    bytes.fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME)) as i64
}

/// The distinct keys of the words of `text` in `account_id`, in key order.
pub(crate) fn word_keys(account_id: &str, text: &str) -> Vec<i64> {
    let keys: BTreeSet<i64> = search_words(text)
        .iter()
        .map(|w| word_key(account_id, w))
        .collect();
    keys.into_iter().collect()
}

/// Registers `tether_word_keys` on every SQLite connection this process opens from now
/// on (the migrations' and triggers' function; a connection without it cannot write a
/// message event). Called once, from `configure_sqlite`.
pub(crate) fn register_on_every_connection() {
    // SAFETY: `register` has the signature SQLite calls an extension's entry point with.
    let rc = unsafe { ffi::sqlite3_auto_extension(Some(register)) };
    if rc != ffi::SQLITE_OK {
        tracing::error!(rc, "could not register SQLite's tether_word_keys function");
    }
}

unsafe extern "C" fn register(
    db: *mut ffi::sqlite3,
    _error: *mut *mut c_char,
    _api: *const ffi::sqlite3_api_routines,
) -> c_int {
    // SAFETY: a connection SQLite is opening; the name is a C string that outlives it.
    unsafe {
        ffi::sqlite3_create_function_v2(
            db,
            c"tether_word_keys".as_ptr(),
            2,
            ffi::SQLITE_UTF8 | ffi::SQLITE_DETERMINISTIC | ffi::SQLITE_INNOCUOUS,
            std::ptr::null_mut(),
            Some(word_keys_sql),
            None,
            None,
            None,
        )
    }
}

/// `tether_word_keys(account_id, text)`: [`word_keys`] as a JSON array (for `json_each`),
/// NULL when either argument is NULL.
unsafe extern "C" fn word_keys_sql(
    ctx: *mut ffi::sqlite3_context,
    argc: c_int,
    argv: *mut *mut ffi::sqlite3_value,
) {
    // SAFETY: SQLite passes `argc` (2, as registered) values that live for this call;
    // `sqlite3_value_text` is called before `sqlite3_value_bytes`, as SQLite asks.
    let text = |i: usize| unsafe {
        let value = *argv.add(i);
        let p = ffi::sqlite3_value_text(value);
        if p.is_null() {
            return None;
        }
        let n = ffi::sqlite3_value_bytes(value) as usize;
        Some(String::from_utf8_lossy(std::slice::from_raw_parts(p, n)))
    };
    if argc != 2 {
        // SAFETY: the context of this call.
        unsafe { ffi::sqlite3_result_null(ctx) };
        return;
    }
    let (Some(account_id), Some(body)) = (text(0), text(1)) else {
        // SAFETY: as above.
        unsafe { ffi::sqlite3_result_null(ctx) };
        return;
    };
    let json = serde_json::to_string(&word_keys(&account_id, &body)).expect("integers serialize");
    // SAFETY: SQLite copies the text (SQLITE_TRANSIENT) before `json` is dropped.
    unsafe {
        ffi::sqlite3_result_text(
            ctx,
            json.as_ptr().cast::<c_char>(),
            json.len() as c_int,
            ffi::SQLITE_TRANSIENT(),
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_whole_words_case_folded_and_scoped_to_the_account() {
        let a = word_keys("acct", "Sunny in PARIS, sunny!");
        assert_eq!(a.len(), 3, "distinct words");
        assert!(a.contains(&word_key("acct", "paris")));
        assert!(!a.contains(&word_key("acct", "par")));
        assert_ne!(word_key("acct", "paris"), word_key("other", "paris"));
        // The account's length is hashed first: ("ab", "c") is not ("a", "bc").
        assert_ne!(word_key("ab", "c"), word_key("a", "bc"));
        // Stored keys never change (a change asks for a migration).
        assert_eq!(word_key("", ""), 0x_a8c7_f832_281a_39c5_u64 as i64);
    }
}
