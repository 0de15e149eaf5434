//! An append-only journal of calibration runs. Written for chunkline's tests: realistic
//! shape, not a published crate.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Write};

/// One calibration run of one arm.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub arm: String,
    pub offset_mm: f64,
    pub note: Option<String>,
}

/// Errors the journal can report.
#[derive(Debug)]
pub enum JournalError {
    Io(io::Error),
    Unknown { arm: String },
}

impl fmt::Display for JournalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JournalError::Io(error) => write!(f, "journal I/O: {error}"),
            JournalError::Unknown { arm } => write!(f, "no runs for arm {arm} — «inconnu»"),
        }
    }
}

impl From<io::Error> for JournalError {
    fn from(error: io::Error) -> Self {
        JournalError::Io(error)
    }
}

pub mod journal {
    use super::*;

    /// Runs per arm, in the order they were recorded.
    #[derive(Default)]
    pub struct Journal {
        runs: BTreeMap<String, Vec<Entry>>,
    }

    impl Journal {
        pub fn new() -> Self {
            Self::default()
        }

        /// Records a run.
        pub fn record(&mut self, entry: Entry) {
            self.runs.entry(entry.arm.clone()).or_default().push(entry);
        }

        /// Mean offset of an arm's runs.
        pub fn mean_offset(&self, arm: &str) -> Result<f64, JournalError> {
            let runs = self
                .runs
                .get(arm)
                .ok_or_else(|| JournalError::Unknown { arm: arm.to_string() })?;
            let total: f64 = runs.iter().map(|run| run.offset_mm).sum();
            Ok(total / runs.len() as f64)
        }

        /// Writes every run as one line of text.
        pub fn dump<W: Write>(&self, mut out: W) -> Result<(), JournalError> {
            for (arm, runs) in &self.runs {
                for run in runs {
                    let note = run.note.as_deref().unwrap_or("-");
                    writeln!(out, "{arm}\t{:.3}\t{note}", run.offset_mm)?;
                }
            }
            Ok(())
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn mean_of_two_runs() {
            let mut journal = Journal::new();
            for offset_mm in [1.0, 3.0] {
                journal.record(Entry { arm: "a".into(), offset_mm, note: None });
            }
            assert_eq!(journal.mean_offset("a").unwrap(), 2.0);
        }
    }
}
