//! Nothing: `rdu-compiler-tests` is the integration tests of `rdu-compiler` (`tests/`), and a package
//! needs a target of its own beside them.
