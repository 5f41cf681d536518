//! Groups (`group_size`): G rollouts of a task from one set-up. On the
//! local backend with namespaces (which snapshots) the set-up runs once per
//! task and the other members run in forks of it; without snapshots every
//! member sets up its own sandbox. Either way each member is graded and
//! recorded on its own.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use std::sync::Mutex;

use sandfleet_core::Backend;
use sandfleet_engine::{
    BackendCall, CallObserver, CancellationToken, FleetSettings, Observed, Operation, RunReport,
    Strategy, WorkItem,
};

use crate::fixture::Fixture;

const TASKS: usize = 4;
const GROUP: u32 = 8;

/// A task whose set-up leaves a token of its own making (and takes a
/// second), and whose test prints the token, then fails if another member
/// wrote into its sandbox.
fn grouped_row(id: &str) -> String {
    serde_json::json!({
        "id": id,
        "image": "img0",
        "setup": ["sleep 1; od -An -N8 -tx1 /dev/urandom | tr -d ' \\n' > setup-token"],
        "test": "echo token=$(cat setup-token); test ! -e member-was-here && touch member-was-here",
        "timeout_s": 60,
    })
    .to_string()
}

fn items(fixture: &Fixture) -> Vec<WorkItem> {
    let rows: Vec<String> = (0..TASKS).map(|i| grouped_row(&format!("t{i}"))).collect();
    fixture
        .items(&rows)
        .into_iter()
        .flat_map(|item| item.group(GROUP))
        .collect()
}

async fn run(fixture: &Fixture, backend: Arc<dyn Backend>) -> RunReport {
    let settings = FleetSettings {
        strategy: Strategy::None,
        max_concurrent: 6,
        ..FleetSettings::default()
    };
    let spec = fixture.spec(backend, settings, CancellationToken::new());
    sandfleet_engine::run(spec, items(fixture)).await.unwrap()
}

/// A member's result line, as the test reads it.
struct MemberResult {
    member: u32,
    size: u32,
    status: String,
    sandbox: String,
    snapshot: Option<String>,
    set_up_here: bool,
    /// The set-up token its test printed, from its log.
    token: String,
}

/// The results by task.
fn results(fixture: &Fixture) -> BTreeMap<String, Vec<MemberResult>> {
    let mut by_task: BTreeMap<String, Vec<MemberResult>> = BTreeMap::new();
    let text = std::fs::read_to_string(fixture.out_dir().join("results.jsonl")).unwrap();
    for line in text.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let task = r["task_id"].as_str().unwrap().to_string();
        let group = &r["group"];
        let member = group["member"].as_u64().unwrap() as u32;
        let log = fixture
            .out_dir()
            .join("logs")
            .join(format!("{task}.member{member}.log"));
        let log = std::fs::read_to_string(&log).unwrap();
        let token = log
            .lines()
            .find_map(|line| line.strip_prefix("token="))
            .unwrap_or_default()
            .to_string();
        by_task.entry(task).or_default().push(MemberResult {
            member,
            size: group["size"].as_u64().unwrap() as u32,
            status: r["status"].as_str().unwrap().to_string(),
            sandbox: r["sandbox"].as_str().unwrap().to_string(),
            snapshot: group["snapshot"].as_str().map(str::to_string),
            set_up_here: group["set_up_here"].as_bool().unwrap(),
            token,
        });
    }
    by_task
}

/// The results by task, after checking that every task has `GROUP`
/// members that passed, each in a sandbox of its own that none of the
/// others wrote into.
fn every_member_graded_alone(
    fixture: &Fixture,
    report: &RunReport,
) -> BTreeMap<String, Vec<MemberResult>> {
    let expected = TASKS * GROUP as usize;
    assert_eq!(report.tasks.ok, expected, "{}", report.render());
    let by_task = results(fixture);
    assert_eq!(by_task.len(), TASKS);
    for (task, members) in &by_task {
        let indices: BTreeSet<u32> = members.iter().map(|m| m.member).collect();
        assert_eq!(indices, (0..GROUP).collect(), "{task}");
        let sandboxes: BTreeSet<&str> = members.iter().map(|m| m.sandbox.as_str()).collect();
        assert_eq!(sandboxes.len(), GROUP as usize, "{task}: a sandbox each");
        for member in members {
            assert_eq!(member.size, GROUP, "{task}");
            assert_eq!(member.status, "ok", "{task} member {}", member.member);
            assert_eq!(member.token.len(), 16, "{task}: {:?}", member.token);
        }
    }
    by_task
}

/// Snapshot calls that succeeded, by operation.
#[derive(Default)]
struct SnapshotCalls(Mutex<BTreeMap<&'static str, u64>>);

impl CallObserver for SnapshotCalls {
    fn observe(&self, call: &BackendCall<'_>) {
        let snapshot_call = matches!(
            call.operation,
            Operation::Snapshot | Operation::Fork | Operation::DeleteSnapshot
        );
        if snapshot_call && call.outcome == "ok" {
            *self
                .0
                .lock()
                .unwrap()
                .entry(call.operation.name())
                .or_default() += 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_is_set_up_once_and_its_members_fork_that_set_up() {
    let fixture = Fixture::new(1);
    let calls = Arc::new(SnapshotCalls::default());
    let backend = Observed::new(fixture.backend(), Some(calls.clone()));
    let report = run(&fixture, Arc::new(backend)).await;

    let by_task = every_member_graded_alone(&fixture, &report);
    for (task, members) in &by_task {
        // One set-up: one member ran it, and every member saw its token.
        let set_up: Vec<u32> = members
            .iter()
            .filter(|m| m.set_up_here)
            .map(|m| m.member)
            .collect();
        assert_eq!(set_up.len(), 1, "{task}: set up in {set_up:?}");
        let tokens: BTreeSet<&str> = members.iter().map(|m| m.token.as_str()).collect();
        assert_eq!(tokens.len(), 1, "{task}: {tokens:?}");
        let snapshots: BTreeSet<Option<&str>> =
            members.iter().map(|m| m.snapshot.as_deref()).collect();
        assert_eq!(snapshots.len(), 1, "{task}: {snapshots:?}");
        assert!(snapshots.iter().all(Option::is_some), "{task}");
    }
    assert_eq!(report.groups.set_ups, TASKS as u64, "{}", report.render());
    assert_eq!(report.groups.forked, TASKS as u64 * u64::from(GROUP - 1));
    // One snapshot per group, deleted after its last member, not left for
    // the run's reap.
    let calls = calls.0.lock().unwrap().clone();
    let tasks = TASKS as u64;
    assert_eq!(
        calls,
        BTreeMap::from([
            ("snapshot", tasks),
            ("fork", tasks * u64::from(GROUP - 1)),
            ("delete_snapshot", tasks),
        ])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_snapshots_every_member_sets_up_its_own_sandbox() {
    let mut fixture = Fixture::new(1);
    let report = run(&fixture, fixture.plain_backend()).await;

    let by_task = every_member_graded_alone(&fixture, &report);
    for (task, members) in &by_task {
        assert!(members.iter().all(|m| m.set_up_here), "{task}");
        assert!(members.iter().all(|m| m.snapshot.is_none()), "{task}");
        let tokens: BTreeSet<&str> = members.iter().map(|m| m.token.as_str()).collect();
        assert_eq!(tokens.len(), GROUP as usize, "{task}: {tokens:?}");
    }
    assert_eq!(report.groups.set_ups, TASKS as u64 * u64::from(GROUP));
    assert_eq!(report.groups.forked, 0);

    // A rerun into the same directory finds every member finished.
    fixture.next_run();
    let rerun = run(&fixture, fixture.plain_backend()).await;
    assert_eq!(
        rerun.tasks.resumed,
        TASKS * GROUP as usize,
        "{}",
        rerun.render()
    );
    assert_eq!(rerun.claims, 0);
}
