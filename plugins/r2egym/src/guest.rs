//! The component's exports: each function forwards to the module that owns it.

use sandfleet_plugin_sdk::adapter::TaskAdapter;

use crate::settings::Settings;
use crate::{
    AdapterInfo, CommandOutput, Failure, GradeResult, Graded, NAME, Script, Setting, Task,
    TestTable, grade, log_parser, row, script, summary,
};

struct R2eGym;

impl TaskAdapter for R2eGym {
    fn describe() -> AdapterInfo {
        AdapterInfo {
            name: NAME.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            summary: "R2E-Gym tasks: hidden r2e_tests, pytest summary parsing and the exact \
                      expected_output_json reward of R2E-Gym's runtime"
                .to_owned(),
            settings: Settings::infos(),
        }
    }

    fn load(row: String, settings: Vec<Setting>) -> Result<Task, Failure> {
        row::load(&row, &settings)
    }

    fn prepare(task: Task, solution: Option<String>) -> Result<Script, Failure> {
        script::prepare(&task, solution.as_deref())
    }

    fn grade(
        task: Task,
        solution: Option<String>,
        outputs: Vec<CommandOutput>,
    ) -> Result<GradeResult, Failure> {
        grade::grade(&task, solution.as_deref(), &outputs)
    }

    fn parse_log(
        parser: String,
        log: String,
        settings: Vec<Setting>,
    ) -> Result<TestTable, Failure> {
        Settings::parse(&settings)?;
        log_parser::parse_named(&parser, &log)
    }

    fn summarize(results: Vec<Graded>, settings: Vec<Setting>) -> Result<String, Failure> {
        Settings::parse(&settings)?;
        summary::summarize(&results)
    }
}

sandfleet_plugin_sdk::task_adapter!(R2eGym);
