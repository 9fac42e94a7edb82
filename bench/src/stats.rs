//! Order statistics of repeated measurements: every benchmark reports the
//! median of its repetitions with their minimum, maximum and mean.

use serde::{Deserialize, Serialize};

/// Median, extremes and mean of a set of values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Median (mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Number of values.
    pub count: usize,
}

impl Summary {
    /// Summarise `values` (sorted in place); `None` for an empty slice.
    pub fn of(values: &mut [f64]) -> Option<Summary> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(|a, b| a.total_cmp(b));
        let n = values.len();
        let median = if n % 2 == 1 {
            values[n / 2]
        } else {
            0.5 * (values[n / 2 - 1] + values[n / 2])
        };
        Some(Summary {
            median,
            min: values[0],
            max: values[n - 1],
            mean: values.iter().sum::<f64>() / n as f64,
            count: n,
        })
    }

    /// The all-zero summary (what the C programs print for a baseline row).
    pub fn zero(count: usize) -> Summary {
        Summary {
            median: 0.0,
            min: 0.0,
            max: 0.0,
            mean: 0.0,
            count,
        }
    }
}

/// Median of `values` (sorted in place); 0 for an empty slice.
pub fn median(values: &mut [f64]) -> f64 {
    Summary::of(values).map_or(0.0, |s| s.median)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_odd_even_empty() {
        let s = Summary::of(&mut [3.0, 1.0, 2.0, 10.0]).expect("non-empty");
        assert_eq!(
            (s.min, s.median, s.max, s.mean, s.count),
            (1.0, 2.5, 10.0, 4.0, 4)
        );
        assert_eq!(median(&mut [5.0, 1.0, 3.0]), 3.0);
        assert!(Summary::of(&mut []).is_none());
        assert_eq!(median(&mut []), 0.0);
    }
}
