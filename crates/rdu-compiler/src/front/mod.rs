//! Whole-program front end: TODO
