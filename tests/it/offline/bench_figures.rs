//! bench/README.md shows the figures of the newest result files in bench/results: the table is
//! generated (`ruleop-bench figures`, tests/kit/src/figures.rs), never edited by hand.

use crate::support::figures;

#[test]
fn the_bench_readme_shows_the_newest_result_files() {
    let (readme, results) = figures::readme_and_results();
    let text = std::fs::read_to_string(&readme).expect("bench/README.md");
    let fresh = figures::spliced(&text, &results).expect("the figures markers in bench/README.md");
    assert!(
        text == fresh,
        "bench/README.md's latest figures are not those of bench/results: run `cargo run -p ruleop-bench -- figures`"
    );
}
