//! The cost model: stage bounds, pipeline fill, reconfiguration, link charges, the roofline, and every time figure of the chip file charged.

use rdu_spatial::chip::{Chip, FIGURES};
use rdu_spatial::cost::{estimate, Bound, CostError, CostInput, Precision, StageWork, StepCost};

fn sn50() -> Chip {
    Chip::builtin("sn50").unwrap()
}

fn work(name: &str) -> StageWork {
    StageWork { name: name.into(), pcus: 1, pmus: 1, tiles: 1, ..StageWork::default() }
}

fn one(stages: Vec<StageWork>) -> CostInput {
    CostInput { sections: vec![stages] }
}

fn run(chip: &Chip, input: &CostInput) -> StepCost {
    estimate(chip, input, Precision::Bf16).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

#[test]
fn a_stage_is_bound_by_its_slowest_resource() {
    let chip = sn50();
    let compute = StageWork { flops: 1_000_000_000_000, hbm_bytes: 1_000_000, pcus: 100, ..work("matmul") };
    let cost = run(&chip, &one(vec![compute.clone()]));
    let stage = &cost.sections[0].stages[0];
    assert_eq!(stage.bound, Bound::Compute);
    assert!(close(stage.seconds, 1e12 / (100.0 * chip.pcu_flops_bf16)));
    let doubled = run(&chip, &one(vec![StageWork { pcus: 200, ..compute }]));
    assert!(close(doubled.sections[0].stages[0].seconds, stage.seconds / 2.0), "twice the PCUs, half the time");

    let streaming = StageWork { flops: 1_000_000, hbm_bytes: 1_800_000_000, pcus: 100, ..work("gemv") };
    let cost = run(&chip, &one(vec![streaming.clone()]));
    let stage = &cost.sections[0].stages[0];
    assert_eq!((stage.bound, cost.sections[0].bound), (Bound::Hbm, Bound::Hbm));
    assert!(close(stage.seconds, 1e-3));
    let more_units = run(&chip, &one(vec![StageWork { pcus: 200, ..streaming }]));
    assert_eq!(more_units.sections[0].stages[0].seconds, stage.seconds, "PCUs do not speed up an HBM-bound stage");

    let cases = [
        (StageWork { ddr_bytes: 200_000_000, ..work("ddr") }, Bound::Ddr, 1e-3),
        (StageWork { sram_bytes: 102_400_000, ..work("sram") }, Bound::Sram, 1e-3),
        (StageWork { link_bytes: 200_000_000, ..work("all_reduce") }, Bound::Link, 1e-3),
    ];
    for (w, bound, seconds) in cases {
        let stage = run(&chip, &one(vec![w])).sections[0].stages[0].clone();
        assert_eq!(stage.bound, bound);
        assert!(close(stage.seconds, seconds), "{bound:?}: {}", stage.seconds);
    }
}

#[test]
fn a_section_is_its_slowest_stage_plus_the_fill_of_the_others_plus_a_barrier() {
    let chip = sn50();
    let slow = StageWork { hbm_bytes: 1_800_000_000, ..work("slow") };
    let fast = StageWork { flops: 384_615_385, tiles: 4, ..work("fast") };
    let section = run(&chip, &one(vec![fast.clone(), slow.clone()])).sections[0].clone();
    assert_eq!(section.slowest, 1);
    let per_stage = chip.pipeline_fill_cycles / chip.clock_hz;
    let t_fast = section.stages[0].seconds;
    assert!(close(section.steady_seconds, 1e-3));
    assert!(
        close(section.fill_seconds, t_fast / 4.0 + 2.0 * per_stage),
        "every stage fills; the others' first tiles too"
    );
    assert!(close(section.seconds, 1e-3 + t_fast / 4.0 + 2.0 * per_stage + chip.synchronisation));
    let finer = run(&chip, &one(vec![StageWork { tiles: 8, ..fast }, slow])).sections[0].clone();
    assert!(close(section.fill_seconds - finer.fill_seconds, t_fast / 8.0), "smaller tiles fill sooner");
}

/// Stages on parallel branches fill side by side: the section pays the longest path of first
/// tiles through the stages it reads from (`after`), and the all-reduce latency on that path
/// only. Unset `after` is a chain, every stage's fill summed; a stage may only wait for an
/// earlier one.
#[test]
fn a_section_fills_along_its_longest_path() {
    let chip = sn50();
    let per_stage = chip.pipeline_fill_cycles / chip.clock_hz;
    let slow = StageWork { hbm_bytes: 1_800_000_000, ..work("slow") };
    // 0.5 µs of compute in four tiles: a first tile of 0.125 µs, well under an all-reduce.
    let light =
        |name: &str, after: Vec<usize>| StageWork { flops: 384_615, tiles: 4, after: Some(after), ..work(name) };
    // 0 → {1, 2 → 3}: branch 1 is one stage long, branch 2 → 3 two; 4 joins both.
    let stages = vec![
        StageWork { after: Some(vec![]), ..slow.clone() },
        light("short", vec![0]),
        light("long_a", vec![0]),
        StageWork { link_bytes: 1_000, ..light("long_b", vec![2]) },
        light("join", vec![1, 3]),
    ];
    let dag = run(&chip, &one(stages.clone())).sections[0].clone();
    let fill = |i: usize| dag.stages[i].fill_seconds;
    assert!(fill(1) > 0.0 && close(fill(1), fill(2)));
    let longest = fill(0) + fill(2) + fill(3) + fill(4);
    assert!(close(dag.fill_seconds, longest), "{} != {longest}", dag.fill_seconds);
    assert!(close(dag.latency_seconds, chip.link_latency), "the all-reduce is on the longest path");
    assert!(close(fill(3) - fill(2), chip.link_latency));
    // The same stages as a chain pay every fill.
    let chain: Vec<StageWork> = stages.iter().map(|w| StageWork { after: None, ..w.clone() }).collect();
    let chained = run(&chip, &one(chain)).sections[0].clone();
    let every: f64 = chained.stages.iter().map(|s| s.fill_seconds).sum();
    assert!(close(chained.fill_seconds, every) && chained.fill_seconds > dag.fill_seconds + 0.9 * per_stage);
    // An all-reduce off the longest path is not paid: move it onto the short branch.
    let mut off = stages.clone();
    off[3].link_bytes = 0;
    off[1].link_bytes = 1_000;
    let off = run(&chip, &one(off)).sections[0].clone();
    assert!(close(off.latency_seconds, chip.link_latency), "the short branch is now the longest");
    let mut none = stages.clone();
    none[3].link_bytes = 0;
    let none = run(&chip, &one(none)).sections[0].clone();
    assert_eq!(none.latency_seconds, 0.0);
    // Waiting for itself or a later stage is refused.
    let mut bad = stages;
    bad[2].after = Some(vec![3]);
    let err = estimate(&chip, &one(bad), Precision::Bf16).unwrap_err();
    assert_eq!(err, CostError::StageOrder { section: 0, stage: "long_a".into(), after: 3 });
}

#[test]
fn stages_of_a_section_share_the_hbm_bandwidth() {
    let chip = sn50();
    let half = StageWork { hbm_bytes: 900_000_000, tiles: 100, ..work("half") };
    let cost = run(&chip, &one(vec![half.clone(), StageWork { name: "other".into(), ..half }]));
    let section = &cost.sections[0];
    assert!(close(section.stages[0].seconds, 0.5e-3));
    assert!(close(section.steady_seconds, 1e-3), "1.8 GB through one 1.8 TB/s HBM takes 1 ms");
    assert_eq!(section.bound, Bound::Hbm);
    assert!(close(cost.roofline_seconds, 1e-3));
    assert!(cost.roofline_fraction < 1.0 && cost.roofline_fraction > 0.99, "{}", cost.roofline_fraction);
}

#[test]
fn every_section_switch_is_charged() {
    let chip = sn50();
    let a = StageWork { hbm_bytes: 1_000_000, ..work("a") };
    let b = StageWork { hbm_bytes: 2_000_000, ..work("b") };
    let resident = run(&chip, &one(vec![a.clone()]));
    assert_eq!((resident.reconfigurations, resident.reconfiguration_seconds), (0, 0.0));
    let split = run(&chip, &CostInput { sections: vec![vec![a], vec![b]] });
    assert_eq!(split.reconfigurations, 2, "each section is reloaded once per step");
    assert!(close(split.reconfiguration_seconds, 2.0 * chip.reconfiguration));
    let sections: f64 = split.sections.iter().map(|s| s.seconds).sum();
    assert!(close(split.seconds, sections + 2.0 * chip.reconfiguration));
    assert_eq!((split.hbm_bytes, split.sections.len()), (3_000_000, 2));
}

#[test]
fn all_reduce_traffic_is_charged_bandwidth_and_latency() {
    let chip = sn50();
    let plain = StageWork { flops: 1_000_000_000, pcus: 8, ..work("o_proj") };
    let reduced = StageWork { link_bytes: 1_000_000, ..plain.clone() };
    let (a, b) = (run(&chip, &one(vec![plain])), run(&chip, &one(vec![reduced])));
    let stage = &b.sections[0].stages[0];
    assert!(close(stage.link_seconds, 1e6 / chip.link_bandwidth));
    assert!(close(b.sections[0].fill_seconds - a.sections[0].fill_seconds, chip.link_latency));
    assert!(b.seconds > a.seconds + chip.link_latency * 0.999);
    assert_eq!(b.link_bytes, 1_000_000);
}

#[test]
fn the_roofline_fraction_never_exceeds_one() {
    let chip = sn50();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |max: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % max
    };
    for _ in 0..300 {
        let sections = (0..1 + next(3))
            .map(|s| {
                (0..1 + next(4))
                    .map(|i| StageWork {
                        name: format!("s{s}_{i}"),
                        flops: next(1 << 40),
                        hbm_bytes: next(1 << 32),
                        ddr_bytes: next(1 << 24),
                        sram_bytes: next(1 << 30),
                        link_bytes: next(1 << 24),
                        pcus: 1 + next(400) as u32,
                        pmus: 1 + next(400) as u32,
                        tiles: 1 + next(64) as u32,
                        hops: next(8) as u32,
                        // A chain, or any earlier stages of the section.
                        after: (next(2) == 1).then(|| (0..i as usize).filter(|_| next(2) == 1).collect()),
                    })
                    .collect()
            })
            .collect();
        let cost = run(&chip, &CostInput { sections });
        assert!(cost.roofline_fraction <= 1.0 && cost.roofline_fraction >= 0.0, "{}", cost.roofline_fraction);
        assert!(cost.roofline_seconds <= cost.seconds);
    }
}

#[test]
fn fp8_doubles_sn50_compute_throughput() {
    let chip = sn50();
    let input = one(vec![StageWork { flops: 1 << 40, pcus: 64, ..work("matmul") }]);
    let bf16 = estimate(&chip, &input, Precision::Bf16).unwrap();
    let fp8 = estimate(&chip, &input, Precision::Fp8).unwrap();
    let (a, b) = (bf16.sections[0].stages[0].compute_seconds, fp8.sections[0].stages[0].compute_seconds);
    assert!(close(a, 2.0 * b));
    assert_eq!(fp8.precision, Precision::Fp8);
    assert!(close(bf16.tokens_per_second(8), 8.0 / bf16.seconds));
}

/// The chip with figure `key` halved, through its TOML file.
fn halved(key: &str) -> Chip {
    let mut table: toml::Table = Chip::builtin_text("sn50").unwrap().parse().unwrap();
    let value = &mut table[key]["value"];
    *value = match value {
        toml::Value::Integer(i) if *i > 1 => (*i / 2).into(),
        toml::Value::Integer(i) => (*i as f64 / 2.0).into(),
        toml::Value::Float(f) => (*f / 2.0).into(),
        other => panic!("{key}: {other:?}"),
    };
    Chip::from_toml_str(&toml::to_string(&table).unwrap(), "halved.toml").unwrap()
}

#[test]
fn every_time_figure_of_the_chip_file_changes_the_estimate() {
    let small = || work("small");
    let cases: Vec<(&str, CostInput, Precision)> = vec![
        ("hbm_bandwidth", one(vec![StageWork { hbm_bytes: 1 << 30, ..small() }]), Precision::Bf16),
        ("ddr_bandwidth", one(vec![StageWork { ddr_bytes: 1 << 30, ..small() }]), Precision::Bf16),
        ("pcu_flops_bf16", one(vec![StageWork { flops: 1 << 40, ..small() }]), Precision::Bf16),
        ("pcu_flops_fp8", one(vec![StageWork { flops: 1 << 40, ..small() }]), Precision::Fp8),
        ("pmu_bytes_per_cycle", one(vec![StageWork { sram_bytes: 1 << 30, ..small() }]), Precision::Bf16),
        ("clock", one(vec![small()]), Precision::Bf16),
        ("link_bandwidth", one(vec![StageWork { link_bytes: 1 << 30, ..small() }]), Precision::Bf16),
        ("link_latency", one(vec![StageWork { link_bytes: 1, ..small() }]), Precision::Bf16),
        ("reconfiguration", CostInput { sections: vec![vec![small()], vec![small()]] }, Precision::Bf16),
        ("pipeline_fill", one(vec![small()]), Precision::Bf16),
        ("synchronisation", one(vec![small()]), Precision::Bf16),
        ("hop", one(vec![StageWork { hops: 3, ..small() }]), Precision::Bf16),
    ];
    let chip = sn50();
    for (key, input, precision) in &cases {
        let before = estimate(&chip, input, *precision).unwrap().seconds;
        let after = estimate(&halved(key), input, *precision).unwrap().seconds;
        assert!(before != after, "halving `{key}` left the estimate at {before}");
    }
    // What is left are capacities (checked, not timed; the mesh's shape places stages, whose
    // hops are the work's), and the peaks the per-unit rates are derived from.
    let capacities = [
        "pcus",
        "pmus",
        "sram_bytes",
        "hbm_bytes",
        "ddr_bytes",
        "pmu_sram_bytes",
        "peak_flops_bf16",
        "peak_flops_fp8",
        "mesh_rows",
        "mesh_cols",
    ];
    let mut untimed: Vec<&str> =
        FIGURES.iter().map(|(k, _)| *k).filter(|k| !cases.iter().any(|(c, _, _)| c == k)).collect();
    untimed.sort();
    let mut capacities = capacities.to_vec();
    capacities.sort();
    assert_eq!(untimed, capacities);
}

#[test]
fn work_the_chip_cannot_run_is_refused() {
    let chip = sn50();
    let refuse = |input: CostInput| estimate(&chip, &input, Precision::Bf16).unwrap_err();
    assert_eq!(refuse(CostInput::default()), CostError::NoSections);
    assert_eq!(refuse(CostInput { sections: vec![vec![work("a")], vec![]] }), CostError::EmptySection { section: 1 });
    let err = refuse(one(vec![StageWork { flops: 10, pcus: 0, ..work("mm") }]));
    assert_eq!(err.to_string(), "section 0 stage `mm` has FLOPs but no PCUs to do it; give it at least one");
    let err = refuse(one(vec![StageWork { sram_bytes: 10, pmus: 0, ..work("buf") }]));
    assert!(matches!(err, CostError::NoUnits { unit: "PMU", .. }));
    assert!(matches!(refuse(one(vec![StageWork { tiles: 0, ..work("t") }])), CostError::NoTiles { .. }));
    let err = refuse(one(vec![StageWork { pcus: 2000, ..work("a") }, StageWork { pcus: 100, ..work("b") }]));
    assert_eq!(err.to_string(), "section 0 uses 2100 PCUs but the chip has 2080; split it into more sections");
}

/// Reproducible draws: the seeded weights' own counter-based stream (`seeded::uniform_at`).
struct Draws(usize);

impl Draws {
    /// A whole number below `n`.
    fn below(&mut self, n: u64) -> u64 {
        self.0 += 1;
        let u = (rdu_spatial::seeded::uniform_at(0x5eed, self.0) + 1.0) / 2.0;
        ((u * n as f32) as u64).min(n - 1)
    }
}

/// A section of `n` stages drawn from a few shapes of work (so that stages tie for the
/// slowest), on 1..40 PCUs each, waiting for the stage before (a chain) or for a few earlier ones.
fn drawn_section(d: &mut Draws, n: usize) -> Vec<StageWork> {
    let shapes: Vec<StageWork> = (0..3)
        .map(|_| StageWork {
            flops: d.below(4) * 1_000_000_000 * (1 + d.below(1000)),
            hbm_bytes: d.below(3) * 1_000_000 * (1 + d.below(100)),
            ddr_bytes: d.below(2) * 1_000_000,
            sram_bytes: d.below(3) * 1_000_000 * (1 + d.below(100)),
            link_bytes: d.below(2) * 1_000_000,
            pmus: 1 + d.below(8) as u32,
            tiles: 1 + d.below(16) as u32,
            ..StageWork::default()
        })
        .collect();
    let chain = d.below(2) == 0;
    (0..n)
        .map(|i| StageWork {
            pcus: 1 + d.below(40) as u32,
            hops: d.below(12) as u32,
            after: (!chain).then(|| {
                let mut after: Vec<usize> = (0..i).filter(|_| d.below(4) == 0).collect();
                after.extend(i.checked_sub(1));
                after.dedup();
                after
            }),
            ..shapes[d.below(3) as usize].clone()
        })
        .collect()
}

/// The `Retimer` gives a section placed otherwise in a stage or two, and in the hops from the
/// first changed stage on, exactly `estimate`'s seconds — to the bit, refusals included — on
/// thousands of drawn sections and trials (stages tying for the slowest, a changed stage that
/// was or becomes the slowest, a chip too small, a stage left without PCUs), and times again
/// only the stages from the first one whose fill can change.
#[test]
fn a_retimed_trial_is_the_estimate_to_the_bit() {
    let chip = sn50();
    let mut d = Draws(11);
    for _ in 0..300 {
        let n = 2 + d.below(40) as usize;
        let base = drawn_section(&mut d, n);
        let mut retimer = rdu_spatial::cost::Retimer::new(&chip, base.clone(), Precision::Bf16).expect("a base");
        let total: u32 = base.iter().map(|w| w.pcus).sum();
        for _ in 0..20 {
            let mut changed: Vec<(usize, u32)> = vec![(d.below(n as u64) as usize, d.below(60) as u32)];
            let other = d.below(n as u64) as usize;
            if d.below(2) == 0 && other != changed[0].0 {
                changed.push((other, d.below(60) as u32));
            }
            let first = changed.iter().map(|c| c.0).min().unwrap();
            let hops: Vec<u32> =
                (0..n).map(|i| if i < first || d.below(3) == 0 { base[i].hops } else { d.below(12) as u32 }).collect();
            let available = if d.below(4) == 0 { total } else { chip.pcus };
            let mut trial = base.clone();
            for &(c, p) in &changed {
                trial[c].pcus = p;
            }
            for (w, &h) in trial.iter_mut().zip(&hops) {
                w.hops = h;
            }
            let small = rdu_spatial::chip::Chip { pcus: available, ..chip.clone() };
            let want = estimate(&small, &one(trial), Precision::Bf16).ok().map(|c| c.seconds.to_bits());
            let got = retimer.seconds(available, &changed, |i| hops[i]).map(f64::to_bits);
            assert_eq!(got, want, "{changed:?} of {n} stages");
        }
    }
}

/// A trial is timed again from its first changed stage on, not whole: on a chain of 1,000
/// stages (a batched program's section), a block more for stage k times 1,000 - k stages, so
/// trying it for every stage costs n(n+1)/2 stage timings — where each trial timed whole cost
/// n each, n² in all (placement's refinement makes such a look each move).
#[test]
fn a_trial_is_timed_again_from_its_first_change_on() {
    let chip = sn50();
    let n = 1000;
    let stage = |i: usize| StageWork {
        flops: if i == 0 { 1_000_000_000_000 } else { 1_000_000 },
        pcus: 2,
        hops: u32::from(i > 0),
        ..work("s")
    };
    let base: Vec<StageWork> = (0..n).map(stage).collect();
    let mut retimer = rdu_spatial::cost::Retimer::new(&chip, base.clone(), Precision::Bf16).expect("a base");
    for k in [1, 500, 999] {
        let before = retimer.retimed;
        let t = retimer.seconds(chip.pcus, &[(k, 10)], |i| base[i].hops).expect("a time");
        assert_eq!(retimer.retimed - before, (n - k) as u64, "stage {k}");
        let mut trial = base.clone();
        trial[k].pcus = 10;
        assert_eq!(t.to_bits(), run(&chip, &one(trial)).seconds.to_bits());
    }
    let before = retimer.retimed;
    for k in 0..n {
        retimer.seconds(chip.pcus, &[(k, 10)], |i| base[i].hops);
    }
    // Stage 0, the slowest, stays so on more PCUs: n stages timed again for it.
    assert_eq!(retimer.retimed - before, (n * (n + 1) / 2) as u64);
}
