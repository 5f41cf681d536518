//! Per-call limits, proven with the `misbehave` guest.

use std::time::{Duration, Instant};

use sandfleet_plugin::placement::Clusters;
use sandfleet_plugin::{CallErrorKind, HostConfig, KindLimits, Limits, PluginCalls, Source, Tier};

use crate::{cluster, demand, load, registry, registry_with, three_clusters};

// The guest's behaviours, chosen by the demanded image (see the guest).
const SPIN: u32 = 1;
const HOG: u32 = 2;
const TRAP: u32 = 3;
const OUT_OF_RANGE: u32 = 4;
const REFUSE: u32 = 5;
const WORK: u32 = 7;
const BEHAVE: u32 = 0;

#[test]
fn a_spinning_guest_is_stopped_by_the_deadline_and_the_host_keeps_serving() {
    let registry = registry();
    load(&registry, "misbehave", sandfleet_guests::MISBEHAVE);
    let policy = registry.placement("misbehave").unwrap();
    let clusters = three_clusters();

    let error = policy.place_blocking(&demand(SPIN), &clusters).unwrap_err();
    assert!(
        matches!(error.kind, CallErrorKind::Deadline(d) if d == Duration::from_millis(100)),
        "{error}"
    );
    assert_eq!(error.function, "place");
    assert_eq!(&*error.plugin.name, "misbehave");
    assert!(
        error.plugin.version.starts_with("sha256:"),
        "{}",
        error.plugin.version
    );
    assert!(error.is_plugin_fault());

    // The same plugin answers the next call, on a fresh instance.
    assert_eq!(
        policy.place_blocking(&demand(BEHAVE), &clusters).unwrap(),
        0
    );
}

#[test]
fn other_plugins_keep_answering_while_one_spins() {
    let registry = registry();
    load(&registry, "misbehave", sandfleet_guests::MISBEHAVE);
    load(&registry, "least-loaded", sandfleet_guests::LEAST_LOADED);
    let spinner = registry.placement("misbehave").unwrap();
    let good = registry.placement("least-loaded").unwrap();
    let clusters = three_clusters();

    let spinning =
        std::thread::spawn(move || spinner.place_blocking(&demand(SPIN), &three_clusters()));
    let mut answered = 0;
    let until = Instant::now() + Duration::from_millis(50);
    while Instant::now() < until {
        assert_eq!(good.place_blocking(&demand(0), &clusters).unwrap(), 1);
        answered += 1;
    }
    assert!(answered > 0);
    let error = spinning.join().unwrap().unwrap_err();
    assert!(matches!(error.kind, CallErrorKind::Deadline(_)), "{error}");
}

/// The CPU time this thread has used.
fn thread_cpu() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// The deadline is the call's CPU time: a call that computes well within
/// it answers even when the host keeps it waiting past it. The call runs on
/// a thread pinned to one CPU with five threads spinning there at the same
/// priority, so it gets at most a sixth of that CPU: a call of a quarter of
/// the deadline of CPU takes at least 1.5 deadlines of wall time, and
/// reaches the wall ceiling (10) only with 34 more busy threads there.
#[test]
fn a_host_too_busy_to_run_a_call_does_not_spend_its_deadline() {
    const SPINNERS: usize = 5;
    let deadline = Duration::from_millis(200);
    let mut limits = KindLimits::default();
    limits.placement.deadline = deadline;
    let registry = registry_with(HostConfig {
        limits,
        ..HostConfig::default()
    });
    load(&registry, "misbehave", sandfleet_guests::MISBEHAVE);
    let policy = registry.placement("misbehave").unwrap();
    let work = |rounds: u64| {
        let mut demand = demand(WORK);
        demand.sequence = rounds;
        demand
    };
    let cpu_of = |rounds: u64| {
        let before = thread_cpu();
        assert_eq!(
            policy
                .place_blocking(&work(rounds), &three_clusters())
                .unwrap(),
            0
        );
        thread_cpu() - before
    };
    // Rounds that take a quarter of the deadline of CPU, scaled from a call
    // long enough to time.
    let mut rounds: u64 = 1 << 14;
    let timed = loop {
        let cpu = cpu_of(rounds);
        if cpu >= deadline / 10 {
            break cpu;
        }
        rounds *= 2;
        assert!(rounds < 1 << 40, "the guest's rounds take no time");
    };
    let rounds = (rounds as f64 * (deadline.as_secs_f64() / 4.0) / timed.as_secs_f64()) as u64;
    let allowed = rustix::thread::sched_getaffinity(None).unwrap();
    let cpu = (0..rustix::thread::CpuSet::MAX_CPU)
        .find(|&cpu| allowed.is_set(cpu))
        .expect("a CPU this test may run on");
    let pin = move || {
        let mut one = rustix::thread::CpuSet::new();
        one.set(cpu);
        rustix::thread::sched_setaffinity(None, &one).unwrap();
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinners: Vec<_> = (0..SPINNERS)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                pin();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let calling = std::thread::spawn(move || {
        pin();
        let (started, cpu_before) = (Instant::now(), thread_cpu());
        let answer = policy.place_blocking(&work(rounds), &three_clusters());
        (answer, started.elapsed(), thread_cpu() - cpu_before)
    });
    let (answer, wall, used) = calling.join().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for spinner in spinners {
        spinner.join().unwrap();
    }
    let seen = format!("{wall:?} of wall time, {used:?} of CPU");
    assert!(wall > deadline, "the call was not kept waiting: {seen}");
    assert_eq!(answer.unwrap(), 0, "after {seen}");
}

#[test]
fn the_deadline_is_configurable_per_kind() {
    let mut limits = KindLimits::default();
    limits.placement.deadline = Duration::from_millis(20);
    let registry = registry_with(HostConfig {
        limits,
        ..HostConfig::default()
    });
    load(&registry, "misbehave", sandfleet_guests::MISBEHAVE);
    let error = registry
        .placement("misbehave")
        .unwrap()
        .place_blocking(&demand(SPIN), &three_clusters())
        .unwrap_err();
    assert!(
        matches!(error.kind, CallErrorKind::Deadline(d) if d == Duration::from_millis(20)),
        "{error}"
    );
}

#[test]
fn an_allocating_guest_is_stopped_by_the_memory_cap() {
    let registry = registry();
    load(&registry, "misbehave", sandfleet_guests::MISBEHAVE);
    let policy = registry.placement("misbehave").unwrap();
    let error = policy
        .place_blocking(&demand(HOG), &three_clusters())
        .unwrap_err();
    assert!(
        matches!(error.kind, CallErrorKind::MemoryCap(cap) if cap == 64 << 20),
        "{error}"
    );
    assert!(
        error.to_string().contains("memory cap of 64 MiB"),
        "{error}"
    );
    assert_eq!(
        policy
            .place_blocking(&demand(BEHAVE), &three_clusters())
            .unwrap(),
        0
    );
}

#[test]
fn a_larger_memory_cap_lets_the_same_guest_finish() {
    let registry = registry_with(HostConfig {
        limits: KindLimits::uniform(Limits {
            memory_cap: 512 << 20,
            deadline: Duration::from_secs(10),
            fuel: None,
        }),
        max_instances: 8,
        ..HostConfig::default()
    });
    load(&registry, "misbehave", sandfleet_guests::MISBEHAVE);
    // The guest returns how many 1 MiB blocks it held.
    let held = registry
        .placement("misbehave")
        .unwrap()
        .place_blocking(&demand(HOG), &three_clusters());
    // 256 is out of range for three clusters: the contract check sees the answer.
    assert!(
        matches!(&held.unwrap_err().kind, CallErrorKind::Contract(detail) if detail.contains("256")),
    );
}

#[test]
fn a_trap_is_reported_with_plugin_version_and_function() {
    let registry = registry();
    load(&registry, "misbehave", sandfleet_guests::MISBEHAVE);
    let policy = registry.placement("misbehave").unwrap();
    let error = policy
        .place_blocking(&demand(TRAP), &three_clusters())
        .unwrap_err();
    assert!(matches!(&error.kind, CallErrorKind::Trap(_)), "{error}");
    let message = error.to_string();
    assert!(
        message.starts_with("plugin `misbehave` (sha256:"),
        "{message}"
    );
    assert!(message.contains(") place: trapped"), "{message}");
}

#[test]
fn an_out_of_range_answer_is_a_contract_error() {
    let registry = registry();
    load(&registry, "misbehave", sandfleet_guests::MISBEHAVE);
    let policy = registry.placement("misbehave").unwrap();
    let error = policy
        .place_blocking(
            &demand(OUT_OF_RANGE),
            &Clusters::from_states(&[cluster(1), cluster(2)]),
        )
        .unwrap_err();
    match &error.kind {
        CallErrorKind::Contract(detail) => assert_eq!(
            detail,
            "cluster index 2 is out of range (there are 2 clusters)"
        ),
        other => panic!("expected a contract error, got {other:?}"),
    }
}

#[test]
fn a_declined_call_is_not_a_plugin_fault() {
    let registry = registry();
    load(&registry, "misbehave", sandfleet_guests::MISBEHAVE);
    let error = registry
        .placement("misbehave")
        .unwrap()
        .place_blocking(&demand(REFUSE), &three_clusters())
        .unwrap_err();
    assert!(
        matches!(&error.kind, CallErrorKind::Declined { kind: "unsatisfiable", message } if message == "refused on request"),
        "{error}"
    );
    assert!(!error.is_plugin_fault());
}

#[test]
fn fuel_stops_a_spinning_guest_when_enabled() {
    let registry = registry_with(HostConfig {
        fuel: true,
        limits: KindLimits::uniform(Limits {
            fuel: Some(1_000_000),
            deadline: Duration::from_secs(30),
            ..Limits::default()
        }),
        ..HostConfig::default()
    });
    load(&registry, "misbehave", sandfleet_guests::MISBEHAVE);
    let policy = registry.placement("misbehave").unwrap();
    let error = policy
        .place_blocking(&demand(SPIN), &three_clusters())
        .unwrap_err();
    assert!(
        matches!(error.kind, CallErrorKind::OutOfFuel(1_000_000)),
        "{error}"
    );
    assert_eq!(
        policy
            .place_blocking(&demand(BEHAVE), &three_clusters())
            .unwrap(),
        0
    );
}

#[test]
fn a_baseline_build_runs_under_the_same_limits() {
    // No cache: a quick compile takes an optimized build it finds there.
    let registry = registry_with(HostConfig::default());
    let bytes = std::fs::read(sandfleet_guests::MISBEHAVE).unwrap();
    let compiled = registry
        .host()
        .compile_quickly("misbehave", &bytes, Source::Memory)
        .unwrap();
    assert_eq!(compiled.tier, Tier::Baseline);
    registry.install(compiled).unwrap();
    let policy = registry.placement("misbehave").unwrap();
    assert_eq!(policy.version().tier, Tier::Baseline);
    let clusters = three_clusters();

    let kind = |image| {
        policy
            .place_blocking(&demand(image), &clusters)
            .unwrap_err()
            .kind
    };
    assert!(matches!(kind(SPIN), CallErrorKind::Deadline(d) if d == Duration::from_millis(100)));
    assert!(matches!(kind(HOG), CallErrorKind::MemoryCap(cap) if cap == 64 << 20));
    assert!(matches!(kind(TRAP), CallErrorKind::Trap(_)));
    assert!(matches!(kind(OUT_OF_RANGE), CallErrorKind::Contract(_)));
    assert_eq!(
        policy.place_blocking(&demand(BEHAVE), &clusters).unwrap(),
        0
    );
}

#[test]
fn calls_and_faults_are_counted_per_version_and_a_decline_is_no_fault() {
    let registry = registry();
    load(&registry, "misbehave", sandfleet_guests::MISBEHAVE);
    let policy = registry.placement("misbehave").unwrap();
    let version = policy.version().plugin.version.to_string();
    let clusters = three_clusters();
    policy.place_blocking(&demand(BEHAVE), &clusters).unwrap();
    policy
        .place_blocking(&demand(REFUSE), &clusters)
        .unwrap_err();
    policy.place_blocking(&demand(TRAP), &clusters).unwrap_err();
    policy
        .place_blocking(
            &demand(OUT_OF_RANGE),
            &Clusters::from_states(&[cluster(1), cluster(2)]),
        )
        .unwrap_err();
    assert_eq!(
        registry.call_counts(),
        [PluginCalls {
            name: "misbehave".into(),
            version,
            calls: 4,
            faults: 2,
            fallbacks: 0,
        }]
    );
}
