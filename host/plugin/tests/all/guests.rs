//! Every test guest has a test that loads it; a guest added without one
//! fails to compile here.

use sandfleet_plugin::Kind;

use crate::registry;

macro_rules! assert_guest_is_tested {
    ($name:ident, $path:path) => {
        #[allow(non_upper_case_globals, reason = "one marker per guest")]
        const $name: &str = $path;
    };
}
sandfleet_guests::foreach_test_guest!(assert_guest_is_tested);

#[test]
fn each_test_guest_is_what_its_tests_assume() {
    let host = registry().host().clone();
    for (path, expected) in [
        (fewest_live, Ok(Kind::Placement)),
        (misbehave, Ok(Kind::Placement)),
        (pick_last, Ok(Kind::Placement)),
        (trap_third, Ok(Kind::Placement)),
        (faulty_reset, Ok(Kind::Reset)),
        (future_contract, Err("99.0.0")),
    ] {
        let bytes = std::fs::read(path).unwrap();
        let identified = host
            .compile("guest", &bytes, sandfleet_plugin::Source::Memory)
            .map(|compiled| compiled.contract.kind)
            .map_err(|e| e.to_string());
        match (identified, expected) {
            (Ok(kind), Ok(want)) => assert_eq!(kind, want, "{path}"),
            (Err(error), Err(want)) => assert!(error.contains(want), "{path}: {error}"),
            (got, want) => panic!("{path}: got {got:?}, expected {want:?}"),
        }
    }
}
