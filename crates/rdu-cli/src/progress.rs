//! Progress on stderr while a command lowers (`rdu lower`, and `rdu run` when it lowers its
//! bundles): which program of how many, its pass or certification, and the time so far,
//! ticking while a large kind certifies. Drawn only when stderr is a terminal (indicatif
//! hides it otherwise), never with `--json`; cleared when the lowering ends.

use indicatif::{ProgressBar, ProgressStyle};
use rdu_compiler::deploy::Progress;
use rdu_compiler::lower::PASSES;
use std::time::Duration;

/// The bar of one lowering, cleared from the terminal when dropped.
pub struct LoweringBar(ProgressBar);

impl Drop for LoweringBar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// A bar for one lowering; `hidden` (for `--json`) draws nothing.
pub fn lowering_bar(hidden: bool) -> LoweringBar {
    let bar = if hidden { ProgressBar::hidden() } else { ProgressBar::new(0) };
    if let Ok(style) = ProgressStyle::with_template("{spinner} lowering {pos}/{len} {msg} [{elapsed}]") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    LoweringBar(bar)
}

/// Shows `p` on `bar`: the program starting, then each pass, then its certification.
pub fn show(LoweringBar(bar): &LoweringBar, p: &Progress<'_>) {
    match p {
        Progress::Program { index, total, name } => {
            bar.set_length(*total as u64);
            bar.set_position(*index as u64);
            bar.set_message(name.to_string());
        }
        Progress::Pass { program, pass, .. } if Some(pass) == PASSES.last() => {
            bar.set_message(format!("{program}: certifying"));
        }
        Progress::Pass { program, pass, .. } => bar.set_message(format!("{program}: {pass}")),
    }
}
