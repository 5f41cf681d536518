//! A pytest `-rA` log of any number of tests, the same bytes as
//! `tools/gen_parity_cases.py`'s `big_log`: every 1000th test fails, every
//! 250th (from the 8th) is skipped, and one stray `ERROR:` line comes first.

use std::io::{self, Write};

/// Writes the log of `lines` tests to `out`.
///
/// # Errors
///
/// When `out` fails.
pub(crate) fn write_big_log(out: &mut impl Write, lines: u64) -> io::Result<()> {
    out.write_all(
        b"+ : '>>>>> Start Test Output'\n+ pytest -rA t.py\nERROR: could not import plugin\n",
    )?;
    for i in 0..lines {
        if i % 1000 == 999 {
            writeln!(out, "FAILED t.py::c[{i}] - assert {i} == 0")?;
        } else if i % 250 == 7 {
            writeln!(out, "SKIPPED t.py::c[{i}]")?;
        } else {
            writeln!(out, "PASSED t.py::c[{i}]")?;
        }
    }
    out.write_all(b"+ : '>>>>> End Test Output'\n")
}

/// The log of `lines` tests as text.
pub(crate) fn big_log(lines: u64) -> String {
    let mut log = Vec::with_capacity(lines as usize * 24);
    write_big_log(&mut log, lines).expect("writing to memory");
    String::from_utf8(log).expect("the log is ASCII")
}
