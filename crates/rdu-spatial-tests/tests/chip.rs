//! Chip files: the built-ins carry the published figures and a provenance for every number; user files load and bad ones are refused by key and file.

use rdu_spatial::chip::{Chip, ChipError, Provenance, BUILTINS, FIGURES};

/// The SN50 file with `[key].field` set to `value` (or the figure removed when `value` is None).
fn sn50_with(key: &str, field: &str, value: Option<toml::Value>) -> String {
    let mut table: toml::Table = Chip::builtin_text("sn50").unwrap().parse().unwrap();
    match value {
        Some(v) => drop(table[key].as_table_mut().unwrap().insert(field.into(), v)),
        None => drop(table.remove(key)),
    }
    toml::to_string(&table).unwrap()
}

fn load(text: &str) -> Result<Chip, ChipError> {
    Chip::from_toml_str(text, "user.toml")
}

/// Every number in a TOML value, with the dotted path to it and whether its table says where it comes from.
fn numbers(path: &str, value: &toml::Value, sourced: bool, out: &mut Vec<(String, bool)>) {
    match value {
        toml::Value::Integer(_) | toml::Value::Float(_) => out.push((path.to_string(), sourced)),
        toml::Value::Array(items) => items.iter().for_each(|v| numbers(path, v, sourced, out)),
        toml::Value::Table(table) => {
            let text = |k: &str| table.get(k).and_then(|v| v.as_str()).is_some_and(|s| !s.trim().is_empty());
            let here = text("source") ^ text("assumption");
            for (k, v) in table {
                numbers(&format!("{path}.{k}"), v, here, out);
            }
        }
        _ => {}
    }
}

#[test]
fn every_number_in_a_builtin_chip_file_carries_a_source_or_an_assumption() {
    for (name, text) in BUILTINS {
        let table: toml::Value = toml::Value::Table(text.parse().unwrap());
        let mut found = Vec::new();
        numbers(name, &table, false, &mut found);
        assert_eq!(found.len(), FIGURES.len(), "{name}: one number per figure");
        let bare: Vec<_> = found.iter().filter(|(_, sourced)| !sourced).map(|(p, _)| p).collect();
        assert!(bare.is_empty(), "{name}: figures without a source or assumption: {bare:?}");
        let chip = Chip::builtin(name).unwrap();
        assert_eq!(chip.provenance.len(), FIGURES.len());
    }
}

#[test]
fn sn50_carries_the_vendor_figures() {
    let chip = Chip::builtin("sn50").unwrap();
    assert_eq!((chip.name.as_str(), chip.origin.as_str()), ("sn50", "builtin:sn50"));
    assert_eq!((chip.pcus, chip.pmus), (2080, 2080));
    assert_eq!((chip.sram_bytes, chip.hbm_bytes, chip.ddr_bytes), (432_000_000, 64_000_000_000, 2_000_000_000_000));
    assert_eq!((chip.hbm_bandwidth, chip.peak_flops_bf16, chip.peak_flops_fp8), (1.8e12, 1.6e15, 3.2e15));
    assert_eq!(chip.pmu_sram_bytes, 432_000_000 / 2080);
    assert!((chip.pcu_flops_bf16 * 2080.0 / 1.6e15 - 1.0).abs() < 1e-9);
    for key in
        ["pcus", "pmus", "sram_bytes", "hbm_bytes", "hbm_bandwidth", "ddr_bytes", "peak_flops_bf16", "peak_flops_fp8"]
    {
        assert!(matches!(chip.provenance[key], Provenance::Source(_)), "{key} is a vendor figure");
    }
    let assumed = [
        "ddr_bandwidth",
        "clock",
        "pmu_sram_bytes",
        "pmu_bytes_per_cycle",
        "pcu_flops_bf16",
        "pcu_flops_fp8",
        "link_bandwidth",
        "link_latency",
        "reconfiguration",
        "pipeline_fill",
        "synchronisation",
    ];
    for key in assumed {
        assert!(matches!(chip.provenance[key], Provenance::Assumption(_)), "{key} is our assumption");
    }
}

#[test]
fn sn40l_carries_the_published_figures() {
    let chip = Chip::builtin("sn40l").unwrap();
    assert_eq!((chip.pcus, chip.pmus, chip.sram_bytes), (1040, 1040, 520_000_000));
    assert_eq!((chip.hbm_bytes, chip.hbm_bandwidth), (64_000_000_000, 1.6e12));
    assert_eq!((chip.ddr_bytes, chip.ddr_bandwidth, chip.peak_flops_bf16), (1_500_000_000_000, 1.0e11, 6.38e14));
    assert!(matches!(chip.provenance["peak_flops_fp8"], Provenance::Assumption(_)));
}

#[test]
fn resolve_takes_a_builtin_name_or_a_file() {
    assert_eq!(Chip::resolve("sn40l").unwrap(), Chip::builtin("sn40l").unwrap());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mychip.toml");
    std::fs::write(&path, sn50_with("pcus", "value", Some(1000.into())).replace("\"sn50\"", "\"mychip\"")).unwrap();
    let chip = Chip::resolve(path.to_str().unwrap()).unwrap();
    assert_eq!((chip.name.as_str(), chip.pcus, chip.pmus), ("mychip", 1000, 2080));
    assert_eq!(chip.origin, path.display().to_string());
    assert_eq!(Chip::from_file(&path).unwrap(), chip);

    let err = Chip::resolve("sn60").unwrap_err();
    assert_eq!(err.to_string(), "unknown chip `sn60`: neither a built-in chip (sn50, sn40l) nor a readable file");
    assert!(matches!(Chip::builtin("sn60"), Err(ChipError::Unknown { .. })));
    let err = Chip::from_file(&dir.path().join("absent.toml")).unwrap_err();
    assert!(err.to_string().starts_with("cannot read chip file ") && err.to_string().contains("absent.toml"), "{err}");
}

#[test]
fn a_figure_without_provenance_is_refused() {
    let mut table: toml::Table = Chip::builtin_text("sn50").unwrap().parse().unwrap();
    table["clock"].as_table_mut().unwrap().remove("assumption");
    let err = load(&toml::to_string(&table).unwrap()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "user.toml: `clock` has neither `source` nor `assumption`; say where the figure comes from"
    );
    let err = load(&sn50_with("pcus", "assumption", Some("a guess".into()))).unwrap_err();
    assert!(err.to_string().contains("`pcus` has both `source` and `assumption`"), "{err}");
    let err = load(&sn50_with("pcus", "source", Some("  ".into()))).unwrap_err();
    assert!(err.to_string().contains("`pcus` has neither"), "{err}");
}

#[test]
fn bad_values_are_refused_naming_the_key_and_the_file() {
    let cases: [(&str, &str, Option<toml::Value>, &str); 9] = [
        (
            "hbm_bandwidth",
            "value",
            Some((-1.0).into()),
            "user.toml: `hbm_bandwidth` must be positive and finite, found -1",
        ),
        (
            "synchronisation",
            "value",
            Some(0.0.into()),
            "user.toml: `synchronisation` must be positive and finite, found 0",
        ),
        ("pcus", "value", Some(10.5.into()), "user.toml: `pcus` must be a whole number, found 10.5"),
        ("pmus", "value", Some("many".into()), "user.toml: `pmus` `value` must be a number"),
        (
            "hbm_bandwidth",
            "unit",
            Some("TB/s".into()),
            "user.toml: `hbm_bandwidth` must have `unit = \"bytes/s\"`, found Some(\"TB/s\")",
        ),
        ("clock", "typo", Some(1.into()), "user.toml: `clock` has unknown field `typo`"),
        ("clock", "", None, "user.toml: missing `clock`; every chip file gives a `[clock]` table"),
        (
            "pcu_flops_bf16",
            "value",
            Some(1.0e12.into()),
            "user.toml: `pcu_flops_bf16` x 2080 units exceeds `peak_flops_bf16`",
        ),
        (
            "pmu_sram_bytes",
            "value",
            Some(300_000.into()),
            "user.toml: `pmu_sram_bytes` x 2080 units exceeds `sram_bytes`",
        ),
    ];
    for (key, field, value, message) in cases {
        let err = load(&sn50_with(key, field, value)).unwrap_err();
        assert!(err.to_string().starts_with(message), "{key}.{field}: got `{err}`, expected `{message}...`");
    }
}

#[test]
fn malformed_files_are_refused() {
    let err = load("name = \"x\"\n[pcus\nvalue = 1").unwrap_err();
    assert!(matches!(err, ChipError::Parse { .. }) && err.to_string().starts_with("user.toml: not valid TOML:"));
    assert!(!err.to_string().contains('\n'), "one line: {err}");
    let text = format!(
        "{}\n[hbm_bandwith]\nvalue = 1\nunit = \"bytes/s\"\nsource = \"typo\"\n",
        Chip::builtin_text("sn50").unwrap()
    );
    let err = load(&text).unwrap_err();
    assert!(
        err.to_string().starts_with("user.toml: unknown key `hbm_bandwith`; known figures are pcus, pmus"),
        "{err}"
    );
    let text = Chip::builtin_text("sn50").unwrap().replace("name = \"sn50\"", "");
    assert_eq!(load(&text).unwrap_err().to_string().split(';').next().unwrap(), "user.toml: missing `name`");
    let mut table: toml::Table = Chip::builtin_text("sn50").unwrap().parse().unwrap();
    table.insert("pcus".into(), 2080.into());
    let err = load(&toml::to_string(&table).unwrap()).unwrap_err();
    assert_eq!(err.to_string(), "user.toml: `pcus` must be a table `{ value, unit, source | assumption }`");
}
