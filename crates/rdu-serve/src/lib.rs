//! rdu-serve
