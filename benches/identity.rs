//! Cost of signing a forwarded request with Web Bot Auth: the signature
//! base, an Ed25519 signature (ring), the random nonce and the three
//! header values, as the forward phase does it.
//!
//! Run with `cargo bench --bench identity`.

use std::hint::black_box;
use std::time::{Duration, SystemTime};

use criterion::{Criterion, criterion_group, criterion_main};
use http::{HeaderMap, Method};
use robots_proxy::measure::{KeyRing, Signer};

/// RFC 9421 Appendix B.1.4's test key.
const KEY: &str = r#"{"keys":[{"kty":"OKP","crv":"Ed25519",
    "d":"n4Ni-HpISpVObnQMW0wOhCKROaIKqKtW_2ZYb2p9KcU",
    "x":"JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"}]}"#;

fn bench(c: &mut Criterion) {
    let keys = KeyRing::parse(KEY).expect("key");
    let signer =
        Signer::new(keys, "https://example.com", Duration::from_secs(300)).expect("signer");
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::USER_AGENT,
        "ExampleBot/1.0".parse().expect("ua"),
    );
    c.bench_function("sign_request", |b| {
        b.iter(|| {
            let mut h = headers.clone();
            signer.sign_request(
                &Method::GET,
                "www.example.com",
                "/path/to/resource",
                &mut h,
                SystemTime::now(),
            );
            black_box(h)
        })
    });
    c.bench_function("headers_clone_only", |b| {
        b.iter(|| black_box(headers.clone()))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
