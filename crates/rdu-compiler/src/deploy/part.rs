//! [`lower_part`]: one program parsed, lifted, lowered and checked — the one place that says
//! how a part of a deployment is certified: whole, on reduced rows, or against the unsplit
//! program over its chips.

use super::CERTIFY_VOCAB_ROWS;
use crate::certify::{certify, certify_tp, check_structure, check_tp_structure, Certificate, CertifyFault};
use crate::deploy::model::{ProgramPart, Progress, StreamedReject, ESTIMATE_ONLY};
use crate::deploy::schedule::mark_prefetch;
use crate::front::{lift, Refusal};
use crate::graph::Graph;
use crate::lang::{shape_digest, Source};
use crate::lower::{cost::program_cost, lower, lower_split, Split};
use rdu_spatial::chip::Chip;
use rdu_spatial::manifest::AttachedRole;
use rdu_spatial::program::{Role, SpatialProgram};
use std::collections::BTreeMap;

/// How much of certification a lowering runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// Structure, resources and numbers (the simulator against the reference interpreter).
    Numbers,
    /// Structure and resources only: a model lowered for its estimate, never for a bundle
    /// (`super::estimate_streamed`).
    Structure,
}

/// One program of a deployment as it is lowered: a layer kind (`looped`: its weight-streaming
/// stages are marked `prefetch`, `schedule::mark_prefetch`), the embedding or the head; on one
/// chip, or (`split`) one chip's share of a program over that many chips, on its source's slices.
pub(super) struct Part<'a> {
    pub name: &'a str,
    pub source: &'a Source,
    pub looped: bool,
    pub split: Option<usize>,
}

/// What a program is certified against.
#[derive(Clone, Copy)]
pub(super) enum Against<'a> {
    /// Its structure and resources only ([`Check::Structure`], [`ESTIMATE_ONLY`]).
    Structure,
    /// Itself, numbers and all; with `reduced` (the embedding and head of a large vocabulary on
    /// their first rows), numbers on that smaller program, then its own structure and resources
    /// at full size.
    Itself { reduced: Option<&'a Source> },
    /// A split program against `whole`, the unsplit program of the same names, run on every
    /// chip (`certify_tp`); with `reduced`, a smaller split program and its unsplit counterpart
    /// whose numbers are checked instead, then the structure, resources and slices at full size.
    Unsplit { whole: &'a Source, reduced: Option<(&'a Source, &'a Source)> },
}

/// Parse, lift, lower and check `part` against `against` on `chip`; the passes of the program
/// itself are reported to `progress`.
pub(super) fn lower_part(
    part: &Part<'_>,
    against: Against<'_>,
    chip: &Chip,
    seed: u64,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<ProgramPart, StreamedReject> {
    let name = part.name;
    let reject = |fault: CertifyFault| StreamedReject::Certification { program: name.to_string(), fault };
    let (spatial, graph) =
        part.lower(part.source, chip, &mut |pass, p| progress(Progress::Pass { program: name, pass, spatial: p }))?;
    let (certificate, attached) = match against {
        Against::Structure => {
            check_structure(&spatial, &graph, chip).map_err(reject)?;
            (estimate_certificate(vec!["structure".into(), "resources".into()], seed), Vec::new())
        }
        Against::Itself { reduced: None } => (certify(&spatial, &graph, chip, seed).map_err(reject)?, Vec::new()),
        Against::Itself { reduced: Some(small) } => {
            let (small_spatial, small_graph) = part.lower(small, chip, &mut |_, _| {})?;
            let mut c = certify(&small_spatial, &small_graph, chip, seed).map_err(reject)?;
            c.checks.push(format!("numbers checked on the first {CERTIFY_VOCAB_ROWS} vocabulary rows"));
            // Structure and resources of the full-size program itself.
            check_structure(&spatial, &graph, chip).map_err(reject)?;
            c.checks.push("structure and resources at full size".into());
            (c, vec![(AttachedRole::Reduced, small.clone())])
        }
        Against::Unsplit { whole, reduced } => {
            let (unsplit, whole_graph) = part.unsplit(whole, chip)?;
            let mut attached = vec![(AttachedRole::Unsplit, whole.clone())];
            let certificate = match reduced {
                None => certify_tp(&spatial, &graph, &unsplit, &whole_graph, chip, seed).map_err(reject)?,
                Some((small, small_whole)) => {
                    let (small_spatial, small_graph) = part.lower(small, chip, &mut |_, _| {})?;
                    let (small_unsplit, small_whole_graph) = part.unsplit(small_whole, chip)?;
                    let mut c =
                        certify_tp(&small_spatial, &small_graph, &small_unsplit, &small_whole_graph, chip, seed)
                            .map_err(reject)?;
                    c.checks.push(format!(
                        "numbers checked on the first {CERTIFY_VOCAB_ROWS} vocabulary rows, split alike"
                    ));
                    check_tp_structure(&spatial, &graph, &unsplit, chip).map_err(reject)?;
                    c.checks.push("structure, resources and slices at full size".into());
                    attached.push((AttachedRole::Reduced, small.clone()));
                    attached.push((AttachedRole::ReducedUnsplit, small_whole.clone()));
                    c
                }
            };
            (certificate, attached)
        }
    };
    finish(name, part.source, spatial, certificate, attached, chip)
}

impl Part<'_> {
    /// `src` parsed and lifted, refused in the part's name.
    fn front<'s>(&self, src: &'s Source) -> Result<(&'s crate::lang::ast::Program, Graph), StreamedReject> {
        let front = |refusal| StreamedReject::Front { program: self.name.to_string(), refusal };
        let program = src.program().map_err(|d| front(Refusal { diagnostics: d.to_vec() }))?;
        let graph = lift(program).map_err(front)?;
        Ok((program, graph))
    }

    /// `src` (the part's source or its reduced form) lowered as the part runs: split over its
    /// chips, prefetch marked when looped.
    fn lower(
        &self,
        src: &Source,
        chip: &Chip,
        dump: &mut dyn FnMut(&str, &SpatialProgram),
    ) -> Result<(SpatialProgram, Graph), StreamedReject> {
        let (program, graph) = self.front(src)?;
        let mut spatial = match self.split {
            Some(chips) => {
                let split = Split { chips, slices: &src.slices };
                lower_split(self.name, program, &graph, &src.stored, split, chip, dump)
            }
            None => lower(self.name, program, &graph, &src.stored, chip, dump),
        };
        if self.looped {
            // A kind runs looped: its weight-streaming stages prefetch the next layer's weights.
            mark_prefetch(&mut spatial);
        }
        Ok((spatial, graph))
    }

    /// An unsplit program the split part is certified against, lowered on one chip.
    fn unsplit(&self, src: &Source, chip: &Chip) -> Result<(SpatialProgram, Graph), StreamedReject> {
        let (program, graph) = self.front(src)?;
        Ok((lower(self.name, program, &graph, &src.stored, chip, &mut |_, _| {}), graph))
    }
}

/// A certificate of `checks` without numbers ([`ESTIMATE_ONLY`] added; no tolerance, no error).
fn estimate_certificate(mut checks: Vec<String>, seed: u64) -> Certificate {
    checks.push(ESTIMATE_ONLY.to_string());
    Certificate { checks, seed, tolerance: 0.0, max_abs_err: 0.0 }
}

/// A lowered program with its certificate, cost and declared names.
fn finish(
    name: &str,
    source: &Source,
    spatial: SpatialProgram,
    certificate: Certificate,
    certified_against: Vec<(AttachedRole, Source)>,
    chip: &Chip,
) -> Result<ProgramPart, StreamedReject> {
    let cost = program_cost(&spatial, chip)
        .map_err(|e| StreamedReject::Cost { program: name.to_string(), message: e.to_string() })?;
    let declared = spatial.tensors.iter().filter(|t| t.role != Role::Temp).map(|t| t.name.clone()).collect();
    Ok(ProgramPart {
        name: name.to_string(),
        source: source.clone(),
        digest: shape_digest(source).hex(),
        spatial,
        certificate,
        cost,
        declared,
        bind: BTreeMap::new(),
        certified_against,
    })
}
