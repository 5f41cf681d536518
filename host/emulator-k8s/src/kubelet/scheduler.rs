//! The scheduler's decision for one pod: the nodes that fit (node selector, required
//! node affinity on labels and `metadata.name`, requests against allocatable minus what
//! bound pods request, the pod count), scored by soft pod affinity and anti-affinity
//! (hostname topology) and then by the least requested share, as the default profile's
//! plugins weigh them.

use serde_json::Value;

use super::quantity::{milli, units};
use crate::selector::LabelSelector;

/// What a pod asks of a node.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Requests {
    cpu_milli: u128,
    memory: u128,
    disk: u128,
}

/// The sum of a pod's container requests (limits stand in for missing requests, as the
/// API server defaults them) and its RuntimeClass's overhead.
pub(crate) fn requests(pod: &Value) -> Requests {
    fn add<'v>(total: &mut Requests, get: impl Fn(&str) -> Option<&'v str>) {
        total.cpu_milli += get("cpu").and_then(milli).unwrap_or(0);
        total.memory += get("memory").and_then(units).unwrap_or(0);
        total.disk += get("ephemeral-storage").and_then(units).unwrap_or(0);
    }
    let mut total = Requests::default();
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        let res = &c["resources"];
        add(&mut total, |name| {
            res["requests"][name]
                .as_str()
                .or_else(|| res["limits"][name].as_str())
        });
    }
    add(&mut total, |name| pod["spec"]["overhead"][name].as_str());
    total
}

fn terminal(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

fn strings(list: &Value) -> Vec<&str> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn label_matches(node: &Value, expression: &Value) -> bool {
    let key = expression["key"].as_str().unwrap_or_default();
    let values = strings(&expression["values"]);
    let actual = node["metadata"]["labels"][key].as_str();
    match expression["operator"].as_str() {
        Some("In") => actual.is_some_and(|a| values.contains(&a)),
        Some("NotIn") => !actual.is_some_and(|a| values.contains(&a)),
        Some("Exists") => actual.is_some(),
        Some("DoesNotExist") => actual.is_none(),
        _ => false,
    }
}

fn field_matches(node: &Value, expression: &Value) -> bool {
    let name = node["metadata"]["name"].as_str().unwrap_or_default();
    let values = strings(&expression["values"]);
    match (expression["key"].as_str(), expression["operator"].as_str()) {
        (Some("metadata.name"), Some("In")) => values.contains(&name),
        (Some("metadata.name"), Some("NotIn")) => !values.contains(&name),
        _ => false,
    }
}

fn affinity_allows(pod: &Value, node: &Value) -> bool {
    let terms = &pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    let Some(terms) = terms.as_array() else {
        return true;
    };
    terms.iter().any(|t| {
        t["matchExpressions"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|e| label_matches(node, e))
            && t["matchFields"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|e| field_matches(node, e))
    })
}

fn selector_allows(pod: &Value, node: &Value) -> bool {
    pod["spec"]["nodeSelector"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| node["metadata"]["labels"][k] == *v)
}

/// Why a node does not fit, as the scheduler's message counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Misfit {
    Selector,
    Cpu,
    Memory,
    Disk,
    Pods,
}

impl Misfit {
    fn text(self) -> &'static str {
        match self {
            Self::Selector => "node(s) didn't match Pod's node affinity/selector",
            Self::Cpu => "Insufficient cpu",
            Self::Memory => "Insufficient memory",
            Self::Disk => "Insufficient ephemeral-storage",
            Self::Pods => "Too many pods",
        }
    }
}

/// A node, the pods bound to it, and what those not finished request.
pub(crate) struct NodeLoad<'n> {
    node: &'n Value,
    pods: Vec<std::sync::Arc<Value>>,
    used: Requests,
    count: u128,
}

impl<'n> NodeLoad<'n> {
    /// A node with nothing bound yet.
    pub(crate) fn new(node: &'n Value) -> Self {
        Self {
            node,
            pods: Vec::new(),
            used: Requests::default(),
            count: 0,
        }
    }

    /// The node.
    pub(crate) fn node(&self) -> &'n Value {
        self.node
    }

    /// Count a pod bound to the node.
    pub(crate) fn add(&mut self, pod: std::sync::Arc<Value>) {
        if !terminal(&pod) {
            let r = requests(&pod);
            self.used.cpu_milli += r.cpu_milli;
            self.used.memory += r.memory;
            self.used.disk += r.disk;
            self.count += 1;
        }
        self.pods.push(pod);
    }
}

fn fits(pod: &Value, load: &NodeLoad<'_>) -> Result<f64, Misfit> {
    let node = load.node;
    if !selector_allows(pod, node) || !affinity_allows(pod, node) {
        return Err(Misfit::Selector);
    }
    let alloc = &node["status"]["allocatable"];
    let want = requests(pod);
    let (used, count) = (load.used, load.count);
    let cap = |name: &str, parse: fn(&str) -> Option<u128>| {
        alloc[name].as_str().and_then(parse).unwrap_or(u128::MAX)
    };
    let (cpu, memory, disk, pods) = (
        cap("cpu", milli),
        cap("memory", units),
        cap("ephemeral-storage", units),
        cap("pods", units),
    );
    if count + 1 > pods {
        return Err(Misfit::Pods);
    }
    if used.cpu_milli + want.cpu_milli > cpu {
        return Err(Misfit::Cpu);
    }
    if used.memory + want.memory > memory {
        return Err(Misfit::Memory);
    }
    if used.disk + want.disk > disk {
        return Err(Misfit::Disk);
    }
    let share = |u: u128, c: u128| {
        if c == 0 || c == u128::MAX {
            0.0
        } else {
            u as f64 / c as f64
        }
    };
    // Least allocated: the emptier node scores higher (0..100).
    let free = 100.0
        * (2.0
            - share(used.cpu_milli + want.cpu_milli, cpu)
            - share(used.memory + want.memory, memory))
        / 2.0;
    Ok(free)
}

fn affinity_score(pod: &Value, bound: &[std::sync::Arc<Value>]) -> f64 {
    let affinity = &pod["spec"]["affinity"];
    let mut score = 0.0;
    for (kind, sign) in [("podAffinity", 1.0), ("podAntiAffinity", -1.0)] {
        for term in affinity[kind]["preferredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let weight = term["weight"].as_f64().unwrap_or(1.0);
            let selector = LabelSelector::from_object(&term["podAffinityTerm"]["labelSelector"]);
            let matching = bound.iter().filter(|p| selector.matches(p)).count() as f64;
            score += sign * weight * matching;
        }
    }
    score
}

/// The index of the node for `pod` among `nodes`, or the reason nothing fits as the
/// scheduler words it.
pub(crate) fn choose(pod: &Value, nodes: &[NodeLoad<'_>]) -> Result<usize, String> {
    let mut best: Option<(f64, usize)> = None;
    let mut misfits: std::collections::BTreeMap<Misfit, usize> = Default::default();
    for (i, load) in nodes.iter().enumerate() {
        match fits(pod, load) {
            Ok(free) => {
                // Affinity dominates spreading, as its weight (up to 100 per term)
                // dominates the 0–100 least-allocated score after normalization.
                let score = affinity_score(pod, &load.pods) * 1000.0 + free;
                if best.is_none_or(|(s, _)| score > s) {
                    best = Some((score, i));
                }
            }
            Err(m) => *misfits.entry(m).or_default() += 1,
        }
    }
    best.map(|(_, n)| n).ok_or_else(|| {
        // Sorted as strings, as the scheduler's FitError sorts them.
        let mut reasons: Vec<String> = misfits.iter().map(|(m, n)| format!("{n} {}", m.text())).collect();
        reasons.sort();
        format!(
            "0/{} nodes are available: {}. preemption: 0/{} nodes are available: {} No preemption victims found for incoming pod.",
            nodes.len(),
            reasons.join(", "),
            nodes.len(),
            nodes.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, cpu: &str, zone: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {"zone": zone}}, "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "10"}}})
    }

    fn pod(cpu: &str, labels: Value) -> Value {
        json!({"metadata": {"labels": labels}, "spec": {"containers": [{"resources": {"requests": {"cpu": cpu}}}]}, "status": {"phase": "Running"}})
    }

    #[test]
    fn requests_against_allocatable_and_selectors_decide_fit() {
        let (a, b) = (node("a", "1", "x"), node("b", "4", "y"));
        let busy = pod("800m", json!({}));
        let want = pod("500m", json!({}));
        let mut nodes = vec![NodeLoad::new(&a), NodeLoad::new(&b)];
        nodes[0].add(std::sync::Arc::new(busy));
        assert_eq!(choose(&want, &nodes).unwrap(), 1);
        let mut pinned = want;
        pinned["spec"]["nodeSelector"] = json!({"zone": "x"});
        let err = choose(&pinned, &nodes).unwrap_err();
        assert!(
            err.starts_with("0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match"),
            "{err}"
        );
    }

    #[test]
    fn a_runtime_class_overhead_is_asked_of_the_node_with_the_containers() {
        let a = node("a", "1", "x");
        let mut want = pod("800m", json!({}));
        let nodes = vec![NodeLoad::new(&a)];
        assert_eq!(choose(&want, &nodes).unwrap(), 0);
        want["spec"]["overhead"] = json!({"cpu": "250m"});
        let err = choose(&want, &nodes).unwrap_err();
        assert!(err.contains("1 Insufficient cpu"), "{err}");
    }

    #[test]
    fn soft_pod_affinity_colocates_with_matching_pods() {
        let (a, b) = (node("a", "8", "x"), node("b", "8", "y"));
        let member = pod("1", json!({"pool": "p"}));
        let mut nodes = vec![NodeLoad::new(&a), NodeLoad::new(&b)];
        nodes[1].add(std::sync::Arc::new(member));
        let mut want = pod("1", json!({}));
        want["spec"]["affinity"] = json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"pool": "p"}}, "topologyKey": "kubernetes.io/hostname"}}]}});
        assert_eq!(choose(&want, &nodes).unwrap(), 1);
        // Without affinity the emptier node wins.
        assert_eq!(choose(&pod("1", json!({})), &nodes).unwrap(), 0);
    }
}
