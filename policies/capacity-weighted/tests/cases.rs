//! The policy's case table, run against its component through the test kit.

#[test]
fn every_case_in_the_table_passes() {
    let cases = concat!(env!("CARGO_MANIFEST_DIR"), "/cases.toml");
    sandfleet_testkit::cases::assert_pass(sandfleet_guests::CAPACITY_WEIGHTED, cases);
}
