//! `rdu report`: the page of a tiny preset's bundle in every cut and of a real preset's, checked
//! structurally (every SVG parses as XML, one region per stage, one cell per layer) and in a
//! real browser (headless Chromium: loads without console errors, the screenshot is not blank,
//! the rendered chip maps hold one region per stage).

use std::path::{Path, PathBuf};
use std::process::Command;

fn rdu(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rdu")).args(args).output().expect("rdu runs")
}

fn ok(args: &[&str]) {
    let out = rdu(args);
    assert!(out.status.success(), "rdu {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// Lower `model` with `flags` into `dir/bundle` and write its report; the bundle dir and page.
fn report(dir: &Path, model: &str, flags: &[&str]) -> (PathBuf, String) {
    let bundle = dir.join("bundle");
    let page = dir.join("report.html");
    let mut args = vec!["lower", model, "-o", bundle.to_str().unwrap()];
    args.extend_from_slice(flags);
    ok(&args);
    ok(&["report", bundle.to_str().unwrap(), "-o", page.to_str().unwrap()]);
    (bundle, std::fs::read_to_string(&page).expect("page written"))
}

/// Stages of every program of the bundle, and its layer count.
fn stages_and_layers(bundle: &Path) -> (usize, usize) {
    let b = rdu_spatial::bundle::Bundle::open(bundle).expect("bundle");
    let mut stages = 0;
    for (path, text) in &b.files {
        if path.ends_with(".spatial") {
            let p = rdu_spatial::text::parse(text).expect("spatial");
            stages += p.sections.iter().map(|s| s.stages.len()).sum::<usize>();
        }
    }
    (stages, b.manifest.layers.len())
}

/// Every `<svg>…</svg>` of the page parses as XML; the number of elements of each class.
fn svg_counts(page: &str) -> (usize, usize, usize) {
    let (mut regions, mut layers, mut svgs) = (0, 0, 0);
    let mut rest = page;
    while let Some(start) = rest.find("<svg") {
        let end = rest[start..].find("</svg>").expect("svg closes") + start + "</svg>".len();
        let doc = roxmltree::Document::parse(&rest[start..end]).unwrap_or_else(|e| panic!("svg is not XML: {e}"));
        for node in doc.descendants() {
            match node.attribute("class") {
                Some("region") => regions += 1,
                Some("layer") => layers += 1,
                _ => {}
            }
        }
        svgs += 1;
        rest = &rest[end..];
    }
    (regions, layers, svgs)
}

fn check_structure(bundle: &Path, page: &str) {
    let (stages, layers) = stages_and_layers(bundle);
    let (regions, cells, svgs) = svg_counts(page);
    assert!(svgs > 0);
    assert_eq!(regions, stages, "one chip-map region per stage");
    assert_eq!(cells, layers, "one strip cell per layer");
    assert!(!page.contains("src=\"http") && !page.contains("href=\"http"), "the page fetches nothing");
    assert!(!page.contains("<script"), "the page needs no script");
    assert!(!page.contains("<link"), "the page loads nothing");
}

fn chromium() -> PathBuf {
    let path = PathBuf::from(std::env::var("RDU_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()));
    assert!(
        path.exists(),
        "{} not found: the browser test needs Debian's chromium (`bash scripts/test-deps` installs it)",
        path.display()
    );
    path
}

/// Run headless Chromium on `page` with the flags this closed network needs.
fn browse(dir: &Path, page: &Path, extra: &[&str]) -> std::process::Output {
    let profile = dir.join("profile");
    let url = format!("file://{}", page.display());
    let mut args = vec![
        "--headless".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-dev-shm-usage".into(),
        "--disable-quic".into(),
        "--no-first-run".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        "--enable-logging=stderr".into(),
        "--v=0".into(),
        format!("--user-data-dir={}", profile.display()),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push(url);
    Command::new(chromium()).args(&args).output().expect("chromium runs")
}

fn check_in_browser(dir: &Path, bundle: &Path) {
    let page = dir.join("report.html");
    let (stages, _) = stages_and_layers(bundle);
    let dom = browse(dir, &page, &["--dump-dom"]);
    assert!(dom.status.success(), "chromium --dump-dom failed: {}", String::from_utf8_lossy(&dom.stderr));
    let dom_text = String::from_utf8_lossy(&dom.stdout);
    assert_eq!(dom_text.matches("class=\"region\"").count(), stages, "rendered chip maps: one region per stage");
    let stderr = String::from_utf8_lossy(&dom.stderr);
    let console: Vec<&str> = stderr.lines().filter(|l| l.contains("CONSOLE") || l.contains("Uncaught")).collect();
    assert!(console.is_empty(), "console messages: {console:?}");
    let shot = dir.join("shot.png");
    let out = browse(dir, &page, &[&format!("--screenshot={}", shot.display()), "--window-size=1280,1600"]);
    assert!(out.status.success(), "chromium --screenshot failed: {}", String::from_utf8_lossy(&out.stderr));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).expect("screenshot")));
    let mut reader = decoder.read_info().expect("png");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("frame");
    let pixels = &buf[..info.buffer_size()];
    let step = info.color_type.samples();
    let first = &pixels[..step];
    let differing = pixels.chunks(step).filter(|p| p != &first).count();
    assert!(differing * 20 > pixels.len() / step, "the screenshot is (almost) blank: {differing} differing pixels");
}

#[test]
fn tiny_preset_report_in_every_cut() {
    let cuts: [&[&str]; 6] = [
        &["--cut", "forward", "--seq", "5"],
        &["--cut", "decode", "--ctx", "64"],
        &["--cut", "batched", "--batch", "2", "--ctx", "64"],
        &["--cut", "tp", "--tp", "2", "--ctx", "64", "--storage", "dense"],
        &["--cut", "batched-tp", "--batch", "2", "--tp", "2", "--ctx", "64", "--storage", "dense"],
        &["--cut", "prefill", "--chunk", "4", "--ctx", "64"],
    ];
    for flags in cuts {
        let dir = tempfile::tempdir().expect("tempdir");
        let (bundle, page) = report(dir.path(), "tiny-qwen3-next", flags);
        check_structure(&bundle, &page);
        if flags[1] == "tp" {
            assert!(page.contains("One chip's share"), "a tp report shows one chip's share");
        }
        if flags[1] == "decode" {
            check_in_browser(dir.path(), &bundle);
        }
    }
}

#[test]
fn real_preset_report_in_a_browser() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (bundle, page) = report(dir.path(), "gemma-3-270m", &[]);
    check_structure(&bundle, &page);
    assert!(page.contains("18 in 2 kinds"), "gemma-3-270m: 18 layers in 2 kinds");
    check_in_browser(dir.path(), &bundle);
}

#[test]
fn report_refuses_a_non_bundle() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = rdu(&["report", dir.path().to_str().unwrap(), "-o", dir.path().join("r.html").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains("cannot open bundle"), "{err}");
    assert!(!dir.path().join("r.html").exists(), "nothing written");
}

/// The `data-seconds` of the first element of class `class` on the page.
fn seconds_of(page: &str, class: &str) -> f64 {
    let at = page.find(&format!("class=\"{class}\" data-seconds=\"")).unwrap_or_else(|| panic!("no {class}"));
    let rest = &page[at..];
    let start = rest.find("data-seconds=\"").unwrap() + "data-seconds=\"".len();
    let end = start + rest[start..].find('"').unwrap();
    rest[start..end].parse().unwrap_or_else(|e| panic!("{class}: {e}"))
}

/// The report's step is the one `rdu lower` estimates: the manifest's schedule (kernel looping's
/// loops and prefetch overlap, reconfigurations between resident sets) costed by the same
/// function, and its breakdown adds up to it. On a multi-kind preset, one chip and two.
#[test]
fn report_step_is_the_lowerings_estimate() {
    for flags in [
        &["--ctx", "64"][..],
        &["--cut", "batched", "--batch", "3", "--ctx", "64"],
        &["--cut", "tp", "--tp", "2", "--ctx", "64", "--storage", "dense"],
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_, page) = report(dir.path(), "tiny-qwen3-next", flags);
        let mut args = vec!["lower", "tiny-qwen3-next", "--json"];
        args.extend_from_slice(flags);
        let out = rdu(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let lowered: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let want = lowered["step"]["seconds"].as_f64().expect("seconds");
        assert!(lowered["step"]["loops"].as_u64().unwrap() >= 1);
        assert_eq!(seconds_of(&page, "step"), want, "{flags:?}: the report's step is rdu lower's, exactly");
        let total = seconds_of(&page, "step-total");
        assert!(
            ((total - want) / want).abs() < 1e-12,
            "{flags:?}: the breakdown adds up to the step: {total} vs {want}"
        );
        let serial = lowered["step"]["serial_seconds"].as_f64().unwrap();
        assert!(serial > want, "{flags:?}: the unlooped step ({serial}) is slower, so the count is not the serial one");
    }
}
