//! Chip descriptions as data: the built-in SN50 and SN40L files and user TOML files, every figure with its provenance.

use std::collections::BTreeMap;
use std::path::Path;

/// The chips built into the binary, by name.
pub const BUILTINS: [(&str, &str); 2] =
    [("sn50", include_str!("../chips/sn50.toml")), ("sn40l", include_str!("../chips/sn40l.toml"))];

/// Every figure a chip file must give, with its fixed unit. A figure is a table
/// `{ value, unit, source | assumption }`.
pub const FIGURES: [(&str, &str); 22] = [
    ("pcus", "units"),
    ("pmus", "units"),
    ("sram_bytes", "bytes"),
    ("hbm_bytes", "bytes"),
    ("hbm_bandwidth", "bytes/s"),
    ("ddr_bytes", "bytes"),
    ("ddr_bandwidth", "bytes/s"),
    ("peak_flops_bf16", "flop/s"),
    ("peak_flops_fp8", "flop/s"),
    ("clock", "Hz"),
    ("pmu_sram_bytes", "bytes"),
    ("pmu_bytes_per_cycle", "bytes/cycle"),
    ("pcu_flops_bf16", "flop/s"),
    ("pcu_flops_fp8", "flop/s"),
    ("link_bandwidth", "bytes/s"),
    ("link_latency", "s"),
    ("reconfiguration", "s"),
    ("pipeline_fill", "cycles"),
    ("synchronisation", "s"),
    ("mesh_rows", "tiles"),
    ("mesh_cols", "tiles"),
    ("hop", "cycles"),
];

/// Where a figure comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Provenance {
    /// A published figure and where it was published.
    Source(String),
    /// Our estimate and the reasoning behind it.
    Assumption(String),
}

/// One chip (one socket). Rates are per second; times in seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Chip {
    pub name: String,
    pub description: String,
    /// `builtin:<name>` or the path the chip was read from.
    pub origin: String,
    pub pcus: u32,
    pub pmus: u32,
    pub sram_bytes: u64,
    pub hbm_bytes: u64,
    pub hbm_bandwidth: f64,
    pub ddr_bytes: u64,
    pub ddr_bandwidth: f64,
    pub peak_flops_bf16: f64,
    pub peak_flops_fp8: f64,
    pub clock_hz: f64,
    pub pmu_sram_bytes: u64,
    pub pmu_bytes_per_cycle: f64,
    pub pcu_flops_bf16: f64,
    pub pcu_flops_fp8: f64,
    pub link_bandwidth: f64,
    /// Seconds per all-reduce, charged to the fill of every stage with link traffic.
    pub link_latency: f64,
    /// Seconds per switch between sections.
    pub reconfiguration: f64,
    /// Cycles for a stage's first tile to get through it, charged per stage per section run.
    pub pipeline_fill_cycles: f64,
    /// Seconds of barrier at the end of every section run.
    pub synchronisation: f64,
    /// The unit mesh: `mesh_rows` × `mesh_cols` tiles, each one PCU and one PMU.
    pub mesh_rows: u32,
    pub mesh_cols: u32,
    /// Cycles for data to cross one tile of the mesh (one switch hop).
    pub hop_cycles: f64,
    /// The provenance of every figure, by key.
    pub provenance: BTreeMap<String, Provenance>,
}

/// A chip file that could not be loaded; every message names the file and, where there is one, the key.
#[derive(Debug, thiserror::Error)]
pub enum ChipError {
    /// The I/O error is part of the message (not a `source`), so a cause chain prints it once.
    #[error("cannot read chip file {file}: {error}")]
    Io { file: String, error: std::io::Error },
    #[error("{file}: not valid TOML: {message}")]
    Parse { file: String, message: String },
    #[error("{file}: missing `{key}`; every chip file gives {expected}")]
    Missing { file: String, key: String, expected: String },
    #[error("{file}: unknown key `{key}`; known figures are {known}")]
    UnknownKey { file: String, key: String, known: String },
    #[error("{file}: `{key}` {problem}")]
    Invalid { file: String, key: String, problem: String },
    #[error("unknown chip `{name}`: neither a built-in chip ({builtins}) nor a readable file")]
    Unknown { name: String, builtins: String },
}

impl Chip {
    /// A built-in chip by name (`sn50`, `sn40l`).
    pub fn builtin(name: &str) -> Result<Chip, ChipError> {
        match BUILTINS.iter().find(|(n, _)| *n == name) {
            Some((n, text)) => Chip::from_toml_str(text, &format!("builtin:{n}")),
            None => Err(ChipError::Unknown { name: name.to_string(), builtins: builtin_names() }),
        }
    }

    /// A chip read from a user TOML file.
    pub fn from_file(path: &Path) -> Result<Chip, ChipError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| ChipError::Io { file: file.clone(), error })?;
        Chip::from_toml_str(&text, &file)
    }

    /// A `--chip` argument: a built-in name first, else a path to a chip file.
    pub fn resolve(arg: &str) -> Result<Chip, ChipError> {
        if BUILTINS.iter().any(|(n, _)| *n == arg) {
            return Chip::builtin(arg);
        }
        let path = Path::new(arg);
        if path.is_file() {
            return Chip::from_file(path);
        }
        Err(ChipError::Unknown { name: arg.to_string(), builtins: builtin_names() })
    }

    /// A chip from TOML text; `file` names it in errors.
    pub fn from_toml_str(text: &str, file: &str) -> Result<Chip, ChipError> {
        let table: toml::Table =
            text.parse().map_err(|e: toml::de::Error| ChipError::Parse { file: file.into(), message: one_line(&e) })?;
        let mut ctx = Ctx { file, table: &table, provenance: BTreeMap::new() };
        ctx.reject_unknown_keys()?;
        let chip = Chip {
            name: ctx.string("name", true)?,
            description: ctx.string("description", false)?,
            origin: file.to_string(),
            pcus: ctx.count("pcus")?,
            pmus: ctx.count("pmus")?,
            sram_bytes: ctx.whole("sram_bytes")?,
            hbm_bytes: ctx.whole("hbm_bytes")?,
            hbm_bandwidth: ctx.figure("hbm_bandwidth")?,
            ddr_bytes: ctx.whole("ddr_bytes")?,
            ddr_bandwidth: ctx.figure("ddr_bandwidth")?,
            peak_flops_bf16: ctx.figure("peak_flops_bf16")?,
            peak_flops_fp8: ctx.figure("peak_flops_fp8")?,
            clock_hz: ctx.figure("clock")?,
            pmu_sram_bytes: ctx.whole("pmu_sram_bytes")?,
            pmu_bytes_per_cycle: ctx.figure("pmu_bytes_per_cycle")?,
            pcu_flops_bf16: ctx.figure("pcu_flops_bf16")?,
            pcu_flops_fp8: ctx.figure("pcu_flops_fp8")?,
            link_bandwidth: ctx.figure("link_bandwidth")?,
            link_latency: ctx.figure("link_latency")?,
            reconfiguration: ctx.figure("reconfiguration")?,
            pipeline_fill_cycles: ctx.figure("pipeline_fill")?,
            synchronisation: ctx.figure("synchronisation")?,
            mesh_rows: ctx.count("mesh_rows")?,
            mesh_cols: ctx.count("mesh_cols")?,
            hop_cycles: ctx.figure("hop")?,
            provenance: std::mem::take(&mut ctx.provenance),
        };
        chip.check_consistency(file)?;
        Ok(chip)
    }

    /// The TOML text of a built-in chip.
    pub fn builtin_text(name: &str) -> Option<&'static str> {
        BUILTINS.iter().find(|(n, _)| *n == name).map(|(_, text)| *text)
    }

    /// Aggregate on-chip SRAM bandwidth of one PMU, bytes per second.
    pub fn pmu_bandwidth(&self) -> f64 {
        self.pmu_bytes_per_cycle * self.clock_hz
    }

    /// Tiles of the unit mesh.
    pub fn mesh_tiles(&self) -> u64 {
        u64::from(self.mesh_rows) * u64::from(self.mesh_cols)
    }

    /// Per-unit figures may not promise more than the chip's totals, and the mesh holds every unit.
    fn check_consistency(&self, file: &str) -> Result<(), ChipError> {
        let units = self.pcus.max(self.pmus);
        if self.mesh_tiles() < u64::from(units) {
            return Err(ChipError::Invalid {
                file: file.into(),
                key: "mesh_rows".into(),
                problem: format!(
                    "x `mesh_cols` = {} tiles, fewer than the chip's {units} PCUs or PMUs (one of each per tile)",
                    self.mesh_tiles()
                ),
            });
        }
        let over = |key: &str, per_unit: f64, units: u32, total: f64, total_key: &str| {
            if per_unit * f64::from(units) > total * 1.001 {
                return Err(ChipError::Invalid {
                    file: file.into(),
                    key: key.into(),
                    problem: format!(
                        "x {units} units exceeds `{total_key}` ({total}); lower it to at most total / units"
                    ),
                });
            }
            Ok(())
        };
        over("pmu_sram_bytes", self.pmu_sram_bytes as f64, self.pmus, self.sram_bytes as f64, "sram_bytes")?;
        over("pcu_flops_bf16", self.pcu_flops_bf16, self.pcus, self.peak_flops_bf16, "peak_flops_bf16")?;
        over("pcu_flops_fp8", self.pcu_flops_fp8, self.pcus, self.peak_flops_fp8, "peak_flops_fp8")
    }
}

fn builtin_names() -> String {
    BUILTINS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

fn one_line(e: &toml::de::Error) -> String {
    e.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
}

struct Ctx<'a> {
    file: &'a str,
    table: &'a toml::Table,
    provenance: BTreeMap<String, Provenance>,
}

impl Ctx<'_> {
    fn invalid(&self, key: &str, problem: impl Into<String>) -> ChipError {
        ChipError::Invalid { file: self.file.into(), key: key.into(), problem: problem.into() }
    }

    fn reject_unknown_keys(&self) -> Result<(), ChipError> {
        let known = |k: &str| k == "name" || k == "description" || FIGURES.iter().any(|(f, _)| *f == k);
        match self.table.keys().find(|k| !known(k)) {
            Some(key) => Err(ChipError::UnknownKey {
                file: self.file.into(),
                key: key.clone(),
                known: FIGURES.iter().map(|(f, _)| *f).collect::<Vec<_>>().join(", "),
            }),
            None => Ok(()),
        }
    }

    fn string(&self, key: &str, required: bool) -> Result<String, ChipError> {
        match self.table.get(key) {
            Some(toml::Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
            Some(_) => Err(self.invalid(key, "must be a non-empty string")),
            None if required => {
                Err(ChipError::Missing { file: self.file.into(), key: key.into(), expected: "a `name` string".into() })
            }
            None => Ok(String::new()),
        }
    }

    /// A positive, finite figure, recording its provenance.
    fn figure(&mut self, key: &str) -> Result<f64, ChipError> {
        let unit = FIGURES.iter().find(|(f, _)| *f == key).map(|(_, u)| *u).expect("figure keys come from FIGURES");
        let Some(entry) = self.table.get(key) else {
            let expected = format!("a `[{key}]` table with `value`, `unit = \"{unit}\"` and `source` or `assumption`");
            return Err(ChipError::Missing { file: self.file.into(), key: key.into(), expected });
        };
        let Some(entry) = entry.as_table() else {
            return Err(self.invalid(key, "must be a table `{ value, unit, source | assumption }`"));
        };
        if let Some(extra) = entry.keys().find(|k| !["value", "unit", "source", "assumption"].contains(&k.as_str())) {
            return Err(self.invalid(key, format!("has unknown field `{extra}`")));
        }
        let value = match entry.get("value") {
            Some(toml::Value::Integer(i)) => *i as f64,
            Some(toml::Value::Float(f)) => *f,
            Some(_) => return Err(self.invalid(key, "`value` must be a number")),
            None => return Err(self.invalid(key, "has no `value`")),
        };
        if !(value.is_finite() && value > 0.0) {
            return Err(self.invalid(key, format!("must be positive and finite, found {value}")));
        }
        match entry.get("unit").and_then(|u| u.as_str()) {
            Some(u) if u == unit => {}
            found => return Err(self.invalid(key, format!("must have `unit = \"{unit}\"`, found {found:?}"))),
        }
        let text = |field: &str| entry.get(field).and_then(|v| v.as_str()).map(str::trim).filter(|s| !s.is_empty());
        let provenance = match (text("source"), text("assumption")) {
            (Some(s), None) => Provenance::Source(s.into()),
            (None, Some(a)) => Provenance::Assumption(a.into()),
            (Some(_), Some(_)) => return Err(self.invalid(key, "has both `source` and `assumption`; keep one")),
            (None, None) => {
                return Err(self.invalid(key, "has neither `source` nor `assumption`; say where the figure comes from"))
            }
        };
        self.provenance.insert(key.into(), provenance);
        Ok(value)
    }

    fn whole(&mut self, key: &str) -> Result<u64, ChipError> {
        let value = self.figure(key)?;
        if value.fract() != 0.0 || value > u64::MAX as f64 {
            return Err(self.invalid(key, format!("must be a whole number, found {value}")));
        }
        Ok(value as u64)
    }

    fn count(&mut self, key: &str) -> Result<u32, ChipError> {
        let value = self.whole(key)?;
        u32::try_from(value).map_err(|_| self.invalid(key, format!("is too large for a unit count: {value}")))
    }
}
