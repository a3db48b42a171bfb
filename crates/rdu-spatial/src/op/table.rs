//! The generator of the op table: from one row per op (see `op/mod.rs`) it makes [`Op`] (the
//! op by name), its [`Facts`], a struct of typed attributes per op (`attrs::*`, read and
//! written by [`OpAttrs`]), [`TypedOp`] (an op with its attributes) and the dispatch to a
//! [`Visitor`]'s `Visit` impl of every op. Nothing here names an op.
//!
//! A row: `Variant = "name" [operand, …] (least, most) .cost(Class) .flag()… { field: Kind
//! [mode], … };`. Its cost class ([`Cost`]) is required: a row without one matches no rule here.
//! The flags are `Facts`' builder methods (`.heavy()`, `.weights(…)`, …).
//! An attribute's `Kind` is an [`AttrValue`]; its mode, if any:
//! - `[optional]`: may be left out (the field is an `Option`);
//! - `[default = v]`: may be left out, then `v` (and it is not written when it is `v`);
//! - `[spatial = v]`: the language requires it; a spatial program may leave it out, then `v`
//!   (which may name an attribute before it);
//! - `[literal]`: the positional literal after the first operand (`reshape`'s shape), the
//!   first field if any.
//!
//! [`Op`]: super::Op
//! [`Facts`]: super::Facts
//! [`Cost`]: super::Cost
//! [`TypedOp`]: super::TypedOp
//! [`AttrValue`]: super::AttrValue
//! [`OpAttrs`]: super::OpAttrs
//! [`Visitor`]: super::Visitor

macro_rules! op_table {
    // One field's type in the attributes struct.
    (@ty $t:ty; optional) => { Option<<$t as AttrValue>::Value> };
    (@ty $t:ty $(; $($mode:tt)*)?) => { <$t as AttrValue>::Value };
    // Whether a field is the positional literal.
    (@is_literal literal) => { true };
    (@is_literal $($mode:tt)*) => { false };
    // One field read as the language reads it (an `Option`: `None` after a fault).
    (@language $g:ident, $faults:ident, $f:ident, $t:ty; optional) => { $g.optional::<$t>(key::$f, $faults) };
    (@language $g:ident, $faults:ident, $f:ident, $t:ty; default = $d:expr) => {
        $g.optional::<$t>(key::$f, $faults).map(|v| v.unwrap_or($d))
    };
    (@language $g:ident, $faults:ident, $f:ident, $t:ty; literal) => { $g.literal::<$t>(key::$f, $faults) };
    (@language $g:ident, $faults:ident, $f:ident, $t:ty $(; spatial = $d:expr)?) => { $g.required::<$t>(key::$f, $faults) };
    // One field read as a spatial program's simulator reads it (the first fault returns).
    (@spatial $g:ident, $f:ident, $t:ty; optional) => { $g.first::<$t>(key::$f)? };
    (@spatial $g:ident, $f:ident, $t:ty; default = $d:expr) => { $g.first::<$t>(key::$f)?.unwrap_or($d) };
    (@spatial $g:ident, $f:ident, $t:ty; spatial = $d:expr) => { $g.first::<$t>(key::$f)?.unwrap_or($d) };
    (@spatial $g:ident, $f:ident, $t:ty; literal) => { $g.literal_first::<$t>(key::$f)? };
    (@spatial $g:ident, $f:ident, $t:ty) => { $g.first::<$t>(key::$f)?.ok_or(AttrFault::Missing(key::$f))? };
    // One field written as `key=value` (or not: an absent optional one, the literal, and in
    // program text a default).
    (@value $shown:ident, $v:expr, $t:ty) => {
        if $shown { <$t as AttrValue>::show($v) } else { <$t as AttrValue>::text($v) }
    };
    (@text $out:ident, $shown:ident, $f:ident, $v:expr, $t:ty; optional) => {
        if let Some(v) = $v {
            $out.push((key::$f, op_table!(@value $shown, v, $t)));
        }
    };
    (@text $out:ident, $shown:ident, $f:ident, $v:expr, $t:ty; default = $d:expr) => {
        if $shown || *$v != $d {
            $out.push((key::$f, op_table!(@value $shown, $v, $t)));
        }
    };
    (@text $out:ident, $shown:ident, $f:ident, $v:expr, $t:ty; literal) => {};
    (@text $out:ident, $shown:ident, $f:ident, $v:expr, $t:ty $(; spatial = $d:expr)?) => {
        $out.push((key::$f, op_table!(@value $shown, $v, $t)))
    };
    (@literal_text $f:ident, $v:expr, $t:ty; literal) => { Some((key::$f, <$t as AttrValue>::text($v))) };
    (@literal_text $f:ident, $v:expr, $t:ty $(; $($mode:tt)*)?) => { None };

    ($(
        $(#[doc = $doc:literal])*
        $v:ident = $name:literal [$($role:ident),*] ($least:expr, $most:expr)
            .cost($cost:ident $(($($carg:expr),*))?)
            $(. $flag:ident ($($farg:expr),*))*
            $({ $($f:ident : $t:ty $([$($mode:tt)*])?),* $(,)? })?;
    )*) => {
        /// An op, by name; its attributes live beside it (`KernelOp::attrs` as written, or
        /// typed in [`TypedOp`]).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Op {
            $($(#[doc = $doc])* $v,)*
        }

        impl Op {
            /// Every op, in table order.
            pub const ALL: [Op; [$(stringify!($v)),*].len()] = [$(Op::$v),*];

            /// The table row of the op.
            pub const fn facts(self) -> Facts {
                match self {
                    $(Op::$v => Facts::new(
                        $name,
                        ($least, $most),
                        &[$(stringify!($role)),*],
                        &[$($(key::$f),*)?],
                        false $($(|| op_table!(@is_literal $($($mode)*)?))*)?,
                        Cost::$cost $(($($carg),*))?,
                    )$(.$flag($($farg),*))*,)*
                }
            }

            /// Reads `given` as a spatial program's attributes of this op (see
            /// [`OpAttrs::spatial`]) and hands them to `v`'s kernel of the op.
            pub fn visit_spatial<L, V>(self, given: &Given<'_, L>, v: V) -> Result<V::Out, AttrFault>
            where
                L: AttrLit + ?Sized,
                V: VisitAll,
            {
                match self {
                    $(Op::$v => Ok(v.visit(&<attrs::$v as OpAttrs>::spatial(given)?)),)*
                }
            }
        }

        /// Every op's attributes, typed: one struct per op, named as the op.
        pub mod attrs {
            use super::*;
            $(
                $(#[doc = $doc])*
                #[derive(Clone, Debug, PartialEq)]
                pub struct $v {
                    $($(pub $f: op_table!(@ty $t $(; $($mode)*)?),)*)?
                }

                impl OpAttrs for $v {
                    const OP: Op = Op::$v;

                    #[allow(unused_variables)]
                    fn language<L: AttrLit + ?Sized>(given: &Given<'_, L>, faults: &mut Vec<AttrFault>) -> Option<Self> {
                        $($(let $f = op_table!(@language given, faults, $f, $t $(; $($mode)*)?);)*)?
                        #[allow(unreachable_patterns)]
                        match ($($($f,)*)?) {
                            ($($(Some($f),)*)?) => Some($v { $($($f),*)? }),
                            _ => None,
                        }
                    }

                    #[allow(unused_variables)]
                    fn spatial<L: AttrLit + ?Sized>(given: &Given<'_, L>) -> Result<Self, AttrFault> {
                        $($(let $f = op_table!(@spatial given, $f, $t $(; $($mode)*)?);)*)?
                        Ok($v { $($($f),*)? })
                    }

                    #[allow(unused_variables)]
                    fn texts(&self, shown: bool) -> Vec<(Key, String)> {
                        #[allow(unused_mut)]
                        let mut out = Vec::new();
                        $($(op_table!(@text out, shown, $f, &self.$f, $t $(; $($mode)*)?);)*)?
                        out
                    }

                    fn literal_text(&self) -> Option<(Key, String)> {
                        None $($(.or(op_table!(@literal_text $f, &self.$f, $t $(; $($mode)*)?)))*)?
                    }
                }

                impl From<$v> for TypedOp {
                    fn from(a: $v) -> TypedOp {
                        let $v { $($($f),*)? } = a;
                        TypedOp::$v $({ $($f),* })?
                    }
                }
            )*
        }

        /// An op with its typed attributes: the compiler's `graph::Op`, and what an author
        /// writes. Operands are not held here.
        #[derive(Clone, Debug, PartialEq)]
        pub enum TypedOp {
            $($(#[doc = $doc])* $v $({ $($f: op_table!(@ty $t $(; $($mode)*)?)),* })?,)*
        }

        /// A [`Visitor`] with a kernel for every op.
        pub trait VisitAll: Visitor $(+ Visit<attrs::$v>)* {}
        impl<T: Visitor $(+ Visit<attrs::$v>)*> VisitAll for T {}

        impl TypedOp {
            /// The op's row of the table.
            pub const fn kind(&self) -> Op {
                match self {
                    $(TypedOp::$v { .. } => Op::$v,)*
                }
            }

            /// Hands the attributes to `v`'s kernel of the op.
            #[allow(clippy::clone_on_copy)]
            pub fn visit<V: VisitAll>(&self, v: V) -> V::Out {
                match self {
                    $(TypedOp::$v $({ $($f),* })? => v.visit(&attrs::$v { $($($f: $f.clone()),*)? }),)*
                }
            }

            /// Reads `given` as the program language reads the attributes (and literal) of
            /// `op`: every fault, the keys checked against the table's.
            pub fn language<L: AttrLit + ?Sized>(op: Op, given: &Given<'_, L>) -> Result<TypedOp, Vec<AttrFault>> {
                let mut faults = Vec::new();
                let typed = match op {
                    $(Op::$v => <attrs::$v as OpAttrs>::language(given, &mut faults).map(TypedOp::from),)*
                };
                given.check_keys(op.attrs(), true, &mut faults);
                match typed {
                    Some(typed) if faults.is_empty() => Ok(typed),
                    _ => Err(faults),
                }
            }
        }
    };
}
