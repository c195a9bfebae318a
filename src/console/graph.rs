//! The pipeline graph (`x`, `:graph`), k9s XRay-like: the flows as a DAG from their
//! sources (landing directories, Kafka topics, Delta tables read) to the tables they
//! write, drawn as a tree so it reads at 80x24 without a mouse.
//!
//! Edges come from the flows' specs (run) or plan records (attach): a flow's Delta
//! sink path equal to another flow's Delta source, union source, stream-join right
//! side or dimension table is an edge. Roots are the inputs no flow of the pipeline
//! writes; under a source or a table come the flows that read it, under a flow the
//! table it writes. A flow read through two inputs (a join, a union) shows under the
//! first one with its table; later appearances are references ("see above") so
//! every hop is drawn once.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::model::FlowModel;
pub use super::model::{GraphInput, InputRole};

/// A flow's inputs from its spec (`weir run`).
pub fn inputs_of_spec(spec: &crate::spec::FlowSpec) -> Vec<GraphInput> {
    let mut out: Vec<GraphInput> = spec
        .sources()
        .into_iter()
        .enumerate()
        .map(|(i, s)| GraphInput {
            role: if i == 0 {
                InputRole::Source
            } else if spec.stream_join.is_some() && i == spec.union.len() + 1 {
                InputRole::JoinRight
            } else {
                InputRole::Union
            },
            kind: s.kind(),
            path: crate::spec::normalize(s.path()),
        })
        .collect();
    out.extend(spec.joins.iter().map(|j| GraphInput {
        role: InputRole::Dimension,
        kind: j.format.name().to_string(),
        path: crate::spec::normalize(&j.table),
    }));
    out
}

/// A flow's inputs from its checkpoint's plan record (`weir attach`): its sources and
/// dimension tables, as [`inputs_of_spec`] gives them (a record from an older version
/// names no roles and no dimensions: its other sources are drawn as union sources).
pub fn inputs_of_plan(plan: &crate::checkpoint::PlanRecord) -> Vec<GraphInput> {
    std::iter::once(GraphInput {
        role: InputRole::Source,
        kind: plan.source.clone(),
        path: crate::spec::normalize(&plan.source_path),
    })
    .chain(plan.other_sources.iter().map(|s| GraphInput {
        role: match s.role.as_deref() {
            Some("stream_join") => InputRole::JoinRight,
            _ => InputRole::Union,
        },
        kind: s.source.clone(),
        path: crate::spec::normalize(&s.source_path),
    }))
    .chain(plan.dimensions.iter().map(|d| GraphInput {
        role: InputRole::Dimension,
        kind: d.source.clone(),
        path: crate::spec::normalize(&d.source_path),
    }))
    .collect()
}

/// What a row of the graph is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeRef {
    /// An input no flow of the pipeline writes.
    Source { kind: String, path: PathBuf },
    /// Flow `i` of the flows.
    Flow(usize),
    /// A flow drawn earlier (a flow with several inputs).
    SeenFlow(usize),
    /// The Delta table flow `i` writes.
    Table { writer: usize, path: PathBuf },
    /// The sink of a flow that writes no Delta table (memory, console).
    OtherSink { writer: usize },
}

/// One row of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeRow {
    /// For each ancestor level: whether a sibling follows below it (draws `│`).
    pub rails: Vec<bool>,
    /// Whether this row is the last child of its parent (`└─` rather than `├─`).
    pub last: bool,
    pub node: NodeRef,
    /// How the flow below reads its parent (`union`, `stream join`, `dimension`).
    pub via: Option<InputRole>,
}

impl TreeRow {
    pub fn depth(&self) -> usize {
        self.rails.len()
    }

    /// The flow the row stands for: Enter opens its detail.
    pub fn flow(&self) -> Option<usize> {
        match &self.node {
            NodeRef::Flow(i) | NodeRef::SeenFlow(i) => Some(*i),
            NodeRef::Table { writer, .. } | NodeRef::OtherSink { writer } => Some(*writer),
            NodeRef::Source { .. } => None,
        }
    }
}

/// The graph of the flows as tree rows, in file order.
pub fn tree(flows: &[FlowModel]) -> Vec<TreeRow> {
    let writer_of = |path: &Path| {
        flows
            .iter()
            .position(|f| f.sink_path.as_deref() == Some(path))
    };
    // Roots: inputs no flow writes, deduplicated, in file order; then flows without inputs.
    let mut roots: Vec<NodeRef> = Vec::new();
    for f in flows {
        for input in &f.inputs {
            if writer_of(&input.path).is_some() {
                continue;
            }
            let node = NodeRef::Source {
                kind: input.kind.clone(),
                path: input.path.clone(),
            };
            if !roots.contains(&node) {
                roots.push(node);
            }
        }
    }
    for (i, f) in flows.iter().enumerate() {
        if f.inputs.is_empty() {
            roots.push(NodeRef::Flow(i));
        }
    }
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let n = roots.len();
    for (k, root) in roots.into_iter().enumerate() {
        walk(
            flows,
            root,
            None,
            Vec::new(),
            k + 1 == n,
            &mut seen,
            &mut out,
        );
    }
    // A flow reachable from no root (a cycle of tables, which `weir validate` refuses).
    for i in 0..flows.len() {
        if !seen.contains(&i) {
            walk(
                flows,
                NodeRef::Flow(i),
                None,
                Vec::new(),
                true,
                &mut seen,
                &mut out,
            );
        }
    }
    out
}

/// The flows reading `path`, with how they read it.
fn readers(flows: &[FlowModel], path: &Path) -> Vec<(usize, InputRole)> {
    flows
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            f.inputs
                .iter()
                .find(|inp| inp.path == path)
                .map(|inp| (i, inp.role))
        })
        .collect()
}

fn walk(
    flows: &[FlowModel],
    node: NodeRef,
    via: Option<InputRole>,
    rails: Vec<bool>,
    last: bool,
    seen: &mut BTreeSet<usize>,
    out: &mut Vec<TreeRow>,
) {
    let node = match node {
        NodeRef::Flow(i) if !seen.insert(i) => NodeRef::SeenFlow(i),
        other => other,
    };
    let children: Vec<(NodeRef, Option<InputRole>)> = match &node {
        NodeRef::Source { path, .. } | NodeRef::Table { path, .. } => readers(flows, path)
            .into_iter()
            .map(|(i, role)| (NodeRef::Flow(i), Some(role)))
            .collect(),
        NodeRef::Flow(i) => match &flows[*i].sink_path {
            Some(p) => vec![(
                NodeRef::Table {
                    writer: *i,
                    path: p.clone(),
                },
                None,
            )],
            None => vec![(NodeRef::OtherSink { writer: *i }, None)],
        },
        NodeRef::SeenFlow(_) | NodeRef::OtherSink { .. } => Vec::new(),
    };
    out.push(TreeRow {
        rails: rails.clone(),
        last,
        node,
        via: via.filter(|r| *r != InputRole::Source),
    });
    let mut child_rails = rails;
    child_rails.push(!last);
    let n = children.len();
    for (k, (child, via)) in children.into_iter().enumerate() {
        walk(
            flows,
            child,
            via,
            child_rails.clone(),
            k + 1 == n,
            seen,
            out,
        );
    }
}

/// The tree glyphs before a row's label: `│  ├─ `, `└─ `; none for a root.
pub fn prefix(row: &TreeRow) -> String {
    if row.rails.is_empty() {
        return String::new();
    }
    let mut s = String::new();
    // The root level draws no rail.
    for rail in &row.rails[1..] {
        s.push_str(if *rail { "│  " } else { "   " });
    }
    s.push_str(if row.last { "└─ " } else { "├─ " });
    s
}

/// The role's word shown after a flow read through it.
pub fn via_word(role: InputRole) -> &'static str {
    role.word()
}

/// Paths shown relative to the directory every node shares (the pipeline's), so
/// labels fit 80 columns: `landing/flights`, `lake/bronze/flights`.
pub fn common_dir(rows: &[TreeRow]) -> Option<PathBuf> {
    let mut paths = rows.iter().filter_map(|r| match &r.node {
        NodeRef::Source { path, .. } | NodeRef::Table { path, .. } if path.is_absolute() => {
            Some(path.as_path())
        }
        _ => None,
    });
    let first = paths.next()?.parent()?.to_path_buf();
    let mut common = first;
    for p in paths {
        while !p.starts_with(&common) {
            if !common.pop() {
                return None;
            }
        }
    }
    (common.components().count() > 1).then_some(common)
}

/// A node's path as shown: relative to `common` when under it.
pub fn short_path(path: &Path, common: Option<&Path>) -> String {
    match common.and_then(|c| path.strip_prefix(c).ok()) {
        Some(rel) if !rel.as_os_str().is_empty() => rel.display().to_string(),
        _ => path.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flows(names: &[&str]) -> Vec<FlowModel> {
        names.iter().map(|n| FlowModel::new(*n)).collect()
    }

    fn input(role: InputRole, kind: &str, path: &str) -> GraphInput {
        GraphInput {
            role,
            kind: kind.into(),
            path: path.into(),
        }
    }

    #[test]
    fn edges_join_a_flows_table_to_its_readers() {
        let mut models = flows(&["bronze", "weather", "silver", "gold"]);
        models[0].inputs = vec![input(InputRole::Source, "files:csv", "/p/landing/flights")];
        models[0].sink_path = Some("/p/lake/bronze".into());
        models[1].inputs = vec![input(InputRole::Source, "files:csv", "/p/landing/weather")];
        models[1].sink_path = Some("/p/lake/weather".into());
        models[2].inputs = vec![
            input(InputRole::Source, "delta", "/p/lake/bronze"),
            input(InputRole::Dimension, "delta", "/p/lake/weather"),
        ];
        models[2].sink_path = Some("/p/lake/silver".into());
        models[3].inputs = vec![input(InputRole::Source, "delta", "/p/lake/silver")];
        let rows = tree(&models);
        let text: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{}{}",
                    prefix(r),
                    match &r.node {
                        NodeRef::Source { path, .. } | NodeRef::Table { path, .. } =>
                            path.display().to_string(),
                        NodeRef::Flow(i) => models[*i].name.clone(),
                        NodeRef::SeenFlow(i) => format!("^{}", models[*i].name),
                        NodeRef::OtherSink { .. } => "sink".into(),
                    }
                )
            })
            .collect();
        assert_eq!(
            text,
            [
                "/p/landing/flights",
                "└─ bronze",
                "   └─ /p/lake/bronze",
                "      └─ silver",
                "         └─ /p/lake/silver",
                "            └─ gold",
                "               └─ sink",
                "/p/landing/weather",
                "└─ weather",
                "   └─ /p/lake/weather",
                "      └─ ^silver",
            ]
        );
        assert_eq!(rows[10].via, Some(InputRole::Dimension));
        assert_eq!(rows[10].flow(), Some(2));
        assert_eq!(common_dir(&rows), Some(PathBuf::from("/p")));
        assert_eq!(
            short_path(Path::new("/p/lake/bronze"), Some(Path::new("/p"))),
            "lake/bronze"
        );
    }

    #[test]
    fn a_flow_without_known_inputs_is_a_root() {
        let models = flows(&["a"]);
        let rows = tree(&models);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].node, NodeRef::Flow(0));
        assert_eq!(rows[1].node, NodeRef::OtherSink { writer: 0 });
    }
}
