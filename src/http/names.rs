//! Header names read from a message's bytes, remembered per thread.
//!
//! `HeaderName::from_bytes` lower-cases a name into a buffer and matches
//! it against every standard name (about 115 instructions for one of
//! nginx's); a custom name is copied into a new allocation each time. The
//! same few names arrive on every message of an origin, as the client's
//! software writes them: [`parse`] keeps names seen in 128 slots, by their
//! exact bytes (a name may sit in either of two), and a name found there
//! costs a comparison and a clone. A name is remembered only as
//! `HeaderName::from_bytes` made it, so the answer is always the one it
//! would give.

use std::cell::RefCell;

use http::header::{HeaderName, InvalidHeaderName};

/// Slots of the per-thread memory (a power of two; about 10 KiB).
const SLOTS: usize = 128;

/// Names longer than this are not remembered (the standard ones are at
/// most 32 bytes long).
const LONGEST: usize = 32;

struct Slot {
    bytes: [u8; LONGEST],
    len: u8,
    name: HeaderName,
}

thread_local! {
    static SEEN: RefCell<[Option<Slot>; SLOTS]> = const { RefCell::new([const { None }; SLOTS]) };
}

/// The header name `bytes` spell, as `HeaderName::from_bytes` reads it.
pub(crate) fn parse(bytes: &[u8]) -> Result<HeaderName, InvalidHeaderName> {
    if bytes.is_empty() || bytes.len() > LONGEST {
        return HeaderName::from_bytes(bytes);
    }
    // Two slots per name: two names that share one both stay.
    let i = slot_of(bytes);
    let holds = |s: &Option<Slot>| {
        s.as_ref()
            .filter(|s| &s.bytes[..usize::from(s.len)] == bytes)
            .map(|s| s.name.clone())
    };
    let seen = SEEN.with(|seen| {
        let seen = seen.try_borrow().ok()?;
        holds(&seen[i]).or_else(|| holds(&seen[i ^ 1]))
    });
    if let Some(name) = seen {
        return Ok(name);
    }
    let name = HeaderName::from_bytes(bytes)?;
    SEEN.with(|seen| {
        if let Ok(mut seen) = seen.try_borrow_mut() {
            let mut slot = Slot {
                bytes: [0; LONGEST],
                len: bytes.len() as u8,
                name: name.clone(),
            };
            slot.bytes[..bytes.len()].copy_from_slice(bytes);
            let at = if seen[i].is_none() { i } else { i ^ 1 };
            seen[at] = Some(slot);
        }
    });
    Ok(name)
}

/// The slot for a name of 1 to [`LONGEST`] bytes: its length and three
/// of its bytes, mixed.
fn slot_of(bytes: &[u8]) -> usize {
    let n = bytes.len();
    let (first, mid, last) = (bytes[0], bytes[n / 2], bytes[n - 1]);
    let mixed = (n as u32) ^ u32::from(first) << 5 ^ u32::from(mid) << 11 ^ u32::from(last) << 17;
    (mixed.wrapping_mul(0x9E37_79B9) >> 25) as usize & (SLOTS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn same_answer_as_from_bytes_first_and_again() {
        for bytes in [
            &b"Content-Type"[..],
            b"content-type",
            b"CONTENT-TYPE",
            b"X-Cache",
            b"x-cache",
            b"Bad Name",
            b"",
            b"\0",
            b"a-name-that-is-longer-than-thirty-two-bytes",
            b"Access-Control-Allow-Credentials",
        ] {
            for _ in 0..2 {
                assert_eq!(
                    parse(bytes).ok(),
                    HeaderName::from_bytes(bytes).ok(),
                    "{bytes:?}"
                );
            }
        }
    }

    #[test]
    fn names_sharing_a_slot_each_get_their_own() {
        // Every pair of names alternated: a slot taken by another name is
        // never mistaken for it.
        let names: Vec<String> = (0..200).map(|i| format!("X-Field-{i}")).collect();
        for round in 0..3 {
            for name in names.iter().skip(round) {
                assert_eq!(
                    parse(name.as_bytes()).ok().as_ref().map(HeaderName::as_str),
                    Some(name.to_ascii_lowercase().as_str())
                );
            }
        }
    }

    proptest! {
        #[test]
        fn agrees_with_from_bytes(bytes in prop::collection::vec(any::<u8>(), 0..40),
                                  again in any::<bool>()) {
            let first = parse(&bytes).ok();
            prop_assert_eq!(&first, &HeaderName::from_bytes(&bytes).ok());
            if again {
                prop_assert_eq!(parse(&bytes).ok(), first);
            }
        }

        #[test]
        fn agrees_on_token_names(name in "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,36}") {
            for _ in 0..2 {
                prop_assert_eq!(parse(name.as_bytes()).ok(),
                    HeaderName::from_bytes(name.as_bytes()).ok());
            }
        }
    }
}
