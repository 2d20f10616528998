//! Criterion benchmarks of the robots.txt engine: parse, compile
//! (`agent_rules`) and per-URL check, on a realistic synthetic file
//! (`benches/data/realistic-robots.txt`), on real large files from
//! `../shared/bench-data/` (skipped when absent) and on adversarial wildcard
//! rules. Check benchmarks judge a batch of URLs per iteration and report
//! elements per second: divide to get the time per URL. `check_lines` times
//! the `check` command's read-judge-print loop on in-memory input.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use robots_proxy::cli::check;
use robots_proxy::robots::Robots;

const REALISTIC: &[u8] = include_bytes!("data/realistic-robots.txt");

fn shared(name: &str) -> Option<Vec<u8>> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/bench-data/");
    std::fs::read(format!("{dir}{name}")).ok()
}

/// A small deterministic generator (no dependency, same URLs every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.next() as usize % items.len()]
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// URLs for the realistic file: product and category pages, news, static
/// files, and the filtered, sorted, tracked and private URLs it blocks.
pub fn realistic_urls(n: usize) -> Vec<String> {
    let sections = [
        "women",
        "men",
        "kids",
        "home",
        "garden",
        "electronics",
        "outdoor",
        "kitchen",
        "tv",
        "toys",
    ];
    let words = [
        "summer", "classic", "eco", "smart", "pro", "vintage", "travel",
    ];
    let mut r = Lcg(0x9309);
    (0..n)
        .map(|_| {
            let s = r.pick(&sections);
            let (w1, w2) = (r.pick(&words), r.pick(&words));
            let k = r.below(90_000) + 1000;
            let path = match r.below(16) {
                0..=3 => format!("/{s}/{w1}-{w2}-{k}.html"),
                4 => format!("/{s}/"),
                5 => format!("/{s}/{w1}/filter/color-red"),
                6 => format!("/search?q={w1}+{w2}&page={}", k % 9),
                7 => format!("/p/{k}/reviews?page=2"),
                8 => format!("/news/2025/{:02}/{w1}-{w2}-{k}", k % 12 + 1),
                9 => format!("/news/{w1}-{k}/comments"),
                10 => format!("/static/app.{k:x}.js"),
                11 => format!("/{s}/{w1}-{k}?sort=price&dir=asc"),
                12 => format!("/wp-content/uploads/2025/{w2}-{k}.jpg"),
                13 => "/account/orders".to_owned(),
                14 => format!("/help/shipping/{w1}"),
                _ => format!("/{s}/{w1}-{k}?utm_source=news&utm_medium=email"),
            };
            if r.below(10) < 3 {
                format!("https://www.shop-and-news.example{path}")
            } else {
                path
            }
        })
        .collect()
}

/// URLs in the style of quora.com's: one to three segments.
pub fn quora_urls(n: usize) -> Vec<String> {
    let seg = [
        "answer",
        "log",
        "share",
        "What-is-the-best-way-to-learn-Rust",
        "profile",
        "api",
        "images",
        "questions",
        "topic",
        "q",
        "comment",
        "unanswered",
        "ajax",
        "search",
        "static",
        "about",
        "followers",
    ];
    let mut r = Lcg(0x4242);
    (0..n)
        .map(|_| {
            let mut path = String::new();
            for _ in 0..=r.below(3) {
                path.push('/');
                path.push_str(r.pick(&seg));
                if r.below(2) == 0 {
                    path.push_str(&format!("-{}", r.below(1000)));
                }
            }
            if r.below(10) < 3 {
                format!("https://www.quora.com{path}")
            } else {
                path
            }
        })
        .collect()
}

/// Quora-style URLs as `bench/robots-check` makes them: 60% with a query
/// (one of them holding a path), 80% absolute.
pub fn quora_urls_with_queries(n: usize) -> Vec<String> {
    let queries = [
        "share=1",
        "q=rust+robots",
        "page=2",
        "ch=10&oid=12345&share=abc&srid=u&target_type=answer",
        "redirected_qid=42",
        "next=/answer/log",
        "sort=new&filter=all",
    ];
    let mut r = Lcg(0x9309);
    quora_urls(n)
        .into_iter()
        .map(|url| {
            let path = url.strip_prefix("https://www.quora.com").unwrap_or(&url);
            let path = if r.below(10) < 6 {
                format!("{path}?{}", r.pick(&queries))
            } else {
                path.to_owned()
            };
            if r.below(10) < 8 {
                format!("https://www.quora.com{path}")
            } else {
                path
            }
        })
        .collect()
}

/// Wildcard chains, anchors and near-miss literals: the rules a hostile or
/// careless site could write to slow a matcher down.
pub fn adversarial_robots() -> String {
    let mut txt = String::from("user-agent: *\n");
    for i in 0..12 {
        let c = (b'a' + i as u8) as char;
        txt.push_str(&format!("disallow: /*{c}*{c}*{c}*{c}*{c}*{c}*b\n"));
        txt.push_str(&format!("allow: /*{c}*{c}*{c}*{c}*{c}*{c}$\n"));
        txt.push_str(&format!("disallow: /*/*/*/*/*/*/{c}$\n"));
        txt.push_str(&format!("disallow: /*{c}{c}{c}{c}{c}{c}{c}{c}{c}{c}x\n"));
    }
    txt.push_str("disallow: /*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b$\n");
    txt.push_str("disallow: /*%*%*%*%*%*%*%*%\n");
    txt.push_str("disallow: /*?*&*&*&*&*&*&*&*&\n");
    txt.push_str("allow: /*\n");
    txt
}

fn config() -> Criterion {
    Criterion::default()
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(30)
}

fn bench_parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse");
    let mut inputs = vec![("realistic", REALISTIC.to_vec())];
    for (name, file) in [
        ("quora", "robots-large-quora.txt"),
        ("wikipedia", "robots-large-wikipedia.txt"),
    ] {
        match shared(file) {
            Some(bytes) => inputs.push((name, bytes)),
            None => eprintln!("skipping parse/{name}: ../shared/bench-data/{file} not found"),
        }
    }
    inputs.push(("content-usage-16k-line", content_usage_line()));
    for (name, bytes) in &inputs {
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        g.bench_function(*name, |b| b.iter(|| Robots::parse(black_box(bytes))));
    }
    g.finish();
}

/// A `Content-Usage` line as long as a robots.txt line may be (16 KiB),
/// with some 2,800 short keys: read in one pass, whatever the keys.
fn content_usage_line() -> Vec<u8> {
    let mut line = String::from("User-agent: *\nContent-Usage: search=y");
    let mut n = 0usize;
    while line.len() < 16 * 1024 - 16 {
        let (mut k, mut key) = (n, Vec::new());
        loop {
            key.push(b'a' + (k % 26) as u8);
            k /= 26;
            if k == 0 {
                break;
            }
            k -= 1;
        }
        key.reverse();
        line.push(',');
        line.push_str(&String::from_utf8_lossy(&key));
        line.push_str("=y");
        n += 1;
    }
    line.push_str(",train-ai=n\n");
    line.into_bytes()
}

fn bench_compile(c: &mut Criterion) {
    let mut g = c.benchmark_group("agent_rules");
    let realistic = Robots::parse(REALISTIC);
    g.bench_function("realistic/star", |b| {
        b.iter(|| realistic.agent_rules(black_box("ExampleBot")))
    });
    g.bench_function("realistic/googlebot", |b| {
        b.iter(|| realistic.agent_rules(black_box("Googlebot")))
    });
    if let Some(bytes) = shared("robots-large-quora.txt") {
        let quora = Robots::parse(&bytes);
        g.bench_function("quora/googlebot", |b| {
            b.iter(|| quora.agent_rules(black_box("Googlebot")))
        });
    }
    g.finish();
}

fn bench_check(c: &mut Criterion) {
    let mut g = c.benchmark_group("check");
    let realistic = Robots::parse(REALISTIC);
    let urls = realistic_urls(1000);
    g.throughput(Throughput::Elements(urls.len() as u64));
    for (name, agent) in [
        ("realistic/star", "ExampleBot"),
        ("realistic/googlebot", "Googlebot"),
    ] {
        let rules = realistic.agent_rules(agent);
        g.bench_function(name, |b| {
            b.iter(|| {
                urls.iter()
                    .filter(|u| rules.check_url(black_box(u)).allowed)
                    .count()
            })
        });
    }
    if let Some(bytes) = shared("robots-large-quora.txt") {
        let rules = Robots::parse(&bytes).agent_rules("Googlebot");
        let urls = quora_urls(1000);
        g.bench_function("quora/googlebot", |b| {
            b.iter(|| {
                urls.iter()
                    .filter(|u| rules.check_url(black_box(u)).allowed)
                    .count()
            })
        });
    }
    if let Some(bytes) = shared("robots-large-quora.txt") {
        // Rules such as `/*/followers`, whose literal is longer than the
        // part the index searches.
        let rules = Robots::parse(&bytes).agent_rules("Googlebot");
        let urls = quora_urls_with_queries(1000);
        g.bench_function("quora/googlebot-queries", |b| {
            b.iter(|| {
                urls.iter()
                    .filter(|u| rules.check_url(black_box(u)).allowed)
                    .count()
            })
        });
    }
    let adversarial = Robots::parse(adversarial_robots().as_bytes()).agent_rules("x");
    g.bench_function("adversarial/realistic-urls", |b| {
        b.iter(|| {
            urls.iter()
                .filter(|u| adversarial.check_url(black_box(u)).allowed)
                .count()
        })
    });
    g.finish();

    // 10 KiB paths: time grows with the path, never with the number of
    // stars; reported per byte.
    let mut g = c.benchmark_group("check_long_path");
    let long_paths = [
        ("aaaa", format!("/{}", "a".repeat(10 * 1024))),
        ("segments", "/abcdefghij".repeat(1024)),
        ("query", format!("/p?{}", "a=1&".repeat(2560))),
    ];
    for (name, path) in &long_paths {
        g.throughput(Throughput::Bytes(path.len() as u64));
        g.bench_function(format!("adversarial/{name}"), |b| {
            b.iter(|| adversarial.check(black_box(path)).allowed)
        });
        let rules = realistic.agent_rules("ExampleBot");
        g.bench_function(format!("realistic/{name}"), |b| {
            b.iter(|| rules.check(black_box(path)).allowed)
        });
    }
    g.finish();
}

/// `robots-proxy check`'s loop without the process: 100,000 quora URLs as
/// lines of input, judged and printed (to memory), on one thread and on two.
fn bench_check_lines(c: &mut Criterion) {
    let Some(bytes) = shared("robots-large-quora.txt") else {
        eprintln!("skipping check_lines: ../shared/bench-data/robots-large-quora.txt not found");
        return;
    };
    let rules = Robots::parse(&bytes).agent_rules("Googlebot");
    let urls = quora_urls_with_queries(100_000);
    let input = urls.join("\n").into_bytes();
    let mut g = c.benchmark_group("check_lines");
    g.throughput(Throughput::Elements(urls.len() as u64));
    let mut out = Vec::with_capacity(input.len() * 2);
    for threads in [1, 2] {
        g.bench_function(format!("quora/googlebot-queries/{threads}-thread"), |b| {
            b.iter(|| {
                out.clear();
                check::check_lines(&rules, black_box(&input[..]), &mut out, threads)
                    .expect("in-memory I/O")
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_parse, bench_compile, bench_check, bench_check_lines
}
criterion_main!(benches);
