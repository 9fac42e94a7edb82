//! The JSON-lines result format shared by every benchmark program.
//!
//! One JSON object per measured point, one object per line. The C peer
//! benchmarks (`bench/c/`) and `ptl-bench` print exactly these fields:
//!
//! ```json
//! {"bench":"latency","impl":"openmpi-tcp","size":8,"iters":10000,"value":3.45,
//!  "unit":"us","reps":5,"min":3.41,"max":3.52,"mean":3.46}
//! ```
//!
//! `value` is the median over `reps` repetitions; each repetition is one
//! averaged block of `iters` iterations. Benchmark-specific fields (`window`,
//! `posted`, `compute_factor`, ...) are kept in [`Record::extra`].

use serde::{Deserialize, Serialize};

use crate::stats::Summary;

/// One measured point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Benchmark name: `latency`, `bandwidth`, `bibw`, `msgrate`, `overlap`,
    /// `comb`, `matchlist`, `allreduce`, `bcast`.
    pub bench: String,
    /// Implementation / transport label, e.g. `openmpi-tcp`, `mpich`, `raw-tcp-busy`.
    #[serde(rename = "impl")]
    pub implementation: String,
    /// Message size in bytes.
    pub size: u64,
    /// Measured iterations per repetition.
    pub iters: u64,
    /// Median over the repetitions, in `unit`.
    pub value: f64,
    /// Unit of `value`, `min`, `max`, `mean` (`us`, `MB/s` with 1 MB = 10^6 B, `msg/s`, `%`).
    pub unit: String,
    /// Number of repetitions.
    pub reps: u32,
    /// Smallest repetition value.
    pub min: f64,
    /// Largest repetition value.
    pub max: f64,
    /// Mean of the repetition values.
    pub mean: f64,
    /// Benchmark-specific fields.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Record {
    /// A record whose `value`, `min`, `max` and `mean` come from `summary`.
    pub fn new(
        bench: &str,
        implementation: &str,
        size: u64,
        iters: u64,
        unit: &str,
        summary: Summary,
    ) -> Record {
        Record {
            bench: bench.to_string(),
            implementation: implementation.to_string(),
            size,
            iters,
            value: summary.median,
            unit: unit.to_string(),
            reps: summary.count as u32,
            min: summary.min,
            max: summary.max,
            mean: summary.mean,
            extra: serde_json::Map::new(),
        }
    }

    /// A record of benchmark `bench` whose value is the median of the
    /// repetitions' `values` (sorted in place); an error if there are none.
    pub fn of_values(
        bench: crate::params::Bench,
        implementation: &str,
        size: usize,
        iters: usize,
        values: &mut [f64],
    ) -> crate::Result<Record> {
        let s = Summary::of(values)
            .ok_or_else(|| crate::BenchError::Invalid("no repetitions".into()))?;
        Ok(Record::new(
            bench.name(),
            implementation,
            size as u64,
            iters as u64,
            bench.unit(),
            s,
        ))
    }

    /// A record of one measured value (10 iterations, unit `us`): synthetic
    /// data for tests and examples.
    pub fn point(bench: &str, implementation: &str, size: u64, value: f64) -> Record {
        let s = Summary {
            median: value,
            min: value,
            max: value,
            mean: value,
            count: 1,
        };
        Record::new(bench, implementation, size, 10, "us", s)
    }

    /// Add a benchmark-specific field.
    pub fn with(mut self, key: &str, value: impl Into<serde_json::Value>) -> Record {
        self.extra.insert(key.to_string(), value.into());
        self
    }

    /// A numeric benchmark-specific field.
    pub fn extra_f64(&self, key: &str) -> Option<f64> {
        self.extra.get(key).and_then(|v| v.as_f64())
    }

    /// A string benchmark-specific field.
    pub fn extra_str(&self, key: &str) -> Option<&str> {
        self.extra.get(key).and_then(|v| v.as_str())
    }

    /// Check that the fields are sane: names set, finite values, `min <=
    /// value <= max`, at least one repetition and iteration. An error names
    /// the first problem.
    pub fn check(&self) -> Result<(), String> {
        if self.bench.is_empty() || self.implementation.is_empty() || self.unit.is_empty() {
            return Err(format!("empty name field in {}", self.to_line()));
        }
        if self.reps == 0 || self.iters == 0 {
            return Err(format!(
                "no repetitions or iterations in {}",
                self.to_line()
            ));
        }
        let vals = [self.value, self.min, self.max, self.mean];
        if vals.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return Err(format!(
                "negative or non-finite value in {}",
                self.to_line()
            ));
        }
        let eps = 1e-6 * self.max.abs().max(1.0);
        if self.min > self.value + eps || self.value > self.max + eps {
            return Err(format!("value outside [min, max] in {}", self.to_line()));
        }
        Ok(())
    }

    /// Parse one output line.
    pub fn parse_line(line: &str) -> serde_json::Result<Record> {
        serde_json::from_str(line)
    }

    /// Serialise as one line (no trailing newline).
    pub fn to_line(&self) -> String {
        // Serialising a struct of strings, numbers and a JSON map cannot fail
        // except for non-finite floats, which serde_json writes as `null`.
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_c_output_line() {
        let line = r#"{"bench":"overlap","impl":"mpich","size":1024,"iters":50,"value":64.2,"unit":"%","reps":3,"min":61.5,"max":64.3,"mean":63.3,"compute_factor":1.000,"wait_us":0.332}"#;
        let r = Record::parse_line(line).expect("valid line");
        assert_eq!(r.bench, "overlap");
        assert_eq!(r.implementation, "mpich");
        assert_eq!(r.size, 1024);
        assert_eq!(r.extra.get("wait_us").and_then(|v| v.as_f64()), Some(0.332));
        let again = Record::parse_line(&r.to_line()).expect("round trip");
        assert_eq!(
            (&again.bench, again.size, &again.extra),
            (&r.bench, r.size, &r.extra)
        );
    }
}
