//! The children's `dependsOn` graph, checked when the rules load: every entry names a child of
//! the rule, and no child waits for itself, directly or through others. (Planning follows the
//! graph at run time: `plan/order.rs`.)

use std::collections::{BTreeMap, BTreeSet};

use super::model::{ChildSpec, Located};

/// A problem in the `dependsOn` graph, at the entry that causes it.
#[derive(Debug)]
pub(crate) struct GraphProblem<'r> {
    /// The `dependsOn` entry.
    pub at: &'r Located<String>,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub hint: String,
}

/// Unknown ids and cycles in the children's `dependsOn` (each cycle reported once, at the entry
/// that closes it).
pub(crate) fn graph_problems(children: &[ChildSpec]) -> Vec<GraphProblem<'_>> {
    let ids: BTreeSet<&str> = children.iter().map(|c| c.id.value.as_str()).collect();
    let mut problems = Vec::new();
    for child in children {
        for dep in &child.depends_on {
            if !ids.contains(dep.value.as_str()) {
                problems.push(GraphProblem {
                    at: dep,
                    message: format!("child {:?} depends on unknown child {:?}", child.id.value, dep.value),
                    hint: format!("known children: {}", ids.iter().copied().collect::<Vec<_>>().join(", ")),
                });
            }
        }
    }
    // Depth-first search; an edge to a node on the current path closes a cycle.
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let index: BTreeMap<&str, usize> = children
        .iter()
        .enumerate()
        .map(|(i, c)| (c.id.value.as_str(), i))
        .collect();
    let mut marks = vec![Mark::New; children.len()];
    fn visit<'r>(
        node: usize,
        children: &'r [ChildSpec],
        index: &BTreeMap<&str, usize>,
        marks: &mut [Mark],
        path: &mut Vec<usize>,
        problems: &mut Vec<GraphProblem<'r>>,
    ) {
        marks[node] = Mark::OnPath;
        path.push(node);
        for dep in &children[node].depends_on {
            let Some(&next) = index.get(dep.value.as_str()) else {
                continue;
            };
            match marks[next] {
                Mark::New => visit(next, children, index, marks, path, problems),
                Mark::OnPath => {
                    let start = path.iter().position(|&n| n == next).unwrap_or(0);
                    let mut cycle: Vec<&str> = path[start..].iter().map(|&n| children[n].id.value.as_str()).collect();
                    cycle.push(children[next].id.value.as_str());
                    problems.push(GraphProblem {
                        at: dep,
                        message: format!("dependsOn cycle: {}", cycle.join(" -> ")),
                        hint: "a child cannot wait for itself, directly or through others".to_owned(),
                    });
                }
                Mark::Done => {}
            }
        }
        path.pop();
        marks[node] = Mark::Done;
    }
    for node in 0..children.len() {
        if marks[node] == Mark::New {
            visit(node, children, &index, &mut marks, &mut Vec::new(), &mut problems);
        }
    }
    problems
}
