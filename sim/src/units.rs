//! How numbers are written: thousands separators, rates, milliseconds, seconds, percentages.

use std::time::Duration;

/// `1234567` → `"1,234,567"`.
pub fn group(n: u64) -> String {
    indicatif::HumanCount(n).to_string()
}

/// `template` with each `{}` replaced by the next of `numbers`, grouped.
pub fn fill(template: &str, numbers: &[u64]) -> String {
    let mut parts = template.split("{}");
    let first = parts.next().unwrap_or_default().to_owned();
    parts.zip(numbers).fold(first, |out, (part, n)| out + &group(*n) + part)
}

/// A rate, rounded, with thousands separators and a unit.
pub fn per_sec(rate: f64) -> String {
    format!("{}/s", group(rate.max(0.0).round() as u64))
}

/// Microseconds as milliseconds, to the microsecond; `—` for none.
pub fn ms_from_us(us: impl Into<Option<u64>>) -> String {
    us.into().map_or("—".to_owned(), |us| format!("{}.{:03} ms", group(us / 1_000), us % 1_000))
}

/// A setting in milliseconds: whole ones without decimals.
pub fn ms_setting(d: Duration) -> String {
    let us = d.as_micros() as u64;
    if us % 1_000 == 0 { format!("{} ms", group(us / 1_000)) } else { ms_from_us(us) }
}

pub fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

pub fn percent(f: f64) -> String {
    format!("{:.3} %", f * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        let groups = [group(0), group(999), group(1_234_567), group(u64::MAX)];
        assert_eq!(groups, ["0", "999", "1,234,567", "18,446,744,073,709,551,615"]);
        let ms = [ms_from_us(1_234_567), ms_from_us(7), ms_from_us(None), ms_setting(Duration::from_secs(5))];
        assert_eq!(ms, ["1,234.567 ms", "0.007 ms", "—", "5,000 ms"]);
        let rest = [per_sec(299_999.6), percent(0.001), fill("{} = {} + 1", &[1_000, 999])];
        assert_eq!(rest, ["300,000/s", "0.100 %", "1,000 = 999 + 1"]);
    }
}
