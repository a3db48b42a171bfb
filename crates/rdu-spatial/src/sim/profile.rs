//! Where the simulator's time goes, op by op (`rdu run --profile`, `rdu serve --profile`): off
//! until [`enable`]d; then each op's wall time is added to its entry, the op and the shape of
//! its first output (`linear [16, 262144]`: Gemma 3's head over a 16-row batched step), until
//! [`take`] hands the entries over. Ops that run at once (a wave's independent ops, a
//! tensor-parallel program's chips) each add their own time, so the entries can sum to more
//! than the wall time that passed. Nothing it records changes a value.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

static ON: AtomicBool = AtomicBool::new(false);

/// (op, output shape) → (calls, seconds).
type Entries = BTreeMap<(&'static str, Vec<usize>), (u64, f64)>;

static ENTRIES: Mutex<Entries> = Mutex::new(BTreeMap::new());

/// One op and output shape's time.
#[derive(Clone, Debug, PartialEq)]
pub struct OpTime {
    pub op: &'static str,
    pub shape: Vec<usize>,
    pub calls: u64,
    pub secs: f64,
}

/// Starts recording, for the rest of the process.
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// Whether ops are being timed.
pub(super) fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Adds one call of `op` (first output `shape`) that took `secs`.
pub(super) fn record(op: &'static str, shape: &[usize], secs: f64) {
    let mut entries = ENTRIES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let entry = entries.entry((op, shape.to_vec())).or_insert((0, 0.0));
    entry.0 += 1;
    entry.1 += secs;
}

/// Every entry recorded since the last call, the longest total first.
pub fn take() -> Vec<OpTime> {
    let entries = std::mem::take(&mut *ENTRIES.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
    let mut out: Vec<OpTime> =
        entries.into_iter().map(|((op, shape), (calls, secs))| OpTime { op, shape, calls, secs }).collect();
    out.sort_by(|a, b| b.secs.total_cmp(&a.secs).then_with(|| (a.op, &a.shape).cmp(&(b.op, &b.shape))));
    out
}

/// `entries` as a table: op, output shape, calls, total milliseconds, milliseconds a call and
/// share of the whole; the first `rows` entries, then one line for the rest.
pub fn table(entries: &[OpTime], rows: usize) -> String {
    let total: f64 = entries.iter().map(|e| e.secs).sum();
    let share = |s: f64| if total > 0.0 { 100.0 * s / total } else { 0.0 };
    let mut out =
        format!("{:<16} {:<22} {:>9} {:>11} {:>10} {:>6}\n", "op", "output", "calls", "total ms", "ms/call", "share");
    for e in entries.iter().take(rows) {
        let shape = format!("{:?}", e.shape);
        let per = 1e3 * e.secs / e.calls.max(1) as f64;
        let _ = writeln!(
            out,
            "{:<16} {:<22} {:>9} {:>11.1} {:>10.3} {:>5.1}%",
            e.op,
            shape,
            e.calls,
            1e3 * e.secs,
            per,
            share(e.secs)
        );
    }
    if entries.len() > rows {
        let rest = &entries[rows..];
        let secs: f64 = rest.iter().map(|e| e.secs).sum();
        let calls: u64 = rest.iter().map(|e| e.calls).sum();
        let label = format!("({} more)", rest.len());
        let _ = writeln!(
            out,
            "{:<16} {:<22} {:>9} {:>11.1} {:>10} {:>5.1}%",
            label,
            "",
            calls,
            1e3 * secs,
            "",
            share(secs)
        );
    }
    let _ = write!(
        out,
        "{:<16} {:<22} {:>9} {:>11.1}",
        "total",
        "",
        entries.iter().map(|e| e.calls).sum::<u64>(),
        1e3 * total
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls of one op and shape add up; entries come out longest first and are gone after;
    /// the table shows each row, folds the rest into one and totals them.
    #[test]
    fn times_add_up_by_op_and_shape() {
        // Only this test's ops count (no program has them); nothing else records while
        // profiling is off.
        let _ = take();
        record("test_op_a", &[16, 640], 0.002);
        record("test_op_a", &[16, 640], 0.003);
        record("test_op_a", &[1, 640], 0.0015);
        record("test_op_b", &[4], 0.010);
        let mine: Vec<OpTime> = take().into_iter().filter(|e| e.op.starts_with("test_op_")).collect();
        let want = [
            ("test_op_b", vec![4], 1, 0.010),
            ("test_op_a", vec![16, 640], 2, 0.005),
            ("test_op_a", vec![1, 640], 1, 0.0015),
        ];
        assert_eq!(mine.len(), want.len(), "{mine:?}");
        for (e, (op, shape, calls, secs)) in mine.iter().zip(want) {
            assert_eq!((e.op, &e.shape, e.calls), (op, &shape, calls));
            assert!((e.secs - secs).abs() < 1e-12, "{e:?}");
        }
        assert!(take().iter().all(|e| !e.op.starts_with("test_op_")), "taken entries are gone");
        let text = table(&mine, 2);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert!(lines[1].starts_with("test_op_b") && lines[1].contains("[4]") && lines[1].contains("10.0"), "{text}");
        assert!(lines[2].contains("[16, 640]") && lines[2].contains("2.500"), "{text}");
        assert!(lines[3].starts_with("(1 more)") && lines[3].contains("9.1%"), "{text}");
        assert!(lines[4].starts_with("total") && lines[4].contains("16.5"), "{text}");
    }
}
