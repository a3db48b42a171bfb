//! The serde types of a bundle's `manifest.json` (format "rdu-bundle", version 4); checking them is `bundle::validate`.
//!
//! Every map is a `BTreeMap` and every list keeps the order the compiler gave it, so one
//! manifest always serialises to the same bytes. Optional fields are left out when absent.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cost::StepCost;
use crate::rope::RopeSpec;

mod json;

/// The marker in `format` that says a directory is an rdu bundle.
pub const FORMAT: &str = "rdu-bundle";
/// The manifest version this build writes and reads. Version 2 added the file hashes and the `schedule`;
/// version 3 the vocabulary-parallel head (gathered `activations[].slices`, `reduced_unsplit`);
/// version 4 the runtime inputs' `role` and `sequence`.
pub const VERSION: u32 = 4;

/// `manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    pub version: u32,
    pub model: String,
    pub cut: Cut,
    pub chip: String,
    /// Which weights the checkpoint stores Q8_0 (`auto`, `q8`, `dense`, ...).
    pub storage: String,
    pub programs: Programs,
    /// One entry per layer, in layer order.
    pub layers: Vec<LayerEntry>,
    /// How one step runs: its invocations in order and which programs stay resident together.
    pub schedule: Schedule,
    /// Every checkpoint-backed tensor a program reads, by the name the programs give it.
    #[serde(deserialize_with = "unique::map")]
    pub tensors: BTreeMap<String, TensorEntry>,
    /// Values the host supplies every step (`tok`, `pos`, `toks`, `pos_s{b}`).
    pub inputs: Vec<InputEntry>,
    /// Carried state (KV caches, recurrent and conv state), zero at the start of a sequence.
    pub states: Vec<StateEntry>,
    /// Tensors the host computes once and every layer shares (RoPE tables, scalers).
    pub shared: Vec<SharedEntry>,
    /// Hidden states passed from one program to the next (`x`, `xo{l}`, `X`, `bxo{l}`).
    pub activations: Vec<ActivationEntry>,
}

/// What one step processes (DESIGN §8).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cut {
    pub mode: CutMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ctx: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tp: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk: Option<usize>,
    /// A verify step's drafted tokens per sequence (it steps `draft + 1` rows of each).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CutMode {
    Forward,
    Decode,
    Batched,
    Tp,
    BatchedTp,
    Prefill,
    PrefillTp,
    Verify,
}

impl CutMode {
    /// Whether the kind programs of this mode always run split over `cut.tp` chips (`tp`,
    /// `batched-tp`, `prefill-tp`); a `verify` bundle is split when its `tp` is above 1
    /// ([`Cut::is_split`]).
    pub fn is_split(self) -> bool {
        matches!(self, CutMode::Tp | CutMode::BatchedTp | CutMode::PrefillTp)
    }
}

impl Cut {
    /// Whether the kind programs run split over `tp` chips.
    pub fn is_split(&self) -> bool {
        self.mode.is_split() || (self.mode == CutMode::Verify && self.tp.is_some_and(|t| t > 1))
    }
}

/// The embedding program, one program per layer kind, the head.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Programs {
    pub embed: ProgramEntry,
    pub head: ProgramEntry,
    pub kinds: Vec<KindEntry>,
}

/// The embedding or the head program; its declared names are the bundle's own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgramEntry {
    pub name: String,
    /// `programs/<name>.rdu`: the authored source.
    pub file_source: String,
    /// `programs/<name>.spatial`: the lowered program, text form.
    pub file_spatial: String,
    /// BLAKE3 of `file_source`'s bytes, lowercase hex (empty when absent: refused on reading).
    #[serde(default)]
    pub source_blake3: String,
    /// BLAKE3 of `file_spatial`'s bytes, lowercase hex.
    #[serde(default)]
    pub spatial_blake3: String,
    /// The sources certification ran against besides `file_source` (an unsplit or reduced program).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certified_against: Vec<Attached>,
    /// `shape_digest` of the source.
    pub digest: String,
    /// Every tensor name the program declares (inputs, weights, shared, states) and outputs.
    pub declared: Vec<String>,
    /// How the program's names bind to the bundle's (empty: every name is the bundle's own).
    /// The head reads the last layer's output under a depth-independent name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", deserialize_with = "unique::map")]
    pub bind: BTreeMap<String, String>,
    pub certificate: CertificateEntry,
    pub cost: CostEntry,
}

/// One lowered, certified layer program standing for every layer of its kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindEntry {
    pub name: String,
    pub file_source: String,
    pub file_spatial: String,
    #[serde(default)]
    pub source_blake3: String,
    #[serde(default)]
    pub spatial_blake3: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certified_against: Vec<Attached>,
    pub digest: String,
    /// The layers this kind runs at, ascending.
    pub layers: Vec<usize>,
    /// Every tensor name the representative declares and outputs; each layer's `bind` maps exactly these.
    pub declared: Vec<String>,
    pub certificate: CertificateEntry,
    pub cost: CostEntry,
}

/// A source file certification ran against besides the program's own, bound to its bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attached {
    /// `unsplit`: the one-chip program a tensor-parallel kind is certified against over its
    /// chips; `reduced`: the smaller program whose numbers certification checked instead
    /// (fewer vocabulary rows, fewer rows of a prefill chunk); `reduced_unsplit`: the unsplit
    /// counterpart a reduced split program is certified against over its chips.
    pub role: AttachedRole,
    pub file: String,
    pub blake3: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttachedRole {
    Unsplit,
    Reduced,
    /// The unsplit counterpart of a `reduced` split program (a vocabulary-parallel head's).
    ReducedUnsplit,
}

/// The BLAKE3 hash of `bytes` as the manifest records it: 64 lowercase hex digits.
pub fn file_blake3(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// What certification checked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateEntry {
    /// The checks that passed (`structure`, `resources`, `numbers`, ...).
    pub checks: Vec<String>,
    pub seed: u64,
    pub tolerance: f64,
    pub max_abs_err: f64,
}

/// The cost model's estimate of one step of the program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostEntry {
    pub seconds: f64,
    pub hbm_bytes: u64,
    pub flops: u64,
    pub pcus: u32,
    pub pmus: u32,
    pub sections: usize,
}

/// Which kind runs at a layer and how its names bind to the layer's tensors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerEntry {
    pub layer: usize,
    pub kind: String,
    /// Kind tensor name -> this layer's tensor name.
    #[serde(deserialize_with = "unique::map")]
    pub bind: BTreeMap<String, String>,
}

/// How one step runs (kernel looping, `docs/SPATIAL.md`): the invocations in order — the
/// embedding, loops over consecutive layers, the head — and the programs the chip holds
/// configured together.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// Sets of programs (by name) configured on the chip at once: switching between two
    /// programs of one set needs no reconfiguration. Every program is in exactly one set.
    pub resident: Vec<Vec<String>>,
    /// The step's invocations, in order: `embed`, one or more `loop`s, `head`.
    pub invocations: Vec<Invocation>,
}

/// What one invocation runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Run {
    Embed,
    /// Consecutive layers as one looped invocation: iteration `i` runs the block's kinds on
    /// the next `block.len()` layers.
    Loop,
    Head,
}

/// One invocation of a step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Invocation {
    pub run: Run,
    /// A loop's body: the kinds of one iteration's layers, in order (one kind, or a repeating
    /// block of kinds that are resident together). Empty for `embed` and `head`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub block: Vec<String>,
    /// A loop's layers, consecutive and ascending, a whole number of blocks: layer
    /// `layers[i]` runs kind `block[i % block.len()]`. Empty for `embed` and `head`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<usize>,
}

impl Schedule {
    /// The plainest schedule of `layers` (one entry per layer, in order): the embedding, one
    /// loop per run of consecutive layers of one kind, the head; every program resident alone.
    pub fn by_runs(embed: &str, head: &str, layers: &[LayerEntry]) -> Schedule {
        let mut invocations = vec![Invocation { run: Run::Embed, block: vec![], layers: vec![] }];
        let mut kinds: Vec<&String> = Vec::new();
        for entry in layers {
            match invocations.last_mut() {
                Some(last) if last.run == Run::Loop && last.block[0] == entry.kind => last.layers.push(entry.layer),
                _ => invocations.push(Invocation {
                    run: Run::Loop,
                    block: vec![entry.kind.clone()],
                    layers: vec![entry.layer],
                }),
            }
            if !kinds.contains(&&entry.kind) {
                kinds.push(&entry.kind);
            }
        }
        invocations.push(Invocation { run: Run::Head, block: vec![], layers: vec![] });
        let resident = std::iter::once(embed.to_string())
            .chain(kinds.into_iter().cloned())
            .chain(std::iter::once(head.to_string()))
            .map(|n| vec![n])
            .collect();
        Schedule { resident, invocations }
    }

    /// Every layer in the order the schedule runs it.
    pub fn layer_order(&self) -> impl Iterator<Item = usize> + '_ {
        self.invocations.iter().flat_map(|i| i.layers.iter().copied())
    }
}

/// A tensor the host loads from the checkpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorEntry {
    pub shape: Vec<usize>,
    pub dtype: String,
    pub storage: TensorStorage,
    /// `fp8` only: the `[rows, cols]` of the blocks that share one scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<[usize; 2]>,
    /// `fp8` only, when `block` cuts the checkpoint's blocks finer (a tensor-parallel chip's
    /// share holds part of a block): the checkpoint's `[rows, cols]` block, each dividing by
    /// `block`'s. The values are read as stored; each finer block's scale is the scale of the
    /// checkpoint block it lies in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_block: Option<[usize; 2]>,
    pub checkpoint: Checkpoint,
    /// Per chip under tensor parallelism: the ranges of the (full) `shape` each chip loads,
    /// concatenated in order — of the padded shape when `pad` is given. Empty when every chip
    /// loads it whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slices: Vec<Vec<Slice>>,
    /// Under tensor parallelism, when the chips' shares would split the tensor's blocks: the
    /// deployment holds `shape` (as the checkpoint stores it) zero-padded along the slices' axis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pad: Option<Pad>,
}

/// A tensor zero-padded as the host binds it: `axis` of the stored shape grown to `to` values,
/// zeros (an MXFP4 tensor: whole zero blocks, its stored blocks kept as they are) after the
/// stored ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pad {
    pub axis: usize,
    pub to: usize,
}

/// How the tensor is held on the chip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TensorStorage {
    Dense,
    #[serde(rename = "q8_0")]
    Q8_0,
    /// FP8 e4m3fn values with one scale per block of `TensorEntry::block`.
    Fp8,
    /// MXFP4 blocks of 32 along the last axis.
    Mxfp4,
}

impl TensorStorage {
    /// The manifest's storage of a weight a program holds as `storage`, and its FP8 block.
    pub fn of(storage: crate::program::Storage) -> (TensorStorage, Option<[usize; 2]>) {
        use crate::program::Storage;
        match storage {
            Storage::Q8_0 => (TensorStorage::Q8_0, None),
            Storage::Fp8 { rows, cols } => (TensorStorage::Fp8, Some([rows as usize, cols as usize])),
            Storage::Mxfp4 => (TensorStorage::Mxfp4, None),
            Storage::Dense | Storage::Bf16 => (TensorStorage::Dense, None),
        }
    }

    /// The word the manifest writes (`dense`, `q8_0`, `fp8`, `mxfp4`).
    pub fn word(self) -> &'static str {
        match self {
            TensorStorage::Dense => "dense",
            TensorStorage::Q8_0 => "q8_0",
            TensorStorage::Fp8 => "fp8",
            TensorStorage::Mxfp4 => "mxfp4",
        }
    }
}

impl TensorEntry {
    /// The shape the chips' `slices` are ranges of: `shape`, grown along `pad`'s axis.
    pub fn padded_shape(&self) -> Vec<usize> {
        let mut shape = self.shape.clone();
        if let Some(extent) = self.pad.and_then(|p| shape.get_mut(p.axis)) {
            *extent = self.pad.map_or(*extent, |p| p.to);
        }
        shape
    }

    /// How a program declares the tensor (`None` for an `fp8` entry without a usable block).
    pub fn program_storage(&self) -> Option<crate::program::Storage> {
        use crate::program::Storage;
        Some(match self.storage {
            TensorStorage::Dense => Storage::Dense,
            TensorStorage::Q8_0 => Storage::Q8_0,
            TensorStorage::Mxfp4 => Storage::Mxfp4,
            TensorStorage::Fp8 => {
                let [rows, cols] = self.block?;
                Storage::Fp8 { rows: u32::try_from(rows).ok()?, cols: u32::try_from(cols).ok()? }
            }
        })
    }

    /// The storage the checkpoint holds the tensor in: [`TensorEntry::program_storage`], an
    /// FP8 tensor in its `stored_block` when a chip's blocks are finer.
    pub fn checkpoint_storage(&self) -> Option<crate::program::Storage> {
        match (self.program_storage()?, self.stored_block) {
            (crate::program::Storage::Fp8 { .. }, Some([rows, cols])) => {
                Some(crate::program::Storage::Fp8 { rows: u32::try_from(rows).ok()?, cols: u32::try_from(cols).ok()? })
            }
            (storage, _) => Some(storage),
        }
    }
}

/// Where in the checkpoint a tensor comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    pub kind: CheckpointKind,
    /// `tensor`, `slice`: one name; `stack`: the tensors stacked, in order.
    pub names: Vec<String>,
    /// `stack`: the new axis; `slice`: the axis cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub axis: Option<usize>,
    /// `slice` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<usize>,
    /// `slice` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub len: Option<usize>,
    /// `slice` only: every `step`-th entry from `start` (absent: 1, a run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<usize>,
    /// `tensor`, `slice`: the checkpoint tensor's last two axes are swapped first (HF gpt-oss
    /// stores its experts `[E, in, out]`, for `x·W`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub transposed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointKind {
    /// One checkpoint tensor as it is.
    Tensor,
    /// Several (per-expert) tensors stacked along a new axis.
    Stack,
    /// A range of one checkpoint tensor along an axis (every `step`-th entry of it).
    Slice,
}

/// One range of a chip's part of a split tensor: `len` rows or columns from `start` along `axis`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slice {
    pub axis: usize,
    pub start: usize,
    pub len: usize,
}

/// A runtime input the host fills every step. Its `role` says with what, so the host never
/// reads meaning from a name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputEntry {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    pub role: InputRole,
    /// The sequence of a batched step whose position this is (`pos_s{b}`); absent when the
    /// input serves the whole step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<usize>,
}

/// What a runtime input carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputRole {
    /// The step's token ids, one per row.
    Tokens,
    /// A position: a scalar, or one per row.
    Position,
    /// A verify step's row to resume a recurrent state from (`i32[1]`): the drafted tokens the
    /// previous step accepted, its draft count for the state as it is (after the previous
    /// step's last row, or as a new sequence or a prefill or decode step left it).
    Resume,
    /// A verify step's positions for the previous step's drafted rows of a ring cache
    /// (`i32[draft]`): an accepted row's own position, else the step's first position (a slot
    /// the step overwrites with its first row's key).
    Pending,
    /// A multi-token-prediction block's hidden state of the row before each of its rows
    /// (`f32[rows, d_model]`): what the target's head exported, or the block's own head.
    Hidden,
}

impl InputRole {
    /// The role as the manifest spells it.
    pub fn word(self) -> &'static str {
        match self {
            InputRole::Tokens => "tokens",
            InputRole::Position => "position",
            InputRole::Resume => "resume",
            InputRole::Pending => "pending",
            InputRole::Hidden => "hidden",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateEntry {
    pub name: String,
    /// How the state is stored: `f32`, or `bf16` (every value written is rounded to bf16).
    pub dtype: StateDtype,
    /// The whole state (as on one chip).
    pub shape: Vec<usize>,
    /// Under tensor parallelism, each chip's ranges of `shape` (as for tensors); empty when
    /// every chip holds the whole state (a replicated latent cache) or there is one chip.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slices: Vec<Vec<Slice>>,
}

/// The storage of a carried state: a deployment choice (`rdu lower --state`). f32 is the
/// default for now: a bf16 write can round to either neighbour when a value lies within f32
/// noise of a tie, so certification's 1e-4 comparison of the written state is not yet sound for
/// bf16 (README, "State storage").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateDtype {
    #[default]
    F32,
    Bf16,
}

impl StateDtype {
    pub fn as_str(self) -> &'static str {
        match self {
            StateDtype::F32 => "f32",
            StateDtype::Bf16 => "bf16",
        }
    }

    /// How a program declares a state of this dtype: an f32 tensor, dense or `storage=bf16`.
    pub fn storage(self) -> crate::program::Storage {
        match self {
            StateDtype::F32 => crate::program::Storage::Dense,
            StateDtype::Bf16 => crate::program::Storage::Bf16,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedEntry {
    pub name: String,
    pub shape: Vec<usize>,
    /// Present for a RoPE table: which table and the rotation it comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope: Option<SharedRope>,
}

/// A RoPE table `[rows, dim/2]` of one rotation (`crate::rope::tables`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SharedRope {
    pub table: RopeTable,
    #[serde(flatten)]
    pub spec: RopeSpec,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeTable {
    Cos,
    Sin,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivationEntry {
    pub name: String,
    /// The whole activation.
    pub shape: Vec<usize>,
    /// A result a tensor-parallel program GATHERS (the logits of a vocabulary-parallel head):
    /// each chip's ranges of `shape` that it computes; the host joins them in chip order,
    /// each position from the first chip that holds it. Empty: every chip has it whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slices: Vec<Vec<Slice>>,
}

/// The shape one chip holds of a tensor or state of (whole) `shape` split by `slices`: the
/// whole shape when there are no slices.
pub fn chip_shape(shape: &[usize], slices: &[Vec<Slice>]) -> Vec<usize> {
    let mut local = shape.to_vec();
    if let Some(first) = slices.first() {
        if let Some(axis) = first.first().map(|s| s.axis) {
            if let Some(extent) = local.get_mut(axis) {
                *extent = first.iter().map(|s| s.len).sum();
            }
        }
    }
    local
}

/// Chip `chip`'s ranges of `slices` as half-open `(start, end)` pairs along their axis.
pub fn chip_ranges(slices: &[Vec<Slice>], chip: usize) -> Option<(usize, Vec<(usize, usize)>)> {
    let ranges = slices.get(chip)?;
    let axis = ranges.first()?.axis;
    Some((axis, ranges.iter().map(|s| (s.start, s.start + s.len)).collect()))
}

impl From<&StepCost> for CostEntry {
    fn from(cost: &StepCost) -> CostEntry {
        CostEntry {
            seconds: cost.seconds,
            hbm_bytes: cost.hbm_bytes,
            flops: cost.flops,
            pcus: cost.pcus,
            pmus: cost.pmus,
            sections: cost.sections.len(),
        }
    }
}

impl Manifest {
    /// How the bundle stores its states: `None` when it carries none; refused (one line) when
    /// some are stored bf16 and others f32.
    pub fn state_dtype(&self) -> Result<Option<StateDtype>, &'static str> {
        let stored: std::collections::BTreeSet<StateDtype> = self.states.iter().map(|s| s.dtype).collect();
        match stored.into_iter().collect::<Vec<_>>().as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(*one)),
            _ => Err("some states are stored bf16 and others f32"),
        }
    }

    /// The bytes of `manifest.json`: deterministic pretty JSON, arrays of scalars on one line, a trailing newline.
    pub fn to_json(&self) -> String {
        json::pretty(&serde_json::to_value(self).expect("a manifest always serialises"))
    }
}

/// JSON objects whose duplicate keys are an error instead of the last one silently winning.
mod unique {
    use std::collections::BTreeMap;
    use std::fmt;

    use serde::de::{Deserialize, Deserializer, Error, MapAccess, Visitor};

    pub fn map<'de, D: Deserializer<'de>, V: Deserialize<'de>>(de: D) -> Result<BTreeMap<String, V>, D::Error> {
        struct Unique<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Unique<V> {
            type Value = BTreeMap<String, V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object with unique keys")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                let mut out = BTreeMap::new();
                while let Some((key, value)) = access.next_entry::<String, V>()? {
                    if out.contains_key(&key) {
                        return Err(A::Error::custom(format!("key `{key}` appears twice")));
                    }
                    out.insert(key, value);
                }
                Ok(out)
            }
        }
        de.deserialize_map(Unique(std::marker::PhantomData))
    }
}
