//! Nothing: `rdu-spatial-tests` is the integration tests of `rdu-spatial` (`tests/`), and a package
//! needs a target of its own beside them.
