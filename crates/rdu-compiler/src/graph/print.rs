//! The graph's text form, for golden tests and debugging: one line per declaration and per
//! node (values as `%id name : type`), then the state write-backs and the outputs.

use super::{Graph, ValueId};
use std::fmt;

impl Graph {
    fn value_text(&self, id: ValueId) -> String {
        let v = self.value(id);
        format!("%{} {} : {}", id.0, v.name, v.ty)
    }
}

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (id, _, decl) in self.declared() {
            write!(f, "{} = {}", self.value_text(id), decl.kind.keyword())?;
            if decl.q8 {
                f.write_str(" q8")?;
            }
            if decl.bf16 {
                f.write_str(" bf16")?;
            }
            if let Some(seed) = &decl.seed {
                write!(f, " seed={seed:?}")?;
            }
            writeln!(f)?;
        }
        for node in &self.nodes {
            let outs: Vec<String> = node.outputs.iter().map(|&v| self.value_text(v)).collect();
            let ins: Vec<String> = node.inputs.iter().map(|v| format!("%{}", v.0)).collect();
            let (name, attrs) = {
                let text = node.op.to_string();
                match text.split_once(' ') {
                    Some((n, a)) => (n.to_string(), format!(" {a}")),
                    None => (text, String::new()),
                }
            };
            writeln!(f, "{} = {name}({}){attrs}  # statement {}", outs.join(", "), ins.join(", "), node.stmt)?;
        }
        for s in &self.states {
            writeln!(f, "state {} : %{} -> %{}", s.name, s.initial.0, s.last.0)?;
        }
        for o in &self.outputs {
            writeln!(f, "output {} = %{}", o.name, o.value.0)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::{Declaration, Graph, Op, Type};
    use crate::lang::ast::{DeclKind, Span};

    #[test]
    fn prints_declarations_nodes_states_and_outputs() {
        let mut g = Graph::new();
        let x = g.declare("x", Type::f32(&[2, 3]), Declaration::of(DeclKind::Input));
        let s = g.declare("S", Type::f32(&[2, 3]), Declaration::of(DeclKind::State));
        let y = g.push(Op::Add, &[x, s], &["y"], 0, Span::default()).unwrap()[0];
        let z = g.push(Op::Scale { by: 0.5 }, &[y], &["S"], 1, Span::default()).unwrap()[0];
        assert!(g.write_back(s, z));
        g.output("y", y);
        let expected = "\
%0 x : f32[2, 3] = input
%1 S : f32[2, 3] = state
%2 y : f32[2, 3] = add(%0, %1)  # statement 0
%3 S : f32[2, 3] = scale(%2) by=0.5  # statement 1
state S : %1 -> %3
output y = %2
";
        assert_eq!(g.to_string(), expected);
        assert_eq!(g.verify(), Ok(()));
    }
}
