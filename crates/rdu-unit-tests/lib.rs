//! Nothing: `rdu-unit-tests` builds rdu-compiler's and rdu-spatial's unit tests (its `[[test]]`
//! targets are those libraries' own sources), and a package needs a target of its own beside them.
