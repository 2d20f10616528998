//! Memory of the robots.txt cache at scale.
//!
//! Fills a `RobotsCache` with ORIGINS (default 100,000) distinct origins,
//! each given its own parsed copy of a real-world robots.txt (cycling
//! through the corpus), which the cache compiles for the configured agent
//! and keeps as a fetch would, dropping the parsed file: the proxy's steady
//! state. No two origins share memory. Then judges one URL per origin
//! through the `Gate` (a cache hit: no network). Reports RSS and live heap
//! bytes before and after each step, and bytes per origin.
//!
//! Then, per corpus file: rule count for the agent, heap bytes of a parsed
//! copy and of its compiled rules, compile time, the rule index's share (the
//! engine's own `memory_usage`); and the fixed cost per cached origin.
//!
//!   cargo run --release --example cache_memory
//!   ORIGINS=200000 ROBOTS_CORPUS=/path/to/dir cargo run --release --example cache_memory
//!
//! Compiling stops early (and figures are per judged origin) once RSS passes
//! MAX_RSS_MIB (default 4096), so a shared machine is not run out of memory.
//!
//! The corpus directory defaults to ../shared/bench-data/corpus beside the
//! repository (then /work/shared/bench-data/corpus).

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use robots_proxy::measure::{ClientSettings, build_client};
use robots_proxy::measure::{
    FetchSettings, Gate, Origin, RobotsCache, RobotsCacheSettings, Scheme,
};
use robots_proxy::robots::Robots;

/// The system allocator, counting live bytes.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// VmRSS of this process in bytes.
fn rss() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<usize>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn corpus_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ROBOTS_CORPUS") {
        return dir.into();
    }
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/bench-data/corpus");
    if beside.is_dir() {
        return beside;
    }
    PathBuf::from("/work/shared/bench-data/corpus")
}

/// A step's figures.
struct Snapshot {
    rss: usize,
    live: usize,
}

impl Snapshot {
    fn now() -> Snapshot {
        Snapshot {
            rss: rss(),
            live: live(),
        }
    }
}

fn report(what: &str, from: &Snapshot, to: &Snapshot, origins: usize) {
    let d_rss = to.rss.saturating_sub(from.rss);
    let d_live = to.live.saturating_sub(from.live);
    println!(
        "{what:<44} RSS +{:>7.1} MiB ({:>6} B/origin)   live heap +{:>7.1} MiB ({:>6} B/origin)",
        mib(d_rss),
        d_rss / origins.max(1),
        mib(d_live),
        d_live / origins.max(1),
    );
}

fn percentile(sorted: &[usize], p: f64) -> usize {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Per file: heap bytes of a parsed copy and of its compiled rules, compile
/// time, and the rule index's bytes.
fn analyse(templates: &[Robots], names: &[String], agent: &str) -> Vec<usize> {
    let mut parsed = Vec::new();
    let mut compiled = Vec::new();
    let mut times = Vec::new();
    let mut rule_counts = Vec::new();
    let (mut indexed, mut index_total) = (0usize, 0usize);
    let mut biggest: Vec<(usize, usize, &str)> = Vec::new();
    for (robots, name) in templates.iter().zip(names) {
        let l0 = live();
        let copy = robots.clone();
        let l1 = live();
        let t = Instant::now();
        let rules = copy.agent_rules(agent);
        times.push(t.elapsed().as_nanos() as usize);
        let l2 = live();
        parsed.push(l1.saturating_sub(l0));
        compiled.push(l2.saturating_sub(l1));
        biggest.push((l2.saturating_sub(l1), rules.rules().len(), name));
        rule_counts.push(rules.rules().len());
        if rules.is_indexed() {
            indexed += 1;
            index_total += rules.index_memory_usage();
        }
        drop(rules);
        drop(copy);
    }
    let n = templates.len().max(1);
    let mean = |v: &[usize]| v.iter().sum::<usize>() / n;
    let (mp, mc, mt) = (mean(&parsed), mean(&compiled), mean(&times));
    let compiled_in_order = compiled.clone();
    parsed.sort_unstable();
    rule_counts.sort_unstable();
    compiled.sort_unstable();
    times.sort_unstable();
    let label = if templates.len() == 1 {
        names[0].clone()
    } else {
        format!("{} corpus files", templates.len())
    };
    println!("per file, {label}, agent {agent:?} (live heap bytes):");
    println!(
        "  rules for the agent mean {:>8}  p50 {:>8}  p99 {:>8}  max {:>8}",
        rule_counts.iter().sum::<usize>() / n,
        percentile(&rule_counts, 0.5),
        percentile(&rule_counts, 0.99),
        percentile(&rule_counts, 1.0)
    );
    println!(
        "  parsed Robots       mean {mp:>8}  p50 {:>8}  p99 {:>8}  max {:>8}",
        percentile(&parsed, 0.5),
        percentile(&parsed, 0.99),
        percentile(&parsed, 1.0)
    );
    println!(
        "  compiled AgentRules mean {mc:>8}  p50 {:>8}  p99 {:>8}  max {:>8}",
        percentile(&compiled, 0.5),
        percentile(&compiled, 0.99),
        percentile(&compiled, 1.0)
    );
    println!(
        "  compile time (us)   mean {:>8.1}  p50 {:>8.1}  p99 {:>8.1}  max {:>8.1}",
        mt as f64 / 1e3,
        percentile(&times, 0.5) as f64 / 1e3,
        percentile(&times, 0.99) as f64 / 1e3,
        percentile(&times, 1.0) as f64 / 1e3
    );
    println!(
        "  rule index (> {} rules) in {indexed} of {} files: {} B per file on average \
         (engine's estimate)",
        robots_proxy::robots::INDEX_THRESHOLD,
        templates.len(),
        index_total / n,
    );
    if templates.len() > 1 {
        biggest.sort_unstable_by(|a, b| b.cmp(a));
        let top: Vec<String> = biggest
            .iter()
            .take(3)
            .map(|(bytes, rules, name)| format!("{name} ({rules} rules, {bytes} B)"))
            .collect();
        println!("  largest compiled: {}", top.join(", "));
    }
    compiled_in_order
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let origins: usize = match std::env::var("ORIGINS") {
        Ok(v) => v
            .parse()
            .map_err(|_| format!("ORIGINS must be a number, got {v:?}"))?,
        Err(_) => 100_000,
    };
    let agent = "robots-proxy";
    let dir = corpus_dir();

    // The corpus, parsed once; these templates are not counted.
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("cannot read the corpus {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    let mut templates = Vec::with_capacity(paths.len());
    let mut names = Vec::with_capacity(paths.len());
    let mut corpus_bytes = 0usize;
    let mut corpus_rules = 0usize;
    for path in &paths {
        let bytes = std::fs::read(path)?;
        corpus_bytes += bytes.len();
        let robots = Robots::parse(&bytes);
        corpus_rules += robots.rule_count();
        templates.push(robots);
        names.push(
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
    }
    if templates.is_empty() {
        return Err(format!("no robots.txt files in {}", dir.display()).into());
    }
    println!(
        "corpus: {} files from {}, mean {} bytes and {:.1} rules per file",
        templates.len(),
        dir.display(),
        corpus_bytes / templates.len(),
        corpus_rules as f64 / templates.len() as f64
    );

    let max_rss: usize = match std::env::var("MAX_RSS_MIB") {
        Ok(v) => v
            .parse()
            .map_err(|_| format!("MAX_RSS_MIB must be a number, got {v:?}"))?,
        Err(_) => 4096,
    };

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let budget_mib: Option<usize> = std::env::var("CACHE_MAX_MIB")
        .ok()
        .and_then(|v| v.parse().ok());
    let live_per_origin = runtime.block_on(async {
        let tls = robots_proxy::measure::client_config(&[])?;
        let client = build_client(
            &ClientSettings {
                policy: robots_proxy::measure::Policy::new(false),
                connect_timeout: Duration::from_secs(10),
                pool_idle_per_host: 32,
                pool_idle_max: 1024,
                pool_idle_timeout: Duration::from_secs(90),
            },
            Arc::new(tls),
        );
        let cache = Arc::new(RobotsCache::new(
            client,
            FetchSettings {
                user_agent: "robots-proxy-bench".into(),
                timeout: Duration::from_secs(10),
                max_redirects: 5,
                max_informational: 10,
            },
            RobotsCacheSettings {
                capacity: origins,
                default_ttl: Duration::from_secs(24 * 3600),
                min_ttl: Duration::from_secs(60),
                max_ttl: Duration::from_secs(7 * 24 * 3600),
                unreachable_retry: Duration::from_secs(300),
                stale_max: Duration::from_secs(30 * 24 * 3600),
                // Unbounded by bytes to measure the cost per origin;
                // `CACHE_MAX_MIB` applies a budget (as `robots.cache_max_mib` does).
                max_bytes: budget_mib.map_or(usize::MAX, |m| m.saturating_mul(1024 * 1024)),
                agents: vec![agent.to_string()],
            },
        ));
        let gate = Gate::new(cache.clone(), robots_proxy::measure::Policy::new(false));
        let host = |i: usize| format!("www.site{i:06}.example.com");

        let base = Snapshot::now();
        println!(
            "baseline (corpus templates loaded): RSS {:.1} MiB, live heap {:.1} MiB",
            mib(base.rss),
            mib(base.live)
        );

        let t = Instant::now();
        for i in 0..origins {
            let origin = Origin::new(Scheme::Https, &host(i), None)?;
            // A copy per origin: what a fetch hands the cache.
            cache.insert_parsed(origin, templates[i % templates.len()].clone());
        }
        let filled = Snapshot::now();
        let fill_time = t.elapsed();
        if let Some(mib_budget) = budget_mib {
            println!(
                "budget {mib_budget} MiB: {} of {origins} origins kept, {:.1} MiB accounted, RSS {:.1} MiB (+{:.1} MiB over baseline) after {:.2} s",
                cache.len(),
                mib(cache.memory_usage()),
                mib(filled.rss),
                mib(filled.rss.saturating_sub(base.rss)),
                fill_time.as_secs_f64()
            );
            return Ok::<_, Box<dyn std::error::Error>>(0);
        }
        assert_eq!(cache.len(), origins, "every origin is cached");

        // One judged request per origin: a cache hit, so no fetch, and no
        // growth (the rules were compiled when the entry was stored).
        let t = Instant::now();
        let mut disallowed = 0usize;
        let mut judged = origins;
        for i in 0..origins {
            // Stop before the machine runs short; the rest is extrapolated.
            if i % 1000 == 0 && rss() > max_rss << 20 {
                judged = i;
                println!(
                    "stopped compiling after {i} origins: RSS over MAX_RSS_MIB={max_rss}; \
                     figures below are per judged origin"
                );
                break;
            }
            let origin = Origin::new(Scheme::Https, &host(i), None)?;
            let j = gate.judge(&origin, "/search?q=robots", agent).await;
            if !j.decision.is_allowed() {
                disallowed += 1;
            }
            if j.entry.as_ref().is_some_and(|e| e.state.name() != "ok") {
                return Err(format!("origin {origin} was not a cache hit").into());
            }
        }
        let compiled = Snapshot::now();
        let compile_time = t.elapsed();

        println!(
            "{origins} origins: filled (compiled for {agent:?}) in {:.2} s; {judged} judged \
             in {:.2} s; {disallowed} of them disallow /search?q=robots",
            fill_time.as_secs_f64(),
            compile_time.as_secs_f64()
        );
        report("cached, compiled for one agent", &base, &filled, origins);
        report("judged once each (on top)", &filled, &compiled, judged);
        let per_origin = filled.rss.saturating_sub(base.rss) / origins.max(1)
            + compiled.rss.saturating_sub(filled.rss) / judged.max(1);
        let per_origin_live = filled.live.saturating_sub(base.live) / origins.max(1)
            + compiled.live.saturating_sub(filled.live) / judged.max(1);
        println!(
            "{:<44} RSS {:>8.1} MiB ({per_origin:>6} B/origin)   live heap {:>8.1} MiB ({per_origin_live:>6} B/origin)",
            "steady state, per 100,000",
            mib(per_origin * 100_000),
            mib(per_origin_live * 100_000),
        );
        let total = per_origin * origins;
        println!(
            "goal: <= 256 MiB for 100,000 origins -> {:.1} MiB per 100,000 origins in steady state: {}",
            mib(per_origin * 100_000),
            if total * 100_000 / origins.max(1) <= 256 << 20 {
                "met"
            } else {
                "MISSED"
            }
        );
        drop(gate);
        drop(cache);
        Ok::<_, Box<dyn std::error::Error>>(
            filled.live.saturating_sub(base.live) / origins.max(1),
        )
    })?;

    println!();
    let compiled = analyse(&templates, &names, agent);
    // The same files in the same proportions as the fill.
    let n = templates.len();
    let weighted = (0..origins).map(|i| compiled[i % n]).sum::<usize>() / origins.max(1);
    println!(
        "  fixed cost per cached origin (key, entry, LRU slot): about {} B \
         (live heap per cached origin minus the mean compiled rules)",
        live_per_origin.saturating_sub(weighted)
    );
    for extra in ["robots-large-wikipedia.txt", "robots-large-quora.txt"] {
        let path = dir.join("..").join(extra);
        if let Ok(bytes) = std::fs::read(&path) {
            let _ = analyse(&[Robots::parse(&bytes)], &[extra.to_string()], agent);
        }
    }
    Ok(())
}
