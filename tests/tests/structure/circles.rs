//! Circles in a directed graph: its strongly connected components of two
//! or more nodes (Tarjan's algorithm). Every node of such a component
//! reaches every other, so each is one circle of imports to break, however
//! many loops run through it.

use std::collections::{BTreeMap, BTreeSet};

/// The circles among nodes `0..n` with `edges` (from → to): each one's
/// nodes in ascending order, the circles ordered by their first node. A
/// node's edge to itself is no circle.
pub(crate) fn circles(n: usize, edges: &BTreeSet<(usize, usize)>) -> Vec<Vec<usize>> {
    let mut next: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &(a, b) in edges {
        if a != b {
            next.entry(a).or_default().push(b);
        }
    }
    let mut t = Tarjan {
        next,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        count: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    let mut out = t.out;
    for c in &mut out {
        c.sort_unstable();
    }
    out.sort();
    out
}

struct Tarjan {
    next: BTreeMap<usize, Vec<usize>>,
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    stack: Vec<usize>,
    on_stack: Vec<bool>,
    count: usize,
    out: Vec<Vec<usize>>,
}

impl Tarjan {
    fn visit(&mut self, v: usize) {
        self.index[v] = Some(self.count);
        self.low[v] = self.count;
        self.count += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
        for w in self.next.get(&v).cloned().unwrap_or_default() {
            match self.index[w] {
                None => {
                    self.visit(w);
                    self.low[v] = self.low[v].min(self.low[w]);
                }
                Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(self.low[v]) == self.index[v] {
            let mut component = Vec::new();
            loop {
                let w = self.stack.pop().expect("v is on the stack");
                self.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                self.out.push(component);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(usize, usize)]) -> BTreeSet<(usize, usize)> {
        edges.iter().copied().collect()
    }

    #[test]
    fn a_chain_and_a_node_that_imports_itself_are_no_circle() {
        assert!(circles(4, &graph(&[(0, 1), (1, 2), (2, 3), (3, 3), (0, 2)])).is_empty());
    }

    #[test]
    fn each_circle_is_found_once_with_all_its_files() {
        // 1 → 2 → 3 → 1 with a second loop 2 ⇄ 4; 5 ⇄ 6; 0 and 7 import
        // into circles, and 3 imports out of its circle.
        let edges = graph(&[
            (0, 1),
            (1, 2),
            (2, 3),
            (3, 1),
            (2, 4),
            (4, 2),
            (5, 6),
            (6, 5),
            (7, 6),
            (3, 0),
        ]);
        assert_eq!(circles(8, &edges), [vec![0, 1, 2, 3, 4], vec![5, 6]]);
        let no_back = graph(&[
            (0, 1),
            (1, 2),
            (2, 3),
            (3, 1),
            (2, 4),
            (4, 2),
            (5, 6),
            (6, 5),
        ]);
        assert_eq!(circles(8, &no_back), [vec![1, 2, 3, 4], vec![5, 6]]);
    }
}
