//! The ops of the language: the op table's (`rdu_spatial::op`: name, operands, outputs,
//! attribute keys) less the ones lowering inserts.

use rdu_spatial::Op;

/// The language's op named `name`, if there is one.
pub(super) fn language_op(name: &str) -> Option<Op> {
    name.parse().ok().filter(|op: &Op| op.in_language())
}

#[cfg(test)]
mod tests {
    use super::language_op;
    use rdu_spatial::Op;

    #[test]
    fn every_language_op_is_found_by_its_name() {
        for op in Op::language() {
            assert_eq!(language_op(op.name()), Some(op));
        }
        assert!(language_op("matmul").is_none());
        assert!(language_op(Op::Dequant.name()).is_none(), "lowering's own op is not the language's");
    }
}
