//! The JSON-lines result format shared by every benchmark program.
//!
//! One JSON object per measured point, one object per line. The C peer
//! benchmarks (`bench/c/`) and `raw-bench` print exactly these fields:
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

/// One measured point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Benchmark name: `latency`, `bandwidth`, `bibw`, `msgrate`, `overlap`,
    /// `comb`, `matchlist`.
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
