//! Building and reading a [`Graph`]: declarations, typed nodes, outputs and state
//! write-backs, plus a verifier that re-infers every node.

use super::infer::{infer, Fault, Site, TypeError};
use super::{Declaration, Graph, Node, NodeId, Op, Origin, Output, StateUpdate, Type, Value, ValueId};
use crate::lang::ast::{DeclKind, Span};

impl Graph {
    pub fn new() -> Graph {
        Graph::default()
    }

    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.index()]
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    pub fn ty(&self, id: ValueId) -> &Type {
        &self.value(id).ty
    }

    /// Declared values in declaration order.
    pub fn declared(&self) -> impl Iterator<Item = (ValueId, &Value, &Declaration)> {
        self.values.iter().enumerate().filter_map(|(i, v)| match &v.origin {
            Origin::Decl(d) => Some((ValueId(i as u32), v, d)),
            Origin::Node { .. } => None,
        })
    }

    /// The declared value named `name`.
    pub fn decl_named(&self, name: &str) -> Option<ValueId> {
        self.declared().find(|(_, v, _)| v.name == name).map(|(id, _, _)| id)
    }

    /// Declares a tensor. A state starts out carried unchanged (see [`Graph::write_back`]).
    pub fn declare(&mut self, name: &str, ty: Type, decl: Declaration) -> ValueId {
        let id = ValueId(self.values.len() as u32);
        let kind = decl.kind;
        self.values.push(Value { name: name.to_string(), ty, origin: Origin::Decl(decl) });
        if kind == DeclKind::State {
            self.states.push(StateUpdate { name: name.to_string(), initial: id, last: id });
        }
        id
    }

    /// Appends a node of `op` over `inputs`, naming its outputs `names`; its output types are
    /// inferred. Fails (and adds nothing) when the op does not accept the inputs.
    pub fn push(
        &mut self,
        op: Op,
        inputs: &[ValueId],
        names: &[&str],
        stmt: usize,
        span: Span,
    ) -> Result<Vec<ValueId>, TypeError> {
        if names.len() != op.n_outputs() {
            let message = format!("`{}` binds {} values, not {}", op.name(), op.n_outputs(), names.len());
            return Err(TypeError { fault: Fault::Arity, site: Site::Op, message });
        }
        let types: Vec<&Type> = inputs.iter().map(|&v| self.ty(v)).collect();
        let out_types = infer(&op, &types)?;
        let node = NodeId(self.nodes.len() as u32);
        let mut outputs = Vec::with_capacity(out_types.len());
        for (output, (ty, name)) in out_types.into_iter().zip(names).enumerate() {
            outputs.push(ValueId(self.values.len() as u32));
            self.values.push(Value { name: name.to_string(), ty, origin: Origin::Node { node, output } });
        }
        self.nodes.push(Node { op, inputs: inputs.to_vec(), outputs: outputs.clone(), stmt, span });
        Ok(outputs)
    }

    /// Marks `value` as the program's result `name`.
    pub fn output(&mut self, name: &str, value: ValueId) {
        self.outputs.push(Output { name: name.to_string(), value });
    }

    /// Makes `last` the value of the state declared as `state` that is carried to the next
    /// step. Returns false (and changes nothing) when `state` is not a declared state or
    /// `last` has another type.
    pub fn write_back(&mut self, state: ValueId, last: ValueId) -> bool {
        if self.ty(state) != self.ty(last) {
            return false;
        }
        match self.states.iter_mut().find(|s| s.initial == state) {
            Some(s) => {
                s.last = last;
                true
            }
            None => false,
        }
    }

    /// Checks that ids are in range, values are defined before use, and every node's
    /// outputs have the types its op infers from its inputs. Returns the first problem.
    pub fn verify(&self) -> Result<(), String> {
        let n_values = self.values.len();
        let mut defined = vec![false; n_values];
        for (id, _, _) in self.declared() {
            defined[id.index()] = true;
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let at = || format!("node {i} ({} of statement {})", node.op.name(), node.stmt);
            let mut types = Vec::with_capacity(node.inputs.len());
            for v in &node.inputs {
                if v.index() >= n_values || !defined[v.index()] {
                    return Err(format!("{}: reads value {} before it is defined", at(), v.0));
                }
                types.push(self.ty(*v));
            }
            let inferred = infer(&node.op, &types).map_err(|e| format!("{}: {}", at(), e.message))?;
            if inferred.len() != node.outputs.len() {
                return Err(format!("{}: {} outputs, the op has {}", at(), node.outputs.len(), inferred.len()));
            }
            for (k, (v, ty)) in node.outputs.iter().zip(&inferred).enumerate() {
                let ok = v.index() < n_values
                    && !defined[v.index()]
                    && self.values[v.index()].origin == Origin::Node { node: NodeId(i as u32), output: k };
                if !ok {
                    return Err(format!("{}: output {k} is not a fresh value of this node", at()));
                }
                if self.ty(*v) != ty {
                    return Err(format!("{}: output {k} is {} but the op gives {ty}", at(), self.ty(*v)));
                }
                defined[v.index()] = true;
            }
        }
        let in_range = |v: ValueId| v.index() < n_values && defined[v.index()];
        for o in &self.outputs {
            if !in_range(o.value) {
                return Err(format!("output `{}` names an undefined value", o.name));
            }
        }
        for s in &self.states {
            let declared = in_range(s.initial) && self.value(s.initial).decl_kind() == Some(DeclKind::State);
            if !declared || !in_range(s.last) || self.ty(s.initial) != self.ty(s.last) {
                return Err(format!("state `{}` is not written back with its declared type", s.name));
            }
        }
        Ok(())
    }
}
