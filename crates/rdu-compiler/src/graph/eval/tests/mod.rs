//! Unit tests of the reference interpreter: every op on tiny hand-computed cases.
