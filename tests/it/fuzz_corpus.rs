//! Issue #18: every fuzz target's committed corpus (`fuzz/corpus/<target>/`) replayed
//! through the same harness libFuzzer runs (`weir::fuzz`): no input panics. A crash a
//! fuzzer finds is fixed and its input added here, so it stays fixed.

#[test]
fn every_fuzz_corpus_input_runs_without_a_panic() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    for target in weir::fuzz::TARGETS {
        let dir = root.join(target);
        let mut inputs = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let ok = std::panic::catch_unwind(|| weir::fuzz::run(target, &data));
            assert!(
                matches!(ok, Ok(true)),
                "fuzz target {target} panicked on {}",
                path.display()
            );
            inputs += 1;
        }
        assert!(inputs >= 5, "{target}: only {inputs} corpus inputs");
    }
}
