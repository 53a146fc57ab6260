//! Compiles this crate's reviewed seccomp policies (beside
//! `src/confinement.rs`) to BPF; see `lib/confinement/compile.rs`.

#[path = "../../lib/confinement/compile.rs"]
mod compile;

fn main() {
    compile::policies(&["src/lazaret-mount-router.json"]);
}
