//! Load-time binding checks: every tensor a program declares binds to a manifest tensor of its role, shape, dtype and storage.
//!
//! It runs before any weight is read, so a bundle that cannot run fails fast and names the
//! program (a layer and its kind), the tensor, its target and both shapes. It also follows
//! the activations from program to program: a program may only read one an earlier program produced.

use std::collections::{BTreeMap, BTreeSet};

use rdu_spatial::manifest::{chip_shape, Manifest};
use rdu_spatial::{Role, SpatialProgram, Storage};

use crate::error::{HostError, Result};

/// One program invocation to check: what to call it in errors, the program, and its binding (kind name → bundle name).
pub(crate) struct Use<'a> {
    pub label: &'a str,
    pub program: &'a SpatialProgram,
    pub bind: &'a BTreeMap<String, String>,
}

/// Checks one program's bindings; `produced` holds the activations earlier programs output and gains this one's.
pub(crate) fn check(manifest: &Manifest, u: &Use<'_>, produced: &mut BTreeSet<String>) -> Result<()> {
    let mut outputs = Vec::new();
    let is_output = |name: &String| u.program.outputs.contains(name);
    for name in u.program.outputs.iter().filter(|n| u.program.decl(n).is_none()) {
        let target = u.bind.get(name).ok_or_else(|| unbound(u, name))?;
        if !manifest.activations.iter().any(|a| &a.name == target) {
            let problem = "the program outputs it, but the manifest lists no such activation".to_string();
            let (program, tensor, target) = (u.label.to_string(), name.clone(), target.clone());
            return Err(HostError::Binding { program, tensor, target, problem });
        }
        outputs.push(target.clone());
    }
    for decl in u.program.tensors.iter().filter(|d| d.role != Role::Temp || is_output(&d.name)) {
        // A result the program lists among its outputs passes to the next program, whatever its declared role.
        let role = if is_output(&decl.name) && decl.role != Role::State { Role::Output } else { decl.role };
        let target = u.bind.get(&decl.name).ok_or_else(|| unbound(u, &decl.name))?;
        let fail = |problem: String| HostError::Binding {
            program: u.label.to_string(),
            tensor: decl.name.clone(),
            target: target.clone(),
            problem,
        };
        let Some(def) = lookup(manifest, target, u.program.tp.is_some()) else {
            return Err(fail("no tensors, inputs, states, shared or activations entry defines it".into()));
        };
        let allowed: &[&str] = match role {
            Role::Weight => &["tensors"],
            Role::State => &["states"],
            Role::Shared => &["shared"],
            Role::Input => &["inputs", "activations"],
            Role::Output => &["activations"],
            Role::Temp => &[],
        };
        if !allowed.contains(&def.list) {
            let role = role.as_str();
            return Err(fail(format!("the manifest lists it among {}, but the program declares a {role}", def.list)));
        }
        if def.shape != decl.shape {
            return Err(HostError::BindingShape {
                program: u.label.to_string(),
                tensor: decl.name.clone(),
                target: target.clone(),
                declared: decl.shape.clone().into(),
                found: def.shape.into(),
            });
        }
        if def.dtype != decl.dtype.as_str() || def.storage != decl.storage {
            let (dtype, storage) = (decl.dtype.as_str(), storage_name(decl.storage));
            return Err(fail(format!(
                "the manifest gives {} stored {}, the program declares {dtype} stored {storage}",
                def.dtype,
                storage_name(def.storage)
            )));
        }
        match role {
            Role::Input if def.list == "activations" && !produced.contains(target) => {
                return Err(fail("no earlier program produces it".into()));
            }
            Role::Output => outputs.push(target.clone()),
            _ => {}
        }
    }
    produced.extend(outputs);
    Ok(())
}

fn unbound(u: &Use<'_>, tensor: &str) -> HostError {
    HostError::Unbound { program: u.label.to_string(), tensor: tensor.to_string() }
}

/// Where the manifest defines a bundle tensor, and how.
struct Def<'m> {
    list: &'static str,
    /// As one chip declares it (a tensor-parallel split tensor: its share).
    shape: Vec<usize>,
    dtype: &'m str,
    storage: Storage,
}

/// The manifest's definition of `name` as a program reads it: its chip's share in a
/// tensor-parallel program (`split`), whole in a program on the replicated spine.
fn lookup<'m>(m: &'m Manifest, name: &str, split: bool) -> Option<Def<'m>> {
    let chip_shape = |shape: &[usize], slices: &[Vec<rdu_spatial::manifest::Slice>]| {
        if split {
            chip_shape(shape, slices)
        } else {
            shape.to_vec()
        }
    };
    let dense = |list, shape: Vec<usize>| Def { list, shape, dtype: "f32", storage: Storage::Dense };
    if let Some(t) = m.tensors.get(name) {
        // An fp8 entry without a usable block matches no program's storage.
        let storage = t.program_storage().unwrap_or(Storage::Fp8 { rows: 0, cols: 0 });
        return Some(Def { list: "tensors", shape: chip_shape(&t.shape, &t.slices), dtype: &t.dtype, storage });
    }
    if let Some(i) = m.inputs.iter().find(|i| i.name == name) {
        return Some(Def { list: "inputs", shape: i.shape.clone(), dtype: &i.dtype, storage: Storage::Dense });
    }
    let states = m.states.iter().find(|s| s.name == name).map(|s| Def {
        list: "states",
        shape: chip_shape(&s.shape, &s.slices),
        dtype: "f32",
        storage: s.dtype.storage(),
    });
    let shared = || m.shared.iter().find(|s| s.name == name).map(|s| dense("shared", s.shape.clone()));
    let activations = || {
        let a = m.activations.iter().find(|a| a.name == name)?;
        Some(dense("activations", chip_shape(&a.shape, &a.slices)))
    };
    states.or_else(shared).or_else(activations)
}

fn storage_name(storage: Storage) -> String {
    storage.word()
}
