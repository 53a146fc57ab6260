//! Detection of the installed runsc (filled in by the runsc-detection work).
